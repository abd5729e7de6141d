"""`probe bundle` + `python3 -I -S -` on the hosts + `probe import`: judged exactly like `probe run`.

Simulated machines (sysfs/proc trees, compiled fake libnvidia-ml) are probed twice: by a live
`probe run` over the local transport, and by each host's bundle run in a real `python3 -I -S -`
subprocess whose document is then imported.  The two runs must have the same findings, outcomes
and classes.  A file that holds no document costs only its own host; host names come from inside
the documents (the inventory host a bundle was written for, the scheduler's node name, the
hostname), never from the file names.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine import bundle
from orchestrator.engine.runner import PROBE_DEADLINE_MARGIN_S, ProbeCall, bundle_items
from orchestrator.inventory.loader import load_inventory
from tests.support.collected import finding_keys, latest_run, local_inventory, run_script
from tests.support.fleet import Cli, SimulatedHost, build_simulated_fleet, hosts_by_name

HOSTS = ["dgx-h100-01", "dgx-h100-04", "dgx-h100-05", "dgx-a100-03", "rtx4090-02"]


def _file_of(name: str) -> str:
    """The output file of a host: sorted by name they come in the reverse of the inventory's order."""
    return f"task{len(HOSTS) - 1 - HOSTS.index(name)}.json"


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> list[SimulatedHost]:
    if not shutil.which("gcc") and not shutil.which("cc"):
        pytest.skip("the fake NVML library needs gcc")
    return build_simulated_fleet(HOSTS, tmp_path_factory.mktemp("bundle-sim"))


@pytest.fixture(scope="module")
def fleet_runs(sims: list[SimulatedHost], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("bundle-import")
    cli = Cli.create(tmp)
    inv = tmp / "inv.yml"
    inv.write_text(local_inventory(sims))
    live_proc, live = cli.run_json("run", "-i", str(inv))
    out = tmp / "outputs"
    out.mkdir()
    for sim in sims:
        script = tmp / f"bundle-{sim.name}.py"
        made = cli.run("bundle", "-i", str(inv), "--host", sim.name, "-o", str(script))
        assert made.returncode == 0, made.stderr
        run_script(script, out / _file_of(sim.name))  # names say nothing of the host
    imp = cli.run("import", str(out), "-i", str(inv), "--results", str(cli.results), "--format", "json")
    return {"cli": cli, "inv": inv, "out": out, "live_proc": live_proc, "live": live, "import_proc": imp,
            "imported": json.loads(imp.stdout) if imp.stdout.strip().startswith("{") else None, "tmp": tmp}


def test_imported_bundle_outputs_are_judged_like_the_live_run(fleet_runs: dict[str, Any]) -> None:
    live, imported, imp = fleet_runs["live"], fleet_runs["imported"], fleet_runs["import_proc"]
    assert imported is not None, imp.stderr
    assert imp.returncode == fleet_runs["live_proc"].returncode == 1, imp.stderr  # fail findings, hosts fine
    assert live["findings"], "the simulated faults must raise findings"
    assert finding_keys(imported["findings"]) == finding_keys(live["findings"])
    got, want = hosts_by_name(imported), hosts_by_name(live)
    assert list(got) == list(want) == HOSTS  # the inventory's order, whatever the files are called
    for name in HOSTS:
        assert {p: s["outcome"] for p, s in got[name]["probes"].items()} == \
            {p: s["outcome"] for p, s in want[name]["probes"].items()}
        assert got[name]["class"] == want[name]["class"]
        assert got[name]["facts"]["host"]["hostname"] == name  # the probes read the fixture of that host
    assert imported["summary"] == live["summary"]


def test_the_imported_run_records_where_each_host_came_from(fleet_runs: dict[str, Any]) -> None:
    run_dir = latest_run(fleet_runs["cli"].results)
    meta = json.loads((run_dir / "raw" / "dgx-h100-04" / "_host.json").read_text())
    assert meta["origin"]["via"] == "bundle"
    assert meta["origin"]["identity"]["hostname"] == os.uname().nodename
    assert Path(meta["origin"]["file"]).name == _file_of("dgx-h100-04")


def test_an_imported_run_can_be_shown_and_rejudged(fleet_runs: dict[str, Any]) -> None:
    cli: Cli = fleet_runs["cli"]
    run_dir = latest_run(cli.results)
    shown = cli.run("show", str(run_dir), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    again = cli.run("rejudge", str(run_dir), "--format", "json")
    assert again.returncode == 1, again.stderr
    assert finding_keys(json.loads(again.stdout)["findings"]) == finding_keys(fleet_runs["live"]["findings"])


def test_a_file_without_a_document_costs_only_its_host(fleet_runs: dict[str, Any], tmp_path: Path) -> None:
    cli: Cli = fleet_runs["cli"]
    out = tmp_path / "outs"
    shutil.copytree(fleet_runs["out"], out)
    (out / "broken.json").write_text("bash: line 1: python3: command not found\n")
    (out / "cut.json").write_text((out / _file_of(HOSTS[0])).read_text()[:5000])  # the task was killed mid-write
    proc = cli.run("import", str(out), "-i", str(fleet_runs["inv"]), "--results", str(tmp_path / "runs"),
                   "--format", "json")
    assert proc.returncode == 5, proc.stderr  # fail findings + hosts with invalid output
    assert "Traceback" not in proc.stderr
    recs = hosts_by_name(json.loads(proc.stdout))
    for name in ("broken.json", "cut.json"):
        assert recs[name]["outcome"] == "invalid_output"
        assert recs[name]["reason"]
    assert "command not found" in recs["broken.json"]["reason"]
    assert all(recs[h]["outcome"] == "ok" for h in HOSTS)


def spec_of(call: bytes) -> dict[str, Any]:
    """The runner's spec from its call line `fp_bundle(json.loads('<json>'), json.loads('<sources>'))`."""
    literal = call[len(b"fp_bundle(json.loads("):].split(b"), json.loads(")[0]
    spec: dict[str, Any] = json.loads(ast.literal_eval(literal.decode("utf-8")))
    return spec


def test_the_bundle_is_the_script_a_run_pipes_to_that_host(fleet_runs: dict[str, Any]) -> None:
    """The same runner, probes and per-host arguments; only the document request is added."""
    inv = load_inventory([str(fleet_runs["inv"])])
    host = inv.hosts["dgx-h100-05"]
    script = (fleet_runs["tmp"] / "bundle-dgx-h100-05.py").read_bytes()
    calls = [ProbeCall(n, {}, 60.0) for n in ("host", "pcie", "nvml", "nvlink", "kmsg", "nic")]  # the audit playbook's
    live = bundle.compose(bundle_items(host, calls), 240.0, PROBE_DEADLINE_MARGIN_S, 1 << 24, 1 << 20)
    cut = live.index(b"fp_bundle(json.loads(")
    assert script[:cut] == live[:cut]  # the bundle runner and every probe's code
    live_spec, spec = (spec_of(s[cut:]) for s in (live, script))
    assert spec.pop("document") == {"for_host": "dgx-h100-05", "plan": {"expect": [], "playbook": None,
                                                                         "probes": [], "timeout": 60.0}}
    assert spec["probes"] == live_spec["probes"]  # the probe_root / probe_args of that inventory host


def test_a_bundle_for_any_host_takes_its_name_from_the_scheduler(tmp_path: Path) -> None:
    cli = Cli.create(tmp_path)
    script = tmp_path / "b.py"
    made = cli.run("bundle", "--probe", "host", "--expect", "gpu_count=0", "-o", str(script))
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out"
    out.mkdir()
    slurm = {"SLURMD_NODENAME": "node7", "SLURM_JOB_ID": "42", "SLURM_PROCID": "3", "SLURM_STEP_ID": "0"}
    run_script(script, out / "42.3.json", env=slurm)
    run_script(script, out / "plain-1.json")
    run_script(script, out / "plain-2.json")  # the same machine twice: both kept, neither judged as it
    proc = cli.run("import", str(out), "--results", str(tmp_path / "runs"), "--format", "json")
    assert proc.returncode in (4, 5), proc.stderr
    fleet = json.loads(proc.stdout)
    me = os.uname().nodename
    assert sorted(hosts_by_name(fleet)) == sorted(["node7", f"{me}#1", f"{me}#2"])
    assert f"2 documents claim {me!r} ('plain-1.json', 'plain-2.json')" in proc.stderr
    run_dir = latest_run(tmp_path / "runs")
    ident = json.loads((run_dir / "raw" / "node7" / "_host.json").read_text())["origin"]["identity"]
    assert ident == {"hostname": me, "node_name": "node7", "job_id": "42", "task_id": "3", "step_id": "0",
                     "scheduler": "slurm"}
    # the expectation travelled in the bundle: judged against gpu_count=0 (this machine has none)
    assert json.loads((run_dir / "run.json").read_text())["plan"]["expect"] == ["gpu_count=0"]
