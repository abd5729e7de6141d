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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.engine.outcomes import Outcome, worst
from orchestrator.engine.results import HostInput
from orchestrator.facts import registry
from orchestrator.facts.normalize import normalize_host
from orchestrator.store.spool import SpooledRecords
from orchestrator.verdict import classes as fingerprint
from orchestrator.verdict import parallel as fleet_workers
from orchestrator.verdict.checks import FLEET_CHECK_SECTIONS, run_fleet_checks, run_host_checks, unjudgeable
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import Finding, Kind, Severity
from orchestrator.verdict.overrides import Override, apply_overrides

SCHEMA_VERSION = 1


def host_record(h: HostInput) -> dict[str, Any]:
    errors: list[str] = []
    if h.facts is not None:
        facts = h.facts
    else:
        data = h.data
        if h.load_data is not None:
            try:
                data = h.load_data()
            except (OSError, ValueError) as e:
                errors.append(f"stored probe data could not be read back ({e})")
        facts, more = normalize_host({p: d for p, d in data.items() if h.probes.get(p, {}).get("outcome") == "ok"})
        errors.extend(more)
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
            probe = registry.probe_of(section)
            if probe:
                out[probe] = "ok"
    return out


def _summary(outcomes: list[str], findings: list[Finding]) -> dict[str, Any]:
    counts = Counter(outcomes)
    sev = Counter(f.severity.value for f in findings)
    return {
        "hosts": len(outcomes),
        "outcomes": {o.value: counts.get(o.value, 0) for o in Outcome},
        "findings": {s.value: sev.get(s.value, 0) for s in Severity},
        "findings_by_kind": dict(Counter(f.kind.value for f in findings)),
    }


@dataclass
class HostVerdict:
    """One host judged on its own: what the fleet-wide steps need, without the host's facts."""

    name: str
    outcome: str
    findings: list[Finding]  # its host checks and malformed-data findings
    descriptor: dict[str, Any] | None  # topology fingerprint input
    fleet_view: HostView  # only the facts sections the fleet checks read


def judge_host(h: HostInput, expect: Expectations) -> tuple[dict[str, Any], HostVerdict]:
    """The host's fleet.json record and its verdict; fingerprint/class are set fleet-wide later.

    Whatever the host's data does to a normalizer, a check or the fingerprint, it costs this host
    only: the host is kept with no facts and a probe.data.malformed finding that says why."""
    try:
        return _judge_host(h, expect)
    except Exception as e:  # the checks and normalizers guard themselves; this is the last line
        return _unjudged(h, expect, e)


def _unjudged(h: HostInput, expect: Expectations, error: BaseException) -> tuple[dict[str, Any], HostVerdict]:
    probes = {p: s for p, s in h.probes.items() if isinstance(s, dict) and s.get("outcome") in _OUTCOMES}
    outcome = worst([Outcome(s["outcome"]) for s in probes.values()]) if probes else Outcome.FAILED
    reason = f"this host's results could not be judged ({type(error).__name__}: {str(error)[:200]})"
    rec = {"name": h.name, "address": h.address, "groups": h.groups, "outcome": outcome.value,
           "reason": reason if outcome == Outcome.FAILED else "", "probes": probes, "facts": {},
           "normalize_errors": [reason], "fingerprint": None, "class": None}
    finding = Finding("probe.data.malformed", Severity.WARN, Kind.UNKNOWN, h.name, "probe data", reason,
                      hint="the host sent data of an unexpected shape; check the probe version")
    return rec, HostVerdict(h.name, outcome.value, [finding], None,
                            HostView(name=h.name, facts={}, outcomes={}, expect=expect, vars=h.vars))


_OUTCOMES = frozenset(o.value for o in Outcome)


def _judge_host(h: HostInput, expect: Expectations) -> tuple[dict[str, Any], HostVerdict]:
    rec = host_record(h)
    facts = rec["facts"]
    outcomes = judged_outcomes(h.probes, facts)
    findings = run_host_checks(HostView(name=h.name, facts=facts, outcomes=outcomes, expect=expect, vars=h.vars))
    for err in rec["normalize_errors"]:
        findings.append(Finding("probe.data.malformed", Severity.WARN, Kind.UNKNOWN, h.name, "probe data",
                                err, hint="the host sent data of an unexpected shape; check the probe version"))
    slim = {k: facts[k] for k in FLEET_CHECK_SECTIONS if k in facts}
    try:
        descriptor = fingerprint.descriptor(facts)
    except Exception as e:  # a value of an odd type: this host has no topology class, the rest is judged
        descriptor = None
        findings.append(unjudgeable(h.name, "the topology fingerprint", e))
    return rec, HostVerdict(h.name, rec["outcome"], findings, descriptor,
                            HostView(name=h.name, facts=slim, outcomes=outcomes, expect=expect, vars=h.vars))


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
            # Without the freeze, the first allocation after re-enabling runs a collection over
            # everything the build made (~0.35 CPU s per 1,000 hosts): the permanent generation is
            # never scanned, and these objects need no cycle detection.
            gc.freeze()
            gc.enable()


def build_fleet(run: dict[str, Any], inputs: list[HostInput],
                expect_for: Callable[[HostInput], Expectations],
                overrides_for: Callable[[str], Mapping[str, Override]] | None = None,
                spool: Path | None = None, workers: int | None = None) -> dict[str, Any]:
    """`overrides_for(host)` gives the playbook's severity changes and silences for that host.

    Big fleets are judged host by host in worker processes (orchestrator/verdict/parallel.py); their
    records then stay on disk under `spool` (default: the temp directory) and `hosts` is a
    read-only sequence that parses a record when it is read.  `workers` overrides the choice."""
    with _no_cyclic_gc():
        n = fleet_workers.worker_count(len(inputs), workers)
        judged = (fleet_workers.judge_hosts(inputs, lambda h: judge_host(h, expect_for(h)), n, spool)
                  if n > 1 else None)
        if judged is None:
            pairs = [judge_host(h, expect_for(h)) for h in inputs]
            records: list[dict[str, Any]] | SpooledRecords = [rec for rec, _ in pairs]
            verdicts = [v for _, v in pairs]
        else:
            records, verdicts = judged
        return _assemble(run, records, verdicts, overrides_for)


def _assemble(run: dict[str, Any], records: list[dict[str, Any]] | SpooledRecords,
              verdicts: list[HostVerdict],
              overrides_for: Callable[[str], Mapping[str, Override]] | None) -> dict[str, Any]:
    findings = [f for v in verdicts for f in v.findings]
    findings.extend(run_fleet_checks([v.fleet_view for v in verdicts]))
    classes, class_findings, of_host = fingerprint.classify_descriptors([(v.name, v.descriptor) for v in verdicts])
    findings.extend(class_findings)
    if isinstance(records, list):
        for rec in records:
            rec["fingerprint"], rec["class"] = of_host.get(rec["name"], (None, None))
    else:
        records.set_classes(of_host)
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
        "summary": _summary([v.outcome for v in verdicts], findings),
        "hosts": records,
        "classes": classes,
        "findings": [f.to_dict() for f in findings],
        "silenced": silenced,
    }
