"""A host's health, decided once: what an operator reads first about each host.

    healthy      every probe finished, no warn or fail finding
    degraded     warn findings, no fail
    failed       a fail finding
    unreachable  the host did not answer
    incomplete   a probe it was meant to run did not finish (the run was stopped, a probe timed
                 out or failed), and nothing that did finish is a fail: judged only on what is
                 complete

Faults are counted by root (verdict/causes.py): a missing GPU with its three consequences is one
fail.  A fault of the fabric (a rail, a path between two ports: verdict/fabric_faults.py) is
not its hosts': it counts in no host's health.  Every surface (the hosts table, RECAP, `-q`, JSON, the report, Prometheus) shows this value;
none decides it again.

Pure: a host's outcome, its unfinished probes and its findings in, its health out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from orchestrator.engine.outcomes import Outcome, is_problem
from orchestrator.verdict.fabric_faults import host_findings
from orchestrator.verdict.findings import SEVERITY_ORDER, Finding, Severity


class Health(str, Enum):
    """Worst first: the declaration order is the order every surface lists and counts them in."""

    FAILED = "failed"
    UNREACHABLE = "unreachable"
    INCOMPLETE = "incomplete"
    DEGRADED = "degraded"
    HEALTHY = "healthy"

    @property
    def is_problem(self) -> bool:
        return self is not Health.HEALTHY


HEALTH_ORDER: tuple[str, ...] = tuple(h.value for h in Health)


@dataclass(frozen=True)
class HostHealth:
    state: Health
    # faults (root findings, each with what followed from it) by their worst severity
    faults: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(SEVERITY_ORDER, 0))
    reason: str = ""  # one line: which faults, which probes did not finish, why it did not answer

    @property
    def fail(self) -> int:
        return int(self.faults.get("fail", 0))

    @property
    def warn(self) -> int:
        return int(self.faults.get("warn", 0))

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state.value, "faults": dict(self.faults), "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Any) -> HostHealth | None:
        """A stored health, or None when the record has none or it is not of the stored shape."""
        if not isinstance(d, dict) or d.get("state") not in HEALTH_ORDER:
            return None
        stored = d.get("faults")
        faults: dict[str, Any] = stored if isinstance(stored, dict) else {}
        counts = {s: _count(faults.get(s)) for s in SEVERITY_ORDER}
        reason = d.get("reason")
        return cls(Health(d["state"]), counts, reason if isinstance(reason, str) else "")


# A stored record that no longer says how its host answered (damaged on disk: store/compact's
# damaged_host keeps what survived) reads as a host that failed and was not judged here, never as
# one that answered and passed.
LOST = "its stored record does not read back, nor say how the host answered: not judged here"


def stored_answer(rec: Mapping[str, Any]) -> tuple[str, str]:
    """(outcome, reason) of a stored host record, read tolerantly."""
    outcome, reason = rec.get("outcome"), rec.get("reason")
    if not isinstance(outcome, str) or not outcome:
        return Outcome.FAILED.value, reason if isinstance(reason, str) and reason else LOST
    return outcome, reason if isinstance(reason, str) else ""


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def fault_severities(findings: Iterable[Finding]) -> list[tuple[Finding, Severity]]:
    """Each root finding with the worst severity of its fault (itself and what followed from it)."""
    found = list(findings)
    # keyed by host too: a fleet check raises one id and subject on several hosts (one GPU UUID on
    # two), and each host's fault is as bad as its own findings, not another host's
    worst: dict[tuple[str, str, str], int] = {}
    for f in found:
        key = (f.host, f.caused_by.id, f.caused_by.subject) if f.caused_by else (f.host, f.id, f.subject)
        worst[key] = max(worst.get(key, -1), f.severity.rank)
    by_rank = {s.rank: s for s in Severity}
    return [(f, by_rank[worst[(f.host, f.id, f.subject)]]) for f in found if f.is_root]


def decide(outcome: str, reason: str, unfinished: Mapping[str, str], findings: Iterable[Finding]) -> HostHealth:
    """The host's health from its transport outcome (and its reason), its probes that did not
    finish (probe -> why) and its findings (roots already grouped); the fabric's findings raised
    on it are not its faults."""
    roots = fault_severities(host_findings(findings))
    counts = dict.fromkeys(SEVERITY_ORDER, 0)
    for _, sev in roots:
        counts[sev.value] += 1
    if outcome == "unreachable":
        return HostHealth(Health.UNREACHABLE, counts, reason or "no answer")
    failing = [f.id for f, sev in roots if sev is Severity.FAIL]
    if failing:
        return HostHealth(Health.FAILED, counts, _faults_text(failing))
    if unfinished:
        return HostHealth(Health.INCOMPLETE, counts, "; ".join(
            f"{probe} {why}" for probe, why in unfinished.items()) + ": judged on what finished")
    if is_problem(outcome):  # no probe says why (a host with none left, a stored record that lost them)
        return HostHealth(Health.INCOMPLETE, counts, f"{outcome}: {reason or 'no probe finished'}")
    warning = [f.id for f, sev in roots if sev is Severity.WARN]
    if warning:
        return HostHealth(Health.DEGRADED, counts, _faults_text(warning))
    return HostHealth(Health.HEALTHY, counts, "")


def _faults_text(ids: list[str]) -> str:
    shown = list(dict.fromkeys(ids))
    more = f" (+{len(shown) - 3} more)" if len(shown) > 3 else ""
    return f"{len(ids)} fault(s): " + ", ".join(shown[:3]) + more
