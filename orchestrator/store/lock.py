"""One run at a time per results directory, so a slow nightly run and the next cron start never overlap.

`fcntl.flock` on `<results>/.fleetprobe.lock`: the kernel drops the lock when the holder exits, even
on SIGKILL or a crash, so there is no stale lock to clean up by hand.  The file itself is never
deleted (deleting a flocked file lets a third process lock a new inode while the second still waits
on the old one); it only carries who holds it, for the message the loser prints.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

LOCK_NAME = ".fleetprobe.lock"


class LockHeld(RuntimeError):
    """Another run holds the results directory; the message names its pid and start time."""

    def __init__(self, message: str, pid: int | None = None, started: str | None = None) -> None:
        super().__init__(message)
        self.pid = pid
        self.started = started


class UnsafeLock(OSError):
    """The lock path is not a lock file of ours (a link, a device, another file): nothing was written."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EPERM, message)


def _foreign(fd: int) -> str:
    """Why the open lock file is not one fleetprobe may truncate, or ''."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink != 1:
        return "has other names (hard links)"
    if st.st_uid != os.geteuid():
        return "belongs to another user"
    if st.st_size > 4096:
        return "is not a lock file (too large)"
    if st.st_size:
        try:
            info = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        except (OSError, ValueError):
            return "is not a lock file (not what fleetprobe writes)"
        if not isinstance(info, dict) or not {"pid", "started"} <= set(info):
            return "is not a lock file (not what fleetprobe writes)"
    return ""


class RunLock:
    """Context manager; `acquire()` never blocks: it locks or raises LockHeld."""

    def __init__(self, results_dir: str | Path) -> None:
        self.results_dir = Path(results_dir)
        self.path = self.results_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        self.results_dir.mkdir(parents=True, exist_ok=True)
        try:
            # O_NOFOLLOW: a planted `.fleetprobe.lock -> /etc/shadow` is refused, never opened (and
            # as root truncated); O_NONBLOCK: a planted FIFO does not hang the run.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafeLock(f"{self.path} is a symbolic link; fleetprobe does not lock or write through it. "
                                 "Remove it (or use another results directory).") from None
            raise
        try:
            why = _foreign(fd)
            if why:
                raise UnsafeLock(f"{self.path} {why}; fleetprobe does not truncate a file it did not write. "
                                 "Remove it (or use another results directory).")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise _held(self.path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        info = {"pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "host": socket.gethostname(), "argv": sys.argv[:8]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # the next reader must not name a process that is gone
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode("utf-8", "replace") or "{}")
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}  # the holder is between truncate and write: we know it exists, not who


def _held(path: Path, holder: dict[str, Any]) -> LockHeld:
    pid = holder.get("pid") if isinstance(holder.get("pid"), int) else None
    started = holder.get("started") if isinstance(holder.get("started"), str) else None
    who = f"pid {pid}" if pid is not None else "another process"
    if holder.get("host") and holder.get("host") != socket.gethostname():
        who += f" on {holder['host']}"
    since = f", started {started}" if started else ""
    return LockHeld(
        f"another fleetprobe run holds {path} ({who}{since}); this run did not start. "
        f"Wait for it to finish, or point this run at another results directory.",
        pid=pid, started=started,
    )
