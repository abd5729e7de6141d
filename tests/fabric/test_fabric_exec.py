"""Coordinated steps (engine/fabric_exec.py) over the real local transport: a wave bounded by the
runner's forks (discovery) and the connections kept for the later steps.  The unbounded waves and the
gated NCCL groups run in tests/fabric/test_fabric_scenarios.py and test_fabric_interrupt.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from orchestrator.engine.fabric_exec import Connections, run_wave
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import ProbeCall, RunOptions
from orchestrator.inventory.model import Host
from orchestrator.simulate.fabric import build_host
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
