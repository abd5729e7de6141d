"""The fabric plan (engine/fabric_plan.py, pure): tournament rounds, rails, re-pairing, ports, the spec."""

from __future__ import annotations

import itertools

import pytest

from orchestrator.api.playbook import PlaybookError, parse_playbook
from orchestrator.engine.fabric_plan import (
    PORT_SPAN,
    FabricSpec,
    FabricSpecError,
    Member,
    PortLayout,
    Rail,
    circle_rounds,
    plan_pairs,
    plan_repair,
    probe_steps,
    spec_from_mapping,
    tournament,
    wave_seconds,
)


def _members(n: int, rails: int, missing: dict[str, set[int]] | None = None) -> list[Member]:
    missing = missing or {}
    return [Member(f"h{i:02d}", f"10.0.0.{i}", tuple(Rail(r, f"mlx5_{r}", 1, f"10.{r}.0.{i}")
                                                      for r in range(rails) if r not in missing.get(f"h{i:02d}", set())))
            for i in range(n)]


@pytest.mark.parametrize("n", range(2, 18))
def test_the_circle_method_meets_every_pair_once_and_nobody_twice_a_round(n: int) -> None:
    names = [f"h{i}" for i in range(n)]
    rounds = circle_rounds(names)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    met = [frozenset(p) for r in rounds for p in r]
    assert sorted(met, key=sorted) == sorted((frozenset(p) for p in itertools.combinations(names, 2)), key=sorted)
    for r in rounds:
        busy = [h for p in r for h in p]
        assert len(busy) == len(set(busy))


def test_fewer_rounds_sample_peers_from_across_the_fleet_the_same_way_each_time() -> None:
    names = [f"h{i:03d}" for i in range(64)]
    a, b = tournament(names, 5, "seed"), tournament(list(reversed(names)), 5, "seed")
    assert a == b and len(a) == 5
    peers = {h: {q for r in a for p in r if h in p for q in p if q != h} for h in names}
    assert all(len(p) == 5 for p in peers.values())
    # shuffled: h000's peers are not just its neighbours in name order
    assert peers["h000"] - {f"h{i:03d}" for i in range(1, 6)} != set()


def test_each_hca_carries_one_pair_a_round_and_a_host_without_a_rail_sits_it_out() -> None:
    members = _members(6, 3, missing={"h02": {1}})
    sched = plan_pairs(members, FabricSpec(), "x")
    assert sched.rounds == 5
    for rnd in range(sched.rounds):
        used = [(h, s.rail) for s in sched.steps if s.round == rnd for h in (s.server, s.client)]
        assert len(used) == len(set(used))
    assert not [s for s in sched.steps if s.rail == 1 and "h02" in (s.server, s.client)]
    assert len(sched.pairs()) == 15 * 3 - 5  # h02 meets nobody on rail 1
    # servers alternate: every host listens in some round
    assert {s.server for s in sched.steps} == {m.name for m in members}


def test_a_host_sharing_no_rail_is_skipped_with_the_reason() -> None:
    members = [*_members(3, 2), Member("lonely", "10.9.9.9", (Rail(7, "mlx5_7", 1, None),))]
    sched = plan_pairs(members, FabricSpec(), "x")
    assert sched.skipped == {"lonely": "no InfiniBand/RoCE port shared with another host"}
    assert all("lonely" not in (s.server, s.client) for s in sched.steps)


def test_re_pairing_meets_suspects_with_cleared_hosts_they_have_not_met_within_the_bound() -> None:
    members = _members(8, 2)
    first = plan_pairs(members, FabricSpec(rounds=3), "x")
    met = first.pairs()
    sus = {0: ["h01"], 1: ["h01", "h05"]}
    refs = {0: ["h00", "h02", "h03", "h04", "h06"], 1: ["h02", "h03", "h04", "h06", "h07"]}
    extra = plan_repair(members, sus, refs, set(met), FabricSpec(), first.rounds, 2)
    assert 1 <= extra.rounds <= 2 and extra.first_round == 3
    for s in extra.steps:
        assert s.extra and s.client in sus[s.rail] and s.server in refs[s.rail]
        assert (min(s.server, s.client), max(s.server, s.client), s.rail) not in met
    for rnd in range(3, 3 + extra.rounds):
        used = [(h, s.rail) for s in extra.steps if s.round == rnd for h in (s.server, s.client)]
        assert len(used) == len(set(used))
    assert plan_repair(members, sus, refs, set(met), FabricSpec(), 3, 0).steps == []


def test_a_host_is_handed_its_steps_with_ports_that_differ_between_rails_tests_and_rounds() -> None:
    members = _members(4, 2)
    spec = FabricSpec(round_s=10)
    sched = plan_pairs(members, spec, "x")
    by_name = {m.name: m for m in members}
    steps = probe_steps("h00", sched, spec, by_name)
    assert [s["round"] for s in steps] == sorted(s["round"] for s in steps)
    assert len(steps) == 3 * 2
    ports_of_round: dict[int, set[int]] = {}
    for s in steps:
        assert s["end_s"] - s["start_s"] == 10
        assert len(s["ports"]) == len(spec.tests)
        ports_of_round.setdefault(s["round"], set()).update(s["ports"])
        assert s["connect"] == by_name[s["peer"] if s["role"] == "client" else "h00"].rail(s["rail"]).address
    assert all(len(p) == 2 * len(spec.tests) for p in ports_of_round.values())
    for a, b in zip(sorted(ports_of_round), sorted(ports_of_round)[1:]):
        assert not ports_of_round[a] & ports_of_round[b]  # a late client of round a finds nobody in round b
    assert wave_seconds(sched, spec) == 30
    assert all(s["not_before_s"] < 0 for s in steps)  # three rounds: no round shares its ports, none waits


@pytest.mark.parametrize(("hosts", "rails", "tests"), [(64, 64, 3), (64, 48, 2), (40, 2, 1)])
def test_rounds_on_the_same_ports_never_overlap_in_time(hosts: int, rails: int, tests: int) -> None:
    """A client of one round can only reach servers of its own: two rounds on the same port are
    apart by more than the window a round may start early, with two windows to spare."""
    members = _members(hosts, rails)
    spec = FabricSpec(tests=("ib_write_bw", "ib_write_lat", "ib_send_bw")[:tests], round_s=30, rails=rails)
    sched = plan_pairs(members, spec, "x")
    layout = PortLayout.of(sched, tests)
    assert layout.width == rails * tests
    assert layout.blocks < sched.rounds or tests == 1  # the ports do repeat (not with one test of two rails)
    by_name = {m.name: m for m in members}
    listening: dict[tuple[str, int], list[tuple[float, float, str]]] = {}  # address:port -> (from, to, server)
    for m in members[:20]:
        for s in probe_steps(m.name, sched, spec, by_name):
            assert s["start_s"] - s["not_before_s"] == (layout.blocks - 3) * spec.round_s or s["not_before_s"] < 0
            for port in s["ports"]:
                assert spec.port_base <= port < spec.port_base + PORT_SPAN
                if s["role"] == "server":
                    listening.setdefault((s["bind"], port), []).append((max(0.0, s["not_before_s"]), s["end_s"], m.name))
    clients = [(m.name, s) for m in members for s in probe_steps(m.name, sched, spec, by_name) if s["role"] == "client"]
    for name, s in clients:
        for port in s["ports"]:
            for start, end, server in listening.get((s["connect"], port), []):
                # less than two windows apart, either way round: a host's clock may be off by that
                near = max(0.0, s["not_before_s"]) < end + 2 * spec.round_s and start < s["end_s"] + 2 * spec.round_s
                assert not near or server == s["peer"], (name, s["round"], port, server)


@pytest.mark.parametrize(("raw", "message"), [
    ({"tests": ["ib_read_lat"]}, "fabric.tests"),
    ({"rounds": 2}, "fabric.rounds"),
    ({"round_s": 0}, "fabric.round_s"),
    ({"bogus": 1}, "unknown key 'bogus'"),
    ({"use_cuda": "maybe"}, "fabric.use_cuda"),
    ({"nccl": {"ops": ["broadcast"]}}, "fabric.nccl.ops"),
    ({"nccl": {"min_bytes": 1 << 30, "max_bytes": 1 << 20}}, "above max_bytes"),
    ({"nccl": "yes"}, "fabric.nccl must be"),
    ({"iters": True}, "fabric.iters"),
])
def test_a_bad_fabric_spec_names_its_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(FabricSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec_from_mapping(raw)


def test_the_spec_defaults_and_round_trips_through_its_dict() -> None:
    spec = spec_from_mapping(True)
    assert spec == FabricSpec() and spec.rounds is None and spec.nccl.enabled
    d = spec.to_dict()
    assert d["tests"] == ["ib_write_bw", "ib_write_lat"] and d["nccl"]["floor_min_bytes"] == 64 << 20
    assert spec_from_mapping({"nccl": False}).nccl.enabled is False
    assert spec_from_mapping({"rounds": 4, "use_cuda": False}).use_cuda == "never"


def test_a_playbook_asks_for_the_fabric_and_a_passive_play_cannot() -> None:
    book = parse_playbook("- name: f\n  hosts: all\n  fabric: {round_s: 5}\n", "f.yml", {"host": True}, ())
    assert book.plays[0].fabric is not None and book.plays[0].fabric.round_s == 5 and book.plays[0].probes == ()
    with pytest.raises(PlaybookError, match=r"f.yml:3: .*passive_only"):
        parse_playbook("- name: f\n  hosts: all\n  fabric: true\n  passive_only: true\n", "f.yml", {"host": True}, ())
    with pytest.raises(PlaybookError, match=r"fabric.rounds"):
        parse_playbook("- name: f\n  hosts: all\n  fabric: {rounds: 1}\n", "f.yml", {"host": True}, ())
    with pytest.raises(PlaybookError, match="no 'probes' list"):
        parse_playbook("- name: f\n  hosts: all\n", "f.yml", {"host": True}, ())


def test_the_nightly_audit_never_runs_the_fabric() -> None:
    from orchestrator.api.playbook import find_playbook, load_playbook

    for name in ("audit", "quick", "premigration"):
        book = load_playbook(find_playbook(name))
        assert all(p.fabric is None and "fabric" not in p.probe_names for p in book.plays), name
    fabric = load_playbook(find_playbook("fabric"))
    assert fabric.plays[0].fabric is not None and not fabric.plays[0].passive_only
