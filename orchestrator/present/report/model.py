"""The judged fleet -> the report's view model.

This is the only module of the report that knows the shapes of the facts sections (facts["host"],
["gpus"], ["nvlink"], ["topology"], ["pcie"], ["p2p"]); templates and the SVG code see only the
dataclasses below.  When a section's shape changes, the reader for that section here is the one edit.

It decides nothing: each host's health and faults, the floor a P2P pair was judged against, which
PCIe link is a fault and which uplink a check flagged all come from the verdict (verdict/result.py,
verdict/drawing.py); drift comes as verdict/drift.py computed it.  Every facts reader is defensive:
facts come from stored runs that may be partial or old, and a report must render whatever is there.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, cast

from orchestrator.engine.outcomes import Outcome
from orchestrator.facts.model import Facts, GpusFacts, HostBoard, HostDriver, HostFacts, HostVirtualization
from orchestrator.present.readable import readable
from orchestrator.verdict import rules
from orchestrator.verdict.changes import FleetDiff
from orchestrator.verdict.device_health import DeviceHealth, DeviceState, HostDevices, without_verdict
from orchestrator.verdict.drawing import HostDrawing
from orchestrator.verdict.fabric_faults import FabricFault, host_findings
from orchestrator.verdict.findings import SEVERITY_ORDER, Finding, severity_rank
from orchestrator.verdict.health import HEALTH_ORDER
from orchestrator.verdict.result import FleetResult, JudgedHost

SEVERITIES = SEVERITY_ORDER
_OUTLIER = rules.topology.CLASS_OUTLIER.id
LEVELS = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")


# ----------------------------------------------------------------------------------------------
# View model


@dataclass
class FindingRow:
    id: str
    severity: str
    kind: str
    host: str
    host_class: str
    subject: str
    message: str
    expected: str
    actual: str
    hint: str
    anchor: str  # id of the host's section in the page, "" when the host has none
    caused_by: str = ""  # "gpu.count.pci_vs_nvml 0000:ba:00.0": the root this finding follows from
    caused_by_id: str = ""  # its id alone
    consequences: int = 0  # findings that follow from this one
    action: str = ""  # the finding's action class (verdict/actions.py) and its reason
    because: str = ""
    devices: str = ""  # its devices, one line ("gpu gpu=2 bus_id=0000:3a:00.0"): the subject cell's title

    @property
    def why(self) -> str:
        """The finding as a why cell says it: its device (the subject) and message, the subject once
        ("GPU2 (0000:3a:00.0) link trained at ..." names it already)."""
        if not self.subject or self.subject in self.message:
            return self.message
        return f"{self.subject}: {self.message}"


@dataclass
class GpuRow:
    index: str
    bus_id: str
    name: str
    uuid: str
    serial: str
    part_number: str  # board part number (procurement list)
    vbios: str
    memory: str
    pcie: str
    pcie_degraded: bool
    numa: str
    mig: str
    temperature: str
    power: str
    health: str = "not judged"  # the verdict's (verdict/device_health.py): "failed: nvlink.link.down"
    health_state: str = "not-judged"  # failed | degraded | ok | not-judged: the cell's CSS class


@dataclass
class LevelMatrix:
    labels: list[str]
    cells: list[list[str]]
    # per cell, the verdict on an NV# bond: "" (sound, or no bond), else "failed: nvlink.link.down"
    # or "degraded: ..." (verdict/device_health.py nvlink_pair)
    bonds: list[list[str]] = field(default_factory=list)

    def bond_state(self, i: int, j: int) -> str:
        """"failed" or "degraded" for a bond the verdict faulted, "" otherwise."""
        text = self.bonds[i][j] if i < len(self.bonds) and j < len(self.bonds[i]) else ""
        return text.split(":", 1)[0]


@dataclass
class GraphNode:
    id: str  # bus id
    label: str  # "GPU3", "NVSwitch1"
    kind: str  # "gpu" | "nvswitch" | "other"
    links: int = 0  # GPUs: links that exist; switches: links seen from the GPUs
    down: int = 0  # of those, not up
    down_unattached: int = 0  # down links whose far end NVML could not name
    health: str = ""  # GPUs: the verdict on its NVLinks when it faulted them ("failed: nvlink.link.down")


@dataclass
class GraphEdge:
    a: str
    b: str
    links: int  # bonded link count (up + down)
    down: int  # links of this bond that are not up


@dataclass
class NvlinkGraph:
    nodes: list[GraphNode]
    edges: list[GraphEdge]

    @property
    def down_links(self) -> int:
        """Physical links down: a GPU<->GPU link is listed by both GPUs but is one link."""
        return sum(e.down for e in self.edges) + sum(n.down_unattached for n in self.nodes)


@dataclass
class PcieNode:
    bus_id: str
    kind: str  # root_port | switch | gpu | nic | nvswitch | nvme | other
    label: str  # short label drawn in the box: "GPU3", "NIC1", "switch"
    name: str  # device name (host-controlled)
    link: str  # "Gen5 x16" or "Gen4 x8 (max Gen5 x16)"
    downgraded: bool
    shared_uplink: bool  # a switch whose uplink carries a GPU and a NIC (or several GPUs and a NIC)
    note: str
    children: list[PcieNode] = field(default_factory=list)
    health: str = ""  # the verdict on the device when it faulted it ("failed: gpu.xid"), else ""


@dataclass
class HeatCell:
    measured: float | None
    expected: float | None
    verified: bool | None = None  # False: the copied data differed (p2p.data.mismatch): never good

    @property
    def ratio(self) -> float | None:
        if self.measured is None or not self.expected:
            return None
        return self.measured / self.expected


@dataclass
class P2pHeat:
    title: str
    unit: str
    labels: list[str]
    cells: list[list[HeatCell]]


@dataclass
class NcclTable:
    """facts["nccl"] as the report shows it: a header line and nccl-tests' columns per size."""

    header: str
    notes: list[str]
    rows: list[tuple[str, str, str, str, str, str]]  # op, size (B), time (us), algbw, busbw, #wrong ("?": unknown)


@dataclass
class NicRow:
    """One network adapter's identity (facts["nic"]["devices"]): what a procurement list names."""

    name: str
    bus_id: str
    model: str  # HCA type ("MT4129")
    board_id: str  # PSID ("MT_0000000838")
    firmware: str
    guid: str


@dataclass
class HostPage:
    name: str
    anchor: str
    address: str
    groups: list[str]
    health: str  # verdict/health.py: healthy, degraded, failed, unreachable, incomplete
    health_reason: str
    faults_fail: int
    faults_warn: int
    outcome: str
    reason: str
    host_class: str
    is_outlier: bool
    outlier_differences: list[str]
    identity: list[tuple[str, str]]
    probes: list[tuple[str, str, str]]  # probe, outcome, reason
    findings: list[FindingRow]
    worst: str  # worst finding severity, "" when none
    gpus: list[GpuRow]
    levels: LevelMatrix | None
    nvlink: NvlinkGraph | None
    pcie: list[PcieNode]  # roots
    p2p: P2pHeat | None
    nccl: NcclTable | None
    detailed: bool  # full section with pictures (hosts with problems, class representatives)
    representative: bool
    nics: list[NicRow] = field(default_factory=list)
    model: str = ""  # the GPUs as the hosts table filters them: "8× NVIDIA H100 80GB HBM3"
    driver: str = ""
    nominal_class: str = ""  # the class of its hardware when nothing is wrong (ClassView.nominal)


@dataclass
class ClassView:
    name: str
    anchor: str
    fingerprint: str
    members: int
    outliers: list[tuple[str, list[str]]]
    representative: str
    hosts: list[HostPage]
    # a fault class (its hosts differ from `nominal` by a fault): the nominal class's name and what
    # differs, the cause's finding ids; "" / [] for a class of its own
    nominal: str = ""
    difference: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    fault_classes: list[ClassView] = field(default_factory=list)  # of a nominal class: its fault classes
    health: list[tuple[str, int]] = field(default_factory=list)  # CLASS_HEALTH -> hosts, fault classes included


# A class's health chart: the verdict's health folded into what a class owner asks (unreachable and
# incomplete hosts were not judged).
CLASS_HEALTH = ("healthy", "degraded", "failed", "not judged")


def class_health(pages: Sequence[HostPage]) -> list[tuple[str, int]]:
    counts = dict.fromkeys(CLASS_HEALTH, 0)
    for p in pages:
        counts[p.health if p.health in counts else "not judged"] += 1
    return list(counts.items())


@dataclass
class Drift:
    previous_run: str
    added_hosts: list[str]
    removed_hosts: list[str]
    changes: list[tuple[str, str, str]]  # host, kind (orchestrator.verdict.drift), what changed
    new_findings: list[FindingRow]
    resolved_findings: list[FindingRow]


@dataclass
class FabricRow:
    """A fault of the fabric, once (verdict/fabric_faults.py): no host's row or page carries it."""

    id: str
    severity: str
    kind: str
    subject: str
    message: str
    hosts: str  # "24 host(s): a, b, c, d, e (+19 more)"
    hint: str


def fabric_row(f: FabricFault) -> FabricRow:
    return FabricRow(id=_str(f.id), severity=f.severity.value, kind=f.kind.value, subject=_str(f.subject),
                     message=_str(f.message), hosts=_str(f.hosts_text()), hint=_str(f.hint))


@dataclass
class FleetView:
    run_id: str
    started: str
    finished: str  # when the run ended, or where it was stopped (state interrupted)
    state: str  # complete, interrupted, ...
    stopped: str  # an interrupted run: how far it got ("12 of 40 hosts finished, ...")
    playbook: str
    probes: list[str]
    security_floor: str  # the floor file and its date, where the run judged the security floor
    host_count: int
    health: list[tuple[str, int]]  # hosts by health, worst first
    faults: list[tuple[str, int]]  # faults (root findings) by severity
    outcomes: list[tuple[str, int]]  # hosts by transport outcome, as engine/outcomes.py orders them
    severities: list[tuple[str, int]]
    classes: list[ClassView]
    unclassified: list[HostPage]
    outliers: list[tuple[str, str, list[str]]]  # host, class, differences
    findings: list[FindingRow]
    drift: Drift | None
    pictures_capped: int  # hosts that would have had pictures but were past the cap
    fabric: list[FabricRow] = field(default_factory=list)  # the fabric's faults, each once


# ----------------------------------------------------------------------------------------------
# Small helpers


# Characters that would let a host-controlled string hide or reorder text on screen: C0/C1
# controls, bidi embeddings/overrides/isolates, zero-width characters.  They are shown as visible
# \\uXXXX escapes instead, so "gpu01\u202e" is not mistaken for another host.
_INVISIBLE = {c: f"\\u{c:04x}" for c in [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x200B, 0x200C, 0x200D,
                                            0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0xFEFF]}


def visible(text: str) -> str:
    """Text with invisible and direction-changing characters made visible."""
    return text.translate(_INVISIBLE)


def _str(value: Any) -> str:
    """A value as text for a table cell.  {"unknown": reason} becomes "unknown (reason)"."""
    if isinstance(value, str):
        return visible(value)
    if value is None:
        return ""
    if isinstance(value, dict) and "unknown" in value:
        return "unknown ({})".format(_str(value["unknown"]))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return (f"{value:.1f}").rstrip("0").rstrip(".")
    if isinstance(value, (list, tuple)):
        return ", ".join(_str(v) for v in value)
    if isinstance(value, dict):
        # expected/actual of a finding: "state: in_progress, status: SUCCESS", never a dict repr
        return ", ".join(f"{visible(str(k))}: {_str(v) if v is not None else '?'}" for k, v in value.items())
    return visible(str(value))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _records(value: Any) -> Sequence[Any]:
    """fleet["hosts"]: a list, or records kept on disk (spool.SpooledRecords)."""
    return value if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else []


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def anchor_for(prefix: str, name: str, seen: dict[str, int]) -> str:
    """An HTML id safe for any host name: ASCII letters, digits and dashes, unique within the page."""
    core = "".join(c if (c.isascii() and c.isalnum()) or c == "-" else "_" for c in name)
    if core != name or len(core) > 48:
        # Names that needed rewriting keep a checksum of the original, so two hostile names
        # with the same safe prefix still get distinct, stable ids.
        core = f"{core[:40]}-{zlib.crc32(name.encode('utf-8', 'surrogatepass')):08x}"
    base = f"{prefix}-{core}"
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


def _link_text(link: dict[str, Any]) -> str:
    """A PCIe link ({gen,width}_{current,max}, as both the gpus and pcie sections write it): what
    it trained at, and its maximum where that is more.  Whether that is a fault is the verdict's
    (HostDrawing.link_degraded): a GPU at rest runs its link slower."""
    gen, width = link.get("gen_current"), link.get("width_current")
    max_gen, max_width = link.get("gen_max"), link.get("width_max")
    if gen is None and width is None:
        return ""
    now = "Gen{} x{}".format(_str(gen) or "?", _str(width) or "?")
    below = (isinstance(gen, int) and isinstance(max_gen, int) and gen < max_gen) or \
            (isinstance(width, int) and isinstance(max_width, int) and width < max_width)
    return f"{now} (max Gen{_str(max_gen)} x{_str(max_width)})" if below else now


def read_identity(facts: Facts) -> list[tuple[str, str]]:
    # Typed reads (facts/model.py), each guarded: a stored fleet.json may hold any shape.
    host = cast(HostFacts, _dict(facts.get("host")))
    board = cast(HostBoard, _dict(host.get("board")))
    gpus = cast(GpusFacts, _dict(facts.get("gpus")))
    virt = cast(HostVirtualization, _dict(host.get("virtualization")))
    driver = cast(HostDriver, _dict(host.get("driver"))).get("version") or gpus.get("driver_version")

    def joined(*values: Any) -> str:
        return " ".join(_str(v) for v in values if v)

    rows = [
        ("System", joined(board.get("system_vendor"), board.get("product"))),
        ("Board", joined(board.get("vendor"), board.get("model"))),
        ("BIOS", joined(board.get("bios_vendor"), board.get("bios_version"), board.get("bios_date"))),
        ("Serial", _str(board.get("system_serial"))),
        ("Board serial", _str(board.get("board_serial"))),
        ("Driver", _str(driver)),
        ("CUDA", _str(gpus.get("cuda_driver_version"))),
        ("OS", _str(host.get("os"))),
        ("Kernel", _str(host.get("kernel"))),
        ("Virtualization", _str(virt.get("hypervisor")) if virt.get("virtualized") else ("none" if virt else "")),
    ]
    return [(k, v) for k, v in rows if v]


def _gpu_list(facts: Facts) -> list[dict[str, Any]]:
    """facts["gpus"]["list"], in NVML index order."""
    gpus = _list(_dict(facts.get("gpus")).get("list"))
    return sorted((g for g in gpus if isinstance(g, dict)),
                  key=lambda g: (g.get("index") if isinstance(g.get("index"), int) else 1 << 30, _str(g.get("bus_id"))))


def device_labels(facts: Facts) -> dict[str, str]:
    """bus id -> the name `nvidia-smi topo -m` uses ("GPU3", "NIC1").  The merged topology names
    win; GPUs fall back to their NVML index, NICs to the PCIe section's level labels."""
    out: dict[str, str] = {}
    levels = _dict(_dict(facts.get("pcie")).get("levels"))
    for bus, label in zip(_list(levels.get("order")), _list(levels.get("labels"))):
        if isinstance(bus, str) and isinstance(label, str):
            out[bus.lower()] = label
    for pos, g in enumerate(_gpu_list(facts)):
        bus = _str(g.get("bus_id")).lower()
        idx = g.get("index") if isinstance(g.get("index"), int) else pos
        if bus:
            out[bus] = f"GPU{idx}"
    for d in _list(_dict(facts.get("topology")).get("devices")):
        if isinstance(d, dict) and isinstance(d.get("bus_id"), str) and isinstance(d.get("name"), str):
            out[d["bus_id"].lower()] = d["name"]
    return out


def _pcie_devices(facts: Facts) -> dict[str, dict[str, Any]]:
    return {_str(d.get("bdf")).lower(): d for d in _list(_dict(facts.get("pcie")).get("devices"))
            if isinstance(d, dict) and d.get("bdf")}


def _css(state: DeviceState) -> str:
    return state.value.replace(" ", "-")


def read_gpus(facts: Facts, drawing: HostDrawing | None = None, devices: HostDevices | None = None) -> list[GpuRow]:
    """`devices`: the verdict on each GPU (FleetResult.devices); without it, "not judged"."""
    pci = _pcie_devices(facts)
    drawing = drawing or HostDrawing()
    devices = devices if devices is not None else without_verdict()
    rows = []
    for g in _gpu_list(facts):
        link = _link_text(_dict(g.get("pcie")))
        degraded = drawing.link_degraded(_str(g.get("bus_id")))
        mem = _num(g.get("memory_total_bytes"))
        mig = _dict(g.get("mig"))
        # NVML's numa_node is the GPU memory's node (C2C boxes only); the PCIe device's node is
        # what operators mean by "which socket", so that one is shown when known.
        numa = _dict(pci.get(_str(g.get("bus_id")).lower())).get("numa")
        if numa is None:
            numa = g.get("numa_node")
        mig_text = _str(mig.get("current")) if mig else ""
        if mig.get("instances"):
            mig_text += f" ({len(_list(mig.get('instances')))} instances)"
        verdict = devices.gpu(g)
        rows.append(GpuRow(
            index=_str(g.get("index")), bus_id=_str(g.get("bus_id")),
            name=_str(g.get("name")) + (" (lost)" if g.get("lost") else ""),
            uuid=_str(g.get("uuid")), serial=_str(g.get("serial")),
            part_number=_str(g.get("board_part_number")), vbios=_str(g.get("vbios")),
            memory="%.0f GiB" % (mem / 2**30) if mem is not None else "",
            pcie=link, pcie_degraded=degraded, numa=_str(numa), mig=mig_text,
            temperature="{} °C".format(_str(g.get("temperature_c"))) if g.get("temperature_c") is not None else "",
            power="{} W".format(_str(g.get("power_w"))) if g.get("power_w") is not None else "",
            health=verdict.text(), health_state=_css(verdict.state)))
    return rows


def read_nics(facts: Facts) -> list[NicRow]:
    """facts["nic"]["devices"] (docs/facts-nic.md): each adapter's identity and firmware."""
    rows = []
    for d in _list(_dict(facts.get("nic")).get("devices")):
        d = _dict(d)
        if d:
            rows.append(NicRow(name=_str(d.get("name")), bus_id=_str(d.get("bus_id")), model=_str(d.get("hca_type")),
                               board_id=_str(d.get("board_id")), firmware=_str(d.get("fw_ver")),
                               guid=_str(d.get("node_guid"))))
    return rows


def gpu_models(gpus: Sequence[GpuRow]) -> str:
    """The host's GPUs as one filterable phrase: "8× NVIDIA H100 80GB HBM3" ("" without GPUs)."""
    counts: dict[str, int] = {}
    for g in gpus:
        name = g.name.removesuffix(" (lost)") or "unknown GPU"
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n}× {name}" for name, n in counts.items())


def read_levels(facts: Facts, devices: HostDevices | None = None) -> LevelMatrix | None:
    """The merged `topo -m` matrix (facts["topology"]); the PCIe-only levels when it is absent.
    `devices`: the verdict, for each NV# bond's health (none without it)."""
    topo = _dict(facts.get("topology"))
    ends = [_dict(d) for d in _list(topo.get("devices"))]
    labels = [_str(d.get("name")) for d in ends]
    matrix = _list(topo.get("matrix"))
    if not labels:
        levels = _dict(_dict(facts.get("pcie")).get("levels"))
        labels = [_str(x) for x in _list(levels.get("labels"))]
        matrix = _list(levels.get("matrix"))
    if not labels or len(matrix) != len(labels):
        return None
    cells = []
    for row in matrix:
        row = _list(row)
        cells.append([_str(row[i]) if i < len(row) and row[i] is not None else "?" for i in range(len(labels))])
    return LevelMatrix(labels, cells, _bonds(cells, ends, devices) if devices is not None else [])


def _end(ends: list[dict[str, Any]], i: int) -> dict[str, Any]:
    """A matrix device as a GPU record: its bus id, and its NVML index from `GPUn` (nvidia-smi topo -m
    names GPUs by NVML index), so text imports without bus ids still meet their findings."""
    d = ends[i] if i < len(ends) else {}
    m = re.fullmatch(r"GPU(0|[1-9][0-9]*)", _str(d.get("name")))
    return {**d, "index": int(m.group(1))} if m else d


def _bonds(cells: list[list[str]], ends: list[dict[str, Any]], devices: HostDevices) -> list[list[str]]:
    """Each NV# cell between two GPUs the verdict faulted: its health text; "" elsewhere."""
    out = []
    for i, row in enumerate(cells):
        marks = []
        for j, cell in enumerate(row):
            a, b = _end(ends, i), _end(ends, j)
            bond = None
            if i != j and cell.upper().startswith("NV") and a.get("kind") == b.get("kind") == "gpu":
                bond = devices.nvlink_pair(a, b)
            faulted = bond is not None and bond.state in (DeviceState.FAILED, DeviceState.DEGRADED)
            marks.append(bond.text() if bond is not None and faulted else "")
        out.append(marks)
    return out


def level_class(level: str) -> str:
    """CSS class for a topo level: "lv-nv", "lv-pix", ...; "lv-x" for the diagonal."""
    up = level.upper()
    if up.startswith("NV"):
        return "lv-nv"
    if up in LEVELS:
        return "lv-" + up.lower()
    return "lv-other"  # "?" (no source could answer) and anything unexpected


def _faulted(h: DeviceHealth) -> str:
    """A device's health text where the verdict faulted it; "" where it did not (or did not judge)."""
    return h.text() if h.state in (DeviceState.FAILED, DeviceState.DEGRADED) else ""


def read_nvlink(facts: Facts, devices: HostDevices | None = None) -> NvlinkGraph | None:
    """`devices`: the verdict, for each GPU's NVLinks (no marks without it)."""
    section = _dict(facts.get("nvlink"))
    gpus = [g for g in _list(section.get("gpus")) if isinstance(g, dict)]
    if not gpus:
        return None
    labels = device_labels(facts)
    nodes: dict[str, GraphNode] = {}
    for g in gpus:
        bus = _str(g.get("bus_id")).lower()
        label = labels.get(bus) or ("GPU{}".format(_str(g.get("index"))) if g.get("index") is not None else bus)
        nodes[bus] = GraphNode(bus, label, "gpu", health=_faulted(devices.gpu_links(g)) if devices else "")
    gpu_buses = set(nodes)
    bonds: dict[tuple[str, str], list[int]] = {}
    switches: list[str] = []
    for g in gpus:
        bus = _str(g.get("bus_id")).lower()
        me = nodes[bus]
        for link in _list(g.get("links")):
            if not isinstance(link, dict):
                continue
            up = _str(link.get("state")).lower() == "up"
            me.links += 1
            me.down += 0 if up else 1
            remote = _str(link.get("remote_bus_id")).lower()
            if not remote:
                # NVML often cannot name the far end of an inactive link; it is still a down link.
                me.down_unattached += 0 if up else 1
                continue
            rtype = _str(link.get("remote_type")).lower()
            if remote not in nodes:
                if rtype == "nvswitch":
                    switches.append(remote)
                    nodes[remote] = GraphNode(remote, "", "nvswitch")
                else:
                    nodes[remote] = GraphNode(remote, labels.get(remote, remote), "gpu" if rtype == "gpu" else "other")
            if rtype != "gpu" or remote not in gpu_buses:
                nodes[remote].links += 1
                nodes[remote].down += 0 if up else 1
            # A GPU<->GPU bond is listed from both ends; count it once, from the lower bus id.
            if remote in gpu_buses and remote < bus:
                continue
            counts = bonds.setdefault((bus, remote), [0, 0])
            counts[0] += 1
            counts[1] += 0 if up else 1
    for d in _list(section.get("nvswitches")):
        bus = _str(_dict(d).get("bus_id")).lower()
        if bus and bus not in nodes:  # a switch with no GPU link up still belongs in the picture
            nodes[bus] = GraphNode(bus, "", "nvswitch")
            switches.append(bus)
    for n, bus in enumerate(sorted(set(switches))):
        nodes[bus].label = f"NVSwitch{n}"
    edges = [GraphEdge(a, b, c[0], c[1]) for (a, b), c in bonds.items()]
    ordered = sorted(nodes.values(), key=lambda n: (n.kind != "gpu", n.kind, _label_key(n.label), n.id))
    return NvlinkGraph(ordered, edges)


def _label_key(label: str) -> tuple[str, int]:
    head = label.rstrip("0123456789")
    tail = label[len(head):]
    return head, int(tail) if tail else -1


_KEEP = ("gpu", "nic", "nvswitch", "nvme")


def read_pcie(facts: Facts, drawing: HostDrawing | None = None, verdict: HostDevices | None = None
              ) -> list[PcieNode]:
    """The PCIe tree for drawing.  A physical switch (its upstream port and all its internal and
    downstream ports) becomes one node; branches without a GPU, NIC, NVSwitch or NVMe are left
    out.  Uplinks shared by GPUs and NICs are marked; those a check flagged (the drawing's
    shared-uplink devices) are highlighted, and links red only where the verdict called them a fault;
    a device the verdict faulted (`verdict`, FleetResult.devices) carries its health."""
    drawing = drawing or HostDrawing()
    flagged = drawing.shared_uplink_devices
    section = _dict(facts.get("pcie"))
    devices = _pcie_devices(facts)
    if not devices:
        return []
    labels = device_labels(facts)
    gpu_names = {_str(g.get("bus_id")).lower(): _str(g.get("name")) for g in _gpu_list(facts)}
    switch_ups = {_str(_dict(s).get("upstream")).lower() for s in _list(section.get("switches"))}
    if not switch_ups:  # older data: an upstream port whose parent is not a switch port
        switch_ups = {b for b, d in devices.items() if "upstream_port" in (d.get("role"), d.get("port_type"))
                      and _dict(devices.get(_str(d.get("parent")).lower())).get("kind") != "switch_port"}

    def faulted_port(bus: str) -> str:
        # a downstream port a finding names (ACS redirect on it: pcie.acs.enabled) is drawn as its
        # own box under its switch, so the picture shows which ports the findings mean
        return _faulted(verdict.pcie(bus)) if verdict is not None else ""

    def shown(bus: str, d: dict[str, Any]) -> bool:
        return _str(d.get("kind")) != "switch_port" or bus in switch_ups or bool(faulted_port(bus))

    nodes: dict[str, PcieNode] = {}
    for bus, d in devices.items():
        if not shown(bus, d):
            continue
        kind = _str(d.get("kind")) or "other"
        if kind == "switch_port":
            kind = "switch" if bus in switch_ups else "port"
        link = _link_text(_dict(d.get("link")))
        label = labels.get(bus) or {"root_port": "root port", "switch": "PCIe switch", "port": "switch port",
                                    "nvswitch": "NVSwitch",
                                    "nvme": "NVMe", "host_bridge": "host bridge"}.get(kind, kind)
        name = gpu_names.get(bus) or _str(d.get("model")) or \
            " ".join(x for x in (_str(d.get("family")), _str(d.get("label"))) if x)
        nodes[bus] = PcieNode(bus, kind, label, name, link, drawing.link_degraded(bus), False, "",
                              health=_faulted(verdict.pcie(bus)) if verdict else "")
    roots = []
    for bus, node in nodes.items():
        # Climb past hidden switch ports to the nearest drawn ancestor.
        parent, hops = _str(devices[bus].get("parent")).lower(), 0
        while parent and parent not in nodes and parent in devices and hops < 64:
            parent, hops = _str(devices[parent].get("parent")).lower(), hops + 1
        if parent in nodes and parent != bus:
            nodes[parent].children.append(node)
        else:
            roots.append(node)
    for node in nodes.values():
        node.children = [c for c in node.children if _kept(c)]
    roots = [r for r in roots if _kept(r)]
    for u in _list(section.get("uplinks")):
        u = _dict(u)
        uplink = nodes.get(_str(u.get("id")).lower())
        gpus = [_str(x).lower() for x in _list(u.get("gpus"))]
        nics = [_str(x).lower() for x in _list(u.get("nics"))]
        if uplink is None or not gpus or not nics:
            continue
        names = sorted((labels.get(b, b) for b in gpus), key=_label_key) + \
            sorted((labels.get(b, b) for b in nics), key=_label_key)
        uplink.shared_uplink = bool(flagged & {*gpus, *nics, uplink.bus_id})
        # Unflagged, the pairing is how the board is built (the DGX H100 pairs each GPU with its
        # own NIC under one switch, which is what GPUDirect RDMA wants): said, not painted.
        uplink.note = ("uplink shared: " if uplink.shared_uplink else "on this switch: ") + ", ".join(names)
    return roots


def _kept(node: PcieNode) -> bool:
    """Drawn: a GPU, NIC, NVSwitch or NVMe, a device a finding faulted, or a branch holding one."""
    return any(x.kind in _KEEP or x.health for x in [node, *_descendants(node)])


def _descendants(node: PcieNode) -> list[PcieNode]:
    out: list[PcieNode] = []
    stack = list(node.children)
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out


def read_nccl(facts: Facts) -> NcclTable | None:
    """facts["nccl"] (docs/facts-nccl.md): every host that has it shows it, detailed or not."""
    section = _dict(facts.get("nccl"))
    if not section:
        return None

    def known(key: str) -> str:
        v = section.get(key)
        return _str(v) if v is not None else "?"

    def fig(v: Any, digits: int) -> str:
        n = _num(v)
        return "?" if n is None else f"{n:.{digits}f}"

    header = (f"NCCL {known('version')}, {known('gpu_count')} GPUs, transport {known('transport')}, "
              f"channels {known('channels')}, average bus bandwidth {fig(section.get('avg_busbw_gbps'), 1)} GB/s")
    notes = [f"host setting {_str(k)}={_str(v)}" for k, v in sorted(_dict(section.get("env_overrides")).items())]
    if section.get("limitation"):
        notes.append("not measured: " + _str(section.get("limitation")))
    rows = []
    for r in _list(section.get("results")):
        r = _dict(r)
        wrong = r.get("wrong")
        rows.append((_str(r.get("op")) + (" (in place)" if r.get("in_place") else ""), _str(r.get("size_bytes")),
                     fig(r.get("time_us"), 1), fig(r.get("algbw_gbps"), 2), fig(r.get("busbw_gbps"), 2),
                     str(wrong) if isinstance(wrong, int) and not isinstance(wrong, bool) else "?"))
    return NcclTable(header=header, notes=notes, rows=rows)


def read_p2p(facts: Facts, drawing: HostDrawing | None = None) -> P2pHeat | None:
    """facts["p2p"]: copy-engine GPU->GPU bandwidth (`matrices.ce_gbps`, rows and columns in
    CUDA ordinal order = `order`; the diagonal is the device-local copy, not drawn), each pair
    against the floor p2p.bandwidth.low judged it by (the drawing's)."""
    section = _dict(facts.get("p2p"))
    measured = _list(_dict(section.get("matrices")).get("ce_gbps"))
    order = [_str(b).lower() for b in _list(section.get("order"))]
    n = len(order)
    if n == 0 or len(measured) != n:
        return None
    floors = (drawing or HostDrawing()).p2p_floors
    # The pair's own verification: the probe's per-pair flag and its mismatch records (any copy kind).
    corrupt = {(_str(m.get("src_bus_id")).lower(), _str(m.get("dst_bus_id")).lower())
               for m in map(_dict, _list(section.get("mismatches")))}
    verified: dict[tuple[str, str], bool] = {}
    for pair in map(_dict, _list(section.get("pairs"))):
        key = (_str(pair.get("src_bus_id")).lower(), _str(pair.get("dst_bus_id")).lower())
        if isinstance(pair.get("verified"), bool):
            verified[key] = pair["verified"]
    for key in corrupt:
        verified[key] = False
    labels_map = device_labels(facts)
    labels = [labels_map.get(b, f"GPU{i}") for i, b in enumerate(order)]
    cells = []
    for a in range(n):
        row = []
        mrow = _list(measured[a])
        for b in range(n):
            if a == b:
                row.append(HeatCell(None, None))
                continue
            value = _num(mrow[b]) if b < len(mrow) else None
            expected = floors.get((order[a], order[b]))
            row.append(HeatCell(value, expected, verified.get((order[a], order[b]))))
        cells.append(row)
    return P2pHeat("copy engine, one direction", "GB/s", labels, cells)


# ----------------------------------------------------------------------------------------------
# Fleet-level assembly


def finding_row(f: Finding, classes: dict[str, str], anchors: dict[str, str]) -> FindingRow:
    return FindingRow(
        id=_str(f.id), severity=f.severity.value, kind=f.kind.value, host=_str(f.host),
        host_class=classes.get(f.host, ""), subject=_str(f.subject), message=_str(f.message),
        expected="" if f.expected is None else visible(readable(f.expected)),
        actual="" if f.actual is None else visible(readable(f.actual)), hint=_str(f.hint),
        anchor=anchors.get(f.host, ""),
        caused_by=visible(f"{f.caused_by.id} {f.caused_by.subject}") if f.caused_by else "",
        caused_by_id=visible(f.caused_by.id) if f.caused_by else "",
        consequences=len(f.consequences), action=f.action.value, because=_str(f.because),
        devices=visible("; ".join(" ".join(f"{k}={v}" if k != "kind" else str(v) for k, v in d.to_dict().items())
                                  for d in f.devices)))


@dataclass
class HintGroup:
    """One finding id with its hint, once, and where it occurred (the findings that carry it)."""

    id: str
    severity: str  # the worst of its occurrences
    kind: str
    hint: str
    occurrences: list[FindingRow]


def hint_groups(findings: Sequence[FindingRow]) -> list[HintGroup]:
    """Findings grouped by id, worst id first, each hint said once with its occurrences beneath."""
    groups: dict[str, HintGroup] = {}
    for f in findings:
        g = groups.get(f.id)
        if g is None:
            groups[f.id] = HintGroup(f.id, f.severity, f.kind, f.hint, [f])
            continue
        g.occurrences.append(f)
        if severity_rank(f.severity) > severity_rank(g.severity):
            g.severity = f.severity
        g.hint = g.hint or f.hint
    return sorted(groups.values(), key=lambda g: (-severity_rank(g.severity), g.id))


def _stopped_text(fleet: FleetResult) -> str:
    st = fleet.run.stopped or {}
    if not fleet.run.interrupted:
        return ""
    done, cut, never = st.get("finished", 0), st.get("cut", 0), st.get("never", 0)
    return (f"{done} of {done + cut + never} hosts finished, {cut} cut off part-way, {never} never started"
            if st else "stopped before every host finished")


def _floor_text(fleet: FleetResult) -> str:
    """The security floor the run judged against and its date, with its age at the run, so an old
    floor file is seen (run.json's security_floor; "" where the run did not judge it)."""
    floor = fleet.run.security_floor
    if not isinstance(floor, dict) or not isinstance(floor.get("date"), str):
        return ""
    where = "shipped" if floor.get("file") == "shipped" else visible(str(floor.get("file")))
    text = f"security floor {where} of {visible(floor['date'])}"
    try:
        started = datetime.fromisoformat(str(fleet.run.started).replace("Z", "+00:00")).date()
        age = (started - date.fromisoformat(floor["date"])).days
    except ValueError:
        return text
    return text + (f" ({age} days before this run)" if age >= 0 else "")


def build_fleet_view(fleet: FleetResult, drift: FleetDiff | None = None, max_pictures: int = 100) -> FleetView:
    """The whole report's data.  Hosts that are not healthy, or that are their class's
    representative, get a detailed section with pictures (at most `max_pictures`, worst health
    first); every other host is one row in its class's member table."""
    # Two passes over the hosts, holding one at a time (a stored 10,000-host fleet.json is read
    # host by host through its index: holding every record was gigabytes): this pass keeps each
    # host's name, class and health, the second builds its page once `detailed` is known.
    hosts_raw = [(h.name, visible(h.topology_class or ""), h.health.state.value) for h in fleet.hosts.with_facts(())]
    seen: dict[str, int] = {}
    anchors = {name: anchor_for("host", name, seen) for name, _, _ in hosts_raw}
    host_class = {name: cls for name, cls, _ in hosts_raw}
    health_of = {name: health for name, _, health in hosts_raw}
    outlier_diffs: dict[str, list[str]] = {}
    outliers: list[tuple[str, str, list[str]]] = []
    for c in fleet.classes:
        for o in c.outliers:
            diffs = [visible(d) for d in o.differences]
            outlier_diffs[o.host] = diffs
            outliers.append((visible(o.host), visible(c.name), diffs))

    # keyed by the host's own name; the fabric's faults are their own section (fabric_row), once
    rows = [(f.host, finding_row(f, host_class, anchors)) for f in host_findings(fleet.findings)]
    rows.sort(key=lambda kv: (-severity_rank(kv[1].severity), kv[1].host, kv[1].id, kv[1].subject))
    findings = [r for _, r in rows]
    by_host: dict[str, list[FindingRow]] = {}
    for host, r in rows:
        by_host.setdefault(host, []).append(r)

    def troubled(name: str) -> bool:
        return health_of.get(name, "healthy") != "healthy"

    # Representative: the first healthy member that is no outlier.
    representatives: dict[str, str] = {}
    for c in fleet.classes:
        members = list(c.members)
        clean = [m for m in members if not troubled(m) and m not in outlier_diffs]
        if members:
            representatives[c.name] = (clean or members)[0]

    # Pictures budget, worst health first.
    wants = sorted((name for name, _, _ in hosts_raw if troubled(name)),
                   key=lambda name: (HEALTH_ORDER.index(health_of[name]), name))
    detailed = set(representatives.values())
    capped = 0
    for name in wants:
        if name in detailed:
            continue
        if len(detailed) < max_pictures:
            detailed.add(name)
        else:
            capped += 1

    pages: dict[str, HostPage] = {}
    for h in fleet.hosts:
        pages[h.name] = _host_page(h, fleet, anchors[h.name], by_host.get(h.name, []), outlier_diffs.get(h.name),
                                   h.name in detailed, h.name in representatives.values())

    class_views = []
    classified: set[str] = set()
    for c in fleet.classes:
        hosts = [pages[m] for m in c.members if m in pages]
        hosts.sort(key=lambda p: (not p.detailed, HEALTH_ORDER.index(p.health) if p.health in HEALTH_ORDER else 0,
                                  p.name))
        classified.update(c.members)
        class_views.append(ClassView(
            name=visible(c.name), anchor=anchor_for("class", c.name, seen), fingerprint=visible(c.fingerprint),
            members=len(c.members),
            outliers=[(visible(o.host), [visible(d) for d in o.differences]) for o in c.outliers],
            representative=visible(representatives.get(c.name, "")), hosts=hosts))
    unclassified = [p for n, p in pages.items() if n not in classified]
    class_views = nest_fault_classes(class_views, fleet)

    summary = fleet.summary
    outcome_order = [o.value for o in reversed(list(Outcome))]  # worst first
    return FleetView(
        run_id=_str(fleet.run.id), started=_str(fleet.run.started), finished=_str(fleet.run.finished),
        state=fleet.run.state, stopped=_stopped_text(fleet),
        playbook=_str(fleet.run.playbook_name), probes=[_str(p) for p in fleet.run.probes or []],
        security_floor=_floor_text(fleet), host_count=summary.hosts,
        health=[(h, n) for h, n in fleet.health_counts.items() if n],
        faults=[(sev, int(summary.faults.get(sev, 0))) for sev in SEVERITIES],
        outcomes=[(o, int(summary.outcomes[o])) for o in outcome_order if summary.outcomes.get(o)],
        severities=[(s, int(summary.findings.get(s, 0))) for s in SEVERITIES],
        classes=class_views, unclassified=unclassified, outliers=outliers, findings=findings,
        drift=build_drift(drift, host_class, anchors) if drift is not None else None,
        pictures_capped=capped, fabric=[fabric_row(f) for f in fleet.fabric_faults])


def nest_fault_classes(views: list[ClassView], fleet: FleetResult) -> list[ClassView]:
    """Fault classes under their nominal class.  A class whose every member is an outlier of one
    class (the shape its hardware has when nothing is wrong: verdict/classes.py) is that class's
    fault class, shown with what differs and the faults that made it differ, never as a bare name
    with a digest suffix; each nominal class gets the health of all its hosts."""
    nominal_of: dict[str, tuple[str, list[str]]] = {}  # outlier host -> (its nominal class, differences)
    for c in fleet.classes:
        for o in c.outliers:
            nominal_of[o.host] = (visible(c.name), [visible(d) for d in o.differences])
    by_name = {v.name: v for v in views}
    top: list[ClassView] = []
    for v in views:
        marks = {nominal_of.get(h.name, ("", []))[0] for h in v.hosts}
        parent = by_name.get(next(iter(marks))) if len(marks) == 1 and v.hosts else None
        if parent is None or parent is v:
            top.append(v)
            continue
        v.nominal = parent.name
        v.difference = nominal_of[v.hosts[0].name][1]
        v.causes = sorted({f.caused_by_id for h in v.hosts for f in h.findings
                           if f.id == _OUTLIER and f.caused_by_id})
        parent.fault_classes.append(v)
    for v in top:
        family = [*v.hosts, *(h for fc in v.fault_classes for h in fc.hosts)]
        v.health = class_health(family)
        for h in family:
            h.nominal_class = v.name
        for fc in v.fault_classes:
            fc.health = class_health(fc.hosts)
    return top


def _host_page(h: JudgedHost, fleet: FleetResult, anchor: str, findings: list[FindingRow],
               outlier: list[str] | None, detailed: bool, representative: bool) -> HostPage:
    facts = h.facts
    probes = [(_str(p), _str(run.outcome), _str(run.reason)) for p, run in sorted(h.probes.items())]
    worst = max((r.severity for r in findings), key=severity_rank, default="")
    drawing = fleet.drawing(h) if detailed else HostDrawing()
    devices = fleet.devices(h)
    gpus: list[GpuRow] = _drawn(read_gpus, [], facts, drawing, devices)
    identity = _drawn(read_identity, [], facts)
    return HostPage(
        name=_str(h.name), anchor=anchor, address=_str(h.address), groups=[_str(g) for g in h.groups],
        health=h.health.state.value, health_reason=_str(h.health.reason), faults_fail=h.health.fail,
        faults_warn=h.health.warn, outcome=_str(h.outcome), reason=_str(h.reason),
        host_class=_str(fleet.class_shown(h)), is_outlier=outlier is not None, outlier_differences=outlier or [],
        identity=identity, probes=probes, findings=findings, worst=worst,
        gpus=gpus, nics=_drawn(read_nics, [], facts), model=gpu_models(gpus), driver=dict(identity).get("Driver", ""),
        levels=_drawn(read_levels, None, facts, devices) if detailed else None,
        nvlink=_drawn(read_nvlink, None, facts, devices) if detailed else None,
        pcie=_drawn(read_pcie, [], facts, drawing, devices) if detailed else [],
        p2p=_drawn(read_p2p, None, facts, drawing) if detailed else None, nccl=_drawn(read_nccl, None, facts),
        detailed=detailed,
        representative=representative)


def _drawn(read: Callable[..., Any], empty: Any, *args: Any) -> Any:
    """One part of a host's page; facts of a shape its reader did not expect leave that part empty
    (the host's probe.data.malformed finding says why), never the whole report."""
    try:
        return read(*args)
    except Exception:  # a host's value of an unexpected type: this part of its page only
        return empty


def build_drift(d: FleetDiff, host_class: dict[str, str], anchors: dict[str, str]) -> Drift:
    """What changed since the baseline, as drift decided it (verdict/drift.py), with the new and
    resolved findings as full rows for the tables."""
    changes = [(c.host or "(run)", c.kind, c.message) for c in [*d.run_changes, *d.changes]
               if not c.kind.startswith("finding.")]
    return Drift(
        previous_run=_str(d.old_run), added_hosts=sorted(d.not_in_old), removed_hosts=sorted(d.not_in_new),
        changes=changes,
        # new and resolved as drift judged them: only where both runs' checks judged the host
        new_findings=[finding_row(f, host_class, anchors) for f in d.new],
        resolved_findings=[finding_row(f, {h: visible(c) for h, c in d.old_classes.items()}, {}) for f in d.resolved])
