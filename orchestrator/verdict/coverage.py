"""Pass, raised or not judged: what each finding id's check says about one host.

Checks report only what is wrong, so a host without a finding of an id has passed that check only
if the check had something to judge: its facts sections measured (their probes ran ok), the
expectation it compares with set, GPUs to look at, peers to compare with.  Otherwise the id is
*not judged*, with the reason, and no output may count it as passed.  What each id needs is
declared with its rule (`needs` in verdict/rules/<prefix>.py, gathered as checks.NEEDS); this
module only applies it.

Pure: `not_judged` runs when a host is judged (verdict/judge.py stores its answer in the host's
record as `not_judged`), `check_states` gives a judged host's states (verdict/result.py asks it
for JUnit, Prometheus, drift and the terminal).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from orchestrator.facts import read as F
from orchestrator.facts import registry
from orchestrator.facts.model import Facts
from orchestrator.verdict.checks import FINDING_IDS, NEEDS
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import Finding
from orchestrator.verdict.rule import Needs

PASS = "pass"
RAISED = "raised"
NOT_JUDGED = "not_judged"


@dataclass(frozen=True)
class CheckState:
    state: str  # PASS, RAISED or NOT_JUDGED
    reason: str = ""  # why not judged (or silenced); empty when judged

    @property
    def passed(self) -> bool:
        return self.state == PASS


def _section_missing(section: str, facts: Mapping[str, Any], outcomes: Mapping[str, str],
                     probes: Mapping[str, Any], unreadable_ok: bool = False) -> str | None:
    """Why `section` was not measured on the host, or None when it was."""
    probe = registry.probe_of(section) or section
    outcome = outcomes.get(probe)
    if outcome is None:
        return f"{probe} probe not in this run"
    if outcome != "ok":
        rec = probes.get(probe)
        why = rec.get("reason") if isinstance(rec, dict) else ""
        return f"{probe} {outcome}" + (f": {why}" if why else "")
    sec = facts.get(section)
    if not isinstance(sec, dict):
        return f"no {section} facts from the {probe} probe"
    if sec.get("readable") is False and not unreadable_ok:
        return f"{section} not readable: {sec.get('unreadable_reason') or 'no source could be read'}"
    return None


class _HostFacts:
    """What several ids' needs ask of the same host, worked out once per host: whether each section
    was measured (107 ids ask about 10 sections), its GPU count and each distinct `Needs.unjudged`
    function's answer (about 80 ids share a dozen of them; asking each anew read the host's GPU
    list ~40 times and was a fifth of judging a DGX host)."""

    def __init__(self, facts: Facts, outcomes: Mapping[str, str], probes: Mapping[str, Any],
                 answered: Mapping[Any, Mapping[str, str]] | None = None) -> None:
        self.facts = facts
        self._outcomes = outcomes
        self._probes = probes
        self._missing: dict[tuple[str, bool], str | None] = {}
        self._gpu_count: int | None = -1
        self._unjudged: dict[Any, Mapping[str, str]] = dict(answered or {})

    def missing(self, section: str, unreadable_ok: bool) -> str | None:
        key = (section, unreadable_ok)
        try:
            return self._missing[key]
        except KeyError:
            why = self._missing[key] = _section_missing(section, self.facts, self._outcomes, self._probes,
                                                         unreadable_ok)
            return why

    def gpu_count(self) -> int | None:
        if self._gpu_count == -1:
            self._gpu_count = F.gpu_count(self.facts)  # NVML's list, else the PCI bus's
        return self._gpu_count

    def unjudged(self, fn: Any) -> Mapping[str, str]:
        out = self._unjudged.get(fn)
        if out is None:
            out = self._unjudged[fn] = fn(self.facts)
        return out


def _why_not(fid: str, need: Needs, expect: Expectations | None, host: _HostFacts,
             unusable: Collection[str]) -> str | None:
    for section in need.sections:
        why = host.missing(section, need.unreadable_ok)
        if why:
            return why
    if need.any_of:
        whys = [host.missing(s, need.unreadable_ok) for s in need.any_of]
        if all(whys):
            return "; ".join(w for w in whys if w)
    if need.expect and expect is not None and all(getattr(expect, k) is None for k in need.expect):
        return _unset(need.expect, unusable)
    if need.switched_on and expect is not None and not any(getattr(expect, k) is True for k in need.switched_on):
        # the wording of an expectation not written (above), for a switch left off or set false
        return _unset(need.switched_on, unusable)
    if need.gpus and host.gpu_count() == 0:  # NVML's list, else the PCI bus's
        return "no GPUs on this host"
    if need.unjudged is not None:
        return host.unjudged(need.unjudged).get(fid)
    return None


def _unset(keys: tuple[str, ...], unusable: Collection[str]) -> str:
    """Why an id that needs one of `keys` set is not judged: none was asked for, or what was asked
    for (the host's stored probe_expect) could not be read here."""
    lost = [k for k in keys if k in unusable]
    if lost:
        return "its stored expectation " + " or ".join(lost) + " cannot be used here: correct probe_expect in " \
               "its _host.json under raw/ and rejudge"
    return "no expectation " + " or ".join(keys) + " set"


def not_judged(facts: Facts, outcomes: Mapping[str, str], probes: Mapping[str, Any],
               expect: Expectations | None = None, host_outcome: str = "", host_reason: str = "",
               needs: Mapping[str, Needs] = NEEDS, unusable_expect: Collection[str] = (),
               answered: Mapping[Any, Mapping[str, str]] | None = None) -> dict[str, str]:
    """finding id -> why its check could not judge this host (ids judged are absent).

    `outcomes`: probe -> outcome as the checks saw them (judged_outcomes: raw mode counts);
    `probes`: the host's probe records (their reasons); `expect` None: expectations unknown (a
    record from before they were stored), so no id is held back for a missing one;
    `unusable_expect`: keys of the host's stored probe_expect left out as unreadable here;
    `answered`: `Needs.unjudged` functions' answers for these facts that the caller worked out already."""
    if host_outcome == "unreachable":
        why = "host unreachable" + (f": {host_reason}" if host_reason else "")
        return dict.fromkeys(needs, why)
    if outcomes and all(o != "ok" for o in outcomes.values()):
        first = next(iter(outcomes))
        rec = probes.get(first)
        reason = str(rec.get("reason") or "") if isinstance(rec, dict) else ""
        why = f"no probe ran: {first} {outcomes[first]}" + (f": {reason}" if reason else "")
        return dict.fromkeys(needs, why)
    out = {}
    host = _HostFacts(facts, outcomes, probes, answered)
    for fid, need in needs.items():
        missing = _why_not(fid, need, expect, host, unusable_expect)
        if missing:
            out[fid] = missing
    return out


def expectations_of(record: Mapping[str, Any]) -> Expectations | None:
    """The expectations stored with a host record (`expect`), or None for a record without them."""
    raw = record.get("expect")
    if not isinstance(raw, dict):
        return None
    known = {f.name for f in fields(Expectations)}
    return Expectations(**{k: v for k, v in raw.items() if k in known})


def judged_outcomes(probes: Mapping[str, Mapping[str, Any]], facts: Facts) -> dict[str, str]:
    """Probe outcomes as the checks see them: a section read from text (raw mode) counts as its
    probe having run, so that probe's checks judge it."""
    out = {p: str(s.get("outcome")) for p, s in probes.items()}
    if out.get("raw") == "ok":
        out.update(dict.fromkeys(registry.probes_standing_for(facts), "ok"))
    return out


def record_not_judged(record: Mapping[str, Any]) -> dict[str, str]:
    """A fleet.json host record's not-judged ids: as stored, or worked out from its probes and facts
    (records written before `not_judged` was stored)."""
    stored = record.get("not_judged")
    if isinstance(stored, dict):
        return {str(k): str(v) for k, v in stored.items()}
    stored_probes = record.get("probes")
    probes: dict[str, Any] = stored_probes if isinstance(stored_probes, dict) else {}
    facts = F.host_facts(record)
    outcomes = judged_outcomes({p: r for p, r in probes.items() if isinstance(r, dict)}, facts)
    return not_judged(facts, outcomes, probes, expectations_of(record),
                      str(record.get("outcome") or ""), str(record.get("reason") or ""))


def check_states(not_judged: Mapping[str, str], findings: Iterable[Finding], ids: Iterable[str] = FINDING_IDS,
                 fleet_not_judged: Mapping[str, str] | None = None,
                 silenced: Iterable[tuple[str, str]] = ()) -> dict[str, CheckState]:
    """finding id -> its state on one host, from its stored not-judged ids, its findings, the ids
    fleet-wide checks could not judge on it (`fleet_not_judged`: id -> why) and its findings the
    playbook silenced (`silenced`: id, reason).  A raised finding wins over "not judged" (a check
    that found a fault in partial data did judge); a silenced one is not judged ("silenced:
    reason"), since nobody may read it as passed either."""
    raised = {f.id for f in findings}
    quiet: dict[str, str] = {}
    for fid, reason in silenced:
        quiet.setdefault(fid, f"silenced by the playbook: {reason or 'no reason given'}")
    missing = {**(fleet_not_judged or {}), **not_judged}
    out = {}
    for fid in dict.fromkeys([*ids, *sorted(raised)]):
        if fid in raised:
            out[fid] = CheckState(RAISED)
        elif fid in quiet:
            out[fid] = CheckState(NOT_JUDGED, quiet[fid])
        elif fid in missing:
            out[fid] = CheckState(NOT_JUDGED, missing[fid])
        else:
            out[fid] = CheckState(PASS)
    return out
