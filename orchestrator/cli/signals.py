"""SIGINT and SIGTERM in the `probe` command: an interrupt (KeyboardInterrupt, which every command
turns into "what finished is kept" and exit 130) until its exit status is decided, and nothing
after.  Small and importing nothing heavy: the console command installs it before it imports the
rest of fleetprobe (cli/entry.py), so a signal during those imports is an interrupt as well."""

from __future__ import annotations

import signal
import threading
from typing import Any

HELD = (signal.SIGINT, signal.SIGTERM)


class _Gate:
    """Whether an interrupt may still change the command's exit status: once it is decided, a
    signal that arrives, or one already pending whose handler Python runs at a later bytecode,
    changes nothing."""

    open = True


def _raise_interrupt(signum: int, frame: Any) -> None:
    if _Gate.open:
        raise KeyboardInterrupt()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def as_interrupts(whole_process: bool) -> dict[int, Any]:
    """SIGTERM (a scheduler's or an operator's kill) stops a command as Ctrl-C does, at whatever
    point it arrives; where the command is the whole process Ctrl-C passes the same gate.  Returns
    the handlers it replaced, for a caller in a process of its own to put back."""
    if not _main_thread():
        return {}
    _Gate.open = True
    held = HELD if whole_process else (signal.SIGTERM,)
    replaced: dict[int, Any] = {s: signal.getsignal(s) for s in held}
    for s in held:
        signal.signal(s, _raise_interrupt)
    return replaced


def decided(whole_process: bool) -> None:
    """The command's exit status is decided.  Where the command is the whole process, SIGINT and
    SIGTERM are ignored from here to its exit, in every thread: the interpreter shutting down puts
    a signal's default action back where Python had a handler for it, but leaves one that is
    ignored ignored, and a finished command must not die of a signal (status -15)."""
    if not whole_process or not _main_thread():
        return
    _Gate.open = False
    for s in HELD:
        signal.signal(s, signal.SIG_IGN)
    _forget_handled_interrupt()


def _forget_handled_interrupt() -> None:
    """CPython runs `exec` of a string (dataclasses and namedtuple write their methods so, on import
    and after) the way it runs a script, and marks an interrupt raised inside one as never handled,
    even where the command handled it.  Under `python -m` the interpreter then ends itself with
    SIGINT (status -2) after the command has exited 130.  The mark is cleared as each such exec
    starts, and the gate is closed, so nothing sets it again."""
    exec("")


def restore(replaced: dict[int, Any]) -> None:
    """Put back handlers `as_interrupts` replaced (a caller of the command in its own process)."""
    if _main_thread():
        for s, handler in replaced.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
