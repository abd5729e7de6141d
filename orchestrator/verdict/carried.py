"""Stored host records read back for the fleet-wide steps (`probe merge`), in worker processes.

Each record is decoded once, by one worker, into what the fleet-wide steps read of its host
(judge.stored_verdict) and where its text sits for the merged fleet.json (store/carry.py); the
workers hand both back through a file each, in the records' order.  Decoding and checking the
types of a stored record is most of a merge's work, and it is the same work for every record.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Iterator
from pathlib import Path

from orchestrator.files.records import Body
from orchestrator.store.carry import Carrier
from orchestrator.verdict import handoff
from orchestrator.verdict.judge import HostVerdict, stored_verdict
from orchestrator.verdict.parallel import kill_all, slices, start_workers, wait_workers
from orchestrator.verdict.result import HostTable

Carried = tuple[HostVerdict, Body]


class CarriedPart:
    """(verdict, where its text sits) of every record of a stored run's hosts, in their order:
    decoded in `workers` forked processes (1: here), started when made and collected by result(),
    so the caller can work on the part before it meanwhile (`probe merge` judges each part's own
    fleet-wide steps while the next part is decoded).  A worker that fails: result() reads the
    records here instead, which raises what the worker met.  Workers not collected (the merge was
    refused half-way) are stopped by stop()."""

    def __init__(self, hosts: HostTable, workers: int, carrier: Carrier,
                 reader: handoff.Reader | None = None) -> None:
        self._hosts = hosts
        self._reader = reader or handoff.Reader()  # one for all the parts a merge holds together
        self._carrier = carrier
        self._outs: list[Path] = []
        self._pids: list[int] | None = None
        if workers > 1:
            directory = carrier.directory()
            jobs = []
            for a, b in slices(len(hosts), workers):
                mine = carrier.worker()
                self._outs.append(directory / f"verdicts-{mine.name}.pickle")
                jobs.append(functools.partial(_carry_to, hosts, a, b, mine, self._outs[-1]))
            gc.freeze()  # the collector would walk (and so copy into each worker) every object the parent holds
            try:
                self._pids = start_workers(jobs)
            finally:
                gc.unfreeze()

    def result(self) -> list[Carried]:
        pids, self._pids = self._pids, None
        if pids is not None and wait_workers(pids):
            return [item for out in self._outs for item in _read(out, self._reader)]
        return list(_carried(self._hosts, 0, len(self._hosts), self._carrier))

    def stop(self) -> None:
        """Stop the workers if they still run (their results are not wanted)."""
        if self._pids is not None:
            kill_all(self._pids)
            self._pids = None


def _carried(hosts: HostTable, start: int, stop: int, carrier: Carrier) -> Iterator[Carried]:
    for rec, body in hosts.carried(start, stop):
        yield stored_verdict(dict(rec), []), body or carrier.body(rec)


def _carry_to(hosts: HostTable, start: int, stop: int, carrier: Carrier, out: Path) -> None:
    """A worker's share: each record's verdict and where its text sits, pickled to `out` in order."""
    gc.disable()  # records are trees: reference counting frees them
    with open(out, "wb", buffering=1 << 20) as f:
        for item in _carried(hosts, start, stop, carrier):
            handoff.dump(item, f)


def _read(path: Path, reader: handoff.Reader) -> list[Carried]:
    with open(path, "rb") as f:
        out: list[Carried] = list(reader.load_all(f))
    path.unlink()
    return out
