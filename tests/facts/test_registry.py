"""The facts registry covers every probe, and every row's docs page, view and code exist.

A probe added without its row, a docs page that does not name its section, a view name in the
help that no renderer answers (`--show nvlink` used to exit 70): each fails here, not in a run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.cli.main import build_parser
from orchestrator.facts import registry
from orchestrator.facts.textparse.detect import PARSED_KINDS
from orchestrator.present.terminal import sections
from orchestrator.verdict.result import JudgedHost
from tests.verdict.test_verdict_demo import recorded_facts

ROOT = Path(__file__).resolve().parents[2]
DEMO_HOSTS = ["dgx-h100-04", "dgx1-v100-01", "rtx4090-01", "vm-a100-01"]


def _probe_files() -> list[str]:
    # _prelude.py, _nvml.py, _bundle.py are helpers shipped inside other probes, not probes.
    return sorted(p.stem for p in (ROOT / "probes").glob("*.py") if not p.name.startswith("_"))


def test_every_probe_file_has_one_row() -> None:
    rows = [r.probe for r in registry.PROBES]
    assert sorted(rows) == _probe_files()
    assert len(set(rows)) == len(rows)


def test_sections_are_unique_and_merged_ones_stand_for_a_probe() -> None:
    names = [r.section for r in registry.SECTIONS]
    assert len(set(names)) == len(names)
    for row in registry.MERGED:
        assert registry.by_probe(row.probe) is not None, row


@pytest.mark.parametrize("row", registry.SECTIONS, ids=lambda r: r.section)
def test_docs_page_exists_and_names_its_section(row: registry.Section) -> None:
    page = ROOT / row.docs
    assert page.is_file(), row.docs
    assert f'facts["{row.section}"]' in page.read_text(), f"{row.docs} does not name facts[{row.section!r}]"


@pytest.mark.parametrize("row", registry.SECTIONS, ids=lambda r: r.section)
def test_code_named_by_the_row_resolves(row: registry.Section) -> None:
    names = [row.renderer] if row.renderer else []
    names.append(row.normalizer if isinstance(row, registry.ProbeRow) else row.merge)  # type: ignore[attr-defined]
    for name in names:
        assert callable(registry.resolve(name)), name


def test_text_kinds_are_parsed_kinds_and_every_parsed_kind_fills_a_section() -> None:
    used = {k for r in registry.SECTIONS for k in r.text_kinds}
    assert used <= set(PARSED_KINDS)
    assert set(PARSED_KINDS) <= used


@pytest.mark.parametrize("host", DEMO_HOSTS)
@pytest.mark.parametrize("view", registry.view_names())
def test_every_view_renders_a_demo_host(view: str, host: str) -> None:
    facts = recorded_facts(host)
    text = sections.render(view, JudgedHost.from_record({"name": host, "facts": facts}))
    section = registry.views()[view].section
    assert text or not facts.get(section), f"{view} rendered nothing for {host}"
    assert "None" not in text


def _show_help(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    show = next(a for a in sub.choices[command]._actions if a.dest == "show")  # type: ignore[attr-defined]
    return str(show.help)


@pytest.mark.parametrize("command", ["run", "show", "import"])
def test_every_view_listed_in_help_exists(command: str) -> None:
    listed = re.sub(r"\s*\(.*\)$", "", _show_help(command).split(":", 1)[1]).split(",")
    names = [x.strip() for x in listed]
    assert names, command
    for name in names:
        assert name in sections.VIEWS, f"probe {command} --help lists view {name!r} that does not exist"
    if command != "import":
        assert names == registry.view_names()


@pytest.mark.parametrize("command", [["run"], ["show"], ["import", "x.txt"]])
def test_unknown_view_is_a_usage_error_naming_the_known_ones(command: list[str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*command, "--show", "gpus,bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown view 'bogus'" in err
    assert "known: " + ", ".join(registry.view_names()) in err


def test_known_views_parse() -> None:
    args = build_parser().parse_args(["run", "--show", " topo, nvlink ,p2p"])
    assert args.show == ["topo", "nvlink", "p2p"]
