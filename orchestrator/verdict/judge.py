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
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, cast

from orchestrator.engine.outcomes import Outcome, finished, worst
from orchestrator.engine.results import HostInput
from orchestrator.facts import read as F
from orchestrator.facts.model import Facts, PreviousFacts
from orchestrator.facts.normalize import normalize_host
from orchestrator.files.records import RecordList
from orchestrator.inventory.model import CONNECTION_VARS, SCHEDULER_VARS
from orchestrator.inventory.secrets import is_secret
from orchestrator.store.runmeta import RunMeta
from orchestrator.store.spool import SpooledRecords
from orchestrator.verdict import baseline, causes, coverage, handoff, offenders, rules
from orchestrator.verdict import classes as fingerprint
from orchestrator.verdict import health as host_health
from orchestrator.verdict import parallel as fleet_workers
from orchestrator.verdict.checks import CAUSES, fleet_facts, run_fleet_checks, run_host_checks, unjudgeable
from orchestrator.verdict.checks import nccl as nccl_checks
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.checks.scheduler import reconcile
from orchestrator.verdict.expectations import ExpectationError, Expectations
from orchestrator.verdict.fabric_faults import fabric_counts, fabric_faults, host_findings
from orchestrator.verdict.findings import Finding, Kind, Severity
from orchestrator.verdict.overrides import Override, Silenced, apply_overrides
from orchestrator.verdict.references import References
from orchestrator.verdict.result import FleetResult, fleet_result
from orchestrator.verdict.streaming import Prejudged

# Probes whose stored answer is judged on what it finished though the probe did not end ok: a
# host's part of the fabric qualification (api/fabric.py) takes the outcome of its worst step (a
# wave timed out, answers the plan refused, a communicator that never ran) while its finished
# steps stay evidence; its health says incomplete.
_PARTIAL_PROBES = frozenset({"fabric"})
_PARTIAL_OUTCOMES = frozenset({Outcome.TIMEOUT.value, Outcome.FAILED.value, Outcome.INVALID_OUTPUT.value,
                               Outcome.INTERRUPTED.value})


def _judged_on(probe: str, run: Mapping[str, Any]) -> bool:
    outcome = run.get("outcome")
    return outcome == "ok" or (probe in _PARTIAL_PROBES and outcome in _PARTIAL_OUTCOMES)


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
            else:
                # an answered probe's raw file gone, or not a file: judged without it, and said
                errors.extend(f"stored probe data could not be read back ({p}.json is missing or not a regular file)"
                              for p, run in h.probes.items() if run.get("outcome") == "ok" and p not in data)
        facts, more = normalize_host({p: d for p, d in data.items() if _judged_on(p, h.probes.get(p, {}))})
        errors.extend(more)
    outcome = worst([Outcome(p["outcome"]) for p in h.probes.values()])
    reasons = [p["reason"] for p in h.probes.values() if p["outcome"] == outcome.value and p.get("reason")]
    return {
        "name": h.name,
        "address": h.address,
        "groups": h.groups,
        "connection": {k: h.vars[k] for k in (*CONNECTION_VARS, *SCHEDULER_VARS) if k in h.vars and not is_secret(k)},
        "outcome": outcome.value,
        "reason": reasons[0] if reasons else "",
        "probes": h.probes,
        "facts": facts,
        "normalize_errors": errors,
        "fingerprint": None,
        "class": None,
    }


def _summary(outcomes: list[str], findings: list[Finding], health: Mapping[str, host_health.HostHealth]
             ) -> dict[str, Any]:
    counts = Counter(outcomes)
    sev = Counter(f.severity.value for f in findings)
    states = Counter(h.state.value for h in health.values())
    faults = Counter(s.value for _, s in host_health.fault_severities(host_findings(findings)))
    return {
        "hosts": len(outcomes),
        "health": {h: states.get(h, 0) for h in host_health.HEALTH_ORDER},
        "outcomes": {o.value: counts.get(o.value, 0) for o in Outcome},
        "faults": {s.value: faults.get(s.value, 0) for s in Severity},
        "fabric": fabric_counts(fabric_faults(findings)),
        "findings": {s.value: sev.get(s.value, 0) for s in Severity},
        "findings_by_kind": dict(Counter(f.kind.value for f in findings)),
    }


# The probes whose facts make a host's topology fingerprint (verdict/classes.py:descriptor): a
# host where one of them did not finish, or that the run did not ask for (`-p fabric`, `-p quick`,
# `--probe`), has no class, rather than the shape of what is missing ("cpu-only" from a run that
# never asked NVML).
_SHAPE_PROBES = ("host", "pcie", "nvml", "nvlink")
# how a probe that answered ends: only these measured the host's shape (a skip measured nothing)
_SHAPED = ("ok", "unsupported")


def shape_descriptor(probes: Mapping[str, Any], facts: Facts) -> dict[str, Any] | None:
    """The host's topology descriptor, where this run measured its shape: every shape probe ran to
    an answer.  Facts without per-probe records (a fixture) and text imports (`raw`, or every probe
    record of version "text", cli/importer.py: the text is what was measured) are described as
    they are."""
    imported = "raw" in probes or all(isinstance(s, dict) and s.get("probe_version") == "text" for s in probes.values())
    if probes and not imported:
        for p in _SHAPE_PROBES:
            s = probes.get(p)
            if not isinstance(s, dict) or str(s.get("outcome") or "") not in _SHAPED:
                return None
    return fingerprint.descriptor(facts)


def unfinished_probes(probes: Mapping[str, Any]) -> dict[str, str]:
    """probe -> what stopped it, for each probe of the host that did not finish (engine/outcomes.py)."""
    out = {}
    for p, s in probes.items():
        if not isinstance(s, dict):
            continue
        outcome, reason = str(s.get("outcome") or ""), str(s.get("reason") or "")
        if not finished(outcome, reason):
            out[str(p)] = outcome + (f" ({reason})" if reason else "")
    return out


@dataclass
class HostVerdict:
    """One host judged on its own: what the fleet-wide steps need, without the host's facts."""

    name: str
    outcome: str
    findings: list[Finding]  # its host checks and malformed-data findings
    descriptor: dict[str, Any] | None  # topology fingerprint input
    fleet_view: HostView  # only the facts sections the fleet checks read
    reason: str = ""  # why the outcome (an unreachable host's: what the transport said)
    unfinished: dict[str, str] = field(default_factory=dict)  # probes that did not finish -> why
    measures: baseline.Measures = field(default_factory=baseline.Measures)  # what the fleet baselines compare

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to the controller, which holds every host's verdict for the fleet-wide steps: the
        # facts sections, the descriptor and the small dicts most hosts have alike go frozen, so
        # a Reader holds each distinct one once.
        v, f = self.fleet_view, handoff.freeze
        view = replace(v, facts=cast(Facts, {k: f(x) for k, x in v.facts.items()}), outcomes=f(v.outcomes))
        return _verdict_from, (self.name, self.outcome, self.findings, f(self.descriptor), view, self.reason,
                               f(self.unfinished), self.measures)


def _verdict_from(name: str, outcome: str, findings: list[Finding], descriptor: Any, view: HostView, reason: str,
                  unfinished: dict[str, str], measures: baseline.Measures) -> HostVerdict:
    # through a Reader the frozen values are already plain (and shared); through a plain pickle not
    t = handoff.thaw
    view.facts = cast(Facts, {k: t(x) for k, x in view.facts.items()})
    view.outcomes = t(view.outcomes)
    return HostVerdict(name, outcome, findings, t(descriptor), view, reason, t(unfinished), measures)


def judge_host(h: HostInput, expect: Expectations, previous: PreviousFacts | None = None,
               refs: References | None = None) -> tuple[dict[str, Any], HostVerdict]:
    """The host's fleet.json record and its verdict; fingerprint/class are set fleet-wide later.
    `previous`: the host's facts in the previous run (events and counters are judged against it);
    `refs`: what the run judges against besides expectations (the security floor).

    Whatever the host's data does to a normalizer, a check or the fingerprint, it costs this host
    only: the host is kept with no facts and a probe.data.malformed finding that says why."""
    try:
        return _judge_host(h, expect, previous, refs or References())
    except Exception as e:  # the checks and normalizers guard themselves; this is the last line
        return _unjudged(h, expect, e)


def _unjudged(h: HostInput, expect: Expectations, error: BaseException) -> tuple[dict[str, Any], HostVerdict]:
    probes = {p: s for p, s in h.probes.items() if isinstance(s, dict) and s.get("outcome") in _OUTCOMES}
    outcome = worst([Outcome(s["outcome"]) for s in probes.values()]) if probes else Outcome.FAILED
    reason = f"this host's results could not be judged ({type(error).__name__}: {str(error)[:200]})"
    rec = {"name": h.name, "address": h.address, "groups": h.groups, "connection": {}, "outcome": outcome.value,
           "reason": reason if outcome == Outcome.FAILED else "", "probes": probes, "facts": {},
           "normalize_errors": [reason, *h.notes], "fingerprint": None, "class": None}
    finding = Finding(rules.probe.DATA_MALFORMED.id, Severity.WARN, Kind.UNKNOWN, h.name, "probe data", reason,
                      hint="the host sent data of an unexpected shape; check the probe version")
    return rec, HostVerdict(h.name, outcome.value, [finding], None,
                            HostView(name=h.name, facts={}, outcomes={}, expect=expect, vars=h.vars),
                            reason, unfinished_probes(probes))


_OUTCOMES = frozenset(o.value for o in Outcome)


def _judge_host(h: HostInput, expect: Expectations, previous: PreviousFacts | None,
                refs: References) -> tuple[dict[str, Any], HostVerdict]:
    rec = host_record(h)
    facts = rec["facts"]
    outcomes = coverage.judged_outcomes(h.probes, facts)
    reasons = {p: str(s["reason"]) for p, s in h.probes.items() if s.get("reason")}
    view = HostView(name=h.name, facts=facts, outcomes=outcomes, expect=expect, vars=h.vars, previous=previous,
                    reasons=reasons, security_floor=refs.security_floor)
    findings = run_host_checks(view)
    if refs.scheduler is not None:  # after the host's own checks: it compares the scheduler with their verdict
        try:
            findings += reconcile(view, refs.scheduler.advert_of(h.name, h.vars), findings)
        except Exception as e:  # a value of an unexpected type costs this comparison on this host
            findings.append(unjudgeable(h.name, "check scheduler.reconcile", e))
    for err in rec["normalize_errors"]:
        findings.append(Finding(rules.probe.DATA_MALFORMED.id, Severity.WARN, Kind.UNKNOWN, h.name, "probe data",
                                err, hint="the host sent data of an unexpected shape; check the probe version"))
    # What was compared with, and which ids could not be judged and why (verdict/coverage.py):
    # JUnit, drift and the terminal read these instead of calling a silent check "passed".
    rec["expect"] = {f.name: getattr(expect, f.name) for f in fields(expect) if getattr(expect, f.name) is not None}
    rec["normalize_errors"].extend(h.notes)  # its inputs, not its data: no probe.data.malformed finding
    measured = _measured(facts)
    rec["not_judged"] = coverage.not_judged(
        facts, outcomes, h.probes, expect, rec["outcome"], rec["reason"], unusable_expect=h.unusable_expect,
        answered=None if measured is None else {baseline.unjudged: baseline.unjudged(facts, measured)})
    for late in ("fingerprint", "class"):  # set fleet-wide later: they stay the record's last keys (store/spool.py)
        rec[late] = rec.pop(late)
    slim = fleet_facts(facts)
    unfinished = unfinished_probes(h.probes)
    try:
        descriptor = shape_descriptor(h.probes, facts)
    except Exception as e:  # a value of an odd type: this host has no topology class, the rest is judged
        descriptor = None
        findings.append(unjudgeable(h.name, "the topology fingerprint", e))
    return rec, HostVerdict(h.name, rec["outcome"], findings, descriptor,
                            HostView(name=h.name, facts=slim, outcomes=outcomes, expect=expect, vars=h.vars),
                            rec["reason"], unfinished, _measures(h.name, facts, outcomes, findings, measured))


def _measured(facts: Facts) -> baseline.Measures | None:
    """Every figure of the host's facts, worked out once for both coverage and the fleet
    baselines (each read them anew: ~4 % of judging); None where a value of an odd type stops it,
    so that each asks again and fails as it did."""
    try:
        return baseline.measures(facts)
    except Exception:
        return None


def _measures(name: str, facts: Facts, outcomes: Mapping[str, str], findings: list[Finding],
              measured: baseline.Measures | None) -> baseline.Measures:
    """The figures the fleet baselines compare, of the probes that ran ok; a value of an odd type
    costs this host its comparisons only.  `measured`: those of all its facts (None: unknown)."""
    sections: Mapping[str, Any] = facts  # picked by section name
    if measured is not None and all(outcomes.get(k) in (None, "ok") for k in ("p2p", "nccl") if k in sections):
        return measured  # no section left out: the same facts, so the same figures
    ran = cast(Facts, {k: v for k, v in sections.items() if k not in ("p2p", "nccl") or outcomes.get(k) in (None, "ok")})
    try:
        return baseline.measures(ran)
    except Exception as e:
        findings.append(unjudgeable(name, "the fleet baselines", e))
        return baseline.Measures()


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


def host_judge(expect_for: Callable[[HostInput], Expectations],
               previous_for: Callable[[str], PreviousFacts | None] | None = None,
               refs: References | None = None) -> Callable[[HostInput], tuple[dict[str, Any], HostVerdict]]:
    """How one host is judged in this fleet: its expectations, its previous facts, the run's references."""
    prev = previous_for or (lambda name: None)
    return lambda h: judge_host(h, expect_for(h), prev(h.name), refs)


def build_fleet(run: RunMeta, inputs: list[HostInput],
                expect_for: Callable[[HostInput], Expectations],
                overrides_for: Callable[[str], Mapping[str, Override]] | None = None,
                spool: Path | None = None, workers: int | None = None,
                previous_for: Callable[[str], PreviousFacts | None] | None = None,
                pool: Prejudged | None = None, refs: References | None = None) -> FleetResult:
    """`overrides_for(host)` gives the playbook's severity changes and silences for that host.

    Big fleets are judged host by host in worker processes (orchestrator/verdict/parallel.py); their
    records then stay on disk under `spool` (default: the temp directory) and `hosts` is a
    read-only sequence that parses a record when it is read.  `workers` overrides the choice.
    `previous_for(host)`: the host's facts in the previous run, None when it has none.
    `pool`: hosts judged before (verdict/streaming.py: by workers while the run went on, started
    with host_judge(expect_for, previous_for, refs)); what it cannot vouch for is judged here.
    `refs`: what the run judges against besides expectations (verdict/references.py)."""
    judge = host_judge(expect_for, previous_for, refs)
    with _no_cyclic_gc():
        judged = pool.finish(inputs) if pool is not None else None
        if judged is None:
            n = fleet_workers.worker_count(len(inputs), workers)
            big = n > 1 or len(inputs) >= fleet_workers.SPOOL_MIN_HOSTS
            judged = fleet_workers.judge_hosts(inputs, judge, n, spool) if big else None
        if judged is None:
            pairs = [judge(h) for h in inputs]
            records: RecordList | SpooledRecords = RecordList(rec for rec, _ in pairs)
            verdicts = [v for _, v in pairs]
        else:
            records, verdicts = judged
        return _assemble(run, records, verdicts, overrides_for, refs=refs)


def stored_verdict(rec: dict[str, Any], findings: list[Finding]) -> HostVerdict:
    """A host judged before (a stored run's fleet.json record and its host findings, overrides
    already applied), as the fleet-wide steps take it: nothing of the host is judged again."""
    facts = F.host_facts(rec)
    probes = rec.get("probes") or {}
    outcomes = coverage.judged_outcomes(probes, facts)
    slim = fleet_facts(facts)
    unfinished = unfinished_probes(probes)
    descriptor = shape_descriptor(probes, facts)
    try:
        measured = baseline.measures(facts)
    except Exception:  # judged before: its malformed-data finding is among its findings already
        measured = baseline.Measures()
    outcome, reason = host_health.stored_answer(rec)
    return HostVerdict(rec["name"], outcome, findings, descriptor,
                       HostView(name=rec["name"], facts=slim, outcomes=outcomes, expect=_stored_expect(rec)),
                       reason, unfinished, measured)


def _stored_expect(rec: dict[str, Any]) -> Expectations:
    """What the host was judged against (its record's `expect`): the fleet checks leave alone
    what an expectation judged on the host (a port expected up is the host check's finding)."""
    try:
        return Expectations.from_mapping(rec.get("expect") or {}, where=f"{rec.get('name')}: stored expect")
    except ExpectationError:  # a hand-edited record: judged as a host without expectations
        return Expectations()


def _intent(verdicts: list[HostVerdict]) -> fingerprint.Intent:
    return {v.name: fingerprint.intended(v.fleet_view.expect.mig) for v in verdicts}


def fleet_step_findings(verdicts: list[HostVerdict], overrides_for: Callable[[str], Mapping[str, Override]],
                        refs: References | None = None) -> tuple[list[Finding], list[Silenced]]:
    """What the fleet-wide steps raise over these hosts alone, as fleet.json stores it (the
    overrides applied): (findings, silenced).  A stored run's findings are its hosts' own and
    these; `probe merge` tells them apart by judging the run's fleet-wide steps again, since one
    id can be raised by both (nic.port.down: a port expected up, or down where its peers' are up)."""
    made = run_fleet_checks([v.fleet_view for v in verdicts])
    _classes, class_findings, of_host = fingerprint.classify_descriptors([(v.name, v.descriptor) for v in verdicts],
                                                                         _intent(verdicts))
    made.extend(class_findings)
    made.extend(_baselines(verdicts, of_host, refs or References())[0])
    return _overridden(made, overrides_for)


def assemble_judged(run: RunMeta, records: RecordList | SpooledRecords, verdicts: list[HostVerdict],
                    silenced: list[Silenced],
                    overrides_for: Callable[[str], Mapping[str, Override]]) -> FleetResult:
    """fleet.json of hosts judged before (`stored_verdict`; `silenced`: their host findings a
    playbook silenced): only the fleet-wide steps run, and only their findings get the overrides."""
    return _assemble(run, records, verdicts, overrides_for, judged_silenced=silenced)


def _offenders(run: RunMeta, verdicts: list[HostVerdict], findings: list[Finding], silenced: list[Silenced],
               overrides_for: Callable[[str], Mapping[str, Override]] | None, refs: References) -> dict[str, str]:
    """Adds the repeat offenders of the run history (verdict/offenders.py) to `findings` (their
    overrides applied); returns host -> why it could not be judged."""
    judged = [v.name for v in verdicts if v.outcome != Outcome.UNREACHABLE.value and not v.unfinished]
    if refs.history is None:
        return dict.fromkeys(judged, "no run history was read for this run (probe merge, import)")
    current = offenders.run_of(run.id or "this run", judged, findings)
    made, not_judged = offenders.judge(refs.history, current)
    kept, quiet = _overridden(made, overrides_for)
    findings.extend(kept)
    silenced.extend(quiet)
    return not_judged


def _baselines(verdicts: list[HostVerdict], of_host: Mapping[str, tuple[str, str]], refs: References
               ) -> tuple[list[Finding], dict[str, dict[str, str]]]:
    """Every host's figures against its hardware peers' (verdict/baseline.py), with who could not be compared."""
    judged = []
    for v in verdicts:
        fp, cls = of_host.get(v.name) or (None, None)
        judged.append(baseline.Judged(v.name, fp, cls, v.measures, fingerprint.hardware_key(v.descriptor)))
    return baseline.judge(judged, refs.thresholds_for, refs.baseline)


def _overridden(findings: list[Finding], overrides_for: Callable[[str], Mapping[str, Override]] | None
                ) -> tuple[list[Finding], list[Silenced]]:
    if overrides_for is None:
        return findings, []
    silenced: list[Silenced] = []
    by_host: dict[str, list[Finding]] = {}
    for f in findings:
        by_host.setdefault(f.host, []).append(f)
    kept: list[Finding] = []
    for host, items in by_host.items():
        result = apply_overrides(items, overrides_for(host))
        kept.extend(result.findings)
        silenced.extend(result.silenced)
    return kept, silenced


_CAUSES = causes.by_consequence(CAUSES)


def _late_keys(of_host: Mapping[str, tuple[str, str]], health: Mapping[str, host_health.HostHealth]
               ) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each host's fleet-wide keys (fingerprint, class, health), in the order they end its record."""
    for name, h in health.items():
        fp, cls = of_host.get(name) or (None, None)
        yield name, {"fingerprint": fp, "class": cls, "health": h.to_dict()}
    for name, (fp, cls) in of_host.items():
        if name not in health:
            yield name, {"fingerprint": fp, "class": cls}


def _health(verdicts: list[HostVerdict], findings: list[Finding]) -> dict[str, host_health.HostHealth]:
    """host -> its health, decided once all its findings (its own and the fleet's) are grouped."""
    by_host: dict[str, list[Finding]] = {}
    for f in findings:
        by_host.setdefault(f.host, []).append(f)
    return {v.name: host_health.decide(v.outcome, v.reason, v.unfinished, by_host.get(v.name, ()))
            for v in verdicts}


def _assemble(run: RunMeta, records: RecordList | SpooledRecords,
              verdicts: list[HostVerdict],
              overrides_for: Callable[[str], Mapping[str, Override]] | None,
              judged_silenced: list[Silenced] | None = None, refs: References | None = None) -> FleetResult:
    host_findings = [f for v in verdicts for f in v.findings]
    fleet_views = [v.fleet_view for v in verdicts]
    fleet_findings = run_fleet_checks(fleet_views)
    described = [(v.name, v.descriptor) for v in verdicts]
    intent = _intent(verdicts)
    classes, class_findings, of_host = fingerprint.classify_descriptors(described, intent)
    fleet_findings.extend(class_findings)
    base_findings, base_not_judged = _baselines(verdicts, of_host, refs or References())
    fleet_findings.extend(base_findings)
    if judged_silenced is None:
        findings, silenced = _overridden(host_findings + fleet_findings, overrides_for)
    else:  # the host findings had their overrides when they were judged
        new, silenced = _overridden(fleet_findings, overrides_for)
        findings, silenced = host_findings + new, judged_silenced + silenced
    refs = refs or References()
    offender_not_judged = _offenders(run, verdicts, findings, silenced, overrides_for, refs)
    findings.sort(key=lambda f: (-f.severity.rank, f.id, f.host, f.subject))
    findings = causes.group(findings, _CAUSES)
    health = _health(verdicts, findings)
    if isinstance(records, list):
        late = dict(_late_keys(of_host, health))
        for rec in records:
            rec.update(late.get(rec["name"]) or {"fingerprint": None, "class": None, "health": None})
    else:  # each host's keys made as its text is: as dicts all at once they held ~0.8 KB a host to the end
        records.set_late(_late_keys(of_host, health))
    # fleet-wide ids a host could not be judged on (no peers to compare with): id -> host -> why
    not_judged = {fingerprint.OUTLIER: fingerprint.outlier_not_judged(described, intent),
                  nccl_checks.BUSBW_LOW: nccl_checks.peers_not_judged(fleet_views), **base_not_judged,
                  offenders.OFFENDER: offender_not_judged}
    unclassed = [v.name for v in verdicts if v.name not in of_host]
    carried = refs.carry(unclassed) if refs.carry is not None and unclassed else {}
    return fleet_result(run, records, findings, classes, silenced, not_judged,
                        _summary([v.outcome for v in verdicts], findings, health), carried)
