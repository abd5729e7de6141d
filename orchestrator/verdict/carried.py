"""Stored host records read back for the fleet-wide steps (`probe merge`), in worker processes.

Each record is decoded once, by one worker, into what the fleet-wide steps read of its host
(judge.stored_verdict) and where its text sits for the merged fleet.json (store/carry.py); the
workers hand both back through a file each, in the records' order.  Decoding and checking the
types of a stored record is most of a merge's work, and it is the same work for every record.

The workers are forked once, before the merge holds anything, and each part is sent to them by
its run directory: a worker forked afresh for each part from a parent that holds more with every
part (the verdicts of the parts before) wrote its own objects into the parent's half-free memory
pages, so each fork copied pages the parent held, and a 100-part merge's process tree was 2.5-3
times the parent's size.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, Pipe
from pathlib import Path

from orchestrator.files.records import Body
from orchestrator.store.carry import Carrier
from orchestrator.verdict import handoff
from orchestrator.verdict.judge import HostVerdict, stored_verdict
from orchestrator.verdict.parallel import kill_all, slices, start_workers, worker_count
from orchestrator.verdict.result import HostTable

Carried = tuple[HostVerdict, Body]
# a part's hosts as a worker reads them: the same function the parent read them with
PartReader = Callable[[Path], HostTable]


class Decoders:
    """The worker processes that decode the parts of one merge, started by the first part that is
    big enough to be worth them (worker_count) and stopped by close().  A part is decoded in all of
    them, each a slice of its records in order, while the caller works on the part before it; one
    that is too small for workers, or any part once a worker has failed, is read here instead."""

    def __init__(self, carrier: Carrier, read: PartReader, reader: handoff.Reader | None = None) -> None:
        self._carrier = carrier
        self._read = read
        self._reader = reader or handoff.Reader()  # one for all the parts a merge holds together
        self._pids: list[int] = []
        self._conns: list[Connection] = []
        self._broken = False
        self._pending: list[CarriedPart] = []  # parts sent to the workers, in the order sent

    def start(self, run_dir: Path, hosts: HostTable) -> CarriedPart:
        """`hosts` (the records of the run at `run_dir`, as `read` gives them) being decoded."""
        wanted = worker_count(len(hosts))
        if wanted > 1 and not self._pids and not self._broken:
            self._fork(wanted)
        part = CarriedPart(self, hosts, self._carrier)
        if wanted > 1 and self._pids and not self._broken:
            part.outs = self._send(run_dir, len(hosts))
            self._pending.append(part)
        return part

    def _fork(self, workers: int) -> None:
        ends = [Pipe() for _ in range(workers)]
        pids = start_workers([functools.partial(_serve, ends, i, self._read) for i in range(workers)])
        for _, theirs in ends:
            theirs.close()
        self._conns = [mine for mine, _ in ends]
        if pids is None:
            self._broken = True
            self._close_conns()
        else:
            self._pids = pids

    def _send(self, run_dir: Path, n: int) -> list[Path]:
        directory = self._carrier.directory()
        outs = []
        try:
            for conn, (a, b) in zip(self._conns, slices(n, len(self._conns))):
                mine = self._carrier.worker()
                outs.append(directory / f"verdicts-{mine.name}.pickle")
                conn.send((str(run_dir), a, b, mine, str(outs[-1])))
        except OSError:  # a worker is gone: this part and the ones after are read here
            self._fail()
        return outs

    def collect(self, part: CarriedPart) -> list[Carried] | None:
        """The part's records from the workers; None when a worker failed on it (or before)."""
        if part not in self._pending:
            return None
        # each worker answers its parts in the order they were sent
        while self._pending:
            first = self._pending.pop(0)
            ok = self._answers()
            if first is part:
                return [item for out in part.outs for item in _read(out, self._reader)] if ok else None
        return None

    def _answers(self) -> bool:
        if self._broken:
            return False
        try:
            ok = all([conn.recv() is True for conn in self._conns])
        except (EOFError, OSError):
            ok = False
        if not ok:
            self._fail()
        return ok

    def _fail(self) -> None:
        self._broken = True
        self.close()

    def close(self) -> None:
        """Stop the workers (between parts, or with parts of theirs unread: not wanted any more)."""
        kill_all(self._pids)
        self._pids = []
        self._close_conns()

    def _close_conns(self) -> None:
        for conn in self._conns:
            conn.close()
        self._conns = []

    def __enter__(self) -> Decoders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CarriedPart:
    """(verdict, where its text sits) of every record of a stored run's hosts, in their order, from
    the workers when they decoded it; read here otherwise, which raises what a worker met."""

    def __init__(self, decoders: Decoders, hosts: HostTable, carrier: Carrier) -> None:
        self._decoders = decoders
        self._hosts = hosts
        self._carrier = carrier
        self.outs: list[Path] = []

    def result(self) -> list[Carried]:
        got = self._decoders.collect(self)
        if got is not None:
            return got
        for out in self.outs:  # what a worker wrote before it failed
            out.unlink(missing_ok=True)
        return list(_carried(self._hosts, 0, len(self._hosts), self._carrier))


def _carried(hosts: HostTable, start: int, stop: int, carrier: Carrier) -> Iterator[Carried]:
    for rec, body in hosts.carried(start, stop):
        yield stored_verdict(dict(rec), []), body or carrier.body(rec)


def _serve(ends: list[tuple[Connection, Connection]], me: int, read: PartReader) -> None:
    """Worker `me`: for each part sent, its slice's verdicts and where their texts sit, pickled to
    the file named, in order; True back when done, False when the part could not be read (the
    parent reads it again, and raises what was met).  Ends when the parent closes its end."""
    for i, (parents, theirs) in enumerate(ends):  # a pipe's end held open elsewhere hides its EOF
        parents.close()
        if i != me:
            theirs.close()
    conn = ends[me][1]
    gc.disable()  # records are trees: reference counting frees them
    held: tuple[str, HostTable] | None = None
    while True:
        try:
            run_dir, start, stop, carrier, out = conn.recv()
        except EOFError:
            return
        try:
            if held is None or held[0] != run_dir:
                held = None  # the part before, freed before the next is read
                held = run_dir, read(Path(run_dir))
            with open(out, "wb", buffering=1 << 20) as f:
                for item in _carried(held[1], start, stop, carrier):
                    handoff.dump(item, f)
            carrier.close()
            ok = True
        except Exception:  # the parent reads the part itself, and raises what this met
            ok = False
        conn.send(ok)


def _read(path: Path, reader: handoff.Reader) -> list[Carried]:
    with open(path, "rb") as f:
        out: list[Carried] = list(reader.load_all(f))
    path.unlink()
    return out

