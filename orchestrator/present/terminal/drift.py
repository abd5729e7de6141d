"""Drift between two runs as terminal text: one header, what the runs were asked to do
differently, the hosts only one run probed (one line each way), then per host one line per change,
and what could not be compared."""

from __future__ import annotations

from typing import Any

from orchestrator.present.terminal.text import clean
from orchestrator.verdict.changes import FleetDiff


def _clean(s: Any) -> str:
    # Host-controlled text (names, reasons, finding messages) must not steer the terminal.
    return clean(s, limit=400)


_MARK = {
    "host.unreachable": "!", "host.recovered": "+",
    "gpu.lost": "-", "gpu.gained": "+", "gpu.moved": "~", "gpu.replaced": "~",
    "link.down": "-", "link.up": "+", "level.changed": "~", "bandwidth.dropped": "-", "bandwidth.rose": "+",
    "class.changed": "~", "finding.new": "!", "finding.resolved": "+",
}
_NAMED_HOSTS = 3  # hosts named in the "not in this run" line; the rest are counted


def _hosts_line(hosts: list[str], what: str, limit: str | None) -> str:
    names = ", ".join(_clean(h) for h in hosts[:_NAMED_HOSTS])
    more = len(hosts) - _NAMED_HOSTS
    why = f" (limit {_clean(limit)})" if limit else ""
    return f"  {len(hosts)} host(s) {what}{why}: {names}" + (f" and {more} more" if more > 0 else "")


def render_diff(d: FleetDiff) -> str:
    """Terminal text under one header `drift OLD -> NEW`."""
    head = _clean(f"drift {d.old_run or '?'} -> {d.new_run or '?'}")
    lines = []
    for c in d.run_changes:
        lines.append(f"  ~ {_clean(c.message)}")
    if d.not_in_new:
        lines.append(_hosts_line(d.not_in_new, "not in this run", d.new_limit))
    if d.not_in_old:
        lines.append(_hosts_line(d.not_in_old, "not in the baseline", d.old_limit))
    for host, changes in d.by_host().items():
        lines.append(f"  {_clean(host)}")
        for c in changes:
            text = c.message or f"{c.subject}: {c.old} -> {c.new}"
            if c.kind.startswith("finding."):
                text = f"{'new' if c.kind == 'finding.new' else 'resolved'} finding {c.subject}: {c.message}"
            lines.append(f"    {_MARK.get(c.kind, '*')} {_clean(text)}")
    for why, n in sorted(d.not_compared.items()):
        lines.append(f"  not compared: {n} finding(s), their check {_clean(why)}")
    if not d.changes and not d.run_changes:
        return head + ": no changes" + ("\n" + "\n".join(lines) if lines else "") + "\n"
    if d.changes:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(d.kinds().items()))
        lines.append(f"{len(d.changes)} change(s) on {len(d.by_host())} host(s): {counts}")
    else:
        lines.append(f"no change on the {d.compared} host(s) both runs probed")
    return head + ":\n" + "\n".join(lines) + "\n"
