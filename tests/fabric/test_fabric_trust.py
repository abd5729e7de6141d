"""Fabric evidence is checked before it is believed (issue 45, item 3).

A host's fabric answers speak for the host alone: only results for the rounds, peers, roles and
tests the controller planned are taken, each once; a member's record of a communicator is judged
with the other members'; a rail address is an address before it reaches a peer's command line;
a communicator that never ran a collective is not judged, never passed; a host whose part did not
finish is `incomplete` with the exit status the table gives.  Each hostile input is a class here:
the tests run the real normalizer, the real fleet check and the real probe process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.fabric import HostPart, _member, unfinished
from orchestrator.api.fabric_nccl import said_id_problem
from orchestrator.api.session import stopped_counts
from orchestrator.engine.envelope import parse_envelope
from orchestrator.engine.fabric_plan import FabricSpec, address_problem, tournament
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.payload import build_script
from orchestrator.engine.runner import HostResult, ProbeResult
from orchestrator.facts.normalize.fabric import normalize
from orchestrator.inventory.model import Host
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.checks.fabric import ANSWER_REFUSED, NCCL_IDS, NCCL_WRONG, check_fabric, unjudged
from orchestrator.verdict.findings import Finding, Kind, Severity
from orchestrator.verdict.health import Health, decide

ROOT = Path(__file__).resolve().parents[2]
HOSTS = [f"node{i:02d}" for i in range(1, 7)]  # 6 hosts: a 5-round plan
RAILS = 2
LINE = 400.0
HEALTHY = 386.0  # 96.5 % of the line rate
VICTIM, ATTACKER = "node03", "node06"
VICTIM_BW = 372.0  # 93 % of the line (over the 90 % floor), 96 % of its healthy peers


def _lid(host: str, rail: int) -> int:
    return 1 + HOSTS.index(host) * 8 + rail if host in HOSTS else 0x7f


def bw_text(gbps: float, remote_lid: int) -> str:
    """ib_write_bw --report_gbits output as perftest prints it (the client's or the server's)."""
    return (" " + "-" * 80 + "\n                    RDMA_Write BW Test\n"
            " Dual-port       : OFF\t\tDevice         : mlx5_0\n Link type       : IB\n " + "-" * 80 + "\n"
            " local address: LID 0x01 QPN 0x038d PSN 0xb5f720 RKey 0x1fffcd VAddr 0x007da37cbc1000\n"
            f" remote address: LID {remote_lid:#04x} QPN 0x0561 PSN 0xec3d98 RKey 0x1fffce VAddr 0x00773e257be000\n"
            " " + "-" * 80 + "\n"
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            f" 65536      5000             {gbps:.2f}            {gbps:.2f}   \t\t   0.700000\n " + "-" * 80 + "\n")


def result(rnd: int, rail: int, role: str, me: str, peer: str, gbps: float, test: str = "ib_write_bw") -> dict[str, Any]:
    return {"round": rnd, "rail": rail, "hca": f"mlx5_{rail}", "role": role, "peer": peer, "peer_hca": f"mlx5_{rail}",
            "peer_lid": _lid(peer, rail), "test": test, "extra": False, "exit": 0, "timed_out": False,
            "stdout": bw_text(gbps, _lid(peer, rail)), "stderr": "", "error": None}


def raw_fleet(bw: Callable[[str, str], float] | None = None) -> dict[str, dict[str, Any]]:
    """host -> its raw `fabric` envelope data as api/fabric.py stores it: discovery, the plan with
    its steps, one wave's results (a full round robin, every rail, ib_write_bw)."""
    bw = bw or (lambda a, b: VICTIM_BW if VICTIM in (a, b) else HEALTHY)
    spec = FabricSpec(tests=("ib_write_bw",)).to_dict()
    raw: dict[str, dict[str, Any]] = {}
    for h in HOSTS:
        hcas = [{"hca": f"mlx5_{r}", "port": 1, "state": "ACTIVE", "link_layer": "InfiniBand",
                 "rate": "400 Gb/sec (4X NDR)", "rate_gbps": LINE, "width": 4, "lid": hex(_lid(h, r)),
                 "address": f"10.{r}.0.{HOSTS.index(h) + 1}"} for r in range(RAILS)]
        raw[h] = {"discover": {"hcas": hcas, "gpus": [], "perftest": {"tools": {"ib_write_bw": "/usr/bin/ib_write_bw"}}},
                  "skipped": None, "nccl": [], "errors": [], "refused": [],
                  "plan": {"hosts": len(HOSTS), "rails": RAILS, "rounds": len(HOSTS) - 1, "extra_rounds": 0,
                           "round_s": 30.0, "budget_s": 1800.0, "tests": ["ib_write_bw"], "spec": spec,
                           "rail_of": {f"mlx5_{r}": r for r in range(RAILS)}, "steps": []},
                  "waves": [{"wave": 1, "outcome": "ok", "reason": "", "data": {"results": []}}]}
    for k, pairs in enumerate(tournament(HOSTS, None, "trust")):
        for a, b in pairs:
            for r in range(RAILS):
                for me, peer, role in ((a, b, "client"), (b, a, "server")):
                    raw[me]["plan"]["steps"].append([k, r, role, peer, f"mlx5_{r}"])
                    raw[me]["waves"][0]["data"]["results"].append(result(k, r, role, me, peer, bw(a, b)))
    return raw


def judged(raw: dict[str, dict[str, Any]], outcomes: dict[str, str] | None = None) -> list[Finding]:
    views = [HostView(h, {"fabric": normalize(d)}, {"fabric": (outcomes or {}).get(h, "ok")}) for h, d in raw.items()]
    return list(check_fabric(views))


def _planned_peer(raw: dict[str, dict[str, Any]], host: str, rnd: int) -> str:
    return next(s[3] for s in raw[host]["plan"]["steps"] if s[0] == rnd)


# Each builds the attacker's invented results (at 470 Gb/s, over its line rate's every peer) from the plan.
def _rounds_outside(raw: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    others = [h for h in HOSTS if h not in (ATTACKER, VICTIM)]
    return [result(rnd, r, "client", ATTACKER, others[rnd % len(others)], 470.0)
            for rnd in range(100, 140) for r in range(RAILS)]


def _wrong_peers(raw: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [result(k, r, "client", ATTACKER, p, 470.0) for k in range(len(HOSTS) - 1) for r in range(RAILS)
            for p in HOSTS if p not in (ATTACKER, VICTIM, _planned_peer(raw, ATTACKER, k))]


def _wrong_roles(raw: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [result(s[0], s[1], "server" if s[2] == "client" else "client", ATTACKER, s[3], 470.0)
            for s in raw[ATTACKER]["plan"]["steps"]]


def _unknown_peers(raw: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [result(k, r, "client", ATTACKER, f"ghost{i}", 470.0) for k in range(len(HOSTS) - 1)
            for r in range(RAILS) for i in range(8)]


def _duplicates(raw: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [result(s[0], s[1], s[2], ATTACKER, s[3], 470.0) for s in raw[ATTACKER]["plan"]["steps"] for _ in range(8)]


def _unplanned_test(raw: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [result(s[0], s[1], s[2], ATTACKER, s[3], 470.0, "ib_send_bw") for s in raw[ATTACKER]["plan"]["steps"]]


def _self_pairs(raw: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [result(rnd, r, "client", ATTACKER, ATTACKER, 470.0) for rnd in range(len(HOSTS) - 1)
            for r in range(RAILS) for _ in range(1)]


HOSTILE_NAMES = ["node01\n-x", "{{ lookup('pipe','touch PWNED') }}", "\x1b[31mnode02", "node0\u2028x", "-x", "*",
                 "n" * 5000]


def _hostile_names(raw: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [result(k, 0, "client", ATTACKER, name, 470.0) for k in range(len(HOSTS) - 1) for name in HOSTILE_NAMES]


INVENTED = {"rounds outside the plan": _rounds_outside, "peers it did not meet": _wrong_peers,
            "roles it did not have": _wrong_roles, "hosts outside the fleet": _unknown_peers,
            "a result many times": _duplicates, "a test the plan did not ask for": _unplanned_test,
            "itself as its peer": _self_pairs, "hostile peer names": _hostile_names}


def test_an_honest_fleet_with_a_slightly_slower_host_has_no_finding() -> None:
    assert [f.id for f in judged(raw_fleet())] == []


@pytest.mark.parametrize("invent", list(INVENTED.values()), ids=list(INVENTED))
def test_results_outside_the_plan_are_dropped_and_named_on_their_sender_only(invent: Callable[..., Any]) -> None:
    raw = raw_fleet()
    added = invent(raw)
    raw[ATTACKER]["waves"][0]["data"]["results"].extend(added)
    findings = judged(raw)
    # nobody is failed: the healthy victim at 96 % of its peers keeps its verdict, so does everyone else
    assert [(f.id, f.host) for f in findings if f.severity is Severity.FAIL] == []
    refused = [f for f in findings if f.id == ANSWER_REFUSED]
    assert [f.host for f in refused] == [ATTACKER]
    assert refused[0].severity is Severity.WARN and refused[0].evidence
    assert all("\n" not in line and "\u2028" not in line and len(line) <= 300 for line in refused[0].evidence)
    assert {f.host for f in findings} == {ATTACKER}
    # the facts keep what the plan asked, each step's test once
    kept = normalize(raw[ATTACKER])["measurements"]
    assert len(kept) == len(raw[ATTACKER]["plan"]["steps"])
    assert all(m["value"] is not None and m["value"] < 400 for m in kept)


def test_the_framing_round_would_have_moved_the_fleet_median() -> None:
    """The attack of the issue: 80 invented results at 470 Gb/s for rounds 100-139.  Without the
    plan's check they are most of the samples; with it none of them is a sample."""
    raw = raw_fleet()
    raw[ATTACKER]["waves"][0]["data"]["results"].extend(_rounds_outside(raw))
    from orchestrator.verdict.fabric_locate import locate

    facts = {h: normalize(d) for h, d in raw.items()}
    loc = locate(facts)
    assert len(_rounds_outside(raw)) == 80
    assert max(s.round for s in loc.samples) == len(HOSTS) - 2 and max(s.value or 0 for s in loc.samples) < 400
    assert loc.faults == []


def test_a_stored_run_without_plan_steps_still_bounds_rounds_and_duplicates() -> None:
    """Runs stored before plans named their steps: rounds past the plan's count and repeats are
    still refused (peers outside the qualification too, by the localisation)."""
    raw = raw_fleet()
    for d in raw.values():
        del d["plan"]["steps"]
    raw[ATTACKER]["waves"][0]["data"]["results"].extend(_rounds_outside(raw) + _duplicates(raw_fleet()))
    findings = judged(raw)
    assert [(f.id, f.host) for f in findings] == [(ANSWER_REFUSED, ATTACKER)]


# ------------------------------------------------------------------------------- NCCL: members' word


def _group(name: str, members: list[str], wrong: int | None, results: int = 2, busbw: float = 40.0) -> dict[str, Any]:
    sizes = [1 << 18, 1 << 20, 1 << 22, 1 << 24][:results]
    return {"group": name, "kind": "rail", "rail": 0, "hca": "mlx5_0", "members": members, "ranks": len(members),
            "transport": "NET/IB/GDRDMA", "gdr": True, "busbw_gbps": busbw, "wrong": wrong, "error": None,
            "results": [{"op": "all_reduce", "size_bytes": s, "count": s // 4, "dtype": "float", "time_us": 10.0,
                         "algbw_gbps": busbw, "busbw_gbps": busbw, "wrong": wrong} for s in sizes]}


def _nccl_views(records: dict[str, dict[str, Any]]) -> list[HostView]:
    raw = raw_fleet(lambda a, b: HEALTHY)
    spec = raw[HOSTS[0]]["plan"]["spec"]
    spec["nccl"].update(ops=["all_reduce"], min_bytes=1 << 18, max_bytes=1 << 20)  # 2 results a rank
    views = []
    for h in HOSTS:
        facts = normalize(raw[h])
        facts["plan"]["spec"] = spec  # type: ignore[index]
        facts["nccl"] = [records[h]] if h in records else []
        views.append(HostView(h, {"fabric": facts}, {"fabric": "ok"}))
    return views


LIARS = {
    "padded: every element wrong, one result more": lambda m: _group("rail0", m, 1 << 20, results=3),
    "wrong elements, the planned count": lambda m: _group("rail0", m, 7),
    "wrong elements, a short record": lambda m: _group("rail0", m, 3, results=1),
    "a far higher bus bandwidth, padded": lambda m: _group("rail0", m, None, results=4, busbw=900.0),
}


@pytest.mark.parametrize("liar", list(LIARS.values()), ids=list(LIARS))
def test_one_members_record_never_decides_for_the_others(liar: Callable[[list[str]], dict[str, Any]]) -> None:
    members = HOSTS[:4]
    records = {h: _group("rail0", members, 0) for h in members}
    records[members[2]] = liar(members)
    findings = [f for f in check_fabric(_nccl_views(records)) if f.id.startswith("fabric.")]
    honest = set(members) - {members[2]}
    assert not [f for f in findings if f.host in honest], [(f.id, f.host) for f in findings]
    # the member whose record stands alone is named for it: its own rank's data, or a record longer than the plan
    assert {f.host for f in findings} == {members[2]}
    assert {f.id for f in findings} <= {NCCL_WRONG, ANSWER_REFUSED}
    assert all("member record" in " ".join(f.evidence) for f in findings if f.id == NCCL_WRONG)


def test_corruption_most_members_saw_is_raised_on_every_member() -> None:
    members = HOSTS[:4]
    records = {h: _group("rail0", members, 5 if h != members[0] else 0) for h in members}
    findings = [f for f in check_fabric(_nccl_views(records)) if f.id == NCCL_WRONG]
    assert sorted(f.host for f in findings) == members
    assert "3 of 4 member record(s) report wrong elements" in findings[0].evidence[0]


# ------------------------------------------------------------------------------- addresses

HOSTILE_ADDRESSES = ["-x", "--run_infinitely", "-d", "a;b", "$(x)", "`id`", "a b", "", "x" * 300, "nöde01",
                     "node\u202e01", "10.0.0.1\n-x", "fe80::1%$(x)", "a..b", "-a.b", "a-.b", "1.2.3", "*", "a,b"]
GOOD_ADDRESSES = ["10.1.0.5", "127.20.0.3", "fe80::2:c903:3:1a2b", "fe80:0000:0000:0000:0002:c903:0003:1a2b",
                  "node01", "node-01.ib.example.", "a" * 63]


@pytest.mark.parametrize("text", HOSTILE_ADDRESSES)
def test_a_rail_address_that_is_no_address_is_refused(text: str) -> None:
    assert address_problem(text) is not None


@pytest.mark.parametrize("text", GOOD_ADDRESSES)
def test_addresses_hosts_use_are_taken(text: str) -> None:
    assert address_problem(text) is None


@pytest.mark.parametrize("text", HOSTILE_ADDRESSES)
def test_a_host_saying_a_hostile_address_loses_that_port_and_is_named(text: str) -> None:
    part = HostPart(Host(name="node06", vars={"ansible_host": "127.0.0.6"}))
    part.discover = {"hcas": [{"hca": "mlx5_0", "port": 1, "state": "ACTIVE", "lid": "0x31", "address": text},
                              {"hca": "mlx5_1", "port": 1, "state": "ACTIVE", "lid": "0x32", "address": "10.1.0.6"}]}
    member = _member(part)
    assert [(r.index, r.hca, r.address) for r in member.rails] == [(1, "mlx5_1", "10.1.0.6")] or text == ""
    if text:  # an empty address is no claim: the host's own address stands in
        assert len(part.refused) == 1 and "mlx5_0" in part.refused[0]
        assert "\n" not in part.refused[0] and "\u202e" not in part.refused[0]
        assert unfinished(part.data(), False)[0] is Outcome.INVALID_OUTPUT


FAKE_TOOL = """#!{python}
import json, sys
with open({log!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
print("fake ib_write_bw: no device")
sys.exit(1)
"""


def _pairs_run(tmp_path: Path, connects: list[str]) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """The real fabric probe, role pairs, one client step per address, with a tool that logs its argv."""
    log = tmp_path / "argv.log"
    tool = tmp_path / "usr/bin/ib_write_bw"
    tool.parent.mkdir(parents=True)
    tool.write_text(FAKE_TOOL.format(python=sys.executable, log=str(log)))
    tool.chmod(0o755)
    steps = [{"round": i, "rail": 0, "hca": "mlx5_0", "ib_port": 1, "role": "client", "peer": "node02",
              "peer_hca": "mlx5_0", "connect": c, "ports": [18600 + i], "start_s": 0.0, "end_s": 0.5,
              "not_before_s": 0.0} for i, c in enumerate(connects)]
    args = {"role": "pairs", "root": str(tmp_path), "steps": steps, "tests": ["ib_write_bw"], "iters": 5}
    proc = subprocess.run([sys.executable, "-I", "-S", "-"], input=build_script("fabric", args, 30.0),
                          capture_output=True, timeout=60)
    env = parse_envelope(proc.stdout, "fabric")
    ran = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return list(env.data["results"]), ran


def test_the_probe_never_puts_a_hostile_address_on_a_command_line(tmp_path: Path) -> None:
    results, ran = _pairs_run(tmp_path, [*HOSTILE_ADDRESSES[:12], "10.0.0.2"])
    assert all(argv[-2:] == ["--", "10.0.0.2"] for argv in ran) and ran
    by_connect = {r["round"]: r for r in results}
    for i, _text in enumerate(HOSTILE_ADDRESSES[:12]):
        assert by_connect[i]["error"] == "the server address is not an IP address or host name: not run"
        assert "argv" not in by_connect[i]


# ------------------------------------------------------------------------------- NCCL bootstrap

FORGED_IDS: list[Any] = ["", "00" * 127, "00" * 129, "zz" * 128, "AB" * 128, "--run_infinitely", None, 12,
                         ["00"] * 128, "0" * 255 + "\n"]


@pytest.mark.parametrize("uid", FORGED_IDS)
def test_rank_zero_saying_no_nccl_id_starts_no_other_rank(uid: Any) -> None:
    assert said_id_problem({"nccl_id": uid}) is not None


def test_a_real_nccl_id_is_taken() -> None:
    assert said_id_problem({"nccl_id": "0a" * 128}) is None


def _idle_nccl(error: str | None) -> dict[str, Any]:
    return {**_group("rail0", HOSTS[:4], None, results=0), "busbw_gbps": None, "error": error, "transport": None}


@pytest.mark.parametrize("error", ["failed: ncclCommInitRank: unhandled system error", None,
                                   "timeout: no answer within 60 s"])
def test_a_communicator_that_never_ran_a_collective_is_not_judged(error: str | None) -> None:
    facts = normalize(raw_fleet()[HOSTS[0]])
    facts["nccl"] = [_idle_nccl(error)]
    why = unjudged({"fabric": facts})
    assert set(NCCL_IDS) <= set(why) and all("no NCCL collective ran" in why[i] for i in NCCL_IDS)


def test_a_forged_id_leaves_every_member_incomplete_not_passed() -> None:
    """Rank 0 said a well-formed but forged id: every member's process ran and none ran a
    collective.  Each member's part is failed (exit 4), never ok."""
    data = {"discover": {}, "waves": [], "nccl": [{"group": "rail0", "outcome": "ok", "reason": "",
                                                    "data": {"results": [], "errors": [{"where": "init",
                                                                                        "message": "bootstrap"}]}}]}
    outcome, reason = unfinished(data, False)
    assert outcome is Outcome.FAILED and "no collective ran" in reason


# ------------------------------------------------------------------------------- outcomes and health

UNFINISHED = {
    "timed out": ({"waves": [{"wave": 1, "outcome": "timeout", "reason": "no answer within 80 s"}]}, Outcome.TIMEOUT),
    "flooding": ({"waves": [{"wave": 1, "outcome": "invalid_output",
                             "reason": "probe output exceeded the 67108864-byte cap; output discarded"}]},
                 Outcome.INVALID_OUTPUT),
    "failed": ({"waves": [{"wave": 1, "outcome": "failed", "reason": "exit 1"}]}, Outcome.FAILED),
    "NCCL timed out": ({"nccl": [{"group": "all", "outcome": "timeout", "reason": "hung"}]}, Outcome.TIMEOUT),
    "refused address": ({"refused": ["mlx5_0: the rail address it said, '-x', is no address"]},
                        Outcome.INVALID_OUTPUT),
}


@pytest.mark.parametrize(("data", "outcome"), list(UNFINISHED.values()), ids=list(UNFINISHED))
def test_a_host_whose_part_did_not_finish_is_incomplete_and_exit_4(data: dict[str, Any], outcome: Outcome) -> None:
    got, reason = unfinished({"discover": {}, "waves": [], "nccl": [], **data}, False)
    assert got is outcome and reason and "None" not in reason
    assert got.is_problem  # exit status 4 (cli/exitcodes.py: for_fleet)
    warn = Finding(id="fabric.step.failed", severity=Severity.WARN, kind=Kind.UNKNOWN, host="h",
                   subject="fabric steps", message="m")
    health = decide(got.value, reason, {"fabric": f"{got.value} ({reason})"}, [warn])
    assert health.state is Health.INCOMPLETE


def test_a_host_of_an_honest_finished_part_is_ok() -> None:
    assert unfinished(raw_fleet()[HOSTS[0]], False) == (Outcome.OK, "")


def test_a_stopped_qualification_counts_its_hosts_as_cut_off() -> None:
    assert unfinished(raw_fleet()[HOSTS[0]], True)[0] is Outcome.INTERRUPTED
    hosts = [HostResult(Host(name=h), {"fabric": ProbeResult("fabric", *unfinished(raw_fleet()[h], True))})
             for h in HOSTS[:4]]
    assert stopped_counts(hosts) == (0, 4, 0)


def test_peers_of_a_timed_out_host_are_not_blamed() -> None:
    """node06's wave timed out before it answered: its peers' steps with it have no figure (the
    server waited in vain); they are judged on the rest, and nobody is failed for it."""
    raw = raw_fleet(lambda a, b: HEALTHY)
    raw[ATTACKER]["waves"] = [{"wave": 1, "outcome": "timeout", "reason": "no answer", "data": None}]
    for h in HOSTS:
        for r in (raw[h]["waves"][0]["data"] or {}).get("results", []):
            if r["peer"] == ATTACKER:
                r.update(stdout="", timed_out=True)
    outcomes = {ATTACKER: unfinished(raw[ATTACKER], False)[0].value}
    assert outcomes[ATTACKER] == "timeout"
    findings = judged(raw, outcomes)
    assert [(f.id, f.host) for f in findings if f.severity is Severity.FAIL] == []
    assert not [f for f in findings if f.host != ATTACKER and f.id != "fabric.step.failed"]


@pytest.mark.parametrize("outcome", ["ok", "failed"])
def test_junit_never_passes_nccl_cases_of_a_communicator_that_never_ran(outcome: str) -> None:
    """The JUnit cases come from coverage's check states: `fabric.nccl.*` of a member whose
    communicator ran no collective are not judged (a run stored before: outcome ok), never passed."""
    from orchestrator.verdict.coverage import check_states, not_judged

    facts = normalize(raw_fleet()[HOSTS[0]])
    facts["nccl"] = [_idle_nccl("failed: ncclCommInitRank: unhandled system error")]
    missing = not_judged({"fabric": facts}, {"fabric": outcome}, {"fabric": {"outcome": outcome, "reason": ""}})
    states = check_states(missing, [], ids=NCCL_IDS)
    assert all(states[i].state == "not_judged" for i in NCCL_IDS), states
