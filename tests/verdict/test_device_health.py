"""Each device's health from the findings' devices (issue 47 item 6, verdict/device_health.py):
failed by a fail finding, degraded by a warn one, ok where its probe ran and nothing worse names
it, not judged where its probe did not run (never ok from absence)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.verdict import rules
from orchestrator.verdict.device_health import (
    JUDGED_BY,
    DeviceState,
    device_health,
    without_verdict,
)
from orchestrator.verdict.findings import Device, DeviceKind, Finding, Kind, Severity, gpu_device, gpu_pair

ALL_RAN = {"nvml": "ok", "nvlink": "ok", "nic": "ok", "pcie": "ok", "kmsg": "ok"}
GPU2 = {"index": 2, "bus_id": "0000:3a:00.0", "uuid": "GPU-3c6359e8-42c6-eaba-60f0-14aa1fb139eb"}
GPU0 = {"index": 0, "bus_id": "0000:18:00.0", "uuid": "GPU-0034a892-d3ea-9274-b02f-3feb90252679"}


def finding(fid: str, severity: Severity, *devices: Device, kind: Kind = Kind.FAULT) -> Finding:
    return Finding(fid, severity, kind, "h", "subject", "message", devices=devices)


def test_every_device_kind_has_the_probe_that_judges_it() -> None:
    assert set(JUDGED_BY) == set(DeviceKind)


# A finding names GPU2 by whichever identifiers its check had: a text import knows only the index,
# sysfs writes bus ids in capitals, a kernel-log line names a bus id alone.
NAMED_GPU2 = [
    gpu_device(GPU2),
    Device(DeviceKind.GPU, bus_id="0000:3a:00.0"),
    Device(DeviceKind.GPU, bus_id="0000:3A:00.0"),
    Device(DeviceKind.GPU, gpu=2),
    Device(DeviceKind.GPU, uuid=GPU2["uuid"]),
    Device(DeviceKind.NVLINK, gpu=2, bus_id="0000:3a:00.0", link=6),
]


@pytest.mark.parametrize("device", NAMED_GPU2, ids=lambda d: str(d.to_dict()))
def test_a_fail_finding_fails_the_gpu_it_names_however_it_names_it(device: Device) -> None:
    devs = device_health([finding(rules.nvlink.LINK_DOWN.id, Severity.FAIL, device)], ALL_RAN)
    h = devs.gpu(GPU2)
    assert h.state is DeviceState.FAILED and h.findings == (rules.nvlink.LINK_DOWN.id,)
    assert h.text() == "failed: nvlink.link.down"
    assert devs.gpu(GPU0).state is DeviceState.OK  # its neighbour is not blamed


@pytest.mark.parametrize("severity, state", [(Severity.FAIL, DeviceState.FAILED), (Severity.WARN, DeviceState.DEGRADED),
                                             (Severity.INFO, DeviceState.OK)])
def test_severity_decides_the_state_and_info_leaves_it_ok(severity: Severity, state: DeviceState) -> None:
    f = finding(rules.gpu.MIG_ENABLED.id, severity, gpu_device(GPU0), kind=Kind.PLATFORM_LIMITATION)
    assert device_health([f], ALL_RAN).gpu(GPU0).state is state


def test_the_worst_finding_wins_and_every_one_is_named_worst_first() -> None:
    fs = [finding(rules.sensor.FAN_ZERO_WHILE_HOT.id, Severity.WARN, gpu_device(GPU2)),
          finding(rules.nvlink.LINK_DOWN.id, Severity.FAIL, gpu_device(GPU2)),
          finding(rules.gpu.MIG_ENABLED.id, Severity.INFO, gpu_device(GPU2))]
    h = device_health(fs, ALL_RAN).gpu(GPU2)
    assert h.state is DeviceState.FAILED
    assert h.findings == (rules.nvlink.LINK_DOWN.id, rules.sensor.FAN_ZERO_WHILE_HOT.id)


# Not measured is not ok: the probe that judges GPUs skipped, not run at all, timed out, failed.
@pytest.mark.parametrize("nvml, why", [(None, "nvml not run"), ("skipped", "nvml not run"),
                                       ("timeout", "nvml timeout"), ("failed", "nvml failed"),
                                       ("unreachable", "nvml unreachable")])
def test_gpus_whose_nvml_probe_did_not_run_are_not_judged(nvml: str | None, why: str) -> None:
    probes = {p: o for p, o in ALL_RAN.items() if p != "nvml"} | ({"nvml": nvml} if nvml else {})
    devs = device_health([], probes)
    assert devs.gpu(GPU0).state is DeviceState.NOT_JUDGED
    assert devs.gpu(GPU0).text() == f"not judged ({why})"
    # a fault found by another probe (the kernel log's Xid) still shows: a finding beats absence
    xid = device_health([finding(rules.gpu.XID.id, Severity.FAIL, Device(DeviceKind.GPU, bus_id=GPU2["bus_id"]))],
                        probes)
    assert xid.gpu(GPU2).state is DeviceState.FAILED


def test_without_a_verdict_nothing_is_ok() -> None:
    devs = without_verdict()
    assert {devs.gpu(GPU0).state, devs.gpu_links(GPU0).state, devs.nic("mlx5_0").state,
            devs.nic_port("mlx5_0", 1).state, devs.pcie(GPU0["bus_id"]).state} == {DeviceState.NOT_JUDGED}


def test_nothing_marks_a_device_from_a_finding_that_names_none_or_names_the_fabric() -> None:
    fs = [finding(rules.host.DRIVER_VERSION.id, Severity.FAIL),
          finding(rules.fabric.RAIL_SLOW.id, Severity.FAIL, Device(DeviceKind.RAIL, rail=2)),
          finding(rules.fabric.PATH_SLOW.id, Severity.FAIL, Device(DeviceKind.PEER_HOST, nic="mlx5_0", host="peer"))]
    devs = device_health(fs, ALL_RAN)
    assert devs.gpu(GPU0).state is devs.nic("mlx5_0").state is devs.nic_port("mlx5_0", 1).state is DeviceState.OK


def test_a_nic_port_fault_is_its_adapters_not_its_sibling_ports() -> None:
    port = Device(DeviceKind.NIC_PORT, nic="mlx5_3", port=1, bus_id="0000:5e:00.0")
    devs = device_health([finding(rules.nic.PORT_DOWN.id, Severity.FAIL, port)], ALL_RAN)
    assert devs.nic_port("mlx5_3", 1).state is DeviceState.FAILED
    assert devs.nic_port("mlx5_3", 2).state is DeviceState.OK
    assert devs.nic("mlx5_3").state is devs.nic(None, "0000:5E:00.0").state is DeviceState.FAILED
    assert devs.pcie("0000:5e:00.0").state is DeviceState.FAILED
    assert devs.nic("mlx5_4").state is DeviceState.OK
    # an adapter-wide finding shows on each of its ports
    whole = device_health([finding(rules.software.SECURITY_FIRMWARE.id, Severity.WARN,
                                   Device(DeviceKind.NIC, nic="mlx5_3", bus_id="0000:5e:00.0"))], ALL_RAN)
    assert whole.nic_port("mlx5_3", 1).state is whole.nic_port("mlx5_3", 2).state is DeviceState.DEGRADED
    assert device_health([], {**ALL_RAN, "nic": "timeout"}).nic_port("mlx5_3", 1).state is DeviceState.NOT_JUDGED


# Every rule that judges NVLink: the nvlink.* area, and one of another area that reads the nvlink section.
@pytest.mark.parametrize("fid", [rules.nvlink.LINK_DOWN.id, rules.nvlink.FABRIC_INCOMPLETE.id,
                                 rules.nvlink.FABRIC_DEGRADED.id, rules.gpu.NVLINK_ERRORS.id])
def test_an_nvlink_bond_of_a_gpu_with_links_down_is_degraded_not_ok_and_not_failed(fid: str) -> None:
    devs = device_health([finding(fid, Severity.FAIL, gpu_device(GPU2))], ALL_RAN)
    bond = devs.nvlink_pair(GPU0, GPU2)
    assert bond.state is DeviceState.DEGRADED and bond.findings == (fid,)
    assert devs.nvlink_pair(GPU2, GPU0) == bond
    assert devs.gpu_links(GPU2).state is DeviceState.FAILED
    gpu1 = {"index": 1, "bus_id": "0000:2a:00.0"}
    assert devs.nvlink_pair(GPU0, gpu1).state is DeviceState.OK


@pytest.mark.parametrize("fid", [rules.sensor.FAN_ZERO_WHILE_HOT.id, rules.gpu.XID.id, rules.pcie.LINK_DOWNGRADED.id])
def test_a_gpu_fault_that_is_no_nvlink_judgement_leaves_its_bonds_sound(fid: str) -> None:
    devs = device_health([finding(fid, Severity.FAIL, gpu_device(GPU2))], ALL_RAN)
    assert devs.gpu(GPU2).state is DeviceState.FAILED
    assert devs.gpu_links(GPU2).state is DeviceState.OK
    assert devs.nvlink_pair(GPU0, GPU2).state is DeviceState.OK


def test_a_pair_is_the_pairs_own_and_fails_its_bond_only_when_an_nvlink_rule_says_so() -> None:
    slow = finding(rules.p2p.BANDWIDTH_LOW.id, Severity.FAIL, gpu_pair(GPU0, GPU2))
    devs = device_health([slow], ALL_RAN)
    assert devs.gpu(GPU0).state is devs.gpu(GPU2).state is DeviceState.OK  # which end is at fault: unknown
    assert devs.nvlink_pair(GPU0, GPU2).state is DeviceState.OK
    mism = finding(rules.nvlink.P2P_STATUS_MISMATCH.id, Severity.FAIL, gpu_pair(GPU0, GPU2))
    assert device_health([mism], ALL_RAN).nvlink_pair(GPU2, GPU0).state is DeviceState.FAILED


def test_nvlinks_not_probed_are_not_judged_and_a_link_is_marked_by_its_own_finding() -> None:
    assert device_health([], {**ALL_RAN, "nvlink": "skipped"}).gpu_links(GPU0).state is DeviceState.NOT_JUDGED
    link = Device(DeviceKind.NVLINK, gpu=2, bus_id=GPU2["bus_id"], link=6)
    devs = device_health([finding(rules.gpu.NVLINK_ERRORS.id, Severity.WARN, link)], ALL_RAN)
    assert devs.nvlink(GPU2, 6).state is DeviceState.DEGRADED
    assert devs.nvlink(GPU2, 7).state is DeviceState.OK
    assert devs.gpu_links(GPU2).state is devs.gpu(GPU2).state is DeviceState.DEGRADED


def _record(**kw: Any) -> dict[str, Any]:
    return kw


@pytest.mark.parametrize("record", [_record(), _record(index=True), _record(bus_id=""), _record(bus_id=7),
                                    _record(uuid=None), _record(index="2")])
def test_a_gpu_record_without_a_usable_identifier_matches_no_finding(record: dict[str, Any]) -> None:
    devs = device_health([finding(rules.nvlink.LINK_DOWN.id, Severity.FAIL, gpu_device(GPU2))], ALL_RAN)
    assert devs.gpu(record).state is DeviceState.OK
