"""Terminal view: one table per host of its GPUs (pure: facts in, text out)."""

from __future__ import annotations

from typing import Any, Final

from tabulate import tabulate

from orchestrator.facts.model import Facts, GpuPcie, GpuRecord, GpusFacts, NvlinkFacts, NvlinkGpu
from orchestrator.facts.shown import shown
from orchestrator.present.terminal.text import clean
from orchestrator.present.terminal.width import fit_table
from orchestrator.verdict.device_health import HostDevices, without_verdict


def _na(v: Any, fmt: str = "{}") -> str:
    return "N/A" if v is None else fmt.format(v)


def _pcie(p: GpuPcie | dict[str, Any]) -> str:
    if p.get("gen_current") is None and p.get("width_current") is None:
        return "N/A"
    cur = f"{_na(p.get('gen_current'))}x{_na(p.get('width_current'))}"
    mx = f"{_na(p.get('gen_max'))}x{_na(p.get('width_max'))}"
    return cur if cur == mx else f"{cur} (max {mx})"


def _fans(g: GpuRecord) -> str:
    fans = g.get("fans")
    if fans == []:
        return "none"  # NVML answered: this board has no fans (SXM, passive cooling)
    if fans:
        return "/".join(_na(f.get("speed_pct"), "{}%") for f in fans)
    why = g.get("fans_unknown")
    return "N/A" if why == "NOT_SUPPORTED" else (f"? ({why})" if why else "?")


def _mig(g: GpuRecord) -> str:
    mig = g.get("mig")
    if mig is None:
        return "-"
    if mig.get("current"):
        return f"on ({len(mig.get('instances') or [])})"
    return "pending" if mig.get("pending") else "off"


def _notes(g: GpuRecord) -> str:
    """What the GPU's own record says of it (read, not judged: the health column is the verdict's)."""
    notes = []
    if g.get("lost"):
        notes.append("LOST")
    rr = g.get("remapped_rows") or {}
    if rr.get("failure"):
        notes.append("remap FAILED")
    if rr.get("pending"):
        notes.append("remap pending")
    fab = g.get("fabric") or {}
    if fab.get("state") not in (None, "not_supported", "completed"):
        notes.append(f"fabric {shown(fab.get('state'))}")
    return ", ".join(notes)


# How a GPU's NVLink record is matched to it: text imports may lack bus ids, then the UUID, the index.
_GPU_KEYS: Final = ("bus_id", "uuid", "index")


def render_gpu_table(host: str, gpus: GpusFacts | None, nvlink: NvlinkFacts | None = None,
                     width: int | None = None, devices: HostDevices | None = None) -> str:
    """`devices`: the verdict on each GPU (verdict/device_health.py); without it, "not judged"."""
    devices = devices if devices is not None else without_verdict()
    if not gpus:
        return f"{clean(host)}: no NVML data"
    links: dict[tuple[str, Any], NvlinkGpu] = {}
    for lg in (nvlink.get("gpus") if nvlink else None) or []:
        for key in _GPU_KEYS:
            if lg.get(key) is not None:
                links.setdefault((key, lg[key]), lg)
    rows = []
    for g in gpus.get("list") or []:
        keys = [(k, g.get(k)) for k in _GPU_KEYS]
        lk = next((links[key] for key in keys if key[1] is not None and key in links), None)
        if not lk or lk.get("links_total") is None:
            nvl = "?"
        else:
            nvl = "-" if lk["links_total"] == 0 else f"{_na(lk.get('links_up'))}/{lk['links_total']}"
        mem = g.get("memory_total_bytes")
        uuid = g.get("uuid") or "N/A"
        rows.append([
            g.get("index"), clean(g.get("bus_id") or "N/A"), clean(g.get("name") or "N/A"),
            clean(uuid[:13] + "…" if len(uuid) > 14 else uuid),
            _na(round(mem / 2**30) if mem else None, "{} GiB"), _pcie(g.get("pcie") or {}),
            _na(g.get("temperature_c"), "{}°C"), clean(_fans(g)), _na(g.get("power_w"), "{:.0f} W"),
            _mig(g), clean(g.get("virtualization_mode") or "N/A"), nvl, devices.gpu(g).text(), clean(_notes(g)),
        ])
    head = (f"{clean(host)}: {len(rows)} GPU(s), driver {clean(gpus.get('driver_version') or 'N/A')}, "
            f"CUDA {clean(gpus.get('cuda_driver_version') or 'N/A')}")
    headers = ["#", "bus id", "name", "uuid", "memory", "PCIe", "temp", "fans", "power", "MIG", "virt", "NVLink",
               "health", "notes"]
    if width is None:
        table = tabulate(rows, headers=headers, tablefmt="simple")
    else:  # a narrow terminal loses the columns a reader misses least, then wraps
        table = fit_table([[str(c) for c in r] for r in rows], headers, width,
                          droppable=("uuid", "virt", "power", "fans", "temp", "memory", "notes"),
                          fixed=("#", "bus id", "NVLink", "PCIe"))
    return head + "\n" + table


def view_gpus(gpus: GpusFacts, host: str = "", facts: Facts | None = None,
              width: int | None = None, devices: HostDevices | None = None) -> str:
    """The `--show gpus` renderer: the host's name in the head, the NVLink column from its nvlink
    section when the host's facts are given, the health column from the verdict's `devices`."""
    return render_gpu_table(host or "GPUs", gpus, (facts or {}).get("nvlink"), width, devices)
