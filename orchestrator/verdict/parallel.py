"""Judge a big fleet's hosts in forked worker processes, and keep their records on disk.

Normalizing, checking and encoding one host is independent of every other host and costs a few
milliseconds of CPU; a 10,000-host fleet spends most of its controller time there.  Each worker
process judges a contiguous slice of the hosts and writes two files into a spool directory: the
hosts' fleet.json records as compact JSON (already encoded: the fleet.json writer only copies
them) and their verdicts (findings, fingerprint descriptors, the few facts fleet-wide checks need)
as a pickle.  The parent never holds the fleet's facts: `SpooledRecords` reads a record back
from the spool when someone iterates the hosts (the table, drift, outputs, the report).

Fork, not spawn: the workers inherit the collected envelopes without copying them through a pipe.
Forking a process that runs other threads can leave a lock held forever in the child, so workers
are only used when this is the only thread.  Any worker failure falls back to judging in the
parent, which then raises the same error the way a serial run would.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from orchestrator.store.atomic import encode_json

if TYPE_CHECKING:
    from orchestrator.verdict.judge import HostInput, HostVerdict

# Below this many hosts per worker the fork and the spool cost more than they save (measured in
# docs/performance-controller.md).
MIN_HOSTS_PER_WORKER = 250
MAX_WORKERS = 16
WORKERS_ENV = "FLEETPROBE_WORKERS"

Judge = Callable[["HostInput"], "tuple[dict[str, Any], HostVerdict]"]


def worker_count(hosts: int, requested: int | None = None) -> int:
    """How many processes judge `hosts` hosts: `requested`, else $FLEETPROBE_WORKERS, else one per
    CPU this process may run on, fewer for small fleets; 1 means judge in this process."""
    if requested is None:
        env = os.environ.get(WORKERS_ENV, "").strip()
        if env.isdigit():
            requested = int(env)
    if requested is not None:
        wanted = max(1, min(requested, MAX_WORKERS, hosts))
    else:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        wanted = max(1, min(cpus, MAX_WORKERS, hosts // MIN_HOSTS_PER_WORKER))
    if wanted > 1 and (not hasattr(os, "fork") or threading.active_count() > 1):
        return 1
    return wanted


def _slices(n: int, parts: int) -> list[tuple[int, int]]:
    step, extra = divmod(n, parts)
    out, a = [], 0
    for i in range(parts):
        b = a + step + (1 if i < extra else 0)
        out.append((a, b))
        a = b
    return out


def _work(hosts: Sequence[HostInput], judge: Judge, part: Path) -> None:
    """One worker: judge `hosts`, write their records (without fingerprint/class, which are decided
    fleet-wide) to part.json and [(offset, length, verdict)] to part.pickle."""
    index: list[tuple[int, int, HostVerdict]] = []
    offset = 0
    with open(part.with_suffix(".json"), "wb", buffering=1 << 20) as out:
        for h in hosts:
            rec, verdict = judge(h)
            # they are the record's last two keys (fleet.host_record): SpooledRecords appends them
            del rec["fingerprint"], rec["class"]
            data = encode_json(rec).encode("utf-8")
            out.write(data)
            index.append((offset, len(data), verdict))
            offset += len(data)
    with open(part.with_suffix(".pickle"), "wb") as f:
        pickle.dump(index, f, protocol=pickle.HIGHEST_PROTOCOL)


def judge_hosts(inputs: Sequence[HostInput], judge: Judge, workers: int, spool: Path | None = None
                ) -> tuple[SpooledRecords, list[HostVerdict]] | None:
    """Judge `inputs` in `workers` forked processes; None when that could not be done (no spool
    space, a worker failed): the caller judges them itself."""
    try:
        if spool is not None:
            spool.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".verdict-", dir=spool))
    except OSError:
        return None
    records = SpooledRecords(tmp)
    parts = [tmp / f"part{i}" for i in range(workers)]
    pids: list[int] = []
    ok = True
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        for part, (a, b) in zip(parts, _slices(len(inputs), workers)):
            try:
                pid = os.fork()
            except OSError:  # no processes left (ulimit -u): judge here instead
                ok = False
                break
            if pid == 0:  # the worker: never return into the parent's code
                code = 1
                try:
                    _work(inputs[a:b], judge, part)
                    code = 0
                finally:  # an exception is judged again, and raised, by the parent
                    os._exit(code)
            pids.append(pid)
        while pids and ok:
            _, status = os.waitpid(pids[0], 0)
            pids.pop(0)
            ok = os.waitstatus_to_exitcode(status) == 0
    finally:
        # a fork failed, a worker failed, or Ctrl-C/SIGTERM while waiting: no worker outlives this
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    if not ok:
        records.close()
        return None
    verdicts: list[HostVerdict] = []
    for i, part in enumerate(parts):
        with open(part.with_suffix(".pickle"), "rb") as f:
            index = pickle.load(f)
        for offset, length, verdict in index:
            records.add(i, offset, length, verdict.name)
            verdicts.append(verdict)
    return records, verdicts


class SpooledRecords(Sequence[dict[str, Any]]):
    """Host records kept as JSON in files, parsed when read: a fleet's spool (records without
    fingerprint/class, appended when read) or a stored fleet.json (whole records, by its index).
    Read-only: each read returns a fresh dict.  fleet.json is written from it by copying text."""

    def __init__(self, directory: Path | None = None, remove: bool = True) -> None:
        self._dir = directory
        self._fds: dict[Path, int] = {}
        self._entries: list[tuple[Path, int, int, str]] = []  # file, offset, length, host
        self._tail: dict[str, str] | None = None  # host -> ',"fingerprint":…,"class":…}' (spool only)
        self._where: dict[str, int] | None = None
        self._finalizer = weakref.finalize(self, _cleanup, directory if remove else None, self._fds)

    def add(self, part: int | Path, offset: int, length: int, name: str) -> None:
        if isinstance(part, int):
            assert self._dir is not None, "a numbered part lives in the spool directory"
            path = self._dir / f"part{part}.json"
        else:
            path = part
        if path not in self._fds:
            self._fds[path] = os.open(path, os.O_RDONLY)
        self._entries.append((path, offset, length, name))

    def set_classes(self, of_host: dict[str, tuple[str, str]]) -> None:
        """host -> (fingerprint, class), decided once every host was judged."""
        self._tail = {name: ',"fingerprint":' + encode_json(fp) + ',"class":' + encode_json(cls) + "}"
                      for name, (fp, cls) in of_host.items()}

    def text(self, i: int) -> str:
        """Record i as JSON text, exactly as fleet.json holds it."""
        path, offset, length, name = self._entries[i]
        data = os.pread(self._fds[path], length, offset)
        if len(data) != length:
            raise OSError(f"{path}: host record {name} is cut short; was the file changed?")
        if self._tail is None:
            return data.decode("utf-8")
        # the encoded record ends with "}": reopen it for the two fleet-wide keys
        return data[:-1].decode("utf-8") + self._tail.get(name, ',"fingerprint":null,"class":null}')

    def names(self) -> list[str]:
        return [e[3] for e in self._entries]

    def by_name(self, name: str) -> dict[str, Any] | None:
        """One host's record, or None: lookups without parsing the others (drift)."""
        if self._where is None:
            self._where = {e[3]: i for i, e in enumerate(self._entries)}
        i = self._where.get(name)
        return None if i is None else self[i]

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        rec: dict[str, Any] = json.loads(self.text(i))
        return rec

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self._entries)))

    def json_pieces(self) -> Iterator[str]:
        """The records as one JSON array, in pieces (what atomic.iter_json writes for this list)."""
        yield "["
        for i in range(len(self._entries)):
            yield ("," if i else "") + self.text(i)
        yield "]"

    def close(self) -> None:
        self._finalizer()


def _cleanup(directory: Path | None, fds: dict[Path, int]) -> None:
    for fd in fds.values():
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
