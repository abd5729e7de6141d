"""`lspci -tv[nn]` (the tree) and `lspci -vvv[nn]` (device details) text -> dataclasses.

The tree is read by the column of each branch character: a bridge's children hang off the `+`
or `\\` drawn in one column, so remembering which bus opened a fork at which column places every
continuation line.  `-vvv` blocks are read for identity, class, NUMA/IOMMU, the bridge's bus
range, link capability/status (with lspci's own `(downgraded)` marks) and ACS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.gpu_models import gen_from_speed
from orchestrator.facts.numbers import INDEX, int_or_none
from orchestrator.facts.textparse.common import Note, TextParseError, clean_lines, decode_input, norm_bus_id

_IDS = re.compile(r"\s\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\](?=\s|$)")
_ROOT = re.compile(r"\[(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2})\]")
_DEV = re.compile(r"([0-9a-fA-F]{2})\.([0-7])(?:-\[([0-9a-fA-F]{2})(?:-([0-9a-fA-F]{2}))?\])?")


@dataclass
class TreeNode:
    bdf: str
    parent: str | None  # parent bridge's bdf; None for devices on a root bus
    root: str  # "0000:00": the root bus this device sits under
    line: int
    description: str | None = None  # None for bridges drawn with children (lspci prints no name then)
    vendor_id: str | None = None  # with -tvnn
    device_id: str | None = None
    secondary: int | None = None  # bridges: the bus range below
    subordinate: int | None = None
    children: list[str] = field(default_factory=list)

    @property
    def is_bridge(self) -> bool:
        return self.secondary is not None

    @property
    def empty_slot(self) -> bool:
        """A bridge (root/downstream port) with nothing behind it."""
        return self.is_bridge and not self.children

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["children"] = list(self.children)
        d["is_bridge"] = self.is_bridge
        d["empty_slot"] = self.empty_slot
        return d


@dataclass
class LspciTree:
    roots: list[str]  # root buses in the order drawn: "0000:00"
    nodes: dict[str, TreeNode]  # by bdf, in the order drawn
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"

    def path(self, bdf: str) -> list[str]:
        """Bridges from the root bus down to bdf (excluded)."""
        out: list[str] = []
        node = self.nodes.get(bdf)
        while node is not None and node.parent is not None:
            out.append(node.parent)
            node = self.nodes.get(node.parent)
        return list(reversed(out))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "lspci_tree",
            "source": self.source,
            "roots": list(self.roots),
            "nodes": [n.to_dict() for n in self.nodes.values()],
            "notes": [n.to_dict() for n in self.notes],
        }


@dataclass
class _Ctx:
    domain: int
    bus: int
    parent: str | None
    root: str


_TOP = _Ctx(-1, -1, None, "")


def _describe_leaf(node: TreeNode, desc: str) -> None:
    """A device's name as the tree draws it, with its [vendor:device] ids where -nn printed them."""
    if desc:
        ids = _IDS.search(desc)
        if ids:
            node.vendor_id, node.device_id = ids.group(1).lower(), ids.group(2).lower()
        node.description = desc


def parse_lspci_tree(text: str | bytes, source: str = "<text>") -> LspciTree:
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    forks: dict[int, _Ctx] = {}
    nodes: dict[str, TreeNode] = {}
    roots: list[str] = []
    lines, notes = clean_lines(text, source)
    for ln, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if not re.match(r"^[\s|+\\`-]*[-+\\`]", line) or not re.search(r"\[|[0-9a-fA-F]{2}\.[0-7]", line):
            notes.append(Note(ln, f"not a tree line, ignored: {line.strip()[:80]!r}"))
            continue
        ctx: _Ctx | None = None
        after_open = False  # a root or bridge was just drawn: the next fork belongs to it
        seen = False
        i = 0
        while i < len(line):
            c = line[i]
            if c in " |-":
                i += 1
                continue
            if c in "+\\`":
                if after_open:
                    forks[i] = ctx  # type: ignore[assignment]
                    after_open = False
                elif i in forks:
                    ctx = forks[i]
                elif not seen:
                    forks[i] = ctx = _TOP
                else:
                    notes.append(Note(ln, f"branch at column {i + 1} matches no open bridge; rest of line ignored"))
                    break
                seen = True
                i += 1
                continue
            if c == "[":
                m = _ROOT.match(line, i)
                if not m or (ctx is not None and ctx is not _TOP):
                    notes.append(Note(ln, f"unexpected '[' at column {i + 1}; rest of line ignored"))
                    break
                dom, bus = int(m.group(1) or "0", 16), int(m.group(2), 16)
                root = f"{dom:04x}:{bus:02x}"
                roots.append(root)
                ctx, after_open, seen = _Ctx(dom, bus, None, root), True, True
                i = m.end()
                continue
            m = _DEV.match(line, i)
            if not m or ctx is None or ctx is _TOP:
                notes.append(Note(ln, f"cannot place {line[i:].strip()[:40]!r} in the tree; rest of line ignored"))
                break
            bdf = f"{ctx.domain:04x}:{ctx.bus:02x}:{m.group(1).lower()}.{m.group(2)}"
            if bdf in nodes:
                notes.append(Note(ln, f"device {bdf} drawn twice (two lspci -t outputs joined?): the second is skipped"))
                break
            node = TreeNode(bdf, ctx.parent, ctx.root, ln)
            nodes[bdf] = node
            if ctx.parent:
                nodes[ctx.parent].children.append(bdf)
            seen = True
            i = m.end()
            if m.group(3):
                node.secondary = int(m.group(3), 16)
                node.subordinate = int(m.group(4) or m.group(3), 16)
                ctx, after_open = _Ctx(ctx.domain, node.secondary, bdf, ctx.root), True
                rest = line[i:]
                if rest.strip("-").strip() and not rest.lstrip("-").startswith(("+", "\\", "`")):
                    if _DEV.match(rest.lstrip("-")):
                        after_open = False
                        continue
                    node.description = rest.strip(" -") or None
                    break
                continue
            _describe_leaf(node, line[i:].strip())
            break
    if not nodes:
        raise TextParseError("no devices found: not lspci -t output", source, 1)
    return LspciTree(roots, nodes, notes, source)


# ---------------------------------------------------------------------------------------------
# lspci -vvv / -vvvnn


# lspci's class names (pci.ids) of the classes fleetprobe tells apart, by class code
CLASS_NAMES = {"0300": "VGA compatible controller", "0302": "3D controller", "0380": "Display controller",
               "0200": "Ethernet controller", "0207": "Infiniband controller", "0280": "Network controller",
               "0108": "Non-Volatile memory controller", "0600": "Host bridge", "0604": "PCI bridge"}
# the PCI Express capability's port types as lspci -vvv names them, by code
PORT_NAMES = {0: "Endpoint", 1: "Legacy Endpoint", 4: "Root Port", 5: "Upstream Port", 6: "Downstream Port",
              7: "PCI-Express to PCI/PCI-X Bridge", 8: "PCI/PCI-X to PCI-Express Bridge",
              9: "Root Complex Integrated Endpoint", 10: "Root Complex Event Collector"}
# the ACS flag words lspci -vvv prints, and the capability bits' short names
ACS_WORDS = {"SrcValid": "SV", "TransBlk": "TB", "ReqRedir": "RR", "CmpltRedir": "CR", "UpstreamFwd": "UF",
             "EgressCtrl": "EC", "DirectTrans": "DT"}


@dataclass
class LinkInfo:
    speed: str | None = None  # "16GT/s" as printed
    gen: int | None = None
    width: int | None = None
    speed_downgraded: bool | None = None  # lspci's own mark; None: this lspci prints no mark
    width_downgraded: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PciDevice:
    bdf: str | None  # None: lines without any device header (a grep of -vvv without the -s prompt)
    line: int
    class_name: str | None = None  # "3D controller"
    class_code: str | None = None  # "0302" with -nn
    description: str | None = None
    vendor_id: str | None = None
    device_id: str | None = None
    port_type: str | None = None  # PCIe capability: Endpoint, Root Port, Upstream Port, Downstream Port...
    numa_node: int | None = None
    iommu_group: int | None = None
    driver: str | None = None
    physical_slot: str | None = None
    secondary: int | None = None  # bridges: "Bus: primary=.., secondary=.., subordinate=.."
    subordinate: int | None = None
    lnk_cap: LinkInfo | None = None
    lnk_sta: LinkInfo | None = None
    lnk_cap2_speeds: str | None = None
    acs_cap: dict[str, bool] | None = None
    acs_ctl: dict[str, bool] | None = None

    @property
    def downgraded(self) -> bool | None:
        """Link trained below what both ends can do: lspci's mark, or current below capability."""
        if self.lnk_sta is None:
            return None
        if self.lnk_sta.speed_downgraded or self.lnk_sta.width_downgraded:
            return True
        cap, sta = self.lnk_cap, self.lnk_sta
        if cap is None or None in (cap.gen, sta.gen, cap.width, sta.width):
            return False if (sta.speed_downgraded is False and sta.width_downgraded is False) else None
        return bool(sta.gen < cap.gen or sta.width < cap.width)  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["lnk_cap"] = self.lnk_cap.to_dict() if self.lnk_cap else None
        d["lnk_sta"] = self.lnk_sta.to_dict() if self.lnk_sta else None
        d["downgraded"] = self.downgraded
        return d


@dataclass
class LspciVerbose:
    devices: list[PciDevice]
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "lspci_verbose",
            "source": self.source,
            "devices": [d.to_dict() for d in self.devices],
            "notes": [n.to_dict() for n in self.notes],
        }


_HEADER = re.compile(
    r"^((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.+?)(?:\s\[([0-9a-fA-F]{4})\])?:\s*(.*)$"
)
_PROMPT = re.compile(r"^\S*[$#]\s.*\blspci\b.*?\s-s\s*(\S+)")
_KEY = re.compile(r"^([A-Za-z][\w /-]*?):\s*(.*)$")


def _link(value: str) -> LinkInfo:
    info = LinkInfo()
    m = re.search(r"Speed\s+([\d.]+\s*GT/s|unknown)(\s*\((downgraded|ok)\))?", value, re.I)
    if m:
        info.speed = m.group(1).replace(" ", "")
        info.gen = gen_from_speed(info.speed)
        if m.group(3):
            info.speed_downgraded = m.group(3).lower() == "downgraded"
    m = re.search(r"Width\s+x(\d+)(\s*\((downgraded|ok)\))?", value, re.I)
    if m:
        info.width = int_or_none(m.group(1), INDEX)  # x99999...: unknown, not a crash
        if m.group(3):
            info.width_downgraded = m.group(3).lower() == "downgraded"
    return info


def _flags(value: str) -> dict[str, bool]:
    return {m.group(1): m.group(2) == "+" for m in re.finditer(r"([A-Za-z][\w]*)([+-])(?=\s|$|,)", value)}


def parse_lspci_verbose(text: str | bytes, source: str = "<text>") -> LspciVerbose:
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    devices: list[PciDevice] = []
    cur: PciDevice | None = None
    lines, notes = clean_lines(text, source)
    for ln, line in enumerate(lines, start=1):
        s = line.strip()
        if not s:
            continue
        m = _HEADER.match(line)
        if m and not line[0].isspace():
            bdf = norm_bus_id(m.group(1))
            desc = m.group(4).strip()
            cur = PciDevice(bdf, ln, m.group(2).strip(), m.group(3).lower() if m.group(3) else None, desc or None)
            ids = _IDS.search(" " + desc)
            if ids:
                cur.vendor_id, cur.device_id = ids.group(1).lower(), ids.group(2).lower()
            devices.append(cur)
            continue
        m = _PROMPT.match(s)
        if m:
            cur = PciDevice(norm_bus_id(m.group(1)), ln)
            devices.append(cur)
            if cur.bdf is None:
                notes.append(Note(ln, f"-s {m.group(1)!r} is not a full bus id; device left unnamed"))
            continue
        m = _KEY.match(s)
        if not m:
            continue
        key, value = m.group(1).strip(), m.group(2).strip()
        if cur is None:
            if key.startswith(("Lnk", "ACS")):
                cur = PciDevice(None, ln)
                devices.append(cur)
                notes.append(Note(ln, "link lines without a device header or lspci -s prompt: device unknown"))
            else:
                notes.append(Note(ln, f"line before any device, ignored: {s[:80]!r}"))
                continue
        if key == "LnkCap":
            cur.lnk_cap = _link(value)
        elif key == "LnkSta":
            cur.lnk_sta = _link(value)
            if cur.lnk_sta.speed is None and cur.lnk_sta.width is None:
                notes.append(Note(ln, f"LnkSta {value[:60]!r} has no speed or width (truncated?)"))
        elif key == "LnkCap2":
            mm = re.search(r"Supported Link Speeds:\s*([^,]+)", value)
            cur.lnk_cap2_speeds = mm.group(1).strip() if mm else None
        elif key == "ACSCap":
            cur.acs_cap = _flags(value)
        elif key == "ACSCtl":
            cur.acs_ctl = _flags(value)
        elif key == "NUMA node":
            cur.numa_node = int_or_none(value, INDEX)  # -1 (no NUMA node) and garbage: unknown
        elif key == "IOMMU group":
            cur.iommu_group = int_or_none(value, INDEX)
        elif key == "Kernel driver in use":
            cur.driver = value
        elif key == "Physical Slot":
            cur.physical_slot = value
        elif key == "Bus":
            sec = re.search(r"secondary=([0-9a-fA-F]{2})", value)
            sub = re.search(r"subordinate=([0-9a-fA-F]{2})", value)
            cur.secondary = int(sec.group(1), 16) if sec else None
            cur.subordinate = int(sub.group(1), 16) if sub else None
        elif key == "Capabilities":
            mm = re.search(r"Express\s*(?:\(v\d\))?\s*([A-Za-z][A-Za-z /-]*?)\s*(?:\(|,|$)", value)
            if mm:
                cur.port_type = mm.group(1).strip()
    if not devices:
        raise TextParseError("no device header ('bb:dd.f Class: Name') or Lnk line found: not lspci -vvv output",
                             source, 1)
    return LspciVerbose(devices, notes, source)
