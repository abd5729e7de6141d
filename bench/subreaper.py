#!/usr/bin/env python3
"""Run one command (the fleet's sshd) as a child subreaper that reaps everything below it.

    python3 bench/subreaper.py sshd -D -f CONFIG

Why: the benchmark process is itself a subreaper (so Ansible's ControlPersist ssh masters stay in
the measured tree) and it used to be sshd's parent too.  sshd session processes and the probes'
python3 that lose their parent were then reparented to the benchmark and reaped there, so the
*hosts'* CPU was counted as the tool's controller CPU.  Under this wrapper such orphans come here
instead (the nearest subreaper ancestor), and every `wait` here adds their CPU to this process's
cutime/cstime in /proc/<pid>/stat.  Host-side CPU of the simulated fleet is then

    sshd listener: utime + stime + cutime + cstime   (itself and the sessions it waited for)
  + this wrapper:  cutime + cstime                   (orphans reaped here)

which the benchmark reads from /proc around every run.  The wrapper prints the command's pid on
its first stdout line, forwards SIGTERM/SIGINT/SIGHUP to it, keeps reaping until nothing is left
below it, and exits with the command's status.  Standard library only; no busy waiting (it sleeps
in wait()).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: subreaper.py COMMAND [ARGS...]", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"subreaper.py: prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}",
              file=sys.stderr)
        return 1
    child = os.fork()
    if child == 0:
        os.dup2(2, 1)  # our stdout is the pipe our parent reads the pid from, read once: not the command's
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"subreaper.py: cannot run {argv[0]}: {e}", file=sys.stderr)
        os._exit(127)
    print(child, flush=True)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    status = 0
    while True:
        try:
            pid, st = os.wait()  # any child: the command, or an orphan reparented to us
        except ChildProcessError:
            break  # nothing left below us
        if pid == child:
            status = os.waitstatus_to_exitcode(st)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
