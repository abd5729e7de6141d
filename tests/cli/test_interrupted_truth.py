"""An interrupted run tells only what happened (issue 28, item 4).

Real `probe run`s of simulated DGX H100 machines (real probes on sysfs trees and compiled fake
libnvidia-ml, over the local transport), first complete, then stopped by SIGTERM at several
moments: one host's nvlink probe is blocked (its NVML library path is a FIFO, so loading it never
returns), another host's interpreter never answers, a third never starts.  Whatever the moment,
nothing is made of what a stopped host did not say: no finding, no topology class, no drift line,
no "reachable again", and the run says when it stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.simulate.fake_nvml import build_fake_nvml
from orchestrator.simulate.hostfiles import build_host_files, build_kernel_log
from orchestrator.simulate.sysfs import build_machine, build_nic_state
from tests.support.hostile import cli_env, interpreter, inventory, load_fleet, run_cli
from tests.support.interrupt import interrupt_when
from tests.support.sshd import ROOT_DIR

MACHINE = "dgx-h100"
HOSTS = ("h1", "h2", "h3", "h4", "h5")
EXPECT = {"gpu_count": 8, "gpu_model": "H100", "nvlink_all_up": True, "nvswitch_count": 4}
PROBES = ["--probe", "host", "--probe", "pcie", "--probe", "nvml", "--probe", "nvlink"]


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """host -> its inventory variables: a simulated DGX H100 each (own serials and UUIDs)."""
    base = tmp_path_factory.mktemp("machines")
    out = {}
    for host in HOSTS:
        root = base / host / "root"
        build_machine(MACHINE, root)
        build_host_files(MACHINE, root, host)
        build_kernel_log(MACHINE, root, host)
        build_nic_state(MACHINE, root, host)
        lib = str(build_fake_nvml(MACHINE, base / host / "libs", seed=host))
        out[host] = {"probe_root": str(root), "probe_args": {"nvml": {"lib": lib}, "nvlink": {"lib": lib}},
                     "probe_expect": EXPECT}
    return out


def _run(inv: Path, results: Path, *extra: str, timeout: float = 120) -> Any:
    return run_cli(["run", "-i", str(inv), *PROBES, "--results", str(results), "-f", "2", "-t", "60", *extra],
                   timeout=timeout)


def _stop(inv: Path, results: Path, report: Path, settle: float, base: Path) -> tuple[int, str]:
    """SIGTERM `settle` seconds after the first host of this run finished."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), *PROBES, "--results", str(results),
         "-f", "2", "-t", "60", "--html", str(report)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), cwd=str(ROOT_DIR), stdin=subprocess.DEVNULL,
        text=True)
    return interrupt_when(proc, lambda: any(base not in p.parents for p in results.glob("*/raw/h1/_host.json")),
                          settle, wait_s=60, sig=signal.SIGTERM, exit_s=60)


@pytest.mark.slow
@pytest.mark.parametrize("settle", [0.2, 1.5, 4.0])
def test_a_stopped_run_makes_nothing_of_what_it_did_not_hear(machines: dict[str, dict[str, Any]], tmp_path: Path,
                                                             settle: float) -> None:
    results = tmp_path / "results"
    inv = tmp_path / "fleet.yml"
    inventory(inv, machines)
    done = _run(inv, results)
    assert done.code == 0, done.stdout + done.stderr  # five healthy DGX H100s
    [base] = [p for p in results.iterdir() if p.is_dir()]
    baseline = load_fleet(base)
    assert {h["class"] for h in baseline["hosts"]} == {"8xH100-SXM-NV18-8NIC-PIX"} and not baseline["findings"]

    # The same inventory again, but h2's nvlink probe blocks (its library is a FIFO nobody writes),
    # h3's interpreter never answers, and with two forks busy h4 and h5 wait their turn.
    fifo = tmp_path / "libnvidia-ml.so.1"
    os.mkfifo(fifo)
    stuck = {**machines["h2"], "probe_args": {**machines["h2"]["probe_args"], "nvlink": {"lib": str(fifo)}}}
    silent = interpreter(tmp_path / "bin", "silent", "import time; time.sleep(120)")
    inventory(inv, {**machines, "h2": stuck, "h3": {**machines["h3"], "ansible_python_interpreter": str(silent)}})
    rc, err = _stop(inv, results, tmp_path / "report.html", settle, base)
    assert rc == 130, err
    assert "Traceback" not in err
    [stopped] = [p for p in results.iterdir() if p.is_dir() and p != base]
    fleet = load_fleet(stopped)
    hosts = {h["name"]: h for h in fleet["hosts"]}
    assert fleet["run"]["state"] == "interrupted" and fleet["run"]["finished"]
    assert fleet["run"]["stopped"]["finished"] + fleet["run"]["stopped"]["cut"] + fleet["run"]["stopped"]["never"] == 5
    cut = {name for name, h in hosts.items()
           if any(p["outcome"] in ("interrupted", "skipped") for p in h["probes"].values())}
    assert {"h2", "h3", "h4", "h5"} <= cut, {n: h["probes"] for n, h in hosts.items()}
    for name in cut:
        h = hosts[name]
        # nothing judged from absence: no finding, no class, health says what happened
        assert [f["id"] for f in fleet["findings"] if f["host"] == name] == [], name
        assert h["class"] is None and h["fingerprint"] is None, (name, h["class"])
        assert h["health"]["state"] == "incomplete", (name, h["health"])
    assert sum(fleet["summary"]["health"].values()) == 5
    # drift against the complete run: nothing about the cut hosts (no level changed NV18 -> SYS, no
    # class changed, no link down, no "reachable again" for a host the run never started)
    diff = run_cli(["diff", base.name, stopped.name, "--results", str(results), "--format", "json"])
    assert diff.code == 0, diff.stderr
    changes = json.loads(diff.stdout)["changes"]
    assert [c for c in changes if c["host"] in cut] == [], changes
    text = run_cli(["diff", base.name, stopped.name, "--results", str(results)]).stdout
    assert "reachable again" not in text and "NV18 ->" not in text
    # the report says when it stopped and how far it got
    page = (tmp_path / "report.html").read_text()
    assert "interrupted at " in page and "never started" in page
