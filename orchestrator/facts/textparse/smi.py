"""`nvidia-smi -L`, `nvidia-smi -q` (text) and `nvidia-smi -q -x` (XML) -> dataclasses.

`-q` text is a tree drawn by indentation (`Key : value` leaves, bare section titles); `-q -x` is
the same tree as XML.  Both are reduced to one `SmiGpu` record per GPU holding the fields the
nvml probe reports, so text and XML feed the same converter.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.numbers import (
    COUNT,
    INDEX,
    PERCENT,
    POWER_W,
    SIZE_BYTES,
    TEMPERATURE_C,
    Bound,
    float_or_none,
    int_or_none,
)
from orchestrator.facts.textparse.common import (
    HalfReadable,
    Note,
    TextParseError,
    clean_lines,
    decode_input,
    is_redacted,
    norm_bus_id,
)
from orchestrator.facts.textparse.nvlink import GPU_LINE

_MIG_LINE = re.compile(r"^\s*MIG\s+(\S+)\s+Device\s+(\d+)\s*:\s*\(UUID:\s*([^)]*?)\s*\)\s*$")
_DISPLAY_NAME = re.compile(r"\bDisplay\b", re.I)


# ---------------------------------------------------------------------------------------------
# nvidia-smi -L


@dataclass
class MigDevice:
    index: int  # restarts at 0 on every GPU
    profile: str | None  # "1g.10gb"
    uuid: str | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_total_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ListedGpu:
    index: int
    name: str
    uuid: str | None
    mig_devices: list[MigDevice] = field(default_factory=list)
    uuid_unknown: str | None = None  # why uuid is None (redacted)

    @property
    def display(self) -> bool:
        """A display-only board (DGX Station's "NVIDIA DGX Display"): not a compute GPU."""
        return bool(_DISPLAY_NAME.search(self.name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "display": self.display,
            "mig_devices": [m.to_dict() for m in self.mig_devices],
        }


@dataclass
class SmiList:
    gpus: list[ListedGpu]
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"
    partial: bool = False  # lines elided or GPU indices with gaps: the list is not the whole host

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "smi_list",
            "source": self.source,
            "gpus": [g.to_dict() for g in self.gpus],
            "notes": [n.to_dict() for n in self.notes],
        }


def parse_smi_list(text: str | bytes, source: str = "<text>") -> SmiList:
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    gpus: list[ListedGpu] = []
    seen: set[int] = set()
    lines, notes = clean_lines(text, source)
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        m = GPU_LINE.match(line)
        if m:
            idx = int_or_none(m.group(1), INDEX)
            if idx is None:
                notes.append(Note(i, f"GPU line with no index a host has ({m.group(1)[:20]!r}...), skipped"))
                continue
            if idx in seen:
                notes.append(Note(i, f"GPU {idx} is listed twice: the first line is kept, this one skipped"))
                continue
            seen.add(idx)
            uuid = m.group(3) or None
            if is_redacted(uuid):
                notes.append(Note(i, f"GPU {idx}: UUID redacted in the source: unknown"))
                uuid = None
            gpus.append(ListedGpu(idx, m.group(2), uuid, uuid_unknown="redacted in the source" if m.group(3) and not uuid
                                  else None))
            continue
        m = _MIG_LINE.match(line)
        if m:
            if not gpus:
                notes.append(Note(i, "MIG device before any GPU line, ignored"))
                continue
            mig_uuid = None if is_redacted(m.group(3)) else (m.group(3) or None)
            mig_index = int_or_none(m.group(2), INDEX)
            if mig_index is None:
                notes.append(Note(i, "MIG line with no index a host has, skipped"))
                continue
            gpus[-1].mig_devices.append(MigDevice(mig_index, m.group(1), mig_uuid))
            continue
        if re.match(r"^\s*(GPU|MIG)\b", line):
            notes.append(Note(i, f"GPU/MIG line not understood (truncated?), skipped: {line.strip()[:80]!r}"))
            continue
        notes.append(Note(i, f"not a -L line, ignored: {line.strip()[:80]!r}"))
    if not gpus:
        raise TextParseError("no 'GPU n: NAME (UUID: ...)' line found: not nvidia-smi -L output", source, 1)
    listed = sorted(g.index for g in gpus)
    partial = listed != list(range(len(listed))) or any(
        n.text.startswith(("elision", "GPU/MIG line not understood")) for n in notes)
    if partial:
        notes.append(Note(None, f"GPUs {', '.join(map(str, listed))} listed with lines left out or cut: "
                                f"the host has at least {listed[-1] + 1} GPU(s)"))
    return SmiList(gpus, notes, source, partial)


# ---------------------------------------------------------------------------------------------
# nvidia-smi -q / -q -x


@dataclass
class SmiGpu:
    """One GPU of `-q`.  Every field is None when absent or N/A; `unknown` says which and why."""

    bus_id: str | None = None
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    index: int | None = None  # --query-gpu's index column (-q prints GPUs in index order, no index)
    board_part_number: str | None = None
    vbios: str | None = None
    inforom_image: str | None = None
    architecture: str | None = None
    compute_capability: str | None = None  # --query-gpu's compute_cap ("9.0"); -q does not print it
    minor_number: int | None = None
    module_id: int | None = None
    pci_device_id: str | None = None  # "0x2330"
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    mig_current: bool | None = None
    mig_pending: bool | None = None
    mig_devices: list[MigDevice] = field(default_factory=list)
    virtualization_mode: str | None = None  # none | passthrough | vgpu | host_vgpu | host_vsga
    c2c_mode: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None  # the link's max (min of GPU and host)
    pcie_gen_gpu_max: int | None = None  # "Device Max"
    pcie_gen_host_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    fan_speed_pct: int | None = None
    temperature_c: int | None = None
    memory_temperature_c: int | None = None
    power_w: float | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    bar1_total_bytes: int | None = None
    addressing_mode: str | None = None  # "none", "hmm", "ats" (Grace) as printed, lower case
    power_limit_w: float | None = None
    module_power_w: float | None = None  # "Module Power Readings" (Grace Hopper: the whole module)
    ecc_current: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remapped_pending: bool | None = None
    remapped_failure: bool | None = None
    fabric_state: str | None = None  # lower case: not_supported|not_started|in_progress|completed
    fabric_status: str | None = None
    fabric_clique_id: int | None = None
    fabric_cluster_uuid: str | None = None
    perf_state: str | None = None  # "P0".."P15": the default screen's Perf column
    utilization_pct: int | None = None  # the default screen's GPU-Util column
    lost: bool | None = None  # the default screen: "Unable to determine the device handle" for this GPU
    unknown: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["mig_devices"] = [m.to_dict() for m in self.mig_devices]
        d["unknown"] = dict(self.unknown)
        return d


@dataclass
class ScreenProcess:
    """A row of the default screen's Processes box."""

    gpu: int
    pid: int
    type: str  # C, G, C+G, M, M+C as printed
    name: str
    memory_used_bytes: int | None  # None where the screen printed N/A (WSL, containers)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SmiQuery:
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: list[SmiGpu]
    xml: bool
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"
    screen: bool = False  # read from the default `nvidia-smi` screen, not -q
    processes: list[ScreenProcess] = field(default_factory=list)  # the screen's Processes box
    at_least: int | None = None  # a cut screen: the fewest GPUs the host has (attached_gpus is then None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "smi_screen" if self.screen else "smi_query_xml" if self.xml else "smi_query",
            "source": self.source,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "attached_gpus": self.attached_gpus,
            "gpus": [g.to_dict() for g in self.gpus],
            "processes": [p.to_dict() for p in self.processes],
            "notes": [n.to_dict() for n in self.notes],
        }


_NA = {"n/a", "[n/a]", "not available", "[not supported]", "not supported", "unknown error", "[unknown error]",
       "requested functionality has been deprecated", "insufficient permissions", "[insufficient permissions]"}


def _na_reason(v: str | None) -> str | None:
    if v is None:
        return "not printed"
    if is_redacted(v):
        return "redacted in the source"
    s = v.strip()
    if s.lower() in _NA or not s:
        return f"{s or 'empty'} in the source"
    return None


def _int(v: str, bound: Bound = COUNT) -> int | None:
    """A printed whole number (a count unless `bound` says otherwise); None past its range."""
    m = re.fullmatch(r"\s*(-?\d+)\s*(?:x|C|%|bank\(s\))?\s*", v)
    return int_or_none(m.group(1), bound) if m else None


def _temp(v: str) -> int | None:
    return _int(v, TEMPERATURE_C)


def _pct(v: str) -> int | None:
    return _int(v, PERCENT)


def _float(v: str) -> float | None:
    """Watts as printed (`350.00 W`): None past POWER_W."""
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*W?\s*", v)
    return float_or_none(m.group(1), POWER_W) if m else None


def _mib(v: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*(MiB|GiB|KiB)\s*", v)
    size = int_or_none(m.group(1), SIZE_BYTES) if m else None
    return None if m is None or size is None else size * {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[m.group(2)]


def _bool(v: str) -> bool | None:
    s = v.strip().lower()
    if s in ("enabled", "yes", "true", "on", "active"):
        return True
    if s in ("disabled", "no", "false", "off", "not active"):
        return False
    return None


def _virt(v: str) -> str | None:
    s = v.strip().lower().replace("-", " ").replace("_", " ")
    table = {"none": "none", "pass through": "passthrough", "passthrough": "passthrough", "vgpu": "vgpu",
             "host vgpu": "host_vgpu", "host vsga": "host_vsga"}
    return table.get(s)


def _fabric_state(v: str) -> str | None:
    s = v.strip().lower().replace(" ", "_")
    return s if s in ("not_supported", "not_started", "in_progress", "completed") else None


def _perf(v: str) -> str | None:
    """`P0`..`P15` as printed (a poster's trailing comment removed)."""
    m = re.match(r"\s*(P\d{1,2})\b", v)
    return m.group(1) if m else None


def _dev_id(v: str) -> str | None:
    m = re.fullmatch(r"\s*(?:0x)?([0-9A-Fa-f]{4})([0-9A-Fa-f]{4})\s*", v)
    return f"0x{m.group(1).lower()}" if m else None


# (field, converter, [paths in -q text], [paths in -q -x XML]); paths are section/key chains.
_FIELDS: list[tuple[str, Any, list[tuple[str, ...]], list[str]]] = [
    ("name", str, [("Product Name",)], ["product_name"]),
    ("uuid", str, [("GPU UUID",)], ["uuid"]),
    ("serial", str, [("Serial Number",)], ["serial"]),
    ("board_part_number", str, [("Board Part Number",)], ["board_part_number"]),
    ("vbios", str, [("VBIOS Version",)], ["vbios_version"]),
    ("inforom_image", str, [("Inforom Version", "Image Version")], ["inforom_version/img_version"]),
    ("architecture", str, [("Product Architecture",)], ["product_architecture"]),
    ("minor_number", _int, [("Minor Number",)], ["minor_number"]),
    ("module_id", _int, [("Platform Info", "Module Id"), ("Module ID",), ("Module Id",)],
     ["platformInfo/module_id", "gpu_module_id"]),
    ("pci_device_id", _dev_id, [("PCI", "Device Id")], ["pci/pci_device_id"]),
    ("persistence_mode", _bool, [("Persistence Mode",)], ["persistence_mode"]),
    ("compute_mode", lambda v: v.strip().lower().replace(" ", "_"), [("Compute Mode",)], ["compute_mode"]),
    ("mig_current", _bool, [("MIG Mode", "Current")], ["mig_mode/current_mig"]),
    ("mig_pending", _bool, [("MIG Mode", "Pending")], ["mig_mode/pending_mig"]),
    ("virtualization_mode", _virt, [("GPU Virtualization Mode", "Virtualization Mode")],
     ["gpu_virtualization_mode/virtualization_mode"]),
    ("c2c_mode", lambda v: v.strip().lower(), [("GPU C2C Mode",)], ["c2c_mode"]),
    ("pcie_gen_current", _int, [("PCI", "GPU Link Info", "PCIe Generation", "Current")],
     ["pci/pci_gpu_link_info/pcie_gen/current_link_gen"]),
    ("pcie_gen_max", _int, [("PCI", "GPU Link Info", "PCIe Generation", "Max")],
     ["pci/pci_gpu_link_info/pcie_gen/max_link_gen"]),
    ("pcie_gen_gpu_max", _int, [("PCI", "GPU Link Info", "PCIe Generation", "Device Max")],
     ["pci/pci_gpu_link_info/pcie_gen/max_device_link_gen"]),
    ("pcie_gen_host_max", _int, [("PCI", "GPU Link Info", "PCIe Generation", "Host Max")],
     ["pci/pci_gpu_link_info/pcie_gen/max_host_link_gen"]),
    ("pcie_width_current", _int, [("PCI", "GPU Link Info", "Link Width", "Current")],
     ["pci/pci_gpu_link_info/link_widths/current_link_width"]),
    ("pcie_width_max", _int, [("PCI", "GPU Link Info", "Link Width", "Max")],
     ["pci/pci_gpu_link_info/link_widths/max_link_width"]),
    ("pcie_replays", _int, [("PCI", "Replays Since Reset")], ["pci/replay_counter"]),
    ("fan_speed_pct", _pct, [("Fan Speed",)], ["fan_speed"]),
    ("temperature_c", _temp, [("Temperature", "GPU Current Temp")], ["temperature/gpu_temp"]),
    ("memory_temperature_c", _temp, [("Temperature", "Memory Current Temp")], ["temperature/memory_temp"]),
    ("power_w", _float, [("GPU Power Readings", "Power Draw"), ("GPU Power Readings", "Instantaneous Power Draw"),
                         ("Power Readings", "Power Draw")],
     ["gpu_power_readings/power_draw", "gpu_power_readings/instant_power_draw", "power_readings/power_draw"]),
    ("power_limit_w", _float, [("GPU Power Readings", "Current Power Limit"), ("Power Readings", "Power Limit")],
     ["gpu_power_readings/current_power_limit", "power_readings/power_limit"]),
    ("module_power_w", _float, [("Module Power Readings", "Power Draw")], ["module_power_readings/power_draw"]),
    ("addressing_mode", lambda v: v.strip().lower(), [("Addressing Mode",)],
     ["addressing_mode"]),
    ("memory_total_bytes", _mib, [("FB Memory Usage", "Total")], ["fb_memory_usage/total"]),
    ("memory_used_bytes", _mib, [("FB Memory Usage", "Used")], ["fb_memory_usage/used"]),
    ("bar1_total_bytes", _mib, [("BAR1 Memory Usage", "Total")], ["bar1_memory_usage/total"]),
    ("ecc_current", _bool, [("ECC Mode", "Current")], ["ecc_mode/current_ecc"]),
    # DRAM Uncorrectable since Ampere drivers; "Double Bit / Total" on older ones
    ("ecc_volatile_uncorrected", _int, [("ECC Errors", "Volatile", "DRAM Uncorrectable"),
                                        ("ECC Errors", "Volatile", "Double Bit", "Total")],
     ["ecc_errors/volatile/dram_uncorrectable", "ecc_errors/volatile/double_bit/total"]),
    ("ecc_aggregate_uncorrected", _int, [("ECC Errors", "Aggregate", "DRAM Uncorrectable"),
                                         ("ECC Errors", "Aggregate", "Double Bit", "Total")],
     ["ecc_errors/aggregate/dram_uncorrectable", "ecc_errors/aggregate/double_bit/total"]),
    ("ecc_aggregate_corrected", _int, [("ECC Errors", "Aggregate", "DRAM Correctable")],
     ["ecc_errors/aggregate/dram_correctable"]),
    ("remapped_correctable", _int, [("Remapped Rows", "Correctable Error")], ["remapped_rows/remapped_row_corr"]),
    ("remapped_uncorrectable", _int, [("Remapped Rows", "Uncorrectable Error")], ["remapped_rows/remapped_row_unc"]),
    ("remapped_pending", _bool, [("Remapped Rows", "Pending")], ["remapped_rows/remapped_row_pending"]),
    ("remapped_failure", _bool, [("Remapped Rows", "Remapping Failure Occurred")],
     ["remapped_rows/remapped_row_failure"]),
    ("fabric_state", _fabric_state, [("Fabric", "State")], ["fabric/state"]),
    ("fabric_status", lambda v: v.strip(), [("Fabric", "Status")], ["fabric/status"]),
    ("fabric_clique_id", _int, [("Fabric", "CliqueId")], ["fabric/cliqueId"]),
    ("fabric_cluster_uuid", lambda v: v.strip(), [("Fabric", "ClusterUUID")], ["fabric/clusterUuid"]),
    # the default screen's Perf and GPU-Util columns, which -q prints too
    ("perf_state", _perf, [("Performance State",)], ["performance_state"]),
    ("utilization_pct", _pct, [("Utilization", "GPU")], ["utilization/gpu_util"]),
]


def _fill(gpu: SmiGpu, lookup: Any, xml: bool) -> None:
    for name, conv, text_paths, xml_paths in _FIELDS:
        raw: str | None = None
        for p in xml_paths if xml else text_paths:
            raw = lookup(p)
            if raw is not None:
                break
        why = _na_reason(raw)
        if why or raw is None:
            gpu.unknown[name] = why or "not printed"
            continue
        value = conv(raw)
        if value is None or value == "":
            gpu.unknown[name] = f"{raw.strip()!r} not understood"
            continue
        setattr(gpu, name, value)


@dataclass
class _Node:
    key: str
    value: str | None
    line: int
    children: list[_Node] = field(default_factory=list)

    def get(self, *path: str) -> _Node | None:
        node: _Node | None = self
        for part in path:
            if node is None:
                return None
            node = next((c for c in node.children if c.key.lower() == part.lower()), None)
        return node


# The first whitespace-colon separates key and value ("Bus Id   : 00000000:18:00.0"); found by a
# linear search, since a backtracking key pattern is quadratic on long lines of spaces.
_SEP = re.compile(r"\s:(?=\s|$)")


def _tree(lines: list[str]) -> _Node:
    root = _Node("", None, 0)
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for i, raw in enumerate(lines, start=1):
        if not raw.strip() or raw.strip().startswith("==="):
            continue
        expanded = raw.expandtabs(4)
        indent = len(expanded) - len(expanded.lstrip())
        m = _SEP.search(raw)
        if m and raw[: m.start()].strip():
            key, value = raw[: m.start()].strip(), raw[m.end() :].strip()
        else:
            key, value = raw.strip(), None
        while stack[-1][0] >= indent:
            stack.pop()
        node = _Node(key, value, i)
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def parse_smi_query(text: str | bytes, source: str = "<text>") -> SmiQuery:
    """Parse `nvidia-smi -q` (also `-a`).  An excerpt with fewer GPU blocks than 'Attached GPUs'
    parses; the shortfall is a note."""
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    lines, notes = clean_lines(text, source)
    root = _tree(lines)
    gpus: list[SmiGpu] = []
    for node in root.children:
        m = re.fullmatch(r"GPU\s+([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])", node.key)
        if not m or node.value is not None:
            continue
        gpu = SmiGpu(bus_id=norm_bus_id(m.group(1)))
        if not node.children:
            notes.append(Note(node.line, f"GPU block {m.group(1)} has no fields (truncated?): only its bus id is known"))

        def lookup(path: tuple[str, ...], node: _Node = node) -> str | None:
            found = node.get(*path)
            return found.value if found is not None else None

        _fill(gpu, lookup, xml=False)
        migs = node.get("MIG Devices")
        for mig in migs.children if migs is not None else []:
            if mig.key.lower() != "mig device":
                continue
            idx_node = mig.get("Index")
            idx = _int(idx_node.value or "") if idx_node is not None else None
            if idx is None:
                notes.append(Note(mig.line, "MIG Device without an Index, ignored"))
                continue
            gi, ci, fb = mig.get("GPU Instance ID"), mig.get("Compute Instance ID"), mig.get("FB Memory Usage", "Total")
            gpu.mig_devices.append(MigDevice(
                idx, None, None,
                _int(gi.value or "") if gi is not None else None,
                _int(ci.value or "") if ci is not None else None,
                _mib(fb.value or "") if fb is not None else None,
            ))
        pci_bus = lookup(("PCI", "Bus Id"))
        if pci_bus and norm_bus_id(pci_bus) and norm_bus_id(pci_bus) != gpu.bus_id:
            notes.append(Note(node.line, f"GPU block {m.group(1)} says PCI Bus Id {pci_bus}"))
        gpus.append(gpu)
    top = {c.key.lower(): c.value for c in root.children if c.value is not None}
    if not gpus and "driver version" not in top and "kmd version" not in top:
        raise TextParseError("no 'GPU 00000000:bb:dd.f' block found: not nvidia-smi -q output", source, 1)
    attached = _int(top.get("attached gpus") or "")
    if not gpus and attached != 0:
        # its header without a GPU block: which GPUs, and whether any is there, is cut away
        raise HalfReadable("nvidia-smi -q, half-readable: cut before its first 'GPU 00000000:bb:dd.f' block "
                           f"(Attached GPUs: {top.get('attached gpus') or 'not printed'})",
                           "the whole `nvidia-smi -q` (or `nvidia-smi -L`)", source, len(lines))
    if attached is not None and attached != len(gpus):
        notes.append(Note(None, f"Attached GPUs says {attached} but {len(gpus)} GPU block(s) are in the text "
                                "(an excerpt, or GPUs whose block is missing)"))
    driver, cuda = _versions(top.get("kmd version"), top.get("driver version"), top.get("cuda umd version"),
                             top.get("cuda version"))
    return SmiQuery(driver, cuda, attached, gpus, False, notes, source)


def _clean(v: str | None) -> str | None:
    """A version as printed, less the `[Deprecated; ... Use KMD Version instead]` 610+ drivers append."""
    v = None if v is None else re.sub(r"\s*\[Deprecated[^\]]*\]?\s*$", "", v.strip(), flags=re.I)
    return None if v is None or _na_reason(v) or v.lower().startswith("deprecated") else v


def _versions(kmd: str | None, driver: str | None, umd: str | None, cuda: str | None) -> tuple[str | None, str | None]:
    """(driver, CUDA) versions: from 610 `KMD Version` / `CUDA UMD Version` (the old names are then
    deprecated copies), before that `Driver Version` / `CUDA Version`."""
    return _clean(kmd) or _clean(driver), _clean(umd) or _clean(cuda)


_DOCTYPE = re.compile(r"<!DOCTYPE\s+nvidia_smi_log\s+SYSTEM\s+\"[\w.\-]+\.dtd\"\s*>")


def parse_smi_xml(text: str | bytes, source: str = "<text>") -> SmiQuery:
    """Parse `nvidia-smi -q -x`.  nvidia-smi's own `<!DOCTYPE nvidia_smi_log SYSTEM "x.dtd">` is
    removed; any other DOCTYPE or ENTITY (entity expansion, external entities) is refused before
    the XML parser sees it, since defusedxml is not a dependency."""
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    cleaned = _DOCTYPE.sub("", text, count=1)
    bad = re.search(r"<!(?:DOCTYPE|ENTITY)", cleaned, re.I)
    if bad:
        raise TextParseError("XML with a DOCTYPE/ENTITY declaration is refused (entity expansion risk)",
                             source, cleaned.count("\n", 0, bad.start()) + 1)
    try:
        root = ET.fromstring(cleaned)
    except ET.ParseError as e:
        line = e.position[0] if getattr(e, "position", None) else None
        why = f"not well-formed XML ({str(e).split(':')[0]}; truncated?)"
        if re.search(r"<nvidia_smi_log\b", cleaned) and "</nvidia_smi_log>" not in cleaned:
            # nvidia-smi's log, cut before its end: a cut XML document cannot be read in part
            raise HalfReadable(f"{why}: nvidia-smi -q -x cut before its end, half-readable",
                               "the whole `nvidia-smi -q -x` (or `nvidia-smi -q`)", source, line) from None
        raise TextParseError(why, source, line) from None
    if root.tag != "nvidia_smi_log":
        raise TextParseError(f"XML root is <{root.tag}>, not <nvidia_smi_log>", source, 1)
    notes: list[Note] = []
    gpus: list[SmiGpu] = []
    for el in root.findall("gpu"):
        gpu = SmiGpu(bus_id=norm_bus_id(el.get("id")) or norm_bus_id(el.findtext("pci/pci_bus_id")))

        def lookup(path: str, el: ET.Element = el) -> str | None:
            found = el.find(path)
            return None if found is None else (found.text or "").strip()

        _fill(gpu, lookup, xml=True)
        for mig in el.findall("mig_devices/mig_device"):
            idx = _int(mig.findtext("index") or "")
            if idx is None:
                notes.append(Note(None, f"GPU {gpu.bus_id}: a mig_device without an index, ignored"))
                continue
            gpu.mig_devices.append(MigDevice(
                idx, None, None,
                _int(mig.findtext("gpu_instance_id") or ""),
                _int(mig.findtext("compute_instance_id") or ""),
                _mib(mig.findtext("fb_memory_usage/total") or ""),
            ))
        gpus.append(gpu)
    attached = _int(root.findtext("attached_gpus") or "")
    if attached is not None and attached != len(gpus):
        notes.append(Note(None, f"attached_gpus says {attached} but {len(gpus)} <gpu> element(s) are present"))
    driver, cuda = _versions(root.findtext("kmd_version"), root.findtext("driver_version"),
                             root.findtext("cuda_umd_version"), root.findtext("cuda_version"))
    return SmiQuery(driver, cuda, attached, gpus, True, notes, source)
