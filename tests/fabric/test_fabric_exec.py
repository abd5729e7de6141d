"""Coordinated steps (engine/fabric_exec.py) over the real local transport: a wave bounded by the
runner's forks (discovery) and the connections kept for the later steps.  The unbounded waves and the
gated NCCL groups run in tests/fabric/test_fabric_scenarios.py and test_fabric_interrupt.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from orchestrator.engine.fabric_exec import Connections, run_wave
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import ProbeCall, RunOptions
from orchestrator.inventory.model import Host
from orchestrator.simulate.fabric import FabricScenario, build_fleet, build_host, rail_address
from orchestrator.transport.base import CommandResult, Transport, TransportOptions
from orchestrator.transport.local import LocalTransport


class _Counting:
    """The local transport, counting how many of its commands run at once (nothing else changed)."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self.made = 0
        self.lock = threading.Lock()

    def factory(self, host: Host, options: TransportOptions) -> Transport:
        counter = self
        with self.lock:
            self.made += 1

        class Counted(LocalTransport):
            def run(self, *args: Any, **kw: Any) -> CommandResult:
                with counter.lock:
                    counter.live += 1
                    counter.peak = max(counter.peak, counter.live)
                try:
                    return super().run(*args, **kw)
                finally:
                    with counter.lock:
                        counter.live -= 1

        return Counted(host, options)


def _hosts(tmp: Path, n: int) -> list[Host]:
    out = []
    for i in range(n):
        sim = build_host(tmp / f"h{i}", f"h{i}", i, 2, tmp / "scenario.conf", None)
        out.append(Host(f"h{i}", {"ansible_connection": "local", "probe_root": str(sim.root)}, groups=["all"]))
    return out


def test_a_bounded_wave_never_runs_more_than_its_limit_and_keeps_each_connection(tmp_path: Path) -> None:
    hosts = _hosts(tmp_path, 6)
    counter = _Counting()
    conns = Connections(RunOptions(forks=2), counter.factory)
    try:
        calls = [(h, ProbeCall("fabric", {"role": "discover", "step_id": "discover"}, 30.0)) for h in hosts]
        found = run_wave(calls, conns, threading.Event(), limit=2)
        assert counter.peak <= 2 and counter.made == 6
        assert {n: r.result.outcome for n, r in found.items()} == {h.name: Outcome.OK for h in hosts}
        assert all(r.result.envelope is not None and len(r.result.envelope.data["hcas"]) == 2 for r in found.values())
        # the next step on these hosts reuses their connections: no new transport is made
        again = run_wave(calls, conns, threading.Event())
        assert counter.made == 6 and all(r.result.outcome == Outcome.OK for r in again.values())
    finally:
        conns.close_all()


def _pair_step(rnd: int, role: str, peer: str, server_index: int, port: int, round_s: float,
               not_before_s: float) -> dict[str, Any]:
    return {"round": rnd, "rail": 0, "hca": "mlx5_0", "ib_port": 1, "role": role, "peer": peer, "peer_hca": "mlx5_0",
            "peer_lid": None, "connect": rail_address(server_index, 0), "bind": None, "ports": [port],
            "start_s": rnd * round_s, "end_s": (rnd + 1) * round_s, "not_before_s": not_before_s, "extra": False}


def _two_round_wave(tmp: Path, start_at: float, round_s: float, earliest: float) -> dict[str, Any]:
    """h0 serves h1 in rounds 0 and 1 (the second may start `earliest` s after the wave's start)."""
    fleet = build_fleet(tmp / "hosts", ["h0", "h1"], 1, FabricScenario(), tmp / "libs", nccl=False)
    hosts = [Host(sim.name, {"ansible_connection": "local", "probe_root": str(sim.root)}, groups=["all"])
             for sim in fleet.hosts]
    calls = []
    for host, role, peer in ((hosts[0], "server", "h1"), (hosts[1], "client", "h0")):
        steps = [_pair_step(0, role, peer, 0, 18600, round_s, -round_s),
                 _pair_step(1, role, peer, 0, 18601, round_s, earliest)]
        args = {"role": "pairs", "step_id": "wave1", "steps": steps, "tests": ["ib_write_bw"], "size": 8192,
                "iters": 5, "lat_iters": 5, "start_at": start_at}
        calls.append((host, ProbeCall("fabric", args, 30.0)))
    conns = Connections(RunOptions(), _Counting().factory)
    try:
        return run_wave(calls, conns, threading.Event())
    finally:
        conns.close_all()


def test_a_round_starts_early_but_never_before_its_earliest_start(tmp_path: Path) -> None:
    """Rounds hand their time on (the second starts as soon as the first is done), down to the
    earliest start the plan gives each round (PortLayout.earliest_start), and no sooner."""
    round_s, earliest = 8.0, 2.5
    found = _two_round_wave(tmp_path, time.time() + 1.0, round_s, earliest)
    for name, r in found.items():
        assert r.result.outcome == Outcome.OK and r.result.envelope is not None, (name, r.result.reason)
        data = r.result.envelope.data
        assert [m["exit"] for m in data["results"]] == [0, 0], data["results"]
        first, second = data["rounds"]
        assert first["took_s"] < earliest  # the first round was quick, so the second could start early
        assert earliest <= second["started_s"] < round_s, data["rounds"]


def test_a_host_that_starts_late_keeps_to_the_waves_clock(tmp_path: Path) -> None:
    """Both processes start after the first round's window closed (a slow fan-out): they skip it
    and meet in the second round, at its time, instead of running every round one window late."""
    round_s = 4.0
    found = _two_round_wave(tmp_path, time.time() - round_s - 0.5, round_s, -round_s)
    for name, r in found.items():
        assert r.result.outcome == Outcome.OK and r.result.envelope is not None, (name, r.result.reason)
        results = r.result.envelope.data["results"]
        assert [m["round"] for m in results] == [0, 1]
        assert results[0]["error"] == "round window passed before it could start", results
        assert results[1]["exit"] == 0, results
