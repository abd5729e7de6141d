"""A run stored in fleet.json schema 1 (tests/fixtures/runs_v1: written by the code before schema
2) is read by every reader exactly as the same document written as fleetprobe writes it today
(schema 3 since issue 51; tests/store/test_stored_forms.py reads schemas 1 to 3): show (tables,
views, JSON, CSV), diff (no changes), report, the machine outputs and merge; rejudge and merge
write today's schema.  A schema-1 run rejudged today keeps its findings."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.stored import load_result
from orchestrator.present.outputs.emit import write_outputs
from orchestrator.store import atomic, members
from orchestrator.store.compact import read_plain
from orchestrator.store.fleet_file import INDEX_NAME, read_fleet, write_fleet
from orchestrator.store.spool import SpooledRecords
from tests.support.fleet import Cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs_v1" / "20261201T134403Z-916ca5822"
V1, V2 = FIXTURE.name, "20261201T134500Z-916ca5823"  # the stored run, and the same document as written today


def _written_schema(path: Path) -> Any:
    """The schema_version a fleet.json was written with (schema 3: gzip members, store/members.py)."""
    return members.loads(path.read_bytes())["schema_version"]


def _copy_v1(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    # a checkout does not keep file times: give fleet.json the time its schema-1 index recorded,
    # so the readers take the index path as they did on the run's own disk
    idx = json.loads((dest / INDEX_NAME).read_text())
    os.utime(dest / "fleet.json", ns=(idx["mtime_ns"], idx["mtime_ns"]))
    return dest


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    cli = Cli.create(tmp_path_factory.mktemp("upgrade"))
    old = _copy_v1(FIXTURE, cli.results / V1)
    new = cli.results / V2
    shutil.copytree(FIXTURE, new)
    meta = json.loads((new / "run.json").read_text())
    meta["id"] = V2
    atomic.write_json(new / "run.json", meta, indent=1)
    write_fleet(new / "fleet.json", read_plain(old / "fleet.json"))
    return cli


def test_the_fixture_is_schema_1_read_by_its_index(cli: Cli) -> None:
    raw = json.loads((cli.results / V1 / "fleet.json").read_text())
    assert raw["schema_version"] == 1 and len(raw["hosts"]) == 3
    assert _written_schema(cli.results / V2 / "fleet.json") == members.SCHEMA_VERSION
    for run in (V1, V2):
        doc = read_fleet(cli.results / run / "fleet.json")
        assert isinstance(doc["hosts"], SpooledRecords)  # host by host, through the index
        assert [json.dumps(h) for h in doc["hosts"]] == [json.dumps(h) for h in raw["hosts"]]


def _same(text: str) -> str:
    """Output with the two runs' names (the directory read, the id it holds) made one.  The report's
    content-security hashes are of its inline style, which prints the run's id on every page: the
    style itself is compared with the names made one, its hash cannot be."""
    return re.sub(r"sha256-[A-Za-z0-9+/=]+", "sha256-HASH", text.replace(V1, "RUN").replace(V2, "RUN"))


def _ok(cli: Cli, *args: str, codes: tuple[int, ...] = (0, 1)) -> str:
    proc = cli.run(*args)
    assert proc.returncode in codes, (args, proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_show_reads_both_schemas_alike(cli: Cli) -> None:
    printed = json.loads(_ok(cli, "show", V1, "--format", "json"))
    raw = json.loads((cli.results / V1 / "fleet.json").read_text())
    # everything stored is shown unchanged; what today's verdict decides of an old run is added:
    # each host's health, each fault's root and the action its rule asks for (with no devices: an
    # old run named them only in its subjects), the summary's health and faults, run.json's state
    added_host, added_finding = {"health"}, {"caused_by", "consequences", "action", "because", "devices"}
    assert [{k: v for k, v in h.items() if k not in added_host} for h in printed["hosts"]] == raw["hosts"]
    assert [{k: v for k, v in f.items() if k not in added_finding} for f in printed["findings"]] == raw["findings"]
    assert all(h["health"]["state"] in ("healthy", "failed") for h in printed["hosts"])
    assert all(f["action"] and f["because"] and f["devices"] == [] for f in printed["findings"])
    assert {k: printed["summary"][k] for k in raw["summary"]} == raw["summary"]
    assert sum(printed["summary"]["health"].values()) == 3 and printed["run"]["state"] == "complete"
    for key in ("classes", "silenced", "not_judged"):
        assert printed[key] == raw[key], key
    assert printed["hosts"][1]["facts"]["p2p"]["pairs"]  # premigration: every section is there
    for args in (["--format", "json"], ["--format", "csv"], ["--format", "yaml"], [],
                 ["--show", "pcie,gpus,topo,nvlink,p2p,nccl,kmsg,nic"]):
        # the table names the run directory it read
        assert _same(_ok(cli, "show", V1, *args)) == _same(_ok(cli, "show", V2, *args)), args


def test_diff_across_the_upgrade_finds_no_change(cli: Cli) -> None:
    doc = json.loads(_ok(cli, "diff", V1, V2, "--format", "json", codes=(0,)))
    assert doc["changes"] == [] and doc["run_changes"] == []
    assert doc["not_in_new"]["hosts"] == [] and doc["not_in_old"]["hosts"] == []
    back = json.loads(_ok(cli, "diff", V2, V1, "--format", "json", codes=(0,)))
    assert back["changes"] == [] and back["run_changes"] == [] and back["not_compared"] == doc["not_compared"]


def test_report_and_outputs_read_both_schemas_alike(cli: Cli, tmp_path: Path) -> None:
    pages = []
    for run, previous in ((V1, V2), (V2, V1)):  # each with drift against the other: none
        out = tmp_path / f"{run}.html"
        _ok(cli, "report", run, "--previous", previous, "-o", str(out), codes=(0,))
        pages.append(out.read_text())
    assert "dgx-a100-03" in pages[0] and _same(pages[0]) == _same(pages[1])
    files: dict[str, list[str]] = {}
    for run in (V1, V2):
        d = tmp_path / run
        d.mkdir()
        kinds = {"prometheus": d / "m.prom", "junit": d / "j.xml", "ansible_inventory": d / "inv.yml",
                 "hosts_csv": d / "h.csv", "findings_csv": d / "f.csv", "slurm_drain": d / "drain.txt"}
        write_outputs(load_result(cli.results / run), **kinds)  # type: ignore[arg-type]
        files[run] = [_same(p.read_text()) for p in kinds.values()]  # they name the run they read
    assert files[V1] == files[V2]
    assert "dgx-h100-05" in files[V1][0] and "<testsuite" in files[V1][1]


def test_merge_reads_schema_1_and_writes_today_s_schema(cli: Cli) -> None:
    proc, fresh = cli.run_json("run", "-p", "premigration", "-l", "dgx-h100-02,rtx4090-01")
    assert proc.returncode in (0, 1), proc.stderr
    merged = json.loads(_ok(cli, "merge", V1, fresh["run"]["id"], "--results", str(cli.results), "--format", "json"))
    assert [h["name"] for h in merged["hosts"]] == ["dgx-h100-01", "dgx-h100-02", "dgx-h100-05", "dgx-a100-03",
                                                    "rtx4090-01"]
    run_dir = cli.results / merged["run"]["id"]
    assert _written_schema(run_dir / "fleet.json") == members.SCHEMA_VERSION
    stored = {h["name"]: h for h in read_plain(cli.results / V1 / "fleet.json")["hosts"]}

    def judged(h: dict[str, Any]) -> dict[str, Any]:
        # fleet-wide, so judged again: the class, and the health (the fleet's findings count in it)
        return {k: v for k, v in h.items() if k not in ("fingerprint", "class", "health")}
    for h in read_plain(run_dir / "fleet.json")["hosts"]:
        if h["name"] in stored:
            assert judged(h) == judged(stored[h["name"]])


def test_rejudge_of_a_schema_1_run_writes_today_s_schema(cli: Cli, tmp_path: Path) -> None:
    _ok(cli, "rejudge", V1, "--format", "json")
    # Today's checks may find more than the stored run's did; what the upgrade must keep is shown on
    # a schema-1 run written from today's judgement: rejudged, the same findings and facts.
    proc, fresh = cli.run_json("run", "-p", "premigration", "-l", "dgx-h100-05,dgx-a100-03")
    assert proc.returncode == 1, proc.stderr
    src = cli.results / fresh["run"]["id"]
    old = cli.results / "20261201T235959Z-aaaaaaaaa"
    shutil.copytree(src, old)
    meta = json.loads((old / "run.json").read_text())
    meta["id"] = old.name
    atomic.write_json(old / "run.json", meta, indent=1)
    (old / INDEX_NAME).unlink()
    atomic.write_json(old / "fleet.json", read_plain(src / "fleet.json"))  # the schema-1 writer's bytes
    assert json.loads((old / "fleet.json").read_text())["schema_version"] == 1
    again = json.loads(_ok(cli, "rejudge", old.name, "--format", "json"))
    new_dir = cli.results / again["run"]["id"]
    assert _written_schema(new_dir / "fleet.json") == members.SCHEMA_VERSION
    rejudged = read_plain(new_dir / "fleet.json")
    assert rejudged["findings"] == fresh["findings"] and rejudged["findings"]
    assert [h["facts"] for h in rejudged["hosts"]] == [h["facts"] for h in fresh["hosts"]]
    assert json.loads(_ok(cli, "diff", old.name, new_dir.name, "--format", "json", codes=(0,)))["changes"] == []
