"""Normalize the `kmsg` probe's kernel-log lines into `facts["kmsg"]` events (docs/facts-kmsg.md).  Pure.

Events are counted as NVIDIA and the kernel print them: an NVRM Xid line (code, GPU bus id, pid,
process, NVLink link), an NVSwitch SXid error line (`..., Fatal|Non-fatal, Link L ...`; its
`Data {...}` and `Severity N Engine instance` companion lines are the same error, not more), the
"fallen off the bus" message (one line, or NVRM's three-line form joined), one PCIe AER report
(an "error received" line of the reporting port with its detail lines, or a "PCIe Bus Error" line
where the report line is absent), mlx5 events of a NIC (slot power, module and ASIC temperature,
transmit timeout, health), nvidia-peermem errors and segfaults inside libnccl / libcuda.  `key`
names an event within its boot (kind, time, device, code), so a later run of the same boot can
tell an event it already reported from a new one.  The text import (facts/textparse/kernel_log.py)
feeds the same `events_from_lines`, so both roads count alike.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, cast

from orchestrator.facts import xid as xids
from orchestrator.facts.model import KmsgEvent, KmsgFacts
from orchestrator.facts.numbers import INDEX, SECONDS, Bound, check, int_or_none

_BDF = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
# The device in parentheses may be a bus id with or without `PCI:`, or what a poster left of it (`PCI:...`).
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([^)]*)\): (\d+),\s*(.*)$")
_PID = re.compile(r"pid=(?:'?<unknown>'?|'?(\d+)'?)")
_NAME = re.compile(r"name=([^,]+?)(?:,|$)")
_LINK = re.compile(r"\bLink (-?\d+)\b")
_SXID = re.compile(r"(nvidia-nvswitch\d+): SXid \(PCI:([^)]*)\): (\d+),\s*(.*)$")
# An SXid error's own line says its severity; `Data {...}` and `Severity N Engine instance N` lines
# print the registers of the same error.
_SXID_COMPANION = re.compile(r"^(?:Data \{|Severity \d+\b)")
_FALLEN = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?(" + _BDF + r")\b.*fallen off the bus")
_FALLEN_START = re.compile(r"NVRM: The NVIDIA GPU (?:PCI:)?" + _BDF + r"\s*$")
_AER = re.compile(r"^(\S+) (" + _BDF + r"): (?:AER: )?PCIe Bus Error: severity=([^,]+), type=([^,]+)")
# A report line: "AER: Corrected error received: 0000:00:1c.5", "AER: Multiple Uncorrected (Non-Fatal)
# error received: id=00e8", and since Linux 6.10 "AER: Correctable error message received from 0000:01:00.0".
_AER_RECEIVED = re.compile(r"^(\S+) (" + _BDF + r"): (?:AER: )?(?:Multiple )?(\w+(?: \([\w-]+\))?) error "
                           r"(?:message )?received(?: from)?:? ?(?:id=[0-9a-fA-F]+|(" + _BDF + r"))?")
_AER_DETAIL = re.compile(r"^\S+ " + _BDF + r": (?:AER: )?\s*(?:device \[[0-9a-fA-F:]+\] error status/mask|"
                         r"\[\s*\d+\] |Error of this Agent|TLP Header|can't find device)")
_MLX5_DEV = re.compile(r"^mlx5_core (" + _BDF + r")")
_MLX5 = (("slot_power", re.compile(r"insufficient power on the PCIe slot", re.IGNORECASE)),
         ("module_temperature", re.compile(r"Port module event.*High Temperature", re.IGNORECASE)),
         ("asic_temperature", re.compile(r"High temperature on sensors", re.IGNORECASE)),
         ("health_compromised", re.compile(r"health compromised", re.IGNORECASE)),
         ("tx_timeout", re.compile(r"NETDEV WATCHDOG: .*transmit queue \d+ timed out")))
_TX_TIMEOUT = re.compile(r"NETDEV WATCHDOG: (\S+) \((mlx5_core)\): transmit queue (\d+) timed out")
_PEERMEM = re.compile(r"nvidia[-_]peermem.*\bERROR\b", re.IGNORECASE)
_LINK_NO = Bound("NVLink link", -1, 1024, "", "a GPU has at most 18 links; -1: none named")
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


def _bus(text: str) -> str | None:
    """A printed device -> its bus id; None for what is none (a poster's `...`)."""
    t = text.strip()
    if t.upper().startswith("PCI:"):
        t = t[4:]
    return bus_id(t) if re.fullmatch(_BDF, t) else None


def when_of(wall: Any) -> str | None:
    """Epoch seconds (journald) -> the ISO 8601 UTC time an event carries as `when`."""
    if not isinstance(wall, (int, float)) or isinstance(wall, bool):
        return None
    try:
        return datetime.fromtimestamp(wall, tz=timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def _event(kind: str, at: dict[str, Any], text: str, **kw: Any) -> KmsgEvent:
    # a time out of range (negative, past 317 years, not a number) is unknown, never a key or an order
    t, wall = check(at.get("t"), SECONDS)[0], check(at.get("wall"), SECONDS)[0]
    ev: dict[str, Any] = {"kind": kind, "t": t, "wall": wall,
                          "bus_id": None, "code": None, "text": text[:400]}
    when = at.get("when") if isinstance(at.get("when"), str) else when_of(ev["wall"])
    if when:
        ev["when"] = when  # only where a time of day was printed: the live /dev/kmsg has none
    ev.update(kw)
    ev["key"] = _key(ev)
    return cast(KmsgEvent, ev)


def _key(ev: dict[str, Any]) -> str:
    stamp = f"{ev['t']:.3f}" if ev["t"] is not None else ev.get("when") or "?"
    return f"{ev['kind']}|{stamp}|{ev['bus_id'] or '-'}|{ev['code'] if ev['code'] is not None else '-'}"


def _link(text: str) -> dict[str, int]:
    m = _LINK.search(text)
    link = int_or_none(m.group(1), _LINK_NO) if m else None
    return {"link": link} if link is not None else {}


def _device(text: str) -> dict[str, Any]:
    bus = _bus(text)
    return {"bus_id": bus} if bus else {"bus_id": None, "bus_id_unknown": f"printed as {text.strip()[:40]!r}"}


def parse_line(msg: str, t: Any = None, wall: Any = None, when: Any = None) -> KmsgEvent | None:
    """One kernel-log message (without its timestamp prefix) -> its event, or None.  Alone, a line
    cannot know it belongs to a report (AER detail, SXid companion): `events_from_lines` groups."""
    msg = msg.replace("\n", " ")
    at = {"t": t, "wall": wall, "when": when}
    m = _XID.search(msg)
    code = int_or_none(m.group(2), INDEX) if m else None
    if m and code is not None:  # an Xid code of 20 digits is no Xid: the line is no event
        rest = m.group(3)
        pid = _PID.search(rest)
        name = _NAME.search(rest)
        process = name.group(1).strip().strip("'") if name else None
        return _event("xid", at, rest, **_device(m.group(1)), code=code,
                      pid=int_or_none(pid.group(1), INDEX) if pid else None,
                      process=None if process in (None, "<unknown>") else process,
                      severity=xids.line_severity(rest), action=xids.action_of(code, rest), **_link(rest))
    m = _SXID.search(msg)
    if m and int_or_none(m.group(3), INDEX) is not None:
        if _SXID_COMPANION.match(m.group(4)):
            return None
        return _event("sxid", at, m.group(4), **_device(m.group(2)), code=int_or_none(m.group(3), INDEX),
                      device=m.group(1), severity=xids.line_severity(m.group(4)), **_link(m.group(4)))
    m = _FALLEN.search(msg)
    if m:
        return _event("fallen_off_bus", at, msg, bus_id=bus_id(m.group(1)))
    m = _AER.search(msg)
    if m:
        return _event("aer", at, msg, bus_id=bus_id(m.group(2)), driver=m.group(1),
                      severity=_aer_severity(m.group(3)), error_type=m.group(4).strip())
    m = _TX_TIMEOUT.search(msg)
    if m:
        return _event("mlx5", at, msg, subtype="tx_timeout", device=m.group(1))
    dev = _MLX5_DEV.search(msg)
    if dev:
        for subtype, rx in _MLX5:
            if rx.search(msg):
                return _event("mlx5", at, msg, subtype=subtype, bus_id=bus_id(dev.group(1)))
        return None
    if _PEERMEM.search(msg):
        return _event("peermem", at, msg)
    m = _SEGFAULT.search(msg)
    if m:
        return _event("segfault", at, msg, process=m.group(1), pid=int_or_none(m.group(2), INDEX), library=m.group(3))
    return None


def _aer_severity(text: str) -> str:
    """Linux 6.10 says "Correctable"/"Uncorrectable" where older kernels said "Corrected"/"Uncorrected"."""
    t = text.strip()
    return re.sub(r"^Uncorrectable", "Uncorrected", re.sub(r"^Correctable", "Corrected", t))


def _joined(lines: list[Any]) -> list[dict[str, Any]]:
    """The lines as {msg, t, wall, when}, NVRM's three-line "The NVIDIA GPU ... has fallen off the
    bus" joined into one where a journal or syslog printed each line with its own prefix."""
    recs = [{"msg": x["msg"].replace("\n", " "), "t": x.get("t"), "wall": x.get("wall"), "when": x.get("when")}
            for x in lines if isinstance(x, dict) and isinstance(x.get("msg"), str)]
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(recs):
        rec = recs[i]
        if _FALLEN_START.search(rec["msg"]):
            tail = [r["msg"] for r in recs[i + 1:i + 4]]
            for n in range(1, len(tail) + 1):
                if all(x.lstrip().startswith("NVRM:") for x in tail[:n]) and "fallen off the bus" in tail[n - 1]:
                    out.append(dict(rec, msg=" ".join([rec["msg"], *tail[:n]])))
                    i += n + 1
                    break
            else:
                out.append(rec)
                i += 1
            continue
        out.append(rec)
        i += 1
    return out


class _Aer:
    """The AER report being read: its "error received" line opened it; detail lines fill it.  The
    erring device is the one the report line names when a detail block is printed for it, else the
    device of the first detail block (a report line may name the requester of an error message
    only), else the device the report line names, else the reporting port."""

    def __init__(self) -> None:
        self.event: dict[str, Any] | None = None
        self.source: str | None = None
        self.devices: set[str] = set()

    def received(self, m: re.Match[str], at: dict[str, Any], msg: str) -> KmsgEvent:
        port = bus_id(m.group(2))
        self.source = bus_id(m.group(4)) if m.group(4) else None
        ev = _event("aer", at, msg, bus_id=self.source or port, port=port, driver=m.group(1),
                    severity=_aer_severity(m.group(3)), error_type=None)
        self.event, self.devices = cast(dict[str, Any], ev), set()
        return ev

    def detail(self, m: re.Match[str]) -> bool:
        """A "PCIe Bus Error" line: True when it belongs to the open report (its first device, or
        another device of a "Multiple ..." report), False when it is a report of its own."""
        ev, dev = self.event, bus_id(m.group(2))
        if ev is None or dev in self.devices:
            return False
        if not self.devices or dev == self.source:
            ev.update(bus_id=dev, driver=m.group(1), severity=_aer_severity(m.group(3)),
                      error_type=m.group(4).strip())
            ev["key"] = _key(ev)
        self.devices.add(dev)
        return True


def events_from_lines(lines: list[Any]) -> list[KmsgEvent]:
    """Kernel-log lines -> events, each error counted once however many lines the kernel printed for it."""
    out: list[KmsgEvent] = []
    aer = _Aer()
    sxid_errors: set[tuple[Any, ...]] = set()
    companions: list[tuple[tuple[Any, ...], int, KmsgEvent]] = []  # SXid register lines, in runs
    for rec in _joined(lines):
        msg, at = rec["msg"], rec
        m = _AER_RECEIVED.search(msg)
        if m:
            out.append(aer.received(m, at, msg))
            continue
        m = _AER.search(msg)
        if m and aer.detail(m):
            continue
        if not m and _AER_DETAIL.search(msg):
            continue  # device/status/bit lines of the report or Bus Error line above
        if not m:
            aer.event = None
        ev = parse_line(msg, at.get("t"), at.get("wall"), at.get("when"))
        if ev is not None:
            out.append(ev)
            if ev["kind"] == "sxid":
                sxid_errors.add((ev.get("device"), ev["bus_id"], ev["code"]))
            continue
        s = _SXID.search(msg)
        if s and _SXID_COMPANION.match(s.group(4)) and int_or_none(s.group(3), INDEX) is not None:
            key = (s.group(1), _bus(s.group(2)), int_or_none(s.group(3), INDEX))
            if not companions or companions[-1][0] != key or companions[-1][1] != len(out):
                companions.append((key, len(out), _event("sxid", at, s.group(4), **_device(s.group(2)),
                                                         code=key[2], device=s.group(1), severity=None)))
    # Register lines of an SXid whose own line is not in the text (a grep, a cut paste) still say it happened.
    for key, pos, ev in reversed(companions):
        if key not in sxid_errors:
            out.insert(pos, ev)
    return out


def span(events: list[Any]) -> tuple[str, str] | None:
    """(first, last) wall-clock time of events as their lines printed it; None where none printed one."""
    whens = sorted(e["when"] for e in events if isinstance(e, dict) and isinstance(e.get("when"), str))
    return (whens[0], whens[-1]) if whens else None


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
