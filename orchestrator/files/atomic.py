"""Replace a file atomically: a reader sees the old file or the new one, never half of one.

The one home of temp file + fsync + rename, below every layer that writes files: `store/atomic.py`
(run directories, outputs) and `transport/hostkeys.py` (known_hosts) both call `replace`."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

_BUFFER = 1 << 20


def _make_parent(path: Path) -> None:
    """The directory `path` goes in, made where missing; where a file stands in its way, the error
    names that file (mkdir alone says "File exists" about the directory it could not make, or "Not a
    directory" where the file is further up)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (path.parent, *path.parent.parents) if p.exists() and not p.is_dir()), path.parent)
        raise NotADirectoryError(errno.ENOTDIR, f"{blocker} is not a directory") from None


def create(path: Path, data: bytes, mode: int) -> Path:
    """A new file in a directory no reader looks into yet (a worker's staging directory, moved into
    place whole once complete): written where it goes, without the temp file and rename of
    `replace`.  FileExistsError when the file is already there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # as replace: the umask may have taken bits a collector needs
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return path


def replace(path: str | Path, fill: Callable[[IO[bytes]], object], mode: int, durable: bool = True) -> Path:
    """`fill` writes the new content into a temp file, which then replaces `path`.

    The temp file sits in the target's directory so the rename stays on one filesystem; its mode
    is set explicitly because mkstemp creates 0600 files a collector could not read.

    durable=False skips the fsync (the rename still makes the write atomic for readers): for the
    per-host raw files written on the run's hot path, where one fsync each cost 10-13 % of a
    500-host run; run.json and fleet.json stay durable."""
    path = Path(path)
    _make_parent(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb", buffering=_BUFFER) as f:
            fill(f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_output(path: str | Path, fill: Callable[[IO[bytes]], object], mode: int = 0o644) -> Path:
    """A file a user named for an output (--prometheus, --junit, --html, -o, a bundle).

    A regular file, or none yet, is replaced atomically.  A symbolic link stays a link: the file it
    points to is what is written (replaced atomically when it is a regular file), so a link into
    a collector's directory keeps working.  A character device or FIFO (`/dev/null`, `/dev/stdout`,
    a pipe a collector reads) is written through and never replaced: running as root, replacing
    /dev/null with a regular file breaks the machine.  A block device, directory or socket is
    refused: writing a report onto a disk is never what was meant.  Returns the path written."""
    path = Path(path)
    try:
        st = os.stat(path)  # through any link
    except (FileNotFoundError, NotADirectoryError):  # not there yet: replace() names what is in the way
        st = None
    if st is None or stat.S_ISREG(st.st_mode):
        return replace(os.path.realpath(path) if path.is_symlink() else path, fill, mode)
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return _write_through(path, fill)
    kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode) else \
        "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file"
    raise OSError(errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL,
                  f"{path} is {kind}; fleetprobe writes outputs to files, character devices and FIFOs only")


def _write_through(path: Path, fill: Callable[[IO[bytes]], object]) -> Path:
    # O_NONBLOCK: a FIFO nobody reads fails at once (ENXIO) instead of hanging the run
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, f"{path} is a FIFO nobody reads; nothing was written") from None
        raise
    os.set_blocking(fd, True)
    with os.fdopen(fd, "wb", buffering=_BUFFER) as f:
        fill(f)
    return path
