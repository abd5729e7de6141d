"""Reading a file a user or another program handed us, within a bound, and only if it is a file.

Every road in that reads a file (text evidence, bundle documents, Ansible job events, a --limit
list, stored runs) goes through `read_regular`: a FIFO given as a file would block for ever, a
device never end, a file of gigabytes would hold the controller's memory several times over.  So
the file is opened without blocking, must be a regular file once open (no race with a swap), and
is read to at most `limit` bytes; beyond it the caller learns the file is too big, never reads it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO


class UnreadableInput(OSError):
    """A file that is not one, too big, or unreadable; str() is the message a user acts on."""

    def __init__(self, path: str | Path, why: str, err: int = errno.EINVAL) -> None:
        super().__init__(err, why)
        self.path = str(path)
        self.why = why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def unread(name: str, e: UnreadableInput) -> str:
    """Why a stored file `name` was not read, in a listing's words: not there, or what it is."""
    return f"no {name}" if e.errno == errno.ENOENT else f"{name} unreadable: {e.why}"


def _regular_fd(path: str | Path, what: str) -> int:
    """A descriptor of `path` opened for reading, a regular file once open (no race with a swap):
    opened without blocking, so a FIFO does not hold the caller before it is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UnreadableInput(path, f"no such {what}", errno.ENOENT) from None
    except OSError as e:
        raise UnreadableInput(path, f"cannot read it: {e.strerror or e}", e.errno or errno.EIO) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UnreadableInput(path, f"a directory, not a {what}", errno.EISDIR)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableInput(path, f"not a regular file (a FIFO, socket or device); give a {what}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str | Path, what: str = "file") -> BinaryIO:
    """`path` open for reading as a binary file, when it is a regular file (UnreadableInput
    otherwise): for a reader that seeks in a large file instead of reading it whole."""
    fd = _regular_fd(path, what)
    try:
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes."""
    fd = _regular_fd(path, what)
    try:
        st = os.fstat(fd)
        if st.st_size > limit:
            raise UnreadableInput(path, f"{st.st_size:,} bytes, over the {limit:,} a {what} may have", errno.EFBIG)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UnreadableInput(path, f"grew past the {limit:,} bytes a {what} may have while it was read",
                                  errno.EFBIG)
        return b"".join(chunks)
    except UnreadableInput:
        raise
    except OSError as e:
        raise UnreadableInput(path, f"cannot read it: {e.strerror or e}", e.errno or errno.EIO) from None
    finally:
        os.close(fd)


def is_regular(path: str | Path) -> bool:
    """Whether `path` is a regular file (links followed), without opening it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False
