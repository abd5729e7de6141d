"""Every evidence file parses and yields exactly the facts SOURCES.md lists for it."""

from __future__ import annotations

import itertools

from orchestrator.facts.textparse import (
    detect_kind,
    parse_lspci_verbose,
    parse_nvlink,
    parse_smi_list,
    parse_smi_query,
    parse_topo_cpu,
    parse_topo_matrix,
    read_path,
)
from tests.facts.test_textparse_common import gpu_pairs
from tests.support.evidence import EVIDENCE, evidence


def topo(name: str):
    return parse_topo_matrix(read_path(evidence(name)), name)


def all_pairs(n: int) -> set[tuple[int, int]]:
    return set(itertools.combinations(range(n), 2))


def test_every_evidence_file_is_recognised():
    expected = {
        "L_": "smi_list", "lspci_vvv": "lspci_verbose", "nvbandwidth": "nvbandwidth", "nvlink_c": "nvlink_caps",
        "nvlink_s": "nvlink_status", "p2p_": "p2p_bandwidth_latency", "q_excerpt": "smi_query",
        "topo_c48": "topo_cpu", "topo_p2p_": "topo_p2p", "topo_": "topo_matrix", "nccl_": "nccl_tests", "lspci_": "lspci_verbose",
        # issue 30: kernel logs in every shape they are pasted, InfiniBand tools
        "kmsg_": "kernel_log", "dmesg_": "kernel_log", "journal": "kernel_log", "nvrm_": "kernel_log",
        "syslog_": "kernel_log", "ib": "ibstat", "smi_csv_": "smi_query_csv",
        # issue 48: the default nvidia-smi screen of every era
        "smi_screen_": "smi_screen", "q_": "smi_query", "qx_": "smi_query_xml",
    }
    files = sorted(EVIDENCE.glob("*.txt"))
    assert len(files) >= 19
    for f in files:
        want = next(v for k, v in expected.items() if f.name.startswith(k))
        assert detect_kind(read_path(f)) == want, f.name


def test_dgx1_v100_legacy_legend():
    m = topo("topo_dgx1_v100_4nic_legacy_legend_01.txt")
    assert len(m.gpus) == 8 and len(m.nics) == 4
    assert [n.name for n in m.nics] == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]
    assert gpu_pairs(m, "NV1") == {(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)}
    assert gpu_pairs(m, "NV2") == {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}
    assert gpu_pairs(m, "SYS") == {(0, 5), (0, 6), (0, 7), (1, 4), (1, 6), (1, 7), (2, 4), (2, 5), (2, 7),
                                   (3, 4), (3, 5), (3, 6)}
    for g in m.gpus:
        row = m.matrix[m.devices.index(g)]
        assert sum(int(c[2:]) for c in row if c and c.startswith("NV")) == 6, g.label
        nic_levels = [m.level(g.label, n.label) for n in m.nics]
        assert sorted(nic_levels) == ["PHB", "PIX", "SYS", "SYS"], g.label
    assert m.level("GPU0", "mlx5_0") == "PIX"
    assert m.level("GPU0", "mlx5_1") == "PHB"
    assert m.level("GPU2", "mlx5_1") == "PIX"
    assert m.level("GPU4", "mlx5_2") == "PIX"
    assert m.level("GPU6", "mlx5_3") == "PIX"
    assert [g.cpu_affinity for g in m.gpus] == ["0-19,40-59"] * 4 + ["20-39,60-79"] * 4
    assert m.legend_style == "switch"  # "PCIe switch" wording of old drivers
    assert m.columns == ["cpu_affinity"]  # no NUMA column on this driver
    assert all(g.numa_affinity is None and "numa_affinity" in g.unknown for g in m.gpus)
    assert all(n.cpu_affinity is None for n in m.nics)  # trailing empty cell
    assert m.notes == []


def test_topo_c_dgx_a100():
    r = parse_topo_cpu(read_path(evidence("topo_c48_dgx_a100_01.txt")))
    assert r.nearest[48] == [0, 1]
    # SOURCES.md also lists CPU 222 -> GPUs 6, 7, but the stored file holds only the CPU 48 answer.
    assert 222 not in r.nearest


def test_aws_p4d():
    m = topo("topo_aws_p4d_24xlarge_01.txt")
    assert len(m.gpus) == 8 and len(m.nics) == 0
    assert gpu_pairs(m, "NV12") == all_pairs(8)
    assert [g.cpu_affinity for g in m.gpus] == ["0-23,48-71"] * 4 + ["24-47,72-95"] * 4
    assert [g.numa_affinity for g in m.gpus] == [0] * 4 + [1] * 4
    assert all(g.gpu_numa_id is None and g.unknown["gpu_numa_id"] == "N/A in the source" for g in m.gpus)


def test_4x_a100_pcie_nv12_pairs_vm():
    m = topo("topo_4x_a100_80gb_pcie_nv12_pairs_vm_01.txt")
    assert len(m.gpus) == 4 and len(m.nics) == 0
    assert gpu_pairs(m, "NV12") == {(0, 1), (2, 3)}
    assert gpu_pairs(m, "SYS") == all_pairs(4) - {(0, 1), (2, 3)}
    assert [g.cpu_affinity for g in m.gpus] == ["0-23", "24-47", "48-71", "72-95"]
    assert [g.numa_affinity for g in m.gpus] == [0, 1, 2, 3]


def test_3x_a6000_bridge():
    m = topo("topo_3x_rtx_a6000_nvlink_bridge_01.txt")
    assert len(m.gpus) == 3 and len(m.nics) == 0
    assert m.level("GPU0", "GPU1") == "NV4"
    assert m.level("GPU0", "GPU2") == "NODE" and m.level("GPU1", "GPU2") == "NODE"
    assert [(g.cpu_affinity, g.numa_affinity) for g in m.gpus] == [("0-31,64-95", 0)] * 3
    assert "gpu_numa_id" not in m.columns


def test_8x_4090_all_sys_2nic():
    m = topo("topo_8x_rtx4090_all_sys_2nic_01.txt")
    assert len(m.gpus) == 8 and len(m.nics) == 2
    assert gpu_pairs(m, "SYS") == all_pairs(8)
    assert m.level("GPU6", "NIC0") == "PHB" and m.level("GPU6", "NIC1") == "PHB"
    assert m.level("NIC0", "NIC1") == "PIX"
    for g in m.gpus:
        for n in m.nics:
            if g.label != "GPU6":
                assert m.level(g.label, n.label) == "SYS"
    assert [g.cpu_affinity for g in m.gpus] == ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
    assert [g.numa_affinity for g in m.gpus] == [0] * 4 + [1] * 4
    assert m.legend_style is None  # matrix only, no legend pasted
    assert all(n.name is None and "name" in n.unknown for n in m.nics)  # no NIC legend: not guessed


def test_h100_8gpu_8nic_pix():
    m = topo("topo_h100_sxm_8gpu_8nic_pix_01.txt")
    assert len(m.gpus) == 8 and len(m.nics) == 8
    assert [n.name for n in m.nics] == [f"mlx5_{k}" for k in range(8)]
    assert gpu_pairs(m, "NV18") == all_pairs(8)
    for k in range(8):
        assert m.level(f"GPU{k}", f"NIC{k}") == "PIX"
    assert {(a, b) for a, b in m.pairs("PIX", ("gpu", "nic"))} == {(f"GPU{k}", f"NIC{k}") for k in range(8)}
    assert m.level("GPU0", "NIC1") == "NODE" and m.level("GPU0", "NIC4") == "SYS"
    assert [g.numa_affinity for g in m.gpus] == [0] * 4 + [1] * 4


def test_h100_6_of_8_visible():
    m = topo("topo_h100_6gpu_visible_2nic_01.txt")
    assert len(m.gpus) == 6 and len(m.nics) == 2
    assert [n.name for n in m.nics] == ["mlx5_0", "mlx5_1"]
    assert gpu_pairs(m, "NV18") == all_pairs(6) and len(all_pairs(6)) == 15
    assert m.level("NIC0", "NIC1") == "PIX"
    for g in m.gpus:
        want = "NODE" if int(g.label[3:]) < 3 else "SYS"
        assert [m.level(g.label, n.label) for n in m.nics] == [want, want]
    assert m.pairs("PIX", ("gpu", "nic")) == [] and m.pairs("PXB", ("gpu", "nic")) == []
    assert [g.cpu_affinity for g in m.gpus] == ["0-47,96-143"] * 3 + ["48-95,144-191"] * 3
    assert [g.numa_affinity for g in m.gpus] == [0] * 3 + [1] * 3


def test_b300_ansi_header_9nic():
    m = topo("topo_b300_sxm6_8gpu_9nic_ansi_header_01.txt")
    assert len(m.gpus) == 8 and len(m.nics) == 9
    assert [n.name for n in m.nics] == [f"mlx5_{k}" for k in range(10, 18)] + ["mlx5_bond_0"]
    assert gpu_pairs(m, "NV18") == all_pairs(8)
    assert {(a, b) for a, b in m.pairs("PXB", ("gpu", "nic"))} == {(f"GPU{k}", f"NIC{k}") for k in range(8)}
    assert [m.level(f"GPU{k}", "NIC8") for k in range(8)] == ["SYS"] * 4 + ["NODE"] * 4
    assert [g.cpu_affinity for g in m.gpus] == ["0-63,128-191"] * 4 + ["64-127,192-255"] * 4
    assert [g.numa_affinity for g in m.gpus] == [0] * 4 + [1] * 4
    assert all(n.cpu_affinity is None and n.numa_affinity is None for n in m.nics)  # 4 empty tab cells
    assert m.notes == []


def nvlink(name: str):
    return parse_nvlink(read_path(evidence(name)), name)


def test_nvlink_s_a6000_inactive():
    r = nvlink("nvlink_s_3x_rtx_a6000_inactive_01.txt")
    assert [g.index for g in r.gpus] == [0, 1, 2]
    for g in r.gpus[:2]:
        assert [(lk.link, lk.active, lk.speed_gbps) for lk in g.links] == [(k, True, 14.062) for k in range(4)]
        assert not g.all_inactive
    assert r.gpus[2].all_inactive and r.gpus[2].links == []
    assert "all links are inActive" in (r.gpus[2].message or "")
    assert r.gpus[2].uuid == "GPU-02c05ee3-bdb5-aac7-f9e8-a4c8f3f725b3"


def test_nvlink_s_v100_vastai():
    r = nvlink("nvlink_s_v100_sxm2_8gpu_vastai_01.txt")
    assert [g.index for g in r.gpus] == list(range(8))
    assert all(g.name == "Tesla V100-SXM2-32GB" for g in r.gpus)
    for g in r.gpus:
        assert [(lk.link, lk.active, lk.speed_gbps) for lk in g.links] == [(k, True, 25.781) for k in range(6)]


def test_nvlink_s_h100_18links():
    r = nvlink("nvlink_s_i0_h100_sxm_18links_01.txt")
    assert len(r.gpus) == 1 and r.gpus[0].index == 0 and r.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert [(lk.link, lk.active, lk.speed_gbps) for lk in r.gpus[0].links] == [(k, True, 26.562) for k in range(18)]
    assert r.has_status and not r.has_caps


def test_nvlink_c_h100_caps():
    r = nvlink("nvlink_c_i0_h100_sxm_18links_01.txt")
    assert r.has_caps and not r.has_status
    links = r.gpus[0].links
    assert [lk.link for lk in links] == list(range(18))
    keys = {"p2p_supported", "sysmem_access", "p2p_atomics", "sysmem_atomics", "sli_supported", "link_supported"}
    for lk in links:
        assert lk.caps == dict.fromkeys(keys, True)


def test_L_dgx_station_display_gpu():
    r = parse_smi_list(read_path(evidence("L_dgx_station_a100_80gb_mig_7x1g10gb_display_gpu_01.txt")))
    assert [g.index for g in r.gpus] == [0, 1, 2, 3]
    assert [g.display for g in r.gpus] == [False, False, True, False]
    assert r.gpus[2].name == "NVIDIA DGX Display"
    assert [g.name for g in r.gpus if not g.display] == ["NVIDIA A100-SXM4-80GB"] * 3
    assert [m.index for m in r.gpus[0].mig_devices] == list(range(7))
    assert {m.profile for m in r.gpus[0].mig_devices} == {"1g.10gb"}
    assert all(m.uuid and m.uuid.startswith("MIG-") for m in r.gpus[0].mig_devices)
    assert [len(g.mig_devices) for g in r.gpus] == [7, 0, 0, 0]


def test_L_cloud_vm_mig_index_restarts():
    r = parse_smi_list(read_path(evidence("L_2x_a100_sxm4_80gb_mig_2x1g10gb_each_cloudvm_01.txt")))
    assert len(r.gpus) == 2
    for g in r.gpus:
        assert [(m.index, m.profile) for m in g.mig_devices] == [(0, "1g.10gb"), (1, "1g.10gb")]
    assert r.gpus[1].mig_devices[0].uuid == "MIG-d5a46a2e-1d77-575d-99e3-1f96c8555a2e"


def test_q_excerpt_h100():
    q = parse_smi_query(read_path(evidence("q_excerpt_gpu0_of_8_h100_sxm_hgx_01.txt")))
    assert q.attached_gpus == 8 and len(q.gpus) == 1
    assert any("Attached GPUs says 8" in n.text for n in q.notes)  # an excerpt, said so
    g = q.gpus[0]
    assert g.bus_id == "0000:18:00.0"
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_gen_host_max) == (5, 5, 5)
    assert (g.pcie_width_current, g.pcie_width_max) == (16, 16)
    assert g.module_id == 2
    assert g.virtualization_mode == "none"
    assert g.c2c_mode == "disabled"
    assert (g.fabric_state, g.fabric_status, g.fabric_clique_id) == ("completed", "Success", 0)
    assert g.pcie_replays == 7
    assert g.bar1_total_bytes == 131072 * 1024**2
    assert q.driver_version == "565.57.01" and q.cuda_version == "12.7"
    assert g.fan_speed_pct is None and g.unknown["fan_speed_pct"] == "N/A in the source"


def test_lspci_grep_downgraded():
    r = parse_lspci_verbose(read_path(evidence("lspci_vvv_grep_lnk_2x_rtx3090_gen1_x8_downgraded_01.txt")))
    assert [d.bdf for d in r.devices] == ["0000:01:00.0", "0000:03:00.0"]
    for d in r.devices:
        assert d.lnk_cap is not None and d.lnk_sta is not None
        assert (d.lnk_cap.speed, d.lnk_cap.gen, d.lnk_cap.width) == ("16GT/s", 4, 16)
        assert (d.lnk_sta.speed, d.lnk_sta.gen, d.lnk_sta.width) == ("2.5GT/s", 1, 8)
        assert d.lnk_sta.speed_downgraded is True and d.lnk_sta.width_downgraded is True
        assert d.downgraded is True
