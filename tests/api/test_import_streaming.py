"""`probe import` of a directory of bundle documents streams: one document is read, classified,
stored and let go before the next is read, and the run judges what a live run of the same answers
judges.

The documents are made from the demo recordings exactly as the bundle runner prints them (the
audit playbook's probes, each answer the recorded envelope); the live run replays the same
recordings.
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api import ansible_job
from orchestrator.api.collected import import_documents
from orchestrator.engine import bundle
from orchestrator.simulate.record import demo_hosts
from tests.support.collected import finding_keys
from tests.support.fleet import Cli

AUDIT = ["host", "pcie", "nvml", "nvlink", "kmsg", "nic"]  # playbooks/audit.yml
RECORDINGS = Path(__file__).resolve().parents[2] / "orchestrator" / "demo" / "recordings"


def _document(name: str, machine: str) -> dict[str, Any]:
    answers = []
    for p in AUDIT:
        f = RECORDINGS / machine / f"{p}.json"
        out = f.read_text() if f.is_file() else json.dumps(
            {"envelope_version": 1, "probe": p, "probe_version": "replay", "status": "unsupported", "data": {},
             "warnings": [], "duration_s": 0, "errors": ["no recording of this probe for this host"]})
        answers.append({"probe": p, "state": "ran", "exit": 0, "timed_out": False, "out_trunc": False,
                        "err_trunc": False, "duration_s": 0.05, "out": len(out.encode()), "err": 0,
                        "stdout": {"text": out}, "stderr": {"text": ""}})
    return {"fleetprobe_bundle": 1, "identity": {"hostname": name}, "for_host": None,
            "plan": {"playbook": "audit", "probes": [], "expect": [], "timeout": 60.0},
            "calls": [{"name": p, "args": {}, "timeout_s": 60.0} for p in AUDIT], "probes": answers}


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


def test_an_import_holds_one_document_at_a_time(fleet: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
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
