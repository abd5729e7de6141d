"""Judging works out a host's baseline figures once and hands them to coverage and to the fleet
baselines (issue 51: judging's CPU).  What each gets must be what it worked out on its own before:
coverage from all the facts, the baselines from the sections whose probe ran ok (a p2p or nccl
section from a run that did not end ok is no figure)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.results import HostInput
from orchestrator.verdict import baseline, coverage
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import judge_host

RECORDINGS = Path(__file__).resolve().parents[2] / "orchestrator" / "demo" / "recordings"


def _recorded() -> list[HostInput]:
    """Every recorded demo machine as judging reads it (the demo inputs of tests/support hold no
    p2p or nccl run)."""
    hosts = []
    for machine in sorted(p for p in RECORDINGS.iterdir() if p.is_dir()):
        probes, data = {}, {}
        for path in sorted(machine.glob("*.json")):
            env = json.loads(path.read_text())
            probes[env["probe"]] = {"outcome": "ok" if env["status"] == "ok" else env["status"], "reason": ""}
            data[env["probe"]] = env["data"]
        hosts.append(HostInput(name=machine.name, address="10.0.0.1", groups=["demo"], probes=probes, data=data))
    return hosts


# how a measuring probe may end other than ok while its data is still read back (hostile classes:
# a failure, a timeout, output that is not an envelope, an interrupted run, one not supported)
_NOT_OK = ("failed", "timeout", "invalid_output", "interrupted", "unsupported")


def _ended(h: HostInput, probe: str, outcome: str) -> HostInput:
    probes = {p: dict(s) for p, s in h.probes.items()}
    if probe in probes:
        probes[probe]["outcome"] = outcome
    return dataclasses.replace(h, probes=probes)


def _expected(h: HostInput, rec: dict[str, Any]) -> tuple[baseline.Measures, dict[str, str]]:
    """Each step on its own, as judging asked them before they shared the figures."""
    facts, outcomes = rec["facts"], coverage.judged_outcomes(h.probes, rec["facts"])
    ran = {k: v for k, v in facts.items() if k not in ("p2p", "nccl") or outcomes.get(k) in (None, "ok")}
    return baseline.measures(ran), coverage.not_judged(facts, outcomes, h.probes, Expectations(), rec["outcome"],
                                                      rec["reason"], unusable_expect=h.unusable_expect)


def test_every_demo_host_gets_the_figures_and_coverage_it_got_alone(demo_inputs: list[HostInput]) -> None:
    measured = 0
    for h in [*demo_inputs, *_recorded()]:
        rec, verdict = judge_host(h, Expectations())
        figures, not_judged = _expected(h, rec)
        assert verdict.measures == figures, h.name
        assert rec["not_judged"] == not_judged, h.name
        measured += len(figures) > 0
    assert measured, "no demo host measured a figure: the comparison proves nothing"


@pytest.mark.parametrize("outcome", _NOT_OK)
@pytest.mark.parametrize("probe", ["p2p", "nccl"])
def test_a_measuring_probe_that_did_not_end_ok_gives_no_figure(probe: str, outcome: str) -> None:
    hosts = [h for h in _recorded() if probe in h.probes and h.probes[probe].get("outcome") == "ok"]
    assert hosts, f"no demo host ran {probe}"
    for h in hosts:
        h = _ended(h, probe, outcome)
        rec, verdict = judge_host(h, Expectations())
        figures, not_judged = _expected(h, rec)
        assert verdict.measures == figures, (h.name, probe, outcome)
        assert rec["not_judged"] == not_judged, (h.name, probe, outcome)
