"""Terminal views of `facts["pcie"]`: the `lspci -tv`-like tree and the topo -m style level matrix.

Pure: facts in, str out.  Every host-controlled string passes through `clean()`.
"""

from __future__ import annotations

from typing import Any

from orchestrator.facts.model import Facts, PcieFacts
from orchestrator.facts.shown import shown
from orchestrator.present.terminal.text import clean

_ROLE = {"root_port": "root port", "upstream_port": "switch upstream", "downstream_port": "switch downstream",
         "bridge": "bridge"}


def _gw(gen: Any, width: Any) -> str:
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def _marks(pcie: PcieFacts) -> dict[str, str]:
    marks: dict[str, str] = {}
    for i, b in enumerate(pcie.get("gpus") or []):
        marks[b] = f"[GPU{i}]"
    levels = pcie.get("levels") or {}
    for label, b in zip(levels.get("labels") or [], levels.get("order") or []):
        if label.startswith("NIC"):
            marks[b] = f"[{label}]"
    for i, b in enumerate(pcie.get("nvswitches") or []):
        marks[b] = f"[NVSwitch{i}]"
    return marks


def _describe(d: dict[str, Any], mark: str | None, downgraded: dict[str, dict[str, Any]],
              acs: dict[str, list[str]]) -> str:
    kind = d.get("kind")
    parts = [d["bdf"]]
    if mark:
        parts.append(mark)
    if kind == "gpu":
        parts.append(clean(d.get("model") or f"NVIDIA GPU {shown(d.get('device'))}"))
    elif kind == "nic":
        names = [x for x in [d.get("rdma"), *(d.get("netdevs") or [])] if x]
        parts.append(f"{clean(d.get('family') or 'NIC')} {shown(d.get('device'))}" + (f" ({clean(', '.join(names))})" if names else ""))
    elif kind in ("root_port", "switch_port", "bridge"):
        role = _ROLE.get(d.get("role") or "", "bridge")
        parts.append(f"{role} {clean(d.get('family') or '')} {shown(d.get('vendor'))}:{shown(d.get('device'))}"
                     .replace("  ", " "))
    else:
        parts.append(f"{shown(kind, 'device')} {clean(d.get('family') or '')} {shown(d.get('vendor'))}:"
                     f"{shown(d.get('device'))} class {shown(d.get('class'))}"
                     .replace("  ", " "))
    link = d.get("link")
    if link and d.get("role") not in ("root_port", "downstream_port"):
        if not link.get("width_current"):
            parts.append("link down")
        else:
            parts.append(_gw(link.get("gen_current"), link.get("width_current")))
    if d["bdf"] in downgraded:
        e = downgraded[d["bdf"]]
        parts.append(f"DOWNGRADED (max {_gw(e['gen_max'], e['width_max'])})")
    if d["bdf"] in acs:
        parts.append(f"ACS {','.join(acs[d['bdf']])}")
    if d.get("role") in ("root_port", "downstream_port") and link and not link.get("width_current"):
        parts.append("(empty)")
    return "  ".join(p for p in parts if p)


def render_tree(pcie: PcieFacts) -> str:
    """The PCIe tree per host bridge, GPUs/NICs/NVSwitches marked, downgraded links and ACS shown."""
    devs = {d["bdf"]: d for d in pcie.get("devices") or [] if isinstance(d, dict) and "bdf" in d}
    marks = _marks(pcie)
    downgraded = {e["bdf"]: e for e in pcie.get("downgraded") or []}
    acs = {e["port"]: e["enabled"] for e in pcie.get("acs") or []}
    lines: list[str] = []

    def walk(node: dict[str, Any], prefix: str, last: bool) -> None:
        d = devs.get(node["bdf"], {"bdf": node["bdf"]})
        lines.append(prefix + ("└─ " if last else "├─ ") + _describe(d, marks.get(node["bdf"]), downgraded, acs))
        kids = node.get("children") or []
        for i, k in enumerate(kids):
            walk(k, prefix + ("   " if last else "│  "), i == len(kids) - 1)

    for root in pcie.get("tree") or []:
        numa = root.get("numa")
        lines.append(f"{clean(root.get('host_bridge'))}" + (f"  (NUMA {numa})" if numa is not None else ""))
        kids = root.get("children") or []
        for i, k in enumerate(kids):
            walk(k, "", i == len(kids) - 1)
    if not lines:
        return "no PCI devices\n"
    return "\n".join(lines) + "\n"


def render_levels(pcie: PcieFacts) -> str:
    """GPU x (GPU + NIC) PCIe levels in `nvidia-smi topo -m` style, with a NIC legend."""
    levels = pcie.get("levels") or {}
    order, labels, matrix = levels.get("order") or [], levels.get("labels") or [], levels.get("matrix") or []
    gpus = pcie.get("gpus") or []
    if not gpus:
        return "no GPUs on the PCI bus\n"
    devs = {d["bdf"]: d for d in pcie.get("devices") or [] if isinstance(d, dict)}
    width = max(6, *(len(x) for x in labels))
    header = " " * width + "".join(f"{lab:>{width}}" for lab in labels) + "  NUMA  CPU Affinity"
    rows = [header]
    for i, b in enumerate(order):
        if b not in gpus:
            continue
        cells = "".join(f"{(c if c is not None else '?'):>{width}}" for c in matrix[i])
        d = devs.get(b, {})
        numa = d.get("numa")
        rows.append(f"{labels[i]:<{width}}{cells}  {('N/A' if numa is None else numa)!s:<4}  {clean(d.get('local_cpulist') or '')}")
    nic_rows = [(lab, b, name) for lab, b, name in zip(labels[len(gpus):], order[len(gpus):], levels.get("nic_names") or [])]
    out = "\n".join(rows) + "\n"
    if nic_rows:
        out += "\nNIC Legend:\n" + "".join(f"  {lab}: {clean(name)} ({b})\n" for lab, b, name in nic_rows)
    out += "\nLevels from the PCIe tree only; NV# (NVLink) comes from the nvlink probe.\n"
    return out


def render_pcie(pcie: PcieFacts, host: str = "", facts: Facts | None = None,
                width: int | None = None) -> str:
    """`--show pcie`: the tree, then the level matrix, then what is wrong on the bus in one line each."""
    out = render_tree(pcie) + "\n" + render_levels(pcie)
    notes = []
    for e in pcie.get("downgraded") or []:
        notes.append(f"downgraded link {e['bdf']}: {_gw(e['gen_current'], e['width_current'])} "
                     f"(max {_gw(e['gen_max'], e['width_max'])})")
    for u in pcie.get("uplinks") or []:
        if u.get("gpus") and u.get("nics"):
            notes.append(f"uplink {u['id']}: GPUs {', '.join(u['gpus'])} share it with NICs {', '.join(u['nics'])}")
    counts = pcie.get("gpu_counts") or {}
    if counts.get("pci"):
        notes.append(f"GPUs: PCI {counts.get('pci')}, /proc {shown(counts.get('proc'), 'n/a')}, "
                     f"/dev {shown(counts.get('dev'), 'n/a')}")
    needs_root = pcie.get("needs_root")
    if needs_root:
        notes.append("config space needs root: " + ", ".join(needs_root) + " inferred or unknown")
    return out + ("\n" + "\n".join(notes) + "\n" if notes else "")
