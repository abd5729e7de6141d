"""Progress on stderr while a run is going: only on a terminal, never from worker threads."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TextIO

from orchestrator.engine.outcomes import is_problem
from orchestrator.engine.runner import HostResult


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None):
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.t0 = time.monotonic()
        self._last = 0.0

    def host_finished(self, res: HostResult) -> None:
        self.done += 1
        self.counts[res.outcome.value] += 1
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.1 or self.done == self.total):
            self._last = now
            bad = sum(v for k, v in self.counts.items() if is_problem(k))
            self.stream.write(f"\r[{self.done}/{self.total}] ok={self.counts['ok']} problems={bad} "
                              f"elapsed {now - self.t0:.1f}s ")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()


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
