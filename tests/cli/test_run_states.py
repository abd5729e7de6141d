"""Runs recorded as they happened (issue 16, item 6): after Ctrl-C, hosts never started are
`skipped`, hosts cut off part-way `interrupted`, the message counts each, and `probe runs` shows
the run's state, its inventory paths and its playbook's name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml, Skipped

from tests.support.hostile import (
    cli_env,
    host_record,
    interpreter,
    inventory,
    load_fleet,
    only_run_dir,
    run_cli,
)
from tests.support.interrupt import interrupt_when
from tests.support.sshd import ROOT_DIR


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line contains `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:  # it ended while we looked
            pass
    return found


@pytest.mark.parametrize("workers", ["1", "2"])  # 2: hosts are handed to judges as they finish
def test_ctrl_c_records_finished_cut_off_and_never_started_hosts(tmp_path: Path, workers: str) -> None:
    slow = interpreter(tmp_path / "bin", "slow", "import time; time.sleep(60)")
    inv = inventory(tmp_path / "inventory.yml", {
        "fast01": {}, **{f"slow{i:02d}": {"ansible_python_interpreter": str(slow)} for i in range(1, 4)}})
    results = tmp_path / "results"
    # one host at a time: fast01 finishes, slow01 is being probed, slow02/03 wait their turn
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "--probe", "host", "--results", str(results),
         "-f", "1", "-t", "5", "--junit", str(tmp_path / "junit.xml")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(FLEETPROBE_WORKERS=workers), cwd=str(ROOT_DIR),
        stdin=subprocess.DEVNULL, text=True)
    # slow01 is in its probe once fast01 has answered
    rc, err = interrupt_when(proc, lambda: bool(list(results.glob("*/raw/fast01/_host.json"))))
    assert rc == 130, err
    assert not _processes_naming(str(results)), "no judge outlives the run"
    run_dir = only_run_dir(results)
    assert not list(run_dir.glob(".verdict-*"))
    assert ("interrupted: 1 of 4 host(s) finished, 1 cut off part-way, 2 never started; "
            f"results kept in {run_dir}") in err
    fleet = load_fleet(run_dir)
    assert host_record(fleet, "fast01")["outcome"] == "ok"
    assert host_record(fleet, "slow01")["outcome"] == "interrupted"
    for name in ("slow02", "slow03"):
        rec = host_record(fleet, name)
        assert (rec["outcome"], rec["reason"]) == ("skipped", "run interrupted before this host started")
    assert fleet["summary"]["outcomes"]["interrupted"] == 1 and fleet["summary"]["outcomes"]["skipped"] == 2
    # CI reads the same: the cut-off probe and the unstarted hosts' checks are skipped, never passed
    cases = {(suite.name, case.name): case for suite in JUnitXml.fromfile(str(tmp_path / "junit.xml")) for case in suite}
    assert [type(r) for r in cases[("slow01", "probe.host")].result] == [Skipped]
    assert [type(r) for r in cases[("slow02", "host.virtualized")].result] == [Skipped]
    assert cases[("fast01", "host.virtualized")].is_passed

    listed = run_cli(["runs", "--results", str(results), "--format", "json"])
    assert listed.code == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["state"], row["hosts"], row["ok"], row["interrupted"], row["skipped"]) == ("interrupted", 4, 1, 1, 2)
    assert row["inventory"] == str(inv) and row["playbook"] == "audit"
    table = run_cli(["runs", "--results", str(results)])
    assert "interrupted" in table.stdout and "['" not in table.stdout and "playbooks/audit.yml" not in table.stdout

    # re-judged, the stopped run stays a stopped run (it never becomes a complete baseline)
    rejudged = run_cli(["rejudge", run_dir.name, "--results", str(results), "-q"])
    assert rejudged.code in (0, 1), rejudged.stderr
    states = [r["state"] for r in json.loads(run_cli(["runs", "--results", str(results), "--format", "json"]).stdout)]
    assert states == ["interrupted", "interrupted"]


def test_plays_a_stopped_run_never_reached_are_recorded_as_not_started(tmp_path: Path) -> None:
    slow = interpreter(tmp_path / "bin", "slow", "import time; time.sleep(60)")
    inv = inventory(tmp_path / "inventory.yml", {"fast01": {}, "slow01": {"ansible_python_interpreter": str(slow)}})
    book = tmp_path / "two-plays.yml"
    book.write_text("- name: identity\n  hosts: all\n  probes: [host]\n"
                    "- name: bus\n  hosts: all\n  probes: [pcie]\n")
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "-p", str(book), "--results", str(results),
         "-f", "1", "-t", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), cwd=str(ROOT_DIR), stdin=subprocess.DEVNULL,
        text=True)
    rc, err = interrupt_when(proc, lambda: bool(list(results.glob("*/raw/fast01/_host.json"))))
    assert rc == 130, err
    # fast01 answered the first play only: not "finished"
    assert "interrupted: 0 of 2 host(s) finished, 2 cut off part-way, 0 never started" in err
    fleet = load_fleet(only_run_dir(results))
    for name, first in (("fast01", "ok"), ("slow01", "interrupted")):
        probes = host_record(fleet, name)["probes"]
        assert probes["host"]["outcome"] == first
        assert (probes["pcie"]["outcome"], probes["pcie"]["reason"]) == ("skipped", "run interrupted before this host started")
    listed = json.loads(run_cli(["runs", "--results", str(results), "--format", "json"]).stdout)
    assert listed[0]["playbook"] == "two-plays.yml" and listed[0]["state"] == "interrupted"
