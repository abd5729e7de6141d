"""`probe import` of a directory of bundle documents streams: one document is read, classified,
stored and let go before the next is read, and the run judges what a live run of the same answers
judges.

The documents are made from the demo recordings exactly as the bundle runner prints them (the
audit playbook's probes, each answer the recorded envelope); the live run replays the same
recordings.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api import ansible_job, collected, import_workers
from orchestrator.api import plan as plan_mod
from orchestrator.api.collected import document_files, import_documents, read_document
from orchestrator.api.plan import PlanInputs, build_plan
from orchestrator.engine import bundle
from orchestrator.engine.results import HostInput
from orchestrator.inventory.model import Host
from orchestrator.simulate.record import demo_hosts
from orchestrator.store.compact import read_plain
from orchestrator.store.rundir import RunDirectory
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict import parallel
from orchestrator.verdict.parallel import WORKERS_ENV
from tests.support.collected import AUDIT_PROBES as AUDIT
from tests.support.collected import RECORDINGS, finding_keys, recorded_document
from tests.support.fleet import Cli


def _document(name: str, machine: str) -> dict[str, Any]:
    return recorded_document({"hostname": name}, machine)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("import-stream")
    machines = list(demo_hosts())
    hosts = {f"{m}-{k}": m for k in (1, 2) for m in machines}
    docs = tmp / "docs"
    docs.mkdir()
    for i, (name, machine) in enumerate(hosts.items()):
        (docs / f"{i:03d}.json").write_text(json.dumps(_document(name, machine)))
    inv = tmp / "inv.yml"
    lines = ["all:", "  hosts:"]
    for name, machine in hosts.items():
        lines += [f"    {name}:", "      ansible_connection: replay", f"      probe_replay: {json.dumps(machine)}"]
    inv.write_text("\n".join(lines) + "\n")
    return {"tmp": tmp, "docs": docs, "hosts": hosts, "inv": inv}


class _Tracked(bundle.Document):
    """A parsed document whose life the test can see."""


def _tracking(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """bundle.read_document patched to count the documents read and the most alive at once."""
    live: set[int] = set()
    peak = [0]
    read = [0]
    real = bundle.read_document

    def tracked(data: bytes) -> bundle.Document:
        doc = real(data)
        mine = _Tracked(**{f: getattr(doc, f) for f in doc.__dataclass_fields__})
        read[0] += 1
        live.add(id(mine))
        peak[0] = max(peak[0], len(live))
        weakref.finalize(mine, live.discard, id(mine))
        return mine

    monkeypatch.setattr(bundle, "read_document", tracked)
    return read, peak


def test_an_import_holds_one_document_at_a_time(fleet: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    read, peak = _tracking(monkeypatch)
    result, _ = import_documents([fleet["docs"]], fleet["tmp"] / "in-process")
    assert read[0] == len(fleet["hosts"])  # each document read once
    assert peak[0] <= 2, f"{peak[0]} documents held at once"
    assert sorted(result.fleet.hosts.names()) == sorted(fleet["hosts"])
    assert not [p for p in (fleet["tmp"] / "in-process").iterdir() if p.name.endswith(".staging")], \
        "the import left its staging directory behind"


def test_the_import_judges_what_a_live_run_of_the_same_answers_judges(fleet: dict[str, Any]) -> None:
    cli = Cli.create(fleet["tmp"])
    proc, imported = cli.run_json("import", str(fleet["docs"]), "-i", str(fleet["inv"]), "--results",
                                  str(fleet["tmp"] / "imported"))
    assert proc.returncode in (0, 1, 5), proc.stderr
    proc, live = cli.run_json("run", "-i", str(fleet["inv"]))
    assert proc.returncode in (0, 1, 5), proc.stderr
    assert [h["name"] for h in imported["hosts"]] == [h["name"] for h in live["hosts"]]  # the inventory's order
    assert finding_keys(imported["findings"]) == finding_keys(live["findings"])


def test_a_worker_holds_one_document_at_a_time_and_stages_each_hosts_files(
        fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What an import's worker process does with its slice of the files, run here to be watched:
    each document read once, one alive at a time, its probe files staged under the file's place
    and only names and summaries handed back."""
    read, peak = _tracking(monkeypatch)
    files = document_files([fleet["docs"]])[:20]
    run = RunDirectory.create_staged(tmp_path, RunMeta())
    host_for = lambda base, ident: Host(name=base, groups=["all"])  # noqa: E731
    part = tmp_path / "part.pickle"
    import_workers.read_slice(files, 100, read_document, host_for, run, part)
    assert read[0] == len(files) and peak[0] <= 2, f"{peak[0]} documents held at once"
    back = list(import_workers._read_back([part]))
    assert [rd.source for rd in back] == [str(f) for f in files]
    for i, rd in enumerate(back):
        assert rd.result is not None and rd.staged == run.dir / ".staged" / str(100 + i)
        assert sorted(p.name for p in rd.staged.iterdir() if p.suffix == ".json") == sorted(
            f"{p}.json" for p in AUDIT if rd.result.probes[p].envelope is not None)
        assert all(r.envelope is None or r.envelope.data == {} for r in rd.result.probes.values())


def _run_of(results: Path) -> Path:
    (run,) = [d for d in results.iterdir() if (d / "fleet.json").is_file()]
    return run


def _raw_tree(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted((run / "raw").rglob("*")) if p.is_file()}


def test_an_import_in_workers_stores_and_judges_what_one_process_does(fleet: dict[str, Any], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The same documents (two of one host, one that is not a document) imported by two reading
    processes and by one: the same raw files, byte for byte, the same host records and findings,
    and no staging left in the run."""
    docs = tmp_path / "docs"
    shutil.copytree(fleet["docs"], docs)
    first = sorted(docs.iterdir())[0]
    (docs / "zz-again.json").write_bytes(first.read_bytes())  # a second document of one host
    (docs / "zz-cut.json").write_text('{"fleetprobe_bundle": 1, "identity": ')
    marks = tmp_path / "marks"
    marks.mkdir()
    real = import_workers.read_slice

    def marked(files: Any, first: int, *rest: Any) -> None:
        (marks / f"{os.getpid()}-{first}").touch()  # which process read which slice
        real(files, first, *rest)

    monkeypatch.setattr(import_workers, "read_slice", marked)
    runs = {}
    for workers in (1, 2):
        monkeypatch.setenv(WORKERS_ENV, str(workers))
        result, _ = import_documents([docs], tmp_path / f"results-{workers}", (str(fleet["inv"]),))
        runs[workers] = result.run.dir
    assert sorted(int(m.name.split("-")[1]) for m in marks.iterdir()) == [0, (len(fleet["hosts"]) + 2) // 2]
    assert all(int(m.name.split("-")[0]) != os.getpid() for m in marks.iterdir())
    one, two = runs[1], runs[2]
    assert _raw_tree(two) == _raw_tree(one)
    assert len({p.split("/")[1] for p in _raw_tree(one)}) == len(fleet["hosts"]) + 2
    doc_one, doc_two = read_plain(one / "fleet.json"), read_plain(two / "fleet.json")
    assert doc_two["hosts"] == doc_one["hosts"] and doc_two["findings"] == doc_one["findings"]
    assert any(h["name"].endswith("#2") for h in doc_one["hosts"])
    assert not (two / ".staged").exists() and not (one / ".staged").exists()


def test_a_failed_reading_worker_leaves_the_import_to_this_process(fleet: dict[str, Any], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that dies (here: every one) costs nothing: the documents are read here instead,
    and nothing it staged is left behind."""
    def dying(files: Any, first: int, read: Any, host_for: Any, run: RunDirectory, *rest: Any) -> None:
        run.stage_dir(str(first)).joinpath("half-written").write_text("x")
        (tmp_path / f"died-{first}").touch()
        raise OSError("the worker's disk went away")

    monkeypatch.setattr(import_workers, "read_slice", dying)
    monkeypatch.setenv(WORKERS_ENV, "2")
    result, _ = import_documents([fleet["docs"]], tmp_path / "results")
    assert list(tmp_path.glob("died-*"))  # a worker ran and died (the first to die stops the others)
    assert sorted(result.fleet.hosts.names()) == sorted(fleet["hosts"])
    assert not (result.run.dir / ".staged").exists()
    assert all(len(list(d.glob("*.json"))) > 1 for d in (result.run.dir / "raw").iterdir())


def test_no_document_at_all_leaves_no_run_behind(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.json").write_text('{"fleetprobe_bundle": 1, "identity": ')  # cut off mid-write
    results = tmp_path / "results"
    proc = Cli.create(tmp_path).run("import", str(docs), "--results", str(results))
    assert proc.returncode == 2, proc.stderr
    assert "none of the 1 file(s) is a fleetprobe bundle document" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not [p for p in results.iterdir() if not p.name.endswith(".lock")] if results.is_dir() else True


class _Answer(ansible_job.TaskAnswer):
    """A task answer whose life the test can see."""


def test_an_ansible_runner_import_holds_one_event_at_a_time(fleet: dict[str, Any], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The events of an ansible-runner job (a task per probe and host) are read, stored and let go
    one at a time, in the job's order, and the run has every host with every probe."""
    events = tmp_path / "artifacts" / "job_events"
    events.mkdir(parents=True)
    counter = 0
    for name, machine in fleet["hosts"].items():
        for probe in ("host", "nvml"):
            counter += 1
            envelope = json.loads((RECORDINGS / machine / f"{probe}.json").read_text())
            answer = {"probe": probe, "exit": 0, "timed_out": False, "out_trunc": False, "err_trunc": False,
                      "duration_s": 0.2, "stderr": ""}
            (events / f"{counter}-{name}-{probe}.json").write_text(json.dumps(
                {"counter": counter, "event": "runner_on_ok", "event_data": {
                    "host": name, "task_action": f"fleetprobe.gpu.{probe}",
                    "res": {"envelope": envelope, "fleetprobe_answer": answer}}}))
    live: set[int] = set()
    peak = [0]
    real = ansible_job.answers_from

    def tracked(records: Any) -> list[ansible_job.TaskAnswer]:
        out = []
        for a in real(records):
            mine = _Answer(a.host, a.probe, a.status, a.res)
            live.add(id(mine))
            peak[0] = max(peak[0], len(live))
            weakref.finalize(mine, live.discard, id(mine))
            out.append(mine)
        return out

    monkeypatch.setattr(ansible_job, "answers_from", tracked)
    result, _ = ansible_job.import_runner_artifacts(tmp_path / "artifacts", tmp_path / "results", (), None, None)
    assert peak[0] <= 2, f"{peak[0]} task answers held at once"
    assert sorted(result.fleet.hosts.names()) == sorted(fleet["hosts"])
    assert all(sorted(h.probes) == ["host", "nvml"] for h in result.fleet.hosts)
    assert result.run.meta.collected == {"via": "ansible-runner", "tasks": counter}

# Hosts judged in the worker that read their document (api/import_judged.py), kept only where the
# whole run's plan judges every host the same way. Each case imports the same documents in two
# reading workers and in one process, which judges after reading; a patched `judge_hosts` shows
# whether the two-worker import kept its workers' verdicts (it is then never called) or judged
# its hosts again after reading.


def _import_both(docs: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch, inventory: tuple[str, ...] = (),
                 playbook: str | None = None) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(one process's fleet.json, two workers', how often the two-worker import judged after reading)."""
    judged_after = []
    real = parallel.judge_hosts

    def counted(*args: Any, **kw: Any) -> Any:
        judged_after.append(1)
        return real(*args, **kw)

    runs = {}
    for workers in (1, 2):
        monkeypatch.setenv(WORKERS_ENV, str(workers))
        monkeypatch.setattr(parallel, "judge_hosts", counted)
        judged_after.clear()
        result, _ = import_documents([docs], tmp / f"results-{workers}", inventory, playbook)
        runs[workers] = result.run.dir
        del result  # its records' spool goes with it
        gc.collect()
        assert not list((tmp / f"results-{workers}").glob(".verdict-*")), "a spool left behind"
    assert _raw_tree(runs[2]) == _raw_tree(runs[1])
    return read_plain(runs[1] / "fleet.json"), read_plain(runs[2] / "fleet.json"), len(judged_after)


def test_hosts_judged_where_they_were_read_are_the_hosts_one_process_judges(
        fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that is not a document is judged where it was read too (as the host named after it)."""
    docs = tmp_path / "docs"
    shutil.copytree(fleet["docs"], docs)
    (docs / "zz-cut.json").write_text('{"fleetprobe_bundle": 1, "identity": ')
    for inventory in ((), (str(fleet["inv"]),)):
        one, two, judged_after = _import_both(docs, tmp_path / str(len(inventory)), monkeypatch, inventory)
        assert judged_after == 0, "the workers' verdicts were not kept"
        assert two["hosts"] == one["hosts"] and two["findings"] == one["findings"]
        assert two["summary"] == one["summary"]
        assert "zz-cut.json" in {h["name"] for h in two["hosts"]} and len(two["hosts"]) == len(fleet["hosts"]) + 1


def test_a_second_document_of_a_host_has_every_host_judged_after_reading(
        fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker judged it under its document's name; the run keeps it as name#2."""
    docs = tmp_path / "docs"
    shutil.copytree(fleet["docs"], docs)
    first = sorted(docs.iterdir())[0]
    (docs / "zz-again.json").write_bytes(first.read_bytes())
    one, two, judged_after = _import_both(docs, tmp_path, monkeypatch)
    assert judged_after == 1
    assert two["hosts"] == one["hosts"] and two["findings"] == one["findings"]
    assert any(h["name"].endswith("#2") for h in two["hosts"])


def test_a_play_that_selects_by_the_other_hosts_has_every_host_judged_after_reading(
        fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`all[0]` is every host when each is judged alone, and only the first in the whole run: the
    workers' expectations are wrong for the others, so none of their verdicts is kept."""
    book = tmp_path / "book.yml"
    book.write_text("- name: audit\n  hosts: all\n  probes: [host, pcie, nvml, nvlink, kmsg, nic]\n"
                    "- name: the first host is held to more\n  hosts: all[0]\n  expect:\n    gpu_count: 99\n"
                    "  probes: [host]\n")
    one, two, judged_after = _import_both(fleet["docs"], tmp_path, monkeypatch, playbook=str(book))
    assert judged_after == 1
    assert two["hosts"] == one["hosts"] and two["findings"] == one["findings"]
    held = [h["name"] for h in two["hosts"] if h["expect"].get("gpu_count") == 99]
    assert len(held) == 1  # the first host only, as the whole run's plan says


def test_documents_of_another_plan_are_judged_under_the_first_documents(
        fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers judge under the first document's plan, which is the run's plan: a later
    document's other plan changes nothing of the verdicts (the import warns about it)."""
    docs = tmp_path / "docs"
    shutil.copytree(fleet["docs"], docs)
    last = sorted(docs.iterdir())[-1]
    doc = json.loads(last.read_text())
    doc["plan"] = {"playbook": "premigration", "probes": [], "expect": ["gpu_count=3"], "timeout": 60.0}
    last.write_text(json.dumps(doc))
    one, two, judged_after = _import_both(docs, tmp_path, monkeypatch)
    assert judged_after == 0
    assert two["hosts"] == one["hosts"] and two["findings"] == one["findings"]
    assert not any(h["expect"].get("gpu_count") == 3 for h in two["hosts"])


@pytest.mark.parametrize("playbook", ["audit", "premigration", "quick"])
def test_a_host_alone_is_expected_what_the_whole_run_expects_of_it_where_plays_select_by_group(
        fleet: dict[str, Any], playbook: str) -> None:
    """The demo inventory's groups, expectations per group and per play, and --expect."""
    inputs = PlanInputs(inventory=(str(fleet["inv"]),), playbook=playbook, expect=("nic_count=2",))
    stored = [HostInput(name=n, address=n, groups=["all", "demo", m.split("-")[0]], probes={}, data={},
                        vars={"probe_expect": {"gpu_count": 8}} if i % 2 else {})
              for i, (n, m) in enumerate(fleet["hosts"].items())]
    whole = build_plan(inputs, stored=stored)
    alone = plan_mod.expectations_alone(inputs)
    assert [alone(h) for h in stored] == [whole.expectations_for(h.name, h.vars) for h in stored]
    assert any(alone(h).gpu_count == 8 for h in stored) and all(alone(h).nic_count == 2 for h in stored)


def test_a_first_file_that_is_not_a_document_leaves_the_plan_to_the_next(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan the workers judge under is read before they start, from the first file that is a
    document (the run's plan too): a first file that is not one does not cost the workers'
    verdicts."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "000.json").write_text("not json")
    for i in range(1, 4):
        (docs / f"{i:03d}.json").write_text(json.dumps(_document(f"h{i}", "dgx-h100-01")))
    one, two, judged_after = _import_both(docs, tmp_path, monkeypatch)
    assert judged_after == 0
    assert two["hosts"] == one["hosts"] and two["findings"] == one["findings"]


def test_a_host_the_parent_names_otherwise_than_its_worker_has_every_host_judged_after_reading(
        fleet: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run keeps the host as the parent names it: a worker's verdict of the host with other
    groups or variables is not the run's verdict of it."""
    real = collected._host_of

    def regrouped(*args: Any) -> Host:
        host = real(*args)
        return Host(name=host.name, vars=host.vars, groups=[*host.groups, "named-here"])

    monkeypatch.setattr(collected, "_host_of", regrouped)
    one, two, judged_after = _import_both(fleet["docs"], tmp_path, monkeypatch)
    assert judged_after == 1
    assert two["hosts"] == one["hosts"] and two["findings"] == one["findings"]
    assert all("named-here" in h["groups"] for h in two["hosts"])


def _counts(steps: list[str], what: str) -> list[int]:
    return [int(s.split("/")[0].replace(",", "")) for s in steps if s.endswith(f" documents {what}")]


def test_an_import_in_workers_says_how_far_its_workers_have_read(fleet: dict[str, Any], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent learns nothing of the documents until the workers are done: they count what they
    have finished where it reads it as they work, and it says so a few times a second."""
    real = collected.read_document

    def slow(f: Path) -> Any:
        time.sleep(0.03)  # the workers are still reading when the parent looks
        return real(f)

    monkeypatch.setattr(collected, "read_document", slow)
    monkeypatch.setenv(WORKERS_ENV, "2")
    steps: list[str] = []
    result, _ = import_documents([fleet["docs"]], tmp_path / "results", step=steps.append)
    total = len(fleet["hosts"])
    read = _counts(steps, "read")
    assert read == sorted(read) and any(0 < n < total for n in read), steps
    assert all(s.endswith(f"/{total:,} documents read") for s in steps if s.endswith(" documents read"))
    assert _counts(steps, "stored")[0] == 0, steps
    assert steps[-2:] == [f"the fleet-wide steps over {total} hosts", "writing the run"], steps
    assert sorted(result.fleet.hosts.names()) == sorted(fleet["hosts"])


def test_an_import_says_where_it_stands_on_a_terminal_only(fleet: dict[str, Any], tmp_path: Path) -> None:
    cli = Cli.create(tmp_path)
    args = ["import", str(fleet["docs"]), "--results", str(tmp_path / "r")]
    code, seen = cli.on_a_terminal(*args, "-q")
    assert code in (1, 4, 5) and "import:" not in seen, seen
    code, seen = cli.on_a_terminal(*args)
    assert code in (1, 4, 5), seen
    steps = [s.split("\x1b[K")[0].split(", elapsed ")[0] for s in seen.split("\r") if s.startswith("import: ")]
    assert steps[0] == f"import: 0/{len(fleet['hosts'])} documents read" and steps[-1] == "import: writing the run", seen
    piped = cli.run(*args)
    assert "import:" not in piped.stderr, piped.stderr


def test_an_ansible_runner_import_says_where_it_stands(tmp_path: Path) -> None:
    events = tmp_path / "artifacts" / "job_events"
    events.mkdir(parents=True)
    envelope = json.loads((RECORDINGS / next(iter(demo_hosts())) / "host.json").read_text())
    for counter in range(1, 251):
        (events / f"{counter}-h{counter}-host.json").write_text(json.dumps(
            {"counter": counter, "event": "runner_on_ok", "event_data": {
                "host": f"h{counter}", "task_action": "fleetprobe.gpu.host",
                "res": {"envelope": envelope, "fleetprobe_answer": {
                    "probe": "host", "exit": 0, "timed_out": False, "out_trunc": False, "err_trunc": False,
                    "duration_s": 0.2, "stderr": ""}}}}))
    steps: list[str] = []
    ansible_job.import_runner_artifacts(tmp_path / "artifacts", tmp_path / "results", (), None, None, steps.append)
    assert steps[:3] == ["0 task results read, 0 hosts", "100 task results read, 100 hosts",
                         "200 task results read, 200 hosts"], steps
    assert steps[-2:] == ["judging 250 hosts", "writing the run"], steps
