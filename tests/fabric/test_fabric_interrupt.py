"""Ctrl-C in the middle of a fabric qualification leaves no process on any host.

A real `probe run -p <fabric playbook>` over the real sshd, interrupted while the hosts' processes
run (the pairwise wave: probes/fabric.py and the fake perftest tools it started; the NCCL rings:
nccl-probe ranks waiting on each other).  After the interrupt the test scans the hosts' processes
(everything below the test sshd, and anything started from the simulated hosts' trees): none may
be left, and the run keeps what it learned (the run directory is marked interrupted).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.simulate.fabric import FabricScenario
from tests.support.fabric import FAST_NCCL, fabric_setup, hang_tool
from tests.support.sshd import SshdServer, descendants

pytestmark = [pytest.mark.slow, pytest.mark.ssh]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _host_processes(server: SshdServer, tree: Path) -> dict[int, str]:
    """What runs on the simulated hosts: below the test sshd (sshd's own session processes aside),
    or started from a host's tree (the fake perftest tools live there)."""
    out = {}
    for pid in descendants(server.proc.pid) if server.proc else []:
        cmd = _cmdline(pid)
        if cmd and not cmd.startswith("sshd"):
            out[pid] = cmd
    for entry in os.listdir("/proc"):
        if entry.isdigit() and str(tree) in _cmdline(int(entry)):
            out[int(entry)] = _cmdline(int(entry))
    return out


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fabric-libs")


@pytest.mark.parametrize("phase", ["pairs", "nccl"])
def test_an_interrupted_qualification_leaves_nothing_running(phase: str, sshd: SshdServer, libs: Path,
                                                              tmp_path: Path) -> None:
    n = 6
    # long windows, so the interrupt lands while every host's process and its tools are alive
    if phase == "pairs":
        spec = {"round_s": 60, "iters": 5, "size": 8192, "nccl": False, "tests": ["ib_write_bw"]}
        sc = FabricScenario(seed=1)
    else:
        spec = {"round_s": 4, "rounds": 3, "iters": 5, "size": 8192, "extra_rounds": 0,
                "nccl": dict(FAST_NCCL, all_gpus=False, bisect=False, timeout_s=120)}
        sc = FabricScenario(seed=1)
    setup = fabric_setup(tmp_path, sshd, libs, n, 2, sc, spec, nccl=phase == "nccl")
    if phase == "pairs":
        # one host's perftest hangs: it and its peers' servers wait, every process of the wave is
        # busy when the interrupt comes
        hang_tool(setup.fleet.hosts[0].root)
    before = _host_processes(sshd, tmp_path / "hosts")
    assert before == {}, before
    proc = setup.cli.start("run", "-i", str(setup.inventory), "-p", str(setup.playbook), "--format", "json")
    want = "usr/bin/ib_write_bw" if phase == "pairs" else " -I -S -"
    seen: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            running = _host_processes(sshd, tmp_path / "hosts")
            busy = [c for c in running.values() if want in c]
            if phase == "nccl":  # the rings' ranks: several nccl probes at once
                busy = busy if len(busy) >= n else []
            if busy:
                seen = running
                break
            time.sleep(0.1)
        assert seen, f"the qualification never reached its {phase} phase"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    # every host was cut off part-way (issue 45: a stopped qualification said "6 of 6 finished")
    assert f"interrupted: 0 of {n} host(s) finished, {n} cut off part-way, 0 never started" in err, err[-2000:]
    left = _host_processes(sshd, tmp_path / "hosts")
    give_up = time.monotonic() + 20  # sshd tears a session down after its channel closed
    while left and time.monotonic() < give_up:
        time.sleep(0.2)
        left = _host_processes(sshd, tmp_path / "hosts")
    assert left == {}, f"left running after the interrupt: {left} (running before it: {len(seen)})"
    runs = list((setup.cli.results).glob("*/run.json"))
    assert len(runs) == 1
    assert json.loads(runs[0].read_text())["state"] == "interrupted"
    if out.strip():
        fleet = json.loads(out)
        assert {r["probes"]["fabric"]["outcome"] for r in fleet["hosts"]} == {"interrupted"}


def test_nothing_runs_after_a_tool_outlives_its_window(sshd: SshdServer, libs: Path, tmp_path: Path) -> None:
    """A server whose client never comes is killed at its window's end, not left listening."""
    sc = FabricScenario(seed=1)
    spec = {"round_s": 2, "rounds": 3, "iters": 5, "size": 8192, "nccl": False, "tests": ["ib_write_bw"],
            "extra_rounds": 0}
    setup = fabric_setup(tmp_path, sshd, libs, 4, 1, sc, spec)
    (setup.fleet.hosts[0].root / "usr/bin/ib_write_bw").unlink()
    res = subprocess.run(setup.cli.argv("run", "-i", str(setup.inventory), "-p", str(setup.playbook), "--format",
                                        "json"), env=setup.cli.env(), capture_output=True, text=True, timeout=120)
    fleet = json.loads(res.stdout)
    assert {f["id"] for f in fleet["findings"]} <= {"fabric.step.failed"}, [f["id"] for f in fleet["findings"]]
    assert _host_processes(sshd, tmp_path / "hosts") == {}
