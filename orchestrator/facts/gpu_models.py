"""Built-in knowledge of GPU models: what their NVLink and PCIe can carry.

Used where the inventory states no expectation.  Figures are per direction.  Sources: NVIDIA
product briefs (link counts, generations) and the per-link speeds `nvidia-smi nvlink -s` reports
on real machines (see ../shared/evidence: 26.562 GB/s H100, 25.781 GB/s V100, 14.062 GB/s A6000;
tests/fixtures/evidence: 53.125 GB/s GB200 and B300 SXM6).  Product names are as NVML prints
them in published outputs; where an entry came from one, its comment names the fixture or the
public thread.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
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
    names: tuple[str, ...]  # exact product names as NVML / nvidia-smi print them (compared by _norm_name)
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
    pci_ids: tuple[str, ...] = ()  # PCI device ids ("0x2330"): the surest key where the text prints one
    display: bool = False  # a display-only board (DGX Station's "DGX Display"): not a compute GPU
    # The GPU hangs off its Grace CPU by NVLink-C2C (GH200, GB200, GB10): no PCIe bridge joins it to
    # any NIC (nvidia-smi topo -m prints NODE/SYS for all), and its PCIe link is not its data path.
    c2c: bool = False
    # ECC ships switched off (GeForce and RTX workstation boards with GDDR): off is the board's own
    # setting, not a change someone made; datacenter boards ship with it on.
    ecc_off_by_default: bool = False

    @property
    def nvlink_gbps(self) -> float:
        return self.nvlink_links * self.nvlink_link_gbps


# Exact names, never substrings: "GH200" is not an "H200", an "H100 NVL" is not an "H100 PCIe",
# an "RTX 3090 Ti" (no NVLink) is not an "RTX 3090".  A name missing here is an unknown model
# (`model: null`, "not in the model table"), which is better than a wrong one.
MODELS: tuple[GpuModel, ...] = (
    # NVLink5: nvidia-smi nvlink -s prints 53.125 GB/s per link (nvlink_s_gb200_53gbps_elided_k8stestinfra371_01,
    # nvlink_s_7x_b300_sxm6_53gbps_xe9780_01); GB200's id 0x2941 from gpud's lspci.gb200 (lspci_gb200_grace_cx7_bf3_gpud_01).
    GpuModel("GB200", ("NVIDIA GB200",), "Blackwell", 5, 18, 53.125, 6, pci_ids=("0x2941",), c2c=True),
    # B300's id 0x3182: DCGM's "GPU Device IDs Detected 3182" on the 7-GPU XE9780 (BAEYUNSEON/XE9780_Performance_Test).
    GpuModel("B300-SXM", ("NVIDIA B300 SXM6 AC", "NVIDIA B300"), "Blackwell", 5, 18, 53.125, 6, pci_ids=("0x3182",)),
    GpuModel("B200-SXM", ("NVIDIA B200",), "Blackwell", 5, 18, 53.125, 5, pci_ids=("0x2901",)),
    # DGX Spark: "NVIDIA GB10" on bus 0000000F:01:00.0, memory "Not Supported" (unified LPDDR5X),
    # NVIDIA/k8s-device-plugin#1482, snowflakedb/ArcticTraining#345; no NVLink to other GPUs.
    GpuModel("GB10", ("NVIDIA GB10",), "Blackwell", None, 0, 0.0, 5, p2p_supported=False, c2c=True),
    GpuModel("GH200", ("NVIDIA GH200 480GB", "NVIDIA GH200 120GB", "NVIDIA GH200 144G HBM3e", "NVIDIA GH200 96GB HBM3",
                       "NVIDIA GH200"), "Hopper", 4, 18, 26.562, 5, pci_ids=("0x2342", "0x2348"), c2c=True),
    # H20 (8x NV18 in `topo -m`, topo_8x_h20_nv18_2nic_arthurchiao_01); id 0x2329 from `lspci -nn`
    # "GH100 [H20] [10de:2329]" (search index 61523513786).  H20-3e: nccl-tests#314's device lines.
    GpuModel("H20", ("NVIDIA H20",), "Hopper", 4, 18, 26.562, 5, pci_ids=("0x2329",)),
    GpuModel("H20-3E", ("NVIDIA H20-3e",), "Hopper", 4, 18, 26.562, 5),
    GpuModel("H200-NVL", ("NVIDIA H200 NVL",), "Hopper", 4, 18, 26.562, 5, nvlink_bridge=True, pci_ids=("0x233b",)),
    GpuModel("H200-SXM", ("NVIDIA H200", "NVIDIA H200 141GB HBM3e"), "Hopper", 4, 18, 26.562, 5,
             p2p_floor_gbps=335.0, pci_ids=("0x2335",)),
    GpuModel("H100-NVL", ("NVIDIA H100 NVL",), "Hopper", 4, 12, 26.562, 5, nvlink_bridge=True, pci_ids=("0x2321",)),
    GpuModel("H100-PCIE", ("NVIDIA H100 PCIe",), "Hopper", 4, 12, 26.562, 5, nvlink_bridge=True, pci_ids=("0x2331",)),
    GpuModel("H100-SXM", ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", "NVIDIA H100 SXM5 64GB", "NVIDIA H100"),
             "Hopper", 4, 18, 26.562, 5, p2p_floor_gbps=335.0, pci_ids=("0x2330",)),
    GpuModel("H800-SXM", ("NVIDIA H800", "NVIDIA H800 80GB HBM3"), "Hopper", 4, 8, 26.562, 5, pci_ids=("0x2324",)),
    GpuModel("A100-PCIE", ("NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-40GB", "NVIDIA A100-PCIE-80GB", "A100-PCIE-40GB"),
             "Ampere", 3, 12, 25.0, 4, nvlink_bridge=True, pci_ids=("0x20b5", "0x20f1")),
    GpuModel("A100-SXM", ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB", "A100-SXM4-80GB",
                          "NVIDIA A100-SXM-80GB", "NVIDIA A100-SXM-64GB"),
             "Ampere", 3, 12, 25.0, 4, p2p_floor_gbps=235.0, pci_ids=("0x20b0", "0x20b2")),
    GpuModel("A800-SXM", ("NVIDIA A800-SXM4-80GB", "NVIDIA A800-SXM4-40GB"), "Ampere", 3, 8, 25.0, 4,
             pci_ids=("0x20f3",)),
    GpuModel("V100-SXM", ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB", "Tesla V100-SXM2-32GB-LS",
                          "Tesla V100-SXM3-32GB", "Tesla V100-SXM3-32GB-H"), "Volta", 2, 6, 25.781, 3,
             pci_ids=("0x1db1", "0x1db5", "0x1db8")),
    GpuModel("V100-PCIE", ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB", "Tesla V100S-PCIE-32GB", "Tesla V100-FHHL-16GB"),
             "Volta", None, 0, 0.0, 3, pci_ids=("0x1db4", "0x1db6", "0x1df6")),
    GpuModel("P100-SXM", ("Tesla P100-SXM2-16GB",), "Pascal", 1, 4, 20.0, 3, pci_ids=("0x15f9",)),
    GpuModel("RTX-A6000", ("NVIDIA RTX A6000",), "Ampere", 3, 4, 14.062, 4, nvlink_bridge=True, has_fans=True,
             pci_ids=("0x2230",), ecc_off_by_default=True),
    GpuModel("RTX-3090", ("NVIDIA GeForce RTX 3090",), "Ampere", 3, 4, 14.062, 4, p2p_supported=False,
             nvlink_bridge=True, has_fans=True, pci_ids=("0x2204",), ecc_off_by_default=True),
    GpuModel("RTX-4090", ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090 D"), "Ada", None, 0, 0.0, 4,
             p2p_supported=False, has_fans=True, pci_ids=("0x2684", "0x2685"), ecc_off_by_default=True),
    GpuModel("RTX-5090", ("NVIDIA GeForce RTX 5090",), "Blackwell", None, 0, 0.0, 5, p2p_supported=False, has_fans=True,
             pci_ids=("0x2b85",), ecc_off_by_default=True),
    GpuModel("L40S", ("NVIDIA L40S",), "Ada", None, 0, 0.0, 4, pci_ids=("0x26b9",)),
    GpuModel("L40", ("NVIDIA L40",), "Ada", None, 0, 0.0, 4, pci_ids=("0x26b5",)),
    GpuModel("L4", ("NVIDIA L4",), "Ada", None, 0, 0.0, 4, pci_ids=("0x27b8",)),
    GpuModel("A10", ("NVIDIA A10",), "Ampere", None, 0, 0.0, 4, pci_ids=("0x2236",)),
    GpuModel("T4", ("Tesla T4", "NVIDIA T4"), "Turing", None, 0, 0.0, 3, pci_ids=("0x1eb8",)),
    GpuModel("DGX-Display", ("NVIDIA DGX Display",), "Turing", None, 0, 0.0, 3, display=True, has_fans=True),
)

# Mellanox/NVIDIA HCAs by the `CA type` ibstat prints (sysfs hca_type): "MT" and the PCI device id
# in decimal (MT4131 = 0x1023).  Products from the PCI ID repository (pci.ids, vendor 15b3); the
# newest seen in published ibstat: MT4131 (ibstat_11ca_cx8_mt4131_cx7_port_guid_xe9780_01),
# MT41692 (ibstat_bf3_b3220_mt41692_logical_down_fusee_01).
NIC_MODELS: dict[str, str] = {
    "MT4115": "ConnectX-4", "MT4116": "ConnectX-4 VF", "MT4117": "ConnectX-4 Lx", "MT4118": "ConnectX-4 Lx VF",
    "MT4119": "ConnectX-5", "MT4120": "ConnectX-5 VF", "MT4121": "ConnectX-5 Ex", "MT4122": "ConnectX-5 Ex VF",
    "MT4123": "ConnectX-6", "MT4124": "ConnectX-6 VF", "MT4125": "ConnectX-6 Dx", "MT4126": "ConnectX VF",
    "MT4127": "ConnectX-6 Lx", "MT4129": "ConnectX-7", "MT4131": "ConnectX-8",
    "MT41682": "BlueField", "MT41686": "BlueField-2", "MT41689": "BlueField-3 Lx", "MT41692": "BlueField-3",
    "MT41695": "BlueField-4",
}


def nic_model(hca_type: Any) -> str | None:
    """'MT4131' -> 'ConnectX-8'; None for an HCA type not in the table (unknown, never guessed)."""
    return NIC_MODELS.get(hca_type.strip().upper()) if isinstance(hca_type, str) else None


# "NVIDIA A100 80GB PCIe MIG 3g.40gb" (a MIG device's name) is the parent GPU's model.
_MIG_SUFFIX = re.compile(r"\s+MIG\s+\d+g\.\d+gb(?:\+\w+)*$", re.I)


def _norm_name(name: str) -> str:
    """Case, repeated blanks and `-`/`_` versus space do not tell two products apart."""
    return re.sub(r"[\s_\-]+", " ", _MIG_SUFFIX.sub("", name.strip())).lower()


_BY_NAME = {_norm_name(n): m for m in MODELS for n in m.names}
_BY_ID = {i: m for m in MODELS for i in m.pci_ids}


def _norm_id(device_id: str | None) -> str | None:
    """'0x2330', '2330', '0x233010DE' (nvidia-smi -q's Device Id: device then vendor) -> '0x2330'."""
    if not device_id:
        return None
    m = re.fullmatch(r"\s*(?:0x)?([0-9a-fA-F]{4})(?:10de)?\s*", device_id, re.I)
    return f"0x{m.group(1).lower()}" if m else None


def lookup(name: Any, pci_device_id: Any = None) -> GpuModel | None:
    """The model by PCI device id where one is given and known, else by exact product name; None
    for no name, an unknown one, or a value that is not a string (a host's number or list is no
    model, and a list cannot even be a cache key)."""
    return _lookup(name if isinstance(name, str) else None,
                   pci_device_id if isinstance(pci_device_id, str) else None)


@functools.lru_cache(maxsize=1024)  # checks look models up per GPU pair
def _lookup(name: str | None, pci_device_id: str | None) -> GpuModel | None:
    dev = _norm_id(pci_device_id)
    if dev and dev in _BY_ID:
        return _BY_ID[dev]
    if not name:
        return None
    return _BY_NAME.get(_norm_name(name))


def lookup_cut(name: Any) -> GpuModel | None:
    """A name the default nvidia-smi screen cut to its column ("Tesla V100-SXM2...", "NVIDIA A100-PCI..."):
    the model when every known name starting so belongs to one model, else None ("NVIDIA GeForce ...")."""
    if not isinstance(name, str) or not name.rstrip().endswith("...") or len(name.rstrip()) < 8:
        return None
    start = _norm_name(name.rstrip()[:-3])
    if start in _BY_NAME:  # "NVIDIA GeForce RTX 4090 ...": a known name and more, so a product the table lacks
        return None
    found = {m.key for n, m in _BY_NAME.items() if n.startswith(start)}
    return next((m for m in MODELS if m.key in found), None) if len(found) == 1 else None


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


# NCCL all_reduce bus bandwidth floors per (model key, GPUs in the communicator) on NVSwitch
# boxes: the acceptance figures of Azure's AzHPC node health checks (nccl-tests all_reduce_perf on
# one node, large messages).  A box without a row here is judged from its own host-staging rate.
NCCL_ALLREDUCE_FLOORS_GBPS: dict[tuple[str, int], float] = {
    ("A100-SXM", 8): 228.0,
    ("H100-SXM", 8): 460.0,
    ("H200-SXM", 8): 431.0,
}
# The floors hold for large messages: smaller ones do not fill the links (and NVLS) yet.
NCCL_FLOOR_MIN_BYTES = 256 << 20
# A PCIe box (no NVLink): all_reduce through P2P or host memory should reach at least this share
# of what one copy staged through host memory moves (NCCL's SHM transport runs at about that rate).
NCCL_PCIE_STAGED_RATIO = 0.7


def nccl_allreduce_floor(model_key: str | None, gpu_count: int | None) -> float | None:
    if not model_key or not gpu_count:
        return None
    return NCCL_ALLREDUCE_FLOORS_GBPS.get((model_key, gpu_count))


def link_resting(link: Any, gen: int | None = None) -> bool:
    """A GPU's PCIe link at its full width whose speed alone is below what both ends can do (at
    least `gen` where given): how a GPU saves power between jobs, the speed coming back under load.
    Its speed at rest says nothing of the hardware; its width, or ends that cannot reach `gen`, do."""
    if not isinstance(link, Mapping):
        return False
    values = [link.get(k) for k in ("gen_current", "width_current", "width_max", "gen_max")]
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) < len(values):
        return False
    cur, width, width_max, gen_max = ints
    return width >= width_max and cur < gen_max and (gen is None or gen_max >= gen)
