"""`probe` on a real pseudo-terminal, and what a terminal shows of its bytes.

Where a tty is the point (the progress line, colour, the columns chosen for the terminal's width),
the command is run with stdin, stdout and stderr on the slave side of a pty, as in a terminal
window; `screen` replays the bytes as a terminal draws them (carriage return, erase to the end of
the line, colour codes taking no room), so a test reads lines as the operator sees them."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from dataclasses import dataclass

from tests.support.hostile import ROOT_DIR, cli_env

_SGR = re.compile(r"\x1b\[[0-9;]*m")
_ERASE_LINE = "\x1b[K"


@dataclass
class TtyRun:
    code: int
    raw: str  # every byte the command wrote to the terminal, stdout and stderr interleaved as written

    @property
    def lines(self) -> list[str]:
        return screen(self.raw)


def run_on_tty(args: list[str], columns: int = 120, timeout: float = 120, **env: str) -> TtyRun:
    """`python -m orchestrator <args>` with a pty of `columns` columns as its terminal."""
    master, slave = pty.openpty()
    os.set_blocking(master, True)
    environ = cli_env(**{"COLUMNS": str(columns), "TERM": "xterm-256color", **env})
    for name in [k for k in environ if k in ("NO_COLOR", "FORCE_COLOR") and k not in env]:
        del environ[name]  # the runner's own colour settings are not the test's
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=environ, cwd=str(ROOT_DIR), close_fds=True)
    os.close(slave)
    out = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every slave descriptor is closed, the command has ended
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    code = proc.wait(timeout=timeout)
    return TtyRun(code, out.decode("utf-8", "replace"))


def screen(raw: str) -> list[str]:
    """The lines a terminal shows for `raw`: `\\r` goes back to the line's start, later characters
    overwrite earlier ones, `ESC [ K` erases to the end of the line, colour codes take no room."""
    text = _SGR.sub("", raw).replace("\r\n", "\n")
    lines: list[str] = []
    line: list[str] = []
    col = i = 0
    while i < len(text):
        if text.startswith(_ERASE_LINE, i):
            del line[col:]
            i += len(_ERASE_LINE)
            continue
        ch = text[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("".join(line))
            line, col = [], 0
        else:
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
        i += 1
    if line:
        lines.append("".join(line))
    return lines
