"""Host name ranges: Ansible's ``gpu[01:16]``, ``gpu[01:16:2]``, ``node[a:f]`` and the pdsh/Slurm
forms ``gpu[01-16]``, ``gpu[01-03,07,10-12]``.

Rules (Ansible's, applied to both forms): a zero-padded start (``01``) fixes the width, and the end
must then be written with the same width; letters range over ``a..zA..Z`` one character at a time;
several brackets in one name expand as a product, left to right.
"""

from __future__ import annotations

import itertools
import string

from orchestrator.facts.textsafe import is_digits
from orchestrator.inventory.model import InventoryError

# One typo (gpu[1:100000000]) must not eat the controller's memory.
MAX_RANGE_HOSTS = 100_000


class RangeError(ValueError):
    """A bracket in a host name does not expand; the message says why."""


def has_range(name: str) -> bool:
    return "[" in name or "]" in name


def _span(beg: str, end: str, step: int, body: str) -> list[str]:
    if is_digits(beg) and is_digits(end):
        width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
        if width and len(end) != width:
            raise RangeError(f"[{body}]: zero-padded start {beg!r} and end {end!r} must have the same width")
        lo, hi = int(beg), int(end)
        if lo > hi:
            raise RangeError(f"[{body}]: start {beg} is greater than end {end}")
        if (hi - lo) // step + 1 > MAX_RANGE_HOSTS:
            raise RangeError(f"[{body}]: expands to more than {MAX_RANGE_HOSTS:,} names")
        return [str(i).zfill(width) for i in range(lo, hi + 1, step)]
    letters = string.ascii_letters
    if len(beg) == 1 and len(end) == 1 and beg in letters and end in letters:
        lo, hi = letters.index(beg), letters.index(end)
        if lo > hi:
            raise RangeError(f"[{body}]: start {beg!r} comes after end {end!r}")
        return list(letters[lo : hi + 1 : step])
    raise RangeError(f"[{body}]: bounds {beg!r} and {end!r} must both be numbers or both be single letters")


def _expand_body(body: str) -> list[str]:
    if ":" in body:  # Ansible form [beg:end] or [beg:end:step]
        parts = body.split(":")
        if len(parts) not in (2, 3):
            raise RangeError(f"[{body}]: expected [start:end] or [start:end:step]")
        beg, end = parts[0].strip(), parts[1].strip()
        beg = beg or "0"  # Ansible reads an empty start as 0
        if not end:
            raise RangeError(f"[{body}]: the range has no end")
        step = 1
        if len(parts) == 3:
            raw = parts[2].strip()
            if not is_digits(raw) or int(raw) < 1:
                raise RangeError(f"[{body}]: step {raw!r} must be a whole number of at least 1")
            step = int(raw)
        return _span(beg, end, step, body)
    # pdsh/Slurm form: comma-separated items, each a single value or lo-hi
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise RangeError(f"[{body}]: empty item in the list")
        if "-" in item:
            beg, _, end = item.partition("-")
            if not beg or not end:
                raise RangeError(f"[{body}]: {item!r} needs a start and an end (like 01-16)")
            out.extend(_span(beg, end, 1, body))
        elif item.isalnum() and item.isascii():
            out.append(item)
        else:
            raise RangeError(f"[{body}]: {item!r} is not a number, a letter or a lo-hi range")
        if len(out) > MAX_RANGE_HOSTS:
            raise RangeError(f"[{body}]: expands to more than {MAX_RANGE_HOSTS:,} names")
    return out


def split_outside_brackets(text: str, sep: str) -> list[str]:
    """Split on ``sep`` except inside ``[...]``, so ``a,gpu[01-03,07]`` is two items."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def expand_range(name: str) -> list[str]:
    """All host names a pattern stands for, in order. Raises RangeError if a bracket does not expand."""
    if not has_range(name):
        return [name]
    pieces: list[list[str]] = []
    pos = 0
    while pos < len(name):
        open_at = name.find("[", pos)
        close_at = name.find("]", pos)
        if open_at < 0:
            if close_at >= 0:
                raise RangeError(f"']' without a matching '[' at position {close_at + 1}")
            pieces.append([name[pos:]])
            break
        if 0 <= close_at < open_at:
            raise RangeError(f"']' without a matching '[' at position {close_at + 1}")
        if open_at > pos:
            pieces.append([name[pos:open_at]])
        close_at = name.find("]", open_at)
        if close_at < 0:
            raise RangeError(f"'[' at position {open_at + 1} is never closed")
        body = name[open_at + 1 : close_at]
        if "[" in body:
            raise RangeError("brackets cannot be nested")
        if not body.strip():
            raise RangeError("empty brackets []")
        pieces.append(_expand_body(body))
        pos = close_at + 1
    total = 1
    for p in pieces:
        total *= len(p)
    if total > MAX_RANGE_HOSTS:
        raise RangeError(f"expands to {total:,} names, more than the limit of {MAX_RANGE_HOSTS:,}")
    return ["".join(combo) for combo in itertools.product(*pieces)]


def expand_host_pattern(name: str, where: str = "") -> list[str]:
    """expand_range, with failures as InventoryError prefixed by ``where`` ("file:line")."""
    try:
        return expand_range(name)
    except RangeError as exc:
        prefix = f"{where}: " if where else ""
        raise InventoryError(f"{prefix}host range {name!r} does not expand: {exc}") from None
