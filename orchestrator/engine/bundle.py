"""Several probes in one interpreter on a host: the script that ships them and the reading of its answer.

A play with several probes used to start one sshd session and one `python3` per probe.  A bundle
ships them all to one interpreter (`probes/_bundle.py`), which runs each probe in a forked child
and writes, for each, a header line and the child's stdout and stderr, length-prefixed.  Here the
answer is cut back into one CommandResult per probe, so the runner classifies each exactly as if
that probe had run alone.  Anything that is not a well-formed frame ends the reading: the probes
after it are judged from what is left (a Python 2 refusing `-I`, a missing interpreter, a fake
interpreter printing text), as they would have been one by one.
"""

from __future__ import annotations

import ast
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from orchestrator.engine import payload as probes
from orchestrator.engine.envelope import EnvelopeError, check_budget
from orchestrator.files.jsontext import loads_strict
from orchestrator.transport.base import DEFAULT_MAX_OUTPUT, DEFAULT_MAX_STDERR, CommandResult

MAGIC = b"FPBUNDLE 1\n"
_MAX_HEADER = 4096  # a header is ~200 bytes; a longer "line" is not ours
# What a frame may claim: an exit status (negative: the signal that killed the child) and a duration
# no probe can reach; beyond them the header is not ours.
_EXIT_RANGE = range(-128, 256)
_MAX_DURATION_S = 86_400.0


@dataclass(frozen=True)
class BundleItem:
    name: str
    args: dict[str, Any]
    timeout_s: float  # the probe's command timeout; its watchdog fires `margin_s` before
    source: str | None = None  # prelude + probe code; default: the shipped probe of that name (tests bring their own)


def compose(items: list[BundleItem], budget_s: float, margin_s: float, max_output: int, max_stderr: int,
            document: dict[str, Any] | None = None) -> bytes:
    """The bytes piped to `python3 -I -S -`: the bundle runner and one call with everything as JSON.

    budget_s: what is left of the host deadline; a probe that would start after it is reported as
    not started.  The caps are per probe, the same as one command's over the transport.
    document: `probe bundle`'s script (`{"for_host": name or None, "plan": ...}`, echoed back):
    the runner then prints one JSON document with the host's identity instead of frames.
    """
    sources = tuple(it.source if it.source is not None else probes.probe_source(it.name) for it in items)
    head, sources_literal, preload = _shared(sources)
    spec: dict[str, Any] = {
        "budget_s": float(budget_s),
        "preload": preload,
        "margin_s": float(margin_s),
        "max_output": int(max_output),
        "max_stderr": int(max_stderr),
        "probes": [{"name": it.name, "args": it.args, "timeout_s": float(it.timeout_s)} for it in items],
    }
    if document is not None:
        spec["document"] = document
    # As in probes.compose: everything travels as JSON string literals, never as code.
    host_literal = repr(json.dumps(spec, sort_keys=True)).encode("utf-8")
    return head + b"fp_bundle(json.loads(" + host_literal + b"), json.loads(" + sources_literal + b"))\n"


@lru_cache(maxsize=32)
def _shared(sources: tuple[str, ...]) -> tuple[bytes, bytes, list[str]]:
    # The ~80 KB that is the same for every host of a play: the runner, the probes' code as one
    # JSON string literal, and what to import before the forks (what several probes import:
    # threading, re, ctypes...).  Encoding it once per play keeps compose() cheap per host.
    uses = Counter(m for src in sources for m in _top_imports(src))
    preload = sorted(m for m, n in uses.items() if n > 1)
    literal = repr(json.dumps(list(sources))).encode("utf-8")
    return (probes.bundle_runner_source() + "\n\n").encode("utf-8"), literal, preload


@lru_cache(maxsize=64)
def _top_imports(source: str) -> frozenset[str]:
    """Modules a probe imports at module level (prelude and libraries included)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # its child reports that, as `python3 -` would have
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level and node.module != "__future__":
            names.add(node.module)
    return frozenset(names)


@dataclass
class Frame:
    """One probe's answer inside a bundle: a CommandResult, or that it never started."""

    probe: str
    started: bool
    result: CommandResult | None = None


@dataclass
class Answer:
    frames: list[Frame] = field(default_factory=list)
    rest: bytes = b""  # stdout after the last good frame (all of it when there was no bundle)
    bundled: bool = False  # the answer began with the bundle's magic line


def _header(line: bytes, expected: str) -> dict[str, Any] | None:
    try:
        head = json.loads(line)
    except ValueError:
        return None
    if not isinstance(head, dict) or head.get("probe") != expected:
        return None
    for key in ("out", "err"):
        if not isinstance(head.get(key), int) or isinstance(head.get(key), bool) or head[key] < 0:
            return None
    if head.get("state") == "not_started":
        return head
    exit_code = head.get("exit")
    if head.get("state") != "ran" or not (exit_code is None or (isinstance(exit_code, int)
                                                                and not isinstance(exit_code, bool)
                                                                and exit_code in _EXIT_RANGE)):
        return None
    if not all(isinstance(head.get(k), bool) for k in ("timed_out", "out_trunc", "err_trunc")):
        return None
    if duration_of(head.get("duration_s")) is None:
        return None
    return head


def duration_of(value: Any) -> float | None:
    """A reported run time in seconds, or None when it is not one: not a number, negative, NaN or
    infinite (which would reach fleet.json and JUnit), or longer than a day (no probe runs so long)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
            or not 0 <= value <= _MAX_DURATION_S:
        return None
    return float(value)


def split(res: CommandResult, names: list[str], max_output: int = DEFAULT_MAX_OUTPUT,
          max_stderr: int = DEFAULT_MAX_STDERR) -> Answer:
    """Cut a bundle's stdout into per-probe results, in order, up to the first thing that is not a frame.

    The caps are enforced on the host, and again here: a frame claiming more stdout than
    `max_output` is that probe's output past the cap (discarded), more stderr keeps its tail."""
    out = res.stdout
    if not out.startswith(MAGIC):
        return Answer(rest=out)
    answer = Answer(bundled=True)
    pos = len(MAGIC)
    for name in names:
        nl = out.find(b"\n", pos, pos + _MAX_HEADER)
        head = _header(out[pos:nl], name) if nl >= 0 else None
        if head is None:
            break
        body = nl + 1
        end = body + head["out"] + head["err"]
        if end > len(out):  # cut short (the host deadline, the transport's cap)
            break
        if head["state"] == "not_started":
            answer.frames.append(Frame(name, started=False))
        else:
            over_out, over_err = head["out"] > max_output, head["err"] > max_stderr
            answer.frames.append(Frame(name, started=True, result=CommandResult(
                exit_code=head["exit"],
                stdout=b"" if over_out else out[body:body + head["out"]],
                stderr=out[max(body + head["out"], end - max_stderr):end],
                duration_s=float(head["duration_s"]),
                timed_out=head["timed_out"],
                stdout_truncated=head["out_trunc"] or over_out,
                stderr_truncated=head["err_trunc"] or over_err,
                retried=res.retried,
            )))
        pos = end
    answer.rest = out[pos:]
    return answer


def transport_cap(n_probes: int, max_output: int, max_stderr: int) -> int:
    """The stdout cap for a bundle of n probes: each probe's caps are kept on the host, plus headers."""
    return n_probes * (max_output + max_stderr + _MAX_HEADER) + len(MAGIC)


# ------------------------------------------------------------------ a bundle's document (probe bundle)

DOCUMENT_KEY = "fleetprobe_bundle"
DOCUMENT_VERSION = 1


class DocumentError(ValueError):
    """A file that is not (or no longer) a bundle's document; the message says what is wrong."""


@dataclass(frozen=True)
class DocumentCall:
    name: str
    args: dict[str, Any]
    timeout_s: float


@dataclass
class Document:
    """What `python3 -I -S - < bundle.py` printed on one host: who it is, what ran, each probe's answer."""

    identity: dict[str, str]  # hostname; node_name, job_id, task_id, scheduler where a scheduler ran it
    for_host: str | None  # the inventory host the bundle was written for (probe bundle --host)
    plan: dict[str, Any]  # the PlanInputs the bundle was written from (playbook, probes, expect)
    calls: list[DocumentCall]
    frames: list[Frame]  # in call order; a frame per call

    @property
    def name(self) -> str:
        """The host's name in the run: the inventory name it was written for, else the scheduler's
        node name (Slurm's NodeName, not always the machine's hostname), else the hostname."""
        return self.for_host or self.identity.get("node_name") or self.identity["hostname"]


def looks_like_document(data: bytes) -> bool:
    """Cheap sniffing for `probe import`: a bundle's document starts with its key."""
    return data.lstrip()[:40].startswith(b'{"' + DOCUMENT_KEY.encode() + b'"')


def _bytes_of(value: Any, what: str) -> bytes:
    import base64
    import binascii

    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return str(value["text"]).encode("utf-8", "surrogateescape")
    if isinstance(value, dict) and isinstance(value.get("base64"), str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except (binascii.Error, ValueError):
            pass
    raise DocumentError(f"{what} is neither text nor base64")


def read_document(data: bytes) -> Document:
    """Parse a bundle's document; DocumentError names the first thing that is wrong."""
    try:
        text = data.decode("utf-8")
        # the answers are strings in it: a document of more values or deeper nesting than an
        # envelope may hold is not one, and is refused before a million objects are built
        check_budget(text)
        doc = loads_strict(text)
    except EnvelopeError as e:
        raise DocumentError(f"not a fleetprobe bundle document ({str(e).replace('stdout', 'the file')})") from None
    except ValueError as e:  # UnicodeDecodeError too
        raise DocumentError(f"not a fleetprobe bundle document (not JSON: {e})") from None
    except RecursionError:  # hostile or broken nesting: json recurses per level
        raise DocumentError("not a fleetprobe bundle document (JSON nested too deeply)") from None
    if not isinstance(doc, dict) or DOCUMENT_KEY not in doc:
        raise DocumentError("not a fleetprobe bundle document (no fleetprobe_bundle key)")
    if doc[DOCUMENT_KEY] != DOCUMENT_VERSION:
        raise DocumentError(f"bundle document version {doc[DOCUMENT_KEY]!r}; this fleetprobe reads {DOCUMENT_VERSION}")
    ident = doc.get("identity")
    if not isinstance(ident, dict) or not isinstance(ident.get("hostname"), str) or not ident["hostname"]:
        raise DocumentError("the document names no hostname")
    identity = {str(k): str(v) for k, v in ident.items() if isinstance(v, (str, int))}
    for_host = doc.get("for_host") if isinstance(doc.get("for_host"), str) and doc.get("for_host") else None
    plan: dict[str, Any] = doc["plan"] if isinstance(doc.get("plan"), dict) else {}
    calls_raw, answers = doc.get("calls"), doc.get("probes")
    if not isinstance(calls_raw, list) or not isinstance(answers, list) or len(calls_raw) != len(answers):
        raise DocumentError("the document's calls and answers do not match")
    calls, frames = [], []
    for call, answer in zip(calls_raw, answers):
        if not (isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(answer, dict)):
            raise DocumentError("a call or answer of the document is malformed")
        name = call["name"]
        args: dict[str, Any] = call["args"] if isinstance(call.get("args"), dict) else {}
        timeout = call.get("timeout_s")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
            raise DocumentError(f"{name}: the call's timeout is malformed")
        calls.append(DocumentCall(name, args, float(timeout)))
        fields = {k: v for k, v in answer.items() if k not in ("stdout", "stderr")}
        out, err = _bytes_of(answer.get("stdout"), f"{name}: stdout"), _bytes_of(answer.get("stderr"), f"{name}: stderr")
        # the same checks as a frame's header (out/err: the lengths of what the answer carries)
        head = _header(json.dumps({**fields, "out": len(out), "err": len(err)}).encode(), name)
        if head is None:
            raise DocumentError(f"{name}: the answer's header is malformed")
        if head["state"] == "not_started":
            frames.append(Frame(name, started=False))
            continue
        frames.append(Frame(name, started=True, result=CommandResult(
            exit_code=head["exit"], stdout=out, stderr=err, duration_s=float(head["duration_s"]),
            timed_out=head["timed_out"], stdout_truncated=head["out_trunc"], stderr_truncated=head["err_trunc"])))
    return Document(identity=identity, for_host=for_host, plan=plan, calls=calls, frames=frames)
