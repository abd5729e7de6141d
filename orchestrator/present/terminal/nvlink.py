"""Terminal view of facts["nvlink"] (`--show nvlink`): links per GPU, NV# per GPU pair, NVSwitches,
and every link's state in the words of `nvidia-smi nvlink -s` (pure: facts in, text out).

`nvlink -s` prints an active link's speed and `<inactive>` for one that is not; the nvlink probe
reads the state, not the speed, so an active link shows its speed only when the facts carry one
(a text import of `nvlink -s`), else `active`.  A state nobody could read is `?`, never a guess.

Health (a GPU's links, an NV# bond, a link) is the verdict's (verdict/device_health.py): a bond the
verdict degraded or failed is drawn `NV16!`, never like a sound one.
"""

from __future__ import annotations

from tabulate import tabulate

from orchestrator.facts.model import Facts, NvlinkFacts, NvlinkGpu, NvlinkLink
from orchestrator.facts.shown import shown
from orchestrator.present.terminal.text import clean
from orchestrator.verdict.device_health import DeviceHealth, DeviceState, HostDevices, without_verdict


def _state(lk: NvlinkLink) -> str:
    state = lk.get("state")
    if state == "up":
        speed = lk.get("speed_gbps")
        return f"{speed:.3f} GB/s" if isinstance(speed, (int, float)) else "active"
    if state == "down":
        return "<inactive>"
    return "?"


def _remote(lk: NvlinkLink, gpu_label: dict[str | None, str]) -> str:
    remote, kind = lk.get("remote_bus_id"), lk.get("remote_type")
    if kind == "gpu" and remote in gpu_label:
        return f"-> {gpu_label[remote]} {clean(remote)}"
    if kind == "nvswitch":
        return f"-> NVSwitch {clean(remote)}" if remote else "-> NVSwitch"
    if remote or kind:
        return f"-> {clean(kind or '?')} {clean(remote or '')}".rstrip()
    return ""


def _links_cell(g: NvlinkGpu) -> str:
    total = g.get("links_total")
    if total is None:
        why = "lost" if g.get("lost") else clean(str((g.get("unknown") or {}).get("links_total") or "unknown"))
        return f"? ({why})"
    if total == 0:
        return "-"
    up = g.get("links_up")
    return f"{'?' if up is None else up}/{total}"


def _marked(h: DeviceHealth) -> str:
    """A per-link line's mark: only what the verdict faulted (the listing stays nvidia-smi's)."""
    return f"  [{h.text()}]" if h.state in (DeviceState.FAILED, DeviceState.DEGRADED) else ""


def _label(g: NvlinkGpu, pos: int) -> str:
    idx = g.get("index")
    return f"GPU{idx if isinstance(idx, int) else pos}"


def _nv_cell(c: object, bond: DeviceState) -> str:
    if not c:
        return "-"
    return f"NV{c}!" if bond in (DeviceState.FAILED, DeviceState.DEGRADED) else f"NV{c}"


def _nv_matrix(nv: list[list[int | None]], gpus: list[NvlinkGpu], labels: list[str], devices: HostDevices) -> str:
    width = max(6, *(len(lab) + 2 for lab in labels))
    lines = ["NV# per GPU pair (direct links, or the NVSwitch fabric):",
             (" " * width + "".join(lab.ljust(width) for lab in labels)).rstrip()]
    marked: list[str] = []
    for i, row in enumerate(nv):
        cells = []
        for j, c in enumerate(row or [None] * len(gpus)):
            bond = devices.nvlink_pair(gpus[i], gpus[j]) if i != j and c else None
            if bond is not None and bond.findings:
                marked.extend(bond.findings)
            cells.append("X" if i == j else _nv_cell(c, bond.state if bond else DeviceState.OK))
        lines.append((labels[i].ljust(width) + "".join(c.ljust(width) for c in cells)).rstrip())
    if marked:
        lines.append(f"NV#!: a bond of a GPU whose NVLinks the verdict faulted ({', '.join(dict.fromkeys(marked))})")
    return "\n".join(lines)


def render_nvlink(nvlink: NvlinkFacts | None, host: str = "", facts: Facts | None = None,
                  width: int | None = None, devices: HostDevices | None = None) -> str:
    """`devices`: the verdict on each GPU's links (verdict/device_health.py); without it, "not judged"."""
    devices = devices if devices is not None else without_verdict()
    if not nvlink:
        return "no NVLink data"
    gpus = [g for g in nvlink.get("gpus") or [] if isinstance(g, dict)]
    if not gpus:
        return "no GPUs in the NVLink data"
    labels = [_label(g, i) for i, g in enumerate(gpus)]
    by_bus = {g["bus_id"]: lab for g, lab in zip(gpus, labels) if g.get("bus_id")}
    up_total, total = nvlink.get("links_up_total"), nvlink.get("links_total")
    switches = nvlink.get("nvswitches")
    head = (f"NVLink: {'?' if up_total is None else up_total}/{'?' if total is None else total} links up "
            f"on {len(gpus)} GPU(s)")
    if isinstance(switches, list) and switches:
        head += f", {len(switches)} NVSwitch(es)"
    if nvlink.get("supported") is False:
        return head + "\nno NVLink on these GPUs (NVML: not supported)"
    rows = []
    for g, lab in zip(gpus, labels):
        links = [lk for lk in g.get("links") or [] if isinstance(lk, dict)]
        to_switch = sum(1 for lk in links if lk.get("remote_type") == "nvswitch" and lk.get("state") == "up")
        to_gpu = sum(1 for lk in links if lk.get("remote_type") == "gpu" and lk.get("state") == "up")
        down = g.get("inactive")
        rows.append([lab, clean(g.get("bus_id") or "N/A"), _links_cell(g), clean(g.get("version") or "N/A"),
                     to_gpu, to_switch, "?" if down is None else (",".join(map(str, down)) or "-"),
                     devices.gpu_links(g).text()])
    out = [head, tabulate(rows, headers=["GPU", "bus id", "links up", "version", "to GPUs", "to NVSwitch",
                                         "inactive", "health"], tablefmt="simple",
                              disable_numparse=True)]
    nv = nvlink.get("nv")
    if isinstance(nv, list) and len(nv) == len(gpus) and any(c for r in nv for c in r or []):
        out.append(_nv_matrix(nv, gpus, labels, devices))
    if isinstance(switches, list) and switches:
        lines = ["NVSwitches:"]
        for sw in switches:
            members = ",".join(by_bus.get(b, clean(b)) for b in sw.get("gpus") or [])
            lines.append(f"  {clean(sw.get('bus_id') or '?')}: {shown(sw.get('links_up'))}/{shown(sw.get('links'))} links up"
                         f" from {members or 'no GPU'}")
        out.append("\n".join(lines))
    per_link = []
    for g, lab in zip(gpus, labels):
        per_link.append(f"GPU {lab[3:]}: {clean(g.get('name') or 'N/A')} (UUID: {clean(g.get('uuid') or 'N/A')})"
                        + _marked(devices.gpu_links(g)))
        links = [lk for lk in g.get("links") or [] if isinstance(lk, dict)]
        if not links:
            per_link.append("\t No NVLink links" if g.get("links_total") == 0
                            else f"\t links unknown ({_links_cell(g)[3:-1]})")
        for lk in links:
            per_link.append(f"\t Link {shown(lk.get('link'))}: {_state(lk)} {_remote(lk, by_bus)}".rstrip()
                            + _marked(devices.nvlink(g, lk.get("link"))))
    out.append("Links (as nvidia-smi nvlink -s):\n" + "\n".join(per_link))
    return "\n\n".join(out)
