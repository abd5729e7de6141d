"""What `-q` (cron mode) prints: every host that is a problem, with its one-line reason, and every
warn/fail finding; on a healthy fleet nothing at all, so cron mails only when there is something
to read (docs/cron.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.engine.outcomes import is_problem
from orchestrator.present.terminal.findings import findings_table
from orchestrator.present.terminal.hosts import recap
from orchestrator.present.terminal.text import clean
from orchestrator.present.terminal.width import wrap
from orchestrator.store.spool import records_with
from orchestrator.verdict.findings import severity_rank


def problem_host_lines(fleet: Mapping[str, Any]) -> list[str]:
    """`UNREACHABLE offline-01: connection refused ...`, one line per unreachable, failed, timed
    out or invalid host; the probes behind it named when the host answered at all."""
    lines = []
    for rec in records_with(fleet.get("hosts") or [], ()):
        outcome = str(rec.get("outcome") or "")
        if not is_problem(outcome):
            continue
        probes = rec.get("probes") if isinstance(rec.get("probes"), dict) else {}
        bad = [p for p, r in probes.items() if isinstance(r, dict) and r.get("outcome") == outcome]
        where = f" ({', '.join(bad)})" if bad and outcome != "unreachable" else ""
        reason = clean(rec.get("reason") or "no reason recorded", 300)
        lines.append(f"{outcome.upper()} {clean(rec.get('name'), 80)}{where}: {reason}")
    return lines


def quiet_text(fleet: Mapping[str, Any], width: int | None = None) -> str:
    """The -q report, or "" when no host is a problem and no finding is warn or fail; fitted to
    `width` (whole lines when None: cron's mail is not a terminal)."""
    hosts = problem_host_lines(fleet)
    findings = [f for f in fleet.get("findings") or [] if severity_rank(f["severity"]) >= severity_rank("warn")]
    if not hosts and not findings:
        return ""
    out = []
    if hosts:
        out.append("\n".join(wrap(line, width, subsequent="    ") for line in hosts))
    if findings:
        out.append(findings_table(findings, "warn", width))
    out.append(recap(dict(fleet), width))
    return "\n\n".join(out)
