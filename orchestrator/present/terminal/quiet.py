"""What `-q` (cron mode) prints: every host that is not healthy, with why, and its warn/fail
faults (root first, what followed from it beneath), the fabric's faults once each; on a healthy
fleet with a sound fabric nothing at all, so cron
mails only when there is something to read (docs/cron.md)."""

from __future__ import annotations

from orchestrator.present.terminal.findings import fabric_view, hosts_view
from orchestrator.present.terminal.hosts import recap
from orchestrator.verdict.result import FleetResult


def quiet_text(fleet: FleetResult, width: int | None = None) -> str:
    """The -q report, or "" when every host is healthy; fitted to `width` (whole lines when None:
    cron's mail is not a terminal)."""
    fabric = fabric_view(fleet, width, "warn")  # a fault of the fabric alone is not a quiet night
    if not fleet.problem_hosts and not fabric:
        return ""
    return "\n\n".join(p for p in (hosts_view(fleet, width, "warn"), fabric, recap(fleet, width)) if p)
