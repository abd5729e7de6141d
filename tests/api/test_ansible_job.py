"""Ansible task results of the fleetprobe.gpu modules -> probe outcomes, as `probe run` would give them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.ansible_job import TaskAnswer, answers_from, probe_result, read_runner_artifacts
from orchestrator.api.errors import UsageError
from orchestrator.engine.outcomes import Outcome
from orchestrator.inventory.model import Host

HOST = Host("gpu01")
ENVELOPE = {"envelope_version": 1, "probe": "host", "probe_version": "1", "status": "ok", "data": {"x": 1},
            "errors": [], "warnings": [], "duration_s": 0.1}


def _answer(**over: Any) -> dict[str, Any]:
    return {"probe": "host", "exit": 0, "timed_out": False, "out_trunc": False, "err_trunc": False,
            "duration_s": 0.2, "stderr": "", **over}


@pytest.mark.parametrize(("status", "res", "outcome", "reason_part"), [
    ("ok", {"envelope": ENVELOPE, "fleetprobe_answer": _answer()}, Outcome.OK, ""),
    ("ok", {"envelope": {**ENVELOPE, "status": "unsupported", "errors": ["no NVML"]},
            "fleetprobe_answer": _answer()}, Outcome.UNSUPPORTED, "no NVML"),
    ("ok", {"fleetprobe_answer": _answer(stdout="Segmentation fault", exit=-11)}, Outcome.INVALID_OUTPUT, "exit code -11"),
    ("ok", {"fleetprobe_answer": _answer(exit=None, timed_out=True)}, Outcome.TIMEOUT, "did not finish within 30s"),
    ("ok", {"fleetprobe_answer": _answer(out_trunc=True)}, Outcome.INVALID_OUTPUT, "cap"),
    ("failed", {"msg": "/usr/bin/python3: not found\nmore", "module_stderr": "sh: 1: python3: not found"},
     Outcome.FAILED, "/usr/bin/python3: not found"),
    ("unreachable", {"msg": "Failed to connect to the host via ssh: refused"}, Outcome.UNREACHABLE, "refused"),
    ("skipped", {}, Outcome.SKIPPED, "skipped by Ansible"),
])
def test_each_task_result_gets_the_outcome_a_live_run_gives(status: str, res: dict[str, Any], outcome: Outcome,
                                                             reason_part: str) -> None:
    res = {**res, "invocation": {"module_args": {"timeout": 30.0, "args": {}}}}
    got = probe_result(HOST, TaskAnswer("gpu01", "host", status, res))
    assert got.outcome == outcome, got
    assert reason_part in got.reason
    if outcome == Outcome.OK:
        assert got.envelope is not None and got.envelope.data == {"x": 1}


def test_only_fleetprobe_tasks_count() -> None:
    records = [
        {"host": "a", "action": "ansible.builtin.ping", "status": "ok", "res": {"ping": "pong"}},
        {"host": "a", "action": "fleetprobe.gpu.nvml", "status": "unreachable", "res": {"msg": "down"}},
        {"host": "b", "action": "nvml", "status": "ok", "res": {"fleetprobe_answer": _answer(probe="nvml")}},
        {"host": "c", "action": "fleetprobe.gpu.nosuchprobe", "status": "ok", "res": {}},
    ]
    assert [(a.host, a.probe, a.status) for a in answers_from(records)] == [("a", "nvml", "unreachable"),
                                                                            ("b", "nvml", "ok")]


def test_runner_artifacts_are_read_in_event_order(tmp_path: Path) -> None:
    events = tmp_path / "job_events"
    events.mkdir()
    for counter, host in ((3, "late"), (1, "early")):
        (events / f"{counter}-x.json").write_text(json.dumps({"counter": counter, "event": "runner_on_ok", "event_data": {
            "host": host, "task_action": "fleetprobe.gpu.host", "res": {"envelope": ENVELOPE,
                                                                       "fleetprobe_answer": _answer()}}}))
    (events / "2-y.json").write_text('{"counter": 2, "event": "runner_on_ok", "event_da')  # killed mid-write
    (events / "4-z.json").write_text(json.dumps({"counter": 4, "event": "playbook_on_stats", "event_data": {}}))
    # a name that starts with a digit int() refuses ("\u00b2", which str.isdigit takes): read for its counter
    (events / "\u00b2-w.json").write_text(json.dumps({"counter": 2, "event": "runner_on_ok", "event_data": {
        "host": "middle", "task_action": "fleetprobe.gpu.host", "res": {"envelope": ENVELOPE,
                                                                     "fleetprobe_answer": _answer()}}}))
    assert [a.host for a in read_runner_artifacts(tmp_path)] == ["early", "middle", "late"]
    with pytest.raises(UsageError, match="no job_events"):
        read_runner_artifacts(tmp_path / "job_events")


def test_hostile_events_and_task_results_cost_only_themselves(tmp_path: Path) -> None:
    events = tmp_path / "job_events"
    events.mkdir()
    ok = {"host": "good", "task_action": "fleetprobe.gpu.host",
          "res": {"envelope": ENVELOPE, "fleetprobe_answer": _answer(), "invocation": {"module_args": ["x"]}}}
    (events / "1-a.json").write_text(json.dumps({"counter": "1", "event": "runner_on_ok", "event_data": ok}))
    (events / "2-b.json").write_text(json.dumps({"counter": 2, "event": "runner_on_ok",
                                                 "event_data": {**ok, "host": "second"}}))
    (events / "3-c.json").write_text('{"counter": ' + "[" * 100_000)  # deeper than json's recursion
    answers = list(read_runner_artifacts(tmp_path))  # read one event at a time
    assert [a.host for a in answers] == ["good", "second"]
    got = probe_result(HOST, answers[0])  # module_args not a mapping: the default timeout, no AttributeError
    assert got.outcome == Outcome.OK, got


@pytest.mark.parametrize("msg, said", [(["x", None], '["x", null]'), ({"a": None}, '{"a": null}'), (7, "7")])
def test_a_message_that_is_no_text_is_shown_as_its_json(msg: Any, said: str) -> None:
    """Ansible's `msg` is text, but a module or a forged event can make it any JSON value: shown as
    the event writes it, never as Python's repr (None)."""
    got = probe_result(HOST, TaskAnswer("gpu01", "host", "unreachable", {"msg": msg}))
    assert got.reason == f"unreachable (Ansible): {said}"
    got = probe_result(HOST, TaskAnswer("gpu01", "host", "ok", {"fleetprobe_answer": _answer(duration_s=None)}))
    assert "None" not in got.reason and "duration_s null" in got.reason, got.reason
