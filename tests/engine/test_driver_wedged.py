"""A wedged driver through a real probe run: the compiled fake libnvidia-ml sleeps in
nvmlDeviceGetHandleByIndex for GPU 3 far past the probe's deadline (machines/
dgx-h100--driver-wedged.nvml.yaml), and a process sits in uninterruptible sleep on /dev/nvidia3
(its .host.yaml).  The probes answer anyway, naming the call; the verdict says the driver does not
answer (gpu.driver.unresponsive), not that the host is slow or unreachable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.collected import local_inventory
from tests.support.fleet import build_simulated_host

ROOT = Path(__file__).resolve().parents[2]


def test_a_call_that_never_returns_is_named_and_the_probe_still_answers(tmp_path: Path) -> None:
    sim = build_simulated_host("wedged-01", "dgx-h100--driver-wedged", tmp_path)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(local_inventory([sim]))
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(tmp_path / "state"))
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-i", str(inventory), "-t", "8",
                           "--probe", "host", "--probe", "pcie", "--probe", "nvml", "--probe", "nvlink",
                           "-o", str(tmp_path / "run"), "--format", "json"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    fleet = json.loads(proc.stdout)
    host = fleet["hosts"][0]
    # the probes answered: no timeout, no unreachable host
    assert {p: r["outcome"] for p, r in host["probes"].items()} == dict.fromkeys(("host", "pcie", "nvml", "nvlink"), "ok")
    assert host["health"]["state"] == "failed"
    hung = host["facts"]["gpus"]["unresponsive"]
    assert [(c["call"], c["subject"]) for c in hung] == [("nvmlDeviceGetHandleByIndex_v2", "GPU 3")]
    assert hung[0]["waited_s"] >= hung[0]["limit_s"] > 0
    assert [g["bus_id"] for g in host["facts"]["gpus"]["list"]] == ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"]
    findings = {(f["id"], f["subject"]): f for f in fleet["findings"]}
    hung_findings = [f for f in fleet["findings"] if f["id"] == "gpu.driver.unresponsive"]
    # the nvml and the nvlink probe each hung on GPU 3: two findings, one fault
    assert [f["subject"] for f in hung_findings] == ["GPU3 (0000:5d:00.0)"] * 2
    root = next(f for f in hung_findings if "caused_by" not in f)
    assert root["severity"] == "fail" and "nvmlDeviceGetHandleByIndex_v2" in root["message"]
    assert "the driver does not answer" in root["message"]
    # what NVML no longer lists follows from the hung call: one fault, one root
    missing = findings[("gpu.count.pci_vs_nvml", "0000:5d:00.0, 0000:9a:00.0, 0000:ab:00.0, 0000:ba:00.0, 0000:db:00.0")]
    assert missing["caused_by"]["id"] == "gpu.driver.unresponsive"
    stuck = findings[("gpu.driver.process_stuck", "processes holding /dev/nvidia*")]
    assert [(p["pid"], p["command"], p["wchan"]) for p in stuck["actual"]] == [(48213, "python3", "_nv034287rm")]
    assert "/dev/nvidia3" in stuck["message"]
    # the nvlink probe hung on the same GPU: the same fault, not a second one
    assert host["health"]["faults"]["fail"] == 1
