"""orchestrator/verdict/checks/host.py on facts normalized from the demo recordings, altered the way real
faults alter them."""

from __future__ import annotations

import copy
from typing import Any

from orchestrator.verdict.checks import host as host_checks
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.expectations import Expectations
from tests.verdict.test_verdict_demo import recorded_facts

ALL_OK = {"host": "ok", "pcie": "ok", "nvml": "ok", "nvlink": "ok"}


def _view(name: str, facts: dict[str, Any], **expect: Any) -> HostView:
    return HostView(name=name, facts=facts, outcomes=dict(ALL_OK), expect=Expectations.from_mapping(expect))


def _run(view: HostView) -> list[tuple[str, str, str, str]]:
    return [(f.id, f.severity.value, f.kind.value, f.subject) for c in host_checks.CHECKS for f in c(view)]


def test_healthy_machines_raise_nothing_with_their_true_expectations() -> None:
    assert _run(_view("h", recorded_facts("dgx-h100-01"), board_vendor="NVIDIA", board_model="DGXH100",
                      virtualization="none", driver_min="535", driver_max="560", nvswitch_count=4, nic_count=8)) == []
    assert _run(_view("a", recorded_facts("dgx-a100-01"), nvswitch_count=6, nic_count=10)) == []
    assert _run(_view("v", recorded_facts("dgx1-v100-01"), nvswitch_count=0)) == []  # TNS across sockets is by design


def test_board_mismatch_names_the_field() -> None:
    got = _run(_view("h", recorded_facts("lenovo-h100-01"), board_vendor="NVIDIA", board_model="DGXH100"))
    assert got == [("host.board.mismatch", "fail", "fault", "board vendor"),
                   ("host.board.mismatch", "fail", "fault", "board model")]


def test_serial_readable_by_root_only_is_unknown_not_absent() -> None:
    facts = recorded_facts("dgx-h100-01")
    facts["host"]["board"]["system_serial"] = {"unknown": "needs root"}
    assert _run(_view("h", facts)) == [("identity.serial.needs_root", "info", "unknown", "system serial")]


def test_virtualized_host_is_a_limitation_unless_bare_metal_was_required() -> None:
    facts = recorded_facts("vm-a100-01")
    relaxed = [f for f in _run(_view("vm", facts)) if f[0] == "host.virtualized"]
    strict = [f for f in _run(_view("vm", facts, virtualization="none")) if f[0] == "host.virtualized"]
    assert relaxed == [("host.virtualized", "info", "platform_limitation", "platform")]
    assert strict == [("host.virtualized", "fail", "fault", "platform")]


def test_driver_missing_and_driver_version_bounds() -> None:
    facts = recorded_facts("dgx1-v100-02")  # R410
    assert _run(_view("old", facts, driver_min="450.80")) == [("host.driver.version", "fail", "fault", "nvidia driver")]
    assert _run(_view("old", facts, driver_max="400")) == [("host.driver.version", "warn", "fault", "nvidia driver")]
    assert _run(_view("old", facts, driver_min="410.129", driver_max="410.129")) == []
    gone = copy.deepcopy(recorded_facts("dgx-h100-01"))
    gone["host"]["driver"] = {"loaded": False, "version": None}
    assert _run(_view("h", {"host": gone["host"]}, gpu_count=8)) == [
        ("host.driver.missing", "fail", "fault", "nvidia driver")]
    assert _run(_view("h", {"host": gone["host"]})) == []  # a CPU node need not have a driver


def test_duplicate_hostnames_and_system_serials_across_the_fleet() -> None:
    a, b, c = recorded_facts("dgx-h100-01"), recorded_facts("dgx-h100-02"), recorded_facts("dgx-h100-03")
    b["host"]["hostname"] = a["host"]["hostname"]
    c["host"]["board"]["system_serial"] = a["host"]["board"]["system_serial"]
    views = [_view("a", a), _view("b", b), _view("c", c)]
    got = sorted((f.id, f.host, f.severity.value) for f in host_checks.duplicate_identities(views))
    assert got == [("identity.hostname.duplicate", "a", "warn"), ("identity.hostname.duplicate", "b", "warn"),
                   ("identity.system_serial.duplicate", "a", "warn"),  # which lied is unknown (issue 47)
                   ("identity.system_serial.duplicate", "c", "warn")]
    assert list(host_checks.duplicate_identities([*views[:1], _view("d", recorded_facts("dgx-a100-01"))])) == []


def test_nvswitch_count_and_switches_hidden_from_the_bus() -> None:
    facts = recorded_facts("dgx-h100-01")
    assert _run(_view("h", facts, nvswitch_count=6)) == [("nvlink.nvswitch.count", "fail", "fault", "NVSwitches")]
    hidden = copy.deepcopy(facts)
    hidden["pcie"]["nvswitches"] = []
    assert _run(_view("h", hidden)) == [("nvlink.nvswitch.hidden", "info", "platform_limitation", "NVSwitches")]
    vm = recorded_facts("vm-a100-01")
    assert [f for f in _run(_view("vm", vm, nvswitch_count=6)) if f[0].startswith("nvlink")] == [
        ("nvlink.nvswitch.count", "info", "platform_limitation", "NVSwitches")]


def test_nic_count_against_the_expectation() -> None:
    facts = recorded_facts("ws-a6000-01")
    assert _run(_view("ws", facts, nic_count=1)) == []
    assert _run(_view("ws", facts, nic_count=2)) == [("pcie.nic.count", "fail", "fault", "NICs")]
    assert _run(_view("ws", facts, nic_count=0)) == [("pcie.nic.count", "warn", "fault", "NICs")]


def test_p2p_refused_is_a_fault_on_capable_bare_metal_and_a_limitation_elsewhere() -> None:
    facts = recorded_facts("dgx-a100-01")
    read = facts["gpus"]["p2p"]["read"]
    for i in range(len(read)):
        for j in range(len(read)):
            if i != j and 4 in (i, j):
                read[i][j] = "NS"  # one GPU refused P2P with everyone (e.g. ACS / IOMMU on its port)
    got = _run(_view("a", facts))
    assert got == [("p2p.status.disabled", "warn", "fault", "GPU pairs")]
    [f] = host_checks.p2p_status(_view("a", facts))
    assert f.actual == {"NS": 7} and "7 of 28" in f.message
    assert _run(_view("r", recorded_facts("rtx4090-01"))) == [
        ("p2p.status.disabled", "info", "platform_limitation", "GPU pairs")]
    assert [f for f in _run(_view("vm", recorded_facts("vm-a100-01"))) if f[0] == "p2p.status.disabled"] == [
        ("p2p.status.disabled", "info", "platform_limitation", "GPU pairs")]


def test_checks_stay_silent_when_their_probe_did_not_run() -> None:
    facts = recorded_facts("dgx-a100-01")
    facts["gpus"]["p2p"]["read"][0][1] = "NS"
    facts["gpus"]["p2p"]["read"][1][0] = "NS"
    view = HostView(name="a", facts=facts, outcomes={"host": "ok", "pcie": "timeout", "nvml": "failed", "nvlink": "ok"},
                    expect=Expectations(nic_count=3, nvswitch_count=6))
    assert _run(view) == []


def test_a_vm_that_masks_its_hypervisor_is_caught_by_its_emulated_pci_bus() -> None:
    facts = recorded_facts("vm-a100-01")
    facts["host"]["virtualization"] = {"virtualized": False, "hypervisor": None, "container": None, "evidence": []}
    masked = [f for f in _run(_view("vm", facts)) if f[0] == "host.virtualized"]
    assert masked == [("host.virtualized", "warn", "platform_limitation", "platform")]
    strict = [f for f in _run(_view("vm", facts, virtualization="none")) if f[0] == "host.virtualized"]
    assert strict == [("host.virtualized", "fail", "fault", "platform")]
    bare = recorded_facts("dgx-h100-01")
    assert [f for f in _run(_view("h", bare, virtualization="none")) if f[0] == "host.virtualized"] == []


def test_placeholder_serials_are_not_identities_and_big_duplicate_groups_stay_readable() -> None:
    def view(i: int, hostname: str, serial: str) -> HostView:
        return HostView(name=f"n{i:04d}", facts={"host": {"hostname": hostname, "board": {"system_serial": serial}}})

    fillers = ["To Be Filled By O.E.M.", "Default string", "0000000000", "N/A", "System Serial Number"]
    views = [view(i, f"host{i}", fillers[i % len(fillers)]) for i in range(10)]
    assert list(host_checks.duplicate_identities(views)) == []
    crowd = [view(i, "ubuntu", f"S{i}") for i in range(2000)]  # a cloud image that never set its hostname
    found = list(host_checks.duplicate_identities(crowd))
    assert len(found) == 2000 and {f.id for f in found} == {"identity.hostname.duplicate"}
    first = found[0]
    assert first.message == "hostname 'ubuntu' is also reported by n0001, n0002, n0003, n0004, n0005 and 1994 more"
    assert max(len(f.message) for f in found) < 200
    assert "2000 hosts report it" in first.evidence
