"""The remaining issue-18 health checks on pure facts: the GPU recovery action and RESET_REQUIRED
answers, violation time as a share of wall time (since the boot, or between runs of one boot),
thermal margin, persistence mode, partial fabric health masks, nvidia-peermem errors and segfaults
in libnccl/libcuda; and that a host without the readings is "not judged", never passed."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from orchestrator.facts.normalize import kmsg
from orchestrator.facts.normalize.gpus import fabric_health
from orchestrator.verdict.checks import gpu_health, health, nvlink_domain
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.coverage import not_judged
from tests.verdict.test_gpu_health_checks import gpu, run, view

BOOT_S = 1_700_000_000
NOW_US = (BOOT_S + 10_000) * 1_000_000  # 10,000 s after the boot


def violations(thermal_s: float = 0.0, at_us: int = NOW_US, **more: float) -> dict[str, Any]:
    v: dict[str, Any] = {"reference_us": at_us, "power": 0, "thermal": int(thermal_s * 1e9), "sync_boost": 0,
                         "board_limit": 0, "low_utilization": 0, "reliability": 0}
    v.update({k: int(s * 1e9) for k, s in more.items()})
    return v


def with_boot(v: HostView) -> HostView:
    v.facts["kmsg"]["boot_time"] = BOOT_S
    return v


def test_recovery_action_asks_for_a_reset_or_a_reboot() -> None:
    gpus = [gpu(0, recovery_action="NONE"), gpu(1, recovery_action="GPU_RESET"),
            gpu(2, recovery_action="NODE_REBOOT"), gpu(3, recovery_action="DRAIN_AND_RESET")]
    assert run(gpu_health.reset_required, view(gpus)) == [
        ("gpu.reset_required", "fail", "GPU1 (0000:19:00.0)"), ("gpu.reset_required", "fail", "GPU2 (0000:1a:00.0)"),
        ("gpu.reset_required", "warn", "GPU3 (0000:1b:00.0)")]


def _probe_recovery_actions() -> dict[int, str]:
    tree = ast.parse((Path(__file__).resolve().parents[2] / "probes" / "_nvml.py").read_text())
    [table] = [n.value for n in tree.body if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", None) == "RECOVERY_ACTIONS"]
    return ast.literal_eval(table)


def test_every_recovery_action_the_probe_names_is_judged() -> None:
    # nvml.h's nvmlGpuRecoveryAction_t, as the probe decodes it (held to nvidia-ml-py by
    # tests/engine/test_nvml_bindings.py): every action but NONE is a finding with its own words
    actions = _probe_recovery_actions()
    assert {5: "RECOVER_IMEX_DOMAIN", 6: "BUS_RESET", 7: "SYSTEM_REBOOT"}.items() <= actions.items()
    for i, action in sorted(actions.items()):
        found = list(gpu_health.reset_required(view([gpu(0, recovery_action=action)])))
        if action == "NONE":
            assert found == []
            continue
        [f] = found
        assert f.severity.value in ("fail", "warn") and "does not know" not in f.message, (i, action, f.message)


def test_a_recovery_action_this_version_does_not_know_is_never_a_pass() -> None:
    # the probe names a value outside its table "unknown(N)"; later nvml.h releases add actions
    [f] = gpu_health.reset_required(view([gpu(0, recovery_action="unknown(9)"), gpu(1, recovery_action="NONE")]))
    assert (f.severity.value, f.actual) == ("warn", "unknown(9)") and "does not know" in f.message


def test_reset_required_answers_outrank_an_unknown_recovery_action() -> None:
    lost = gpu(0, recovery_action="unknown(9)", power_w=None, unknown={"power_w": "RESET_REQUIRED"})
    [f] = gpu_health.reset_required(view([lost]))
    assert f.severity.value == "fail" and "RESET_REQUIRED" in f.message


def test_reset_required_answers_are_a_finding_of_their_own() -> None:
    lost = gpu(0, power_w=None, unknown={"power_w": "RESET_REQUIRED", "fans": "NOT_SUPPORTED"})
    [f] = gpu_health.reset_required(view([lost, gpu(1)]))
    assert f.severity.value == "fail" and "RESET_REQUIRED for power_w" in f.message


def test_violation_share_since_the_boot_and_between_runs() -> None:
    # 10,000 s since the boot: 50 s thermally limited is 0.5 % (quiet), 300 s is 3 % (a warning)
    assert run(gpu_health.clocks_violation, with_boot(view([gpu(0, violation_ns=violations(50))]))) == []
    [f] = gpu_health.clocks_violation(with_boot(view([gpu(0, violation_ns=violations(300))])))
    assert f.id == "gpu.clocks.violation" and "thermal 3.0% of the time since the boot" in f.message
    # the power policy (SW power cap) is normal operation: never judged
    assert list(gpu_health.clocks_violation(with_boot(view([gpu(0, violation_ns=violations(power=9000))])))) == []
    # between runs of one boot: 300 s old, +20 s in the next 1,000 s is 2 %
    prev = {"gpus": {"list": [gpu(0, violation_ns=violations(300, NOW_US - 1_000_000_000))]}, "kmsg": {"boot_id": "b1"}}
    [f] = gpu_health.clocks_violation(with_boot(view([gpu(0, violation_ns=violations(320))], previous=prev)))
    assert "2.0% of the time since the previous run" in f.message
    # without a boot time and without a previous run there is no time base: not judged, never passed
    v = view([gpu(0, violation_ns=violations(300))])
    assert list(gpu_health.clocks_violation(v)) == []
    assert "boot time is unknown" in not_judged(v.facts, {"nvml": "ok", "kmsg": "ok"}, {})["gpu.clocks.violation"]


def test_thermal_margin_from_nvml_or_from_the_slowdown_threshold() -> None:
    gpus = [gpu(0, thermal={"margin_c": 40, "slowdown_c": 87}), gpu(1, thermal={"margin_c": 3, "slowdown_c": 87}),
            gpu(2, temperature_c=84, thermal={"margin_c": None, "slowdown_c": 87})]
    assert run(gpu_health.thermal_margin, view(gpus)) == [
        ("gpu.thermal.margin_low", "warn", "GPU1 (0000:19:00.0)"), ("gpu.thermal.margin_low", "warn", "GPU2 (0000:1a:00.0)")]


def test_persistence_mode_off_is_named_once_per_host() -> None:
    [f] = gpu_health.persistence_disabled(view([gpu(0, persistence_mode=True), gpu(1, persistence_mode=False),
                                               gpu(2, persistence_mode=False)]))
    assert f.id == "gpu.persistence.disabled" and "2 GPU(s)" in f.message and "GPU2" in f.subject


def test_a_host_without_the_readings_is_not_judged() -> None:
    old = view([gpu(0)])  # a recording of nvml 1.1: no recovery action, violation time, thresholds
    why = not_judged(old.facts, {"nvml": "ok", "kmsg": "ok", "nvlink": "ok"}, {})
    for fid in ("gpu.reset_required", "gpu.clocks.violation", "gpu.thermal.margin_low", "gpu.persistence.disabled",
                "nvlink.fabric.degraded"):
        assert fid in why, fid
    new = view([gpu(0, recovery_action="NONE", persistence_mode=True, thermal={"margin_c": 40},
                    violation_ns=violations(), fabric={"state": "completed", "health": fabric_health(0x1AA)})])
    new.facts["kmsg"]["boot_time"] = BOOT_S
    judged = not_judged(new.facts, {"nvml": "ok", "kmsg": "ok", "nvlink": "ok"}, {})
    assert not {"gpu.reset_required", "gpu.clocks.violation", "gpu.thermal.margin_low", "gpu.persistence.disabled",
                "nvlink.fabric.degraded"} & set(judged)


def test_fabric_health_mask_fields_by_name() -> None:
    # 0x1AA: every flag "false" and incorrect_configuration "none", as a healthy R580 GPU answers
    assert fabric_health(0x1AA) == {"degraded_bw": "false", "route_recovery": "false", "route_unhealthy": "false",
                                    "access_timeout_recovery": "false", "incorrect_configuration": "none"}
    assert fabric_health(0x1A9)["degraded_bw"] == "true"
    assert fabric_health(4 << 8)["incorrect_configuration"] == "no_partition"


def test_partial_fabric_health_is_judged_per_gpu() -> None:
    def fab(mask: int) -> dict[str, Any]:
        return {"state": "completed", "status": "SUCCESS", "cluster_uuid": "0" * 32, "clique_id": 0,
                "health_mask": mask, "health": fabric_health(mask), "health_summary": "healthy"}
    gpus = [gpu(0, fabric=fab(0x1AA)), gpu(1, fabric=fab(0x1A9)), gpu(2, fabric=fab(0x1AA & ~0x30 | 0x10)),
            gpu(3, fabric=fab(0xAA | (4 << 8))), gpu(4, fabric=fab(0))]
    assert run(nvlink_domain.fabric_degraded, view(gpus)) == [
        ("nvlink.fabric.degraded", "fail", "GPU2 (0000:1a:00.0)"), ("nvlink.fabric.degraded", "fail", "GPU3 (0000:1b:00.0)"),
        ("nvlink.fabric.degraded", "warn", "GPU1 (0000:19:00.0)")]


PEERMEM = "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing"
SEGV = ("pt_main_thread[2536443]: segfault at 7f797fe00000 ip 00007f7c7ac5b8a4 sp 00007ffd7f2c7e20 error 4 in "
        "libnccl.so.2[7f7c7a400000+11c00000]")


def kmsg_view(*lines: tuple[float, str], previous: dict[str, Any] | None = None) -> HostView:
    data = {"readable": True, "source": "kmsg", "boot_id": "b1", "attempts": [],
            "lines": [{"t": t, "m": m, "msg": m} for t, m in lines]}
    return HostView(name="h1", facts={"kmsg": dict(kmsg.normalize(data))}, outcomes={"kmsg": "ok"}, previous=previous)


def test_peermem_errors_and_gpu_library_segfaults_from_the_kernel_log() -> None:
    v = kmsg_view((10.0, PEERMEM), (11.0, PEERMEM), (20.0, SEGV))
    [pm] = health.peermem_errors(v)
    assert pm.id == "gpu.gdr.peermem_error" and "2 in this boot" in pm.message
    [sg] = health.gpu_library_segfaults(v)
    assert (sg.id, sg.subject) == ("host.segfault.gpu_library", "libnccl.so.2") and "pt_main_thread[2536443]" in sg.message
    # the next run of the same boot: the same events are "still present", not new
    again = kmsg_view((10.0, PEERMEM), (11.0, PEERMEM), (20.0, SEGV), previous=v.facts)
    [pm2] = health.peermem_errors(again)
    assert "still present" in pm2.message and pm2.actual["new"] == 0
    assert list(health.peermem_errors(kmsg_view((1.0, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module")))) == []
