"""`probe run --shard K/N` + `probe merge`: parts of one fleet judged apart, merged into one run.

Six simulated machines (local transport, fake sysfs and libnvidia-ml).  dgx-h100-07 is given
dgx-h100-01's NVML library, so both report the same GPU UUIDs and serials; the two fall in
different shards of 2, so neither shard alone can see the duplicate.  The merge must raise it,
keep every host's own judgement, and agree with one `probe run` over the whole inventory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory.shard import shard_of
from orchestrator.present.outputs.slurm_drain import DRAIN_GUARD
from tests.support.collected import finding_keys, local_inventory
from tests.support.fleet import Cli, SimulatedHost, build_simulated_fleet, finding_ids, hosts_by_name
from tests.support.sshd import ROOT_DIR

HOSTS = ["dgx-h100-01", "dgx-h100-02", "dgx-h100-04", "dgx-h100-07", "dgx1-v100-01", "ws-a6000-01"]
TWIN, ORIGINAL = "dgx-h100-07", "dgx-h100-01"  # the twin reports the original's GPUs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not shutil.which("gcc") and not shutil.which("cc"):
        pytest.skip("the fake NVML library needs gcc")
    tmp = tmp_path_factory.mktemp("shards")
    sims: list[SimulatedHost] = build_simulated_fleet(HOSTS, tmp / "sim")
    by_name = {s.name: s for s in sims}
    lib = str(by_name[ORIGINAL].nvml_lib)
    twin_args = {**by_name[TWIN].probe_vars()["probe_args"], "nvml": {"lib": lib}, "nvlink": {"lib": lib}}
    inv = tmp / "inv.yml"
    inv.write_text(local_inventory(sims, {TWIN: {"probe_args": twin_args}}))
    cli = Cli.create(tmp)
    out: dict[str, Any] = {"cli": cli, "inv": inv}
    _, out["full"] = cli.run_json("run", "-i", str(inv))
    out["shards"] = []
    for k in (1, 2):
        proc, fleet = cli.run_json("run", "-i", str(inv), "--shard", f"{k}/2", "-o", str(cli.results / f"shard{k}"))
        assert proc.returncode in (0, 1), proc.stderr
        out["shards"].append(fleet)
    drain = tmp / "drain.sh"
    # --force: more than 10 % of this small fleet fails by design (the guard is tests/cli/test_remediate.py's)
    merged = cli.run("merge", str(cli.results / "shard1"), str(cli.results / "shard2"), "--results", str(cli.results),
                     "--format", "json", "--slurm-drain", str(drain), "--force")
    out["merge_proc"], out["drain"] = merged, drain
    out["merged"] = json.loads(merged.stdout) if merged.stdout.strip().startswith("{") else None
    return out


def test_the_twins_fall_in_different_shards_and_shards_cover_the_fleet_once(runs: dict[str, Any]) -> None:
    assert shard_of(TWIN, 2) != shard_of(ORIGINAL, 2)  # the premise of this module
    names = [sorted(hosts_by_name(f)) for f in runs["shards"]]
    assert sorted(names[0] + names[1]) == sorted(HOSTS)
    assert not set(names[0]) & set(names[1])
    for k, part in enumerate(names, start=1):
        assert all(shard_of(n, 2) == k for n in part)


def test_no_shard_alone_sees_the_duplicate_uuid(runs: dict[str, Any]) -> None:
    for fleet in runs["shards"]:
        assert not any(f["id"] == "identity.uuid.duplicate" for f in fleet["findings"])


def test_the_merge_raises_the_duplicate_uuid_across_shards(runs: dict[str, Any]) -> None:
    merged = runs["merged"]
    assert merged is not None, runs["merge_proc"].stderr
    assert runs["merge_proc"].returncode == 1, runs["merge_proc"].stderr
    dup = [f for f in merged["findings"] if f["id"] == "identity.uuid.duplicate"]
    assert {f["host"] for f in dup} == {TWIN, ORIGINAL}
    # each holds it once: which of the two lied cannot be told, so neither is failed or drained (issue 47)
    assert all(f["severity"] == "warn" and f["kind"] == "unknown" for f in dup)
    assert all(TWIN in json.dumps(f["actual"]) or TWIN in f["message"] for f in dup if f["host"] == ORIGINAL)


def test_the_merge_agrees_with_one_run_over_the_whole_inventory(runs: dict[str, Any]) -> None:
    merged, full = runs["merged"], runs["full"]
    assert finding_keys(merged["findings"]) == finding_keys(full["findings"])
    assert {h["name"]: h["class"] for h in merged["hosts"]} == {h["name"]: h["class"] for h in full["hosts"]}
    assert [(c["name"], sorted(c["members"])) for c in merged["classes"]] == \
        [(c["name"], sorted(c["members"])) for c in full["classes"]]
    assert merged["summary"] == full["summary"]


def test_each_host_keeps_its_own_judgement(runs: dict[str, Any]) -> None:
    merged = finding_ids(runs["merged"])
    for fleet in runs["shards"]:
        for host, ids in finding_ids(fleet).items():
            own = {i for i in ids if not i.startswith(("identity.", "topology."))}
            assert own <= merged[host], host


def test_the_merged_run_is_shown_rejudged_and_drained(runs: dict[str, Any]) -> None:
    cli: Cli = runs["cli"]
    run_dir = Path(runs["merged"]["run"]["id"])
    run_dir = cli.results / run_dir.name
    meta = json.loads((run_dir / "run.json").read_text())
    assert [m["shard"] for m in meta["merged_from"]] == ["1/2", "2/2"]
    assert sorted(p.name for p in (run_dir / "raw").iterdir()) == sorted(HOSTS)
    again = cli.run("rejudge", str(run_dir), "--format", "json")
    assert again.returncode == 1, again.stderr
    assert finding_keys(json.loads(again.stdout)["findings"]) == finding_keys(runs["full"]["findings"])
    shown = cli.run("show", str(run_dir), "-q")
    assert shown.returncode == 0 and "identity.uuid.duplicate" in shown.stdout, shown.stderr
    guard = DRAIN_GUARD.splitlines()  # the shell function each line goes through (issue 47)
    lines = [ln for ln in runs["drain"].read_text().splitlines() if not ln.startswith("#") and ln not in guard]
    failing = sorted({f["host"] for f in runs["merged"]["findings"] if f["severity"] == "fail"})
    assert [ln.split()[3] for ln in lines] == [f"NodeName={h}" for h in failing]
    assert all(ln.startswith("unless_foreign_reason scontrol update NodeName=")
               and " State=DRAIN Reason=\"fleetprobe " in ln for ln in lines)
    # the twin and the original each hold the UUIDs once: which of them lied cannot be told, so neither
    # is drained for it (issue 47: a forged identity drains no innocent host)
    assert not any("identity.uuid.duplicate" in ln for ln in lines)


def test_overlapping_runs_are_refused(runs: dict[str, Any]) -> None:
    cli: Cli = runs["cli"]
    full_dir = cli.results / Path(runs["full"]["run"]["id"]).name
    proc = cli.run("merge", str(full_dir), str(cli.results / "shard1"), "--results", str(cli.results))
    assert proc.returncode == 2
    assert "is in both" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli.run("merge", str(cli.results / "shard1"), str(cli.results / "shard1"), "--results", str(cli.results))
    assert proc.returncode == 2 and "named twice" in proc.stderr


def test_one_run_copied_twice_is_refused_naming_both_copies(runs: dict[str, Any], tmp_path: Path) -> None:
    """Two copies of one run share its id: the message names the two directories, not the id twice."""
    cli: Cli = runs["cli"]
    a, b = (shutil.copytree(cli.results / "shard1", tmp_path / where / "shard1") for where in ("a", "b"))
    proc = cli.run("merge", str(a), str(b), "--results", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"is in both {a} and {b}: the runs overlap" in proc.stderr, proc.stderr


def test_the_partition_does_not_depend_on_the_interpreter(tmp_path: Path) -> None:
    """str hash is salted per process; the shard of a name must not be."""
    code = ("from orchestrator.inventory.shard import shard_of; "
            "print([shard_of(f'gpu{i:03d}', 7) for i in range(200)])")
    outs = set()
    for seed in ("1", "2", "random"):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT_DIR)})
        outs.add(proc.stdout)
    assert len(outs) == 1
    parts = json.loads(outs.pop())
    assert set(parts) == set(range(1, 8))  # every part used: 200 names over 7 parts


@pytest.mark.parametrize("spec", ["3/2", "0/4", "two/4", "1/0"])
def test_a_bad_shard_is_a_usage_error(runs: dict[str, Any], spec: str) -> None:
    proc = runs["cli"].run("run", "-i", str(runs["inv"]), "--shard", spec)
    assert proc.returncode == 2, proc.stderr
    assert "--shard" in proc.stderr and "Traceback" not in proc.stderr


def test_a_merge_of_many_shards_says_word_for_word_what_one_run_says(tmp_path: Path) -> None:
    """50 hosts replaying the 25 demo recordings twice: every identity is duplicated, and the
    duplicate messages name hosts in fleet order; the merge keeps the inventory's order."""
    from orchestrator.simulate.record import demo_hosts

    names = list(demo_hosts())
    lines = ["all:", "  hosts:"]
    for i in range(50):
        lines += [f"    r{i:03d}:", "      ansible_connection: replay", f"      probe_replay: {json.dumps(names[i % 25])}"]
    inv = tmp_path / "replay.yml"
    inv.write_text("\n".join(lines) + "\n")
    cli = Cli.create(tmp_path)
    _, full = cli.run_json("run", "-i", str(inv))
    parts = []
    for k in range(1, 6):
        proc = cli.run("run", "-i", str(inv), "--shard", f"{k}/5", "-o", str(cli.results / f"p{k}"), "-q")
        assert proc.returncode in (1, 2), proc.stderr  # fail findings, or an empty part
        if proc.returncode == 1:
            parts.append(str(cli.results / f"p{k}"))
    assert len(parts) >= 3
    merged = cli.run("merge", *reversed(parts), "--results", str(cli.results), "--format", "json")
    assert merged.returncode == 1, merged.stderr
    fleet = json.loads(merged.stdout)
    assert [h["name"] for h in fleet["hosts"]] == [h["name"] for h in full["hosts"]]
    assert finding_keys(fleet["findings"]) == finding_keys(full["findings"])
    assert any(f["id"] == "identity.uuid.duplicate" for f in fleet["findings"])


def test_a_merge_judges_the_peer_checks_over_all_parts_and_keeps_each_host_check(tmp_path: Path) -> None:
    """nic.port.down is a host check's (a port expected up) and a fleet check's (a port down where
    most peers have it up): the merge drops each part's peer findings, judged over that part
    alone ("most of the 12 hosts"), and judges them again over all; the whole inventory is run
    in a results directory of its own, so the parts' previous run is not the whole one."""
    from orchestrator.simulate.record import demo_hosts

    names = list(demo_hosts())
    lines = ["all:", "  hosts:"]
    for i in range(3 * len(names)):
        lines += [f"    r{i:03d}:", "      ansible_connection: replay", f"      probe_replay: {json.dumps(names[i % len(names)])}"]
    inv = tmp_path / "replay.yml"
    inv.write_text("\n".join(lines) + "\n")
    (tmp_path / "whole").mkdir()
    _, full = Cli.create(tmp_path / "whole").run_json("run", "-i", str(inv))
    cli = Cli.create(tmp_path)
    peers = [f for f in full["findings"] if f["id"].startswith("nic.port.") and "hosts with the same HCAs" in f["message"]]
    assert peers, "the copies' NIC peers judge a port"
    parts = []
    for k in range(1, 4):
        proc = cli.run("run", "-i", str(inv), "--shard", f"{k}/3", "-o", str(cli.results / f"p{k}"), "-q")
        assert proc.returncode == 1, proc.stderr
        parts.append(str(cli.results / f"p{k}"))
    merged = cli.run("merge", *parts, "--results", str(cli.results), "--format", "json")
    assert merged.returncode == 1, merged.stderr
    assert finding_keys(json.loads(merged.stdout)["findings"]) == finding_keys(full["findings"])


def test_a_stored_host_is_judged_by_the_fleet_checks_against_its_own_expectations() -> None:
    from orchestrator.verdict.judge import stored_verdict

    rec = {"name": "h1", "outcome": "ok", "probes": {}, "facts": {}, "expect": {"nic_ports_up": True, "gpu_count": 8}}
    view = stored_verdict(rec, []).fleet_view
    assert view.expect.nic_ports_up is True and view.expect.gpu_count == 8  # peers do not judge its ports again
    rec["expect"] = {"no_such_key": 1}  # a hand-edited record
    assert stored_verdict(rec, []).fleet_view.expect.nic_ports_up is None


def test_a_merge_says_where_it_stands_on_a_terminal_only(runs: dict[str, Any], tmp_path: Path) -> None:
    """A merge of many parts takes minutes: on a terminal it says which part it reads and what it
    does after (one line, rewritten in place), with -q or into a file or pipe it says nothing."""
    cli: Cli = runs["cli"]
    parts = [str(cli.results / "shard1"), str(cli.results / "shard2")]
    code, seen = cli.on_a_terminal("merge", *parts, "--results", str(tmp_path / "a"), "-q", "--force")
    assert code in (0, 1), seen
    assert "merge:" not in seen, seen
    code, seen = cli.on_a_terminal("merge", *parts, "--results", str(tmp_path / "b"), "--force")
    assert code in (0, 1), seen
    steps = [s.split("\x1b[K")[0] for s in seen.split("\r") if s.startswith("merge: ")]
    assert [s.split(", elapsed ")[0] for s in steps] == [
        "merge: part 1/2 (shard1), 0 hosts read",
        f"merge: part 2/2 (shard2), {len(runs['shards'][0]['hosts'])} hosts read",
        f"merge: the parts' raw files, {len(HOSTS)} hosts",
        f"merge: the fleet-wide steps over {len(HOSTS)} hosts",
        "merge: writing the merged run"], seen
    piped = cli.run("merge", *parts, "--results", str(tmp_path / "c"), "--force")
    assert "merge:" not in piped.stderr, piped.stderr
