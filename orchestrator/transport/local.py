"""Local transport: the command runs here under `/bin/sh -c`, in its own process group.

Same contract as SSH: stdin is written then closed, stdout/stderr are read together with the same
caps, and at the deadline (or past the stdout cap) the whole process group is killed, so a probe
that forked children cannot leave them behind.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from typing import IO

from orchestrator.inventory.model import Host
from orchestrator.transport.base import (
    CapturedOutput,
    CommandClock,
    CommandResult,
    TransportCapabilities,
    TransportOptions,
)

READ_CHUNK = 65536


class LocalTransport:
    capabilities = TransportCapabilities(pipes_to_interpreter=True, runs_as_controller=True)

    def __init__(self, host: Host | None = None, options: TransportOptions | None = None):
        self.host = host
        self.options = options or TransportOptions()

    # run(first_output=S): the first stdout byte must arrive within S seconds, else the command is
    # timed out then (the runner asks it of a bundle, which announces itself at once); with
    # clock_on_host, `timeout` counts from that first byte (base.CommandClock).
    def run(
        self, command: str, stdin: bytes = b"", timeout: float | None = None, *, deadline: float | None = None,
        first_output: float | None = None, clock_on_host: bool = False,
        on_output: Callable[[bytes], None] | None = None,
    ) -> CommandResult:
        """Run `command` under /bin/sh with `stdin`; killed at `timeout` s or the monotonic `deadline`
        (or at `first_output` s when stdout is still empty then).  `on_output`: called with each
        piece of stdout as it arrives."""
        limit = self.options.command_timeout if timeout is None else timeout
        started = time.monotonic()
        clock = CommandClock(started, max(limit, 0.0), first_output, on_host=clock_on_host, reach=0.0, hard=deadline)
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, killed as one at the deadline
            close_fds=True,
        )
        self._proc: subprocess.Popen[bytes] | None = proc
        clock.reached(time.monotonic())
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        got = CapturedOutput(self.options.max_output, self.options.max_stderr)
        sel = selectors.DefaultSelector()
        try:
            open_outputs = _exchange(proc, sel, stdin, clock, got, on_output)
            # outputs still open at the deadline: the command (or a child holding them) overran
            timed_out = self._settle(proc, clock, open_outputs > 0 and not got.out_trunc, got.out_trunc)
        finally:
            sel.close()
            for f in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    f.close()
            if proc.poll() is None:
                self._stop(proc)
                proc.wait()
        killed = timed_out or got.out_trunc
        return got.result(None if killed else proc.returncode, time.monotonic() - started, timed_out)

    def _settle(self, proc: subprocess.Popen[bytes], clock: CommandClock, timed_out: bool, out_trunc: bool) -> bool:
        """Wait for the command to exit (what is left of its time), or stop it; whether it timed out."""
        if out_trunc or timed_out:
            self._stop(proc)
        else:
            try:
                proc.wait(timeout=max(0.0, clock.left(time.monotonic())))
            except subprocess.TimeoutExpired:
                timed_out = True
                self._stop(proc)
        proc.wait()
        return timed_out

    def close(self) -> None:
        """Stop a command still running (Ctrl-C closes transports from another thread)."""
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            self._stop(proc)

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        """End a command this transport started (a deadline, the output cap, close): its whole
        process group, so a probe that forked children leaves none behind."""
        _kill_group(proc)

    def __enter__(self) -> LocalTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _exchange(proc: subprocess.Popen[bytes], sel: selectors.BaseSelector, stdin: bytes, clock: CommandClock,
              got: CapturedOutput, on_output: Callable[[bytes], None] | None) -> int:
    """Feed `stdin` and read stdout/stderr into `got` until both close, the clock runs out or stdout
    passes its cap; how many of the two outputs are still open."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    pending = memoryview(stdin)
    if pending:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    open_outputs = 2
    while open_outputs and not got.out_trunc:
        remaining = clock.left(time.monotonic())
        if remaining <= 0:
            break
        for key, _ in sel.select(timeout=remaining):
            f = key.fileobj
            if f is proc.stdin:
                pending = _write_some(proc.stdin, pending, sel)
                continue
            data = os.read(key.fd, READ_CHUNK)
            if not data:
                sel.unregister(f)
                open_outputs -= 1
            elif f is proc.stdout:
                clock.output(time.monotonic())
                if on_output is not None:
                    on_output(data)
                got.add_stdout(data)
                if got.out_trunc:
                    break
            else:
                got.add_stderr(data)
    return open_outputs


def _write_some(pipe: IO[bytes], pending: memoryview, sel: selectors.BaseSelector) -> memoryview:
    """One non-blocking write of stdin; the pipe is closed once all is written (or the command
    stopped reading).  What is still to write."""
    try:
        n = os.write(pipe.fileno(), pending[:READ_CHUNK])
        pending = pending[n:]
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        pending = pending[:0]  # the command stopped reading: fine
    if not pending:
        sel.unregister(pipe)
        pipe.close()
    return pending
