"""Judge each host as soon as its results are stored, while the run is still collecting others.

A big run used to judge its hosts after the last one answered: at 1,000 hosts several seconds of
CPU in the workers (verdict/parallel.py) between the last answer and the verdict.  A
`JudgingPool` forks its workers before the fan-out starts (a process that already runs the SSH
threads must not fork: a lock held by another thread stays held in the child forever), then hands
each finished host to one of them through a pipe; a worker judges it and writes its record and
verdict to its spool part as `parallel.judge_hosts`' workers do.  When the run ends, `finish`
takes the verdicts of exactly the hosts the run judges, in its order.

It is an optimisation with the same result: `finish` returns None (the caller judges as
before) unless every host the run ends with was handed over once, in its final form, and every
worker exited cleanly.  An interrupted run, a host stored again, a worker that died: judged the
old way, so nothing is lost and nothing is judged on stale input.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import os
import pickle
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from orchestrator.store import members
from orchestrator.store.spool import SpooledRecords
from orchestrator.verdict import handoff
from orchestrator.verdict.parallel import Judge, PartWriter, Spooled, kill_all, read_part

if TYPE_CHECKING:
    from orchestrator.engine.results import HostInput
    from orchestrator.verdict.judge import HostVerdict

_PIPE_BYTES = 1 << 20  # a backlog of a few hundred hosts per worker before the run waits on judging
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class Prejudged(Protocol):
    """Hosts judged before the fleet is built: by a JudgingPool while the run went on, or by the
    workers that read an import's documents (api/import_judged.py)."""

    def finish(self, inputs: Sequence[HostInput]) -> tuple[SpooledRecords, list[HostVerdict]] | None:
        """The records and verdicts of `inputs`, in their order, when every one of them was judged
        exactly as the fleet would judge it; otherwise None, and the caller judges them."""


class JudgingPool:
    """Worker processes judging hosts handed to them while the run goes on."""

    def __init__(self, judge: Judge, workers: int, spool: Path) -> None:
        """Fork `workers` processes now; the caller has checked this process runs no other thread.
        Raises OSError when the spool or a process cannot be made (the run then judges as before)."""
        spool.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".verdict-", dir=spool))
        self._dir: Path | None = tmp
        self._pipes: list[BinaryIO] = []
        self._pids: list[int] = []
        self._sent: dict[str, bytes] = {}  # host -> hash of what its worker was given
        self._broken = False
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            for i in range(workers):
                self._fork(tmp / f"part{i}", judge)
        except OSError:
            self.close()
            raise

    def _fork(self, part: Path, judge: Judge) -> None:
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, _F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:  # a smaller pipe only means the run waits on judging sooner
            pass
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the parent's code
            code = 1
            try:
                os.close(w)
                for earlier in self._pipes:  # or an earlier worker would never see its end of input
                    earlier.close()
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                gc.disable()  # facts are trees: reference counting frees them (verdict/judge.py)
                with os.fdopen(r, "rb") as inbox:
                    _serve(inbox, judge, part)
                code = 0
            finally:
                os._exit(code)
        os.close(r)
        self._pids.append(pid)
        self._pipes.append(os.fdopen(w, "wb", buffering=0))

    def submit(self, h: HostInput) -> None:
        """Hand a finished host (its results stored) to a worker.  Never raises: a worker gone
        only means the run is judged after the fan-out, as without a pool."""
        if self._broken or not self._pipes:
            return
        try:
            message = pickle.dumps(h, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # a value pickle cannot take: this run is judged the old way
            self._broken = True
            return
        if h.name in self._sent:  # stored twice (an interrupt re-recorded it): judge after the run
            self._broken = True
            return
        worker = len(self._sent) % len(self._pipes)
        self._sent[h.name] = _fingerprint(message)
        try:
            self._pipes[worker].write(message)
        except OSError:
            self._broken = True

    def finish(self, inputs: Sequence[HostInput]) -> tuple[SpooledRecords, list[HostVerdict]] | None:
        """The records and verdicts of `inputs`, in their order, when every one of them was judged
        here exactly as given; otherwise None, and the caller judges them.  The pool is done after."""
        workers = len(self._pids)
        try:
            ok = self._drain() and not self._broken and self._handed_over(inputs)
            if not ok or self._dir is None:
                return None
            judged = spooled_in_order(self._dir, workers, [h.name for h in inputs])
            if judged is not None:
                self._dir = None  # the records own the spool now
            return judged
        except OSError:  # a worker that could not be waited for: judged by the caller
            return None
        finally:
            self.close()

    def _handed_over(self, inputs: Sequence[HostInput]) -> bool:
        if len(inputs) != len(self._sent):
            return False
        for h in inputs:
            sent = self._sent.get(h.name)
            if sent is None or sent != _fingerprint(pickle.dumps(h, protocol=pickle.HIGHEST_PROTOCOL)):
                return False
        return True

    def _end_input(self) -> None:
        for pipe in self._pipes:
            try:
                pipe.close()
            except OSError:  # a worker that died took its end of the pipe with it
                pass
        self._pipes = []

    def _drain(self) -> bool:
        """End every worker's input and wait for it; True when all exited cleanly."""
        self._end_input()
        ok = True
        while self._pids:
            _, status = os.waitpid(self._pids[0], 0)
            self._pids.pop(0)
            ok = ok and os.waitstatus_to_exitcode(status) == 0
        return ok

    def close(self) -> None:
        """Stop every worker now (Ctrl-C, an error, or done) and remove what it wrote."""
        self._end_input()
        kill_all(self._pids)
        self._pids = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def spooled_in_order(spool: Path, parts: int, names: Sequence[str]) -> tuple[SpooledRecords, list[HostVerdict]] | None:
    """The records and verdicts of hosts `names`, in that order, that workers judged into the
    `parts` parts of `spool` in any order; the records then own the spool (and remove it when
    closed).  None when the parts do not hold exactly those hosts or cannot be read."""
    try:
        judged: dict[str, tuple[int, Spooled]] = {}
        reader = handoff.Reader()  # the verdicts are held together: their common words once
        for i in range(parts):
            for spooled in read_part(spool / f"part{i}", reader):
                judged[spooled.verdict.name] = (i, spooled)
        if len(judged) != len(names) or not all(n in judged for n in names):
            return None
    except (OSError, EOFError, pickle.UnpicklingError):
        return None
    records = SpooledRecords(spool, version=members.SCHEMA_VERSION)
    verdicts = []
    try:
        for name in names:
            part, s = judged[name]
            records.add(part, s.offset, s.length, s.verdict.name, s.digest, s.layout)
            verdicts.append(s.verdict)
    except OSError:
        records.close()
        return None
    return records, verdicts


def _fingerprint(message: bytes) -> bytes:
    return hashlib.blake2b(message, digest_size=16).digest()


def _serve(inbox: BinaryIO, judge: Judge, part: Path) -> None:
    with PartWriter(part) as out:
        while True:
            try:
                h = pickle.load(inbox)
            except EOFError:
                return
            out.judge(h, judge)
