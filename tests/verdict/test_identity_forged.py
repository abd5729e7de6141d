"""A forged identity gets no innocent host drained (issue 47, "bad input keeps its promise").

A host that reports another host's GPU UUID, GPU serial or system serial makes the two share an
identity; one run cannot tell which of them lied.  Such a finding is `unknown`, warn, action
`none` (investigate) on every host that holds the identity once: no drain line, no remediation
step.  Only a host the evidence shows wrong (its own list holds the identity twice: one physical
GPU has one identity) keeps the fault and is drained for it.  Each forger is a member of a class;
the findings come from the real fleet checks and go through the real drain and remediation plans.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.present.outputs.slurm_drain import render_drain
from orchestrator.verdict import remedy, rules
from orchestrator.verdict.actions import action_of
from orchestrator.verdict.checks import gpu as gpu_checks
from orchestrator.verdict.checks import host as host_checks
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.findings import Action, Finding, Kind, Severity
from orchestrator.verdict.result import FleetResult
from tests.verdict.test_verdict_demo import recorded_facts

ALL_OK = {"host": "ok", "pcie": "ok", "nvml": "ok", "nvlink": "ok"}
HOSTS = ["dgx-h100-01", "dgx-h100-02", "dgx-h100-03", "dgx-h100-05", "dgx-h100-06"]
VICTIM, FORGER = "dgx-h100-01", "dgx-h100-03"
IDENTITY_IDS = {rules.identity.UUID_DUPLICATE.id, rules.identity.GPU_SERIAL_DUPLICATE.id,
                rules.identity.SYSTEM_SERIAL_DUPLICATE.id}


def _gpus(facts: dict[str, Any]) -> list[dict[str, Any]]:
    return list(facts["gpus"]["list"])


def _copy_gpu_field(field: str, gpus: list[int]) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    def forge(forger: dict[str, Any], victim: dict[str, Any]) -> None:
        for i in gpus:
            _gpus(forger)[i][field] = _gpus(victim)[i][field]
    return forge


def _system_serial(forger: dict[str, Any], victim: dict[str, Any]) -> None:
    forger["host"]["board"]["system_serial"] = victim["host"]["board"]["system_serial"]


Forge = Callable[[dict[str, Any], dict[str, Any]], None]


def _all(*forges: Forge) -> Forge:
    def forge(forger: dict[str, Any], victim: dict[str, Any]) -> None:
        for f in forges:
            f(forger, victim)
    return forge


# Each forges the victim's identity once on the forger: which of the two lied cannot be told.
UNDECIDABLE: dict[str, Forge] = {
    "one GPU's UUID": _copy_gpu_field("uuid", [3]),
    "every GPU's UUID (a cloned list)": _copy_gpu_field("uuid", list(range(8))),
    "one GPU's serial": _copy_gpu_field("serial", [0]),
    "UUID and serial of two GPUs": _all(_copy_gpu_field("uuid", [1, 2]), _copy_gpu_field("serial", [1, 2])),
    "the system serial": _system_serial,
    "system serial and every UUID": _all(_system_serial, _copy_gpu_field("uuid", list(range(8)))),
}


def _repeat(field: str, victim_gpu: int, on: slice) -> Forge:
    """The forger's GPUs in `on` all take the victim's GPU `victim_gpu`'s identity."""
    def forge(forger: dict[str, Any], victim: dict[str, Any]) -> None:
        for g in _gpus(forger)[on]:
            g[field] = _gpus(victim)[victim_gpu][field]
    return forge


def _views(forge: Forge) -> list[HostView]:
    facts = {h: copy.deepcopy(recorded_facts(h)) for h in HOSTS}
    forge(facts[FORGER], facts[VICTIM])
    return [HostView(h, facts[h], dict(ALL_OK)) for h in HOSTS]


def _judged(views: list[HostView]) -> list[Finding]:
    return [f for check in (*gpu_checks.FLEET_CHECKS, *host_checks.FLEET_CHECKS) for f in check(views)]


def _fleet(findings: list[Finding]) -> FleetResult:
    hosts = [{"name": h, "address": h, "groups": [], "outcome": "ok", "reason": "",
              "probes": {p: {"outcome": "ok"} for p in ALL_OK}, "facts": {}} for h in HOSTS]
    return FleetResult.from_document({"schema_version": 1, "run": {"id": "r1"}, "hosts": hosts, "classes": [],
                                      "findings": [f.to_dict() for f in findings], "silenced": []})


def _taken(findings: list[Finding]) -> tuple[set[str], set[str], str]:
    """(hosts the drain list takes, hosts the remediation plan disrupts, the drain list's text)."""
    fleet = _fleet(findings)
    drain = remedy.drain_plan(fleet, max_share=1.0)
    plan = remedy.plan(fleet, max_share=1.0)
    return {hp.host for hp in drain.hosts}, {hp.host for hp in plan.hosts if hp.disruptive}, render_drain(fleet, drain)


@pytest.mark.parametrize("case", sorted(UNDECIDABLE))
def test_an_identity_two_hosts_hold_once_each_drains_neither(case: str) -> None:
    findings = _judged(_views(UNDECIDABLE[case]))
    assert findings and {f.id for f in findings} <= IDENTITY_IDS
    assert {f.host for f in findings} == {VICTIM, FORGER}
    for f in findings:
        assert (f.severity, f.kind, action_of(f)) == (Severity.WARN, Kind.UNKNOWN, Action.NONE), (f.id, f.host)
        assert "None" not in f.message
        assert "this host's" in f.message or "serial is its own" in f.message
    drained, disrupted, text = _taken(findings)
    assert drained == set() and disrupted == set() and "scontrol" not in text


# The forger's own list holds the victim's identity twice: it is shown wrong, the victim is not.
SHOWN: dict[str, Forge] = {
    "a UUID on two of its GPUs": _repeat("uuid", 0, slice(0, 2)),
    "a UUID on all its GPUs": _repeat("uuid", 5, slice(None)),
    "a serial on three of its GPUs": _repeat("serial", 2, slice(3, 6)),
}


@pytest.mark.parametrize("case", sorted(SHOWN))
def test_a_host_shown_to_repeat_an_identity_is_the_one_drained(case: str) -> None:
    findings = _judged(_views(SHOWN[case]))
    mine = [f for f in findings if f.host == FORGER]
    theirs = [f for f in findings if f.host == VICTIM]
    assert mine and theirs and {f.host for f in findings} == {VICTIM, FORGER}
    assert all(f.severity is Severity.FAIL and f.kind is Kind.FAULT and action_of(f) is Action.RESEAT_INSPECT
               for f in mine)
    assert all(f.severity is Severity.WARN and action_of(f) is Action.NONE and FORGER in f.message for f in theirs)
    drained, disrupted, text = _taken(findings)
    assert drained == {FORGER} and disrupted == {FORGER}
    assert VICTIM not in text and FORGER in text


def test_a_host_repeating_its_own_uuid_alone_is_still_a_fault() -> None:
    """No other host involved: a list that repeats one identity is forged or virtualised."""
    def forge(f: dict[str, Any], v: dict[str, Any]) -> None:
        _gpus(f)[1]["uuid"] = _gpus(f)[0]["uuid"]

    findings = [f for f in _judged(_views(forge)) if f.id == rules.identity.UUID_DUPLICATE.id]
    assert {f.host for f in findings} == {FORGER}
    assert all(f.severity is Severity.FAIL and action_of(f) is Action.RESEAT_INSPECT for f in findings)
