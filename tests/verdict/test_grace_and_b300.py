"""The hardware of 2025-26 in the demo fleet (issue 30): a GB200 compute tray, whose GPUs sit on
NVLink-C2C with every NIC NODE/SYS, and a Dell XE9780 with 7 visible B300 GPUs.  Both are
simulated from published outputs (orchestrator/simulate/machines/gb200-tray.*, xe9780-7xb300.*)
and judged with their demo group's expectations (orchestrator/simulate/record.py GROUPS)."""

from __future__ import annotations

import copy
from typing import Any

from orchestrator.facts.normalize import normalize_host
from orchestrator.facts.textparse import import_files
from orchestrator.simulate.record import GROUPS
from orchestrator.verdict.checks import run_host_checks
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.checks.pcie import check_gpu_nic_affinity
from orchestrator.verdict.expectations import Expectations
from tests.support.evidence import evidence
from tests.support.normalize_corpus import recorded_data

ALL_PROBES = ("host", "pcie", "nvml", "nvlink", "kmsg", "nic")


def _demo(host: str) -> dict[str, Any]:
    data = dict(recorded_data())[host]
    return normalize_host(data)[0]


def _expect(prefix: str, **over: Any) -> Expectations:
    want = next(e for _, p, e in GROUPS if p == prefix)
    return Expectations.from_mapping({**want, **over})


def _view(host: str, facts: dict[str, Any], expect: Expectations) -> HostView:
    return HostView(name=host, facts=facts, outcomes={p: "ok" for p in ALL_PROBES}, expect=expect)


def test_the_grace_host_raises_no_finding_under_its_groups_expectations() -> None:
    facts = _demo("gb200-01")
    assert [g["model"] for g in facts["gpus"]["list"]] == ["GB200"] * 4
    assert [g["numa_node"] for g in facts["gpus"]["list"]] == [2, 10, 18, 26]  # HBM as its own NUMA node
    assert {d["model"] for d in facts["nic"]["devices"]} == {"ConnectX-7", "BlueField-3"}
    view = _view("gb200-01", facts, _expect("gb200-"))
    assert [f.to_dict() for f in run_host_checks(view)] == []


def test_a_grace_gpu_without_a_nic_on_its_own_cpu_is_still_a_finding() -> None:
    facts = copy.deepcopy(_demo("gb200-01"))
    levels = facts["pcie"]["levels"]
    order = levels["order"]
    gpu0 = order.index("0008:01:00.0")
    for j, bdf in enumerate(order):
        if bdf in facts["pcie"]["nics"]:
            levels["matrix"][gpu0][j] = "SYS"  # as if every NIC of its Grace were gone
    found = list(check_gpu_nic_affinity(_view("gb200-01", facts, _expect("gb200-"))))
    assert [(f.id, f.kind.value, f.actual) for f in found] == [("pcie.gpu_nic.affinity", "fault", "SYS")]
    assert "0008:01:00.0" in found[0].subject


def test_the_same_placement_on_an_x86_host_is_a_fault() -> None:
    """What Grace is spared: a GPU whose nearest NIC is NODE fails PXB anywhere else."""
    facts = copy.deepcopy(_demo("gb200-01"))
    for g in facts["gpus"]["list"]:
        g["name"], g["pci_device_id"], g["numa_node"] = "NVIDIA H100 80GB HBM3", "0x2330", None
    for d in facts["pcie"]["devices"]:
        if d.get("kind") == "gpu":
            d["model"], d["device"] = "NVIDIA H100 80GB HBM3", "0x2330"
    found = list(check_gpu_nic_affinity(_view("gb200-01", facts, _expect("gb200-"))))
    assert sorted((f.id, f.actual) for f in found) == [("pcie.gpu_nic.affinity", "NODE")] * 4


def test_a_gb200_matrix_alone_cannot_judge_the_placement() -> None:
    """nvidia-smi prints SYS for every GB200 GPU x NIC cell: unknown, not four faults."""
    host = import_files([evidence("topo_gb200_4gpu_8nic_all_sys_numa_list_01.txt")])
    view = HostView(name="gb200", facts=host.facts, outcomes={}, expect=Expectations.from_mapping(
        {"gpu_nic_level": "PXB"}))
    [f] = list(check_gpu_nic_affinity(view))
    assert (f.id, f.kind.value, f.severity.value) == ("pcie.gpu_nic.affinity", "unknown", "info")
    # the same matrix on a host whose GPUs are not C2C would be four faults
    for d in host.facts["topology"]["devices"]:
        d.pop("gpu_numa_id", None)
    for g in host.facts["gpus"]["list"]:
        g["numa_node"] = None  # GPU memory that is no NUMA node of its own: not a coherent C2C platform
    assert [f.kind.value for f in check_gpu_nic_affinity(view)] == ["fault"] * 4


def test_the_seven_gpu_b300_is_judged_against_seven() -> None:
    facts = _demo("b300-01")
    assert facts["gpus"]["count"] == 7 and {g["model"] for g in facts["gpus"]["list"]} == {"B300-SXM"}
    assert sorted({d["model"] for d in facts["nic"]["devices"]}) == ["ConnectX-7", "ConnectX-8"]
    assert [f.to_dict() for f in run_host_checks(_view("b300-01", facts, _expect("b300-")))] == []
    wrong = [f for f in run_host_checks(_view("b300-01", facts, _expect("b300-", gpu_count=8)))]
    assert [(f.id, f.expected, f.actual) for f in wrong if f.id == "gpu.count.mismatch"] == [
        ("gpu.count.mismatch", 8, 7)]


def test_nvlink5_switches_off_the_pci_bus_are_no_hidden_fabric() -> None:
    """B300 boards and GB200 racks: the NVSwitches are never PCI functions of the host (DCGM on the
    XE9780: "0 NvSwitches found"), so no `nvlink.nvswitch.hidden` as on a VM that hides them."""
    for host, prefix in (("b300-01", "b300-"), ("gb200-01", "gb200-")):
        facts = _demo(host)
        assert facts["pcie"]["nvswitches"] == [] and facts["nvlink"]["nvswitches"]
        ids = {f.id for f in run_host_checks(_view(host, facts, _expect(prefix)))}
        assert "nvlink.nvswitch.hidden" not in ids
    h100 = _demo("dgx-h100-01")
    h100["pcie"]["nvswitches"] = []
    assert "nvlink.nvswitch.hidden" in {f.id for f in run_host_checks(_view("dgx-h100-01", h100, _expect("dgx-h100-")))}
