"""A play's finding overrides (`findings:` in a playbook): severities changed or silenced, each with a reason."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.verdict.findings import Finding, Severity


@dataclass(frozen=True)
class Override:
    severity: str  # fail | warn | info | off (off = silenced)
    reason: str


@dataclass(frozen=True)
class Silenced:
    finding: Finding
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"finding": self.finding.to_dict(), "reason": self.reason}


@dataclass(frozen=True)
class OverrideResult:
    findings: list[Finding]  # what is reported, severities as overridden
    silenced: list[Silenced]  # kept out of the report, counted, with the reason


def _override_for(fid: str, overrides: Mapping[str, Override]) -> Override | None:
    """Exact id first; else the most specific glob (`sensor.*`), so a narrow rule beats a broad one."""
    if fid in overrides:
        return overrides[fid]
    matches = [pat for pat in overrides if any(c in pat for c in "*?[") and fnmatch.fnmatchcase(fid, pat)]
    if not matches:
        return None
    return overrides[max(matches, key=len)]


def apply_overrides(findings: Iterable[Finding], overrides: Mapping[str, Override]) -> OverrideResult:
    """Apply a play's finding overrides (pure: new Finding objects, inputs untouched)."""
    kept: list[Finding] = []
    silenced: list[Silenced] = []
    for f in findings:
        o = _override_for(f.id, overrides)
        if o is None:
            kept.append(f)
        elif o.severity == "off":
            silenced.append(Silenced(f, o.reason))
        elif o.severity == f.severity.value:
            kept.append(f)
        else:
            note = f"severity {o.severity} (was {f.severity.value}) by playbook: {o.reason}"
            kept.append(replace(f, severity=Severity(o.severity), evidence=[*f.evidence, note]))
    return OverrideResult(findings=kept, silenced=silenced)
