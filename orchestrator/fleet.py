"""Assemble fleet.json: host records with normalized facts, topology classes and findings.

Pure: takes what the runner collected (or what a stored run holds) and returns the document.
`probe run` and `probe rejudge` both come through here, so a stored run is judged exactly like a
live one.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from orchestrator import fingerprint
from orchestrator.checks import run_checks
from orchestrator.checks.base import HostView
from orchestrator.expectations import Expectations
from orchestrator.findings import Finding, Kind, Severity
from orchestrator.normalize import normalize_host
from orchestrator.outcomes import Outcome, worst
from orchestrator.playbook import Override, apply_overrides
from orchestrator.textparse.importer import SECTION_PROBE

SCHEMA_VERSION = 1


@dataclass
class HostInput:
    """One host as collected: probe summaries plus the `data` of every envelope that parsed."""

    name: str
    address: str
    groups: list[str]
    probes: dict[str, dict[str, Any]]  # probe -> ProbeResult.summary()
    data: dict[str, dict[str, Any]]  # probe -> envelope data (status ok/error with data)
    warnings: dict[str, list[str]] = field(default_factory=dict)
    vars: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] | None = None  # already normalized (imported text evidence): used as is


def host_record(h: HostInput) -> dict[str, Any]:
    errors: list[str] = []
    if h.facts is not None:
        facts = h.facts
    else:
        facts, errors = normalize_host({p: d for p, d in h.data.items()
                                        if h.probes.get(p, {}).get("outcome") == "ok"})
    outcome = worst([Outcome(p["outcome"]) for p in h.probes.values()])
    reasons = [p["reason"] for p in h.probes.values() if p["outcome"] == outcome.value and p.get("reason")]
    return {
        "name": h.name,
        "address": h.address,
        "groups": h.groups,
        "outcome": outcome.value,
        "reason": reasons[0] if reasons else "",
        "probes": h.probes,
        "facts": facts,
        "normalize_errors": errors,
        "fingerprint": None,
        "class": None,
    }


def judged_outcomes(probes: dict[str, dict[str, Any]], facts: dict[str, Any]) -> dict[str, str]:
    """Probe outcomes as the checks see them: a section read from text (raw mode) counts as its
    probe having run, so that probe's checks judge it."""
    out = {p: s["outcome"] for p, s in probes.items()}
    if out.get("raw") == "ok":
        for section in facts:
            if section in SECTION_PROBE:
                out[SECTION_PROBE[section]] = "ok"
    return out


def _summary(hosts: list[dict[str, Any]], findings: list[Finding]) -> dict[str, Any]:
    outcomes = Counter(h["outcome"] for h in hosts)
    sev = Counter(f.severity.value for f in findings)
    return {
        "hosts": len(hosts),
        "outcomes": {o.value: outcomes.get(o.value, 0) for o in Outcome},
        "findings": {s.value: sev.get(s.value, 0) for s in Severity},
        "findings_by_kind": dict(Counter(f.kind.value for f in findings)),
    }


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Building a fleet allocates millions of small dicts and lists that all stay alive; each of
    them counts towards the cyclic collector's thresholds, so it ran full collections over the
    whole growing fleet again and again (more than half the CPU time at 2,000 hosts) and found
    nothing: facts are trees, freed by reference counting.  Paused here, restored after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def build_fleet(run: dict[str, Any], inputs: list[HostInput],
                expect_for: Callable[[HostInput], Expectations],
                overrides_for: Callable[[str], Mapping[str, Override]] | None = None) -> dict[str, Any]:
    """`overrides_for(host)` gives the playbook's severity changes and silences for that host."""
    with _no_cyclic_gc():
        return _build_fleet(run, inputs, expect_for, overrides_for)


def _build_fleet(run: dict[str, Any], inputs: list[HostInput],
                 expect_for: Callable[[HostInput], Expectations],
                 overrides_for: Callable[[str], Mapping[str, Override]] | None) -> dict[str, Any]:
    records = [host_record(h) for h in inputs]
    views = []
    for h, rec in zip(inputs, records):
        views.append(HostView(name=h.name, facts=rec["facts"], outcomes=judged_outcomes(h.probes, rec["facts"]),
                              expect=expect_for(h), vars=h.vars))
    findings = run_checks(views)
    for rec in records:
        for err in rec["normalize_errors"]:
            findings.append(Finding("probe.data.malformed", Severity.WARN, Kind.UNKNOWN, rec["name"], "probe data",
                                    err, hint="the host sent data of an unexpected shape; check the probe version"))
    classes, class_findings = fingerprint.classify(records)
    findings.extend(class_findings)
    silenced: list[dict[str, Any]] = []
    if overrides_for is not None:
        by_host: dict[str, list[Finding]] = {}
        for f in findings:
            by_host.setdefault(f.host, []).append(f)
        findings = []
        for host, items in by_host.items():
            result = apply_overrides(items, overrides_for(host))
            findings.extend(result.findings)
            silenced.extend(s.to_dict() for s in result.silenced)
    findings.sort(key=lambda f: (-f.severity.rank, f.id, f.host, f.subject))
    return {
        "schema_version": SCHEMA_VERSION,
        "run": run,
        "summary": _summary(records, findings),
        "hosts": records,
        "classes": classes,
        "findings": [f.to_dict() for f in findings],
        "silenced": silenced,
    }
