"""The kmsg and nic probes, run as `python3 -` subprocesses exactly as shipped: against fixture trees
(simulate/sysfs.py, simulate/hostfiles.py), on this machine for real, and as an unprivileged user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.envelope import parse_envelope
from orchestrator.engine.payload import build_script
from orchestrator.facts.normalize import kmsg as kmsg_facts
from orchestrator.facts.normalize import nic as nic_facts
from orchestrator.simulate.hostfiles import build_kernel_log
from orchestrator.simulate.sysfs import build_machine, build_nic_state
from tests.support.skips import NOT_HERE, not_here


def run(probe: str, args: dict[str, Any], user: list[str] | None = None, python: str = sys.executable) -> dict[str, Any]:
    script = build_script(probe, args, 20)
    res = subprocess.run([*(user or []), python, "-"], input=script, capture_output=True, timeout=60)
    parse_envelope(res.stdout, probe)  # raises on anything but one valid envelope
    return dict(json.loads(res.stdout))


@pytest.fixture
def machine(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    build_machine("dgx-h100", root)
    build_kernel_log("dgx-h100--xid79", root, "h1")
    build_nic_state("dgx-h100--ib-port-down", root, "h1")
    return root


def test_kmsg_reads_the_fixture_log_and_the_boot(machine: Path) -> None:
    env = run("kmsg", {"root": str(machine)})
    assert env["status"] == "ok"
    data = env["data"]
    assert data["readable"] and data["source"] == "kmsg"
    assert data["boot_id"] == (machine / "proc/sys/kernel/random/boot_id").read_text().strip()
    facts = kmsg_facts.normalize(data)
    kinds = sorted((e["kind"], e["code"]) for e in facts["events"])
    assert kinds == [("fallen_off_bus", None), ("xid", 79)]
    assert all(isinstance(e["t"], float) for e in facts["events"])


def test_kmsg_keeps_the_newest_lines_within_its_bound(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / "dev").mkdir(parents=True)
    recs = [f"3,{i},{i * 1000000},-;NVRM: Xid (PCI:0000:18:00): 13, pid={i}, name=x, Graphics Exception" for i in range(10)]
    (root / "dev/kmsg").write_text("\n".join(recs) + "\n 6,1,2,-;SUBSYSTEM=pci\n")
    data = run("kmsg", {"root": str(root), "max_lines": 3})["data"]
    assert [ln["t"] for ln in data["lines"]] == [7.0, 8.0, 9.0]
    assert data["lines_dropped"] == 7 and data["lines_scanned"] == 10
    assert kmsg_facts.normalize(data)["truncated"] is True


def test_kmsg_without_a_log_says_what_it_tried(tmp_path: Path) -> None:
    root = tmp_path / "r"
    build_kernel_log("dgx-h100--nonroot", root, "h2")  # readable: false -> no /dev/kmsg
    env = run("kmsg", {"root": str(root)})
    assert env["status"] == "ok"
    facts = kmsg_facts.normalize(env["data"])
    assert facts["readable"] is False and "/dev/kmsg" in str(facts["unreadable_reason"])


def test_kmsg_on_this_machine_is_ok_and_says_where_it_read() -> None:
    env = run("kmsg", {})
    assert env["status"] == "ok", env["errors"]
    data = env["data"]
    if data["readable"]:
        assert data["source"] in ("journalctl", "kmsg", "dmesg")
    else:
        assert data["attempts"] and all(a["error"] for a in data["attempts"])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason=NOT_HERE + "needs root and setpriv to drop to nobody")
def test_kmsg_as_an_unprivileged_user_reports_each_source_it_could_not_read() -> None:
    restricted = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # an interpreter under root's home (pyenv's) is not one nobody may run: any Python 3 runs a probe
    python = next((p for p in (sys.executable, shutil.which("python3"), "/usr/bin/python3") if p and subprocess.run(
        [*nobody, p, "-c", "pass"], capture_output=True, timeout=30).returncode == 0), None)
    if python is None:
        not_here("no Python the nobody user may run")
    env = run("kmsg", {}, nobody, python)
    assert env["status"] == "ok"
    data = env["data"]
    assert data["uid"] == 65534
    if restricted and not data["readable"]:
        errors = {a["source"]: a["error"] for a in data["attempts"]}
        assert set(errors) == {"journalctl", "kmsg", "dmesg"}
        assert "root only" in errors["kmsg"]


def test_nic_reads_ports_tied_to_their_pci_functions(machine: Path) -> None:
    env = run("nic", {"root": str(machine)})
    assert env["status"] == "ok"
    facts = nic_facts.normalize(env["data"])
    devs = {d["name"]: d for d in facts["devices"]}
    assert len(devs) == 8 and devs["mlx5_0"]["bus_id"] == "0000:19:00.0"
    assert devs["mlx5_0"]["fw_ver"] == "28.39.1002" and devs["mlx5_0"]["driver"] == "mlx5_core"
    p0, p3 = devs["mlx5_0"]["ports"][0], devs["mlx5_3"]["ports"][0]
    assert (p0["state"], p0["phys_state"], p0["rate_gbps"], p0["link_layer"]) == ("ACTIVE", "LinkUp", 400.0, "InfiniBand")
    assert (p3["state"], p3["phys_state"]) == ("DOWN", "Disabled")
    assert p0["counters"]["symbol_error"] == 0 and "out_of_buffer" in p0["hw_counters"]
    assert facts["gdr"] == {"peermem_loaded": True, "module": "nvidia_peermem", "memory_peers": None}


def test_nic_reads_roce_and_ethernet_interfaces(tmp_path: Path) -> None:
    root = tmp_path / "r"
    build_machine("consumer-8x4090", root)
    build_nic_state("consumer-8x4090", root, "c1")
    facts = nic_facts.normalize(run("nic", {"root": str(root)})["data"])
    port = facts["devices"][0]["ports"][0]
    assert port["link_layer"] == "Ethernet" and port["netdev"] == "enp194s0f0np0"
    nets = {n["name"]: n for n in facts["netdevs"]}
    assert nets["enp194s0f0np0"]["speed_mbps"] == 100000 and nets["enp194s0f0np0"]["bus_id"] == "0000:c2:00.0"


def test_nic_on_this_machine_is_ok() -> None:
    env = run("nic", {})
    assert env["status"] == "ok", env["errors"]
    facts = nic_facts.normalize(env["data"])
    assert all(n["bus_id"] for n in facts["netdevs"])  # only interfaces backed by a PCI function
