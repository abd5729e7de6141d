"""Machine-readable outputs of a run for cron, Prometheus, CI and the next automation.

Each module is pure (fleet.json dict in, text or dict out) plus one atomic writer:
`prometheus` (textfile collector), `junit` (CI), `ansible_inventory` (dynamic inventory JSON),
`tabular` (csv/yaml/json of the hosts and findings tables).  Facts are read only through
`outputs.facts`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, text: str, mode: int = 0o644) -> Path:
    """Write `text` so a reader (node_exporter, a CI job) sees the old file or the new one, never half.

    The temp file sits in the target's directory so the rename stays on one filesystem; its mode is
    set explicitly because mkstemp creates 0600 files the collector could not read.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
