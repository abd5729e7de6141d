"""fleetprobe through a real Slurm: `srun` of the bundle on 4 nodes, `probe import` of what they printed.

The cluster is Debian's slurm-wlm on loopback (tests/support/slurm.py): munged, slurmctld and four
emulated `slurmd -N nodeK` on one machine, each with its own port.  The bundle runs on this
machine's own /sys and /proc under each node (no GPUs here: nvml answers unsupported), so the four
nodes are in truth one machine, and the fleet-wide checks must say so.  Host names come from inside
the documents (SLURMD_NODENAME), not from the file names srun wrote.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fleet import Cli, hosts_by_name
from tests.support.slurm import SlurmCluster, missing_reason, start_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    c = start_cluster(tmp_path_factory.mktemp("slurm"), 4)
    try:
        yield c
    finally:
        c.stop()


def test_srun_of_the_bundle_on_four_nodes_is_imported_and_judged(cluster: SlurmCluster, tmp_path: Path) -> None:
    cli = Cli.create(tmp_path)
    bundle = tmp_path / "bundle.py"
    made = cli.run("bundle", "--probe", "host", "--probe", "pcie", "--probe", "nvml", "-o", str(bundle))
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out"
    out.mkdir()
    python = shutil.which("python3") or sys.executable
    res = cluster.run(["srun", "-N", "4", "--ntasks-per-node=1", "--exclusive", "--input=all",
                       "-o", f"{out}/%j.%t.json", python, "-I", "-S", "-"], stdin=bundle, timeout=180)
    assert res.returncode == 0, f"{res.stderr}\n{cluster.logs()}"
    files = sorted(out.iterdir())
    assert len(files) == 4, [f.name for f in files]
    drain = tmp_path / "drain.sh"
    # --force: four nodes of one machine, where one bad rule could take them all (the guard's case)
    proc = cli.run("import", str(out), "--results", str(tmp_path / "runs"), "--format", "json",
                   "--slurm-drain", str(drain), "--force")
    assert proc.returncode in (0, 1), proc.stderr
    fleet = json.loads(proc.stdout)
    recs = hosts_by_name(fleet)
    assert sorted(recs) == cluster.nodes  # node1..node4: SLURMD_NODENAME from inside each document
    run_dir = tmp_path / "runs" / fleet["run"]["id"]
    tasks = set()
    for name, rec in recs.items():
        assert rec["probes"]["host"]["outcome"] == "ok", rec["probes"]
        assert rec["probes"]["pcie"]["outcome"] in ("ok", "unsupported"), rec["probes"]
        assert rec["probes"]["nvml"]["outcome"] == "unsupported"  # no NVIDIA library on this machine
        origin = json.loads((run_dir / "raw" / name / "_host.json").read_text())["origin"]
        ident = origin["identity"]
        assert ident["scheduler"] == "slurm" and ident["node_name"] == name
        assert Path(origin["file"]).name == f"{ident['job_id']}.{ident['task_id']}.json"
        tasks.add(ident["task_id"])
    assert tasks == {"0", "1", "2", "3"}
    # four node names, one machine: its hostname reported four times
    dup = {f["host"] for f in fleet["findings"] if f["id"] == "identity.hostname.duplicate"}
    assert dup == set(cluster.nodes)
    # not measured is never passed: the GPU checks are not judged, nothing claims GPUs are fine
    assert not any(f["id"].startswith(("gpu.", "nvlink.")) for f in fleet["findings"])
    failing = sorted({f["host"] for f in fleet["findings"] if f["severity"] == "fail"})
    drained = [ln.split()[3] for ln in drain.read_text().splitlines() if ln.startswith("unless_foreign_reason scontrol")]
    assert drained == [f"NodeName={h}" for h in failing]
