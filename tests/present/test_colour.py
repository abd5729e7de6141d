"""The terminal's colours are laid by position and line shape, not by a word a host can send
(present/terminal/colour.py, issue 49 item 3): host names that are health or severity words, or
that carry escape codes of their own, are never painted, and colour moves no column."""

from __future__ import annotations

import re

import pytest

from orchestrator.present.terminal.colour import HEALTH, Painter
from orchestrator.present.terminal.hosts import HEADERS, hosts_table
from orchestrator.verdict.result import FleetResult
from tests.support.judged import judged

_CODE = re.compile(r"\x1b\[[0-9;]*m")
HOSTILE = ["failed", "healthy", "FAILED", "unreachable 1", "\x1b[32mhealthy\x1b[0m", "FAIL x (fault)", "degraded=3"]


def _fleet(names: list[str]) -> FleetResult:
    hosts = [{"name": n, "outcome": "unreachable" if i % 2 else "ok", "reason": "refused" if i % 2 else "",
              "probes": {}, "facts": {}, "class": None} for i, n in enumerate(names)]
    return judged({"hosts": hosts})


@pytest.mark.parametrize("width", [None, 80, 200])
def test_only_the_health_cell_is_painted(width: int | None) -> None:
    fleet = _fleet(HOSTILE)
    plain = hosts_table(fleet, width)
    painted = Painter(True).column(plain, HEADERS.index("health"))
    assert _CODE.sub("", painted) == plain  # colour moved nothing and took no column
    beneath = [ln for ln in painted.splitlines() if "(unreachable): " in ln]
    assert len(beneath) == (0 if width is None else len(HOSTILE) // 2) and not any(map(_CODE.search, beneath))
    rows = [ln for ln in painted.splitlines()[2:] if ln and not ln.startswith(" ")]
    assert len(rows) == len(HOSTILE)
    for row, host in zip(rows, fleet.hosts):
        codes = _CODE.findall(row)
        assert codes == [HEALTH[host.health.state.value], "\x1b[0m"], row  # one painted cell: the health
        assert row.index(codes[0]) > len(row.split("  ", 1)[0])  # after the host's name, never in it


@pytest.mark.parametrize("text", [
    "FAILED gpu01: 1 fault(s)\n  FAIL a.b (fault) x: y\n      -> warn c.d e: f",
    "WARN a.b (fault) on 2 host(s)\nhost  subject\n----  -------\nFAIL  x",
    "RECAP hosts=3 failed=1 degraded=0 healthy=2 | faults fail=1 warn=0",
])
def test_painting_off_changes_nothing_and_on_changes_only_colour(text: str) -> None:
    off, on = Painter(False), Painter(True)
    for paint in ("faults", "counts", "dim"):
        assert getattr(off, paint)(text) == text
        assert _CODE.sub("", getattr(on, paint)(text)) == text
    assert "\x1b[33mdegraded=0" not in on.counts(text) and "warn=0\x1b" not in on.counts(text)  # zero: plain
    assert "FAIL\x1b[0m  x" not in on.faults(text)  # a host named FAIL in a table row is not a severity
