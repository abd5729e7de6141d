"""Host records of stored runs carried into a new run (`probe merge`), as their stored text.

A merged run keeps each host's record as its own run judged it; only the keys at its end that the
fleet-wide steps decide (spool.LATE_KEYS: fingerprint, class, health) are decided again over the
merged fleet.  So a record is decoded once, for those steps, and its text is copied from the part's
fleet.json up to those keys (SpooledRecords.body); the merged fleet.json is written from the parts'
files and the new keys, never holding more than one record's text.  A record whose text is not in
that form (a schema-1 or -2 file, a record conformed as it was read, a file without its index) is
encoded once more into a spool file of the carrier's own.  In schema 3 (store/members.py) the
fleet-wide keys are a gzip member of their own, so the record's other member is copied as it is
and only the keys' member is written anew.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.files.records import Body
from orchestrator.store import members
from orchestrator.store.fleet_file import record_text
from orchestrator.store.spool import LATE_KEYS, SpooledRecords


class Carrier:
    """Where each carried record's text sits.  A context: a spool not handed over to records() by
    its end (the merge was refused half-way) is removed."""

    def __init__(self, parent: Path, file: str = "part0.json") -> None:
        self._parent = parent  # where the spool is made, when a record has to be encoded again
        self._dir: Path | None = None
        self._file = file
        self._spool: int | None = None
        self._size = 0
        self._workers = 0

    def directory(self) -> Path:
        """The spool directory, made now if it was not."""
        if self._dir is None:
            self._parent.mkdir(parents=True, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix=".merge-", dir=self._parent))
        return self._dir

    @property
    def name(self) -> str:
        """Its spool file's name without the suffix (unique within the spool)."""
        return self._file.rsplit(".", 1)[0]

    def worker(self) -> Carrier:
        """A carrier for a worker process: a file of its own in this spool, which this carrier owns
        (each worker of each part, so workers of two parts can run at once)."""
        self._workers += 1
        mine = Carrier(self._parent, f"worker{self._workers}.json")
        mine._dir = self.directory()
        return mine

    def __enter__(self) -> Carrier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def close(self) -> None:
        """Close its spool file, if it wrote one (a worker's, when its share is written)."""
        if self._spool is not None:
            os.close(self._spool)
            self._spool = None

    def body(self, rec: Mapping[str, Any]) -> Body:
        """Where the text of `rec` without its fleet-wide keys sits, once written to the spool."""
        kept = {k: v for k, v in rec.items() if k not in LATE_KEYS}
        data = members.pack(record_text(kept)[:-1])  # open: the new keys and "}" follow
        path = self.directory() / self._file
        if self._spool is None:
            self._spool = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        offset = self._size
        view = memoryview(data)
        while view:
            view = view[os.write(self._spool, view):]
        self._size += len(data)
        return path, offset, len(data)

    def records(self, bodies: list[tuple[str, Body]]) -> SpooledRecords:
        """The records of the new run, in the order given: fleet.json copies their texts."""
        self.close()
        out = SpooledRecords(self._dir, version=members.SCHEMA_VERSION, cut=True)
        self._dir = None  # the records own the spool now
        for name, (path, offset, length) in bodies:
            out.add(path, offset, length, name)
        return out
