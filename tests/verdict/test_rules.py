"""A finding rule is one declaration (verdict/rule.py, verdict/rules/<prefix>.py): its id is spelled
in exactly one module of orchestrator/, the module its prefix names, and docs/findings.md's rows
are rendered from the declarations.

`FLEETPROBE_REGEN_DOCS=1 pytest tests/verdict/test_rules.py` rewrites the rows from the
declarations (a row's place in the page stays where it is)."""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections import defaultdict
from pathlib import Path

import pytest

from orchestrator.verdict import checks, rules
from orchestrator.verdict.actions import ACTIONS, HOST_WIDE, HOST_WIDE_AT_TIMES
from orchestrator.verdict.rule import Rule

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "findings.md"
PACKAGE = ROOT / "orchestrator"

# Another vocabulary that happens to share a spelling with a finding id: the drift change kinds
# (a GPU gone between two runs is the change "gpu.lost", a GPU NVML answers GPU_IS_LOST for is the
# finding).  Named here, module by module, so no other module can hide behind them.
OTHER_VOCABULARIES: dict[str, set[str]] = {
    "gpu.lost": {"orchestrator/verdict/drift.py", "orchestrator/present/terminal/drift.py"},
}


def _string_literals(source: str) -> set[str]:
    """The values of a module's plain string literals (not comments, not f-strings' parts)."""
    out: set[str] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.STRING and not re.match(r"^[a-zA-Z]*[fF]", tok.string):
            value = ast.literal_eval(tok.string)
            if isinstance(value, str):
                out.add(value)
    return out


def id_homes(root: Path, ids: set[str]) -> dict[str, set[str]]:
    """id -> the modules under `root` that spell it as a string."""
    homes: dict[str, set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        for value in _string_literals(path.read_text()) & ids:
            homes[value].add(path.relative_to(root.parent).as_posix())
    return homes


def misplaced(homes: dict[str, set[str]]) -> dict[str, list[str]]:
    """ids spelled anywhere but in the one module of verdict/rules/ their prefix names."""
    out = {}
    for fid in sorted(rules.BY_ID):
        home = f"orchestrator/verdict/rules/{fid.split('.')[0]}.py"
        elsewhere = homes.get(fid, set()) - {home} - OTHER_VOCABULARIES.get(fid, set())
        if elsewhere or home not in homes.get(fid, set()):
            out[fid] = sorted(homes.get(fid, set()))
    return out


def test_every_rule_is_declared_once_in_the_module_its_prefix_names() -> None:
    assert len({r.id for r in rules.ALL}) == len(rules.ALL)
    assert set(rules.BY_ID) == set(checks.FINDING_IDS)  # declared and raised by some check area
    assert len(checks.FINDING_IDS) == len(set(checks.FINDING_IDS))  # by exactly one area
    for rule in rules.ALL:
        assert rules.declared_in(rule) == f"orchestrator.verdict.rules.{rule.id.split('.')[0]}", rule.id


def test_every_id_is_spelled_in_exactly_one_module_of_orchestrator() -> None:
    homes = id_homes(PACKAGE, set(rules.BY_ID))
    assert misplaced(homes) == {}
    assert all(len(homes[fid] - OTHER_VOCABULARIES.get(fid, set())) == 1 for fid in rules.BY_ID)


def test_the_census_finds_an_id_spelled_in_a_second_module(tmp_path: Path) -> None:
    tree = tmp_path / "orchestrator"
    (tree / "verdict" / "rules").mkdir(parents=True)
    (tree / "present").mkdir()
    (tree / "verdict" / "rules" / "gpu.py").write_text('LOST = "gpu.lost"\nECC = "gpu.ecc.uncorrectable"\n')
    (tree / "present" / "terminal.py").write_text(
        '# "gpu.xid" in a comment is prose\nx = f"gpu.ecc.uncorrectable {1}"\nif f.id == "gpu.lost":\n    pass\n')
    found = misplaced(id_homes(tree, {"gpu.lost", "gpu.ecc.uncorrectable", "gpu.xid"}))
    assert found["gpu.lost"] == ["orchestrator/present/terminal.py", "orchestrator/verdict/rules/gpu.py"]
    assert "gpu.ecc.uncorrectable" not in found  # an f-string's text is not a literal id
    assert found["gpu.xid"] == []  # declared nowhere: also a failure


def _rows(section: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z0-9_.]+)` \|.*$", section, re.MULTILINE)}


def _sections(text: str) -> tuple[str, str]:
    catalog = text.split("## Action classes", 1)[0]
    actions = text.split("## Action classes", 1)[1].split("\n## ", 1)[0]
    return catalog, actions


def _regenerate(text: str) -> str:
    catalog, actions = _sections(text)
    rendered = {"catalog": {r.id: r.catalog_row() for r in rules.ALL}, "actions": {r.id: r.action_row() for r in rules.ALL}}
    new_catalog = re.sub(r"^\| `([a-z0-9_.]+)` \|.*$", lambda m: rendered["catalog"].get(m.group(1), m.group(0)),
                         catalog, flags=re.MULTILINE)
    new_actions = re.sub(r"^\| `([a-z0-9_.]+)` \|.*$", lambda m: rendered["actions"].get(m.group(1), m.group(0)),
                         actions, flags=re.MULTILINE)
    return text.replace(catalog, new_catalog, 1).replace(actions, new_actions, 1)


def test_the_catalog_and_action_rows_are_the_declarations_rendered() -> None:
    text = DOC.read_text()
    if os.environ.get("FLEETPROBE_REGEN_DOCS") == "1":
        DOC.write_text(_regenerate(text))
        text = DOC.read_text()
    catalog, actions = _sections(text)
    catalog_rows = {k: v for k, v in _rows(catalog).items() if k in rules.BY_ID or len(v.split(" | ")) >= 5}
    assert set(catalog_rows) == set(rules.BY_ID)
    assert set(_rows(actions)) == set(rules.BY_ID)
    stale = [fid for fid, rule in rules.BY_ID.items()
             if catalog_rows[fid] != rule.catalog_row() or _rows(actions)[fid] != rule.action_row()]
    assert stale == [], "docs/findings.md differs from the declarations: FLEETPROBE_REGEN_DOCS=1 rewrites the rows"


@pytest.mark.parametrize("change", ["means", "action"])
def test_a_declaration_changed_makes_its_docs_row_stale(change: str) -> None:
    from dataclasses import replace

    from orchestrator.verdict.findings import Action

    rule = rules.gpu.LOST
    other = (replace(rule, doc=replace(rule.doc, means="something else")) if change == "means"
             else replace(rule, action=Action.RMA))
    catalog, actions = _sections(DOC.read_text())
    assert (_rows(catalog)["gpu.lost"], _rows(actions)["gpu.lost"]) != (other.catalog_row(), other.action_row())


def test_the_tables_other_layers_read_are_the_declarations() -> None:
    assert dict(ACTIONS) == rules.BY_ID
    assert {r.id for r in rules.ALL if r.host_wide} == HOST_WIDE
    assert set(HOST_WIDE_AT_TIMES) == {r.id for r in rules.ALL if r.host_wide_when}
    assert {r.id for r in rules.ALL if r.fleet} == checks.FLEET_FINDING_IDS
    every_cause = {(c.root, c.consequence) for c in checks.CAUSES}
    declared = {(c.root, c.consequence) for c in rules.causes()}
    assert declared <= every_cause
    # every cause names declared rules on both ends
    assert {fid for pair in every_cause for fid in pair} <= set(rules.BY_ID)


def test_a_rule_carries_everything_about_its_id() -> None:
    for rule in rules.ALL:
        assert isinstance(rule, Rule)
        assert rule.because.strip() and rule.doc.means.strip() and rule.doc.todo.strip(), rule.id
        assert re.search(r"\b(fail|warn|info)\b", rule.doc.severity), rule.id
        assert re.search(r"\b(fault|platform_limitation|unknown)\b", rule.doc.kind), rule.id
        assert not (rule.host_wide and rule.host_wide_when), rule.id
