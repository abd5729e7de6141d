"""Normalize the `kmsg` probe's kernel-log lines into `facts["kmsg"]` events (docs/facts-kmsg.md).  Pure.

Each line becomes at most one event: NVRM Xid (code, GPU bus id, pid, process, text), NVSwitch
SXid, "fallen off the bus", PCIe AER (device, severity, error type), mlx5 events (slot power,
module temperature, transmit timeout, health), nvidia-peermem errors and segfaults inside libnccl
/ libcuda.  `key` names an event within its boot (kind, time since boot, device, code), so a later
run of the same boot can tell an event it already reported from a new one.  The text import
(facts/textparse/kmsg.py) feeds the same `parse_line`.
"""

from __future__ import annotations

import re
from typing import Any, cast

from orchestrator.facts import xid as xids
from orchestrator.facts.model import KmsgEvent, KmsgFacts

_BDF = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(" + _BDF + r")\): (\d+),\s*(.*)$")
_PID = re.compile(r"pid=(?:'?<unknown>'?|'?(\d+)'?)")
_NAME = re.compile(r"name=([^,]+?)(?:,|$)")
_SXID = re.compile(r"(nvidia-nvswitch\d+): SXid \(PCI:(" + _BDF + r")\): (\d+),\s*(.*)$")
_FALLEN = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?(" + _BDF + r")\b.*fallen off the bus")
_AER = re.compile(r"^(\S+) (" + _BDF + r"): (?:AER: )?PCIe Bus Error: severity=([^,]+), type=([^,]+)")
_MLX5_DEV = re.compile(r"^mlx5_core (" + _BDF + r")")
_MLX5 = (("slot_power", re.compile(r"insufficient power on the PCIe slot", re.IGNORECASE)),
         ("module_temperature", re.compile(r"Port module event.*High Temperature", re.IGNORECASE)),
         ("health_compromised", re.compile(r"health compromised", re.IGNORECASE)),
         ("tx_timeout", re.compile(r"NETDEV WATCHDOG: .*transmit queue \d+ timed out")))
_TX_TIMEOUT = re.compile(r"NETDEV WATCHDOG: (\S+) \((mlx5_core)\): transmit queue (\d+) timed out")
_PEERMEM = re.compile(r"nvidia[-_]peermem.*\bERROR\b", re.IGNORECASE)
_SEGFAULT = re.compile(r"^(\S+?)\[(\d+)\]: segfault at .* in (libnccl[^\[ ]*|libcuda[^\[ ]*)")

KINDS = ("xid", "sxid", "fallen_off_bus", "aer", "mlx5", "peermem", "segfault")


def bus_id(text: str) -> str:
    """NVRM's "0000:cb:00" (no function) and sysfs spellings -> "0000:cb:00.0"."""
    t = text.lower()
    if "." not in t:
        t += ".0"
    if t.count(":") == 1:
        t = "0000:" + t
    dom, rest = t.split(":", 1)
    return f"{int(dom, 16):04x}:{rest}"


def _event(kind: str, t: Any, wall: Any, text: str, **kw: Any) -> KmsgEvent:
    ev: dict[str, Any] = {"kind": kind, "t": t if isinstance(t, (int, float)) else None,
                          "wall": wall if isinstance(wall, (int, float)) else None,
                          "bus_id": None, "code": None, "text": text[:400]}
    ev.update(kw)
    stamp = f"{ev['t']:.3f}" if ev["t"] is not None else "?"
    ev["key"] = f"{kind}|{stamp}|{ev['bus_id'] or '-'}|{ev['code'] if ev['code'] is not None else '-'}"
    return cast(KmsgEvent, ev)


def parse_line(msg: str, t: Any = None, wall: Any = None) -> KmsgEvent | None:
    """One kernel-log message (without its timestamp prefix) -> its event, or None."""
    m = _XID.search(msg)
    if m:
        code, rest = int(m.group(2)), m.group(3)
        pid = _PID.search(rest)
        name = _NAME.search(rest)
        process = name.group(1).strip().strip("'") if name else None
        return _event("xid", t, wall, rest, bus_id=bus_id(m.group(1)), code=code,
                      pid=int(pid.group(1)) if pid and pid.group(1) else None,
                      process=None if process in (None, "<unknown>") else process,
                      severity=xids.line_severity(rest), action=xids.action_of(code, rest))
    m = _SXID.search(msg)
    if m:
        return _event("sxid", t, wall, m.group(4), bus_id=bus_id(m.group(2)), code=int(m.group(3)),
                      device=m.group(1), severity=xids.line_severity(m.group(4)))
    m = _FALLEN.search(msg)
    if m:
        return _event("fallen_off_bus", t, wall, msg, bus_id=bus_id(m.group(1)))
    m = _AER.search(msg)
    if m:
        return _event("aer", t, wall, msg, bus_id=bus_id(m.group(2)), driver=m.group(1),
                      severity=m.group(3).strip(), error_type=m.group(4).strip())
    m = _TX_TIMEOUT.search(msg)
    if m:
        return _event("mlx5", t, wall, msg, subtype="tx_timeout", device=m.group(1))
    dev = _MLX5_DEV.search(msg)
    if dev:
        for subtype, rx in _MLX5:
            if rx.search(msg):
                return _event("mlx5", t, wall, msg, subtype=subtype, bus_id=bus_id(dev.group(1)))
        return None
    if _PEERMEM.search(msg):
        return _event("peermem", t, wall, msg)
    m = _SEGFAULT.search(msg)
    if m:
        return _event("segfault", t, wall, msg, process=m.group(1), pid=int(m.group(2)), library=m.group(3))
    return None


def events_from_lines(lines: list[Any]) -> list[KmsgEvent]:
    out: list[KmsgEvent] = []
    for line in lines:
        if not isinstance(line, dict) or not isinstance(line.get("msg"), str):
            continue
        ev = parse_line(line["msg"], line.get("t"), line.get("wall"))
        if ev is not None:
            out.append(ev)
    return out


def unreadable_reason(attempts: list[Any]) -> str:
    tried = "; ".join(f"{a.get('source')}: {a.get('error')}" for a in attempts if isinstance(a, dict))
    return tried or "no kernel log source was tried"


def normalize(data: dict[str, Any]) -> KmsgFacts:
    attempts = [a for a in data.get("attempts") or [] if isinstance(a, dict)]
    readable = bool(data.get("readable"))
    lines = data.get("lines") or []
    return {
        "readable": readable,
        "source": data.get("source"),
        "unreadable_reason": None if readable else unreadable_reason(attempts),
        "attempts": [{"source": str(a.get("source")), "error": str(a.get("error"))} for a in attempts],
        "boot_id": data.get("boot_id"),
        "boot_time": data.get("boot_time"),
        "uid": data.get("uid"),
        "events": events_from_lines(lines if isinstance(lines, list) else []),
        "lines_scanned": data.get("lines_scanned"),
        "truncated": bool(data.get("lines_dropped")),
    }
