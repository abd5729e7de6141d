"""Judge a big fleet's hosts in forked worker processes, and keep their records on disk.

Normalizing, checking and encoding one host is independent of every other host and costs a few
milliseconds of CPU; a 10,000-host fleet spends most of its controller time there.  Each worker
process judges a contiguous slice of the hosts and writes two files into a spool directory: the
hosts' fleet.json records as gzip members (store/members.py; already encoded: the fleet.json
writer only copies them) and their verdicts (findings, fingerprint descriptors, the few facts fleet-wide checks need)
with each record's drift digest (verdict/drift.py), one pickle per host, as each is judged.  The parent never holds the fleet's facts: `SpooledRecords` reads a record back
from the spool when someone iterates the hosts (the table, drift, outputs, the report).

Fork, not spawn: the workers inherit the collected envelopes without copying them through a pipe.
Forking a process that runs other threads can leave a lock held forever in the child, so workers
are only used when this is the only thread.  Any worker failure falls back to judging in the
parent, which then raises the same error the way a serial run would.
"""

from __future__ import annotations

import functools
import mmap
import os
import signal
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from orchestrator.engine.cores import may_fork, usable_cores
from orchestrator.facts.textsafe import is_digits
from orchestrator.store import members
from orchestrator.store.fleet_file import stored_record
from orchestrator.store.spool import FactsLayout, SpooledRecords
from orchestrator.verdict import handoff
from orchestrator.verdict.drift import drift_digest

if TYPE_CHECKING:
    from orchestrator.engine.results import HostInput
    from orchestrator.verdict.judge import HostVerdict

# Below this many hosts per worker the fork and the spool cost more than they save (measured in
# docs/performance-controller.md).
MIN_HOSTS_PER_WORKER = 250
# A fleet this big judged in one process (one CPU, FLEETPROBE_WORKERS=1) spools its records as the
# workers do: in memory, 10,000 DGX records are 4 GB; below it, holding them is faster (the spool
# adds each record's drift digest and a verdict pickled and read back: ~2.5 ms a host here).
SPOOL_MIN_HOSTS = 1000
MAX_WORKERS = 16
WORKERS_ENV = "FLEETPROBE_WORKERS"

Judge = Callable[["HostInput"], "tuple[dict[str, Any], HostVerdict]"]


def worker_count(hosts: int, requested: int | None = None) -> int:
    """How many processes judge `hosts` hosts: `requested`, else $FLEETPROBE_WORKERS, else one per
    CPU this process may run on, fewer for small fleets; 1 means judge in this process."""
    if requested is None:
        env = os.environ.get(WORKERS_ENV, "").strip()
        if is_digits(env):
            requested = int(env)
    if requested is not None:
        wanted = max(1, min(requested, MAX_WORKERS, hosts))
    else:
        wanted = max(1, min(usable_cores(), MAX_WORKERS, hosts // MIN_HOSTS_PER_WORKER))
    if wanted > 1 and not may_fork():
        return 1
    return wanted


def slices(n: int, parts: int) -> list[tuple[int, int]]:
    step, extra = divmod(n, parts)
    out, a = [], 0
    for i in range(parts):
        b = a + step + (1 if i < extra else 0)
        out.append((a, b))
        a = b
    return out


def _work(hosts: Sequence[HostInput], judge: Judge, part: Path) -> None:
    """One worker: judge `hosts`, write their records (without fingerprint/class, which are decided
    fleet-wide) to part.json and one pickled (offset, length, verdict) per host to part.pickle.

    Both are written as each host is judged: the worker holds one host at a time (holding its
    slice's verdicts for one pickle at the end made a worker of a 10,000-host fleet ~330 MB)."""
    with PartWriter(part) as out:
        for h in hosts:
            out.judge(h, judge)


class PartWriter:
    """A worker's two spool files, written one judged host at a time."""

    def __init__(self, part: Path) -> None:
        # closed by __exit__: the writer is the context manager
        self._out = open(part.with_suffix(".json"), "wb", buffering=1 << 20)  # noqa: SIM115
        self._index = open(part.with_suffix(".pickle"), "wb", buffering=1 << 20)  # noqa: SIM115
        self._offset = 0

    def judge(self, h: HostInput, judge: Judge) -> None:
        rec, verdict = judge(h)
        # the fleet-wide keys, decided when every host is judged, end the record: SpooledRecords appends them
        del rec["fingerprint"], rec["class"]
        parts: dict[str, str] = {}
        stored = stored_record(rec, parts)
        # the text open, as a gzip member (store/members.py): the spool adds the keys and "}"
        data = members.pack(stored.text[:-1])
        digest = drift_digest(rec, parts)
        self._out.write(data)
        handoff.dump(Spooled(self._offset, len(data), verdict, digest, stored.layout), self._index)
        self._offset += len(data)

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._out.close()
        self._index.close()


class Spooled(NamedTuple):
    """One judged host in a worker's spool: where its record's text sits in part.json, its verdict,
    its drift digest and where its facts sit in the text."""

    offset: int
    length: int
    verdict: HostVerdict
    digest: str | None
    layout: FactsLayout | None


def read_part(part: Path, reader: handoff.Reader) -> Iterator[Spooled]:
    """Each host a worker wrote to `part`, in its order (its words shared through `reader`)."""
    with open(part.with_suffix(".pickle"), "rb") as f:
        yield from reader.load_all(f)


def in_workers(jobs: Sequence[Callable[[], None]], while_waiting: Callable[[], None] | None = None) -> bool:
    """Run each job in a forked process of its own, all at once, and wait for them: True when every
    one finished cleanly.  False when one failed (an exception in a job, a signal) or could not be
    forked (no processes left, ulimit -u): the caller then does the work itself, and raises what a
    job met.  No worker outlives this, Ctrl-C or SIGTERM included.  `while_waiting`: called a few
    times a second until they are done (a progress line)."""
    pids = start_workers(jobs)
    return pids is not None and wait_workers(pids, while_waiting)


class Tally:
    """A count for each worker that the parent reads while they work: how far each has got, for a
    progress line.  Shared memory the workers inherit across fork; a count is one aligned 8-byte
    word, so a read sees each count whole."""

    def __init__(self, workers: int) -> None:
        self._counts = mmap.mmap(-1, 8 * max(1, workers))

    def setter(self, worker: int) -> Callable[[int], None]:
        """What worker `worker` calls with its count."""
        return functools.partial(struct.pack_into, "q", self._counts, 8 * worker)

    def total(self) -> int:
        return sum(n for (n,) in struct.iter_unpack("q", self._counts))

    def close(self) -> None:
        self._counts.close()


def start_workers(jobs: Sequence[Callable[[], None]]) -> list[int] | None:
    """Each job forked into a process of its own, not waited for: their pids, for wait_workers.
    None when one could not be forked (those already started are stopped)."""
    pids: list[int] = []
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        for job in jobs:
            try:
                pid = os.fork()
            except OSError:
                kill_all(pids)
                return None
            if pid == 0:  # the worker: never returns into the parent's code
                code = 1
                try:
                    job()
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
    except BaseException:
        kill_all(pids)
        raise
    return pids


# how often `while_waiting` is called while workers run
_POLL_S = 0.25


def wait_workers(pids: list[int], while_waiting: Callable[[], None] | None = None) -> bool:
    """Wait for workers start_workers forked: True when every one finished cleanly.  On the first
    that did not, or on anything raised here (Ctrl-C), the rest are stopped."""
    pending = list(pids)
    try:
        while pending:
            pid, status = os.waitpid(pending[0], 0 if while_waiting is None else os.WNOHANG)
            if pid == 0 and while_waiting is not None:  # still working
                while_waiting()
                time.sleep(_POLL_S)
                continue
            pending.pop(0)
            if os.waitstatus_to_exitcode(status) != 0:
                return False
        return True
    finally:
        kill_all(pending)


def kill_all(pids: Sequence[int]) -> None:
    """Stop these workers now and reap them (those already gone are skipped)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass


def judge_hosts(inputs: Sequence[HostInput], judge: Judge, workers: int, spool: Path | None = None
                ) -> tuple[SpooledRecords, list[HostVerdict]] | None:
    """Judge `inputs` in `workers` forked processes (1: in this one), their records spooled; None
    when that could not be done (no spool space, a worker failed): the caller judges them itself."""
    try:
        if spool is not None:
            spool.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".verdict-", dir=spool))
    except OSError:
        return None
    records = SpooledRecords(tmp, version=members.SCHEMA_VERSION)
    parts = [tmp / f"part{i}" for i in range(workers)]
    if workers <= 1:
        try:
            _work(inputs, judge, parts[0])
        except OSError:
            records.close()
            return None
        return records, _read_back(records, parts)
    ok = in_workers([functools.partial(_work, inputs[a:b], judge, part)
                     for part, (a, b) in zip(parts, slices(len(inputs), workers))])
    if not ok:
        records.close()
        return None
    return records, _read_back(records, parts)


def _read_back(records: SpooledRecords, parts: list[Path]) -> list[HostVerdict]:
    """The verdicts the parts hold, in their order; each host's record added to `records`."""
    verdicts: list[HostVerdict] = []
    reader = handoff.Reader()  # the verdicts are held together: their common words once
    for i, part in enumerate(parts):
        for s in read_part(part, reader):
            records.add(i, s.offset, s.length, s.verdict.name, s.digest, s.layout)
            verdicts.append(s.verdict)
    return verdicts
