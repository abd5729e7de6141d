"""A host whose perftest client prints a forged figure, over the real sshd (issue 47).

The real `probe run -p <fabric playbook>` on 8 simulated hosts over the real sshd, one of whose
ib_write_bw clients prints the same figure for every run whatever was measured (its server ends,
and its peers', print what was measured): a slander (100 Gb/s on a 400 Gb/s rail) and an
impossible figure (1,000 Gb/s).  No peer gets any finding, the rail is not charged, the drain list
takes nobody for it, and the liar is named by `fabric.answer.distrusted`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.simulate.fabric import random_scenario
from tests.support.fabric import FAST, fabric_setup, lying_tool, names
from tests.support.sshd import SshdServer

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

HOSTS = 8


@pytest.mark.parametrize("gbps", [100.0, 1000.0], ids=["slander", "impossible"])
def test_a_forging_host_over_sshd_is_named_and_no_peer_is_blamed(gbps: float, sshd: SshdServer,
                                                                  tmp_path: Path) -> None:
    scenario = random_scenario(names(HOSTS), 1, 0, ())
    setup = fabric_setup(tmp_path, sshd, tmp_path / "libs", HOSTS, 1, scenario, dict(FAST))
    liar = setup.fleet.hosts[2]
    lying_tool(liar.root, gbps)
    drain = tmp_path / "drain.sh"
    proc = setup.cli.run("run", "-i", str(setup.inventory), "-p", str(setup.playbook), "--format", "json",
                         "--slurm-drain", str(drain), timeout=600)
    doc = json.loads(proc.stdout)
    names_ = {f["id"]: set() for f in doc["findings"]}
    for f in doc["findings"]:
        names_[f["id"]].add(f["host"])
    assert names_ == {"fabric.answer.distrusted": {liar.name}}, (names_, proc.stderr[-2000:])
    assert doc["fabric_findings"] == []
    states = {h["name"]: h["health"]["state"] for h in doc["hosts"]}
    assert {n for n, s in states.items() if s != "healthy"} == {liar.name}, states
    assert states[liar.name] == "degraded"
    assert not drain.exists() or "scontrol" not in drain.read_text()
