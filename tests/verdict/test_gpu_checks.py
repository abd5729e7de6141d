"""GPU/NVLink checks on facts from real probe runs against the fake NVML fixtures."""

from __future__ import annotations

import copy

import pytest

from orchestrator.verdict.checks import gpu as gpu_checks
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import Kind, Severity
from tests.engine.test_nvml_helpers import findings, host_facts, needs_gcc, view_of

pytestmark = needs_gcc

HEALTHY = ["dgx-h100", "lenovo-8xh100-cx7", "dgx-a100", "dgx1-v100", "consumer-8x4090", "ws-4xa6000"]

# machine -> the exact set of (id, severity, kind, subject) its fail/warn findings must be
FAULTS = {
    "dgx-h100--links-down": {("nvlink.link.down", "fail", "fault", "GPU2 (0000:3a:00.0)")},
    "dgx-a100--gpu-lost": {("gpu.lost", "fail", "fault", "GPU5 (0000:90:00.0)")},
    "consumer-8x4090--fan-zero": {("sensor.fan.zero_while_hot", "warn", "fault", "GPU2 (0000:41:00.0)")},
    "dgx-a100--row-remap-pending": {("gpu.row_remap.pending", "warn", "fault", "GPU3 (0000:4e:00.0)"),
                                    ("gpu.row_remap.failure", "fail", "fault", "GPU3 (0000:4e:00.0)")},
    "dgx-h100--fabric-incomplete": {("nvlink.fabric.incomplete", "fail", "fault", "GPU5 (0000:ab:00.0)")},
    "dgx1-v100--old-driver": set(),  # unknown fields, no verdicts
    "dgx-h100--gpu-gen1x8": set(),  # a PCIe finding (pcie.link.downgraded), not a GPU one
}


def _key(f):
    return (f.id, f.severity.value, f.kind.value, f.subject)


@pytest.mark.parametrize("machine", HEALTHY)
def test_healthy_fixture_has_no_findings(machine):
    assert [_key(f) for f in findings(view_of(machine))] == []


@pytest.mark.parametrize("machine", sorted(FAULTS))
def test_fault_fixture_yields_exactly_its_findings(machine):
    got = {_key(f) for f in findings(view_of(machine)) if f.severity != Severity.INFO}
    assert got == FAULTS[machine]


def test_single_h200_vm_yields_what_the_real_one_did():
    # tools/devcheck/nvml_check.py on the real H200 (pass-through VM, R580) produced exactly these
    fs = findings(view_of("vm-1xh200"))
    assert [(f.id, f.severity.value, f.kind.value) for f in fs] == [
        ("nvlink.link.down", "info", "platform_limitation"), ("gpu.virtualization", "info", "platform_limitation")]


def test_links_down_names_the_links():
    (f,) = findings(view_of("dgx-h100--links-down"))
    assert "6, 13" in f.message and f.expected == 18 and f.actual == 16


def test_vm_with_mig_reports_platform_limitations_only():
    fs = findings(view_of("vm-2xa100"))
    assert {(f.id, f.kind) for f in fs} == {("gpu.mig.enabled", Kind.PLATFORM_LIMITATION),
                                            ("gpu.virtualization", Kind.PLATFORM_LIMITATION)}
    assert all(f.severity == Severity.INFO for f in fs)
    strict = findings(view_of("vm-2xa100", expect=Expectations(mig=False, virtualization="none")))
    assert {f.severity for f in strict} == {Severity.WARN}
    assert all(f.kind == Kind.PLATFORM_LIMITATION for f in strict)


def test_gpu_missing_from_nvml_but_on_the_bus():
    facts = host_facts("dgx-h100--gpu-missing-driver")
    bus = host_facts("dgx-h100")["gpus"]["order"]
    facts["pcie"] = {"gpus": bus, "nics": [], "gpu_counts": {
        "pci": 8, "proc": 7, "dev": 7, "driver_loaded": True, "missing_from_proc": ["0000:ba:00.0"],
        "missing_from_dev": ["0000:ba:00.0"], "proc_not_on_pci": [], "passthrough": []}}
    fs = findings(view_of("dgx-h100--gpu-missing-driver", facts))
    assert [_key(f) for f in fs] == [("gpu.count.pci_vs_nvml", "fail", "fault", "0000:ba:00.0")]
    assert "0000:ba:00.0" in fs[0].message and "/proc/driver/nvidia" in fs[0].message
    counted = findings(view_of("dgx-h100--gpu-missing-driver", facts, Expectations(gpu_count=8)))
    assert {f.id for f in counted} == {"gpu.count.pci_vs_nvml", "gpu.count.mismatch"}
    # without the PCIe facts the NVML-only view cannot know: nothing is claimed
    assert findings(view_of("dgx-h100--gpu-missing-driver")) == []


def test_gpu_model_expectation():
    fs = findings(view_of("dgx-a100", expect=Expectations(gpu_model="H100")))
    assert len(fs) == 8 and {f.id for f in fs} == {"gpu.model.mismatch"}
    assert findings(view_of("dgx-a100", expect=Expectations(gpu_model="a100"))) == []


def test_nvlink_up_but_p2p_status_not_ok():
    facts = copy.deepcopy(host_facts("dgx-h100"))
    facts["gpus"]["p2p"]["nvlink"][1][6] = "NS"
    fs = findings(view_of("dgx-h100", facts))
    assert [_key(f) for f in fs] == [("nvlink.p2p_status_mismatch", "fail", "fault",
                                      "GPU1<->GPU6 (0000:2a:00.0 / 0000:ba:00.0)")]
    # the same on a MIG GPU is a platform limitation, never a fault
    facts["gpus"]["list"][1]["mig"] = {"current": True, "pending": True, "instances": []}
    kinds = {(f.id, f.kind) for f in findings(view_of("dgx-h100", facts))}
    assert ("nvlink.p2p_status_mismatch", Kind.PLATFORM_LIMITATION) in kinds
    assert all(k != Kind.FAULT for _, k in kinds)


def test_links_down_under_mig_is_a_limitation():
    facts = copy.deepcopy(host_facts("dgx-h100--links-down"))
    facts["gpus"]["list"][2]["mig"] = {"current": True, "pending": True, "instances": [{"index": 0}]}
    fs = [f for f in findings(view_of("x", facts)) if f.id == "nvlink.link.down"]
    assert len(fs) == 1 and fs[0].kind == Kind.PLATFORM_LIMITATION and fs[0].severity == Severity.INFO


def test_nvlink_expectation_overrides_model():
    fs = findings(view_of("dgx-a100", expect=Expectations(nvlink_links_per_gpu=18)))
    assert len(fs) == 8 and all(f.id == "nvlink.link.down" and f.actual == 12 for f in fs)


def test_fan_not_reporting_on_actively_cooled_board():
    facts = copy.deepcopy(host_facts("consumer-8x4090"))
    g = facts["gpus"]["list"][4]
    g["fans"], g["fans_unknown"] = None, "NOT_SUPPORTED"
    fs = findings(view_of("consumer-8x4090", facts))
    assert [_key(f) for f in fs] == [("sensor.fan.not_reporting", "warn", "fault", "GPU4 (0000:81:00.0)")]


def test_fan_zero_when_cool_is_fine():
    facts = copy.deepcopy(host_facts("consumer-8x4090"))
    facts["gpus"]["list"][0]["fans"] = [{"index": 0, "speed_pct": 0}]
    assert findings(view_of("consumer-8x4090", facts)) == []  # 41 °C: idle fan stop is normal


def test_checks_skip_when_probe_did_not_run():
    view = view_of("dgx-h100--links-down")
    view.outcomes = {"nvml": "failed", "nvlink": "timeout"}
    assert findings(view) == []


def _fleet(*hosts):
    return [f for check in gpu_checks.FLEET_CHECKS for f in check(list(hosts))]


def test_fleet_identities_unique_with_distinct_seeds():
    a = view_of("dgx-h100", host_facts("dgx-h100", seed="host-a"), name="a")
    b = view_of("dgx-h100", host_facts("dgx-h100", seed="host-b"), name="b")
    assert _fleet(a, b) == []


def test_fleet_duplicate_uuid_and_serial_named_on_both_hosts():
    a = view_of("dgx-h100", host_facts("dgx-h100", seed="same"), name="a")
    b = view_of("dgx-h100", host_facts("dgx-h100", seed="same"), name="b")
    fs = _fleet(a, b)
    ids = {f.id for f in fs}
    assert ids == {"identity.uuid.duplicate", "identity.gpu_serial.duplicate"}
    uuid_f = [f for f in fs if f.id == "identity.uuid.duplicate"]
    assert len(uuid_f) == 16 and {f.host for f in uuid_f} == {"a", "b"}
    # one UUID once on each of two hosts: which one lied cannot be told, so neither is failed (issue 47)
    assert all(f.kind == Kind.UNKNOWN and f.severity == Severity.WARN for f in fs)
    # consumer boards have no serial: missing serials are never "duplicates"
    c = view_of("consumer-8x4090", host_facts("consumer-8x4090", seed="same"), name="c")
    d = view_of("consumer-8x4090", host_facts("consumer-8x4090", seed="same"), name="d")
    assert {f.id for f in _fleet(c, d)} == {"identity.uuid.duplicate"}


def test_zero_fans_reported_on_actively_cooled_board():
    facts = copy.deepcopy(host_facts("consumer-8x4090"))
    facts["gpus"]["list"][7]["fans"] = []
    fs = findings(view_of("consumer-8x4090", facts))
    assert [_key(f) for f in fs] == [("sensor.fan.not_reporting", "warn", "fault", "GPU7 (0000:e1:00.0)")]


def test_fabric_state_not_supported_is_no_finding():
    # what a real single H200 in a pass-through VM answered (driver 580): call SUCCESS, state 0
    facts = copy.deepcopy(host_facts("dgx-h100"))
    for g in facts["gpus"]["list"]:
        g["fabric"] = {"state": "not_supported", "status": "SUCCESS", "clique_id": 0, "health_summary": None}
    assert findings(view_of("dgx-h100", facts)) == []


def test_fabric_message_says_unknown_as_question_mark_never_none():
    facts = copy.deepcopy(host_facts("dgx-h100"))
    facts["gpus"]["list"][5]["fabric"] = {"state": "in_progress", "status": "SUCCESS", "clique_id": 0,
                                          "health_summary": None}
    [f] = findings(view_of("dgx-h100", facts))
    assert f.id == "nvlink.fabric.incomplete" and "None" not in f.message and "health not reported" in f.message
