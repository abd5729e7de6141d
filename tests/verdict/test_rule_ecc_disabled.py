"""gpu.ecc.disabled (verdict/rules/gpu.py ECC_DISABLED, checked in verdict/checks/gpu_health.py): a
GPU whose ECC is off, or set to go off at the next reset, on a board that ships with it on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.verdict import rules
from orchestrator.verdict.checks import gpu_health
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.coverage import not_judged
from orchestrator.verdict.findings import Action, DeviceKind, Severity

ROOT = Path(__file__).resolve().parents[2]
REAL_Q = ROOT / "tests" / "fixtures" / "text" / "h200_real_q.txt"  # a real H200 `nvidia-smi -q` capture
H100 = {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x2330"}
RTX4090 = {"name": "NVIDIA GeForce RTX 4090", "pci_device_id": "0x2684"}


def _gpu(index: int, model: dict[str, str], ecc: Any) -> dict[str, Any]:
    return {"index": index, "bus_id": f"0000:{0x18 + index:02x}:00.0", "uuid": f"GPU-{index}", **model, "ecc": ecc}


def _view(*gpus: dict[str, Any]) -> HostView:
    return HostView("h1", {"gpus": {"count": len(gpus), "list": list(gpus)}}, outcomes={"nvml": "ok"})


@pytest.mark.parametrize(("current", "pending", "says"), [
    (False, False, "ECC is off;"),
    (False, True, "ECC is off: on again at the next GPU reset"),
    (False, None, "ECC is off;"),  # a text import reads no pending mode
    (True, False, "set to go off at the next GPU reset"),
])
def test_ecc_off_or_going_off_is_a_warning_on_its_gpu(current: bool, pending: bool | None, says: str) -> None:
    ecc = {"mode_current": current, **({} if pending is None else {"mode_pending": pending})}
    found = list(gpu_health.ecc_disabled(_view(_gpu(0, H100, {"mode_current": True, "mode_pending": True}),
                                               _gpu(3, H100, ecc))))
    assert len(found) == 1
    f = found[0]
    assert (f.id, f.severity, f.action) == ("gpu.ecc.disabled", Severity.WARN, Action.CONFIGURE)
    assert says in f.message
    assert [(d.kind, d.gpu, d.bus_id) for d in f.devices] == [(DeviceKind.GPU, 3, "0000:1b:00.0")]


@pytest.mark.parametrize("gpu", [
    _gpu(0, H100, {"mode_current": True, "mode_pending": True}),  # on, and staying on
    _gpu(0, H100, {"mode_current": True}),  # on, pending not read
    _gpu(0, H100, None),  # NVML refused the reading: not a pass, not a finding (coverage says why)
    _gpu(0, RTX4090, {"mode_current": False, "mode_pending": False}),  # ships with ECC off
])
def test_no_finding_where_ecc_is_on_unknown_or_off_by_the_boards_own_design(gpu: dict[str, Any]) -> None:
    assert list(gpu_health.ecc_disabled(_view(gpu))) == []


def test_a_host_whose_gpus_report_no_mode_is_not_judged_for_it_never_passed() -> None:
    outcomes = {"nvml": "ok"}
    probes = {"nvml": {"outcome": "ok", "reason": "", "duration_s": 0.0}}
    for gpu in (_gpu(0, H100, None), _gpu(0, RTX4090, {"mode_current": False})):
        why = not_judged({"gpus": {"count": 1, "list": [gpu]}}, outcomes, probes)
        assert "ECC mode" in why["gpu.ecc.disabled"]
    judged = not_judged({"gpus": {"count": 1, "list": [_gpu(0, H100, {"mode_current": True})]}}, outcomes, probes)
    assert "gpu.ecc.disabled" not in judged


def _imported(tmp_path: Path, text: str) -> list[dict[str, Any]]:
    fleet = tmp_path / "fleet" / "gpu01"
    fleet.mkdir(parents=True)
    (fleet / "q.txt").write_text(text)
    r = subprocess.run([sys.executable, "-m", "orchestrator", "import", "--fleet", str(fleet.parent), "--results",
                        str(tmp_path / "runs"), "--format", "json"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return [f for f in json.loads(r.stdout)["findings"] if f["id"] == rules.gpu.ECC_DISABLED.id]


def test_a_real_nvidia_smi_q_with_ecc_turned_off_is_found_through_probe_import(tmp_path: Path) -> None:
    real = REAL_Q.read_text()
    ecc_at = real.index("    ECC Mode\n")
    current = real.index("Enabled", ecc_at)
    off = real[:current] + "Disabled" + real[current + len("Enabled"):]
    assert _imported(tmp_path / "as-shipped", real) == []
    found = _imported(tmp_path / "off", off)
    assert len(found) == 1
    f = found[0]
    assert (f["severity"], f["action"], f["because"]) == ("warn", "configure", rules.gpu.ECC_DISABLED.because)
    assert [(d["kind"], d["bus_id"]) for d in f["devices"]] == [("gpu", "0000:00:06.0")]
