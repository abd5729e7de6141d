"""Drift compares only what both runs measured (issue 16, item 2).  Each case is two (or three)
real `probe run`s of the bundled demo fleet (replay transport) into one results directory, then
the drift `probe run` prints and `probe diff` (table and JSON)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from orchestrator.store.compact import read_plain
from tests.support.hostile import load_fleet
from tests.support.interrupt import interrupt_when

ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=timeout)


def runs(results: Path) -> list[str]:
    return sorted(p.name for p in results.iterdir() if p.is_dir())


def diff_json(results: Path, a: str, b: str) -> dict[str, Any]:
    proc = probe("diff", a, b, "--results", str(results), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def kinds(d: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["host"], c["kind"]) for c in d["changes"]]


def test_other_limit_is_one_line_and_an_outlier_without_peers_is_not_resolved(tmp_path: Path) -> None:
    results = tmp_path / "runs"
    first = probe("run", "-l", "demo", "-q", "--results", str(results))
    assert first.returncode in (0, 1), first.stderr
    [full] = runs(results)
    fleet = read_plain(results / full / "fleet.json")
    assert any(f["id"] == "topology.class.outlier" and f["host"] == "dgx-h100-04" for f in fleet["findings"])
    second = probe("run", "-l", "dgx-h100-04", "--results", str(results), "--baseline", full)
    assert second.returncode in (0, 1), second.stderr
    drift = second.stdout[second.stdout.index("drift "):]
    assert second.stdout.count("drift ") == 1 and "drift since" not in second.stdout  # one header
    others = len(fleet["hosts"]) - 1  # the demo group but dgx-h100-04 (it grows as hosts are added)
    assert (f"{others} host(s) not in this run (limit dgx-h100-04): dgx-h100-01, dgx-h100-02, dgx-h100-03 "
            f"and {others - 3} more") in drift
    assert "no longer in the run" not in drift and "resolved" not in drift
    assert "not compared: 1 finding(s), their check not judged in this run: 1 similar host(s)" in drift
    d = diff_json(results, full, runs(results)[1])
    assert len(d["not_in_new"]["hosts"]) == others and d["not_in_new"]["limit"] == "dgx-h100-04"
    assert not [c for c in d["changes"] if c["kind"] == "finding.resolved"]
    # a run of another limit is never the default baseline: the next run of this limit compares with its own
    third = probe("run", "-l", "dgx-h100-04", "--results", str(results))
    assert f"drift {runs(results)[1]} -> {runs(results)[2]}: no changes" in third.stdout


def test_audit_after_premigration_resolves_no_p2p_finding(tmp_path: Path) -> None:
    results = tmp_path / "runs"
    pre = probe("run", "-l", "dgx-h100-06,dgx-h100-07,dgx-h100-01", "-p", "premigration", "-q",
                "--results", str(results))
    assert pre.returncode in (0, 1), pre.stderr
    audit = probe("run", "-l", "dgx-h100-06,dgx-h100-07,dgx-h100-01", "-q", "--results", str(results))
    assert audit.returncode in (0, 1), audit.stderr
    a, b = runs(results)
    p2p_before = [f for f in read_plain(results / a / "fleet.json")["findings"]
                  if f["id"].startswith("p2p.")]
    assert p2p_before  # the slow pair and the Gen1 x8 GPU were measured
    d = diff_json(results, a, b)
    assert not [c for c in d["changes"] if c["kind"].startswith("finding.")], d["changes"]
    assert d["not_compared"] == {"not judged in this run: p2p probe not in this run": len(p2p_before)}
    assert [c["kind"] for c in d["run_changes"]][:2] == ["run.playbook", "run.probes"]
    table = probe("diff", a, b, "--results", str(results))
    assert table.stdout.count("drift ") == 1
    assert "~ playbook changed: premigration -> audit" in table.stdout
    assert "~ probes changed (not run now: nccl, p2p)" in table.stdout  # premigration runs nccl after p2p
    assert f"not compared: {len(p2p_before)} finding(s), their check not judged in this run: p2p probe not in" in \
        table.stdout


def test_h2d_and_d2h_are_two_findings_and_an_expectation_change_is_named(tmp_path: Path) -> None:
    results = tmp_path / "runs"
    limit = "dgx-h100-01,dgx-h100-02"
    base = probe("run", "-l", limit, "-p", "premigration", "-q", "--results", str(results))
    assert base.returncode in (0, 1), base.stderr
    strict = probe("run", "-l", limit, "-p", "premigration", "-q", "--results", str(results),
                   "--expect", "host_gpu_min_gbps=500", "--expect", "driver_min=999")
    assert strict.returncode in (1, 5), strict.stderr
    relaxed = probe("run", "-l", limit, "-p", "premigration", "-q", "--results", str(results))
    assert relaxed.returncode in (0, 1), relaxed.stderr
    a, b, c = runs(results)
    d = diff_json(results, a, b)
    new = [ch for ch in d["changes"] if ch["kind"] == "finding.new" and ch["new"] == "p2p.host_bandwidth.low"]
    gpu0 = sorted(ch["subject"] for ch in new if ch["host"] == "dgx-h100-01" and "GPU0 (" in ch["subject"])
    assert len(gpu0) == 2 and gpu0[0].endswith("GPU->host") and gpu0[1].endswith("host->GPU")
    assert len(new) == 2 * 2 * 8  # two hosts, eight GPUs, both directions
    assert "expectation host_gpu_min_gbps: (none) -> 500.0 on all 2 hosts" in [x["message"] for x in d["run_changes"]]
    # dropping --expect: driver_min's finding is not "resolved", its check no longer has anything to compare with
    back = diff_json(results, b, c)
    resolved = {ch["new"] or ch["old"] for ch in back["changes"] if ch["kind"] == "finding.resolved"}
    assert "host.driver.version" not in resolved
    assert back["not_compared"]["not judged in this run: no expectation driver_min or driver_max set"] == 2
    assert "expectation driver_min: 999 -> (none) on all 2 hosts" in [x["message"] for x in back["run_changes"]]
    # host bandwidth was judged in both (derived floors): its findings are resolved, each direction
    assert "p2p.host_bandwidth.low" in resolved


def _inventory(path: Path, slow: Path) -> Path:
    path.write_text("all:\n  hosts:\n"
                    f"    slow01:\n      ansible_connection: local\n      ansible_python_interpreter: {json.dumps(str(slow))}\n"
                    "    dgx-h100-01:\n      ansible_connection: replay\n      probe_replay: dgx-h100-01\n"
                    "    dgx-h100-04:\n      ansible_connection: replay\n      probe_replay: dgx-h100-04\n")
    return path


def test_an_interrupted_run_is_not_the_next_baseline(tmp_path: Path) -> None:
    slow = tmp_path / "slow"
    # a host that answers garbage after 3 s: long enough to be interrupted in, short enough for a test
    slow.write_text(f"#!{sys.executable}\nimport sys, time\nsys.stdin.buffer.read()\ntime.sleep(3)\n")
    slow.chmod(0o755)
    inv = _inventory(tmp_path / "inv.yml", slow)
    results = tmp_path / "runs"
    args = ["run", "-i", str(inv), "-f", "1", "-t", "20", "--probe", "host", "--probe", "nvlink", "--results", str(results)]
    first = probe(*args, "-q")
    assert first.returncode in (4, 5), first.stderr  # slow01 sent no envelope; a complete run all the same
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=ROOT, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # slow01 (first, one host at a time) is in its probe once the run exists; the others wait
    rc, err = interrupt_when(proc, lambda: len(list(results.glob("*/run.json"))) >= 2, wait_s=60)
    assert rc == 130, err
    assert "2 never started" in err
    third = probe(*args)
    one, stopped, three = runs(results)
    assert f"drift {one} -> {three}: no changes" in third.stdout, third.stdout[-2000:]
    # named explicitly, the stopped run compares only what it measured: the hosts it never
    # started have no "new" findings
    d = diff_json(results, stopped, three)
    assert not [c for c in d["changes"] if c["kind"] == "finding.new"], d["changes"]
    # a host the stopped run never started said nothing: it is not compared at all (not "reachable
    # again", no finding new or resolved)
    never = {h["name"] for h in load_fleet(results / stopped)["hosts"]
             if all(p["outcome"] == "skipped" for p in h["probes"].values())}
    assert len(never) == 2 and not [c for c in d["changes"] if c["host"] in never], d["changes"]
