"""Colour on a terminal: a host's health and a finding's severity read at a glance, as Ansible's
recap does (failed red, degraded yellow, healthy green; what was not judged dim).

Colour is laid over text already fitted to the terminal: a code takes no column, so painting a
cell or a word after the layout never moves or wraps anything.  It is on for a terminal unless
NO_COLOR is set (https://no-color.org) or TERM is dumb; `--color always|never` decides instead.
Host-controlled text cannot carry codes of its own (text.clean removed them before the layout)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from orchestrator.verdict.findings import Severity
from orchestrator.verdict.health import Health

MODES = ("auto", "always", "never")

_RED, _YELLOW, _GREEN, _DIM, _RESET = "\x1b[31m", "\x1b[33m", "\x1b[32m", "\x1b[2m", "\x1b[0m"
_BOLD_RED = "\x1b[1;31m"

# One colour per health state and per severity: every painted surface reads these two tables.
HEALTH: Mapping[str, str] = {
    Health.FAILED.value: _RED,
    Health.UNREACHABLE.value: _BOLD_RED,
    Health.INCOMPLETE.value: _YELLOW,
    Health.DEGRADED.value: _YELLOW,
    Health.HEALTHY.value: _GREEN,
}
SEVERITY: Mapping[str, str] = {Severity.FAIL.value: _RED, Severity.WARN.value: _YELLOW, Severity.INFO.value: _DIM}

_STATES = "|".join(HEALTH)
_LEVELS = "|".join(SEVERITY)
# The lines as findings.py draws them: `FAILED host: ...`, `  FAIL id (kind) ...` (by host),
# `FAIL id (kind) on 3 host(s)` (by check), `      -> warn id ...`
_HEAD = re.compile(rf"^({_STATES.upper()})(?= )", re.M)
_FAULT = re.compile(rf"^((?:  )?)({_LEVELS.upper()})(?= \S+ \()", re.M)
_FOLLOWS = re.compile(rf"^( +-> )({_LEVELS})(?= )", re.M)
# RECAP's counts: `failed=12`, and `fail=3` / `warn=2` of its faults and findings
_COUNT = re.compile(rf"\b({_STATES}|{_LEVELS})=([1-9][0-9]*)")


def wanted(mode: str, stream: TextIO) -> bool:
    """Whether to colour what goes to `stream` under `--color mode`."""
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _paint(text: str, code: str) -> str:
    return f"{code}{text}{_RESET}"


@dataclass(frozen=True)
class Painter:
    """The terminal report's colours; with `on` False every method gives its text back unchanged."""

    on: bool

    def column(self, table: str, index: int, colours: Mapping[str, str] = HEALTH) -> str:
        """A `simple` table with the cells of column `index` coloured by their text.  The dashes
        under the header give each column's span, so a cell is found by position, never by a
        word that a host name or a reason may also hold."""
        lines = table.split("\n")
        if not self.on or len(lines) < 3 or not set(lines[1]) <= {"-", " "}:
            return table
        spans = [m.span() for m in re.finditer(r"-+", lines[1])]
        if index >= len(spans):
            return table
        start, end = spans[index]
        for i in range(2, len(lines)):
            cell = lines[i][start:end]
            code = colours.get(cell.strip())
            if code and (end >= len(lines[i]) or lines[i][end] == " "):
                lead = len(cell) - len(cell.lstrip())
                word = cell.strip()
                lines[i] = lines[i][:start + lead] + _paint(word, code) + lines[i][start + lead + len(word):]
        return "\n".join(lines)

    def faults(self, text: str) -> str:
        """The hosts (or fabric) view: each host's health word and each finding's severity."""
        if not self.on:
            return text
        text = _HEAD.sub(lambda m: _paint(m[1], HEALTH[m[1].lower()]), text)
        text = _FAULT.sub(lambda m: m[1] + _paint(m[2], SEVERITY[m[2].lower()]), text)
        return _FOLLOWS.sub(lambda m: m[1] + _paint(m[2], SEVERITY[m[2]]), text)

    def counts(self, text: str) -> str:
        """RECAP: each count above zero of a health state or a severity in its colour."""
        if not self.on:
            return text
        return _COUNT.sub(lambda m: _paint(m[0], HEALTH.get(m[1]) or SEVERITY[m[1]]), text)

    def dim(self, text: str) -> str:
        """What was not judged: present, and quieter than what was; each line on its own."""
        if not self.on:
            return text
        return "\n".join(_paint(line, _DIM) if line else line for line in text.split("\n"))
