"""The controller's file descriptors: how many a run may use, and what to say when they run out.

Each host in flight holds a few descriptors (its SSH socket, or a local subprocess' pipes, plus
the files its results are written to), so `--forks` hosts at once need several times that many.
A soft limit below what the hard limit allows is raised at start, as Go's runtime does for every
program since 1.19: the soft limit of 1,024 is a relic of select(), which nothing here uses.  Where
even the hard limit is too low, fewer hosts are probed at once, and the run says so, rather than
hosts failing with errors that do not name the cause (getpwuid() out of descriptors reports the
user as unknown).
"""

from __future__ import annotations

import errno
import os
import resource

# Descriptors one host in flight may hold at once: the SSH socket or a subprocess' three pipes,
# its raw envelope being written, the known_hosts/config files read while connecting.
PER_HOST = 6
# What the controller holds besides the hosts: the interpreter's own, the run directory, the lock,
# the judging workers' pipes, the terminal.
RESERVED = 48
_UPPER = 65_536  # never ask for more than this, whatever the hard limit (some say "unlimited")


def raise_soft_limit() -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard limit; the soft limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _UPPER if hard == resource.RLIM_INFINITY else min(hard, _UPPER)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass  # a container that forbids it: the forks are fitted to the soft limit instead
    return _UPPER if soft == resource.RLIM_INFINITY else soft


def forks_within(forks: int, limit: int) -> int:
    """How many hosts may be probed at once under a descriptor limit of `limit` (at least one)."""
    return max(1, min(forks, (limit - RESERVED) // PER_HOST))


def limit_now() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _UPPER if soft == resource.RLIM_INFINITY else soft


def exhausted() -> bool:
    """Can this process open no more files?"""
    try:
        os.close(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    except OSError as e:
        return e.errno in (errno.EMFILE, errno.ENFILE)
    return False


def is_exhaustion(e: BaseException) -> bool:
    """Did `e` come of running out of descriptors (said so, or hidden behind another error)?"""
    return (isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE)) or exhausted()


def out_of_descriptors() -> str:
    return (f"too many open files (the controller's descriptor limit, ulimit -n {limit_now()}, is used up); "
            "lower --forks or raise the limit")
