"""Ctrl-C in the middle of a real `probe run`: start it, wait until the run has reached the point
the test needs, send SIGINT, and collect what it said (the process is killed if it outlives that)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable


def interrupt_when(proc: subprocess.Popen[str], ready: Callable[[], bool], settle_s: float = 0.5,
                   wait_s: float = 30.0) -> tuple[int, str]:
    """(exit status, stderr) of `proc` (text mode, stderr piped) after SIGINT, sent `settle_s` after
    `ready()` first holds (or after `wait_s` if it never does)."""
    try:
        deadline = time.monotonic() + wait_s
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(settle_s)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err
