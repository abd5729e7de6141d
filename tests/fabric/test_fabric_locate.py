"""Localisation (verdict/fabric_locate.py) and the fabric checks on synthetic measurements (pure)."""

from __future__ import annotations

from typing import Any

from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.checks.fabric import check_fabric, unjudged
from orchestrator.verdict.fabric_locate import (
    Thresholds,
    gdr_faults,
    locate,
    nccl_floor,
    pcie_gbps,
    ring_explained,
    ring_slow,
    samples,
)
from tests.support.fabric import synthetic_facts

HOSTS = [f"n{i:02d}" for i in range(10)]


def _kinds(facts: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {(f.kind, f.hosts, f.rail) for f in locate(facts).faults}


def test_a_healthy_fabric_has_no_fault_and_no_suspect() -> None:
    loc = locate(synthetic_facts(HOSTS, 4))
    assert loc.faults == [] and loc.suspects == {}
    assert loc.pairs_judged == 45 * 4
    assert all(s.bad is False for s in loc.samples)


def test_a_port_slow_with_every_peer_is_its_hca_and_all_of_them_the_host() -> None:
    hca = synthetic_facts(HOSTS, 4, lambda a, b, r: 0.5 if r == 2 and "n03" in (a, b) else 1.0)
    assert _kinds(hca) == {("hca", ("n03",), 2)}
    f = locate(hca).faults[0]
    assert f.hcas == ("mlx5_2",) and f.unit == "Gb/s" and f.expected == 360.0 and f.measured < 200
    assert f.detail == "slow with 9 of 9 peers on rail 2" and any("n03:mlx5_2" in e for e in f.evidence)
    host = synthetic_facts(HOSTS, 4, lambda a, b, r: 0.4 if "n07" in (a, b) else 1.0)
    assert _kinds(host) == {("host", ("n07",), None)}


def test_a_pair_slow_only_together_is_the_path_and_a_rail_slow_everywhere_is_the_rail() -> None:
    path = synthetic_facts(HOSTS, 4, lambda a, b, r: 0.3 if {a, b} == {"n01", "n08"} and r == 1 else 1.0)
    assert _kinds(path) == {("path", ("n01", "n08"), 1)}
    rail = synthetic_facts(HOSTS, 4, lambda a, b, r: 0.5 if r == 3 else 1.0)
    faults = locate(rail).faults
    assert [(f.kind, f.rail, f.hcas) for f in faults] == [("rail", 3, ("mlx5_3",))]
    assert set(faults[0].hosts) == set(HOSTS)
    # a slow host on a slow rail: the rail, and the host on the rails that are fine
    both = synthetic_facts(HOSTS, 4, lambda a, b, r: (0.5 if r == 3 else 1.0) * (0.4 if "n02" in (a, b) else 1.0))
    assert _kinds(both) == {("rail", tuple(HOSTS), 3), ("host", ("n02",), None)}


def test_a_port_trained_at_a_lower_rate_is_its_hca_against_the_fleet() -> None:
    """At its own line rate it meets the line floor; slow with every peer against the fleet's median."""
    facts = synthetic_facts(HOSTS, 4, lambda a, b, r: 0.25 if r == 1 and "n05" in (a, b) else 1.0)
    port = facts["n05"]["hcas"][1]
    port["rate"], port["rate_gbps"] = "100 Gb/sec (4X EDR)", 100.0
    assert _kinds(facts) == {("hca", ("n05",), 1)}
    found = list(check_fabric([_view(h, f) for h, f in facts.items()]))
    assert [(f.id, f.host) for f in found] == [("fabric.hca.slow", "n05")]
    assert "active at 100 Gb/sec (4X EDR) where the rail's other ports run 400 Gb/s" in found[0].message
    assert found[0].expected is not None and found[0].expected > 300  # the fleet's floor, not 90 % of 100


def test_latency_alone_over_its_ceiling_is_slow() -> None:
    facts = synthetic_facts(HOSTS, 2)
    for m in facts["n04"]["measurements"]:
        if m["kind"] == "lat" and m["rail"] == 0:
            m["value"], m["p99_us"] = 3.1, 3.4
    for h in HOSTS:
        for m in facts[h]["measurements"]:
            if m["kind"] == "lat" and m["rail"] == 0 and m["peer"] == "n04":
                m["value"], m["p99_us"] = 3.1, 3.4
    faults = locate(facts).faults
    assert [(f.kind, f.hosts, f.unit) for f in faults] == [("hca", ("n04",), "us")]
    assert faults[0].expected == 2.5


def test_too_few_peers_leave_a_suspect_instead_of_a_verdict() -> None:
    # two rounds: a host slow with both of its peers on a rail cannot be told from them yet when
    # those peers have no other measurement there
    facts = synthetic_facts(HOSTS[:4], 1, lambda a, b, r: 0.4 if "n00" in (a, b) else 1.0, rounds=1)
    loc = locate(facts)
    assert loc.faults == []
    assert loc.suspects == {0: ["n00", "n03"]} or set(loc.suspects[0]) >= {"n00"}


def test_floors_come_from_the_line_rate_its_pcie_link_and_the_fleet() -> None:
    assert pcie_gbps({"max_speed": "32.0 GT/s PCIe", "max_width": 16}) == 31.508 * 16
    assert pcie_gbps({"max_speed": "16.0 GT/s PCIe", "max_width": 8}) == 15.754 * 8
    facts = synthetic_facts(HOSTS, 1)
    for h in HOSTS:  # a Gen4 x8 slot carries ~126 Gb/s: the floor is 90 % of that, not of 400
        facts[h]["hcas"][0]["pcie"] = {"speed": "16.0 GT/s PCIe", "width": 8, "max_speed": "16.0 GT/s PCIe",
                                       "max_width": 8}
        for m in facts[h]["measurements"]:
            if m["kind"] == "bw":
                m["value"] = 120.0
    found = samples(facts)
    loc = locate(facts)
    assert loc.faults == []
    bw = next(s for s in loc.samples if s.kind == "bw")
    assert bw.expected == round(15.754 * 8 * 0.9, 1) and "PCIe" in bw.basis and len(found) == len(loc.samples)
    # a line rate nobody knows: judged against the fleet's median alone
    odd = synthetic_facts(HOSTS, 1, lambda a, b, r: 0.5 if "n05" in (a, b) else 1.0)
    for h in HOSTS:
        odd[h]["hcas"][0]["rate_gbps"] = None
    assert _kinds(odd) == {("hca", ("n05",), 0)}
    assert Thresholds.of({"bw_ratio": 0.5, "peer_ratio": "x"}).bw_ratio == 0.5


def test_gdr_expected_but_host_memory_used_is_named() -> None:
    facts = synthetic_facts(HOSTS, 2, gdr_broken=("n06",))
    [f] = gdr_faults(facts)
    assert f.hosts == ("n06",) and set(f.hcas) == {"mlx5_0", "mlx5_1"} and "Couldn't allocate MR" in f.evidence[0]
    facts["n06"]["gdr"]["expected"] = False
    assert gdr_faults(facts) == []


def _view(name: str, fabric: dict[str, Any]) -> HostView:
    return HostView(name=name, facts={"fabric": fabric}, outcomes={"fabric": "ok"})  # type: ignore[typeddict-item]


def test_the_fleet_check_raises_one_finding_per_fault_with_its_evidence() -> None:
    facts = synthetic_facts(HOSTS, 4, lambda a, b, r: (0.5 if r == 1 else 1.0) * (0.3 if {a, b} == {"n02", "n09"} and r == 3
                                                                                   else 1.0))
    found = list(check_fabric([_view(h, f) for h, f in facts.items()]))
    ids = sorted((f.id, f.host) for f in found)
    assert ids == sorted([("fabric.rail.slow", h) for h in HOSTS] + [("fabric.path.slow", "n02"), ("fabric.path.slow", "n09")])
    path = next(f for f in found if f.id == "fabric.path.slow" and f.host == "n02")
    assert path.subject == "mlx5_3 <-> n09:mlx5_3 (rail 3)" and path.expected == 360.0 and path.evidence
    assert all(f.severity.value == "fail" for f in found)
    # a host that sat out (busy) is no part of it; fewer than two hosts: nothing to judge
    assert list(check_fabric([_view("a", facts["n00"])])) == []


def test_not_judged_says_why() -> None:
    facts = synthetic_facts(HOSTS[:3], 1)
    f = facts["n00"]
    assert unjudged({"fabric": f}) == {"fabric.nccl.slow": "no multi-host NCCL communicator ran on this host",  # type: ignore[typeddict-item]
                                       "fabric.nccl.data_wrong": "no multi-host NCCL communicator ran on this host",
                                       "fabric.nccl.transport": "no multi-host NCCL communicator ran on this host"}
    f["measurements"] = []
    f["perftest"]["missing"] = ["ib_write_bw"]
    why = unjudged({"fabric": f})  # type: ignore[typeddict-item]
    assert why["fabric.hca.slow"] == "perftest not installed (ib_write_bw not found)"
    f["skipped"] = "busy: GPU 0000:12:00.0 runs 1 compute process(es)"
    assert set(unjudged({"fabric": f}).values()) == {"not part of the qualification: busy: GPU 0000:12:00.0 runs 1 "  # type: ignore[typeddict-item]
                                                     "compute process(es)"}


def _ring(name: str, kind: str, rail: int | None, members: list[str], busbw: float, size: int = 64 << 20) -> dict[str, Any]:
    return {"group": name, "kind": kind, "rail": rail, "hca": None if rail is None else f"mlx5_{rail}", "members": members,
            "ranks": len(members), "transport": "NET/IB/GDRDMA", "gdr": True, "busbw_gbps": busbw,
            "results": [{"op": "all_reduce", "size_bytes": size, "count": size // 4, "dtype": "float", "redop": "sum",
                         "time_us": 1.0, "algbw_gbps": busbw, "busbw_gbps": busbw, "in_place": False, "wrong": 0}],
            "wrong": 0, "error": None}


def test_a_slow_ring_is_bisected_to_its_host_when_no_pairwise_fault_explains_it() -> None:
    facts = synthetic_facts(HOSTS[:8], 1)
    for f in facts.values():
        f["measurements"] = []
        f["perftest"]["missing"] = ["ib_write_bw", "ib_write_lat"]
    rings = [_ring("rail0", "rail", 0, HOSTS[:8], 20.0),
             _ring("bisect:rail0:0:0.0", "bisect", 0, HOSTS[:4], 45.0), _ring("bisect:rail0:0:0.1", "bisect", 0, HOSTS[4:8], 20.0),
             _ring("bisect:rail0:1:0.0", "bisect", 0, HOSTS[4:6], 45.0), _ring("bisect:rail0:1:0.1", "bisect", 0, HOSTS[6:8], 20.0),
             _ring("bisect:rail0:2:0.0", "bisect", 0, ["n06", "n00"], 45.0), _ring("bisect:rail0:2:0.1", "bisect", 0, ["n07", "n01"], 20.0)]
    for h in HOSTS[:8]:
        facts[h]["nccl"] = [r for r in rings if h in r["members"]]
    assert nccl_floor(rings[0], facts) == 35.0 and ring_slow(rings[0], facts) and not ring_slow(rings[1], facts)
    assert not ring_slow(_ring("x", "rail", 0, HOSTS[:8], 20.0, size=1 << 20), facts)  # too small to judge
    found = list(check_fabric([_view(h, f) for h, f in facts.items()]))
    assert [(f.id, f.host, f.kind.value) for f in found] == [("fabric.nccl.slow", "n07", "fault")]
    assert "bisecting" in found[0].message and found[0].expected == 35.0


def test_a_ring_a_pairwise_fault_explains_raises_nothing_of_its_own() -> None:
    facts = synthetic_facts(HOSTS[:6], 1, lambda a, b, r: 0.4 if "n01" in (a, b) else 1.0)
    ring = _ring("rail0", "rail", 0, HOSTS[:6], 15.0)
    for h in HOSTS[:6]:
        facts[h]["nccl"] = [ring]
    faults = locate(facts).faults
    assert ring_explained(ring, faults) and [f.kind for f in faults] == ["hca"]
    ids = {f.id for f in check_fabric([_view(h, f) for h, f in facts.items()])}
    assert ids == {"fabric.hca.slow"}
