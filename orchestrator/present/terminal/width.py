"""Fit terminal text to the terminal: its width, wrapped tables and wrapped lines.

The width is the terminal's (`COLUMNS`, else the tty's size); when stdout is not a terminal and
no `COLUMNS` is set (a pipe, a file, cron mail), there is no width and nothing is wrapped or cut:
a reader with `grep` gets every line whole.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tabulate import tabulate

from orchestrator.facts.textsafe import is_digits

MIN_COLUMN = 8  # a column is never wrapped narrower than this (or its header)
COMFORT = 18  # columns are dropped (the droppable ones) rather than wrapped narrower than this
_GAP = 2  # tabulate's "simple" format puts two spaces between columns


def terminal_width() -> int | None:
    """Columns to fit into, or None for "no limit" (stdout is not a terminal and COLUMNS is unset)."""
    if is_digits(os.environ.get("COLUMNS", "").strip()):
        return max(20, int(os.environ["COLUMNS"]))
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        return None
    return max(20, shutil.get_terminal_size().columns)


def _natural(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> list[int]:
    widths = [len(h) + _GAP for h in headers]  # tabulate pads a header by two (its MIN_PADDING)
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], *(len(x) for x in str(c).splitlines() or [""]))
    return widths


def fit_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], width: int | None,
              droppable: Sequence[str] = (), fixed: Sequence[str] = (), drop_before_wrap: bool = False,
              wrappers: Mapping[str, Callable[[str, int], str]] | None = None, keep_wrapped: Sequence[str] = ()) -> str:
    """A `simple` table no wider than `width` (None: as wide as its cells).

    Columns named in `droppable` are left out, in that order, while even the narrowest layout does
    not fit (with `drop_before_wrap`: while the table does not fit unwrapped, so a wide terminal
    shows every row on one line); then the widest remaining columns (not in `fixed`) are wrapped,
    never narrower than MIN_COLUMN or their header.  Cell text is wrapped at spaces and hyphens,
    never cut; a column named in `wrappers` is wrapped by its own function (text, width -> lines).
    A droppable column also named in `keep_wrapped` is worth wrapping: when its turn comes it stays
    as long as every column left can be at least COMFORT wide, and it is the first to be wrapped,
    down to COMFORT, so the others keep their width (the hosts' `why`)."""
    heads: list[str] = list(headers)
    table: list[list[Any]] = [list(r) for r in rows]
    if width is None or not table:
        return tabulate(table, headers=heads, disable_numparse=True)

    def floor(i: int, nat: list[int], least: int = MIN_COLUMN) -> int:
        if heads[i] in keep_wrapped:
            least = max(least, COMFORT)
        return nat[i] if heads[i] in fixed else min(nat[i], max(least, len(heads[i]) + _GAP))

    def total(widths: list[int]) -> int:
        return sum(widths) + _GAP * (len(widths) - 1)

    for name in droppable:
        nat = _natural(table, heads)
        # Drop a column while the others would be squeezed below a readable width (COMFORT).
        if drop_before_wrap and total(nat) <= width:
            break
        wrapped = not drop_before_wrap or name in keep_wrapped
        if wrapped and total([floor(i, nat, COMFORT) for i in range(len(heads))]) <= width:
            break
        if name in heads:
            i = heads.index(name)
            heads.pop(i)
            for r in table:
                r.pop(i)
    nat = _natural(table, heads)
    widths = list(nat)
    over = sum(widths) + _GAP * (len(widths) - 1) - width
    for _ in range(4):  # tabulate pads heads and wrapped cells its own way: measure, then shrink again
        while over > 0:
            shrinkable = [i for i in range(len(widths)) if widths[i] > floor(i, nat)]
            if not shrinkable:
                break
            i = max(shrinkable, key=lambda j: (heads[j] in keep_wrapped, widths[j]))
            widths[i] -= 1
            over -= 1
        own = wrappers or {}
        cells = [[own[heads[i]](str(c), widths[i]) if heads[i] in own and widths[i] < nat[i] else c
                  for i, c in enumerate(r)] for r in table]
        maxw: list[int | None] = [w if w < n and heads[i] not in own else None
                                  for i, (w, n) in enumerate(zip(widths, nat))]
        text = tabulate(cells, headers=heads, maxcolwidths=maxw, disable_numparse=True)
        over = max(len(line) for line in text.splitlines()) - width
        if over <= 0:
            break
    return text


def wrap(text: str, width: int | None, indent: str = "", subsequent: str | None = None) -> str:
    """`text` on lines of at most `width` columns, first line after `indent`, the rest after
    `subsequent` (default: as many spaces as `indent`).  No width: one line, whole."""
    if width is None:
        return indent + text
    rest = " " * len(indent) if subsequent is None else subsequent
    return "\n".join(textwrap.wrap(text, width=max(20, width), initial_indent=indent, subsequent_indent=rest,
                                   break_on_hyphens=False)) or indent.rstrip()
