"""Hosts whose inventory asks for MIG are meant to look otherwise than their peers: they are not
topology outliers of the peers without it (issue 47 item 7, found by bench/precision.py: every
host with MIG where its inventory expects it was degraded by `topology.class.outlier`).  A host
with MIG on that nobody asked for is still one, and so is a MIG host unlike the other MIG hosts."""

from __future__ import annotations

import random
from typing import Any

import pytest

from orchestrator.engine.results import HostInput
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict import classes as fingerprint
from orchestrator.verdict import rules
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet
from tests.verdict.test_baseline import _host
from tests.verdict.test_baseline_peers import _h100

OUTLIER = rules.topology.CLASS_OUTLIER.id


def _mig_on(h: HostInput) -> HostInput:
    for g in h.data["nvml"]["gpus"]:
        g["mig"] = {"current": True, "pending": False, "instances": [{"gi": i} for i in range(7)]}
    return h


def _fleet(mig_hosts: int, asked: dict[str, bool | None]) -> dict[str, Any]:
    rng = random.Random(7)
    hosts = [_host(f"plain-{i:02d}", rng) for i in range(6)]
    hosts += [_mig_on(_host(f"mig-{i:02d}", rng)) for i in range(mig_hosts)]
    result = build_fleet(RunMeta(id="t"), hosts, lambda h: Expectations(mig=asked.get(h.name)), workers=1)
    return {"outliers": sorted(f.host for f in result.findings if f.id == OUTLIER),
            "health": {h.name: (h.health.state.value, h.health.reason) for h in result.hosts}}


@pytest.mark.parametrize("mig_hosts", [1, 3])
def test_hosts_asked_for_mig_are_not_outliers_of_the_hosts_without(mig_hosts: int) -> None:
    asked = {f"mig-{i:02d}": True for i in range(mig_hosts)}
    out = _fleet(mig_hosts, asked)
    assert out["outliers"] == []
    # (the copies' +-2 % noise can put one under the NCCL floor: that is its own fault, not this one)
    assert all(out["health"][h][0] != "degraded" and OUTLIER not in out["health"][h][1] for h in asked), out["health"]


@pytest.mark.parametrize("said", [None, False])
def test_mig_nobody_asked_for_still_makes_an_outlier(said: bool | None) -> None:
    out = _fleet(2, {"mig-00": said, "mig-01": said})
    assert out["outliers"] == ["mig-00", "mig-01"]


def test_a_mig_host_unlike_the_other_mig_hosts_is_their_outlier() -> None:
    h100 = dict(_h100(), mig=True)
    odd = dict(h100, nvswitch_count=h100["nvswitch_count"] - 1)
    described = [(f"m{i}", dict(h100)) for i in range(4)] + [("m-odd", odd)]
    described += [(f"p{i}", dict(h100, mig=False)) for i in range(6)]
    intent = {name: fingerprint.intended(name.startswith("m")) for name, _ in described}
    _classes, findings, _ = fingerprint.classify_descriptors(described, intent)
    assert [f.host for f in findings] == ["m-odd"]
    assert "nvswitch_count" in findings[0].message
    # and the not-judged reasons count each family apart: 5 MIG hosts, 6 without
    assert fingerprint.outlier_not_judged(described, intent) == {}
    alone = {name: fingerprint.intended(name == "m0") for name, _ in described}
    assert fingerprint.outlier_not_judged(described, alone)["m0"].startswith("1 similar host(s)")
