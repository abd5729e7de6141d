"""Progress on stderr while a run is going: only on a terminal, never from worker threads."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from orchestrator.engine.outcomes import Outcome, is_problem
from orchestrator.engine.runner import HostResult


class Progress:
    """`[48/48] ok=46 unsupported=1 problems=1 elapsed 1.1s`, rewritten in place on stderr while the
    hosts answer.  Its counts add up to the hosts done: ok, each outcome that is no problem (a host
    without a GPU library is `unsupported`), the problems.  While the line is shown every other line
    written to stdout or stderr, by any thread (a fabric step's notice, a transport's warning), first
    clears it and then draws it again beneath, so no message is glued to its end."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None):
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.t0 = time.monotonic()
        self._last = 0.0
        self._text = ""  # the counts as last drawn
        self._shown = False  # whether it is on the screen now, unended
        self._lock = threading.RLock()
        self._guards: list[tuple[str, _Interjections]] = []

    def host_finished(self, res: HostResult) -> None:
        self.done += 1
        self.counts[res.outcome.value] += 1
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done == self.total):
            self._last = now
            self._text = progress_counts(self.done, self.total, self.counts)
            with self._lock:
                self._guard_streams()
                self._draw()

    def _draw(self) -> None:
        elapsed = time.monotonic() - self.t0  # drawn again beneath a message: the time goes on
        self.stream.write(f"\r{self._text} elapsed {elapsed:.1f}s \x1b[K")  # \x1b[K: what a longer line left is cleared
        self.stream.flush()
        self._shown = True

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False

    def interjected(self, inner: TextIO, text: str) -> int:
        """Another line for `inner` while the progress line may be shown: the line is cleared first
        and drawn again once the text has ended its own line."""
        with self._lock:
            self._clear()
            n = inner.write(text)
            if text.endswith("\n") and self._text:
                inner.flush()
                self._draw()
            return n

    def _guard_streams(self) -> None:
        if self._guards:
            return
        for name in ("stdout", "stderr"):
            guard = _Interjections(getattr(sys, name), self)
            setattr(sys, name, guard)
            self._guards.append((name, guard))

    def close(self) -> None:
        with self._lock:
            for name, guard in reversed(self._guards):
                if getattr(sys, name) is guard:  # put back only what is still ours
                    setattr(sys, name, guard.inner)
            self._guards.clear()
            if self._shown:
                self.stream.write("\n")
                self.stream.flush()
                self._shown = False


def progress_counts(done: int, total: int, counts: Mapping[str, int]) -> str:
    """`[48/48] ok=46 unsupported=1 problems=1`: ok, then each outcome that is no problem and was
    seen (skipped, unsupported, interrupted), then the problems; they add up to `done`."""
    others = [f"{o.value}={counts[o.value]}" for o in Outcome
              if o is not Outcome.OK and not is_problem(o.value) and counts.get(o.value)]
    bad = sum(v for k, v in counts.items() if is_problem(k))
    return " ".join([f"[{done}/{total}] ok={counts.get('ok', 0)}", *others, f"problems={bad}"])


class _Interjections:
    """sys.stdout or sys.stderr while the progress line is shown: each write goes through the
    Progress, which ends its line first; everything else is the stream's own."""

    def __init__(self, inner: TextIO, progress: Progress):
        self.inner = inner
        self.progress = progress

    def write(self, text: str) -> int:
        return self.progress.interjected(self.inner, text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Steps:
    """Where a long command that has no hosts to count as they answer stands (`probe merge` of many
    parts): one line on stderr, rewritten in place, only on a terminal."""

    def __init__(self, command: str, stream: TextIO | None = None, enabled: bool | None = None):
        self.command = command
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.t0 = time.monotonic()
        self._shown = False

    def step(self, text: str) -> None:
        """`text`: what it is doing now; the caller makes it safe to print."""
        if self.enabled:
            # \x1b[K clears the rest of the line a longer step left
            self.stream.write(f"\r{self.command}: {text}, elapsed {time.monotonic() - self.t0:.1f}s\x1b[K")
            self.stream.flush()
            self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False


class Fanout:
    """Hands each result to several sinks, in order."""

    def __init__(self, *sinks: object):
        self.sinks = sinks

    def host_finished(self, res: HostResult) -> None:
        for s in self.sinks:
            s.host_finished(res)  # type: ignore[attr-defined]
