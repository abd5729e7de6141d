"""The same fabric plan through Slurm: every coordinated step an `srun` job step on the host's node.

A real Slurm (tests/support/slurm.py: munged, slurmctld and four emulated `slurmd -N nodeK` on this
machine) holds an allocation of the four nodes (`salloc -N4 --no-shell`); the inventory's hosts are
`ansible_connection: slurm` on node1..node4 inside it, each with its own simulated fabric tree.  The
qualification (discovery, the pairwise wave, the NCCL rings with rank 0's id handed over by the
controller) runs through srun and must name the planted pair, as over SSH; an interrupted run leaves
no step running.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.inventory.model import Host
from orchestrator.simulate.fabric import FabricScenario, build_fleet
from tests.support.fabric import FAST, FAST_NCCL, finding_keys, hang_tool, names, playbook, require
from tests.support.fleet import Cli
from tests.support.slurm import SlurmCluster, allocation, missing_reason

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, str]]:
    require(missing_reason())
    with allocation(tmp_path_factory.mktemp("slurm"), 4, "fleetprobe-fabric") as held:
        yield held


def _setup(tmp: Path, cluster: SlurmCluster, job: str, libs: Path, scenario: FabricScenario,
           spec: dict[str, object]) -> tuple[Cli, Path, Path, dict[str, str]]:
    fleet = build_fleet(tmp / "hosts", names(4), 2, scenario, libs, nccl=True)
    lines = ["all:", "  hosts:"]
    for node, sim in zip(cluster.nodes, fleet.hosts):
        host = Host(sim.name, {"ansible_connection": "slurm", "probe_slurm_node": node, "probe_slurm_jobid": job,
                               **sim.vars})
        lines.append(f"    {host.name}:")
        lines += [f"      {k}: {json.dumps(v)}" for k, v in host.vars.items()]
    inventory = tmp / "inventory.yml"
    inventory.write_text("\n".join(lines) + "\n")
    book = tmp / "fabric.yml"
    book.write_text(playbook(dict(spec)))
    cli = Cli.create(tmp)
    env = {**cli.env(), "SLURM_CONF": str(cluster.conf)}
    return cli, inventory, book, env


def test_the_fabric_plan_runs_through_srun(cluster: tuple[SlurmCluster, str], tmp_path: Path,
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    c, job = cluster
    scenario = FabricScenario(seed=4, pairs={("node02", "node04", "mlx5_1"): 0.4})
    spec = dict(FAST, nccl=dict(FAST_NCCL, all_gpus=True))
    cli, inventory, book, env = _setup(tmp_path, c, job, tmp_path_factory.mktemp("libs"), scenario, spec)
    res = subprocess.run(cli.argv("run", "-i", str(inventory), "-p", str(book), "--format", "json"), env=env,
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    doc = json.loads(res.stdout)
    assert finding_keys(doc) == scenario.planted(), res.stderr[-3000:]
    assert res.returncode == 1
    for rec in doc["hosts"]:
        fab = rec["facts"]["fabric"]
        assert rec["probes"]["fabric"]["outcome"] == "ok"
        assert fab["plan"]["rounds"] == 3 and len(fab["measurements"]) > 0
        # the host's discovery ran on its own node: srun said so in the environment it reads
        kinds = {g["kind"] for g in fab["nccl"]}
        assert kinds == {"rail", "all"}, kinds
        assert all(g["wrong"] == 0 and g["transport"] == "NET/IB/GDRDMA" for g in fab["nccl"])


def test_an_interrupted_run_through_srun_leaves_no_step(cluster: tuple[SlurmCluster, str], tmp_path: Path,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    c, job = cluster
    _wait_for_no_steps(c, job)  # the earlier run's steps have ended: whatever is left afterwards is this run's
    spec = {"round_s": 60, "iters": 5, "size": 8192, "nccl": False, "tests": ["ib_write_bw"]}
    cli, inventory, book, env = _setup(tmp_path, c, job, tmp_path_factory.mktemp("libs"), FabricScenario(seed=1), spec)
    hang_tool(tmp_path / "hosts/node01")  # it hangs and its peers wait for it: the wave stays busy
    proc = subprocess.Popen(cli.argv("run", "-i", str(inventory), "-p", str(book)), env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    tree = str(tmp_path / "hosts")

    def steps() -> list[str]:
        out = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout.splitlines()
        return [line for line in out if tree in line or ("srun" in line and f"--jobid={job}" in line)]

    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("ib_write_bw" in s for s in steps()):
            time.sleep(0.2)
        if not any("ib_write_bw" in s for s in steps()):
            running = steps()
            queue = c.steps(job)
            proc.kill()
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"the wave never started on the nodes in 120 s (exit {proc.returncode});\n"
                                 f"processes: {running}\nsteps: {queue}\nstderr: {err[-3000:]}\n{c.logs()}")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    give_up = time.monotonic() + 20
    while steps() and time.monotonic() < give_up:
        time.sleep(0.2)
    assert steps() == []
    _wait_for_no_steps(c, job, 20, "the interrupted run left steps in the allocation")


def _wait_for_no_steps(c: SlurmCluster, job: str, timeout: float = 60,
                       why: str = "steps of an earlier run still in the allocation") -> None:
    end = time.monotonic() + timeout
    while left := c.steps(job):
        assert time.monotonic() < end, f"{why}:\n{left}\n{c.logs()}"
        time.sleep(0.5)
