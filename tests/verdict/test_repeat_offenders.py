"""Repeat offenders from the run history: a fail that came back after it was cleared, or a finding
that flaps, names the host with the runs that show it; a fault present in every run (never fixed)
and a host with too short a history do not.  First the rule on made-up histories, then five
stored runs of the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.store.compact import read_plain
from orchestrator.verdict.findings import Finding, Kind, Severity
from orchestrator.verdict.offenders import OFFENDER, PastRun, judge, run_of

ROOT = Path(__file__).resolve().parents[2]


def _history(host: str, marks: str, fid: str = "gpu.lost", severity: str = "fail") -> list[PastRun]:
    """One run per mark, oldest first: x the finding raised, . clear."""
    return [PastRun(f"run{i}", frozenset({host}), {host: {fid: severity}} if m == "x" else {})
            for i, m in enumerate(marks)]


def _judged(host: str, marks: str, **kw: str) -> tuple[list[Finding], dict[str, str]]:
    runs = _history(host, marks, **kw)
    return judge(runs[:-1], runs[-1])


def test_a_fail_that_came_back_names_the_host_with_its_runs() -> None:
    found, _ = _judged("n1", "x.x.x")
    assert [(f.id, f.host, f.severity) for f in found] == [(OFFENDER, "n1", Severity.WARN)]
    assert "gpu.lost came back: a fail in 3 of the last 5 runs, cleared in between (x.x.x)" in found[0].message
    assert found[0].evidence[0] == "runs: run0, run1, run2, run3, run4"
    assert found[0].evidence[1] == "gpu.lost in run0, run2, run4"
    assert _judged("n1", "xx.xx")[0] and _judged("n1", ".xx.x")[0]


def test_a_fault_never_fixed_or_fixed_for_good_is_no_repeat_offender() -> None:
    assert _judged("n1", "xxxxx")[0] == []  # persistent: drift and its own finding say so
    assert _judged("n1", "xxx..")[0] == []  # fixed, and it held
    assert _judged("n1", "x...x")[0] == []  # twice is not three times (and two changes is no flap)


def test_a_finding_that_flaps_names_the_host() -> None:
    found, _ = _judged("n1", "x.x.", fid="nic.port.errors", severity="warn")
    assert len(found) == 1 and "nic.port.errors flaps: 2 of the last 4 runs, 3 changes (x.x.)" in found[0].message


def test_only_the_last_runs_count_and_a_short_history_is_not_judged() -> None:
    assert _judged("n1", "x.x.x.....")[0] == []  # the comebacks are older than the window
    found, not_judged = _judged("n1", "x.")
    assert found == [] and "2 complete run(s)" in not_judged["n1"] and "needs 3" in not_judged["n1"]


def test_a_run_that_did_not_judge_the_host_is_not_a_clear_run() -> None:
    runs = _history("n1", "x.x.x")
    runs[1] = PastRun("run1", frozenset(), {})  # unreachable then: says nothing of the fault
    runs[3] = PastRun("run3", frozenset(), {})
    assert judge(runs[:-1], runs[-1])[0] == []  # xxx over the runs that saw it: persistent


def test_run_of_keeps_warn_and_fail_findings_by_their_worst_severity() -> None:
    def f(fid: str, sev: Severity) -> Finding:
        return Finding(fid, sev, Kind.FAULT, "n1", "s", "m")

    run = run_of("r", ["n1"], [f("a", Severity.WARN), f("a", Severity.FAIL), f("b", Severity.INFO)])
    assert run.findings == {"n1": {"a": "fail"}}


def _inventory(path: Path, gpu_counts: dict[str, int]) -> None:
    """The demo recordings of these hosts, replayed, each with its own written GPU count."""
    lines = ["all:", "  hosts:"]
    for name, count in gpu_counts.items():
        lines += [f"    {name}:", "      ansible_connection: replay", f"      probe_replay: {name}",
                  f"      probe_expect: {json.dumps({'gpu_count': count})}"]
    path.write_text("\n".join(lines) + "\n")


def test_five_stored_runs_raise_it_for_the_host_whose_fault_came_back_only(tmp_path: Path) -> None:
    inventory, results = tmp_path / "fleet.yml", tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(tmp_path / "state"))
    fleets = []
    # dgx-h100-01 has 8 GPUs: a written count of 7 fails it in runs 1, 3 and 5, as a GPU that keeps
    # disappearing would; dgx-h100-02 is held to 7 in every run (a fault never fixed)
    for count in (7, 8, 7, 8, 7):
        _inventory(inventory, {"dgx-h100-01": count, "dgx-h100-02": 7})
        proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-i", str(inventory), "--results",
                               str(results), "-q"], capture_output=True, text=True, env=env, timeout=180, cwd=ROOT)
        assert proc.returncode in (0, 1), proc.stderr
        latest = sorted(p for p in results.iterdir() if p.is_dir())[-1]
        fleets.append(read_plain(latest / "fleet.json"))
    runs = [f["run"]["id"] for f in fleets]
    early = fleets[1]  # two runs: too short a history to name anyone, said so
    assert not [f for f in early["findings"] if f["id"] == OFFENDER]
    assert "needs 3" in early["not_judged"][OFFENDER]["dgx-h100-01"]
    last = fleets[-1]
    named = [f for f in last["findings"] if f["id"] == OFFENDER]
    assert [f["host"] for f in named] == ["dgx-h100-01"]
    assert "gpu.count.mismatch came back: a fail in 3 of the last 5 runs, cleared in between (x.x.x)" in named[0]["message"]
    assert named[0]["evidence"][0] == "runs: " + ", ".join(runs)
    assert named[0]["evidence"][1] == f"gpu.count.mismatch in {runs[0]}, {runs[2]}, {runs[4]}"
    # the host held to the wrong count failed every time: persistent, not a repeat offender
    assert any(f["id"] == "gpu.count.mismatch" and f["host"] == "dgx-h100-02" for f in last["findings"])
    assert OFFENDER not in last["not_judged"] or "dgx-h100-02" not in last["not_judged"][OFFENDER]
