"""Format variants not in the evidence: what real pastes and other drivers do to these outputs.

Each variant is derived from a real evidence file (so the expected answer is known) or written
from the format, and must parse to the same facts as the original."""

from __future__ import annotations

import json

import pytest

from orchestrator.facts.textparse import (
    detect_kind,
    parse_lspci_tree,
    parse_lspci_verbose,
    parse_nvlink,
    parse_smi_xml,
    parse_topo_matrix,
    parse_topo_p2p,
    read_path,
)
from tests.facts.test_textparse_common import FIXTURES, gpu_pairs
from tests.support.evidence import evidence

DGX1 = "topo_dgx1_v100_4nic_legacy_legend_01.txt"
B300 = "topo_b300_sxm6_8gpu_9nic_ansi_header_01.txt"
H100 = "topo_h100_sxm_8gpu_8nic_pix_01.txt"


def same(a, b) -> None:
    """Same devices, matrix and affinities (notes may differ)."""
    assert [d.to_dict() for d in a.devices] == [d.to_dict() for d in b.devices]
    assert a.matrix == b.matrix


def base(name: str):
    return read_path(evidence(name))


@pytest.mark.parametrize("name", [DGX1, B300, H100])
def test_tabs_expanded_to_spaces(name):
    text = base(name)
    same(parse_topo_matrix(text.expandtabs(8)), parse_topo_matrix(text))


def test_escape_byte_present_in_header():
    text = base(B300).replace("[4m", "\x1b[4m").replace("[0m", "\x1b[0m")
    assert "\x1b" in text
    assert detect_kind(text) == "topo_matrix"
    same(parse_topo_matrix(text), parse_topo_matrix(base(B300)))


def test_underline_on_every_header_cell():
    lines = base(H100).split("\n")
    lines[0] = "\t".join(f"\x1b[4m{c}\x1b[0m" if c else c for c in lines[0].split("\t"))
    same(parse_topo_matrix("\n".join(lines)), parse_topo_matrix(base(H100)))


def test_no_leading_whitespace_and_no_legend():
    text = base(DGX1).split("\nLegend:")[0]
    text = "\n".join(line.lstrip() for line in text.split("\n"))
    m = parse_topo_matrix(text)
    same(m, parse_topo_matrix(base(DGX1)))
    assert m.legend == {} and m.legend_style is None


def test_nic_legend_missing_names_stay_unknown():
    text = base(H100).split("NIC Legend:")[0]
    m = parse_topo_matrix(text)
    assert [n.name for n in m.nics] == [None] * 8
    assert all(n.unknown["name"].startswith("no NIC Legend entry") for n in m.nics)


def test_poster_annotations_are_notes_not_data():
    lines = base(H100).split("\n")
    lines.insert(0, "$ nvidia-smi topo -m   # on node gpu-17")
    lines.insert(1, "NVIDIA Topology:")
    lines.insert(5, "  ^^^ GPU2 is the one that was flaky")
    m = parse_topo_matrix("\n".join(lines))
    same(m, parse_topo_matrix(base(H100)))
    assert any(n.line == 6 and "not part of the matrix" in n.text for n in m.notes)


def test_old_style_nic_columns_in_any_order_keep_their_names():
    m = parse_topo_matrix(base(DGX1))
    assert [n.label for n in m.nics] == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]
    assert m.level("mlx5_2", "GPU4") == "PIX"


def test_legacy_soc_legend_and_switch_wording():
    m = parse_topo_matrix(read_path(FIXTURES / "topo_legacy_soc_4gpu_mlx4.txt"))
    assert gpu_pairs(m, "SYS") == {(0, 2), (0, 3), (1, 2), (1, 3)}
    assert gpu_pairs(m, "PIX") == {(0, 1), (2, 3)}
    assert "SOC" not in {c for r in m.matrix for c in r}
    assert any("SOC" in n.text for n in m.notes)
    assert m.legend_style == "switch"
    assert [n.name for n in m.nics] == ["mlx4_0"]
    assert m.level("GPU0", "mlx4_0") == "PIX"
    assert [g.cpu_affinity for g in m.gpus] == ["0-11,24-35"] * 2 + ["12-23,36-47"] * 2


def test_columns_run_together():
    text = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV12PIX\t0-15\t0\n"
        "GPU1\tNV12\t X PIX\t0-15\t0\n"
        "NIC0\tPIX\tPIX\t X\n"
    )
    m = parse_topo_matrix(text)
    assert m.level("GPU0", "GPU1") == "NV12" and m.level("GPU0", "NIC0") == "PIX"
    assert [g.cpu_affinity for g in m.gpus] == ["0-15", "0-15"]
    header_glued = "\tGPU0GPU1NIC0\tCPU Affinity\n" + "\n".join(text.split("\n")[1:])
    assert [d.label for d in parse_topo_matrix(header_glued).devices] == ["GPU0", "GPU1", "NIC0"]


def test_single_gpu_and_empty_affinity_cell_is_not_guessed():
    m = parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t\n")
    g = m.gpus[0]
    # "0-7" can only be a cpulist; the empty NUMA cell stays unknown.
    assert (g.cpu_affinity, g.numa_affinity) == ("0-7", None)
    assert g.unknown["numa_affinity"] == "empty in the source"
    ambiguous = parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t\t0\t\n")
    h = ambiguous.gpus[0]
    # a lone "0" may be a CPU, a NUMA node or a GPU NUMA id: nothing is assigned
    assert (h.cpu_affinity, h.numa_affinity, h.gpu_numa_id) == (None, None, None)
    assert any("cannot tell which affinity column" in n.text for n in ambiguous.notes)


def test_unknown_level_value_is_reported_not_guessed():
    m = parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tNVB\nGPU1\tNVB\t X \n")
    assert m.level("GPU0", "GPU1") is None
    assert any("unknown value 'NVB'" in n.text for n in m.notes)


def test_asymmetric_cell_is_reported():
    m = parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tSYS\t X \n")
    assert any("GPU0/GPU1 is PIX but GPU1/GPU0 is SYS" in n.text for n in m.notes)


def test_topo_p2p_read_matrix():
    text = read_path(FIXTURES / "topo_p2p_r_4gpu_one_cns.txt")
    assert detect_kind(text) == "topo_p2p"
    r = parse_topo_p2p(text)
    assert r.mode == "r" and r.labels == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert [r.matrix[3][k] for k in range(3)] == ["CNS"] * 3 and r.matrix[0][1] == "OK"
    assert r.legend["CNS"] == "Chipset not supported"
    # Without the prompt line the mode is not in the text and stays unknown unless given.
    bare = "\n".join(text.split("\n")[1:])
    assert parse_topo_p2p(bare).mode is None and parse_topo_p2p(bare, mode="w").mode == "w"


def test_nvlink_without_gpu_header_and_inactive_links():
    r = parse_nvlink(read_path(FIXTURES / "nvlink_s_no_header_two_inactive.txt"))
    g = r.gpus[0]
    assert g.index is None and g.uuid is None
    assert [(lk.link, lk.active) for lk in g.links] == [(0, True), (1, False), (2, True), (3, False)]
    assert any("no 'GPU n:' line" in n.text for n in r.notes)


def test_nvlink_status_and_caps_together():
    text = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaa)\n\t Link 0: 25 GB/s\n\t Link 1: <inactive>\n"
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaa)\n\t Link 0, P2P is supported: true\n"
        "\t Link 1, P2P is supported: false\n"
    )
    r = parse_nvlink(text)
    assert len(r.gpus) == 1 and r.has_status and r.has_caps
    assert [(lk.active, lk.caps.get("p2p_supported")) for lk in r.gpus[0].links] == [(True, True), (False, False)]


def test_lspci_tree_two_roots_switch_and_empty_slots():
    t = parse_lspci_tree(read_path(FIXTURES / "lspci_tvnn_two_roots_switch_emptyslot.txt"))
    assert t.roots == ["0000:ff", "0000:c0", "0000:00"]
    gpu = t.nodes["0000:c3:00.0"]
    assert (gpu.vendor_id, gpu.device_id) == ("10de", "2330")
    assert t.path("0000:c3:00.0") == ["0000:c0:01.0", "0000:c1:00.0", "0000:c2:00.0"]
    assert t.path("0000:c4:00.0") == ["0000:c0:01.0", "0000:c1:00.0", "0000:c2:01.0"]
    assert t.nodes["0000:c1:00.0"].children == ["0000:c2:00.0", "0000:c2:01.0", "0000:c2:02.0", "0000:c2:1f.0"]
    assert sorted(b for b, n in t.nodes.items() if n.empty_slot) == ["0000:c0:02.0", "0000:c2:02.0"]
    assert t.nodes["0000:01:00.1"].parent == "0000:00:01.0"
    assert t.nodes["0000:00:1f.0"].parent is None and t.notes == []


def test_lspci_tree_single_root_chain():
    t = parse_lspci_tree(read_path(FIXTURES / "lspci_tv_desktop_2x3090.txt"))
    assert t.roots == ["0000:00"]
    assert t.path("0000:03:00.0") == ["0000:00:01.2", "0000:02:00.0"]
    assert t.nodes["0000:00:02.1"].empty_slot
    assert t.nodes["0000:01:00.0"].description == "NVIDIA Corporation GA102 [GeForce RTX 3090]"


def test_lspci_vvvnn_switch_acs_and_downgrades():
    r = parse_lspci_verbose(read_path(FIXTURES / "lspci_vvvnn_switch_gpu_nic_acs.txt"))
    by = {d.bdf: d for d in r.devices}
    assert by["0000:c3:00.0"].class_code == "0302" and by["0000:c3:00.0"].vendor_id == "10de"
    assert by["0000:c3:00.0"].numa_node == 1 and by["0000:c3:00.0"].iommu_group == 40
    assert by["0000:c3:00.0"].lnk_sta.width_downgraded is True and by["0000:c3:00.0"].downgraded
    assert by["0000:c1:00.0"].port_type == "Upstream Port" and by["0000:c1:00.0"].downgraded
    assert by["0000:c0:01.0"].port_type == "Root Port" and by["0000:c0:01.0"].secondary == 0xC1
    assert by["0000:c2:00.0"].acs_ctl == {"SrcValid": True, "TransBlk": False, "ReqRedir": True, "CmpltRedir": True,
                                          "UpstreamFwd": True, "EgressCtrl": False, "DirectTrans": False}
    assert by["0000:c4:00.0"].downgraded is False and by["0000:c4:00.0"].driver == "mlx5_core"


def test_lspci_old_pciutils_without_marks_compares_cap_and_status():
    d = parse_lspci_verbose(read_path(FIXTURES / "lspci_vvv_old_pciutils_no_marks.txt")).devices[0]
    assert d.bdf == "0000:3b:00.0" and d.class_name == "VGA compatible controller"
    assert d.lnk_sta.speed_downgraded is None  # this lspci prints no mark
    assert d.downgraded is True  # 2.5 GT/s against an 8 GT/s capability


def test_smi_xml_mig_passthrough_downtrained():
    q = parse_smi_xml(read_path(FIXTURES / "smi_qx_2x_a100_mig_passthrough.xml"))
    a, b = q.gpus
    assert (a.bus_id, b.bus_id) == ("0000:07:00.0", "0000:0f:00.0")
    assert a.mig_current is True and [m.gpu_instance_id for m in a.mig_devices] == [1, 2]
    assert a.virtualization_mode == "passthrough" and a.module_id == 3
    assert (a.remapped_uncorrectable, a.remapped_pending) == (1, True)
    assert (b.pcie_gen_current, b.pcie_gen_max, b.pcie_width_current, b.pcie_width_max) == (1, 4, 8, 16)
    assert (b.fan_speed_pct, b.temperature_c) == (0, 58)
    assert a.fabric_state is None and a.unknown["fabric_state"] == "N/A in the source"
    json.dumps(q.to_dict())  # JSON-able


def test_smi_query_text_mig_devices_and_two_gpus():
    from orchestrator.facts.textparse import parse_smi_query

    text = """
==============NVSMI LOG==============

Driver Version                            : 550.90.07
Attached GPUs                             : 2
GPU 00000000:07:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    MIG Mode
        Current                           : Enabled
        Pending                           : Enabled
    MIG Devices
        MIG Device
            Index                         : 0
            GPU Instance ID               : 7
            Compute Instance ID           : 0
            FB Memory Usage
                Total                     : 9984 MiB
        MIG Device
            Index                         : 1
            GPU Instance ID               : 8
            Compute Instance ID           : 0
    GPU UUID                              : GPU-aaaa
    PCI
        Bus Id                            : 00000000:07:00.0
        GPU Link Info
            PCIe Generation
                Max                       : 4
                Current                   : 2
            Link Width
                Max                       : 16x
                Current                   : 16x
GPU 00000000:0F:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    MIG Mode
        Current                           : Disabled
        Pending                           : Enabled
    Fan Speed                             : 30 %
"""
    q = parse_smi_query(text)
    a, b = q.gpus
    assert (a.bus_id, b.bus_id) == ("0000:07:00.0", "0000:0f:00.0")
    assert [(m.index, m.gpu_instance_id, m.memory_total_bytes) for m in a.mig_devices] == [
        (0, 7, 9984 * 1024**2), (1, 8, None)]
    assert (a.pcie_gen_current, a.pcie_gen_max) == (2, 4) and a.uuid == "GPU-aaaa"
    assert (b.mig_current, b.mig_pending, b.fan_speed_pct) == (False, True, 30)
    assert q.notes == []
