"""Ctrl-C in the middle of a real `probe run`: start it, wait until the run has reached the point
the test needs, send SIGINT, and collect what it said (the process is killed if it outlives that)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable


def interrupt_when(proc: subprocess.Popen[str], ready: Callable[[], bool], settle_s: float = 0.5,
                   wait_s: float = 30.0, sig: int = signal.SIGINT, exit_s: float = 30.0) -> tuple[int, str]:
    """(exit status, stderr) of `proc` (text mode, stderr piped) after `sig` (SIGINT: Ctrl-C), sent
    `settle_s` after `ready()` first holds (or after `wait_s` if it never does); killed if it is
    still there `exit_s` later."""
    try:
        deadline = time.monotonic() + wait_s
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(settle_s)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=exit_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def catches_sigterm(pid: int) -> bool:
    """Has the process installed its SIGTERM handler (cli/main.py does so first thing)?  Before
    it has, SIGTERM kills the interpreter (143), which says nothing of how fleetprobe stops."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
    except OSError:
        return False
    caught = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def terminate_at_work(cmd: list[str], env: dict[str, str], cwd: str, settle_s: float = 0.3,
                      ready: Callable[[], bool] | None = None) -> tuple[int, str]:
    """(exit status, stderr) of `cmd` sent SIGTERM `settle_s` after its handler is in place (and
    `ready()` holds, when given)."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return interrupt_when(proc, lambda: (catches_sigterm(proc.pid) and (ready is None or ready()))
                          or proc.poll() is not None, settle_s, wait_s=60, sig=signal.SIGTERM, exit_s=120)
