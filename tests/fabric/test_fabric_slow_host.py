"""A host slow to start every perftest run: its partners wait for it, everyone else runs ahead.

The real `probe run -p <fabric playbook>` over the real sshd on 10 simulated hosts, one of whose
ib_write_bw waits 2 s before it runs (a loaded host, CUDA initialising).  A server waiting for it
must not be reached by the client of another pair running rounds ahead (a late round's client
dialling the same address and port): every measurement names its planned peer, none is lost, and
nothing is found.  With the same ports every four rounds, servers waiting on the slow host were
measured against other pairs' clients ("wrong_peer") and their own partners timed out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.simulate.fabric import random_scenario
from tests.support.fabric import FAST, fabric_run, fabric_setup, finding_keys, names, plan_of, slow_tool
from tests.support.sshd import SshdServer

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

HOSTS = 10


def test_servers_waiting_for_a_slow_host_meet_only_their_own_partner(sshd: SshdServer, tmp_path: Path) -> None:
    scenario = random_scenario(names(HOSTS), 1, 0, ())
    setup = fabric_setup(tmp_path, sshd, tmp_path / "libs", HOSTS, 1, scenario, dict(FAST))
    slow_tool(setup.fleet.hosts[-1].root, 2.0)
    rc, err, doc = fabric_run(setup)
    assert finding_keys(doc) == {} and rc == 0, err[-2000:]
    tests = plan_of(doc)["tests"]
    for rec in doc["hosts"]:
        fab = rec["facts"]["fabric"]
        assert fab["errors"] == [], fab["errors"]
        wrong = [(rec["name"], m["round"], m["role"], m["peer"], m["error_kind"], m["error"])
                 for m in fab["measurements"] if m["error_kind"] is not None]
        assert wrong == []
        assert len(fab["measurements"]) == (HOSTS - 1) * len(tests)  # each test once a round, with every other host
        assert all(m["value"] for m in fab["measurements"])
