"""Exit codes of `probe`, one table for the README and --help."""

OK = 0  # every host answered every probe, no finding of severity fail
FINDINGS_FAIL = 1  # at least one finding of severity fail
USAGE = 2  # bad command line, inventory, playbook or expectation: nothing was run
HOSTS_FAILED = 4  # at least one host unreachable, timed out, or a probe failed / sent invalid output
# 1 and 4 combine: 5 = fail findings and host problems.
RESULTS_UNWRITABLE = 73  # EX_CANTCREAT: the results could not be written (disk full, read-only); run stopped
LOCKED = 75  # EX_TEMPFAIL: another run holds the results directory lock; try again later
INTERNAL = 70  # a bug in fleetprobe: please report it with the traceback file named in the message
INTERRUPTED = 130  # Ctrl-C / SIGTERM: finished hosts were kept in a partial run

TABLE = """exit codes:
  0    all hosts answered, no finding of severity fail
  1    at least one finding of severity fail
  2    usage error (command line, inventory, playbook, expectations): nothing was run
  4    at least one host unreachable / timeout / failed / invalid output
  5    1 and 4 together
  73   the results could not be written (disk full, read-only); the run was stopped
  75   another run holds the results-directory lock (EX_TEMPFAIL: try later)
  70   internal error (a bug: the message names a traceback file)
  130  interrupted (Ctrl-C, SIGTERM); finished hosts are kept in a partial run"""


def for_fleet(fleet: dict) -> int:
    code = OK
    if fleet["summary"]["findings"].get("fail", 0):
        code |= FINDINGS_FAIL
    bad = {k: v for k, v in fleet["summary"]["outcomes"].items() if k not in ("ok", "skipped", "unsupported") and v}
    if bad:
        code |= HOSTS_FAILED
    return code
