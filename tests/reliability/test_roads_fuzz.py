"""Fuzzing the roads in that are not SSH, as tests/reliability/test_hostile.py fuzzes the envelope:
type and structure mutations of real inputs, truncations and encodings, with fixed seeds.

* the text-import parsers, over every published evidence fixture: whatever is pasted gives an
  import (facts of their declared types, errors and notes), never an exception;
* the stored-run readers, over a real demo run: a damaged fleet.json, findings.json or run.json
  is read into a FleetResult that every surface renders (terminal, -q, views, JUnit, Prometheus,
  CSV/JSON/YAML, the Ansible inventory, the drain list, the report, drift), with strict JSON out.
"""

from __future__ import annotations

import copy
import json
import math
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.stored import load_result
from orchestrator.facts.conform import conform_facts
from orchestrator.facts.textparse.importer import import_texts
from orchestrator.files.jsontext import dumps
from orchestrator.present.outputs.ansible_inventory import render_inventory
from orchestrator.present.outputs.junit import render_junit
from orchestrator.present.outputs.prometheus import render_prometheus
from orchestrator.present.outputs.slurm_drain import render_drain
from orchestrator.present.outputs.tabular import render_findings, render_hosts
from orchestrator.present.report import render_report
from orchestrator.present.terminal.drift import render_diff
from orchestrator.present.terminal.findings import findings_table, hosts_view, notes_block
from orchestrator.present.terminal.hosts import hosts_table, recap
from orchestrator.present.terminal.judged import not_judged_block
from orchestrator.present.terminal.quiet import quiet_text
from orchestrator.present.terminal.sections import render_views
from orchestrator.store.atomic import iter_json
from orchestrator.store.compact import read_plain
from orchestrator.store.history import summarize_run
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict.drift import diff_fleets
from orchestrator.verdict.result import FleetResult
from tests.support.hostile import run_cli

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted(p for d in ("text", "evidence") for p in (ROOT / "tests" / "fixtures" / d).iterdir()
                  if p.is_file() and p.suffix != ".md")
VIEWS = ["pcie", "gpus", "topo", "nvlink", "p2p", "nccl", "kmsg", "nic"]

# ------------------------------------------------------------------------------ text evidence

ODD_NUMBERS = ["1e400", "-1e400", "nan", "NaN", "inf", "-0", "99999999999999999999999999", "1e308", "0x1F", "-5"]


def _text_mutations(data: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    text = data.decode("utf-8", "replace")
    lines = text.splitlines(keepends=True)
    yield "truncated", data[: rng.randrange(1, max(2, len(data)))]
    yield "utf-16", text.encode("utf-16")
    yield "latin-1", text.encode("latin-1", "replace")
    yield "bytes flipped", bytes(b ^ 0xFF if rng.random() < 0.01 else b for b in data)
    yield "nul and escapes", text.replace(" ", "\x00", 3).replace("\n", "\x1b[2J\n", 2).encode()
    shuffled = lines[:]
    rng.shuffle(shuffled)
    yield "lines shuffled", "".join(shuffled).encode()
    doubled = [ln for ln in lines for _ in range(1 + (rng.random() < 0.2))]
    yield "lines doubled", "".join(doubled).encode()
    yield "lines dropped", "".join(ln for ln in lines if rng.random() > 0.3).encode()
    odd = "".join(_odd_numbers(ln, rng) for ln in lines)
    yield "odd numbers", odd.encode()
    yield "cells blanked", "".join(ln.replace(ln.split()[-1], "", 1) if ln.split() else ln for ln in lines).encode()


def _odd_numbers(line: str, rng: random.Random) -> str:
    out = []
    for tok in line.split(" "):
        stripped = tok.strip()
        if stripped.replace(".", "", 1).isdigit() and rng.random() < 0.3:
            tok = tok.replace(stripped, rng.choice(ODD_NUMBERS))
        out.append(tok)
    return " ".join(out)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_every_mutation_of_a_published_output_imports_without_an_exception(fixture: Path) -> None:
    rng = random.Random(fixture.name)
    for what, data in _text_mutations(fixture.read_bytes(), rng):
        host = import_texts([(fixture.name, data)])
        _, problems = conform_facts(host.facts)
        assert problems == [], (what, problems)
        assert _finite(host.facts), what
        dumps(host.to_dict())  # the evidence record is written to raw/: JSON whatever was pasted


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def test_a_mutated_import_is_judged_by_the_real_cli(tmp_path: Path) -> None:
    # the in-process cases above prove the parsers; this proves the judge and every surface of
    # `probe import` take what they make (one mutated file of each kind, through the CLI)
    rng = random.Random(7)
    for fixture in FIXTURES[::3]:
        what, data = rng.choice(list(_text_mutations(fixture.read_bytes(), rng)))
        path = tmp_path / f"{fixture.stem}.txt"
        path.write_bytes(data)
        got = run_cli(["import", str(path), "--results", str(tmp_path / "r"), "--format", "json",
                       "--show", ",".join(VIEWS)], timeout=120)
        # 3: a mutation cut the file above its first fact (half-readable, docs/text-evidence.md)
        assert got.code in (0, 1, 2, 3, 4, 5), (fixture.name, what, got.stderr[-2000:])
        assert "Traceback" not in got.stderr and "internal error" not in got.stderr, (fixture.name, what)


# ------------------------------------------------------------------------------ stored runs


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("fuzz-demo")
    got = run_cli(["run", "--results", str(results), "--limit", "dgx-h100-0[1-4],dgx-a100-0[1-2],offline*,ws-a6000-01", "-q"],
                  timeout=300)
    assert got.code in (1, 4, 5), got.stderr
    return next(p for p in results.iterdir() if p.is_dir())


ODD_VALUES: list[Any] = [None, 0, -1, 7, 1e308, "", "x" * 300, "\u202e\n\x1b[31m", [], [1, None, "a"], {},
                         {"a": {"b": []}}, True, float("nan"), float("inf")]


def _paths(value: Any, here: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield here
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*here, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:6]):
            yield from _paths(v, (*here, i))


def _mutate(doc: Any, rng: random.Random, n: int) -> Any:
    doc = copy.deepcopy(doc)
    paths = [p for p in _paths(doc) if p]
    for path in rng.sample(paths, min(n, len(paths))):
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if rng.random() < 0.15 and isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced a container on the way
    return doc


def _every_surface(fleet: FleetResult, before: FleetResult) -> None:
    for width in (None, 80):
        hosts_table(fleet, width)
        recap(fleet, width)
        hosts_view(fleet, width)
        notes_block(fleet, width)
        not_judged_block(fleet, width)
        quiet_text(fleet, width)
        findings_table(fleet.findings, width=width)
        render_views(fleet, VIEWS, width)
    render_junit(fleet)
    render_prometheus(fleet)
    render_drain(fleet)
    render_inventory(fleet)
    for fmt in ("csv", "json", "yaml"):
        render_hosts(fleet, fmt)
        render_findings(fleet, fmt)
    render_diff(diff_fleets(before, fleet))
    render_diff(diff_fleets(fleet, before))
    text = "".join(iter_json(fleet.to_document()))
    json.loads(text, parse_constant=lambda c: pytest.fail(f"fleet.json would hold {c}"))


@pytest.mark.parametrize("seed", range(40))
def test_a_mutated_stored_fleet_is_read_and_rendered_everywhere(demo_run: Path, seed: int) -> None:
    rng = random.Random(seed)
    doc = dict(read_plain(demo_run / "fleet.json"))
    before = FleetResult.from_document(doc)
    mutated = _mutate(doc, rng, 1 + seed % 12)
    fleet = FleetResult.from_document(mutated)
    _every_surface(fleet, before)
    if seed % 10 == 0:  # the report is the slowest surface: every tenth mutation
        render_report(fleet, diff_fleets(before, fleet), max_pictures=4)


@pytest.mark.parametrize("seed", range(20))
def test_a_mutated_run_json_is_read_for_listing_and_headers(demo_run: Path, tmp_path: Path, seed: int) -> None:
    rng = random.Random(1000 + seed)
    run = Path(shutil.copytree(demo_run, tmp_path / demo_run.name))
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(dumps(_mutate(meta, rng, 1 + seed % 6)))
    summary = summarize_run(run)
    assert summary.id == run.name
    header = RunMeta.from_dict(json.loads((run / "run.json").read_text())).header()
    assert isinstance(header, dict)
    fleet = load_result(run)
    _every_surface(fleet, fleet)


@pytest.mark.parametrize("seed", range(6))
def test_a_mutated_stored_run_through_the_cli(demo_run: Path, tmp_path: Path, seed: int) -> None:
    rng = random.Random(2000 + seed)
    run = Path(shutil.copytree(demo_run, tmp_path / demo_run.name))
    doc = dict(read_plain(run / "fleet.json"))
    (run / "fleet.index.json").unlink(missing_ok=True)
    (run / "fleet.json").write_text(json.dumps(_mutate(doc, rng, 8)))
    for args in (["show", str(run), "--show", ",".join(VIEWS)], ["show", str(run), "--format", "csv"],
                 ["report", str(run), "-o", str(tmp_path / "r.html")], ["rejudge", str(run)],
                 ["merge", str(run)]):
        got = run_cli([*args, *(["--results", str(tmp_path / "r")] if args[0] in ("rejudge", "merge") else [])],
                      timeout=300)
        assert got.code != 70 and "Traceback" not in got.stderr, (args, got.stderr[-2000:])
