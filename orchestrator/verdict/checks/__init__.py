"""The registry of checks.  Each area module exports CHECKS (per host) and maybe FLEET_CHECKS."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, cast

from orchestrator.facts.model import Facts
from orchestrator.verdict import baseline, classes, rules
from orchestrator.verdict.causes import Cause
from orchestrator.verdict.checks import (
    fabric,
    gpu,
    gpu_driver,
    gpu_health,
    health,
    host,
    nccl,
    nic,
    nvlink_domain,
    p2p,
    pcie,
    scheduler,
    software,
)
from orchestrator.verdict.checks.base import FleetCheck, FleetReads, HostCheck, HostView
from orchestrator.verdict.findings import Finding, Kind, Severity
from orchestrator.verdict.rule import Needs, Unjudged

_AREAS = [host, gpu, pcie, p2p, nccl, health, nic, gpu_health, software, nvlink_domain, gpu_driver, fabric]

HOST_CHECKS: list[HostCheck] = [c for area in _AREAS for c in getattr(area, "CHECKS", [])]
FLEET_CHECKS: list[FleetCheck] = [c for area in _AREAS for c in getattr(area, "FLEET_CHECKS", [])]


def _merged(a: FleetReads | None, b: FleetReads | None) -> FleetReads | None:
    """Two areas' reads of one value together (None: the whole value)."""
    if a is None or b is None:
        return None
    return {k: _merged(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}}


def _all_reads() -> dict[str, FleetReads | None]:
    reads: dict[str, FleetReads | None] = {}
    for area in _AREAS:
        for section, spec in getattr(area, "FLEET_READS", {}).items():
            reads[section] = _merged(reads[section], spec) if section in reads else spec
    return reads


# What the fleet checks read of each host's facts, gathered from each area's FLEET_READS.  A fleet
# judged in worker processes hands the parent only this (a host's verdict stays small at 100,000
# hosts), so a fleet check reading more must say so in its area's FLEET_READS;
# tests/verdict/test_fleet_parallel.py gives every fleet check work and compares.
FLEET_READS: dict[str, FleetReads | None] = _all_reads()


def fleet_facts(facts: Mapping[str, Any]) -> Facts:
    """What a host hands the fleet-wide steps: FLEET_READS of its facts, plus what an area derives
    from the sections it does not hand on (its FLEET_FACTS: facts -> extra keys).

    Walks sections by name, so it reads facts as a plain mapping.  The result is typed Facts for the
    fleet views, though it is a cut of them, and areas add keys of their own (nccl.OWN_FLOOR); the
    fleet checks read those with .get only."""
    slim = {k: _cut(facts[k], spec) for k, spec in FLEET_READS.items() if k in facts}
    for area in _AREAS:
        derive = getattr(area, "FLEET_FACTS", None)
        if derive is not None:
            slim.update(derive(facts))
    return cast(Facts, slim)


def _cut(value: Any, spec: FleetReads | None) -> Any:
    """`value` cut to `spec` (each object of a list cut alike).  A value of another shape than the
    spec expects is handed on whole, so the fleet checks meet (and fail on) what they would have met."""
    if spec is None:
        return value
    if isinstance(value, dict):
        return {k: _cut(v, spec[k]) for k, v in value.items() if k in spec}
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return [_cut(item, spec) for item in value]
    return value


def unjudgeable(host: str, what: str, error: BaseException) -> Finding:
    """The finding for host data a check or normalizer could not use: that host's, nobody else's."""
    return Finding(rules.probe.DATA_MALFORMED.id, Severity.WARN, Kind.UNKNOWN, host, "probe data",
                   f"{what} could not judge this host's data ({type(error).__name__}: {str(error)[:200]})",
                   hint="the host sent data of an unexpected shape; check the probe version")


def run_host_checks(view: HostView) -> list[Finding]:
    findings: list[Finding] = []
    for check in HOST_CHECKS:
        try:
            findings.extend(check(view))
        except Exception as e:  # a value of an unexpected type costs this check on this host
            findings.append(unjudgeable(view.name, f"check {getattr(check, '__name__', check)}", e))
    return findings


def run_fleet_checks(views: list[HostView]) -> list[Finding]:
    findings: list[Finding] = []
    for fleet_check in FLEET_CHECKS:
        try:
            findings.extend(fleet_check(views))
        except Exception:  # find the hosts whose data breaks it, judge the others
            name = getattr(fleet_check, "__name__", str(fleet_check))
            usable = []
            for v in views:
                try:
                    list(fleet_check([v]))
                except Exception as e:
                    findings.append(unjudgeable(v.name, f"fleet check {name}", e))
                else:
                    usable.append(v)
            try:
                findings.extend(fleet_check(usable))
            except Exception as e:  # only a pair of hosts together breaks it
                findings.extend(unjudgeable(v.name, f"fleet check {name}", e) for v in usable)
    return findings


def run_checks(views: Iterable[HostView]) -> list[Finding]:
    views = list(views)
    findings = [f for v in views for f in run_host_checks(v)]
    return findings + run_fleet_checks(views)


# Every finding id fleetprobe can raise: each area declares its own beside its checks; raised
# outside the areas are the topology class comparison (verdict/classes.py), the judge's own
# rejection of unusable probe data (verdict/judge.py), the fleet baselines (verdict/baseline.py) and
# the repeat offenders of the run history (verdict/offenders.py) and the scheduler reconciliation,
# which reads the host checks' verdict (checks/scheduler.py, run by the judge after them).
FINDING_IDS: tuple[str, ...] = (
    *(fid for area in _AREAS for fid in area.FINDING_IDS),
    rules.topology.CLASS_OUTLIER.id, rules.probe.DATA_MALFORMED.id, *baseline.FINDING_IDS, rules.host.REPEAT_OFFENDER.id,
    *scheduler.FINDING_IDS,
)

# Which ids follow from which (verdict/causes.py): each rule declares its roots (its module's
# `causes()`); the topology comparison declares those of its outliers, which read its fingerprint.
CAUSES: tuple[Cause, ...] = (*rules.causes(), *classes.CAUSES)


def _held_back() -> dict[str, Unjudged]:
    """rule id -> the function of its check's own steps that says what the facts hold back."""
    held: dict[str, Unjudged] = dict(baseline.HELD_BACK)
    for area in _AREAS:
        held.update(getattr(area, "HELD_BACK", {}))
    return held


HELD_BACK = _held_back()
# What each rule's check must have measured (its declaration's `needs`, with the check's own
# `unjudged` where the rule is held back by its facts); verdict/coverage.py turns it into pass /
# raised / not judged per host.  The topology comparison also needs peers: coverage asks
# verdict/classes.py which hosts had them.
NEEDS: dict[str, Needs] = {
    fid: replace(rules.BY_ID[fid].needs, unjudged=HELD_BACK[fid]) if fid in HELD_BACK else rules.BY_ID[fid].needs
    for fid in FINDING_IDS}

# The ids the fleet-wide steps raise (their rules say `fleet`).  Every other finding is a host's
# own, decided from that host alone, so `probe merge` keeps those as judged and judges only these
# again across all the runs.
FLEET_FINDING_IDS: frozenset[str] = frozenset(r.id for r in rules.ALL if r.fleet)
# Ids a host check and a fleet check both raise: the fleet check's findings by (id, subject).
FLEET_FINDING_SUBJECTS: frozenset[tuple[str, str]] = frozenset(
    (r.id, r.fleet_subject) for r in rules.ALL if r.fleet_subject)


def is_fleet_finding(finding: Mapping[str, Any]) -> bool:
    """Raised by a fleet-wide step (a stored finding, as fleet.json holds it): `probe merge` drops
    these and judges them again over all the runs; every other finding is its host's own."""
    fid = finding.get("id")
    return fid in FLEET_FINDING_IDS or (fid, finding.get("subject")) in FLEET_FINDING_SUBJECTS
