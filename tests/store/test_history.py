"""Run history: listing (incl. partial and corrupt runs), RUN references, retention, predecessor."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from orchestrator.store.history import (
    RUN_DIR_RE,
    RunNotFound,
    list_runs,
    load_fleet,
    new_run_id,
    parse_keep,
    previous_run,
    prune,
    resolve_run,
    summarize_run,
)
from orchestrator.verdict.result import FleetResult

T0 = datetime(2026, 11, 20, 2, 15, tzinfo=timezone.utc)


def make_run(results: Path, day: int, short: str, inventory: str = "fleet.yaml", outcomes=("ok", "ok"),
             findings=("fail", "warn", "warn"), fleet: bool = True, summary: bool = True) -> Path:
    when = T0 + timedelta(days=day)
    rid = f"{when.strftime('%Y%m%dT%H%M%SZ')}-{short}"
    d = results / rid
    (d / "raw").mkdir(parents=True)
    run = {"id": rid, "started": when.isoformat(), "finished": (when + timedelta(seconds=40)).isoformat(),
           "inventory": [inventory], "playbook": "audit", "probes": ["host"], "limit": None, "user": "ops"}
    (d / "run.json").write_text(json.dumps(run))
    if fleet:
        hosts = [{"name": f"h{i}", "outcome": o} for i, o in enumerate(outcomes)]
        fl = [{"id": "x", "severity": s, "host": "h0", "subject": "s"} for s in findings]
        sev = {k: sum(1 for s in findings if s == k) for k in ("fail", "warn", "info")}
        doc = {"schema_version": 1, "run": run, "hosts": hosts, "findings": fl}
        if summary:
            doc["summary"] = {"hosts": len(hosts), "findings": sev}
        (d / "fleet.json").write_text(json.dumps(doc))
    return d


@pytest.fixture
def results(tmp_path: Path) -> Path:
    r = tmp_path / "results"
    make_run(r, 0, "aaaaaa", outcomes=("ok", "unreachable", "timeout", "unsupported"))
    make_run(r, 1, "bbbbbb", inventory="lab.yaml", findings=(), summary=False)
    make_run(r, 2, "cccccc", findings=("info",), summary=False)
    make_run(r, 3, "dddddd", fleet=False)  # crashed before fleet.json: raw/ only
    (r / "not-a-run").mkdir()  # ignored, never pruned
    (r / "20261124T021500Z-eeeeee").mkdir()
    (r / "20261124T021500Z-eeeeee" / "fleet.json").write_text("{truncated")
    return r


def test_new_run_id_is_a_sortable_run_dir_name():
    a = new_run_id(T0)
    assert RUN_DIR_RE.match(a) and a.startswith("20261120T021500Z-")
    assert new_run_id(T0) != a  # the random part keeps two runs in one second apart
    later = [new_run_id(T0.replace(microsecond=ms * 1000)) for ms in (5, 250, 999)]
    assert sorted(later) == later and all(RUN_DIR_RE.match(r) for r in later)  # start order within a second


def test_list_runs_counts_and_marks_partial_runs(results: Path):
    runs = list_runs(results)
    assert [r.id.split("-")[1] for r in runs] == ["aaaaaa", "bbbbbb", "cccccc", "dddddd", "eeeeee"]
    a, b, c, d, e = runs
    assert (a.hosts, a.ok, a.unsupported, a.failed, a.unreachable) == (4, 1, 1, 1, 1)
    assert a.findings == {"fail": 1, "warn": 2, "info": 0}
    assert a.inventory == ["fleet.yaml"] and a.playbook == "audit" and a.started == T0
    assert not a.partial and a.problem == ""
    assert b.findings == {"fail": 0, "warn": 0, "info": 0} and b.inventory == ["lab.yaml"]
    assert c.findings == {"fail": 0, "warn": 0, "info": 1}  # counted from the list without a summary
    assert d.partial and d.problem == "no fleet.json" and d.playbook == "audit"
    assert e.partial and "no run.json" in e.problem and "fleet.json is not valid JSON" in e.problem
    assert e.started == datetime(2026, 11, 24, 2, 15, tzinfo=timezone.utc)  # from the directory name
    json.dumps([r.to_dict() for r in runs])  # JSON-able for --format json


def test_list_runs_of_missing_directory_is_empty(tmp_path: Path):
    assert list_runs(tmp_path / "nothing") == []


def test_resolve_run_references(results: Path):
    names = [r.id for r in list_runs(results)]
    assert resolve_run(results).name == names[-1]
    assert resolve_run(results, "latest").name == names[-1]
    assert resolve_run(results, "-1").name == names[-1]
    assert resolve_run(results, "-2").name == names[-2]
    assert resolve_run(results, "cccc").name == names[2]  # short id prefix
    assert resolve_run(results, "20261121").name == names[1]  # id prefix
    assert resolve_run(results, str(results / names[0])) == results / names[0]
    with pytest.raises(RunNotFound, match="matches 5 runs"):
        resolve_run(results, "2026")
    with pytest.raises(RunNotFound, match=r"no run matches 'zzz'.*probe runs"):
        resolve_run(results, "zzz")
    with pytest.raises(RunNotFound, match="only 5 run"):
        resolve_run(results, "-6")
    with pytest.raises(RunNotFound, match="no runs under"):
        resolve_run(results.parent / "empty")


def test_previous_run_same_inventory_skips_partial_and_other_inventories(results: Path):
    prev = previous_run(results, "cccc")
    assert prev is not None and prev.id.endswith("aaaaaa")
    prev_any = previous_run(results, "cccc", same_inventory=False)
    assert prev_any is not None and prev_any.id.endswith("bbbbbb")
    assert previous_run(results, "aaaa") is None
    # the crashed run d is never a baseline: the run after it compares with c
    make_run(results, 5, "ffffff")
    prev_f = previous_run(results, "latest")
    assert prev_f is not None and prev_f.id.endswith("cccccc")


def test_parse_keep():
    assert parse_keep("30") == (30, None)
    assert parse_keep("14d") == (None, 14)
    assert parse_keep("30, 14d") == (30, 14)
    for bad in ("", "0", "2w", "-3", "d"):
        with pytest.raises(ValueError, match="--keep"):
            parse_keep(bad)


def test_prune_by_count_keeps_the_newest(results: Path):
    removed = prune(results, keep_count=2)
    assert [p.name.split("-")[1] for p in removed] == ["aaaaaa", "bbbbbb", "cccccc"]
    assert [r.id.split("-")[1] for r in list_runs(results)] == ["dddddd", "eeeeee"]
    assert (results / "not-a-run").is_dir()


def test_prune_by_age_protects_baseline_and_newest(results: Path):
    now = T0 + timedelta(days=30)
    baseline = list_runs(results)[1].id
    removed = prune(results, keep_days=7, now=now, protect=(baseline,))
    left = [r.id for r in list_runs(results)]
    assert baseline in left and left[-1].endswith("eeeeee") and len(left) == 2
    assert len(removed) == 3
    assert prune(results) == []  # no policy: nothing removed
    with pytest.raises(ValueError):
        prune(results, keep_count=0)


def test_diff_pair_defaults_and_load_fleet(results: Path):
    from orchestrator.store.history import diff_pair, load_fleet

    names = [r.id for r in list_runs(results)]
    # d and e are partial; the newest complete run is c, and its predecessor of the same inventory a
    old, new = diff_pair(results)
    assert (old.name, new.name) == (names[0], names[2])
    old, new = diff_pair(results, "bbbb")
    assert (old.name, new.name) == (names[1], names[4])
    old, new = diff_pair(results, "cccc", "aaaa")
    assert (old.name, new.name) == (names[2], names[0])
    assert load_fleet(old)["run"]["id"] == names[2]
    with pytest.raises(RunNotFound, match=r"fleet\.json is not valid JSON"):
        load_fleet(results / names[4])
    solo = results.parent / "solo"
    make_run(solo, 0, "ffffff")
    with pytest.raises(RunNotFound, match="no earlier complete run"):
        diff_pair(solo)
    with pytest.raises(RunNotFound, match="no complete run"):
        diff_pair(results.parent / "none")


def test_listing_takes_counts_from_run_json_without_reading_fleet_json(tmp_path: Path):
    """`probe run` lists the history to find the previous run; parsing every run's fleet.json
    (120 MB at 1,000 GPU servers) is what run.json's summary is there to avoid."""
    d = make_run(tmp_path, 0, "ffffff", outcomes=("ok", "unreachable", "timeout", "unsupported", "failed"),
                 findings=("fail", "warn", "warn"))
    by_fleet = summarize_run(d)
    run = json.loads((d / "run.json").read_text())
    run["summary"] = {"hosts": 5, "outcomes": {"ok": 1, "unreachable": 1, "timeout": 1, "unsupported": 1,
                                               "failed": 1, "skipped": 0, "invalid_output": 0},
                      "findings": {"fail": 1, "warn": 2, "info": 0}}
    (d / "run.json").write_text(json.dumps(run))
    (d / "fleet.json").write_text("{not read")  # proves it: a parse would mark the run partial
    by_run = summarize_run(d)
    assert not by_run.partial
    assert (by_run.hosts, by_run.ok, by_run.failed, by_run.unreachable, by_run.findings) == \
           (by_fleet.hosts, by_fleet.ok, by_fleet.failed, by_fleet.unreachable, by_fleet.findings)
    (d / "fleet.json").unlink()
    assert summarize_run(d).partial and summarize_run(d).problem == "no fleet.json"


@pytest.mark.parametrize("text", [
    '{"hosts": 5, "findings": []}', '{"findings": []}', '{"hosts": [], "findings": {}}',
])
def test_a_damaged_fleet_json_is_run_not_found_with_the_reason(tmp_path: Path, text: str):
    """A hand-made or damaged fleet.json is one message (probe show / merge / diff), not exit 70."""
    (tmp_path / "fleet.json").write_text(text)
    with pytest.raises(RunNotFound, match=r"fleet\.json is unreadable"):
        load_fleet(tmp_path)


@pytest.mark.parametrize("text, problem", [
    ('{"hosts": [7, {"name": "a"}], "findings": []}', "host record 0 names no host: left out"),
    ('{"hosts": [{"name": "a"}], "findings": [{"id": 1}]}', "finding"),
])
def test_a_damaged_record_of_fleet_json_costs_only_that_record(tmp_path: Path, text: str, problem: str):
    """The document is whole, one of its records is not: the run still reads, the record is left
    out and said so, the rest is kept."""
    (tmp_path / "fleet.json").write_text(text)
    fleet = FleetResult.from_document(load_fleet(tmp_path))
    assert fleet.hosts.names() == ["a"]
    assert fleet.findings == []
    assert any(problem in p for p in fleet.problems), fleet.problems


def test_unsupported_hosts_are_counted_apart_from_ok(tmp_path: Path):
    """`probe runs` said ok=30 for a premigration run whose RECAP said ok=4 unsupported=26: a host
    where a probe could not measure is not ok."""
    d = make_run(tmp_path, 0, "eeeeee", outcomes=("ok", "unsupported", "unsupported", "unreachable"), findings=())
    s = summarize_run(d)
    assert (s.ok, s.unsupported, s.unreachable) == (1, 2, 1)
    assert s.to_dict()["unsupported"] == 2
