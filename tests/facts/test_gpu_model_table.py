"""The model table is keyed by PCI device id where the text gives one and by exact product name
otherwise: no substring matching."""

from __future__ import annotations

import pytest

from orchestrator.facts import gpu_models
from orchestrator.facts.textparse import import_texts, read_path
from tests.support.evidence import evidence


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("NVIDIA H200", "H200-SXM"),
    ("NVIDIA GH200 480GB", "GH200"),  # not an H200
    ("NVIDIA H100 NVL", "H100-NVL"),  # not an H100 PCIe
    ("NVIDIA H100 PCIe", "H100-PCIE"),
    ("NVIDIA DGX Display", "DGX-Display"),  # a display GPU, not an A100
    ("NVIDIA A100-SXM4-80GB", "A100-SXM"),
    ("nvidia a100 sxm4 80gb", "A100-SXM"),  # case and -/space do not name another product
    ("NVIDIA A100 80GB PCIe MIG 3g.40gb", "A100-PCIE"),  # a MIG device: its parent's model
    ("Tesla V100-SXM2-32GB", "V100-SXM"),
    ("NVIDIA B300 SXM6 AC", "B300-SXM"),
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA H20", "H20"),  # not an H200, not an H20-3e
    ("NVIDIA H20-3e", "H20-3E"),
    ("NVIDIA GB10", "GB10"),  # DGX Spark
    ("NVIDIA GeForce RTX 5090", "RTX-5090"),
    ("NVIDIA L40S", "L40S"),
])
def test_exact_names(name: str, key: str) -> None:
    m = gpu_models.lookup(name)
    assert m is not None and m.key == key


@pytest.mark.parametrize("name", ["H100", "NVIDIA GeForce RTX 3090 Ti", "NVIDIA H100 80GB HBM", "NVIDIA A100X", ""])
def test_no_substring_match(name: str) -> None:
    assert gpu_models.lookup(name) is None


def test_pci_device_id_wins_over_the_name() -> None:
    assert gpu_models.lookup(None, "0x2330").key == "H100-SXM"  # type: ignore[union-attr]
    assert gpu_models.lookup("something else", "0x233010DE").key == "H100-SXM"  # type: ignore[union-attr]
    assert gpu_models.lookup("NVIDIA H100 NVL", "0xffff").key == "H100-NVL"  # type: ignore[union-attr]
    assert gpu_models.lookup("NVIDIA DGX Display").display  # type: ignore[union-attr]


def test_keys_and_names_are_unique() -> None:
    keys = [m.key for m in gpu_models.MODELS]
    assert len(keys) == len(set(keys))
    names = [gpu_models._norm_name(n) for m in gpu_models.MODELS for n in m.names]
    assert len(names) == len(set(names))
    ids = [i for m in gpu_models.MODELS for i in m.pci_ids]
    assert len(ids) == len(set(ids))


def test_topo_only_model_unknown_then_filled_by_another_file() -> None:
    topo = read_path(evidence("topo_h100_sxm_8gpu_8nic_pix_01.txt"))
    g = import_texts([("t", topo)]).facts["gpus"]["list"][0]
    assert g["model"] is None and g["unknown"]["model"].startswith("name unknown")
    listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d}-1111-2222-3333-444444444444)\n"
                      for i in range(8))
    gl = import_texts([("t", topo), ("l", listing)]).facts["gpus"]["list"]
    assert {x["model"] for x in gl} == {"H100-SXM"}
    q = read_path(evidence("q_excerpt_gpu0_of_8_h100_sxm_hgx_01.txt")).replace("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM")
    # a product name the table does not know, but -q's Device Id 0x2330 does
    assert import_texts([("q", q)]).facts["gpus"]["list"][0]["model"] == "H100-SXM"


def test_the_hardware_of_2025_26() -> None:
    """Issue 30: what the published outputs of these parts show."""
    for key in ("GB200", "B300-SXM", "B200-SXM"):  # nvidia-smi nvlink -s: 53.125 GB/s per NVLink5 link
        m = next(x for x in gpu_models.MODELS if x.key == key)
        assert (m.nvlink_version, m.nvlink_links, m.nvlink_link_gbps) == (5, 18, 53.125)
    assert gpu_models.lookup(None, "0x3182").key == "B300-SXM"  # type: ignore[union-attr]  # DCGM on the XE9780
    assert gpu_models.lookup(None, "0x2329").key == "H20"  # type: ignore[union-attr]
    assert [m.key for m in gpu_models.MODELS if m.c2c] == ["GB200", "GB10", "GH200"]
    gb10 = gpu_models.lookup("NVIDIA GB10")
    assert gb10 is not None and gb10.nvlink_version is None and not gb10.p2p_supported
    rtx5090 = gpu_models.lookup("NVIDIA GeForce RTX 5090")
    assert rtx5090 is not None and not rtx5090.p2p_supported


@pytest.mark.parametrize(("hca", "model"), [
    ("MT4131", "ConnectX-8"), ("MT4129", "ConnectX-7"), ("MT41692", "BlueField-3"), ("MT4124", "ConnectX-6 VF"),
    ("MT4127", "ConnectX-6 Lx"), ("mt4125", "ConnectX-6 Dx"), ("MT9999", None), (None, None), (4131, None)])
def test_hca_products(hca: object, model: object) -> None:
    assert gpu_models.nic_model(hca) == model


def test_h20_and_h20_3e_outputs_name_their_models() -> None:
    from orchestrator.facts.textparse import import_files

    host = import_files([evidence("nccl_alltoall_8x_h20_3e_inplace_na_nccltests314_01.txt")])
    assert {g["model"] for g in host.facts["gpus"]["list"]} == {"H20-3E"}
    topo = import_files([evidence("topo_8x_h20_nv18_2nic_arthurchiao_01.txt")]).facts
    # 8 GPUs, every pair NV18: the H20's 18 NVLink4 links, as the table has them
    assert topo["nvlink"]["nv"][0] == [None] + [18] * 7
    assert next(m for m in gpu_models.MODELS if m.key == "H20").nvlink_links == 18
