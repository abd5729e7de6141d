"""Kernel-log text in the shapes people paste it -> the lines `facts/normalize/kmsg.py` turns into events.

Each line is peeled of what the tools put in front of the kernel's message: a /dev/kmsg record
header (`6,1234,5678,-;`), `dmesg --decode`'s `kern  :warn  : `, a syslog priority `<3>`, a
grep's `file:` / `123:`, the time prefixes of dmesg, dmesg -T/-H/-d, --time-format iso, syslog
and journalctl's short formats (log_time.py), a host name and the `kernel:` tag.  A line with
none of them is still the kernel's when its message is one a driver prints (`NVRM: Xid ...`, a
grep of a log).  Lines of other programs in a journal are skipped, lines indented under a record
continue it (dmesg prints NVRM's multi-line messages that way), and everything skipped is named
in a note with its line numbers.  A file without one event is a valid, empty log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.normalize import kmsg as kmsg_normalize
from orchestrator.facts.numbers import COUNT, int_or_none
from orchestrator.facts.textparse import log_time
from orchestrator.facts.textparse.common import MAX_LINE, Note, TextParseError, lines_within
from orchestrator.facts.textparse.log_time import Stamp

_KMSG = re.compile(r"^(\d+),(\d+),(\d+)(?:,[^;]*)?;(.*)$")
_KMSG_PROPERTY = re.compile(r"^ [A-Z][A-Z_]*=")  # the device properties under a /dev/kmsg record
_DECODE = re.compile(r"^(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
                     r"\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s?")
_PRIORITY = re.compile(r"^<\d{1,3}>")
_BRACKET = re.compile(r"^\[([^\]\n]{1,40})\]\s?")
_ISO = re.compile(r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:([.,])(\d+))?(Z|[+-]\d\d:?\d\d)?\s")
_SYSLOG = re.compile(r"^([^\W\d_]{3,4}\.?) +(\d{1,2}) (\d\d:\d\d:\d\d)(?:\.(\d+))?\s")
_FULL = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d+))? ([A-Z]{2,5}|[+-]\d{4})\s")
_UNIX = re.compile(r"^(\d{9,11}\.\d+)\s(?=\S+ kernel(?:\[\d+\])?: )")
_KERNEL_TAG = re.compile(r"^(?:\S+ )?kernel(?:\[\d+\])?:(?: |$)")
_OTHER_TAG = re.compile(r"^\S+ [^\s:\[\]]+(?:\[\d+\])?: ")  # "host program[pid]: " of another program
# A grep's file name or line number in front of a prefixed line: `kern.log:`, `/var/log/syslog:12:`, `1234:`, `1700[`.
_GREP = re.compile(r"^(?:[\w./-]*[./][\w./-]*:(?:\d+[:-])?|\d+[:-]|\d+\s?(?=\[))")
# Markdown quote marks and a prompt line are a poster's, not the kernel's.
_QUOTE = re.compile(r"^>\s?")
# What only a driver or the kernel prints at the start of a message: lines carrying no prefix at all
# (a grep of a log, a trimmed excerpt) are the kernel's when they start so.
_KERNEL_SOURCE = re.compile(
    r"^(?:NVRM:|nvidia(?:-[a-z]+\d*)?[: ]|nv_peer_mem|mlx5_\w+[: ]|pcieport |NETDEV WATCHDOG|"
    r"[a-z][\w-]* (?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7][: ]|\S+\[\d+\]: segfault at )")

KERNEL, OTHER = "kernel", "other"


@dataclass
class Line:
    """One kernel-log line: the message and what its prefixes said of its time."""

    msg: str
    stamp: Stamp = field(default_factory=Stamp)
    kmsg_record: bool = False
    bare: bool = False  # no prefix at all: known for the kernel's by its message alone


@dataclass
class KernelLog:
    source: str
    lines: list[dict[str, Any]] = field(default_factory=list)  # {"t", "wall", "when", "msg", "line"}
    scanned: int = 0
    notes: list[Note] = field(default_factory=list)


def _peel(raw: str) -> tuple[str, Line | None]:
    """(KERNEL | OTHER | "", Line): what the prefixes of one line say; "" with None: no log prefix."""
    s = raw
    stamp = Stamp()
    peeled = tagged = journal = False
    for _ in range(8):  # a line carries at most a handful of prefixes; bounded all the same
        m = _DECODE.match(s) or _PRIORITY.match(s)
        if m:
            s, peeled = s[m.end():], True
            continue
        m = _BRACKET.match(s)
        got = log_time.from_bracket(m.group(1)) if m else None
        if m and got is not None:
            stamp, s, peeled = stamp.merged(got), s[m.end():], True
            continue
        m = _ISO.match(s)
        if m:
            stamp = stamp.merged(log_time.from_iso(m.group(1), m.group(2), m.group(4), m.group(5)))
            # dmesg's iso writes `,usec+hh:mm`; journalctl's short-iso writes `[.usec]+hhmm` and a host.
            journal = journal or m.group(3) != ","
            s, peeled = s[m.end():], True
            continue
        m = _SYSLOG.match(s) or _FULL.match(s) or _UNIX.match(s)
        if m:
            if m.re is _SYSLOG:
                stamp = stamp.merged(log_time.from_syslog(m.group(1), m.group(2), m.group(3), m.group(4)))
            elif m.re is _FULL:
                stamp = stamp.merged(log_time.from_iso(m.group(1), m.group(2), m.group(3), m.group(4)))
            else:
                stamp = stamp.merged(log_time.from_unix(m.group(1)))
            s, peeled, journal = s[m.end():], True, True
            continue
        m = _KERNEL_TAG.match(s) if not tagged else None
        if m:
            s, peeled, tagged = s[m.end():], True, True
            continue
        break
    if journal and not tagged:
        if _OTHER_TAG.match(s):
            return OTHER, None
        if _SYSLOG.match(raw) or _FULL.match(raw):
            return OTHER, None  # a syslog line always names its program: this one is not the kernel
    if peeled:
        return KERNEL, Line(s, stamp)
    return "", None


def line_of(raw: str) -> tuple[str, Line | None]:
    """(KERNEL, Line) for a kernel-log line in any supported form, (OTHER, None) for another
    program's journal line, ("", None) for text that is no log line."""
    m = _KMSG.match(raw)
    if m:
        # /dev/kmsg escapes the newlines of a multi-line message; the probe joins them with spaces too.
        usec = int_or_none(m.group(3), COUNT)  # 20 digits or more: no time, the message is still read
        return KERNEL, Line(m.group(4).replace("\\x0a", " ").strip(),
                            Stamp(t=usec / 1e6 if usec is not None else None), True)
    kind, line = _peel(raw)
    if not kind:
        g = _GREP.match(raw)
        if g:
            kind, line = _peel(raw[g.end():])
    if kind:
        return kind, line
    msg = raw.strip()
    if _KERNEL_SOURCE.match(msg) or kmsg_normalize.parse_line(msg) is not None:
        return KERNEL, Line(msg, bare=True)
    return "", None


def looks_like(lines: list[str]) -> bool:
    """Most of the first non-blank lines are log lines (a quoted paste's `> ` marks aside)."""
    head = [_QUOTE.sub("", x) for x in lines if x.strip()][:50]
    return bool(head) and sum(1 for x in head if line_of(x)[0]) * 2 > len(head)


def _spans(numbers: list[int], limit: int = 8) -> str:
    """[1, 2, 3, 7] -> '1-3, 7' (at most `limit` spans, then how many more lines)."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans[:limit])
    rest = sum(b - a + 1 for a, b in spans[limit:])
    return text + (f" and {rest} more" if rest else "")


def parse_kernel_log(text: str, source: str) -> KernelLog:
    out = KernelLog(source)
    skipped: dict[str, list[int]] = {}
    quoted = 0
    minute: str | None = None  # dmesg -H: the minute the offset lines below belong to
    last: dict[str, Any] | None = None
    last_indent = 0  # a record's own indentation: only lines indented deeper continue it
    lines, long = lines_within(text)
    if long:  # a line no kernel prints: it costs only itself, the Xid below it is still read
        skipped[f"lines over {MAX_LINE} characters (no kernel prints one), skipped"] = long
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            last = None if last is None or not last.get("kmsg") else last
            continue
        if _QUOTE.match(raw):
            raw, quoted = _QUOTE.sub("", raw), quoted + 1
        if last is not None and last.get("kmsg") and _KMSG_PROPERTY.match(raw):
            continue  # SUBSYSTEM=/DEVICE= of the record above: part of it, nothing to read
        kind, line = line_of(raw)
        if kind == OTHER:
            skipped.setdefault("lines of other programs (journal) skipped", []).append(n)
            last = None
            continue
        indent = len(raw) - len(raw.lstrip())
        if (line is None or line.bare) and last is not None and indent > last_indent:
            last["msg"] = "\n".join(x for x in (last["msg"], raw.strip()) if x)  # indented under a record: dmesg's multi-line message
            continue
        if line is None:
            skipped.setdefault("not kernel-log lines, skipped", []).append(n)
            continue
        stamp = line.stamp
        if stamp.minute is not None:
            minute = stamp.minute
        elif stamp.rel is not None and stamp.t is None and stamp.when is None:
            if minute is None:
                skipped.setdefault("relative times with no minute line above them: time unknown", []).append(n)
            stamp = log_time.resolved(stamp, minute)
        out.scanned += 1
        last_indent = indent
        last = {"t": stamp.t, "wall": stamp.wall, "when": stamp.when, "msg": line.msg, "line": n,
                "kmsg": line.kmsg_record}
        out.lines.append(last)
    for rec in out.lines:
        rec.pop("kmsg", None)
    for why, numbers in skipped.items():
        out.notes.append(Note(numbers[0], f"{why} (line{'s' if len(numbers) > 1 else ''} {_spans(numbers)})"))
    if quoted:
        out.notes.append(Note(None, f"{quoted} line(s) carried a quote mark ('> '), removed"))
    if not out.lines and long:  # nothing but lines no kernel prints: not a kernel log at all
        raise TextParseError(f"line is {len(text.split(chr(10))[long[0] - 1])} characters long (over {MAX_LINE}): "
                             "not command output", source, long[0])
    if not out.lines:
        out.notes.append(Note(None, "no kernel-log line in this file"))
    return out
