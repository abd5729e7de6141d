"""Events and counters judged between two stored runs: `probe run` twice over one host (local
transport, the kmsg and nic probes reading a fixture tree), same boot and after a reboot, and the
localhost inventory classifying kmsg and nic (ok, or unsupported/unknown with a reason; never failed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from orchestrator.simulate.hostfiles import build_kernel_log
from orchestrator.simulate.sysfs import build_machine, build_nic_state
from orchestrator.store.compact import read_plain

ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=180)


def _latest_fleet(results: Path) -> dict[str, Any]:
    run = sorted(p for p in results.iterdir() if p.is_dir())[-1]
    return dict(read_plain(run / "fleet.json"))


def _findings(fleet: dict[str, Any], fid: str) -> list[dict[str, Any]]:
    return [f for f in fleet["findings"] if f["id"] == fid]


def _set_counter(root: Path, hca: str, name: str, value: int) -> None:
    (root / "sys/class/infiniband" / hca / "ports/1/counters" / name).write_text(f"{value}\n")


def local_run(tmp_path: Path, root: Path, probes: list[str]) -> tuple[tuple[str, ...], Path]:
    """`probe run` arguments for one local host `node1` whose probes read the fixture tree `root`,
    and the results directory they write."""
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node1": {"ansible_connection": "local"}}}}))
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "local", "hosts": "all", "probes": [
        {"name": name, "args": {"root": str(root)}} for name in probes]}]))
    results = tmp_path / "runs"
    return ("run", "-i", str(inv), "-p", str(book), "--results", str(results)), results


def _reboot(root: Path) -> None:
    (root / "proc/sys/kernel/random/boot_id").write_text("5eb0a1de-0000-4000-8000-000000000002\n")


def test_two_stored_runs_same_boot_then_a_reboot(tmp_path: Path) -> None:
    root = tmp_path / "machine"
    build_machine("dgx-h100", root)
    build_kernel_log("dgx-h100--xid79", root, "node1")
    build_nic_state("dgx-h100", root, "node1")
    run, results = local_run(tmp_path, root, ["kmsg", "nic"])

    first = probe(*run)
    assert first.returncode in (0, 1), first.stderr
    fleet = _latest_fleet(results)
    [xid] = _findings(fleet, "gpu.xid")
    assert "in this boot" in xid["message"] and xid["actual"] == {"count": 1, "new": 1}
    assert _findings(fleet, "nic.port.errors") == []  # cumulative counters with no history: not judged

    _set_counter(root, "mlx5_2", "symbol_error", 40)  # the link counts errors between the runs
    second = probe(*run)
    assert second.returncode in (0, 1), second.stderr
    fleet = _latest_fleet(results)
    [xid] = _findings(fleet, "gpu.xid")
    assert "still present" in xid["message"] and xid["actual"]["new"] == 0
    [errs] = _findings(fleet, "nic.port.errors")
    assert errs["subject"].startswith("mlx5_2 port 1") and errs["actual"] == {"symbol_error": 40}

    _reboot(root)
    _set_counter(root, "mlx5_2", "symbol_error", 45)
    third = probe(*run)
    assert third.returncode in (0, 1), third.stderr
    fleet = _latest_fleet(results)
    [xid] = _findings(fleet, "gpu.xid")
    assert "still present" not in xid["message"] and xid["actual"]["new"] == 1  # a new boot: new events
    assert _findings(fleet, "nic.port.errors") == []  # another boot: counters are not compared


def test_localhost_inventory_classifies_kmsg_and_nic(tmp_path: Path) -> None:
    res = probe("run", "-i", str(ROOT / "inventories" / "localhost.yml"), "--probe", "kmsg", "--probe", "nic",
                "--results", str(tmp_path / "runs"))
    assert res.returncode in (0, 1), res.stderr
    assert "Traceback" not in res.stderr
    fleet = _latest_fleet(tmp_path / "runs")
    [host] = fleet["hosts"]
    for name in ("kmsg", "nic"):
        outcome = host["probes"][name]["outcome"]
        assert outcome in ("ok", "unsupported"), (name, host["probes"][name])
        if outcome != "ok":
            assert host["probes"][name]["reason"]
    km = host["facts"]["kmsg"]
    if not km["readable"]:
        [f] = _findings(fleet, "host.kernel_log.unreadable")
        assert f["kind"] in ("unknown", "platform_limitation") and km["unreadable_reason"] in f["message"]


def test_import_of_published_dmesg_and_ibstat_judges_them(tmp_path: Path) -> None:
    fix = ROOT / "tests" / "fixtures" / "text"
    res = probe("import", str(fix / "health_dmesg_xid13_burst_vllm5901.txt"), str(fix / "health_ibstat_mooncake1999.txt"),
                "--host", "a800-1", "--expect", "nic_ports_up=true", "--results", str(tmp_path / "runs"),
                "--format", "json")
    assert res.returncode in (0, 1), res.stderr
    fleet = json.loads(res.stdout)
    found = sorted((f["id"], f["severity"], f["subject"].split(" (")[0]) for f in fleet["findings"]
                   if f["id"].startswith(("gpu.xid", "nic.")))
    assert found == [("gpu.xid", "warn", "0000:43:00.0"), ("nic.port.down", "fail", "mlx5_10 port 1")]
