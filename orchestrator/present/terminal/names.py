"""Many host names in a few characters: `node[01:10]`, or the first few and a count.

One cause on ten hosts is one line (issue 49): the names fold as an Ansible-style range where
they are one prefix and consecutive numbers of one width (the inventory's own syntax,
inventory/ranges.py, so the text can be pasted back as a --limit), else the first few are named
and the rest counted.  Pure: names in, text out."""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.present.terminal.text import clean

NAMED = 3  # names written out before the rest are counted
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def _as_range(names: Sequence[str]) -> str | None:
    """`node[01:10]` when every name is one prefix and the consecutive numbers of one width."""
    parts = [_NUMBERED.match(n) for n in names]
    if not all(parts):
        return None
    prefixes = {m[1] for m in parts if m}
    widths = {len(m[2]) for m in parts if m}
    if len(prefixes) != 1 or len(widths) != 1:
        return None
    numbers = sorted(int(m[2]) for m in parts if m)
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        return None
    first = parts[0]
    assert first is not None
    w = widths.pop()
    return f"{clean(first[1], 60)}[{numbers[0]:0{w}d}:{numbers[-1]:0{w}d}]"


def fold_names(names: Sequence[str], named: int = NAMED) -> str:
    """`a, b`; `node[01:10] (10 hosts)`; `12 hosts: a, b, c (+9 more)`."""
    unique = list(dict.fromkeys(names))
    if len(unique) <= named:
        return ", ".join(clean(n, 60) for n in unique)
    folded = _as_range(unique)
    if folded:
        return f"{folded} ({len(unique)} hosts)"
    shown = ", ".join(clean(n, 60) for n in unique[:named])
    return f"{len(unique)} hosts: {shown} (+{len(unique) - named} more)"
