"""The fabric's own faults: a rail, a path or pair between ports, a ring no host explains.

The rule (docs/fabric.md, "Faults of the fabric are the fabric's"): a finding whose rule says it
is the fabric's (`Rule.fabric`, or `Rule.fabric_when` on the finding's own facts) is about what
lies between the hosts, not about any one of them.  The check still raises it on every host it
touches (each host's record says what was seen from it, and drift, merge and rejudge read it
there), but no host's health, RECAP count, drain line or remediation step comes from it: it is
shown once, as one `FabricFault` naming the hosts it touches.  A host is blamed only where the
bisection pins the fault on it (`fabric.host.slow`, `fabric.hca.slow`, `fabric.nccl.slow` bisected
to a host): those stay host findings.

Pure: findings in, fabric faults out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.verdict import rules
from orchestrator.verdict.findings import SEVERITY_ORDER, Action, Device, DeviceKind, Finding, Kind, Severity

__all__ = ["FabricFault", "fabric_counts", "fabric_faults", "host_findings", "is_fabric"]

HOSTS_NAMED = 5  # a fault's hosts named one by one up to this many, then counted


def is_fabric(f: Finding) -> bool:
    """`f` is the fabric's subject, not its host's (its rule says so)."""
    rule = rules.BY_ID.get(f.id)
    return rule is not None and rule.of_fabric(f)


def host_findings(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that are about their host: what its health, drain line and plan come from."""
    return [f for f in findings if not is_fabric(f)]


@dataclass(frozen=True)
class FabricFault:
    """One fault of the fabric, once, with every host it was raised on."""

    id: str
    severity: Severity  # the worst of its findings
    kind: Kind
    subject: str  # where it is, the same from every host: "rail 6 (mlx5_6)", "h1:mlx5_2 <-> h2:mlx5_2 (rail 2)"
    message: str
    hint: str
    action: Action
    because: str
    hosts: tuple[str, ...]  # the hosts it touches (raised on), sorted
    expected: Any = None
    actual: Any = None
    evidence: tuple[str, ...] = ()
    devices: tuple[Device, ...] = ()  # every device its findings name (ports, rails, peers), once

    def hosts_text(self, named: int = HOSTS_NAMED) -> str:
        """`3 host(s): a, b, c` or `24 host(s): a, b, c, d, e (+19 more)`."""
        more = f" (+{len(self.hosts) - named} more)" if len(self.hosts) > named else ""
        return f"{len(self.hosts)} host(s): " + ", ".join(self.hosts[:named]) + more

    def to_dict(self) -> dict[str, Any]:
        """fleet.json's `fabric_findings` entry (docs/fleet-schema.md)."""
        return {"id": self.id, "severity": self.severity.value, "kind": self.kind.value, "subject": self.subject,
                "message": self.message, "hint": self.hint, "action": self.action.value, "because": self.because,
                "hosts": list(self.hosts), "expected": self.expected, "actual": self.actual,
                "evidence": list(self.evidence),
                "devices": [d.to_dict() for d in self.devices]}


def place(f: Finding) -> str:
    """Where a fabric finding is, the same on each host it is raised on: a path's two ends (each
    host names its own port first, so they are put in one order), else its subject."""
    ends = {f"{f.host}:{d.nic}" for d in f.devices if d.kind is DeviceKind.NIC and d.nic}
    ends |= {f"{d.host}:{d.nic}" for d in f.devices if d.kind is DeviceKind.PEER_HOST and d.host and d.nic}
    if len(ends) < 2:
        return f.subject
    rails = sorted({d.rail for d in f.devices if d.rail is not None})
    return " <-> ".join(sorted(ends)) + (f" (rail {rails[0]})" if rails else "")


def fabric_faults(findings: Iterable[Finding]) -> list[FabricFault]:
    """The fabric findings grouped into faults (one per rule and place), worst first."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        if is_fabric(f):
            groups.setdefault((f.id, place(f)), []).append(f)
    faults = [_fault(subject, found) for (_, subject), found in groups.items()]
    return sorted(faults, key=lambda x: (-x.severity.rank, x.id, x.subject))


def _fault(subject: str, found: Sequence[Finding]) -> FabricFault:
    first = min(found, key=lambda f: f.host)  # the same text whichever order the hosts came in
    worst = max(found, key=lambda f: f.severity.rank)
    return FabricFault(first.id, worst.severity, first.kind, subject, first.message, first.hint, first.action,
                       first.because, tuple(sorted({f.host for f in found})), first.expected, first.actual,
                       tuple(first.evidence), tuple(dict.fromkeys(d for f in found for d in f.devices)))


def fabric_counts(faults: Iterable[FabricFault]) -> dict[str, int]:
    """severity -> fabric faults (fleet.json's summary.fabric)."""
    out = dict.fromkeys(SEVERITY_ORDER, 0)
    for f in faults:
        out[f.severity.value] += 1
    return out
