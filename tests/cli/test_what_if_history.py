"""Issue 47 item 3: a what-if stays a what-if, and drift never resolves what was not measured.

A rejudge under other expectations, playbook, baseline or floor is stored as a what-if of its
source (run.json `what_if`): no later run, `probe diff`, report or repeat-offender history takes it
for the run before a nightly unless it is named.  `probe runs` marks it and counts the hosts'
health beside their probes' transport outcome.  A fleet-baseline figure the later run did not
measure (a temperature under load, in a run that applied no load) is neither resolved nor new.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.session import run_history
from orchestrator.store.compact import read_plain
from orchestrator.store.history import list_runs, previous_run, summarize_run
from orchestrator.verdict import baseline
from orchestrator.verdict.findings import fault

ROOT = Path(__file__).resolve().parents[2]
HOSTS = "dgx-h100-01,dgx-h100-04,dgx-h100-05"


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="400"), timeout=300)


def _ran(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode in (0, 1, 5), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _runs(results: Path) -> list[Path]:
    return sorted(p for p in results.iterdir() if p.is_dir())


# What-ifs, as an operator makes them: other expectations (several keys), another playbook.
WHAT_IFS = {
    "gpu_model": ["--expect", "gpu_model=A100"],
    "driver_min": ["--expect", "driver_min=999"],
    "gpu_count": ["--expect", "gpu_count=4"],
    "two_keys": ["--expect", "gpu_count=4", "--expect", "nvlink_links_per_gpu=12"],
    "playbook": ["-p", "quick"],
}


@pytest.mark.parametrize("case", sorted(WHAT_IFS))
def test_a_what_if_is_never_the_previous_run_of_a_nightly(tmp_path: Path, case: str) -> None:
    results = tmp_path / "runs"
    playbook = ["-p", "quick"] if case == "playbook" else []
    _ran(probe("run", "-q", "-l", HOSTS, *playbook, "--results", str(results)))
    # the what-if is made of a run of the playbook the nightly runs (-p quick: of an audit run)
    if case == "playbook":
        _ran(probe("run", "-q", "-l", HOSTS, "--results", str(results)))
    made = _ran(probe("rejudge", "latest", *WHAT_IFS[case], "-q", "--results", str(results)))
    what_if, source = _runs(results)[-1], _runs(results)[-2]
    third = _ran(probe("run", "-l", HOSTS, *playbook, "--results", str(results)))
    real = _runs(results)[0]
    assert what_if.name not in third.stdout + third.stderr
    assert "finding.resolved" not in third.stdout and "finding.new" not in third.stdout
    assert f"drift {real.name} -> " in third.stdout and ": no changes" in third.stdout
    assert f"{what_if.name} is a what-if of {source.name}" in made.stderr
    assert summarize_run(what_if).what_if, "the rejudge is stored as a what-if"
    latest = _runs(results)[-1]
    assert previous_run(results, latest).path == real  # type: ignore[union-attr]
    # nor is it a run of the repeat-offender history (all its hosts failed an A100 expectation)
    assert [past.id for past in run_history(results, latest)] == [real.name]
    # `probe diff` and the report compare the nightly with the last real run
    diff = _ran(probe("diff", "--results", str(results), "--format", "json"))
    doc = json.loads(diff.stdout)
    assert (doc["old_run"], doc["new_run"], doc["changes"]) == (real.name, latest.name, [])
    _ran(probe("report", "-o", str(tmp_path / "r.html"), "--results", str(results)))
    html = (tmp_path / "r.html").read_text()
    assert what_if.name not in html and real.name in html
    if case != "playbook":  # named, a what-if is compared like any run
        named = _ran(probe("diff", what_if.name, latest.name, "--results", str(results)))
        assert f"drift {what_if.name} -> {latest.name}" in named.stdout and "expectation" in named.stdout


def test_probe_runs_marks_what_ifs_and_counts_health(tmp_path: Path) -> None:
    results = tmp_path / "runs"
    _ran(probe("run", "-q", "-l", HOSTS, "--results", str(results)))
    _ran(probe("rejudge", "latest", "-q", "--results", str(results)))  # the same inputs: no what-if
    _ran(probe("rejudge", "-2", "--expect", "gpu_model=A100", "-q", "--results", str(results)))
    _ran(probe("rejudge", "latest", "-q", "--results", str(results)))  # a rejudge of a what-if is one
    first, plain, what_if, again = _runs(results)
    rows = {r["id"]: r for r in json.loads(_ran(probe("runs", "--format", "json", "--results", str(results))).stdout)}
    assert rows[first.name]["what_if"] is None and rows[plain.name]["what_if"] is None
    assert rows[what_if.name]["what_if"] == f"of {first.name} (--expect)"
    assert rows[again.name]["what_if"] == f"of {what_if.name} (--expect)"
    fleet = read_plain(first / "fleet.json")  # any schema (3: gzip members)
    health = fleet["summary"]["health"]
    for row in rows.values():
        counted = sum(row[k] for k in ("healthy", "degraded", "failed", "incomplete", "unreachable"))
        assert counted == row["hosts"] == 3
    # `failed` is the verdict's (dgx-h100-04 has an NVLink down), not the probes' transport outcome
    row = rows[first.name]
    assert (row["healthy"], row["degraded"], row["failed"]) == (health["healthy"], health["degraded"], health["failed"])
    assert row["failed"] >= 1 and row["probes_failed"] == 0
    assert rows[what_if.name]["failed"] == 3  # every host judged against an A100 it is not
    table = _ran(probe("runs", "--results", str(results))).stdout
    header = table.splitlines()[0].split()
    assert {"what_if", "healthy", "degraded", "failed", "probes_failed"} <= set(header)
    assert f"of {first.name} (--expect)" in table


# run.json `what_if` values no fleetprobe writes: the run is not taken for a what-if, nothing crashes
HOSTILE_WHAT_IF = {"string": "yes", "number": 5, "object": {"a": 1}, "bools": [True, None, 3], "true": True}


@pytest.mark.parametrize("case", sorted(HOSTILE_WHAT_IF))
def test_a_hand_edited_what_if_costs_only_its_own_run(tmp_path: Path, case: str) -> None:
    results = tmp_path / "runs"
    _ran(probe("run", "-q", "-l", "dgx-h100-01", "--probe", "host", "--results", str(results)))
    _ran(probe("run", "-q", "-l", "dgx-h100-01", "--probe", "host", "--results", str(results)))
    first, second = _runs(results)
    meta = json.loads((first / "run.json").read_text())
    meta["what_if"] = HOSTILE_WHAT_IF[case]
    (first / "run.json").write_text(json.dumps(meta))
    assert [s.what_if for s in list_runs(results)] == [[], []]
    assert previous_run(results, second).path == first  # type: ignore[union-attr]
    listed = _ran(probe("runs", "--results", str(results)))
    assert listed.returncode == 0 and first.name in listed.stdout and "None" not in listed.stdout


# ---------------------------------------------------------------- drift: what was not measured


def test_drift_never_resolves_a_figure_the_later_run_did_not_measure(tmp_path: Path) -> None:
    """dgx-h100-26's GPU5 runs 11 C hotter than its siblings, under load (premigration) and idle
    (audit): each run measured one of the two figures, so neither is resolved nor new, either way."""
    results = tmp_path / "runs"
    for playbook in ("premigration", "audit", "premigration"):
        _ran(probe("run", "-q", "-p", playbook, "-l", "dgx-h100-26", "--results", str(results)))
    runs = _runs(results)
    for old, new in zip(runs, runs[1:]):
        doc = json.loads(_ran(probe("diff", old.name, new.name, "--results", str(results), "--format", "json")).stdout)
        kinds = [(c["kind"], c["subject"]) for c in doc["changes"] if "temperature" in str(c["subject"])]
        assert kinds == [], (old.name, new.name, kinds)
        reasons = " ".join(doc["not_compared"])
        assert "not measured" in reasons


def _figures() -> list[tuple[Any, str, str | None, dict[str, int], str]]:
    """(metric, kind, GPU, GPU index, the figure's key) for every metric, host- and GPU-wide."""
    out = []
    for m in baseline.METRICS:
        for kind in ("", "NV18", "under load", "all_reduce 64 MiB"):
            for gpu, index in ((None, {}), ("0000:ab:00.0", {"0000:ab:00.0": 5}), ("0000:01:00.0", {})):
                out.append((m, kind, gpu, index, baseline._key(m.key, kind)))
    return out


@pytest.mark.parametrize(("metric", "kind", "gpu", "index", "key"), _figures())
def test_a_baseline_finding_names_its_figure_by_evidence_and_device_not_subject(
        metric: Any, kind: str, gpu: str | None, index: dict[str, int], key: str) -> None:
    f = fault(metric.finding, "h", baseline._subject(metric, kind, gpu, index), "x", evidence=[f"baseline metric {key}"])
    assert baseline.figure_of(f) == (key, gpu)
    assert baseline.figure_of(replace(f, subject="reworded")) == (key, gpu)  # the subject is text for people
    assert baseline.figure_text(key) == baseline._subject(metric, kind, None, {}).text
