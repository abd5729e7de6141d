"""Run probes on many hosts in parallel: one worker and one connection per host.

Workers never print: every result comes back to the calling thread, which hands it to the event
sink (progress, run-directory writer).  Each host has a deadline of its own, so one bad host never
holds the run past that deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.engine import bundle, descriptors
from orchestrator.engine import payload as probes
from orchestrator.engine.envelope import Envelope, EnvelopeError, parse_envelope
from orchestrator.engine.outcomes import CUT_OFF, NOT_STARTED, Outcome, transport_outcome, worst
from orchestrator.facts.normalize import RAW_OUTPUTS, RAW_PROBE
from orchestrator.inventory.model import Host
from orchestrator.transport.base import (
    CommandResult,
    ProbeNotAvailable,
    Transport,
    TransportError,
    TransportOptions,
)
from orchestrator.transport.become import become_failure, wrap_command
from orchestrator.transport.factory import capabilities

# A probe's own watchdog fires this much before the controller gives up on the command, so a slow
# probe still reports its partial data instead of being cut off.
PROBE_DEADLINE_MARGIN_S = 2.0
# A bundle's own clock on the host starts after ours and its last frame must still travel back.
BUNDLE_SLACK_S = 1.0
# Measured flat from 16 to 100 forks on the 2-core bench; 32 stays under a bastion's MaxStartups
# hard limit (100). Reasoning and figures: docs/performance.md.
DEFAULT_FORKS = 32


@dataclass(frozen=True)
class ProbeCall:
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    timeout: float = 60.0


@dataclass
class RunOptions:
    forks: int = DEFAULT_FORKS
    transport: TransportOptions = field(default_factory=TransportOptions)
    host_deadline: float | None = None  # default: default_host_deadline (connecting + the probes' phases)
    become: bool = False
    # Several probes on a host share one interpreter start (orchestrator/engine/bundle.py); measured in
    # docs/performance.md.  False: one `python3` per probe, as before.
    bundle: bool = True
    # Worker processes the fan-out is spread over (engine/procs.py): None or 1 = this process only,
    # N = N (opt-in: measured slower on a 2-core machine shared with the hosts, bench/RESULTS.md).
    procs: int | None = None


@dataclass
class ProbeResult:
    probe: str
    outcome: Outcome
    reason: str = ""
    envelope: Envelope | None = None
    duration_s: float = 0.0
    stdout: bytes = b""  # kept only when the output was not a valid envelope
    stderr: bytes = b""
    retried: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "reason": self.reason,
            "duration_s": round(self.duration_s, 3),
            "probe_version": self.envelope.probe_version if self.envelope else None,
            "retried": self.retried,
        }


@dataclass
class HostResult:
    host: Host
    probes: dict[str, ProbeResult]
    duration_s: float = 0.0

    @property
    def outcome(self) -> Outcome:
        return worst([p.outcome for p in self.probes.values()])

    @property
    def reason(self) -> str:
        bad = [p for p in self.probes.values() if p.outcome == self.outcome and p.reason]
        return bad[0].reason if bad else ""


class EventSink(Protocol):
    def host_finished(self, result: HostResult) -> None: ...


TransportFactory = Callable[[Host, TransportOptions], Transport]

# What an interpreter too old for the probes says: Python 2 and 3.0-3.3 refuse the -I flag
# ("Unknown option: -I", exit 2) before reading the script; a Python 3.4/3.5 fails to parse it.
_PY2 = re.compile(rb"SyntaxError|print statement|invalid syntax|Unknown option: -I")
# -I (isolated): the login directory is not put first on sys.path, so a json.py or platform.py in
# the user's home cannot shadow the stdlib inside a probe, and PYTHONPATH/PYTHONHOME and the user
# site are ignored.  -S: no site import; probes are stdlib only, and it halves interpreter start
# (docs/performance.md).  Both exist since Python 3.4; the probes need 3.6.
INTERPRETER_FLAGS = "-I -S"


def probe_command(host: Host, become: bool) -> str:
    """`python3 -I -S -` with the host's interpreter, quoted; `sudo -n` fails fast instead of prompting."""
    try:
        interp = shlex.join(shlex.split(host.python)) if host.python.strip() else "python3"
    except ValueError:  # unbalanced quotes in ansible_python_interpreter: quote it whole
        interp = shlex.quote(host.python)
    become = become or host.become
    if capabilities(host.connection).runs_as_controller and os.geteuid() == 0 and host.become_user in (None, "root"):
        become = False  # already root here: sudo would add nothing but a dependency on sudo
    return wrap_command(f"{interp} {INTERPRETER_FLAGS} -", become, host.become_user)


def host_probe_args(host: Host, probe: str) -> dict[str, Any]:
    """Per-host probe arguments from inventory vars: `probe_root` (a sysfs/proc root for every
    probe that reads files) and `probe_args: {probe: {arg: value}}`."""
    args: dict[str, Any] = {}
    if host.vars.get("probe_root"):
        args["root"] = str(host.vars["probe_root"])
    per_probe = host.vars.get("probe_args")
    if isinstance(per_probe, dict) and isinstance(per_probe.get(probe), dict):
        args.update(per_probe[probe])
    return args


def classify(host: Host, call: ProbeCall, res: CommandResult, cap: int | None = None) -> ProbeResult:
    """Turn what came back over the transport into an outcome with a one-line reason.

    cap: the stdout cap, where the truncated output itself was not kept (a bundle drops it on the host).
    """
    base: dict[str, Any] = {"probe": call.name, "duration_s": res.duration_s, "stderr": res.stderr[-65536:],
                            "retried": res.retried}
    if res.timed_out:
        held = _held_after_answer(res, call)
        if held is not None:
            return held
        return ProbeResult(outcome=Outcome.TIMEOUT, reason=f"probe did not finish within {call.timeout:.0f}s", **base)
    if res.exit_code is not None and not -128 <= res.exit_code <= 255:  # a hostile sshd's exit-status
        return ProbeResult(outcome=Outcome.INVALID_OUTPUT,
                           reason=f"exit status {str(res.exit_code)[:20]} is not a process exit status", **base)
    if res.stdout_truncated:
        return ProbeResult(outcome=Outcome.INVALID_OUTPUT,
                           reason=f"probe output exceeded the {cap or len(res.stdout)}-byte cap; output discarded", **base)
    err_text = res.stderr.decode("utf-8", "replace")
    sudo_reason = become_failure(res.exit_code, res.stderr) if not res.stdout.strip() else None
    if sudo_reason:
        return ProbeResult(outcome=Outcome.FAILED, reason=sudo_reason, **base)
    if not res.stdout.strip() and res.exit_code in (126, 127):
        return ProbeResult(outcome=Outcome.FAILED, reason=(
            f"interpreter {host.python!r} not found on the host; install python3 or set "
            f"ansible_python_interpreter for {host.name}"), **base)
    if not res.stdout.strip() and _PY2.search(res.stderr):
        return ProbeResult(outcome=Outcome.FAILED, reason=(
            f"interpreter {host.python!r} cannot run the probe (Python 2 or older than 3.6?); "
            "set ansible_python_interpreter to a Python 3.6+"), **base)
    try:
        env = parse_envelope(res.stdout, call.name)
    except EnvelopeError as e:
        detail = f"; exit code {res.exit_code}" if res.exit_code else ""
        tail = err_text.strip().splitlines()[-1:] if err_text.strip() else []
        extra = f"; stderr: {tail[0][:160]}" if tail else ""
        return ProbeResult(outcome=Outcome.INVALID_OUTPUT, reason=f"{e}{detail}{extra}", stdout=res.stdout[:65536], **base)
    return classify_envelope(env, res)


def _held_after_answer(res: CommandResult, call: ProbeCall) -> ProbeResult | None:
    """A complete envelope, then a channel the host kept open until the timeout (a daemon child
    holding stdout, a hung shell exit): the answer is kept, with a warning, instead of being
    discarded as `timeout`.  None when what arrived is not a complete envelope."""
    if res.stdout_truncated or not res.stdout.strip():
        return None
    try:
        env = parse_envelope(res.stdout, call.name)
    except EnvelopeError:
        return None
    note = (f"the host kept the channel open for {call.timeout:.0f}s after a complete answer; "
            "the answer is kept, the command was stopped")
    env.warnings = [*env.warnings, note]
    result = classify_envelope(env, res)
    if result.outcome == Outcome.OK:
        result.reason = note
    return result


def classify_envelope(env: Envelope, res: CommandResult) -> ProbeResult:
    """The outcome an envelope states for itself."""
    base: dict[str, Any] = {"probe": env.probe, "duration_s": res.duration_s, "stderr": res.stderr[-65536:],
                            "retried": res.retried}
    if env.status == "ok":
        return ProbeResult(outcome=Outcome.OK, envelope=env, **base)
    if env.status == "unsupported":
        return ProbeResult(outcome=Outcome.UNSUPPORTED, reason="; ".join(env.errors) or "unsupported", envelope=env, **base)
    return ProbeResult(outcome=Outcome.FAILED, reason="; ".join(env.errors)[:500] or "probe reported an error",
                       envelope=env, **base)


RAW_COMMAND_TIMEOUT_S = 30.0


def _no_interpreter(res: CommandResult) -> bool:
    return not res.stdout.strip() and res.exit_code in (126, 127) and not res.timed_out \
        and become_failure(res.exit_code, res.stderr) is None


def run_raw(transport: Transport, host: Host, options: RunOptions, deadline: float, why: str) -> ProbeResult:
    """Run the standard text commands (nvidia-smi, lspci); the controller parses what they print."""
    from orchestrator.facts.textparse import RAW_COMMANDS

    t0 = time.monotonic()
    outputs: dict[str, str | None] = {}
    notes: list[str] = []
    # Where nvidia-smi/lspci live off the default PATH (e.g. /usr/local/nvidia/bin in containers).
    extra_path = host.vars.get("probe_raw_path")
    prefix = f'PATH={shlex.quote(str(extra_path))}:"$PATH" ' if extra_path else ""
    for kind, command in RAW_COMMANDS.items():
        left = deadline - time.monotonic()
        if left <= 0:
            outputs[kind] = None
            notes.append(f"{command}: not run, host deadline reached")
            continue
        try:
            res = transport.run(wrap_command(prefix + command, options.become or host.become, host.become_user), b"",
                                min(RAW_COMMAND_TIMEOUT_S, left), deadline=deadline)
        except ProbeNotAvailable as e:  # the replay transport has no recording of text commands
            outputs[kind] = None
            notes.append(f"{command}: {e.message}")
            continue
        except TransportError as e:
            return ProbeResult(RAW_PROBE, transport_outcome(e.kind), e.message,
                               duration_s=time.monotonic() - t0, retried=e.retried)
        if res.timed_out or res.stdout_truncated or res.exit_code != 0:
            outputs[kind] = None
            state = "timed out" if res.timed_out else ("too much output" if res.stdout_truncated
                                                       else f"exit code {res.exit_code}")
            notes.append(f"{command}: {state}")
        else:
            outputs[kind] = res.stdout.decode("utf-8", "replace")
    got = [k for k, v in outputs.items() if v is not None]
    env = Envelope(probe=RAW_PROBE, probe_version="text", status="ok" if got else "unsupported",
                   data={RAW_OUTPUTS: outputs, "why": why}, errors=[] if got else ["no text command answered"],
                   warnings=[why, *notes], duration_s=time.monotonic() - t0)
    outcome = Outcome.OK if got else Outcome.UNSUPPORTED
    reason = why if got else f"{why}; none of nvidia-smi/lspci answered ({'; '.join(notes)})"
    return ProbeResult(RAW_PROBE, outcome, reason, envelope=env, duration_s=env.duration_s)


class _Cancelled(Exception):
    pass


def controller_error(e: BaseException) -> str:
    """The reason for a host whose probing raised on the controller (out of descriptors, a bug)."""
    if descriptors.is_exhaustion(e):
        return f"the controller could not probe this host: {descriptors.out_of_descriptors()}"
    detail = f"{e.strerror} ({type(e).__name__})" if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
    return f"the controller could not probe this host: {detail[:200]}"


def _cut_off(calls: list[ProbeCall], e: TransportError) -> dict[str, ProbeResult]:
    """The connection failed running calls[0]: it gets the error, the probes after it were not run."""
    outcome = transport_outcome(e.kind)
    out = {calls[0].name: ProbeResult(calls[0].name, outcome, e.message, retried=e.retried)}
    for rest in calls[1:]:
        out[rest.name] = ProbeResult(rest.name, outcome, f"not run: {e.message}", retried=e.retried)
    return out


def bundles(host: Host, calls: list[ProbeCall], options: RunOptions) -> bool:
    """Whether this host's probes go to one interpreter: only where that saves starts (2+ probes)."""
    return options.bundle and len(calls) > 1 and capabilities(host.connection).pipes_to_interpreter \
        and str(host.vars.get("probe_mode", "")).lower() != "raw"


def bundle_items(host: Host, calls: list[ProbeCall]) -> list[bundle.BundleItem]:
    """The host's calls as a bundle ships them: each with the host's own arguments (probe_root, probe_args)."""
    return [bundle.BundleItem(c.name, {**c.args, **host_probe_args(host, c.name)}, c.timeout) for c in calls]


def _run_bundle(transport: Transport, host: Host, calls: list[ProbeCall], options: RunOptions,
                deadline: float) -> tuple[CommandResult, bundle.Answer]:
    """One `python3 -I -S -` for all of `calls`; the answer cut into one result per probe."""
    left = deadline - time.monotonic()
    items = bundle_items(host, calls)
    # The host's part of the budget ends a little before ours, so its last frame still reaches us.
    script = bundle.compose(items, max(0.0, min(left, sum(c.timeout for c in calls)) - BUNDLE_SLACK_S),
                            PROBE_DEADLINE_MARGIN_S, options.transport.max_output, options.transport.max_stderr)
    # The bundle writes its magic line before the first probe starts, so a host whose interpreter
    # never gets there (hung at start-up, a shell waiting on something) is given up after one probe
    # timeout instead of the whole host deadline; and the command as a whole needs no more than
    # its probes' timeouts, counted from that line: the host's clock (the bundle's budget, each
    # probe's kill) started just before it, wherever the link or this controller was slow before.
    limit = sum(c.timeout for c in calls) + 2 * BUNDLE_SLACK_S
    early: dict[str, Any] = {}
    if _takes(type(transport), "clock_on_host"):
        early = {"first_output": calls[0].timeout, "clock_on_host": True}
    else:
        limit = min(left, limit)
        if _takes(type(transport), "first_output"):
            early = {"first_output": calls[0].timeout}
    res = transport.run(probe_command(host, options.become), script, limit, deadline=deadline, **early)
    return res, bundle.split(res, [c.name for c in calls], options.transport.max_output, options.transport.max_stderr)


@functools.cache
def _takes(kind: type[Transport], keyword: str) -> bool:
    """Whether a transport's run() takes `keyword` (`first_output`, `clock_on_host`: ssh and local do;
    a transport that does not, or a test's subclass overriding run(), is simply given the whole limit,
    counted from when the command was sent)."""
    try:
        return keyword in inspect.signature(kind.run).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def _without_start_mark(res: CommandResult) -> CommandResult:
    """A lone probe's answer without the start mark it wrote first (payload.START_MARK)."""
    if res.stdout.startswith(probes.START_MARK):
        return dataclasses.replace(res, stdout=res.stdout[len(probes.START_MARK):])
    return res


def default_host_deadline(calls: list[ProbeCall], options: RunOptions, bundled: bool) -> float:
    """A host's whole budget when RunOptions.host_deadline is not set: connecting with its retries, then per
    command the link's share (reaching the host), the wait for the script to start (one probe timeout)
    and the probes' own time on the host, as the transport's CommandClock counts them."""
    t = options.transport
    connecting = t.connect_timeout * (t.retries + 1)
    if bundled:
        return connecting + t.connect_timeout + calls[0].timeout + sum(c.timeout for c in calls) + 2 * BUNDLE_SLACK_S
    return connecting + sum(t.connect_timeout + 2 * c.timeout for c in calls)


NOT_STARTED_REASON = "host deadline exhausted before this probe"


def document_script(host: Host | None, calls: list[ProbeCall], plan: dict[str, Any],
                    max_output: int, max_stderr: int) -> bytes:
    """`probe bundle`'s script: what a run pipes to `host` (every host alike when None), whose
    runner prints one document for `probe import` instead of frames.  The host's budget is the sum of
    its probes' timeouts, as a live run's host deadline less the connection."""
    items = bundle_items(host or Host("(any host)"), calls)
    return bundle.compose(items, sum(c.timeout for c in calls), PROBE_DEADLINE_MARGIN_S, max_output, max_stderr,
                          document={"for_host": host.name if host else None, "plan": plan})


def document_result(host: Host, doc: bundle.Document, cap: int) -> HostResult:
    """A bundle document's answers judged exactly as a live bundle's frames are (classify)."""
    results: dict[str, ProbeResult] = {}
    for call, frame in zip(doc.calls, doc.frames):
        pc = ProbeCall(call.name, call.args, call.timeout_s)
        if frame.result is None:
            results[call.name] = ProbeResult(call.name, Outcome.TIMEOUT, NOT_STARTED_REASON)
        else:
            results[call.name] = classify(host, pc, frame.result, cap=cap)
    return HostResult(host=host, probes=results,
                      duration_s=sum(r.duration_s for r in results.values()))


def _bundled_answer(i: int, call: ProbeCall, whole: CommandResult, answer: bundle.Answer, stop: threading.Event,
                    cap: int) -> CommandResult | ProbeResult:
    """Probe i's share of a bundle's answer: its own frame, the verdict where it has none, or, when
    the answer is not (or no longer) frames, the rest of it, to be judged as a lone probe's answer."""
    if i < len(answer.frames):
        frame = answer.frames[i]
        if frame.result is None:
            return ProbeResult(call.name, Outcome.TIMEOUT, NOT_STARTED_REASON)
        return frame.result
    if stop.is_set() and (whole.exit_code is None or whole.exit_code < 0):  # closed or killed by Ctrl-C
        raise _Cancelled()  # the probes with a frame keep their results
    if whole.timed_out:  # the bundle itself ran out of the host deadline
        if i == len(answer.frames) and not answer.bundled and answer.rest.strip():
            held = _held_after_answer(dataclasses.replace(whole, stdout=answer.rest[:cap]), call)
            if held is not None:  # one complete answer (not frames), then the channel held open
                return held
        if i > len(answer.frames):
            return ProbeResult(call.name, Outcome.TIMEOUT, "host deadline exhausted before this probe",
                               retried=whole.retried)
        return ProbeResult(call.name, Outcome.TIMEOUT, f"probe did not finish within {call.timeout:.0f}s",
                           duration_s=whole.duration_s, stderr=whole.stderr[-65536:], retried=whole.retried)
    truncated = whole.stdout_truncated or len(answer.rest) > cap
    # past the cap the output is discarded anyway: no 16 MiB copy of it per probe
    return dataclasses.replace(whole, stdout=b"" if truncated else answer.rest, stdout_truncated=truncated)


def run_host(host: Host, calls: list[ProbeCall], options: RunOptions, factory: TransportFactory,
             stop: threading.Event, active: dict[str, Transport], lock: threading.Lock) -> HostResult:
    t0 = time.monotonic()
    results: dict[str, ProbeResult] = {}
    transport: Transport | None = None
    bundled = bundles(host, calls, options)
    deadline = options.host_deadline or default_host_deadline(calls, options, bundled)
    topts = options.transport
    if bundled:  # each probe keeps its own caps on the host; the whole answer may hold them all
        topts = dataclasses.replace(topts, max_output=bundle.transport_cap(len(calls), topts.max_output,
                                                                           topts.max_stderr))
    if stop.is_set():  # queued when the run was stopped: never touched
        return HostResult(host, {c.name: ProbeResult(c.name, Outcome.SKIPPED, NOT_STARTED) for c in calls})
    try:
        transport = factory(host, topts)
        with lock:
            active[host.name] = transport
        _probe_host(_HostRun(host, options, transport, stop, t0, deadline, results), calls, bundled)
    # A step that ends early has already given its calls their results: these only fill the rest.
    except _Cancelled:
        for call in calls:
            results.setdefault(call.name, ProbeResult(call.name, Outcome.INTERRUPTED, CUT_OFF))
    except TransportError as e:  # raised while opening
        for call in calls:
            results.setdefault(call.name, ProbeResult(call.name, transport_outcome(e.kind),
                                                      e.message, retried=e.retried))
    except Exception as e:  # EMFILE from os.pipe(), a transport bug: this host's failure, not the run's
        for call in calls:
            results.setdefault(call.name, ProbeResult(call.name, Outcome.FAILED, controller_error(e)))
    finally:
        with lock:
            active.pop(host.name, None)
        if transport is not None:
            try:
                transport.close()
            except Exception:  # closing a dead connection must not lose the results
                pass
    return HostResult(host=host, probes=results, duration_s=time.monotonic() - t0)


@dataclass
class _HostRun:
    """One host's probing, as its steps share it: the open transport and the results so far."""

    host: Host
    options: RunOptions
    transport: Transport
    stop: threading.Event
    t0: float  # when the host's turn began (time.monotonic())
    deadline: float  # the host's budget in seconds from t0
    results: dict[str, ProbeResult]


def _probe_host(run: _HostRun, calls: list[ProbeCall], bundled: bool) -> None:
    """Every call's result into run.results: text commands in raw mode, else one bundle or one
    command per probe.  Raises _Cancelled when the run is stopped."""
    if str(run.host.vars.get("probe_mode", "")).lower() == "raw":
        run.results[RAW_PROBE] = run_raw(run.transport, run.host, run.options, run.t0 + run.deadline,
                                         "probe_mode: raw")
        for call in calls:
            run.results[call.name] = ProbeResult(call.name, Outcome.SKIPPED, "probe_mode: raw (text commands instead)")
        return
    ran: tuple[CommandResult, bundle.Answer] | None = None
    if bundled and calls:
        ran = _bundle_once(run, calls)
        if ran is None:
            return
    _run_calls(run, calls, ran)


def _bundle_once(run: _HostRun, calls: list[ProbeCall]) -> tuple[CommandResult, bundle.Answer] | None:
    """All of `calls` in one bundle; None when the connection failed (each call then has its result)."""
    if run.stop.is_set():
        raise _Cancelled()
    try:
        return _run_bundle(run.transport, run.host, calls, run.options, run.t0 + run.deadline)
    except TransportError as e:
        if run.stop.is_set():
            raise _Cancelled() from None
        run.results.update(_cut_off(calls, e))
        return None


def _run_calls(run: _HostRun, calls: list[ProbeCall], ran: tuple[CommandResult, bundle.Answer] | None) -> None:
    """Judge each call: its share of the bundle's answer `ran`, or (no bundle) its own command."""
    cap = run.options.transport.max_output
    for i, call in enumerate(calls):
        got: CommandResult | ProbeResult
        if ran is not None:
            whole, answer = ran
            got = _bundled_answer(i, call, whole, answer, run.stop, cap)
            from_frame = i < len(answer.frames)
        else:
            try:
                got = _run_alone(run, call)
            except TransportError as e:  # the connection failed running this probe: the rest are not run
                run.results.update(_cut_off(calls[i:], e))
                break
            from_frame = False
        if isinstance(got, ProbeResult):
            run.results[call.name] = got
            continue
        run.results[call.name] = classify(run.host, call, got, cap=cap)
        if not from_frame and _no_interpreter(got):
            _fall_back_to_raw(run, call, calls[i + 1:])
            break


def _run_alone(run: _HostRun, call: ProbeCall) -> CommandResult | ProbeResult:
    """One probe as its own command: what came back, or its result when the host's deadline is spent."""
    if run.stop.is_set():
        raise _Cancelled()
    left = run.deadline - (time.monotonic() - run.t0)
    if left <= 0:
        return ProbeResult(call.name, Outcome.TIMEOUT, NOT_STARTED_REASON)
    timeout = min(call.timeout, left)
    args = {**call.args, **host_probe_args(run.host, call.name)}
    # the probe announces its start, and its timeout counts from there (CommandClock):
    # the link's and this controller's delays before it are not the probe's
    on_host = _takes(type(run.transport), "clock_on_host")
    script = probes.build_script(call.name, args, max(1.0, timeout - PROBE_DEADLINE_MARGIN_S), announce=on_host)
    clock = {"first_output": timeout, "clock_on_host": True} if on_host else {}
    try:
        res = run.transport.run(probe_command(run.host, run.options.become), script, timeout,
                                deadline=run.t0 + run.deadline, **clock)
    except ProbeNotAvailable as e:  # this probe has no answer there: skipped, the others still run
        return ProbeResult(call.name, Outcome.SKIPPED, e.message)
    except TransportError:
        if run.stop.is_set():
            raise _Cancelled() from None
        raise
    if run.stop.is_set() and (res.exit_code is None or res.exit_code < 0):  # closed or killed by Ctrl-C
        raise _Cancelled()
    return _without_start_mark(res)


def _fall_back_to_raw(run: _HostRun, call: ProbeCall, rest: list[ProbeCall]) -> None:
    """Ansible's `raw` answer: no usable Python, so read what nvidia-smi and lspci print.
    The missing interpreter stays a failure (it is a setup to fix, or `probe_mode: raw` to make it
    intended); the text facts are kept beside it, and the probes after it are not run."""
    why = f"interpreter {run.host.python!r} not found on the host: raw mode used instead"
    raw = run_raw(run.transport, run.host, run.options, run.t0 + run.deadline, why)
    failed = run.results[call.name]
    if raw.outcome == Outcome.OK:
        failed.reason += "; raw mode used instead (facts from nvidia-smi/lspci text)"
        run.results[RAW_PROBE] = raw
    else:
        failed.reason += "; raw mode found no nvidia-smi/lspci either"
    for later in rest:
        run.results[later.name] = ProbeResult(later.name, Outcome.SKIPPED, f"not run: {failed.reason}")


def ctrl_c_of(e: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C that `e` stands for: itself, or the one that cut a lock's release short.  When the
    signal lands inside threading's Condition.wait, CPython raises RuntimeError("release unlocked
    lock") while handling the KeyboardInterrupt, and the interrupt is only its context."""
    if isinstance(e, KeyboardInterrupt):
        return e
    context = e.__context__
    return context if isinstance(e, RuntimeError) and isinstance(context, KeyboardInterrupt) else None


def run_fleet(hosts: Iterable[Host], calls: list[ProbeCall], options: RunOptions, factory: TransportFactory,
              sink: EventSink, stop: threading.Event | None = None) -> list[HostResult]:
    """Run `calls` on every host; returns results in inventory order.

    KeyboardInterrupt: hosts not yet started are marked skipped, in-flight connections are
    closed (their unfinished probes end as interrupted), every finished result is kept, and
    the interrupt is re-raised after the sink saw everything.
    """
    stop = stop or threading.Event()
    host_list = list(hosts)
    from orchestrator.engine import procs  # it imports this module

    count = procs.process_count(host_list, options.procs, factory)
    if count > 1:
        return procs.run_fleet_procs(host_list, calls, options, factory, sink, stop, count)
    return _run_fleet_here(host_list, calls, options, factory, sink, stop)


def _run_fleet_here(host_list: list[Host], calls: list[ProbeCall], options: RunOptions, factory: TransportFactory,
                    sink: EventSink, stop: threading.Event) -> list[HostResult]:
    """run_fleet in this process: a thread per fork."""
    order = {h.name: i for i, h in enumerate(host_list)}
    done: dict[str, HostResult] = {}
    active: dict[str, Transport] = {}
    lock = threading.Lock()
    interrupted: BaseException | None = None
    pool = ThreadPoolExecutor(max_workers=max(1, options.forks), thread_name_prefix="probe")
    pending: dict[Future[HostResult], Host] = {}
    queue = list(reversed(host_list))

    def submit_more() -> None:
        # Submit lazily so memory and queued work stay bounded by forks, not by fleet size.
        while queue and len(pending) < options.forks * 2 and not stop.is_set():
            h = queue.pop()
            pending[pool.submit(run_host, h, calls, options, factory, stop, active, lock)] = h

    delivering: HostResult | None = None
    try:
        submit_more()
        while pending:
            finished, _ = wait(list(pending), timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in finished:
                h = pending.pop(fut)
                try:
                    res = fut.result()
                except Exception as e:  # run_host keeps its own errors; anything left is still this host's
                    res = HostResult(h, {c.name: ProbeResult(c.name, Outcome.FAILED, controller_error(e)) for c in calls})
                done[h.name] = res
                delivering = res
                with signals_deferred():
                    sink.host_finished(res)
                delivering = None
            submit_more()
    except (KeyboardInterrupt, RuntimeError) as e:
        ctrl_c = ctrl_c_of(e)
        if ctrl_c is None:
            raise
        interrupted = ctrl_c
        stop.set()
        if delivering is not None:  # the interrupt beat the deferral: record that host again, whole
            sink.host_finished(delivering)
        give_up = time.monotonic() + options.transport.connect_timeout + 5
        # Close every live connection, and keep closing until the workers return: a host that was
        # still connecting at the first close can finish its handshake and start its probe after it.
        while pending and time.monotonic() < give_up:
            _close_all(active, lock)
            finished, _ = wait(list(pending), timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in finished:
                h = pending.pop(fut)
                try:
                    res = fut.result()
                except Exception:  # cancelled in the queue (never started), or its worker broke off
                    cut = (Outcome.SKIPPED, NOT_STARTED) if fut.cancelled() else (Outcome.INTERRUPTED, CUT_OFF)
                    res = HostResult(h, {c.name: ProbeResult(c.name, *cut) for c in calls})
                done[h.name] = res
                sink.host_finished(res)
        for _fut, h in list(pending.items()):  # a worker that would not stop: recorded, not waited for
            res = HostResult(h, {c.name: ProbeResult(c.name, Outcome.INTERRUPTED, CUT_OFF) for c in calls})
            done[h.name] = res
            sink.host_finished(res)
        pending.clear()
    finally:
        pool.shutdown(wait=interrupted is None, cancel_futures=True)
    for h in queue if interrupted else []:
        res = HostResult(h, {c.name: ProbeResult(c.name, Outcome.SKIPPED, NOT_STARTED) for c in calls})
        done[h.name] = res
        sink.host_finished(res)
    results = sorted(done.values(), key=lambda r: order[r.host.name])
    if interrupted is not None:
        raise RunInterrupted(results) from interrupted
    return results


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C or SIGTERM arriving while a finished host is being recorded takes effect right after
    it, so that host's raw files are never left half written."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are only ever handled in the main thread
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _close_all(active: dict[str, Transport], lock: threading.Lock) -> None:
    with lock:
        transports = list(active.values())
    for t in transports:
        try:
            t.close()
        except Exception:  # a connection half torn down can raise anything; it is going away
            pass


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM: carries every result that was finished or closed off."""

    def __init__(self, results: list[HostResult]):
        super().__init__("run interrupted")
        self.results = results
