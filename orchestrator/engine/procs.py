"""`probe run`'s fan-out spread over one process per core (docs/performance.md, "One process per core").

Paramiko and Fabric cost ~10 ms of controller CPU a host, and under the GIL one process is one
core.  Here the hosts are dealt to C worker processes (every C-th host each, forks ⌈F / C⌉), each
running runner.run_fleet with transports of its own (no Paramiko object crosses a process).  A
worker is forked where that is safe (Linux, no other thread in this process: it then inherits the
imported engine instead of spending ~1.7 s importing it again, and keeps no descriptor of the
parent's but its pipe), spawned otherwise.  Each finished HostResult comes back over the worker's
pipe as it ends and the parent hands it to the sink: progress, run directory and streaming verdict
stay in one process.

What a worker needs (hosts with their variables, the transport options) travels over that pipe,
never argv or the environment.  Stop (Ctrl-C, SIGTERM, a store failure) is a message to every
worker, which stops as run_fleet does today.  A worker that dies costs only its unreported hosts,
recorded as failed with the way it ended.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from orchestrator.engine import runner
from orchestrator.engine.cores import may_fork, usable_cores
from orchestrator.engine.outcomes import CUT_OFF, NOT_STARTED, Outcome
from orchestrator.engine.runner import (
    EventSink,
    HostResult,
    ProbeCall,
    ProbeResult,
    RunInterrupted,
    RunOptions,
    TransportFactory,
)
from orchestrator.inventory.model import Host

# Without --procs, a run of at least this many hosts a worker is spread over the cores by itself,
# where workers are forked (spawned ones cost ~1.7 s each before their first host): at 1,000 hosts
# on 2 cores two forked workers were faster than one process in each of the 9 cells of the
# 0/20/100 ms x forks 32/128/512 matrix (bench/RESULTS.md, "Forked workers").  Smaller runs were
# not measured and stay in one process.
AUTO_MIN_HOSTS_PER_PROC = 100
# More workers than this would only add handshakes racing for the same cores and sshd's MaxStartups.
MAX_PROCS = 16
# How long the parent waits for workers to stop after it told them to, beyond a connect timeout:
# run_fleet in each worker closes its connections and returns in about that time.
STOP_GRACE_S = 5.0
# A worker's GIL switch interval (Python's default: 5 ms).  While several fan-out processes share
# the cores, each keeps preempting the others' GIL holders, and meanwhile every thread waiting for
# its GIL wakes once an interval: at forks 512 over 2 workers (1,000 hosts, 20 ms RTT) runs fell now
# and then into a storm of 1-2 M futex calls and 20-28 s of CPU (against ~0.5 M and 13-15 s).
# Five runs alternated: 0.70-0.97 M futex calls and 14.1-21.8 s of CPU at 5 ms, 0.47-0.56 M and
# 13.0-15.7 s at 50 ms; at forks 32, where the link bounds the run, the walls were the same.
WORKER_SWITCH_INTERVAL_S = 0.05


def process_count(hosts: Sequence[Host], requested: int | None, factory: TransportFactory) -> int:
    """How many processes probe `hosts`: `requested` (1: this process), or with None one per core
    where workers are forked and there are AUTO_MIN_HOSTS_PER_PROC hosts for each.  Never more than
    the hosts, and 1 where a worker could not do what this process does: a transport factory that
    cannot be sent (a test's closure), or a host whose connection was registered after import (a
    fresh process lacks it)."""
    if requested is None:
        auto = usable_cores() if start_method() == "fork" else 1
        wanted = max(1, min(auto, MAX_PROCS, len(hosts) // AUTO_MIN_HOSTS_PER_PROC))
    else:
        wanted = max(1, min(requested, MAX_PROCS, len(hosts)))
    if wanted > 1 and not (_sendable(factory) and _built_in_connections(hosts)):
        return 1
    return wanted


def _built_in_connections(hosts: Sequence[Host]) -> bool:
    from orchestrator.transport.factory import BUILT_IN, TRANSPORTS

    return all(TRANSPORTS.get(c) is BUILT_IN.get(c) for c in {h.connection for h in hosts})


def _sendable(obj: object) -> bool:
    try:
        pickle.dumps(obj)
    except Exception:  # a lambda, a closure, a bound method of something holding a lock
        return False
    return True


@dataclass
class _Job:
    """What one worker is given, over its pipe."""

    hosts: list[Host]
    calls: list[ProbeCall]
    options: RunOptions
    factory: TransportFactory


@dataclass
class _Worker:
    index: int
    hosts: list[Host]
    conn: Connection | None = None
    process: Any = None  # multiprocessing's SpawnProcess
    reported: set[str] = field(default_factory=set)
    sent: bool = False  # its job is on its way: before that none of its hosts began
    ended: bool = False  # sent its last message, or its pipe closed


class _PipeSink:
    """A worker's sink: every finished host goes to the parent as it ends."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def host_finished(self, result: HostResult) -> None:
        self.conn.send(("host", result))


def _worker_main(conn: Connection) -> None:
    """One worker process: read its job, run it, send each host and then ("end",)."""
    # Ctrl-C at the terminal (or systemd's SIGTERM) reaches every process of the group: here it
    # stops the run as the parent's message does, through run_fleet's own Ctrl-C handling.
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _interrupt_once)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # blocked by the parent at start
    sys.setswitchinterval(WORKER_SWITCH_INTERVAL_S)
    try:
        job = conn.recv()
        if not isinstance(job, _Job):  # stopped before its job came
            return
        threading.Thread(target=_listen_for_stop, args=(conn,), daemon=True, name="stop-listener").start()
        try:
            runner.run_fleet(job.hosts, job.calls, job.options, job.factory, _PipeSink(conn))
        except RunInterrupted:
            pass
        conn.send(("end",))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        pass  # stopped before the job began, or the parent is gone: nothing left to report to


_stopping = False


def _interrupt_once(signum: int, frame: object) -> None:
    """The first stop (the terminal's Ctrl-C, the parent's message, SIGTERM) is a KeyboardInterrupt;
    the ones after it change nothing, so run_fleet's closing of connections is never cut short."""
    global _stopping
    if not _stopping:
        _stopping = True
        raise KeyboardInterrupt


def _forked_worker_main(conn: Connection) -> None:
    """A forked worker: the parent's descriptors but its pipe and stdio closed first (a judging
    worker's pipe held open here would never see its end), then as a spawned one."""
    gc.freeze()  # what it inherited lives as long as it does: no collection walks it again
    keep = {0, 1, 2, conn.fileno()}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:  # the listing's own descriptor, already closed
                pass
    _worker_main(conn)


def start_method() -> str:
    """fork where it is safe and cheap: Linux (where /proc lists what to close) while this process
    may fork (cores.may_fork); spawn otherwise."""
    return "fork" if sys.platform.startswith("linux") and may_fork() else "spawn"


def _listen_for_stop(conn: Connection) -> None:
    """The parent's stop (or its end: the pipe closed) becomes a Ctrl-C in this worker's main thread,
    which run_fleet turns into closed connections, interrupted and skipped hosts."""
    try:
        while conn.recv() != ("stop",):
            pass
    except (EOFError, OSError):
        pass
    os.kill(os.getpid(), signal.SIGINT)


def run_fleet_procs(hosts: Sequence[Host], calls: list[ProbeCall], options: RunOptions, factory: TransportFactory,
                    sink: EventSink, stop: threading.Event, procs: int) -> list[HostResult]:
    """run_fleet over `procs` worker processes; the same contract (results in inventory order,
    RunInterrupted carrying every result on Ctrl-C)."""
    host_list = list(hosts)
    order = {h.name: i for i, h in enumerate(host_list)}
    # each worker runs today's one-process path, with its share of the forks
    per_worker = dataclasses.replace(options, forks=math.ceil(max(1, options.forks) / procs), procs=1)
    workers = [_Worker(i, host_list[i::procs]) for i in range(procs)]
    done: dict[str, HostResult] = {}
    interrupted: BaseException | None = None
    try:
        method = start_method()
        ctx = multiprocessing.get_context(method)
        target = _forked_worker_main if method == "fork" else _worker_main
        for w in workers:
            _start(ctx, target, w, calls, done, sink)
        for w in workers:
            _send_job(w, _Job(w.hosts, calls, per_worker, factory), calls, done, sink)
        _collect(workers, calls, done, sink, stop, deadline=None)
    except (KeyboardInterrupt, RuntimeError) as e:
        ctrl_c = runner.ctrl_c_of(e)
        if ctrl_c is None:
            raise
        interrupted = ctrl_c
        stop.set()
        _stop_all(workers, calls, done, sink, options)
    finally:
        for w in workers:
            _reap(w)
    results = sorted(done.values(), key=lambda r: order[r.host.name])
    if interrupted is not None:
        raise RunInterrupted(results) from interrupted
    return results


def _start(ctx: Any, target: Callable[[Connection], None], w: _Worker, calls: list[ProbeCall],
           done: dict[str, HostResult], sink: EventSink) -> None:
    """Start worker `w`; where it cannot start, its hosts fail with the reason."""
    try:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=target, args=(child,), name=f"probe-worker-{w.index}", daemon=True)
        sys.stdout.flush()  # or a forked worker would write this process's pending output again
        sys.stderr.flush()
        # the child inherits this mask: a Ctrl-C reaching it while it imports waits until its own
        # handler is in place (_worker_main) instead of ending it with a traceback
        with runner.signals_deferred():
            proc.start()
        child.close()
        w.conn, w.process = parent, proc
    except OSError as e:  # no processes left (ulimit -u), no memory
        _cannot_start(w, e, calls, done, sink)


def _send_job(w: _Worker, job: _Job, calls: list[ProbeCall], done: dict[str, HostResult], sink: EventSink) -> None:
    """Sent once every worker is starting: a big job fills the pipe until its worker has imported
    and reads it, and the next worker's start must not wait for that."""
    if w.conn is None:
        return
    try:
        w.conn.send(job)
        w.sent = True
    except OSError:  # it died starting (BrokenPipeError): how it ended says why
        w.ended = True
        _record_rest(w, f"its worker process {_how_it_ended(w)} before it could start", calls, done, sink)
    except pickle.PicklingError as e:  # the job cannot travel
        w.ended = True
        _cannot_start(w, e, calls, done, sink)


def _cannot_start(w: _Worker, e: BaseException, calls: list[ProbeCall], done: dict[str, HostResult],
                  sink: EventSink) -> None:
    detail = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
    _record_rest(w, f"could not start its worker process ({detail[:160]})", calls, done, sink)


def _collect(workers: list[_Worker], calls: list[ProbeCall], done: dict[str, HostResult], sink: EventSink,
             stop: threading.Event, deadline: float | None, told: bool = False) -> None:
    """Hand each result to the sink as it arrives, until every worker ended (or `deadline`)."""
    while True:
        live = {w.conn: w for w in workers if not w.ended and w.conn is not None}
        if not live or (deadline is not None and time.monotonic() > deadline):
            return
        if stop.is_set() and not told:  # a stop from elsewhere (the store failed): every worker stops
            _tell_stop(workers)
            told = True
        for conn in wait(list(live), timeout=0.5):
            # a Ctrl-C between taking a result off the pipe and recording it would lose that host
            with runner.signals_deferred():
                _receive(live[conn], calls, done, sink, stopping=stop.is_set())  # type: ignore[index]


def _receive(w: _Worker, calls: list[ProbeCall], done: dict[str, HostResult], sink: EventSink,
             stopping: bool) -> None:
    assert w.conn is not None
    try:
        message = w.conn.recv()
    except (EOFError, OSError, pickle.UnpicklingError):
        w.ended = True
        if stopping:  # it went while the run was being stopped: its hosts were cut off with it
            why, outcome = _cut(w)
            _record_rest(w, why, calls, done, sink, outcome=outcome)
        else:
            _record_rest(w, f"its worker process {_how_it_ended(w)} before this host finished", calls, done, sink)
        return
    if message[0] == "host":
        res: HostResult = message[1]
        w.reported.add(res.host.name)
        done[res.host.name] = res
        sink.host_finished(res)
    else:
        w.ended = True
        # a worker that ended cleanly reported every host; any it did not is still recorded
        _record_rest(w, "its worker process ended without reporting this host", calls, done, sink)


def _how_it_ended(w: _Worker) -> str:
    proc = w.process
    if proc is None:
        return "never started"
    proc.join(2.0)
    code = proc.exitcode
    if code is None:
        return f"(pid {proc.pid}) closed its pipe"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"(pid {proc.pid}) was killed by {name}"
    return f"(pid {proc.pid}) exited with status {code}"


def _record_rest(w: _Worker, why: str, calls: list[ProbeCall], done: dict[str, HostResult], sink: EventSink,
               outcome: Outcome = Outcome.FAILED) -> None:
    """Every host of `w` not yet reported gets `outcome`; the other workers' hosts are untouched."""
    reason = why if outcome is not Outcome.FAILED else f"the controller lost this host: {why}; probe it again"
    for h in w.hosts:
        if h.name in w.reported:
            continue
        w.reported.add(h.name)
        res = HostResult(h, {c.name: ProbeResult(c.name, outcome, reason) for c in calls})
        done[h.name] = res
        sink.host_finished(res)


def _tell_stop(workers: list[_Worker]) -> None:
    for w in workers:
        if w.conn is not None and not w.ended:
            try:
                w.conn.send(("stop",))
            except OSError:  # already gone: its end is seen when its pipe is read
                pass


def _stop_all(workers: list[_Worker], calls: list[ProbeCall], done: dict[str, HostResult], sink: EventSink,
              options: RunOptions) -> None:
    """After a Ctrl-C: every worker told to stop, its closing reports taken in; a worker that would
    not stop in time is ended, its hosts recorded as cut off (started) or never started."""
    _tell_stop(workers)
    stopped = threading.Event()
    stopped.set()
    give_up = time.monotonic() + options.transport.connect_timeout + STOP_GRACE_S
    while True:
        try:
            _collect(workers, calls, done, sink, stopped, deadline=give_up, told=True)
            break
        except KeyboardInterrupt:  # a second Ctrl-C while stopping: keep stopping, as runner does
            continue
    for w in workers:
        if not w.ended:
            w.ended = True
            why, outcome = _cut(w)
            _record_rest(w, why, calls, done, sink, outcome=outcome)


def _cut(w: _Worker) -> tuple[str, Outcome]:
    """What a stopped run records for a worker's unreported hosts: cut off, or never started where
    the stop came before its job (while the workers were being started)."""
    return (CUT_OFF, Outcome.INTERRUPTED) if w.sent else (NOT_STARTED, Outcome.SKIPPED)


def _reap(w: _Worker) -> None:
    """No worker outlives the run."""
    proc = w.process
    if w.conn is not None:
        w.conn.close()
    if proc is None:
        return
    proc.join(1.0)
    if proc.is_alive():
        proc.kill()
        proc.join(2.0)
