"""Coordinated multi-host steps: start a probe on several hosts at once and connect them.

A fabric step runs one probe process per host, all at the same time (the runner's fork limit does
not apply: hosts of a round wait for each other, so they must all be running; only discovery, whose
processes do not meet, is bounded by it).  Two shapes:

* a wave (`run_wave`): every host gets its own arguments (its schedule) and the processes meet by
  themselves (probes/fabric.py);
* a gated group (`run_gated`): one process first (NCCL's rank 0), whose first `FPSAY <json>` line
  (the ncclUniqueId) the controller reads while it runs on, then the others with what it said.

Each process ends at its own deadline on the host (the probe's watchdog) and the controller's
transport gives up at the same deadline plus slack.  `Connections.close_all` (the driver's
`finally`, or Ctrl-C) closes every connection: sshd closes the processes' pipes, which each fabric probe watches,
and asks sshd to signal them; the local transport kills their process group.  Nothing is left.

Transports are kept per host across the steps of one qualification (`Connections`), one per
process running at once on that host, so a host's rails can run side by side.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.engine import payload
from orchestrator.engine.envelope import Envelope
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import (
    PROBE_DEADLINE_MARGIN_S,
    ProbeCall,
    ProbeResult,
    RunOptions,
    TransportFactory,
    _takes,
    classify,
    controller_error,
    host_probe_args,
    probe_command,
)
from orchestrator.inventory.model import Host
from orchestrator.transport.base import CommandResult, ProbeNotAvailable, Transport, TransportError

SAY = b"FPSAY "
SAY_MAX = 65536  # a said line longer than this is not one


class Connections:
    """Open transports per host, reused by later steps; `close_all` ends every one of them."""

    def __init__(self, options: RunOptions, factory: TransportFactory) -> None:
        self.options = options
        self.factory = factory
        self._free: dict[str, list[Transport]] = {}
        self._busy: list[Transport] = []
        self._lock = threading.Lock()
        self.closed = False

    def borrow(self, host: Host) -> Transport:
        with self._lock:
            if self.closed:
                raise TransportError("disconnected", f"{host.name}: the qualification was stopped")
            free = self._free.get(host.name) or []
            t = free.pop() if free else None
        if t is None:
            t = self.factory(host, self.options.transport)
        with self._lock:
            self._busy.append(t)
        return t

    def give_back(self, host: Host, t: Transport, healthy: bool) -> None:
        with self._lock:
            if t in self._busy:
                self._busy.remove(t)
            if healthy and not self.closed:
                self._free.setdefault(host.name, []).append(t)
                return
        _close(t)

    def close_all(self) -> None:
        with self._lock:
            self.closed = True
            everything = [t for ts in self._free.values() for t in ts] + list(self._busy)
            self._free.clear()
        for t in everything:
            _close(t)


def _close(t: Transport) -> None:
    try:
        t.close()
    except Exception:  # a connection half torn down can raise anything; it is going away
        pass


@dataclass
class StepResult:
    """One process of a coordinated step: its probe result and what it said before its envelope."""

    host: str
    result: ProbeResult
    said: list[dict[str, Any]] = field(default_factory=list)
    started: bool = True
    answered_at: float | None = None  # this controller's time.time() when the answer arrived


def split_said(stdout: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The FPSAY lines at the head of a step's stdout (after the start mark), and the rest."""
    if stdout.startswith(payload.START_MARK):
        stdout = stdout[len(payload.START_MARK):]
    said = []
    while stdout.startswith(SAY):
        end = stdout.find(b"\n")
        if end < 0 or end > SAY_MAX:
            break
        try:
            obj = json.loads(stdout[len(SAY):end])
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            said.append(obj)
        stdout = stdout[end + 1:]
    return said, stdout


class _Proc:
    """One probe process on one host, run in a thread; its first said line signalled when seen."""

    def __init__(self, host: Host, call: ProbeCall, conns: Connections, become: bool) -> None:
        self.host = host
        self.call = call
        self.conns = conns
        self.become = become
        self.first_say = threading.Event()
        self.done = threading.Event()
        self.said: list[dict[str, Any]] = []
        self._buf = bytearray()
        self.result: StepResult | None = None
        self.thread = threading.Thread(target=self._run, name=f"fabric-{host.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _seen(self, data: bytes) -> None:
        if self.first_say.is_set() or len(self._buf) > SAY_MAX:
            return
        self._buf.extend(data)
        said, _ = split_said(bytes(self._buf))
        if said:
            self.said = said
            self.first_say.set()

    def _run(self) -> None:
        t0 = time.monotonic()
        healthy = False
        transport: Transport | None = None
        try:
            transport = self.conns.borrow(self.host)
            # the inventory's probe_root / probe_args, under the step's own arguments
            args = {**host_probe_args(self.host, self.call.name), **self.call.args}
            on_host = _takes(type(transport), "clock_on_host")
            script = payload.build_script(self.call.name, args, max(1.0, self.call.timeout - PROBE_DEADLINE_MARGIN_S),
                                          announce=on_host)
            kw: dict[str, Any] = {}
            if on_host:
                kw.update(first_output=self.call.timeout, clock_on_host=True)
            if _takes(type(transport), "on_output"):
                kw["on_output"] = self._seen
            # the connection's own share comes on top of the step's time on the host
            limit = self.call.timeout + self.conns.options.transport.connect_timeout
            res = transport.run(probe_command(self.host, self.become), script, self.call.timeout,
                                deadline=t0 + limit + self.conns.options.transport.connect_timeout, **kw)
            said, rest = split_said(res.stdout)
            if said and not self.said:
                self.said = said
            pr = classify(self.host, self.call, _replace_stdout(res, rest), cap=self.conns.options.transport.max_output)
            healthy = res.exit_code == 0
            self.result = StepResult(self.host.name, pr, self.said, answered_at=time.time())
        except ProbeNotAvailable as e:  # a replayed host without this step's recording: not judged
            self.result = StepResult(self.host.name, ProbeResult(self.call.name, Outcome.SKIPPED, e.message,
                                                                 duration_s=time.monotonic() - t0))
        except TransportError as e:
            from orchestrator.engine.outcomes import transport_outcome

            self.result = StepResult(self.host.name, ProbeResult(self.call.name, transport_outcome(e.kind), e.message,
                                                                 duration_s=time.monotonic() - t0, retried=e.retried))
        except Exception as e:  # this host's failure, not the qualification's
            self.result = StepResult(self.host.name, ProbeResult(self.call.name, Outcome.FAILED, controller_error(e)))
        finally:
            if transport is not None:
                self.conns.give_back(self.host, transport, healthy)
            self.first_say.set()  # whoever waits for a said line learns now that none will come
            self.done.set()


def _replace_stdout(res: CommandResult, stdout: bytes) -> CommandResult:
    import dataclasses

    return dataclasses.replace(res, stdout=stdout)


class Stopped(Exception):
    """The qualification was stopped (Ctrl-C, SIGTERM) while a coordinated step ran."""


def _wait(procs: list[_Proc], stop: threading.Event, until: float | None = None) -> None:
    """Wait for every process (in short slices, so Ctrl-C reaches this thread); Stopped when asked."""
    for p in procs:
        while not p.done.is_set():
            if stop.is_set():
                raise Stopped()
            if until is not None and time.monotonic() > until:
                return
            p.done.wait(0.2)


def run_wave(calls: list[tuple[Host, ProbeCall]], conns: Connections, stop: threading.Event,
             become: bool = False, limit: int | None = None) -> dict[str, StepResult]:
    """Every host's process at once; host name -> its result.  Stopped when `stop` is set meanwhile
    (the caller closes the connections).  `limit`: at most that many at once, for a step whose
    processes do not meet (discovery, which also opens each host's connection: the runner's forks)."""
    procs = [_Proc(h, c, conns, become) for h, c in calls]
    if limit is None or limit >= len(procs):
        for p in procs:
            p.start()
    else:
        pending: list[_Proc] = list(procs)
        running: list[_Proc] = []
        while pending:
            if stop.is_set():
                raise Stopped()
            running = [p for p in running if not p.done.is_set()]
            while pending and len(running) < limit:
                running.append(pending.pop(0))
                running[-1].start()
            if running:
                running[0].done.wait(0.05)
    _wait(procs, stop)
    return {p.host.name: _result_of(p) for p in procs}


def run_gated(first: tuple[Host, ProbeCall], rest: list[tuple[Host, Callable[[dict[str, Any]], ProbeCall]]],
              conns: Connections, stop: threading.Event, say_timeout: float, become: bool = False,
              refuse: Callable[[dict[str, Any]], str | None] = lambda _said: None) -> dict[str, StepResult]:
    """`first` alone until it says its first line (or `say_timeout` passes, or it ends); then each
    of `rest`, its call made from what `first` said.  Without a said line, or with one `refuse`
    finds fault with (what the first host says goes into the others' arguments), the rest never
    start; the first's result is then invalid output."""
    lead = _Proc(first[0], first[1], conns, become)
    lead.start()
    give_up = time.monotonic() + say_timeout
    while not lead.first_say.is_set():
        if stop.is_set():
            raise Stopped()
        if time.monotonic() > give_up:
            break
        lead.first_say.wait(0.1)
    out: dict[str, StepResult] = {}
    bad = refuse(lead.said[0]) if lead.said else None
    if not lead.said or bad:
        _wait([lead], stop, give_up + first[1].timeout)
        lead_res = _result_of(lead)
        if bad:
            lead_res = StepResult(lead_res.host, ProbeResult(first[1].name, Outcome.INVALID_OUTPUT, bad,
                                                             envelope=lead_res.result.envelope),
                                  lead_res.said, answered_at=lead_res.answered_at)
        why = lead_res.result.reason or "it said nothing"
        for h, _make in rest:
            out[h.name] = StepResult(h.name, ProbeResult(first[1].name, Outcome.SKIPPED,
                                                         f"not started: {first[0].name} (the group's first process) "
                                                         f"gave no ncclUniqueId ({why[:200]})"), started=False)
        out[first[0].name] = lead_res
        return out
    procs = [_Proc(h, make(lead.said[0]), conns, become) for h, make in rest]
    for p in procs:
        p.start()
    _wait([lead, *procs], stop)
    out[first[0].name] = _result_of(lead)
    out.update({p.host.name: _result_of(p) for p in procs})
    return out


def _result_of(p: _Proc) -> StepResult:
    if p.result is not None:
        return p.result
    return StepResult(p.host.name, ProbeResult(p.call.name, Outcome.INTERRUPTED, "the step was stopped"), p.said)


def envelope_data(r: StepResult) -> dict[str, Any] | None:
    env: Envelope | None = r.result.envelope
    return env.data if env is not None and isinstance(env.data, dict) else None
