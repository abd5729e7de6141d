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
