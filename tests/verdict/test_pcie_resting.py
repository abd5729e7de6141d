"""A GPU link resting at a lower speed while idle is no fault (issue 47 item 7, found by
bench/precision.py): idle GPUs drop their PCIe link to Gen1 between jobs to save power, whether or
not the inventory writes `pcie_gen`, so the speed at rest is judged neither against the
expectation nor into the host's topology class.  The width, and ends that cannot reach the
expected generation, still are."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from orchestrator.verdict import classes as fingerprint
from orchestrator.verdict import rules
from orchestrator.verdict.checks import gpu as gpu_checks
from orchestrator.verdict.checks import pcie as pcie_checks
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import Severity
from tests.verdict.test_expectations import ALL_OK
from tests.verdict.test_verdict_demo import recorded_facts

GPU_BUS = "0000:3a:00.0"
SPEEDS = {1: "2.5 GT/s", 2: "5.0 GT/s", 3: "8.0 GT/s", 4: "16.0 GT/s", 5: "32.0 GT/s"}


def _at(gen: int, width: int = 16, gen_max: int = 5, every_gpu: bool = False, tree: bool = True) -> dict[str, Any]:
    """dgx-h100-01's facts with one GPU's link (or every GPU's) at `gen` x`width`, both ends able to do
    Gen`gen_max` x16, as the pcie probe's tree and NVML both report it; `tree`: False drops the tree."""
    facts = copy.deepcopy(recorded_facts("dgx-h100-01"))
    link = {"gen_current": gen, "gen_max": gen_max, "width_current": width, "width_max": 16,
            "speed_current": SPEEDS[gen], "speed_max": SPEEDS[gen_max]}
    buses = {g["bus_id"] for g in facts["gpus"]["list"]} if every_gpu else {GPU_BUS}
    for g in facts["gpus"]["list"]:
        if g["bus_id"] in buses:
            g["pcie"].update({k: link[k] for k in ("gen_current", "gen_max", "width_current", "width_max")})
    for d in facts["pcie"]["devices"]:
        if d["bdf"] in buses:
            d["link"].update(link)
    if gen < gen_max or width < 16:
        facts["pcie"]["downgraded"] = [{"bdf": b, "kind": "gpu", **link} for b in sorted(buses)]
    if not tree:
        del facts["pcie"]
    return facts


def _link_findings(facts: dict[str, Any], **expect: Any) -> list[tuple[str, str]]:
    view = HostView(name="h", facts=facts, outcomes=dict(ALL_OK), expect=Expectations.from_mapping(expect))
    return [(f.severity.value, f.subject) for c in (*gpu_checks.CHECKS, *pcie_checks.CHECKS) for f in c(view)
            if f.id == rules.pcie.LINK_DOWNGRADED.id]


EXPECTS = [{}, {"pcie_gen": 5}, {"pcie_gen": 5, "pcie_width": 16}, {"pcie_gen": 4}, {"pcie_width": 16}]


@pytest.mark.parametrize("tree", [True, False], ids=["pcie-tree", "nvml-only"])
@pytest.mark.parametrize("expect", EXPECTS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "none")
@pytest.mark.parametrize("gen", [1, 2, 3, 4])
def test_a_link_resting_at_a_lower_speed_fails_nothing(gen: int, expect: dict[str, Any], tree: bool) -> None:
    got = _link_findings(_at(gen, tree=tree), **expect)
    assert all(sev == Severity.INFO.value for sev, _ in got), got  # said, as not judged at rest; never a fault


@pytest.mark.parametrize("tree", [True, False], ids=["pcie-tree", "nvml-only"])
@pytest.mark.parametrize("link,expect", [
    ({"gen": 5, "width": 8}, {"pcie_gen": 5, "pcie_width": 16}),  # lanes lost: conclusive at rest
    ({"gen": 1, "width": 8}, {"pcie_gen": 5}),  # slow and narrow
    ({"gen": 1, "width": 4}, {"pcie_width": 16}),
    ({"gen": 4, "gen_max": 4}, {"pcie_gen": 5}),  # both ends top out below the expectation
    ({"gen": 1, "gen_max": 4}, {"pcie_gen": 5}),  # resting, but its ends cannot reach Gen5 either
    ({"gen": 3, "gen_max": 3}, {"pcie_gen": 4}),
])
def test_what_is_conclusive_at_rest_still_fails(link: dict[str, int], expect: dict[str, Any], tree: bool) -> None:
    got = _link_findings(_at(**link, tree=tree), **expect)
    assert (Severity.FAIL.value, f"GPU2 ({GPU_BUS})") in got, got


@pytest.mark.parametrize("gen", [1, 2, 4])
def test_a_host_whose_links_rest_is_in_its_peers_class(gen: int) -> None:
    recs = [{"name": "a", "facts": recorded_facts("dgx-h100-01")}, {"name": "b", "facts": recorded_facts("dgx-h100-02")},
            {"name": "c", "facts": recorded_facts("dgx-h100-03")}, {"name": "idle", "facts": _at(gen, every_gpu=True)}]
    _, findings = fingerprint.classify(recs)
    assert findings == [] and len({r["class"] for r in recs}) == 1


def test_a_host_with_a_narrow_link_stays_an_outlier_of_its_class() -> None:
    recs = [{"name": "a", "facts": recorded_facts("dgx-h100-01")}, {"name": "b", "facts": recorded_facts("dgx-h100-02")},
            {"name": "c", "facts": recorded_facts("dgx-h100-03")}, {"name": "x8", "facts": _at(1, width=8)}]
    _, findings = fingerprint.classify(recs)
    assert [f.host for f in findings] == ["x8"]
