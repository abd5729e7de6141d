"""Issue 47 item 2, the rest: a host a partial run did not class carries the class of its last
complete run that measured its shape, shown as carried (with that run's id) in fleet.json, the
terminal and the report, never as measured now; with no such run it stays unclassed.  Real demo
runs into a real results directory (the history the next run reads)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.api.stored import load_result
from orchestrator.store.compact import read_plain
from orchestrator.store.history import list_runs
from orchestrator.verdict.classes import CarriedClass, carried_from
from tests.verdict.test_partial_shape import PARTIAL, probe

LIMIT = ["-l", "dgx-h100-01,dgx-h100-04,dgx-a100-01"]


def _runs(results: Path) -> list[Path]:
    return [s.path for s in list_runs(results)]


def _classes(run: Path) -> dict[str, str | None]:
    return {h.name: h.topology_class for h in load_result(run).hosts}


@pytest.mark.parametrize("case", ["fabric", "quick", "no_nvlink"])
def test_a_partial_run_shows_each_hosts_class_carried_from_its_last_complete_run(tmp_path: Path, case: str) -> None:
    results = tmp_path / "runs"
    probe("run", "-q", *LIMIT, "--results", str(results))
    partial = probe("run", *LIMIT, *PARTIAL[case], "--results", str(results), "--hosts", "all")  # a row per host
    audit, run = _runs(results)
    measured = _classes(audit)
    assert all(measured.values()) and measured["dgx-h100-04"] != measured["dgx-h100-01"]  # one NVLink down
    fleet = load_result(run)
    assert [h.name for h in fleet.hosts if h.topology_class] == [] and fleet.classes == []  # nothing measured now
    assert {h: (c.name, c.run) for h, c in fleet.carried.items()} == {h: (c, audit.name) for h, c in measured.items()}
    stored = read_plain(run / "fleet.json")["carried_classes"]
    assert stored["dgx-h100-04"] == {"class": measured["dgx-h100-04"], "run": audit.name,
                                     "fingerprint": next(h.fingerprint for h in load_result(audit).hosts
                                                         if h.name == "dgx-h100-04")}
    for host, cls in measured.items():  # the terminal's class column: carried, and from which run
        assert f"{host} " in partial.stdout and f"{cls} (carried from run {audit.name})" in partial.stdout
    assert "carried classes: 3 host(s) not measured in this run" in " ".join(partial.stdout.split())
    report = tmp_path / "report.html"
    probe("report", run.name, "-o", str(report), "--results", str(results))
    html = report.read_text().replace("<wbr>", "")  # the report's line-break opportunities
    for cls in measured.values():
        assert f"<td>{cls} (carried from run {audit.name})</td>" in html


def test_two_partial_runs_in_a_row_carry_from_the_run_that_measured_not_from_a_carry(tmp_path: Path) -> None:
    results = tmp_path / "runs"
    probe("run", "-q", *LIMIT, "--results", str(results))
    probe("run", "-q", *LIMIT, "-p", "fabric", "--results", str(results))
    probe("run", "-q", *LIMIT, "-p", "quick", "--results", str(results))
    audit, _fabric, quick = _runs(results)
    assert {c.run for c in load_result(quick).carried.values()} == {audit.name}
    # the next complete run measures again, and carries nothing
    probe("run", "-q", *LIMIT, "--results", str(results))
    latest = _runs(results)[-1]
    assert load_result(latest).carried == {} and "carried_classes" not in read_plain(latest / "fleet.json")


def test_without_a_complete_past_run_a_partial_run_leaves_its_hosts_unclassed(tmp_path: Path) -> None:
    results = tmp_path / "runs"
    probe("run", "-q", *LIMIT, "-p", "fabric", "--results", str(results))
    second = probe("run", *LIMIT, "-p", "quick", "--results", str(results))  # its history: one partial run
    for run in _runs(results):
        fleet = load_result(run)
        assert fleet.carried == {} and [h.name for h in fleet.hosts if h.topology_class] == []
    assert "carried" not in second.stdout and "None" not in second.stdout


def test_a_host_measured_only_in_another_inventory_is_not_carried(tmp_path: Path) -> None:
    """The demo's hosts audited from the demo inventory; a fabric run of an inventory of the same
    names elsewhere does not take their classes (another fleet's dgx-h100-01 is another machine)."""
    results = tmp_path / "runs"
    probe("run", "-q", *LIMIT, "--results", str(results))
    demo = Path(__file__).resolve().parents[2] / "orchestrator" / "demo" / "inventory.yml"
    other = tmp_path / "inventory.yml"
    other.write_text(demo.read_text())
    probe("run", "-q", "-i", str(other), *LIMIT, "-p", "fabric", "--results", str(results))
    assert load_result(_runs(results)[-1]).carried == {}


# The pure rule: newest first, the first run that classed the host; a run that did not (absent,
# no fingerprint, no class) passes it on to the run before.
PAST: list[tuple[str, dict[str, tuple[str | None, str | None]]]] = [
    ("run-3", {"a": (None, None), "b": ("fp-b3", None), "c": (None, "C3")}),  # a partial run: nothing measured
    ("run-2", {"a": ("fp-a2", "A2"), "b": ("fp-b2", "B2")}),
    ("run-1", {"a": ("fp-a1", "A1"), "b": ("fp-b1", "B1"), "c": ("fp-c1", "C1"), "d": ("fp-d1", "D1")}),
]


def test_the_newest_run_that_classed_the_host_is_the_one_carried() -> None:
    got = carried_from(PAST, ["a", "b", "c", "e"])
    assert got == {"a": CarriedClass("A2", "fp-a2", "run-2"), "b": CarriedClass("B2", "fp-b2", "run-2"),
                   "c": CarriedClass("C1", "fp-c1", "run-1")}  # e: never classed, stays unclassed
    assert carried_from([], ["a"]) == {} and carried_from(PAST, []) == {}


def test_carried_from_reads_no_further_than_it_needs() -> None:
    read: list[str] = []

    def past() -> Iterator[tuple[str, dict[str, tuple[str | None, str | None]]]]:
        for run_id, classed in PAST:
            read.append(run_id)
            yield run_id, classed

    assert carried_from(past(), ["a"])["a"].run == "run-2" and read == ["run-3", "run-2"]


@pytest.mark.parametrize("stored", [None, "x", {}, {"class": "A"}, {"class": "", "fingerprint": "f", "run": "r"},
                                    {"class": 3, "fingerprint": "f", "run": "r"}, {"class": "A", "fingerprint": "f"}])
def test_a_damaged_stored_carried_class_is_dropped(stored: object) -> None:
    assert CarriedClass.from_dict(stored) is None
