"""Outcome of one probe on one host, and how outcomes combine into a host's outcome."""

from __future__ import annotations

from enum import Enum

from orchestrator.transport.base import FailureKind


class Outcome(str, Enum):
    OK = "ok"
    SKIPPED = "skipped"
    UNSUPPORTED = "unsupported"
    FAILED = "failed"
    INVALID_OUTPUT = "invalid_output"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"

    @property
    def rank(self) -> int:
        return _ORDER.index(self)


# Worst last: a host is as bad as its worst probe.  "unsupported" (no GPU library on a CPU box) is
# not an error, so it sits just above skipped.
_ORDER = [
    Outcome.OK,
    Outcome.SKIPPED,
    Outcome.UNSUPPORTED,
    Outcome.FAILED,
    Outcome.INVALID_OUTPUT,
    Outcome.TIMEOUT,
    Outcome.UNREACHABLE,
]


def worst(outcomes: list[Outcome]) -> Outcome:
    if not outcomes:
        return Outcome.SKIPPED
    return max(outcomes, key=lambda o: o.rank)


def transport_outcome(kind: FailureKind) -> Outcome:
    """The outcome of a probe its transport gave up on; each FailureKind names its own."""
    return Outcome(kind.outcome)
