"""Numbers read from what a host says: one home for the bounded readers and the bounds per field.

A host's text or envelope is untrusted.  Python's own readers are not bounded: int() refuses
more than 4,300 digits with a ValueError (which used to end a whole run with exit 70), float()
reads '1e400' as inf and 'nan' as a NaN that passes every floor (every comparison with NaN is
false).  Every number a parser takes from host text goes through read_int / read_float here,
and every figure of a probe's envelope through check(): a value that is not a plain number of
sane length, not finite, or outside its field's range is None with the reason, and the caller
drops that one row or field (with a note), never the line's neighbours or the file.

The ceilings are physical: each is far above what the fastest hardware of its class reaches
today, so a real figure is never refused and a forged one (1e30 Gb/s) never becomes a measurement.
The table is in docs/reliability.md ("Trust boundary: numbers").
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.facts.textsafe import is_digits

# 2**64 has 20 digits: no counter, size or id a machine prints is longer; a 5,000-digit token is
# garbage or forged, and refusing it before int() keeps the parse linear and exception-free.
MAX_DIGITS = 20
# A float as printed (`23317.65`, `5e-07`, `1.234567e+03`): a longer token is no printed figure.
MAX_FLOAT_CHARS = 40
_FLOAT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,3})?")
_HEX = re.compile(r"(?:0[xX])?[0-9a-fA-F]{1,16}")


@dataclass(frozen=True)
class Bound:
    """The range a field's value must fall in, inclusive, and why that is its range."""

    name: str
    lo: float
    hi: float
    unit: str
    why: str


# Network links, Gb/s (perftest --report_gbits, ibstat Rate, sysfs rate): a 1.6 Tb/s port (the
# next InfiniBand/Ethernet generation after XDR 800G) measured both ways is 3,200; no HCA port is faster.
NET_GBITS = Bound("network bandwidth", 0, 3200, "Gb/s", "twice a 1.6 Tb/s port (bidirectional)")
# GPU-side bandwidth, GB/s (nccl-tests busbw/algbw, nvbandwidth, p2pBandwidthLatencyTest, the p2p
# and nccl probes): a GPU's own memory copy is the fastest thing measured (B300 HBM3e: 8 TB/s).
GPU_GBYTES = Bound("GPU bandwidth", 0, 20000, "GB/s", "2.5 x the 8 TB/s of today's fastest GPU memory")
# Ethernet speed as /sys/class/net/*/speed prints it (Mb/s): the same 3,200 Gb/s.
NET_MBITS = Bound("link speed", -1, 3_200_000, "Mb/s", "the 3,200 Gb/s network ceiling; -1: no link, as sysfs says")
# Latency and times, microseconds: an hour; a benchmark step is cut long before.
LATENCY_US = Bound("latency", 0, 3.6e9, "us", "one hour; no run step lasts that long")
# Message and buffer sizes, bytes: 1 TiB, more than any GPU's memory (B300: 288 GB).
SIZE_BYTES = Bound("size", 0, 2**40, "bytes", "1 TiB, more than any GPU's memory")
# Counts (iterations, elements, wrong elements, errors, channels): a 64-bit counter.
COUNT = Bound("count", 0, 2**63 - 1, "", "a 64-bit counter")
# Seconds (kernel-log timestamps since boot, clocks): 10^10 s is 317 years.
SECONDS = Bound("seconds", 0, 1e10, "s", "317 years")
# Degrees Celsius: GPUs shut down near 100 C; below -50 C no data centre runs.
TEMPERATURE_C = Bound("temperature", -50, 200, "C", "no GPU runs outside this range")
# Watts: a whole GB200 superchip draws about 2,700 W.
POWER_W = Bound("power", 0, 10000, "W", "3.7 x a GB200 superchip")
# Percent (fan speed, utilisation).
PERCENT = Bound("percent", 0, 100, "%", "a percentage")
# Small indexes and identifiers (GPU index, rank, port, PCIe lanes and generation, Xid code, PID):
# Linux's PID_MAX_LIMIT is 4,194,304; Xid and SXid codes are below 100,000.
INDEX = Bound("index", 0, 2**22, "", "Linux's PID_MAX_LIMIT, above every index and code")

BOUNDS = (NET_GBITS, GPU_GBYTES, NET_MBITS, LATENCY_US, SIZE_BYTES, COUNT, SECONDS, TEMPERATURE_C, POWER_W,
          PERCENT, INDEX)


def _range(value: float, bound: Bound) -> str | None:
    if not bound.lo <= value <= bound.hi:
        return f"{bound.name} {_shown(value)} {bound.unit}".rstrip() + f" is outside {bound.lo:g}..{bound.hi:g} ({bound.why})"
    return None


def _shown(value: float) -> str:
    """A refused value for a message: an integer of hundreds of digits (strict JSON reads up to
    4,300) has no float form, so it is described, not converted."""
    if isinstance(value, int) and abs(value) > 10**15:
        return f"of {len(str(abs(value)))} digits"
    return f"{value:g}"


def read_int(text: str | None, bound: Bound = COUNT, base: int = 10) -> tuple[int | None, str | None]:
    """(the whole number `text` writes, None) or (None, why not): ASCII digits only (hex digits,
    an optional 0x, for base 16), at most MAX_DIGITS, within `bound`.  A leading '-' is read so
    that the reason says 'negative' rather than 'not a number'."""
    s = (text or "").strip()
    if not s:
        return None, "empty"
    negative = s.startswith("-") and base == 10
    digits = s[1:] if negative else s
    if len(digits) > MAX_DIGITS + (2 if base == 16 else 0):
        return None, f"a number of {len(digits)} digits (more than {MAX_DIGITS}: not a count a machine prints)"
    ok = is_digits(digits) if base == 10 else bool(_HEX.fullmatch(digits))
    if not ok:
        return None, f"not a whole number: {s[:40]!r}"
    value = -int(digits) if negative else int(digits, base)
    why = _range(value, bound)
    return (None, why) if why else (value, None)


def read_float(text: str | None, bound: Bound) -> tuple[float | None, str | None]:
    """(the figure `text` writes, None) or (None, why not): a plain decimal (an exponent of at most
    3 digits), at most MAX_FLOAT_CHARS characters, finite and within `bound`.  'nan', 'inf',
    '1e400' and '12abc' are refused here, never by an exception."""
    s = (text or "").strip()
    if not s:
        return None, "empty"
    if len(s) > MAX_FLOAT_CHARS:
        return None, f"a number of {len(s)} characters (more than {MAX_FLOAT_CHARS}: not a printed figure)"
    if not _FLOAT.fullmatch(s):
        return None, f"not a number: {s[:40]!r}"
    return check(float(s), bound)


def check(value: Any, bound: Bound) -> tuple[float | None, str | None]:
    """A figure already read (an envelope's JSON number): (value, None) when it is a finite number
    within `bound`, else (None, why).  bool is no number here (JSON true is not 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"not a number: {str(value)[:40]!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return None, f"{bound.name} {value} is not a finite number"
    why = _range(value, bound)
    return (None, why) if why else (value, None)


def int_or_none(text: str | None, bound: Bound = COUNT, base: int = 10) -> int | None:
    """read_int's value alone, for fields whose reason the caller does not report."""
    return read_int(text, bound, base)[0]


def float_or_none(text: str | None, bound: Bound) -> float | None:
    """read_float's value alone, for fields whose reason the caller does not report."""
    return read_float(text, bound)[0]


def value_float(value: Any, bound: Bound) -> tuple[float | None, str | None]:
    """A figure that is either a JSON number or text (a tool's JSON output writes some as strings)."""
    return read_float(value, bound) if isinstance(value, str) else check(value, bound)


def value_int(value: Any, bound: Bound = COUNT) -> tuple[int | None, str | None]:
    """A whole number that is either a JSON integer or text; a float is no count."""
    if isinstance(value, str):
        return read_int(value, bound)
    if isinstance(value, bool) or not isinstance(value, int):
        return None, f"not a whole number: {str(value)[:40]!r}"
    why = _range(value, bound)
    return (None, why) if why else (value, None)


def _json_int(text: str) -> int | str:
    return int(text) if len(text.lstrip("-")) <= MAX_DIGITS else text  # refused per field, not per file


def loads_numbers_as_found(text: str) -> Any:
    """json.loads for a tool's JSON output read per field: NaN, Infinity and integers past
    MAX_DIGITS stay text (then refused by value_float/value_int where a field is read) instead of
    refusing the whole file or raising past int()'s digit limit; floats past double range are
    text too."""
    def flt(s: str) -> float | str:
        v = float(s)
        return v if math.isfinite(v) else s
    return json.loads(text, parse_int=_json_int, parse_float=flt, parse_constant=str)
