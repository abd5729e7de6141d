"""A stored run names its inventory, playbook and reference files as they were given, relative
ones included.  `probe rejudge` and `probe merge` read them as the run did (relative to where it
was made), not whatever file of that name sits where they are run; a file gone from there is read
from here, and a rejudge says so."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.api.plan import anchored
from tests.support.hostile import cli_env

PLAY = """- name: quick
  hosts: all
  passive_only: true
  probes: [host, nvml]
  expect:
    gpu_count: {count}
"""


def _probe(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def _fleet(results: Path, run_id: str) -> dict:
    got = _probe(["show", run_id, "--results", str(results), "--format", "json"], results)
    assert got.returncode in (0, 1, 4, 5), got.stderr
    return json.loads(got.stdout)


def _counts_wrong(fleet: dict) -> int:
    return sum(1 for f in fleet["findings"] if f["id"] == "gpu.count.mismatch")


def _runs(results: Path) -> set[str]:
    return {p.name for p in results.iterdir() if p.is_dir() and not p.name.startswith(".")}


def _rejudge(run_id: str, results: Path, cwd: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    before = _runs(results)
    got = _probe(["rejudge", run_id, "--results", str(results), "-q"], cwd)
    assert got.returncode in (1, 4, 5) and "Traceback" not in got.stderr, got.stderr
    (new,) = _runs(results) - before
    return got, new


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A run of the demo fleet made in `there` with `-p pb.yml`, which expects 64 GPUs a host."""
    there = tmp_path_factory.mktemp("there")
    results = tmp_path_factory.mktemp("results")
    (there / "pb.yml").write_text(PLAY.format(count=64))
    got = _probe(["run", "-p", "pb.yml", "--results", str(results), "-q"], there)
    assert got.returncode in (1, 4, 5), got.stderr
    (run_id,) = _runs(results)
    return there, results, run_id


def test_a_rejudge_elsewhere_reads_the_runs_own_playbook_not_one_of_the_same_name_here(
        made: tuple[Path, Path, str], tmp_path: Path) -> None:
    there, results, run_id = made
    here = tmp_path / "here"
    here.mkdir()
    (here / "pb.yml").write_text(PLAY.format(count=65))
    wrong = _counts_wrong(_fleet(results, run_id))
    assert wrong, "the demo hosts have fewer than 64 GPUs"
    got, new = _rejudge(run_id, results, here)
    assert "is read instead" not in got.stderr, got.stderr
    rejudged = _fleet(results, new)
    findings = [f for f in rejudged["findings"] if f["id"] == "gpu.count.mismatch"]
    assert len(findings) == wrong and all(f["expected"] == 64 for f in findings), findings
    meta = json.loads((results / new / "run.json").read_text())
    assert meta["playbook"] == str(there / "pb.yml") and meta["cwd"] == str(here)


def test_a_file_gone_from_where_the_run_was_made_is_read_from_here_and_said(
        made: tuple[Path, Path, str], tmp_path: Path) -> None:
    _there, results, run_id = made
    moved = tmp_path / "moved"
    (moved / "there").mkdir(parents=True)
    copy = tmp_path / "results"
    shutil.copytree(results / run_id, copy / run_id)
    (moved / "there" / "pb.yml").write_text(PLAY.format(count=65))
    meta_path = copy / run_id / "run.json"
    meta = json.loads(meta_path.read_text())
    meta["cwd"] = str(tmp_path / "gone")  # made on another controller
    meta_path.write_text(json.dumps(meta))
    got, new = _rejudge(run_id, copy, moved / "there")
    notes = [line for line in got.stderr.splitlines() if "is read instead" in line]
    assert notes == [f"warning: {run_id}: its playbook pb.yml is no longer in {tmp_path / 'gone'}, where the run "
                     "was made: pb.yml here is read instead"], got.stderr
    rejudged = _fleet(copy, new)
    assert {f["expected"] for f in rejudged["findings"] if f["id"] == "gpu.count.mismatch"} == {65}


def test_anchored_keeps_names_that_are_no_file_there(tmp_path: Path) -> None:
    (tmp_path / "fleet.yml").write_text("all: {}\n")
    assert anchored("fleet.yml", str(tmp_path)) == str(tmp_path / "fleet.yml")
    assert anchored("audit", str(tmp_path)) == "audit"  # a shipped playbook's name
    assert anchored("h1,h2,", str(tmp_path)) == "h1,h2,"  # a comma list of hosts
    assert anchored("/etc/x.yml", str(tmp_path)) == "/etc/x.yml"
    assert anchored("fleet.yml", None) == "fleet.yml"  # a run stored before the directory was kept


def test_a_merge_elsewhere_reads_the_parts_inventory_where_they_were_made(tmp_path: Path) -> None:
    """The merged run keeps the inventory's order of hosts (its fleet-wide messages then read as
    one run's over the inventory), read from where the shards were made."""
    there, here, results = tmp_path / "there", tmp_path / "here", tmp_path / "results"
    there.mkdir()
    here.mkdir()
    order = [f"dgx-h100-0{i}" for i in (3, 1, 9, 4, 2, 8, 5, 7, 6)]
    hosts = "".join(f"    {h}: {{probe_replay: {h}}}\n" for h in order)
    (there / "fleet.yml").write_text(f"all:\n  vars: {{ansible_connection: replay}}\n  hosts:\n{hosts}")
    for part in ("1/2", "2/2"):
        got = _probe(["run", "-i", "fleet.yml", "-p", "quick", "--shard", part, "--results", str(results), "-q"],
                     there)
        assert got.returncode in (0, 1, 4, 5), got.stderr
    a, b = sorted(_runs(results))
    merged = tmp_path / "merged"
    got = _probe(["merge", str(results / a), str(results / b), "--results", str(merged), "-q"], here)
    assert got.returncode in (0, 1, 4, 5) and "Traceback" not in got.stderr, got.stderr
    assert "cannot be read" not in got.stderr, got.stderr
    (new,) = _runs(merged)
    meta = json.loads((merged / new / "run.json").read_text())
    assert meta["hosts_order"] == order and meta["inventory"] == [str(there / "fleet.yml")], meta


def test_a_shipped_playbooks_name_stays_a_name_where_a_directory_of_that_name_was(tmp_path: Path) -> None:
    there, here, results = tmp_path / "there", tmp_path / "here", tmp_path / "results"
    (there / "quick").mkdir(parents=True)  # not a playbook file: the run took the shipped one
    here.mkdir()
    got = _probe(["run", "-p", "quick", "--results", str(results), "-q"], there)
    assert got.returncode in (0, 1, 4, 5), got.stderr
    (run_id,) = _runs(results)
    got, new = _rejudge(run_id, results, here)
    assert got.stderr == "", got.stderr
    assert json.loads((results / new / "run.json").read_text())["plan"]["playbook"] == "quick"


def test_a_merged_run_keeps_the_paths_its_parts_read(made: tuple[Path, Path, str], tmp_path: Path) -> None:
    """The merge is made elsewhere, beside another pb.yml: the merged run's plan names the parts'
    own, so a rejudge of it (from anywhere) judges what the parts were judged against."""
    there, _results, _run_id = made
    results, elsewhere, anywhere = tmp_path / "results", tmp_path / "elsewhere", tmp_path / "anywhere"
    elsewhere.mkdir()
    anywhere.mkdir()
    (elsewhere / "pb.yml").write_text(PLAY.format(count=65))
    (anywhere / "pb.yml").write_text(PLAY.format(count=66))
    for part in ("1/2", "2/2"):
        got = _probe(["run", "-p", "pb.yml", "--shard", part, "--results", str(results), "-q"], there)
        assert got.returncode in (1, 4, 5), got.stderr
    a, b = sorted(_runs(results))
    got = _probe(["merge", str(results / a), str(results / b), "--results", str(results), "-q"], elsewhere)
    assert got.returncode in (1, 4, 5) and "Traceback" not in got.stderr, got.stderr
    (merged,) = _runs(results) - {a, b}
    assert json.loads((results / merged / "run.json").read_text())["plan"]["playbook"] == str(there / "pb.yml")
    got, new = _rejudge(merged, results, anywhere)
    assert got.stderr == "", got.stderr
    assert {f["expected"] for f in _fleet(results, new)["findings"] if f["id"] == "gpu.count.mismatch"} == {64}


def test_a_path_the_rejudge_replaces_is_not_said_to_be_read_from_here(
        made: tuple[Path, Path, str], tmp_path: Path) -> None:
    _there, results, run_id = made
    copy, here = tmp_path / "results", tmp_path / "here"
    shutil.copytree(results / run_id, copy / run_id)
    here.mkdir()
    (here / "pb.yml").write_text(PLAY.format(count=65))
    meta_path = copy / run_id / "run.json"
    meta = json.loads(meta_path.read_text())
    meta["cwd"] = str(tmp_path / "gone")
    meta_path.write_text(json.dumps(meta))
    before = _runs(copy)
    got = _probe(["rejudge", run_id, "-p", "quick", "--results", str(copy), "-q"], here)
    # another -p makes the rejudge a what-if of its run, which it says (issue 47); nothing else is said
    said = [ln for ln in got.stderr.splitlines() if f" is a what-if of {run_id} (judged under other -p)" not in ln]
    assert got.returncode in (0, 1, 4, 5) and said == [], got.stderr
    assert len(_runs(copy) - before) == 1
