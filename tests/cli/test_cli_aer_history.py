"""AER counters in sysfs judged between two stored runs (issue 18): `probe run` over one host whose
pcie and kmsg probes read a fixture tree; the GPU's link partner counts correctable errors between
the runs (a warning), then a fatal one (a failure, whatever the history), then the host reboots
(the counters restart: nothing compared)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.simulate.hostfiles import build_kernel_log
from orchestrator.simulate.sysfs import AER_CORRECTABLE, AER_UNCORRECTABLE, aer_text, build_machine
from tests.cli.test_cli_health_history import _findings, _latest_fleet, _reboot, local_run, probe

DSP0 = "0000:17:00.0"  # the switch downstream port above GPU0 (0000:18:00.0) in dgx-h100


def _set(root: Path, bdf: str, fname: str, names: tuple[str, ...], total: str, counts: dict[str, int]) -> None:
    (root / "sys/bus/pci/devices" / bdf / fname).write_text(aer_text(names, total, counts))


def test_aer_counters_between_runs_of_one_boot(tmp_path: Path) -> None:
    root = tmp_path / "machine"
    build_machine("dgx-h100", root)
    build_kernel_log("dgx-h100", root, "node1")
    run, results = local_run(tmp_path, root, ["kmsg", "pcie"])

    _set(root, DSP0, "aer_dev_correctable", AER_CORRECTABLE, "TOTAL_ERR_COR", {"RxErr": 500})
    first = probe(*run)
    assert first.returncode in (0, 1), first.stderr
    fleet = _latest_fleet(results)
    assert _findings(fleet, "pcie.aer.counters") == []  # 500 since boot, no history: not a rate
    assert "pcie.aer.counters" not in fleet["hosts"][0]["not_judged"]

    _set(root, DSP0, "aer_dev_correctable", AER_CORRECTABLE, "TOTAL_ERR_COR", {"RxErr": 530})
    second = probe(*run)
    assert second.returncode in (0, 1), second.stderr
    [f] = _findings(_latest_fleet(results), "pcie.aer.counters")
    assert f["severity"] == "warn" and f["actual"] == {"correctable": 30} and f["subject"].startswith("0000:18:00.0")

    _reboot(root)
    _set(root, DSP0, "aer_dev_correctable", AER_CORRECTABLE, "TOTAL_ERR_COR", {"RxErr": 600})
    _set(root, DSP0, "aer_dev_fatal", AER_UNCORRECTABLE, "TOTAL_ERR_FATAL", {"CmpltTO": 1})
    third = probe(*run)
    assert third.returncode == 1, third.stderr  # a fail remains
    [f] = _findings(_latest_fleet(results), "pcie.aer.counters")
    assert f["severity"] == "fail" and "fatal" in f["message"]  # another boot: only the absolute is judged
