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


@dataclass(frozen=True)
class FindingRef:
    """Another finding of the same host, by what tells it apart there: its id and subject."""

    id: str
    subject: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "subject": self.subject}

    @classmethod
    def from_dict(cls, d: Any) -> FindingRef | None:
        """A stored reference, or None when it is not one (a damaged file)."""
        if isinstance(d, dict) and isinstance(d.get("id"), str) and isinstance(d.get("subject"), str):
            return cls(d["id"], d["subject"])
        return None


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
    # One fault, one root (verdict/causes.py): a finding that follows from another of its host names
    # that root; the root names what followed from it.  Set once every finding is known.
    caused_by: FindingRef | None = None
    consequences: tuple[FindingRef, ...] = ()

    @property
    def ref(self) -> FindingRef:
        return FindingRef(self.id, self.subject)

    @property
    def is_root(self) -> bool:
        """Counted as a fault of its own: it follows from no other finding."""
        return self.caused_by is None

    def to_dict(self) -> dict[str, Any]:
        # Built by hand, not with dataclasses.asdict: asdict deep-copies expected/actual/evidence
        # value by value, which was a fifth of `probe merge` (69,000 findings at 2,000 hosts).
        # The values are shared, not copied: some `actual` values are a host's facts themselves
        # (nccl, p2p), so neither a finding's dict nor fleet.json's facts may be changed in place
        # once judged (nothing does: overrides build new findings, writers encode as they read).
        # The root fields are written only where they are set: a finding with neither is one fault.
        out = {"id": self.id, "severity": self.severity.value, "kind": self.kind.value, "host": self.host,
               "subject": self.subject, "message": self.message, "expected": self.expected,
               "actual": self.actual, "evidence": list(self.evidence), "hint": self.hint}
        if self.caused_by is not None:
            out["caused_by"] = self.caused_by.to_dict()
        if self.consequences:
            out["consequences"] = [c.to_dict() for c in self.consequences]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        d = dict(d)
        d["severity"] = Severity(d["severity"])
        d["kind"] = Kind(d["kind"])
        d["caused_by"] = FindingRef.from_dict(d.get("caused_by"))
        d["consequences"] = tuple(r for r in map(FindingRef.from_dict, d.get("consequences") or ()) if r)
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
