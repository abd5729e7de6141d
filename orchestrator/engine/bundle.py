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


def compose(items: list[BundleItem], budget_s: float, margin_s: float, max_output: int, max_stderr: int) -> bytes:
    """The bytes piped to `python3 -I -S -`: the bundle runner and one call with everything as JSON.

    budget_s: what is left of the host deadline; a probe that would start after it is reported as
    not started.  The caps are per probe, the same as one command's over the transport.
    """
    sources = tuple(it.source if it.source is not None else probes.probe_source(it.name) for it in items)
    head, sources_literal, preload = _shared(sources)
    spec = {
        "budget_s": float(budget_s),
        "preload": preload,
        "margin_s": float(margin_s),
        "max_output": int(max_output),
        "max_stderr": int(max_stderr),
        "probes": [{"name": it.name, "args": it.args, "timeout_s": float(it.timeout_s)} for it in items],
    }
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
    duration = head.get("duration_s")
    if not isinstance(duration, (int, float)) or isinstance(duration, bool) or not math.isfinite(duration) \
            or not 0 <= duration <= _MAX_DURATION_S:  # NaN/Infinity would reach fleet.json and JUnit
        return None
    return head


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
