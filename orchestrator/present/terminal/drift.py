"""Drift between two runs as terminal text, grouped by host, one line per change."""

from __future__ import annotations

from typing import Any

from orchestrator.present.terminal.text import clean
from orchestrator.verdict.drift import FleetDiff


def _clean(s: Any) -> str:
    # Host-controlled text (names, reasons, finding messages) must not steer the terminal.
    return clean(s, limit=400)


_MARK = {
    "host.added": "+", "host.removed": "-", "host.unreachable": "!", "host.recovered": "+",
    "gpu.lost": "-", "gpu.gained": "+", "gpu.moved": "~", "gpu.replaced": "~",
    "link.down": "-", "link.up": "+", "level.changed": "~", "bandwidth.dropped": "-", "bandwidth.rose": "+",
    "class.changed": "~", "finding.new": "!", "finding.resolved": "+",
}


def render_diff(d: FleetDiff) -> str:
    """Terminal text, grouped by host; one line per change."""
    head = f"drift {d.old_run or '?'} -> {d.new_run or '?'}"
    if not d.changes:
        return f"{_clean(head)}: no changes\n"
    lines = [_clean(head) + ":"]
    for host, changes in d.by_host().items():
        lines.append(f"  {_clean(host)}")
        for c in changes:
            text = c.message or f"{c.subject}: {c.old} -> {c.new}"
            if c.kind.startswith("finding."):
                text = f"{'new' if c.kind == 'finding.new' else 'resolved'} finding {c.subject}: {c.message}"
            lines.append(f"    {_MARK.get(c.kind, '*')} {_clean(text)}")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(d.kinds().items()))
    lines.append(f"{len(d.changes)} change(s) on {len(d.by_host())} host(s): {counts}")
    return "\n".join(lines) + "\n"
