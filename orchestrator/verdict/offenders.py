"""Repeat offenders: hosts whose faults come back, or come and go, over the recent runs.

Lemon detection, as in Meta's cluster reliability work: a node that keeps failing after each fix
costs more than one that fails once.  From the run history (the previous complete runs of the same
inventory, playbook and limit, api/session.py) and this run:

* recurring: a fail finding raised in at least `RECUR_N` of the last `WINDOW` runs that judged the
  host, and cleared in between (the fix did not hold).  A fault present in every run is not named
  here: it was never fixed, which drift and the host's own finding already say;
* flapping: a warn or fail finding whose presence changed at least `FLAP_CHANGES` times over
  those runs (a marginal link, a fan, a driver that comes and goes).

One `host.repeat_offender` per host, naming the ids and the runs that show them.  Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.verdict import rules
from orchestrator.verdict.fabric_faults import host_findings
from orchestrator.verdict.findings import Finding, Severity, fault

OFFENDER = rules.host.REPEAT_OFFENDER.id
WINDOW = 5  # runs looked at, this one included
RECUR_N = 3  # runs a fail finding must be raised in (with a clear run between)
FLAP_CHANGES = 3  # presence changes that make a finding flap
_BAD = (Severity.FAIL.value, Severity.WARN.value)


@dataclass(frozen=True)
class PastRun:
    """What one run said of its hosts: which it judged in full, and each host's warn/fail ids with
    their worst severity."""

    id: str
    hosts: frozenset[str]
    findings: Mapping[str, Mapping[str, str]]  # host -> finding id -> worst severity (fail / warn)


def run_of(run_id: str, judged_hosts: Iterable[str], findings: Iterable[Finding]) -> PastRun:
    worst: dict[str, dict[str, str]] = {}
    for f in host_findings(findings):  # a rail slow night after night is the fabric's, not each host's
        if f.severity.value not in _BAD:
            continue
        ids = worst.setdefault(f.host, {})
        if ids.get(f.id) != Severity.FAIL.value:
            ids[f.id] = f.severity.value
    return PastRun(run_id, frozenset(judged_hosts), worst)


def _came_back(flags: Sequence[bool]) -> bool:
    """Raised, then cleared, then raised again (oldest first)."""
    raised = cleared = False
    for f in flags:
        if f and cleared:
            return True
        if f:
            raised = True
        elif raised:
            cleared = True
    return False


def _marks(flags: Sequence[bool]) -> str:
    return "".join("x" if f else "." for f in flags)


def judge(history: Sequence[PastRun], current: PastRun) -> tuple[list[Finding], dict[str, str]]:
    """(findings, host -> why not judged) for the hosts `current` judged, over the last WINDOW runs
    (`history`: earlier runs, oldest first)."""
    runs = [*history[-(WINDOW - 1):], current] if WINDOW > 1 else [current]
    findings: list[Finding] = []
    not_judged: dict[str, str] = {}
    for host in sorted(current.hosts):
        seen = [r for r in runs if host in r.hosts]
        if len(seen) < RECUR_N:
            not_judged[host] = (f"{len(seen)} complete run(s) of this inventory judged the host (this one included): "
                                f"naming a repeat offender needs {RECUR_N}")
            continue
        ids = sorted({fid for r in seen for fid in r.findings.get(host, {})})
        recurring, flapping = [], []
        for fid in ids:
            present = [fid in r.findings.get(host, {}) for r in seen]
            failed = [r.findings.get(host, {}).get(fid) == Severity.FAIL.value for r in seen]
            changes = sum(1 for a, b in zip(present, present[1:]) if a != b)
            if sum(failed) >= RECUR_N and _came_back(failed):
                recurring.append((fid, failed))
            elif changes >= FLAP_CHANGES:
                flapping.append((fid, present))
        if not recurring and not flapping:
            continue
        parts = [f"{fid} came back: a fail in {sum(f)} of the last {len(seen)} runs, cleared in between ({_marks(f)})"
                 for fid, f in recurring]
        parts += [f"{fid} flaps: {sum(p)} of the last {len(seen)} runs, {sum(1 for a, b in zip(p, p[1:]) if a != b)} "
                  f"changes ({_marks(p)})" for fid, p in flapping]
        shown = [fid for fid, _ in recurring + flapping]
        findings.append(fault(
            OFFENDER, host, "fault history",
            "; ".join(parts) + " (x: raised, .: clear, oldest first)",
            severity=Severity.WARN, expected="faults fixed for good", actual={fid: _marks(m) for fid, m in recurring + flapping},
            evidence=[f"runs: {', '.join(r.id for r in seen)}", *(f"{fid} in {', '.join(r.id for r in seen if fid in r.findings.get(host, {}))}"
                                                                     for fid in shown)],
            hint="the usual fix does not hold on this host: take it out of service and escalate to a hardware "
                 "investigation or the vendor (RMA) instead of fixing the same fault again"))
    return findings, not_judged
