"""What changed between two runs, as drift (verdict/drift.py) decides it: the types every surface
renders (the terminal, `probe diff --format json`, the report), apart from the code that compares."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.verdict.findings import Finding


@dataclass(frozen=True)
class Change:
    host: str
    kind: str  # host.unreachable, host.recovered, gpu.lost, gpu.gained, gpu.moved, gpu.replaced,
    #            link.down, link.up, level.changed, bandwidth.dropped, bandwidth.rose, class.changed,
    #            finding.new, finding.resolved; for the run (host ""): run.playbook,
    #            run.probes, run.limit, run.expect
    subject: str
    old: Any = None
    new: Any = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FindingKey = tuple[str, str, str]  # id, host, subject


@dataclass
class FleetDiff:
    old_run: str | None
    new_run: str | None
    changes: list[Change] = field(default_factory=list)  # per host, on hosts both runs probed
    run_changes: list[Change] = field(default_factory=list)  # playbook, probes, limit, fleet-wide expectations
    not_in_new: list[str] = field(default_factory=list)  # hosts of the baseline this run did not probe
    not_in_old: list[str] = field(default_factory=list)  # hosts this run probed that the baseline did not
    old_limit: str | None = None
    new_limit: str | None = None
    # findings present in one run only whose check did not judge that host in the other: reason -> count
    not_compared: dict[str, int] = field(default_factory=dict)
    compared: int = 0  # hosts both runs probed and reached
    new_findings: list[FindingKey] = field(default_factory=list)
    resolved_findings: list[FindingKey] = field(default_factory=list)
    # the findings themselves (new: this run's; resolved: the baseline's), for a report to list whole
    new: list[Finding] = field(default_factory=list)
    resolved: list[Finding] = field(default_factory=list)
    old_classes: dict[str, str] = field(default_factory=dict)  # host -> its class in the baseline

    def by_host(self) -> dict[str, list[Change]]:
        out: dict[str, list[Change]] = {}
        for c in self.changes:
            out.setdefault(c.host, []).append(c)
        return out

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.changes:
            out[c.kind] = out.get(c.kind, 0) + 1
        return out

    def __bool__(self) -> bool:
        return bool(self.changes or self.run_changes or self.not_in_new or self.not_in_old)

    def to_dict(self) -> dict[str, Any]:
        return {"old_run": self.old_run, "new_run": self.new_run,
                "run_changes": [c.to_dict() for c in self.run_changes],
                "changes": [c.to_dict() for c in self.changes],
                "not_in_new": {"limit": self.new_limit, "hosts": list(self.not_in_new)},
                "not_in_old": {"limit": self.old_limit, "hosts": list(self.not_in_old)},
                "not_compared": dict(self.not_compared)}
