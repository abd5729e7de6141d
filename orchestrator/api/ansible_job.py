"""Runs made by Ansible: the `fleetprobe.gpu` modules' results, from the collection's callback
(at the end of ansible-playbook) or from an ansible-runner / AWX job's artifacts (job_events/).

Each module result carries the envelope as the probe printed it and how the probe process ended
(`fleetprobe_answer`, api/ansible_collection.py), so the answer is classified by the runner's own
`classify`, as a live `probe run` classifies it; an unreachable host or a module that never ran
its probe (no Python) gets the outcome a live run gives.  Hosts are looked up in the inventory
(groups, probe_expect), the plan is the fleetprobe playbook the play names, and the run is stored
and judged by `session.store_streamed`, one answer at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.api.errors import UsageError
from orchestrator.api.plan import PlanInputs, RunPlan, build_plan, load_inventory
from orchestrator.api.session import Collected, RunResult, store_streamed
from orchestrator.engine import payload
from orchestrator.engine.bundle import duration_of
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.results import HostInput
from orchestrator.engine.runner import HostResult, ProbeCall, ProbeResult, classify
from orchestrator.facts.shown import json_shown
from orchestrator.facts.textsafe import is_digits
from orchestrator.files.bounded import read_regular
from orchestrator.inventory.model import Host
from orchestrator.store.history import default_results_dir
from orchestrator.store.redaction import public_vars
from orchestrator.store.rundir import RunDirectory
from orchestrator.transport.base import DEFAULT_MAX_OUTPUT, CommandResult

COLLECTION = "fleetprobe.gpu."
_EVENTS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_unreachable": "unreachable",
           "runner_on_skipped": "skipped"}


@dataclass(frozen=True)
class TaskAnswer:
    """One fleetprobe.gpu task's result on one host."""

    host: str
    probe: str
    status: str  # ok | failed | unreachable | skipped (Ansible's)
    res: dict[str, Any]


def probe_of(action: str, res: dict[str, Any]) -> str | None:
    """The probe a task ran: its module's name in the collection (or the answer's own)."""
    answer = res.get("fleetprobe_answer")
    if isinstance(answer, dict) and isinstance(answer.get("probe"), str) and answer["probe"] in payload.catalog():
        return str(answer["probe"])
    if action.startswith(COLLECTION) and action[len(COLLECTION):] in payload.catalog():
        return action[len(COLLECTION):]
    return None


def answers_from(records: Iterable[dict[str, Any]]) -> list[TaskAnswer]:
    """The callback's records ({host, action, status, res}): the fleetprobe.gpu tasks among them."""
    out = []
    for r in records:
        res: dict[str, Any] = r["res"] if isinstance(r.get("res"), dict) else {}
        probe = probe_of(str(r.get("action") or ""), res)
        if probe and isinstance(r.get("host"), str):
            out.append(TaskAnswer(r["host"], probe, str(r.get("status")), res))
    return out


# One task's event carries one probe's result, capped on the host like the live road's output;
# twice that allows for JSON's escaping of it.
MAX_EVENT = 2 * (DEFAULT_MAX_OUTPUT + (1 << 20))


def read_runner_artifacts(artifacts: Path) -> Iterator[TaskAnswer]:
    """ansible-runner's job_events/*.json (AWX keeps the same events), in the order they happened,
    one event read at a time: a job of 10,000 hosts is gigabytes of events."""
    events_dir = artifacts / "job_events" if (artifacts / "job_events").is_dir() else None
    if events_dir is None:
        found = sorted(artifacts.glob("*/job_events"))  # the private data dir: artifacts/<ident>/job_events
        if not found:
            raise UsageError(f"{artifacts}: no job_events/ (give ansible-runner's artifact directory of the job)")
        events_dir = found[-1]
    return _answers(events_dir)


def _answers(events_dir: Path) -> Iterator[TaskAnswer]:
    for f in sorted(events_dir.glob("*.json"), key=_place):
        ev = _event(f)
        if ev is not None and ev.get("event") in _EVENTS and isinstance(ev.get("event_data"), dict):
            data = ev["event_data"]
            yield from answers_from([{"host": data.get("host"), "status": _EVENTS[ev["event"]],
                                      "res": data.get("res") or {},
                                      "action": data.get("resolved_action") or data.get("task_action") or ""}])


def _event(f: Path) -> dict[str, Any] | None:
    """One job event, or None: an event written half-way (the job was killed), garbage, a FIFO, one
    over the bound (the others still count)."""
    try:
        ev = json.loads(read_regular(f, MAX_EVENT, "job event"))
    except (OSError, ValueError, RecursionError):
        return None
    return ev if isinstance(ev, dict) else None


def _place(f: Path) -> tuple[int, str]:
    """An event file's place in the job: ansible-runner names it `<counter>-<uuid>.json`; a file named
    otherwise is read for its counter."""
    head = f.name.split("-", 1)[0]
    if is_digits(head):
        return int(head), f.name
    ev = _event(f)
    return (_counter(ev) if ev is not None else 0), f.name


def _counter(event: dict[str, Any]) -> int:
    """An event's place in the job (ansible-runner numbers them); a malformed one sorts first."""
    c = event.get("counter")
    return c if isinstance(c, int) and not isinstance(c, bool) else 0


def _text(value: Any) -> bytes:
    return str(value).encode("utf-8", "surrogateescape") if isinstance(value, str) else b""


def probe_result(host: Host, answer: TaskAnswer, cap: int = DEFAULT_MAX_OUTPUT) -> ProbeResult:
    res = answer.res
    raw_msg = res.get("msg")
    msg = (raw_msg if isinstance(raw_msg, str) else json_shown(raw_msg, 300) if raw_msg else "").strip().splitlines()
    why = msg[0][:300] if msg else ""
    if answer.status == "unreachable":
        return ProbeResult(answer.probe, Outcome.UNREACHABLE, f"unreachable (Ansible): {why}".rstrip(": "))
    if answer.status == "skipped":
        return ProbeResult(answer.probe, Outcome.SKIPPED, f"skipped by Ansible{': ' + why if why else ''}")
    got = res.get("fleetprobe_answer")
    if not isinstance(got, dict):  # the module never ran the probe (no Python, a module error)
        return ProbeResult(answer.probe, Outcome.FAILED, f"the {COLLECTION}{answer.probe} module failed: "
                                                         f"{why or 'no answer'}", stderr=_text(res.get("module_stderr")))
    envelope = res.get("envelope")
    stdout = json.dumps(envelope).encode("utf-8") if isinstance(envelope, dict) else _text(got.get("stdout"))
    exit_code = got.get("exit") if isinstance(got.get("exit"), int) and not isinstance(got.get("exit"), bool) else None
    duration = duration_of(got.get("duration_s", 0.0))
    if duration is None:  # a forged or broken answer: what else it says is not trusted either
        return ProbeResult(answer.probe, Outcome.FAILED, f"the {COLLECTION}{answer.probe} answer is malformed: "
                                                         f"duration_s {json_shown(got.get('duration_s'), 40)} is not a "
                                                         "run time in seconds")
    result = CommandResult(exit_code=exit_code, stdout=stdout, stderr=_text(got.get("stderr")),
                           duration_s=duration, timed_out=got.get("timed_out") is True,
                           stdout_truncated=got.get("out_trunc") is True, stderr_truncated=got.get("err_trunc") is True)
    invocation = res.get("invocation")
    module_args = invocation.get("module_args") if isinstance(invocation, dict) else None
    timeout = module_args.get("timeout") if isinstance(module_args, dict) else None
    call = ProbeCall(answer.probe, {}, duration_of(timeout) or 60.0)
    return classify(host, call, result, cap=cap)


def import_answers(answers: Iterable[TaskAnswer], root: Path, inventory: tuple[str, ...], playbook: str | None,
                   expect: tuple[str, ...] | None, via: str,
                   step: Callable[[str], None] = lambda _text: None) -> tuple[RunResult, list[str]]:
    """Every host's task answers -> one judged run; each answer stored and let go as it comes
    (session.store_streamed); `step` hears where it stands (a line of safe text)."""
    warnings: list[str] = []
    inv_hosts: dict[str, Host] = {}
    if inventory:
        _inv, hosts, more = load_inventory(inventory, None)
        inv_hosts = {h.name: h for h in hosts}
        warnings.extend(more)
    hosts_of: dict[str, Host] = {}
    collected: dict[str, Any] = {"via": via, "tasks": 0}

    def results(_run: RunDirectory) -> Iterator[Collected]:
        for a in answers:
            if collected["tasks"] % _SAY_EVERY == 0:
                step(f"{collected['tasks']:,} task results read, {len(hosts_of):,} hosts")
            collected["tasks"] += 1
            if a.host not in hosts_of:
                known = inv_hosts.get(a.host)
                if known is None and inventory:
                    warnings.append(f"host {a.host!r} is not in the inventory: judged without its groups and "
                                    "probe_expect")
                hosts_of[a.host] = known or Host(name=a.host, groups=["all"])
            # a probe in two plays: the later result replaces the earlier, as in a live run
            yield Collected(HostResult(hosts_of[a.host], {a.probe: probe_result(hosts_of[a.host], a)}), {"via": via})

    def plan_of(hosts: list[HostResult]) -> tuple[RunPlan, None]:
        if not hosts:
            raise UsageError(f"no {COLLECTION}* task results in the job")
        stored = [HostInput(name=r.host.name, address=r.host.address, groups=r.host.groups, probes={}, data={},
                            vars=public_vars(r.host.vars)) for r in hosts]
        inputs = PlanInputs(inventory=inventory, playbook=playbook, expect=tuple(expect or ()))
        return build_plan(inputs, stored=stored), None

    # in the inventory's order, as a live run keeps its hosts (Ansible reports them as they finish)
    pos = {name: i for i, name in enumerate(inv_hosts)}
    return store_streamed(results, root, collected, plan_of, lambda name: pos.get(name, len(pos)),
                          step=step), warnings


# task results between two progress lines
_SAY_EVERY = 100


def import_runner_artifacts(artifacts: Path, root: Path, inventory: tuple[str, ...], playbook: str | None,
                            expect: tuple[str, ...] | None,
                            step: Callable[[str], None] = lambda _text: None) -> tuple[RunResult, list[str]]:
    if not artifacts.is_dir():
        raise UsageError(f"no such directory: {artifacts}")
    return import_answers(read_runner_artifacts(artifacts), root, inventory, playbook, expect, "ansible-runner",
                          step)


def write_callback_run(records: list[dict[str, Any]], results: str | None, inventory: list[str],
                       playbook: str | None) -> str | None:
    """The callback's end of playbook: the run directory written and its hosts by health, or None
    without fleetprobe tasks."""
    from orchestrator.present.terminal.hosts import health_summary

    answers = answers_from(records)
    if not answers:
        return None
    root = Path(results) if results else default_results_dir()
    result, _warnings = import_answers(answers, root, tuple(inventory), playbook, None, "ansible callback")
    return f"{result.run.dir} ({health_summary(result.fleet)})"
