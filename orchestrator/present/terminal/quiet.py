"""What `-q` (cron mode) prints: every host that is not healthy, with why, and its warn/fail
faults (root first, what followed from it beneath); on a healthy fleet nothing at all, so cron
mails only when there is something to read (docs/cron.md)."""

from __future__ import annotations

from orchestrator.present.terminal.findings import hosts_view
from orchestrator.present.terminal.hosts import recap
from orchestrator.verdict.result import FleetResult


def quiet_text(fleet: FleetResult, width: int | None = None) -> str:
    """The -q report, or "" when every host is healthy; fitted to `width` (whole lines when None:
    cron's mail is not a terminal)."""
    if not fleet.problem_hosts:
        return ""
    return hosts_view(fleet, width, "warn") + "\n\n" + recap(fleet, width)
