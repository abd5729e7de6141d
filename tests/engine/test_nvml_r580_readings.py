"""The nvml probe's issue-18 readings against the compiled fake NVML: violation time, temperature
thresholds and margin (a versioned struct), the GPU recovery action field and the fabric health
mask on an R580 driver; on older drivers the same readings are unknown with NVML's reason (the
symbol or the field id does not exist), never healthy."""

from __future__ import annotations

from orchestrator.facts.normalize import gpus as norm_gpus
from orchestrator.verdict.checks import gpu_health, nvlink_domain
from orchestrator.verdict.checks.base import HostView
from tests.engine.test_nvml_helpers import needs_gcc, run_probe

pytestmark = needs_gcc


def _gpus(machine: str) -> list[dict]:
    env, _ = run_probe("nvml", machine)
    assert env["status"] == "ok", env["errors"]
    return [dict(g) for g in norm_gpus.normalize(env["data"])["list"]]


def test_r580_readings_of_a_healthy_gpu() -> None:
    g = _gpus("dgx-h100--r580")[0]
    assert g["recovery_action"] == "NONE"
    assert g["thermal"] == {"slowdown_c": 87, "shutdown_c": 92, "margin_c": 87 - 33}
    v = g["violation_ns"]
    assert v["thermal"] == 0 and v["power"] == 0 and isinstance(v["reference_us"], int) and v["reference_us"] > 0
    assert g["fabric"]["health_mask"] == 0x1AA and set(g["fabric"]["health"].values()) == {"false", "none"}


def test_the_inforom_image_is_read_and_a_board_without_one_says_so() -> None:
    assert {g["inforom_image"] for g in _gpus("dgx-h100")} == {"G520.0200.00.05"}
    [consumer] = {g["inforom_image_unknown"] for g in _gpus("consumer-8x4090")}
    assert consumer == "NOT_SUPPORTED"


def test_old_drivers_answer_unknown_not_healthy() -> None:
    r550 = _gpus("dgx-h100")[0]
    # the recovery action field is R570+: the R550 library rejects the field id
    assert r550["recovery_action"] is None and r550["recovery_action_unknown"] == "INVALID_ARGUMENT"
    assert r550["thermal"]["margin_c"] is None and r550["thermal"]["unknown"]["margin_c"] == "FUNCTION_NOT_FOUND"
    r410 = _gpus("dgx1-v100--old-driver")[0]
    assert r410["recovery_action"] is None and r410["fabric"] is None


def test_each_r580_fault_raises_its_finding_through_the_checks() -> None:
    gpus = _gpus("dgx-h100--r580-health")
    facts = {"gpus": {"list": gpus}, "kmsg": {"boot_id": "b1", "boot_time": 1}}
    v = HostView(name="h", facts=facts, outcomes={"nvml": "ok", "kmsg": "ok"})
    got = sorted((f.id, f.subject.split(" ")[0]) for check in (gpu_health.reset_required, gpu_health.thermal_margin,
                                                               gpu_health.persistence_disabled,
                                                               nvlink_domain.fabric_degraded)
                 for f in check(v))
    assert got == [("gpu.persistence.disabled", "GPU2"), ("gpu.reset_required", "GPU0"), ("gpu.reset_required", "GPU5"),
                   ("gpu.thermal.margin_low", "GPU1"), ("nvlink.fabric.degraded", "GPU4")]
    thermal = gpus[3]["violation_ns"]["thermal"]
    assert thermal == 900 * 10**9  # 900 s thermally limited, cumulative since the driver loaded
    healthy = HostView(name="h", facts={"gpus": {"list": _gpus("dgx-h100--r580")}, "kmsg": {"boot_id": "b1"}},
                       outcomes={"nvml": "ok"})
    assert [f.id for c in gpu_health.CHECKS + nvlink_domain.CHECKS for f in c(healthy)] == []
