"""The nvml probe's health readings against the compiled fake NVML: power limits, clock event
reasons (the R535 name, else the older "Throttle" one), ECC counters by location, PCIe replays and
pending page retirement, with NOT_SUPPORTED where the real library answers it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from orchestrator.engine.payload import build_script
from orchestrator.engine.results import HostInput
from orchestrator.facts.normalize import gpus as norm_gpus
from orchestrator.simulate import fake_nvml
from orchestrator.simulate.cbuild import build_shared_library
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import judge_host
from tests.engine.test_nvml_helpers import needs_gcc, run_probe

pytestmark = needs_gcc


def _gpu(machine: str, bus: str) -> dict:
    env, _ = run_probe("nvml", machine)
    assert env["status"] == "ok", env["errors"]
    facts = norm_gpus.normalize(env["data"])
    return next(dict(g) for g in facts["list"] if g["bus_id"] == bus)


def test_power_limits_and_a_capped_gpu() -> None:
    healthy = _gpu("dgx-h100", "0000:5d:00.0")
    assert healthy["power_limits"] == {"limit_w": 700.0, "default_limit_w": 700.0, "enforced_limit_w": 700.0}
    capped = _gpu("dgx-h100--power-capped", "0000:5d:00.0")
    assert capped["power_limits"]["limit_w"] == 450.0 and capped["power_limits"]["default_limit_w"] == 700.0


def test_clock_event_reasons_are_named_on_the_controller() -> None:
    idle = _gpu("dgx-h100", "0000:ba:00.0")
    assert idle["clock_event_reasons"] == 0x1 and idle["clock_event_reason_names"] == ["gpu_idle"]
    hot = _gpu("dgx-h100--hw-slowdown", "0000:ba:00.0")
    assert hot["clock_event_reason_names"] == ["hw_slowdown", "hw_thermal"] and hot["temperature_c"] == 89


def test_old_driver_answers_through_the_throttle_name_and_has_no_sram_counters() -> None:
    env, _ = run_probe("nvml", "dgx1-v100--old-driver")
    assert "nvmlDeviceGetCurrentClocksEventReasons" not in str(env["data"].get("unknown"))
    g = norm_gpus.normalize(env["data"])["list"][0]
    assert g["clock_event_reasons"] == 0x1  # R410 has only nvmlDeviceGetCurrentClocksThrottleReasons
    assert g["ecc"]["locations"]["sram"] == {"unknown": "NOT_SUPPORTED"}  # Volta: DRAM counters only
    assert g["ecc"]["locations"]["dram"]["volatile_uncorrected"] == 0
    assert g["retired_pages_pending"] is False  # Volta retires pages; Ampere and newer remap rows


def test_ampere_and_newer_answer_not_supported_for_page_retirement() -> None:
    g = _gpu("dgx-h100", "0000:18:00.0")
    assert g["retired_pages_pending"] is None and g["retired_pages_pending_unknown"] == "NOT_SUPPORTED"
    assert set(g["ecc"]["locations"]) == {"dram", "sram"} and g["pcie_replays"] == 0


def test_clock_reason_names_keep_bits_nobody_named() -> None:
    assert norm_gpus.clock_reason_names(0x8 | 0x80 | 0x10000) == ["hw_slowdown", "hw_power_brake", "0x10000"]



def test_driver_library_mismatch_is_its_own_finding(tmp_path: Path) -> None:
    """A fixture whose nvmlInit answers LIB_RM_VERSION_MISMATCH (18), through the judge."""
    spec = fake_nvml.load_machine("dgx-h100")
    spec["init_error"] = "LIB_RM_VERSION_MISMATCH"  # the driver upgraded under a loaded kernel module
    lib = build_shared_library(fake_nvml.C_SOURCE, "fake_nvml_data.h",
                               fake_nvml.render_header(fake_nvml.expand_machine(spec)), "libnvidia-ml.so.1",
                               tmp_path, "dgx-h100--rm-mismatch", ["-O1", "-w"])
    res = subprocess.run([sys.executable, "-"], input=build_script("nvml", {"lib": str(lib)}, 20),
                         capture_output=True, timeout=60)
    env = json.loads(res.stdout)
    assert env["status"] == "unsupported" and "LIB_RM_VERSION_MISMATCH" in env["errors"][0]
    h = HostInput(name="h", address="h", groups=[], data={},
                  probes={"nvml": {"outcome": "unsupported", "reason": env["errors"][0]}})
    _, verdict = judge_host(h, Expectations())
    assert [f.id for f in verdict.findings] == ["gpu.nvml.version_mismatch"]
