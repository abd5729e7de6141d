"""Remediation that never kills a job (issue 47 item 4), against the real slurmctld and slurmd of
tests/support/slurm.py and the real ansible-playbook.

The playbook of `probe remediate` drains a node, then waits until Slurm reports it drained with no
job left (a real `sbatch` job runs on it: it must end by itself, before the stubbed `nvidia-smi -r`
is called), fails a node whose job outlives the stated timeout and leaves it drained and its job
running, never drains, acts on or resumes a node whose drain reason someone else set, verifies
(the stubbed `probe run -q -l HOST`) and resumes only its own drains.  `--slurm-drain` lines under
`sh` leave every foreign reason as it was; the `--slurm-resume` lines resume only fleetprobe's own
drains.  The foreign reasons are a class: another team's reason, fleetprobe look-alikes that are
not its prefix, and shell and Jinja text that must stay text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.present.outputs.remediation import write_playbook
from orchestrator.present.outputs.slurm_drain import render_drain, render_resume
from orchestrator.verdict import remedy
from tests.support.fabric import require
from tests.support.judged import judged
from tests.support.slurm import SlurmCluster, missing_reason, start_cluster

pytestmark = pytest.mark.slow

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
MARKER = Path("/tmp/fp47-remedy-PWNED")
# drain reasons someone else set: never overwritten, never resumed by fleetprobe
FOREIGN = ["hw: DIMM B3 bad, ticket 4711", "fleetprobe-old gpu.lost", "FLEETPROBE r0: gpu.lost",
           "maint by alice; fleetprobe r0: nvlink.link.down", f"$(touch {MARKER}) `touch {MARKER}`",
           "{{ lookup('pipe', 'touch " + str(MARKER) + "') }}"]
NODES = 4 + len(FOREIGN)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    require(missing_reason())
    c = start_cluster(tmp_path_factory.mktemp("slurm"), NODES)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def fresh(cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """Every node idle, undrained, no job, before and after each test."""
    _settle(cluster)
    yield cluster
    _settle(cluster)


def _settle(c: SlurmCluster) -> None:
    c.run(["scancel", "--user=root"], timeout=30)
    for node in c.nodes:
        c.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=30)
    _until(lambda: all(_node(c, n) == ("IDLE", "") for n in c.nodes), 60, "idle undrained nodes", c)


def _until(predicate: Any, timeout: float, what: str, c: SlurmCluster) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}\n{c.logs()}"
        time.sleep(0.5)


def _node(c: SlurmCluster, node: str) -> tuple[str, str]:
    """(State, Reason without Slurm's `[user@time]`) as `scontrol show node` says them; the state
    without NOT_RESPONDING, which ten slurmd on two shared cores earn now and then (a missed ping,
    nothing of draining)."""
    out = c.run(["scontrol", "show", "node", node], timeout=30).stdout
    fields = {k: v for k, _, v in (ln.strip().partition("=") for ln in out.splitlines()) if k in ("Reason",)}
    state = next(w.split("=", 1)[1] for ln in out.splitlines() for w in ln.split() if w.startswith("State="))
    state = "+".join(f for f in state.split("+") if f != "NOT_RESPONDING")
    return state, fields.get("Reason", "").rsplit(" [", 1)[0]


def _job(c: SlurmCluster, node: str, seconds: int, done: Path) -> str:
    res = c.run(["sbatch", "-w", node, "-o", "/dev/null", "--wrap", f"sleep {seconds}; touch {done}"], timeout=30)
    assert res.returncode == 0, res.stderr
    job = res.stdout.split()[-1]
    _until(lambda: _job_state(c, job) == "RUNNING", 30, f"job {job} running", c)
    return job


def _job_state(c: SlurmCluster, job: str) -> str:
    out = c.run(["scontrol", "show", "job", job], timeout=30).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "GONE")


def _finding(host: str, fid: str, bus: str | None = None) -> dict[str, Any]:
    devices = [{"kind": "gpu", "gpu": 0, "bus_id": bus}] if bus else []
    return {"id": fid, "host": host, "severity": "fail", "kind": "fault", "subject": fid, "message": "m",
            "evidence": [], "hint": "", "devices": devices}


_STUB = """#!{python}
import json, sys, time
with open({log!r}, "a") as f:
    f.write(json.dumps([time.time(), {name!r}, *sys.argv[1:]]) + "\\n")
if {name!r} == "systemctl" and sys.argv[1:2] == ["show"]:  # what ansible.builtin.systemd reads of a unit
    print("Id=" + sys.argv[2] + "\\nLoadState=loaded\\nActiveState=active\\nSubState=running\\nUnitFileState=enabled")
if {name!r} == "probe" and {failing!r} in sys.argv:  # the check that still finds the fault
    print("FAILED {failing}: 1 fault(s)\\n  FAIL nvlink.fabric.incomplete")
    sys.exit(1)
"""


def _stubs(tmp: Path, c: SlurmCluster, failing: str) -> tuple[dict[str, str], Path]:
    """nvidia-smi, systemctl, reboot, shutdown and probe as logged commands (the real scontrol and
    squeue of the test cluster stay on PATH); `probe ... -l <failing>` exits 1."""
    bin_, log = tmp / "stub-bin", tmp / "argv.log"
    bin_.mkdir()
    for name in ("nvidia-smi", "systemctl", "shutdown", "reboot", "probe"):
        (bin_ / name).write_text(_STUB.format(python=sys.executable, log=str(log), name=name, failing=failing))
        (bin_ / name).chmod(0o755)
    env = {**c.env(), "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_LOCAL_TEMP": str(tmp / "a-tmp"),
           "ANSIBLE_HOME": str(tmp / "a-home"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
           "ANSIBLE_FORKS": "20"}
    return env, log


def _calls(log: Path) -> list[list[Any]]:
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


def test_the_playbook_waits_for_jobs_skips_foreign_drains_and_resumes_only_its_own(fresh: SlurmCluster,
                                                                                  tmp_path: Path) -> None:
    c = fresh
    # node1: a GPU reset, under a job that ends by itself in 8 s; node2: a GPU reset, under a job that
    # outlives the drain timeout; node3: a service restart whose check still fails after it; node4: a
    # restart that cures it; node5..: a restart, each node carrying one foreign reason
    foreign = dict(zip(c.nodes[4:], FOREIGN))
    findings = [_finding("node1", "gpu.row_remap.pending", "0000:11:00.0"),
                _finding("node2", "gpu.row_remap.pending", "0000:22:00.0"),
                *(_finding(n, "nvlink.fabric.incomplete") for n in ["node3", "node4", *foreign])]
    fleet = judged({"run": {"id": "r47"}, "hosts": [{"name": n, "outcome": "ok"} for n in c.nodes], "findings": findings})
    book = write_playbook(remedy.plan(fleet, force=True), tmp_path / "fix.yml")
    for node, reason in foreign.items():
        assert c.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]).returncode == 0
        assert _node(c, node) == ("IDLE+DRAIN", reason)
    done1, done2 = tmp_path / "job1.done", tmp_path / "job2.done"
    short, long = _job(c, "node1", 8, done1), _job(c, "node2", 600, done2)
    inv = tmp_path / "inventory.yml"
    inv.write_text(json.dumps({"all": {"hosts": dict.fromkeys(c.nodes), "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}}}))
    env, log = _stubs(tmp_path, c, "node3")
    ran = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inv), "--skip-tags", "reboot", "-e",
                          "fleetprobe_drain_timeout=20 fleetprobe_drain_poll=1", str(book)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    out = ran.stdout + ran.stderr
    assert ran.returncode != 0, out  # node2's job outlived the timeout; the foreign nodes were skipped
    calls = _calls(log)
    resets = {c_[3]: c_[0] for c_ in calls if c_[1:3] == ["nvidia-smi", "-r"]}
    # node1: reset only after its job ended by itself (COMPLETED, its last command ran), then resumed
    assert list(resets) == ["--id=0000:11:00.0"], out
    assert done1.exists() and resets["--id=0000:11:00.0"] >= done1.stat().st_mtime, out
    assert _job_state(c, short) == "COMPLETED"
    assert _node(c, "node1") == ("IDLE", "")
    # node2: its job still runs, the node stays drained with fleetprobe's reason, nothing was done to it
    assert _job_state(c, long) == "RUNNING" and not done2.exists()
    state, reason = _node(c, "node2")
    assert "DRAIN" in state and reason == "fleetprobe r47: gpu.row_remap.pending"
    assert "node2 is not drained after 20 s" in out
    # node3: restarted, its check still names the rule: stays drained; node4: restarted, checked, resumed
    restarted = [c_ for c_ in calls if c_[1:3] == ["systemctl", "restart"]]
    assert len(restarted) == 2, out
    assert _node(c, "node3") == ("IDLE+DRAIN", "fleetprobe r47: nvlink.fabric.incomplete")
    assert _node(c, "node4") == ("IDLE", "")
    checked = sorted(c_[-1] for c_ in calls if c_[1] == "probe")
    assert checked == ["node1", "node3", "node4"]
    assert all(c_[1:5] == ["probe", "run", "-q", "-l"] for c_ in calls if c_[1] == "probe")
    # every foreign reason survives, verbatim, and its node was neither restarted nor resumed
    for node, reason in foreign.items():
        assert _node(c, node) == ("IDLE+DRAIN", reason), (node, out)
        assert f"node {node} carries a drain reason that is not fleetprobe's" in out
    assert not MARKER.exists()


def test_the_drain_lines_never_overwrite_a_foreign_reason(fresh: SlurmCluster, tmp_path: Path) -> None:
    c = fresh
    foreign = dict(zip(c.nodes[4:], FOREIGN))
    findings = [_finding(n, "gpu.lost") for n in c.nodes]
    fleet = judged({"run": {"id": "r47"}, "hosts": [{"name": n, "outcome": "ok"} for n in c.nodes], "findings": findings})
    drain = tmp_path / "drain.sh"
    drain.write_text(render_drain(fleet, remedy.drain_plan(fleet, force=True)))
    for node, reason in {**foreign, "node2": "fleetprobe r40: nvlink.link.down"}.items():
        assert c.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]).returncode == 0
    job = _job(c, "node3", 600, tmp_path / "never")
    ran = subprocess.run(["sh", str(drain)], capture_output=True, text=True, timeout=120, env=c.env(), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    for node, reason in foreign.items():
        assert _node(c, node) == ("IDLE+DRAIN", reason), node
    said = [ln for ln in ran.stderr.splitlines() if "carries a drain reason that is not fleetprobe's" in ln]
    assert sorted(ln.split()[1] for ln in said) == sorted(foreign)
    # no reason, or fleetprobe's own from an earlier run: drained with this run's reason
    for node in ("node1", "node2", "node4"):
        assert _node(c, node) == ("IDLE+DRAIN", "fleetprobe r47: gpu.lost"), node
    # a drain list drains, it kills nothing: node3's job runs on, the node draining
    assert _node(c, "node3") == ("ALLOCATED+DRAIN", "fleetprobe r47: gpu.lost")
    assert _job_state(c, job) == "RUNNING"
    assert not MARKER.exists()


def test_the_resume_lines_resume_only_fleetprobes_own_drains_of_clean_nodes(fresh: SlurmCluster,
                                                                           tmp_path: Path) -> None:
    c = fresh
    foreign = dict(zip(c.nodes[4:], FOREIGN))
    # node1 and node2 were drained by fleetprobe; node2 still fails in this run; node3 is not drained
    fleet = judged({"run": {"id": "r48"}, "hosts": [{"name": n, "outcome": "ok"} for n in c.nodes],
                    "findings": [_finding("node2", "gpu.lost")]})
    drained = {"node1": "fleetprobe r47: gpu.lost", "node2": "fleetprobe r47: gpu.lost", **foreign}
    for node, reason in drained.items():
        assert c.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]).returncode == 0
    resume = tmp_path / "resume.sh"
    resume.write_text(render_resume(fleet))
    ran = subprocess.run(["sh", str(resume)], capture_output=True, text=True, timeout=120, env=c.env(), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert _node(c, "node1") == ("IDLE", "")  # fleetprobe's own drain, clean now: resumed
    assert _node(c, "node2") == ("IDLE+DRAIN", "fleetprobe r47: gpu.lost")  # still failing: no line for it
    assert _node(c, "node3") == ("IDLE", "") and _node(c, "node4") == ("IDLE", "")
    for node, reason in foreign.items():
        assert _node(c, node) == ("IDLE+DRAIN", reason), node
    said = [ln for ln in ran.stderr.splitlines() if "not resumed" in ln]
    assert sorted(ln.split()[1] for ln in said) == sorted(foreign)  # each foreign skip said; quiet otherwise
    assert not MARKER.exists()
