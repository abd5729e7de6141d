"""NVLink graph and topo -m matrix: probes on the fake NVML -> normalize -> merge, against evidence."""

from __future__ import annotations

import re

import pytest

from orchestrator.facts.normalize import nvlink as norm_nvlink
from orchestrator.facts.normalize import topology
from tests.engine.test_nvml_helpers import host_facts, needs_gcc
from tests.support.evidence import evidence

pytestmark = needs_gcc

EVIDENCE = "topo_dgx1_v100_4nic_legacy_legend_01.txt"


def _evidence_gpu_matrix() -> list[list[str]]:
    path = evidence(EVIDENCE)
    rows = []
    for line in path.read_text().splitlines():
        if re.match(r"^GPU\d+\s", line):
            cells = line.split("\t")
            rows.append([c.strip() for c in cells[1:9]])
    assert len(rows) == 8
    return rows


@pytest.mark.parametrize("machine", ["dgx1-v100", "dgx1-v100--old-driver"])
def test_dgx1_nv_matrix_equals_published_topo(machine):
    want = _evidence_gpu_matrix()
    facts = host_facts(machine)
    topo = topology.merge(facts["gpus"], facts["nvlink"], None)
    got = [row[:8] for row in topo["matrix"][:8]]
    assert got == want
    # every pair that is not NV# came from NVML's own level, not a guess
    assert all(topo["source"][i][j] in ("self", "nvlink", "nvml") for i in range(8) for j in range(8))
    assert all(g["links_total"] == 6 and g["links_up"] == 6 for g in facts["nvlink"]["gpus"])
    assert len(facts["nvlink"]["pairs"]) == 16


@pytest.mark.parametrize("machine,nv,switches", [("dgx-h100", 18, 4), ("lenovo-8xh100-cx7", 18, 4),
                                                 ("dgx-a100", 12, 6)])
def test_nvswitch_systems_are_all_to_all(machine, nv, switches):
    facts = host_facts(machine)
    topo = topology.merge(facts["gpus"], facts["nvlink"], None)
    n = len(facts["gpus"]["order"])
    assert {topo["matrix"][i][j] for i in range(n) for j in range(n) if i != j} == {f"NV{nv}"}
    assert len(facts["nvlink"]["nvswitches"]) == switches
    assert facts["nvlink"]["pairs"] == []
    assert all(len(sw["gpus"]) == n for sw in facts["nvlink"]["nvswitches"])


def test_links_down_lowers_nv_for_that_gpu_only():
    facts = host_facts("dgx-h100--links-down")
    nv = facts["nvlink"]["nv"]
    assert nv[2][0] == 16 and nv[0][2] == 16 and nv[0][1] == 18
    g = facts["nvlink"]["gpus"][2]
    assert (g["links_total"], g["links_up"], g["inactive"]) == (18, 16, [6, 13])


def test_bridged_workstation_pairs():
    facts = host_facts("ws-4xa6000")
    topo = topology.merge(facts["gpus"], facts["nvlink"], None)
    m = topo["matrix"]
    assert m[0][1] == "NV4" and m[2][3] == "NV4"
    assert m[0][2] == "NODE" and m[1][2] == "NODE" and m[0][3] == "NODE"  # one socket, as the evidence
    assert facts["nvlink"]["gpus"][0]["version"] == "3.1"


def test_consumer_has_no_nvlink_and_pcie_levels_from_nvml():
    facts = host_facts("consumer-8x4090")
    assert facts["nvlink"]["supported"] is False
    assert all(g["links_total"] == 0 for g in facts["nvlink"]["gpus"])
    topo = topology.merge(facts["gpus"], facts["nvlink"], None)
    assert {c for row in topo["matrix"] for c in row} == {"X", "SYS"}


def test_lost_gpu_has_unknown_links_not_down():
    facts = host_facts("dgx-a100--gpu-lost")
    g = facts["nvlink"]["gpus"][5]
    assert g["lost"] is True and g["links_total"] is None and g["inactive"] == []


def test_merge_with_pcie_facts_adds_nics_and_fills_gaps():
    facts = host_facts("dgx-h100")
    order = facts["gpus"]["order"]
    nics = ["0000:19:00.0", "0000:9b:00.0"]
    full = order + nics
    # PCIe levels in the facts-pcie.md shape: NIC0 under GPU0's switch, NIC1 under GPU4's.
    def lvl(a: str, b: str) -> str:
        if a == b:
            return "X"
        pix = {frozenset({order[0], nics[0]}), frozenset({order[4], nics[1]})}
        if frozenset({a, b}) in pix:
            return "PIX"
        side = {x: (0 if i < 4 else 1) for i, x in enumerate(order)} | {nics[0]: 0, nics[1]: 1}
        return "NODE" if side[a] == side[b] else "SYS"
    pcie = {"gpus": order, "nics": nics,
            "levels": {"order": full, "labels": [f"GPU{i}" for i in range(8)] + ["NIC0", "NIC1"],
                       "nic_names": ["mlx5_0", "mlx5_1"], "matrix": [[lvl(a, b) for b in full] for a in full]}}
    topo = topology.merge(facts["gpus"], facts["nvlink"], pcie)
    names = [d["name"] for d in topo["devices"]]
    assert names[-2:] == ["NIC0", "NIC1"] and topo["devices"][8]["label"] == "mlx5_0"
    m = topo["matrix"]
    assert m[0][8] == "PIX" and m[1][8] == "NODE" and m[5][8] == "SYS" and m[4][9] == "PIX"
    assert m[8][9] == "SYS" and m[0][1] == "NV18"
    assert topo["source"][0][8] == "pcie" and topo["source"][0][1] == "nvlink"
    # without NVML and NVLink facts, GPU pairs fall back to the PCIe levels
    bare = topology.merge(None, None, pcie)
    assert bare["matrix"][0][1] == "NODE" and bare["source"][0][1] == "pcie"


def test_nvlink_normalize_pure_switch_min_and_invisible_remote():
    def gpu(bus: str, states: list[str], remote: str | None) -> dict:
        return {"bus_id": bus, "links": [{"link": k, "state": s, "remote_bus_id": remote,
                                          "remote_type": None} for k, s in enumerate(states)]}
    data = {"gpus": [gpu("0000:01:00.0", ["up"] * 4, None), gpu("0000:02:00.0", ["up", "up", "down", "up"], None)]}
    out = norm_nvlink.normalize(data)
    # invisible remote on an active link counts as NVSwitch (NCCL's rule); NV# = min of both ends
    assert out["nv"][0][1] == 3 and out["nv"][1][0] == 3
    assert out["gpus"][1]["inactive"] == [2]
