"""Findings: the verdicts the checks produce.  Pure data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    """Worst first: the declaration order is the severity order every reader sorts and filters by."""

    FAIL = "fail"
    WARN = "warn"
    INFO = "info"

    @property
    def rank(self) -> int:
        """2 for fail, 1 for warn, 0 for info: higher is worse."""
        return len(SEVERITY_ORDER) - 1 - SEVERITY_ORDER.index(self.value)


# Severity values, worst first (fleet.json, tables, the report, Prometheus and CSV columns).
SEVERITY_ORDER: tuple[str, ...] = tuple(s.value for s in Severity)


def severity_rank(value: object) -> int:
    """Severity.rank of a severity value read back from fleet.json; -1 for anything else."""
    return Severity(value).rank if value in SEVERITY_ORDER else -1


class Kind(str, Enum):
    FAULT = "fault"
    PLATFORM_LIMITATION = "platform_limitation"
    UNKNOWN = "unknown"  # could not be judged, e.g. needs root


@dataclass
class Finding:
    id: str  # stable dotted id, e.g. "nvlink.link.down"
    severity: Severity
    kind: Kind
    host: str
    subject: str  # "GPU1 (0000:2a:00.0)", "link 3", "GPU0->GPU5", "0000:18:00.0"
    message: str  # one line a person reads
    expected: Any = None
    actual: Any = None
    evidence: list[str] = field(default_factory=list)  # probe fields the verdict rests on
    hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        # Built by hand, not with dataclasses.asdict: asdict deep-copies expected/actual/evidence
        # value by value, which was a fifth of `probe merge` (69,000 findings at 2,000 hosts).
        # The values are shared, not copied: some `actual` values are a host's facts themselves
        # (nccl, p2p), so neither a finding's dict nor fleet.json's facts may be changed in place
        # once judged (nothing does: overrides build new findings, writers encode as they read).
        return {"id": self.id, "severity": self.severity.value, "kind": self.kind.value, "host": self.host,
                "subject": self.subject, "message": self.message, "expected": self.expected,
                "actual": self.actual, "evidence": list(self.evidence), "hint": self.hint}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        d = dict(d)
        d["severity"] = Severity(d["severity"])
        d["kind"] = Kind(d["kind"])
        return cls(**d)


def fault(id: str, host: str, subject: str, message: str, **kw: Any) -> Finding:
    return Finding(id=id, severity=kw.pop("severity", Severity.FAIL), kind=Kind.FAULT, host=host,
                   subject=subject, message=message, **kw)


def limitation(id: str, host: str, subject: str, message: str, **kw: Any) -> Finding:
    return Finding(id=id, severity=kw.pop("severity", Severity.INFO), kind=Kind.PLATFORM_LIMITATION,
                   host=host, subject=subject, message=message, **kw)


def unknown(id: str, host: str, subject: str, message: str, **kw: Any) -> Finding:
    return Finding(id=id, severity=kw.pop("severity", Severity.INFO), kind=Kind.UNKNOWN, host=host,
                   subject=subject, message=message, **kw)
