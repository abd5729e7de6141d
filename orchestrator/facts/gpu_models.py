"""Built-in knowledge of GPU models: what their NVLink and PCIe can carry.

Used where the inventory states no expectation.  Figures are per direction.  Sources: NVIDIA
product briefs (link counts, generations) and the per-link speeds `nvidia-smi nvlink -s` reports
on real machines (see ../shared/evidence: 26.562 GB/s H100, 25.781 GB/s V100, 14.062 GB/s A6000).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

# Usable PCIe bandwidth per lane per direction after 8b/10b or 128b/130b encoding, GB/s.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}
# PCIe generation -> signalling rate in GT/s: the one table (sysfs, lspci and nvidia-smi print
# the rate as "16.0 GT/s"; the normalizers write that spelling).
PCIE_GEN_GT_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
GT_S_TO_GEN = {rate: gen for gen, rate in PCIE_GEN_GT_S.items()}
PCIE_SPEED_TEXT = {gen: f"{rate:.1f} GT/s" for gen, rate in PCIE_GEN_GT_S.items()}


@dataclass(frozen=True)
class GpuModel:
    key: str  # short name used in class names: "H100-SXM"
    pattern: str  # regex matched against the NVML/nvidia-smi name, case-insensitive
    architecture: str
    nvlink_version: int | None  # NVLink generation, None: no NVLink
    nvlink_links: int  # links on the device (SXM: to NVSwitch or peers; PCIe cards: bridge links)
    nvlink_link_gbps: float  # per link per direction
    pcie_gen: int
    pcie_width: int = 16
    p2p_floor_gbps: float | None = None  # published acceptance floor (AzHPC) for NVLink P2P
    p2p_supported: bool = True  # consumer cards: P2P disabled by the driver
    nvlink_bridge: bool = False  # PCIe card whose NVLink needs an optional bridge: absent links are no fault
    has_fans: bool = False  # actively cooled board: NVML must report its fans (SXM/passive boards have none)

    @property
    def nvlink_gbps(self) -> float:
        return self.nvlink_links * self.nvlink_link_gbps


# Order matters: first match wins, so specific names come before generic ones.
MODELS: tuple[GpuModel, ...] = (
    GpuModel("GB200", r"GB200", "Blackwell", 5, 18, 50.0, 6, p2p_floor_gbps=None),
    GpuModel("B300-SXM", r"B300", "Blackwell", 5, 18, 50.0, 6),
    GpuModel("B200-SXM", r"B200", "Blackwell", 5, 18, 50.0, 5),
    GpuModel("H200-SXM", r"H200", "Hopper", 4, 18, 26.562, 5, p2p_floor_gbps=335.0),
    GpuModel("H100-NVL", r"H100 NVL", "Hopper", 4, 12, 26.562, 5, nvlink_bridge=True),
    GpuModel("H100-PCIE", r"H100 PCIe", "Hopper", 4, 12, 26.562, 5, nvlink_bridge=True),
    GpuModel("H100-SXM", r"H100", "Hopper", 4, 18, 26.562, 5, p2p_floor_gbps=335.0),
    GpuModel("H800-SXM", r"H800", "Hopper", 4, 8, 26.562, 5),
    GpuModel("A100-PCIE", r"A100.*PCIe", "Ampere", 3, 12, 25.0, 4, nvlink_bridge=True),
    GpuModel("A100-SXM", r"A100", "Ampere", 3, 12, 25.0, 4, p2p_floor_gbps=235.0),
    GpuModel("A800-SXM", r"A800", "Ampere", 3, 8, 25.0, 4),
    GpuModel("V100-SXM", r"V100.*SXM", "Volta", 2, 6, 25.781, 3),
    GpuModel("V100-PCIE", r"V100", "Volta", None, 0, 0.0, 3),
    GpuModel("P100-SXM", r"P100.*SXM", "Pascal", 1, 4, 20.0, 3),
    GpuModel("RTX-A6000", r"RTX A6000", "Ampere", 3, 4, 14.062, 4, nvlink_bridge=True, has_fans=True),
    GpuModel("RTX-3090", r"3090", "Ampere", 3, 4, 14.062, 4, p2p_supported=False, nvlink_bridge=True,
             has_fans=True),
    GpuModel("RTX-4090", r"4090", "Ada", None, 0, 0.0, 4, p2p_supported=False, has_fans=True),
    GpuModel("RTX-5090", r"5090", "Blackwell", None, 0, 0.0, 5, p2p_supported=False, has_fans=True),
    GpuModel("L40S", r"L40S", "Ada", None, 0, 0.0, 4),
    GpuModel("L40", r"L40", "Ada", None, 0, 0.0, 4),
    GpuModel("L4", r"\bL4\b", "Ada", None, 0, 0.0, 4),
    GpuModel("A10", r"\bA10\b", "Ampere", None, 0, 0.0, 4),
    GpuModel("T4", r"\bT4\b", "Turing", None, 0, 0.0, 3),
)


def lookup(name: Any) -> GpuModel | None:
    """The model a GPU name is; None for no name, an unknown one, or a name that is not a string
    (a host's number or list is no model, and a list cannot even be a cache key)."""
    return _lookup(name) if isinstance(name, str) and name else None


@functools.lru_cache(maxsize=1024)  # checks look models up per GPU pair: a regex scan each time
def _lookup(name: str) -> GpuModel | None:
    for m in MODELS:
        if re.search(m.pattern, name, re.IGNORECASE):
            return m
    return None


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    if not gen or not width or gen not in PCIE_LANE_GBPS:
        return None
    return round(PCIE_LANE_GBPS[gen] * width, 2)


def gen_from_speed(speed: str | float | None) -> int | None:
    """'16.0 GT/s PCIe', '8 GT/s', 2.5 -> PCIe generation; None when unknown."""
    if speed is None:
        return None
    if isinstance(speed, (int, float)):
        value = float(speed)
    else:
        m = re.search(r"(\d+(?:\.\d+)?)\s*GT/s", speed)
        if not m:
            return None
        value = float(m.group(1))
    return GT_S_TO_GEN.get(value)
