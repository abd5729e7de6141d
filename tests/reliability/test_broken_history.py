"""History readers that never crash: a corrupt, partial or planted run costs that run only.

Every stored file is validated when read: a run whose run.json or fleet.json has unexpected types
is listed as unreadable with why and skipped as a drift baseline with a warning; a run that was
SIGKILLed or ran out of disk says "partial run: rejudge it"; `show`, `report`, `diff`, `runs`
and the next `probe run` never exit 70 because of what an older run left behind.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.store.compact import read_plain
from tests.support.hostile import host_record, inventory, load_fleet, run_cli


def _two_runs(tmp_path: Path) -> tuple[Path, Path, list[Path]]:
    inv = inventory(tmp_path / "inv.yml", {"good01": {}, "good02": {}})
    results = tmp_path / "results"
    for _ in range(2):
        res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)])
        assert res.code == 0, res.stderr
    return inv, results, sorted(p for p in results.iterdir() if p.is_dir())


def _no_crash(res: Any) -> None:
    assert res.code != 70, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr[-2000:]


CORRUPT_RUN_JSON: dict[str, Any] = {
    "summary_types": {"summary": {"hosts": "two", "outcomes": {"ok": "x"}, "findings": {"fail": "many"}}},
    "summary_list": {"summary": ["not", "a", "dict"], "inventory": 7, "started": 5},
}


@pytest.mark.parametrize("case", sorted(CORRUPT_RUN_JSON))
def test_a_run_json_of_wrong_types_is_listed_as_unreadable_and_skipped_as_baseline(tmp_path: Path, case: str) -> None:
    inv, results, (first, second) = _two_runs(tmp_path)
    meta = json.loads((first / "run.json").read_text())
    meta.update(CORRUPT_RUN_JSON[case])
    (first / "run.json").write_text(json.dumps(meta))
    listed = run_cli(["runs", "--results", str(results)])
    _no_crash(listed)
    assert first.name in listed.stdout
    for cmd in (["show", first.name], ["report", first.name, "-o", str(tmp_path / "r.html")],
                ["diff", first.name, second.name], ["diff"], ["show"], ["report", "-o", str(tmp_path / "l.html")]):
        _no_crash(run_cli([*cmd, "--results", str(results)]))
    # run 2 is the next run's baseline; with it corrupt too, run 1 is passed over with a warning
    meta2 = json.loads((second / "run.json").read_text())
    meta2.update(CORRUPT_RUN_JSON[case])
    (second / "run.json").write_text(json.dumps(meta2))
    again = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)])
    _no_crash(again)
    assert again.code == 0, again.stderr
    assert f"run {second.name} is not used as the drift baseline: run.json is unreadable" in again.stderr, again.stderr


CORRUPT_FLEET: dict[str, Any] = {
    "hosts_not_list": {"hosts": {"a": 1}},
    "host_types": {"hosts": [{"name": 5, "outcome": ["ok"], "probes": "x", "facts": [1]}]},
    "findings_types": {"findings": [{"id": 1, "severity": "loud", "host": None}, "x"]},
    "summary_types": {"summary": "nope", "classes": "x", "run": [1]},
}


@pytest.mark.parametrize("case", sorted(CORRUPT_FLEET))
def test_a_fleet_json_of_wrong_types_never_crashes_show_report_or_diff(tmp_path: Path, case: str) -> None:
    inv, results, (first, second) = _two_runs(tmp_path)
    fleet = read_plain(first / "fleet.json")
    fleet.update(CORRUPT_FLEET[case])
    (first / "fleet.json").write_text(json.dumps(fleet))
    (first / "fleet.index.json").unlink()
    for cmd in (["show", first.name], ["show", first.name, "--format", "csv"],
                ["report", first.name, "-o", str(tmp_path / "r.html")], ["diff", first.name, second.name],
                ["runs"], ["report", second.name, "-o", str(tmp_path / "s.html"), "--previous", first.name]):
        res = run_cli([*cmd, "--results", str(results)])
        _no_crash(res)
    again = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)])
    _no_crash(again)


def test_an_index_of_wrong_types_falls_back_to_the_whole_file(tmp_path: Path) -> None:
    _, results, (first, _second) = _two_runs(tmp_path)
    idx = json.loads((first / "fleet.index.json").read_text())
    idx["hosts"] = [[["not", "a", "name"], idx["hosts"][0][1], idx["hosts"][0][2]], *idx["hosts"][1:]]
    (first / "fleet.index.json").write_text(json.dumps(idx))
    res = run_cli(["show", first.name, "--results", str(results), "--hosts", "all"])  # healthy rows too
    _no_crash(res)
    assert "good01" in res.stdout


@pytest.mark.parametrize("how", ["sigkill", "disk_full"])
def test_a_partial_run_says_rejudge_it_and_rejudge_rebuilds_it(tmp_path: Path, how: str) -> None:
    _, results, (first, second) = _two_runs(tmp_path)
    # what a SIGKILL after the hosts, or a full disk at fleet.json, leaves: run.json, raw/, no fleet
    (second / "fleet.json").unlink()
    (second / "fleet.index.json").unlink()
    (second / "findings.json").unlink(missing_ok=True)
    meta = json.loads((second / "run.json").read_text())
    meta["state"] = "running" if how == "sigkill" else "failed"
    meta.pop("summary", None)
    (second / "run.json").write_text(json.dumps(meta))
    if how == "disk_full":
        (second / ".fleet.json.abc.tmp").write_bytes(b'{"schema_version":1,"hosts":[{"na')
    for cmd in (["show", second.name], ["report", second.name, "-o", str(tmp_path / "r.html")],
                ["diff", first.name, second.name]):
        res = run_cli([*cmd, "--results", str(results)])
        _no_crash(res)
        assert res.code == 2 and "partial run: rejudge it" in res.stderr, (cmd, res.code, res.stderr)
    listed = run_cli(["runs", "--results", str(results)])
    _no_crash(listed)
    rejudged = run_cli(["rejudge", second.name, "--results", str(results)])
    assert rejudged.code == 0, rejudged.stderr
    newest = sorted(p for p in results.iterdir() if p.is_dir() and not p.name.startswith("."))[-1]
    fleet = load_fleet(newest)
    assert {h["name"] for h in fleet["hosts"]} == {"good01", "good02"}
    assert host_record(fleet, "good01")["outcome"] == "ok"


def test_a_corrupt_host_file_costs_that_host_in_rejudge_with_a_warning(tmp_path: Path) -> None:
    _, results, (first, _second) = _two_runs(tmp_path)
    (first / "raw" / "good02" / "_host.json").write_text('{"name": 5, "probes": []}')
    res = run_cli(["rejudge", first.name, "--results", str(results)])
    _no_crash(res)
    assert "raw/good02" in res.stderr and "left out" in res.stderr, res.stderr
    newest = sorted(p for p in results.iterdir() if p.is_dir())[-1]
    assert [h["name"] for h in load_fleet(newest)["hosts"]] == ["good01"]
    shutil.rmtree(first / "raw")
    res = run_cli(["rejudge", first.name, "--results", str(results)])
    _no_crash(res)
    assert res.code == 2
