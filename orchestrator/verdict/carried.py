"""Stored host records read back for the fleet-wide steps (`probe merge`), in worker processes.

Each record is decoded once, by one worker, into what the fleet-wide steps read of its host
(judge.stored_verdict) and where its text sits for the merged fleet.json (store/carry.py); the
workers hand both back through a file each, in the records' order.  Decoding and checking the
types of a stored record is most of a merge's work, and it is the same work for every record.
"""

from __future__ import annotations

import functools
import gc
import pickle
from collections.abc import Iterator
from pathlib import Path

from orchestrator.store.carry import Carrier
from orchestrator.store.spool import Body
from orchestrator.verdict.judge import HostVerdict, stored_verdict
from orchestrator.verdict.parallel import in_workers, slices
from orchestrator.verdict.result import HostTable

Carried = tuple[HostVerdict, Body]


def carried_verdicts(hosts: HostTable, workers: int, carrier: Carrier) -> list[Carried]:
    """(verdict, where its text sits) of every record of `hosts`, in their order, decoded in
    `workers` forked processes (1: here).  A worker that fails: the records are read here instead,
    which raises what the worker met."""
    if workers > 1:
        got = _in_workers(hosts, workers, carrier)
        if got is not None:
            return got
    return list(_carried(hosts, 0, len(hosts), carrier))


def _carried(hosts: HostTable, start: int, stop: int, carrier: Carrier) -> Iterator[Carried]:
    for rec, body in hosts.carried(start, stop):
        yield stored_verdict(dict(rec), []), body or carrier.body(rec)


def _in_workers(hosts: HostTable, workers: int, carrier: Carrier) -> list[Carried] | None:
    directory = carrier.directory()
    outs = [directory / f"verdicts{i}.pickle" for i in range(workers)]
    gc.freeze()  # the collector would walk (and so copy into each worker) every object the parent holds
    try:
        ok = in_workers([functools.partial(_carry_to, hosts, a, b, carrier.worker(i), out)
                         for i, (out, (a, b)) in enumerate(zip(outs, slices(len(hosts), workers)))])
    finally:
        gc.unfreeze()
    if not ok:
        return None
    return [item for out in outs for item in _read(out)]


def _carry_to(hosts: HostTable, start: int, stop: int, carrier: Carrier, out: Path) -> None:
    """A worker's share: each record's verdict and where its text sits, pickled to `out` in order."""
    gc.disable()  # records are trees: reference counting frees them
    with open(out, "wb", buffering=1 << 20) as f:
        for item in _carried(hosts, start, stop, carrier):
            pickle.dump(item, f, protocol=pickle.HIGHEST_PROTOCOL)


def _read(path: Path) -> list[Carried]:
    out: list[Carried] = []
    with open(path, "rb") as f:
        while True:
            try:
                out.append(pickle.load(f))
            except EOFError:
                break
    path.unlink()
    return out
