"""Normalize the `host` probe's data into facts["host"]."""

from __future__ import annotations

from typing import Any

from orchestrator.facts.model import HostFabricManager, HostFacts


def _val(v: Any) -> Any:
    """A needs-root marker stays a marker; blanks and firmware filler become None."""
    if isinstance(v, dict):
        return v
    if v is None:
        return None
    s = str(v).strip()
    if not s or s.lower() in {"to be filled by o.e.m.", "default string", "not specified", "none", "0"}:
        return None
    return s


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _gpu_processes(raw: Any) -> dict[str, Any] | None:
    """Processes holding /dev/nvidia* (host 1.2): pid, command, state, devices, and for one in
    uninterruptible sleep whether it still was a moment later (`stuck`) and its wait channel."""
    if not isinstance(raw, dict):
        return None
    holders = []
    for h in raw.get("holders") or []:
        if not isinstance(h, dict) or not isinstance(h.get("pid"), int):
            continue
        rec: dict[str, Any] = {"pid": h["pid"], "command": h.get("command") if isinstance(h.get("command"), str) else None,
                               "state": h.get("state") if isinstance(h.get("state"), str) else None,
                               "devices": [str(d) for d in h.get("devices") or [] if isinstance(d, str)]}
        if "stuck" in h:
            rec["stuck"] = h.get("stuck") is True
            rec["wchan"] = h.get("wchan") if isinstance(h.get("wchan"), str) and h.get("wchan") != "0" else None
        holders.append(rec)
    unreadable = raw.get("unreadable")
    out: dict[str, Any] = {"holders": holders,
                           "unreadable": unreadable if isinstance(unreadable, int) else None,
                           "scanned": raw.get("scanned") if isinstance(raw.get("scanned"), int) else None}
    if isinstance(raw.get("error"), str):
        out["error"] = raw["error"]
    if isinstance(raw.get("more"), int):
        out["more"] = raw["more"]
    return out


def normalize(data: dict[str, Any]) -> HostFacts:
    dmi = data.get("dmi") or {}
    cpu = data.get("cpu") or {}
    virt = data.get("virtualization") or {}
    mem = (data.get("memory") or {}).get("total_bytes")
    numa_nodes = (data.get("numa") or {}).get("nodes")
    driver = data.get("nvidia_driver") or {}
    out: HostFacts = {
        "hostname": data.get("hostname"),
        "os": (data.get("os") or {}).get("pretty_name"),
        "kernel": data.get("kernel"),
        "arch": data.get("arch"),
        "cpu": {
            "model": cpu.get("model"),
            "sockets": cpu.get("sockets"),
            "cores": cpu.get("cores"),
            "threads": cpu.get("threads"),
        },
        "memory_gib": round(mem / 2**30, 1) if isinstance(mem, (int, float)) else None,
        "numa_nodes": len(numa_nodes) if isinstance(numa_nodes, list) else None,
        "board": {
            "system_vendor": _val(dmi.get("sys_vendor")),
            "product": _val(dmi.get("product_name")),
            "vendor": _val(dmi.get("board_vendor")),
            "model": _val(dmi.get("board_name")),
            "version": _val(dmi.get("board_version")),
            "bios_vendor": _val(dmi.get("bios_vendor")),
            "bios_version": _val(dmi.get("bios_version")),
            "bios_date": _val(dmi.get("bios_date")),
            "system_serial": _val(dmi.get("product_serial")),
            "board_serial": _val(dmi.get("board_serial")),
            "system_uuid": _val(dmi.get("product_uuid")),
        },
        "virtualization": {
            "virtualized": bool(virt.get("virtualized")),
            "hypervisor": virt.get("hypervisor"),
            "container": virt.get("container"),
            "evidence": list(virt.get("evidence") or []),
        },
        "driver": {"loaded": bool(driver.get("loaded")), "version": driver.get("version")},
        "python": data.get("python"),
        "fabric_manager": _fabric_manager(data.get("fabric_manager")),
    }
    # host 1.2 (issue 32): kept where the probe read them, absent from an older probe's answer
    uptime = _number(data.get("uptime_s"))
    if uptime is not None:
        out["uptime_s"] = uptime
    if isinstance(data.get("gpu_processes"), dict):
        out["gpu_processes"] = _gpu_processes(data["gpu_processes"])
    return out


def _fabric_manager(raw: Any) -> HostFabricManager | None:
    """{"installed", "package", "version"} with the version's Debian revision cut ("550.54.15-1" ->
    "550.54.15", comparable with the driver); None: the host has no dpkg database to ask."""
    if not isinstance(raw, dict):
        return None
    version = raw.get("version")
    if isinstance(version, str):
        version = version.split(":", 1)[-1].split("-", 1)[0]
    return {"installed": bool(raw.get("installed")), "package": raw.get("package"),
            "version": version if isinstance(version, str) and version else None}
