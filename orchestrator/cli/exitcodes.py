"""Exit codes of `probe`: one enum, from which `--help`'s table is generated (README.md holds the
same table, tests/cli/test_exit_codes.py keeps them equal)."""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the cli layer reads the verdict's result; exit statuses are its own vocabulary
    from orchestrator.verdict.result import FleetResult


class ExitStatus(IntEnum):
    OK = 0  # every host answered every probe, no finding of severity fail
    FINDINGS_FAIL = 1  # at least one finding of severity fail
    USAGE = 2  # bad command line, inventory, playbook or expectation: nothing was run
    HALF_READABLE = 3  # probe import: a file of a known kind cut before it states a fact (and nothing worse)
    HOSTS_FAILED = 4  # at least one host unreachable, timed out, or a probe failed / sent invalid output
    FINDINGS_FAIL_AND_HOSTS_FAILED = 5  # 1 and 4 combine
    OS_LIMIT = 71  # EX_OSERR: the controller ran out of what the system lends it (open files, processes)
    RESULTS_UNWRITABLE = 73  # EX_CANTCREAT: the results, or an output asked for, could not be written
    LOCKED = 75  # EX_TEMPFAIL: another run holds the results directory lock
    INTERNAL = 70  # a bug in fleetprobe
    INTERRUPTED = 130  # Ctrl-C / SIGTERM: finished hosts were kept in a partial run


# What each status means to the operator, in the order the help lists them.
MEANING: dict[ExitStatus, str] = {
    ExitStatus.OK: "all hosts answered, no finding of severity fail",
    ExitStatus.FINDINGS_FAIL: "at least one finding of severity fail",
    ExitStatus.USAGE: "usage error (command line, inventory, playbook, expectations): nothing was run",
    ExitStatus.HALF_READABLE: "probe import: a file is of a known kind but cut before it states any fact "
                              "(half-readable); the message names the command to paste instead; nothing worse",
    ExitStatus.HOSTS_FAILED: "at least one host unreachable / timeout / failed / invalid output",
    ExitStatus.FINDINGS_FAIL_AND_HOSTS_FAILED: "1 and 4 together",
    ExitStatus.OS_LIMIT: "the controller ran out of open files or processes (ulimit); the message says which",
    ExitStatus.RESULTS_UNWRITABLE: "the results or a requested output (--junit, --html, -o ...) could not be "
                                   "written (disk full, read-only, a bad path); the message names it",
    ExitStatus.LOCKED: "another run holds the results-directory lock (EX_TEMPFAIL: try again later)",
    ExitStatus.INTERNAL: "internal error (a bug: the message names a traceback file)",
    ExitStatus.INTERRUPTED: "interrupted (Ctrl-C, SIGTERM); finished hosts are kept in a partial run",
}

OK = ExitStatus.OK
FINDINGS_FAIL = ExitStatus.FINDINGS_FAIL
USAGE = ExitStatus.USAGE
HALF_READABLE = ExitStatus.HALF_READABLE
HOSTS_FAILED = ExitStatus.HOSTS_FAILED
OS_LIMIT = ExitStatus.OS_LIMIT
RESULTS_UNWRITABLE = ExitStatus.RESULTS_UNWRITABLE
LOCKED = ExitStatus.LOCKED
INTERNAL = ExitStatus.INTERNAL
INTERRUPTED = ExitStatus.INTERRUPTED

TABLE = "exit codes:\n" + "\n".join(f"  {int(code):<4} {text}" for code, text in MEANING.items())


def for_fleet(fleet: FleetResult) -> ExitStatus:
    code = 0
    if fleet.summary.findings.get("fail", 0):
        code |= FINDINGS_FAIL
    if fleet.summary.hosts_failed:
        code |= HOSTS_FAILED
    return ExitStatus(code)
