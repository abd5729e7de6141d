"""A forged or inconsistent fabric answer costs its sender only (issue 47, "bad input keeps its promise").

A host speaks for its own end of each pair test.  Whatever it prints (a figure no port can give,
a "slow" its peer's end of the same transfer contradicts, another host's port as its peer's), the
peer is never failed, drained or charged a path, and the rail is not charged on its word alone;
the liar gets `fabric.answer.distrusted` where the evidence names it.  Each hostile host is a
member of a class here, among 8 and 16 hosts; everything runs through the real normalizer (the
real perftest parser), the real fleet check and locator, health, and the Slurm drain list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.engine.fabric_plan import FabricSpec, tournament
from orchestrator.facts.normalize.fabric import normalize
from orchestrator.present.outputs.slurm_drain import render_drain
from orchestrator.verdict import remedy, rules
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.checks.fabric import check_fabric
from orchestrator.verdict.fabric_faults import is_fabric
from orchestrator.verdict.fabric_locate import locate
from orchestrator.verdict.findings import Finding, Severity
from orchestrator.verdict.result import FleetResult
from tests.fabric.test_fabric_trust import bw_text

DISTRUSTED = rules.fabric.ANSWER_DISTRUSTED.id
RAILS = 2
LINE = 400.0
HEALTHY_BW = 386.0
HEALTHY_LAT = 1.9
TESTS = ("ib_write_bw", "ib_write_lat")


def lat_text(typical: str, remote_lid: int, size: int = 2) -> str:
    """ib_write_lat output as perftest prints it (tests/fixtures/fabric/ib_write_lat_a_hdr_cx6_2node_client_01.txt)."""
    return (" " + "-" * 80 + "\n                    RDMA_Write Latency Test\n"
            " Dual-port       : OFF\t\tDevice         : mlx5_0\n Link type       : IB\n " + "-" * 80 + "\n"
            " local address: LID 0x40 QPN 0x038e PSN 0x85d384 RKey 0x1812d1 VAddr 0x007a176aa8c000\n"
            f" remote address: LID {remote_lid:#04x} QPN 0x0562 PSN 0xef405d RKey 0x1832f1 VAddr 0x0073636820b000\n"
            " " + "-" * 80 + "\n"
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
            "   99% percentile[usec]   99.9% percentile[usec] \n"
            f" {size}       1000          1.79           5.41         {typical}     \t       1.88        \t0.18   "
            "\t\t2.03    \t5.41   \n " + "-" * 80 + "\n")


def bw_rows(figure: str, remote_lid: int, size: int = 65536) -> str:
    """ib_write_bw output whose figure is any text (a forged one: -5.00, nan, inf)."""
    return bw_text(0.0, remote_lid).replace(" 65536      5000             0.00            0.00",
                                            f" {size}      5000             {figure}            {figure}")


@dataclass
class Fleet:
    hosts: list[str]
    raw: dict[str, dict[str, Any]]

    def lid(self, host: str, rail: int) -> int:
        return 1 + self.hosts.index(host) * 8 + rail

    def dialled_by(self, host: str) -> str:
        """A peer `host` meets as the client (its own figure decides that pair by default)."""
        return next(s[3] for s in self.raw[host]["plan"]["steps"] if s[2] == "client")


def fleet(n: int) -> Fleet:
    """n hosts, two rails, a full round robin of ib_write_bw and ib_write_lat, both ends printing
    the same healthy figure, as api/fabric.py stores each host's raw `fabric` envelope."""
    hosts = [f"h{i:02d}" for i in range(n)]
    out = Fleet(hosts, {})
    spec = FabricSpec(tests=TESTS).to_dict()
    for h in hosts:
        hcas = [{"hca": f"mlx5_{r}", "port": 1, "state": "ACTIVE", "link_layer": "InfiniBand",
                 "rate": "400 Gb/sec (4X NDR)", "rate_gbps": LINE, "width": 4, "lid": hex(out.lid(h, r)),
                 "address": f"10.{r}.0.{hosts.index(h) + 1}"} for r in range(RAILS)]
        tools = {t: f"/usr/bin/{t}" for t in TESTS}
        out.raw[h] = {"discover": {"hcas": hcas, "gpus": [], "perftest": {"tools": tools}}, "skipped": None,
                      "nccl": [], "errors": [], "refused": [],
                      "plan": {"hosts": n, "rails": RAILS, "rounds": n - 1, "extra_rounds": 0, "round_s": 30.0,
                               "budget_s": 1800.0, "tests": list(TESTS), "spec": spec,
                               "rail_of": {f"mlx5_{r}": r for r in range(RAILS)}, "steps": []},
                      "waves": [{"wave": 1, "outcome": "ok", "reason": "", "data": {"results": []}}]}
    for k, pairs in enumerate(tournament(hosts, None, "forged")):
        for a, b in pairs:
            for r in range(RAILS):
                for me, peer, role in ((a, b, "client"), (b, a, "server")):
                    out.raw[me]["plan"]["steps"].append([k, r, role, peer, f"mlx5_{r}"])
                    for test in TESTS:
                        stdout = bw_text(HEALTHY_BW, out.lid(peer, r)) if test.endswith("_bw") else \
                            lat_text(f"{HEALTHY_LAT:.2f}", out.lid(peer, r))
                        out.raw[me]["waves"][0]["data"]["results"].append({
                            "round": k, "rail": r, "hca": f"mlx5_{r}", "role": role, "peer": peer,
                            "peer_hca": f"mlx5_{r}", "peer_lid": out.lid(peer, r), "test": test, "extra": False,
                            "exit": 0, "timed_out": False, "stdout": stdout, "stderr": "", "error": None})
    return out


def lie(f: Fleet, liar: str, test: str, stdout: Callable[[dict[str, Any]], str],
        about: Callable[[dict[str, Any]], bool] = lambda rec: True) -> None:
    """The liar's own records of `test` (those `about` picks) print `stdout` instead."""
    for rec in f.raw[liar]["waves"][0]["data"]["results"]:
        if rec["test"] == test and about(rec):
            rec["stdout"] = stdout(rec)


def judged(f: Fleet) -> list[Finding]:
    views = [HostView(h, {"fabric": normalize(d)}, {"fabric": "ok"}) for h, d in f.raw.items()]
    return list(check_fabric(views))


def drained(f: Fleet, findings: list[Finding]) -> tuple[set[str], str]:
    """The hosts the real drain plan takes (no guard), and the drain list it renders."""
    hosts = [{"name": h, "address": h, "groups": [], "outcome": "ok", "reason": "",
              "probes": {"fabric": {"outcome": "ok"}}, "facts": {}} for h in f.hosts]
    doc = {"schema_version": 1, "run": {"id": "r1"}, "hosts": hosts, "classes": [],
           "findings": [x.to_dict() for x in findings], "silenced": []}
    fleet_ = FleetResult.from_document(doc)
    plan = remedy.drain_plan(fleet_, max_share=1.0)
    return {hp.host for hp in plan.hosts}, render_drain(fleet_, plan)


def assert_costs_the_liar_only(f: Fleet, liar: str, findings: list[Finding], named: bool = True) -> None:
    innocent = [x for x in findings if x.host != liar]
    # no peer gets any finding: not a host fault, not a path or rail of the fabric on the liar's word
    assert innocent == [], [(x.id, x.host, x.subject) for x in innocent]
    assert not [x for x in findings if is_fabric(x)]
    assert not [x for x in findings if x.severity is Severity.FAIL]
    taken, text = drained(f, findings)
    assert taken == set() and "scontrol" not in text
    if named:
        mine = [x for x in findings if x.id == DISTRUSTED]
        assert [x.host for x in mine] == [liar] and mine[0].severity is Severity.WARN
        assert mine[0].evidence and all(len(line) <= 400 and "\n" not in line for line in mine[0].evidence)


# ------------------------------------------------------------------------------- impossible figures

# test -> what the liar prints for every pair it is in (each a figure no port or wire can give)
IMPOSSIBLE: dict[str, tuple[str, Callable[[Fleet, dict[str, Any]], str]]] = {
    "bandwidth over its line rate": ("ib_write_bw", lambda f, rec: bw_text(1000.0, rec["peer_lid"])),
    "bandwidth past any port": ("ib_write_bw", lambda f, rec: bw_text(3100.0, rec["peer_lid"])),
    "bandwidth just over its line rate": ("ib_write_bw", lambda f, rec: bw_text(LINE * 1.05, rec["peer_lid"])),
    "negative bandwidth": ("ib_write_bw", lambda f, rec: bw_rows("-5.00", rec["peer_lid"])),
    "NaN bandwidth": ("ib_write_bw", lambda f, rec: bw_rows("nan", rec["peer_lid"])),
    "infinite bandwidth": ("ib_write_bw", lambda f, rec: bw_rows("inf", rec["peer_lid"])),
    "a message size never planned": ("ib_write_bw", lambda f, rec: bw_rows("120.00", rec["peer_lid"], 1 << 20)),
    "latency 0": ("ib_write_lat", lambda f, rec: lat_text("0.00", rec["peer_lid"])),
    "latency of 10 ns": ("ib_write_lat", lambda f, rec: lat_text("0.01", rec["peer_lid"])),
    "negative latency": ("ib_write_lat", lambda f, rec: lat_text("-1.20", rec["peer_lid"])),
    "latency for a size never planned": ("ib_write_lat", lambda f, rec: lat_text("9.00", rec["peer_lid"], 4096)),
}


@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("case", sorted(IMPOSSIBLE))
def test_an_impossible_figure_names_its_sender_and_nobody_else(case: str, n: int) -> None:
    f = fleet(n)
    liar = f.hosts[3]
    test, text = IMPOSSIBLE[case]
    lie(f, liar, test, lambda rec: text(f, rec))
    findings = judged(f)
    assert_costs_the_liar_only(f, liar, findings)
    # none of its figures is a sample the fleet is judged on (the peers' ends of its pairs are)
    loc = locate({h: normalize(d) for h, d in f.raw.items()})
    assert not [s for s in loc.samples if s.reporter == liar and s.test == test and s.value is not None]


# ------------------------------------------------------------------------------- under-reporting

@dataclass(frozen=True)
class Slander:
    """A liar reporting `bw` (Gb/s) for its pairs with the hosts `victims` picks."""

    bw: float
    victims: Callable[[Fleet, str], set[str]]
    named: bool  # the evidence is enough to name the liar (it disagrees with several peers)


SLANDERS: dict[str, Slander] = {
    "one victim it dials, far below the floor": Slander(100.0, lambda f, liar: {f.dialled_by(liar)}, False),
    "one victim it dials, just below the floor": Slander(350.0, lambda f, liar: {f.dialled_by(liar)}, False),
    "one victim, zero": Slander(0.0, lambda f, liar: {f.dialled_by(liar)}, False),
    "every peer": Slander(100.0, lambda f, liar: set(f.hosts) - {liar}, True),
    "half the fleet": Slander(200.0, lambda f, liar: set(f.hosts[: len(f.hosts) // 2]) - {liar}, True),
    "two victims, just below the floor": Slander(352.0, lambda f, liar: set(f.hosts[:2]), True),
}


@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("case", sorted(SLANDERS))
def test_a_host_calling_its_peers_slow_gets_no_peer_blamed(case: str, n: int) -> None:
    """The liar prints a slow figure for every one of its pair tests (client and server, both rails)
    with its victims; their ends of the same transfers print the healthy figure.  The victims are
    not failed, not drained, not charged a path; the rail is not charged."""
    f = fleet(n)
    liar = f.hosts[5]
    s = SLANDERS[case]
    victims = s.victims(f, liar)
    lie(f, liar, "ib_write_bw", lambda rec: bw_text(s.bw, rec["peer_lid"]), lambda rec: rec["peer"] in victims)
    findings = judged(f)
    assert_costs_the_liar_only(f, liar, findings, named=s.named)
    if not s.named:
        assert findings == []  # one peer's word against one: neither end is named


def test_the_slandered_pairs_are_left_unjudged_and_said_so() -> None:
    f = fleet(8)
    liar = f.hosts[5]
    lie(f, liar, "ib_write_bw", lambda rec: bw_text(100.0, rec["peer_lid"]))
    loc = locate({h: normalize(d) for h, d in f.raw.items()})
    disputed = [s for s in loc.samples if s.disputed]
    assert len(disputed) == (len(f.hosts) - 1) * RAILS and all(liar in s.pair for s in disputed)
    assert all(s.bad is None and "disagree" in (s.error or "") for s in disputed)
    assert set(loc.distrusted) == {liar}


def test_a_real_fault_both_ends_print_is_still_its_hosts() -> None:
    """The two ends agree that every pair of one port is slow: that port is blamed as before
    (the disagreement rule costs no real fault)."""
    f = fleet(8)
    bad = f.hosts[2]
    for h in f.hosts:
        lie(f, h, "ib_write_bw", lambda rec: bw_text(150.0, rec["peer_lid"]),
            lambda rec, h=h: rec["rail"] == 0 and bad in (h, rec["peer"]))
    findings = judged(f)
    assert {(x.id, x.host) for x in findings} == {(rules.fabric.HCA_SLOW.id, bad)}
    assert drained(f, findings)[0] == {bad}


# ------------------------------------------------------------------------------- answering for another host

def test_a_host_naming_another_port_as_its_peers_is_not_taken() -> None:
    """The liar says its peers' ports are another HCA (their rail-1 port on rail 0, a name nobody
    has): each port is named by its own host, so the floors and the names stay the peers' own."""
    for forged in ("mlx5_1", "mlx5_9", "../../etc", ""):
        f = fleet(8)
        liar = f.hosts[4]
        for rec in f.raw[liar]["waves"][0]["data"]["results"]:
            rec["peer_hca"] = forged
        lie(f, liar, "ib_write_bw", lambda rec: bw_text(100.0, rec["peer_lid"]))
        loc = locate({h: normalize(d) for h, d in f.raw.items()})
        for s in loc.samples:
            for host, hca in ((s.a, s.a_hca), (s.b, s.b_hca)):
                assert hca == f"mlx5_{s.rail}", (forged, host, hca)
        assert set(loc.distrusted) == {liar}
