"""Outcome of one probe on one host, and how outcomes combine into a host's outcome."""

from __future__ import annotations

from enum import Enum

from orchestrator.transport.base import FailureKind


class Outcome(str, Enum):
    OK = "ok"
    SKIPPED = "skipped"
    UNSUPPORTED = "unsupported"
    INTERRUPTED = "interrupted"  # the run was stopped (Ctrl-C, SIGTERM) while this probe was under way
    FAILED = "failed"
    INVALID_OUTPUT = "invalid_output"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"

    @property
    def rank(self) -> int:
        return _ORDER.index(self)

    @property
    def is_problem(self) -> bool:
        """The host or probe needs attention: anything but ok, skipped and unsupported (exit code 4)."""
        return self.value not in NOT_PROBLEMS


# Worst last: a host is as bad as its worst probe.  "unsupported" (no GPU library on a CPU box) is
# not an error, so it sits just above skipped; "interrupted" (cut off by the operator) above both:
# a host cut mid-probe is not one that never started, but nothing it did went wrong either.
_ORDER = [
    Outcome.OK,
    Outcome.SKIPPED,
    Outcome.UNSUPPORTED,
    Outcome.INTERRUPTED,
    Outcome.FAILED,
    Outcome.INVALID_OUTPUT,
    Outcome.TIMEOUT,
    Outcome.UNREACHABLE,
]


# Outcome values that are not a problem of the host: a probe skipped on purpose, a capability the
# host lacks (no GPU library on a CPU box), a probe the operator's Ctrl-C cut off (the run's own
# exit status, 130, says so).  Readers of fleet.json counts compare values with this.
NOT_PROBLEMS: frozenset[str] = frozenset({Outcome.OK.value, Outcome.SKIPPED.value, Outcome.UNSUPPORTED.value,
                                          Outcome.INTERRUPTED.value})

# The reasons a stopped run records: hosts it never reached are skipped, hosts it cut off interrupted.
NOT_STARTED = "run interrupted before this host started"
CUT_OFF = "run interrupted while this host was being probed"


# Skip reasons that mean the probe was meant to run and did not (a stopped run, a probe before it
# failed); other skips are on purpose (raw mode, a condition of Ansible's).
_UNFINISHED_SKIPS = (NOT_STARTED, "not run: ")
_UNFINISHED = frozenset({Outcome.INTERRUPTED.value, Outcome.FAILED.value, Outcome.INVALID_OUTPUT.value,
                         Outcome.TIMEOUT.value, Outcome.UNREACHABLE.value})


def finished(outcome: str, reason: str = "") -> bool:
    """Whether a probe the plan asked for ran to its end: ok, unsupported (the host cannot answer,
    which is an answer), or skipped on purpose.  What did not finish left its facts section missing
    or cut short, and nothing may be judged from that absence."""
    if outcome == Outcome.SKIPPED.value:
        return not reason.startswith(_UNFINISHED_SKIPS)
    return outcome not in _UNFINISHED


def is_problem(value: str) -> bool:
    """Whether an outcome value (as fleet.json and run summaries hold it) is a problem."""
    return value not in NOT_PROBLEMS


def worst(outcomes: list[Outcome]) -> Outcome:
    if not outcomes:
        return Outcome.SKIPPED
    return max(outcomes, key=lambda o: o.rank)


def transport_outcome(kind: FailureKind) -> Outcome:
    """The outcome of a probe its transport gave up on; each FailureKind names its own."""
    return Outcome(kind.outcome)
