"""Atomic file writes: a reader (node_exporter, a CI job, `probe show`) sees the old file or the
new one, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes(path: str | Path, data: bytes, mode: int = 0o644) -> Path:
    """The temp file sits in the target's directory so the rename stays on one filesystem; its mode
    is set explicitly because mkstemp creates 0600 files a collector could not read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
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


def write_text(path: str | Path, text: str, mode: int = 0o644) -> Path:
    if not isinstance(text, str):
        raise TypeError(f"write_text needs str, got {type(text).__name__}")
    return write_bytes(path, text.encode("utf-8"), mode)


def write_json(path: str | Path, doc: Any) -> Path:
    return write_text(path, json.dumps(doc, indent=1, default=str) + "\n")
