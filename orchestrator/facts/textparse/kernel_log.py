"""Kernel-log text in its usual forms -> the lines `facts/normalize/kmsg.py` turns into events.

Forms: `dmesg` ("[  123.456789] msg"), `dmesg -T` ("[Fri Aug 30 11:11:22 2024] msg"), `dmesg -r`
("<6>[  1.2] msg"), `journalctl -k` and kern.log/syslog ("Feb 14 05:03:41 host kernel: msg", with or
without the kernel's "[  12.3]" after "kernel:"), `journalctl -o short-iso` ("2026-02-14T05:03:41+0000
host kernel: msg"), and grep excerpts of any of them ("file:" or "123:" in front).  The time since
boot is kept where the line has it; wall-clock prefixes are not converted (no year or zone in most).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator.facts.normalize.budget import figure
from orchestrator.facts.textparse.common import Note, text_lines

_GREP = r"(?:[\w./-]+:(?:\d+[:-])?|\d+[:-])?"
_MONO = re.compile(r"^" + _GREP + r"(?:<\d+>)?\[\s*(\d+\.\d+)\]\s?(.*)$")
_CTIME = re.compile(r"^" + _GREP + r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} +\d+ [\d:]{8} \d{4}\]\s?(.*)$")
_SYSLOG = re.compile(r"^" + _GREP + r"(?:\w{3} +\d+ [\d:]{8}|\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d{2}:?\d{2}|Z)?)"
                     r"(?: \S+)? kernel: (?:\[\s*(\d+\.\d+)\]\s?)?(.*)$")


@dataclass
class KernelLog:
    source: str
    lines: list[dict[str, object]] = field(default_factory=list)  # {"t": seconds since boot | None, "msg"}
    scanned: int = 0
    notes: list[Note] = field(default_factory=list)


def line_of(raw: str) -> tuple[float | None, str] | None:
    """(seconds since boot or None, message) of one kernel-log line in any supported form."""
    m = _MONO.match(raw)
    if m:
        return figure(float(m.group(1))), m.group(2)
    m = _SYSLOG.match(raw)
    if m:
        return (figure(float(m.group(1))) if m.group(1) else None), m.group(2)
    m = _CTIME.match(raw)
    if m:
        return None, m.group(1)
    return None


def looks_like(lines: list[str]) -> bool:
    """Most of the first non-blank lines are kernel-log lines."""
    head = [x for x in lines if x.strip()][:50]
    return bool(head) and sum(1 for x in head if line_of(x) is not None) * 2 > len(head)


def parse_kernel_log(text: str, source: str) -> KernelLog:
    out = KernelLog(source)
    skipped = 0
    for raw in text_lines(text, source):  # refuses a line no kernel prints (over MAX_LINE characters)
        if not raw.strip():
            continue
        got = line_of(raw)
        if got is None:
            skipped += 1
            continue
        out.scanned += 1
        out.lines.append({"t": got[0], "msg": got[1]})
    if skipped:
        out.notes.append(Note(None, f"{skipped} line(s) not in a kernel-log form were skipped"))
    return out
