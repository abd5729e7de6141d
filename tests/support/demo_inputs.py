"""Verdict inputs from the bundled demo: a real `probe run` of the demo fleet, read back from its
raw files, and copies of those hosts under new names for bigger fleets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from orchestrator.engine.results import HostInput
from orchestrator.store.rundir import load_host_inputs
from tests.verdict.test_verdict_demo import run_cli


def stored_demo_inputs(tmp: Path) -> list[HostInput]:
    """The demo's hosts with their envelopes' data read (a stored run's are read when a host is
    judged; the tests here change them first)."""
    _rc, fleet, err = run_cli(["-l", "demo"], tmp / "demo")
    assert fleet is not None, err
    return [dataclasses.replace(h, data=h.load_data(), load_data=None) if h.load_data else h
            for h in load_host_inputs(tmp / "demo")]


def copies(inputs: list[HostInput], n: int) -> list[HostInput]:
    """n hosts cycling through `inputs`: copies keep hostnames, serials and GPU UUIDs, so the fleet
    repeats identities (the duplicate checks have work)."""
    return [dataclasses.replace(inputs[i % len(inputs)], name=f"{inputs[i % len(inputs)].name}-{i:04d}")
            for i in range(n)]
