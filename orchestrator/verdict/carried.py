"""Stored host records read back for the fleet-wide steps (`probe merge`), in worker processes.

Each record is decoded once, by one worker, into what the fleet-wide steps read of its host
(judge.stored_verdict) and where its text sits for the merged fleet.json (store/carry.py); the
workers hand both back through a file each, in the records' order.  Decoding and checking the
types of a stored record is most of a merge's work, and it is the same work for every record.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
from pathlib import Path

from orchestrator.store.carry import Body, Carrier
from orchestrator.verdict.judge import HostVerdict, stored_verdict
from orchestrator.verdict.parallel import kill_all, slices
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
    return list(_carry(hosts, 0, len(hosts), carrier))


def _carry(hosts: HostTable, start: int, stop: int, carrier: Carrier) -> list[Carried]:
    return [(stored_verdict(dict(rec), []), body or carrier.body(rec)) for rec, body in hosts.carried(start, stop)]


def _in_workers(hosts: HostTable, workers: int, carrier: Carrier) -> list[Carried] | None:
    directory = carrier.directory()
    outs = [directory / f"verdicts{i}.pickle" for i in range(workers)]
    pids: list[int] = []
    ok = True
    sys.stdout.flush()
    sys.stderr.flush()
    # the collector would walk (and so copy into each worker) every object the parent holds
    gc.freeze()
    try:
        for i, (out, (a, b)) in enumerate(zip(outs, slices(len(hosts), workers))):
            try:
                pid = os.fork()
            except OSError:
                return None
            if pid == 0:  # the worker: never returns into the parent's code
                code = 1
                try:
                    gc.disable()  # records are trees: reference counting frees them
                    mine = carrier.worker(i)
                    with open(out, "wb", buffering=1 << 20) as f:
                        for rec, body in hosts.carried(a, b):
                            pickle.dump((stored_verdict(dict(rec), []), body or mine.body(rec)), f,
                                        protocol=pickle.HIGHEST_PROTOCOL)
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        while pids and ok:
            _, status = os.waitpid(pids[0], 0)
            pids.pop(0)
            ok = os.waitstatus_to_exitcode(status) == 0
    finally:
        kill_all(pids)  # a worker failed, or Ctrl-C while waiting: none outlives this
        gc.unfreeze()
    if not ok:
        return None
    return [item for out in outs for item in _read(out)]


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
