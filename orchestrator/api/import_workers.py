"""Read, classify and store bundle documents in forked worker processes (`probe import` of many).

An import's documents are independent until each is named: reading one (bounded, parsed, every
envelope budget-checked and classified as a live run's answer) and writing its probe files is a
few milliseconds of CPU, and one process doing it for 10,000 documents is most of the import's
wall time.  Each worker takes a contiguous slice of the files, one document at a time: it writes
the host's probe files into a staging directory of the run (`RunDirectory.stage_dir`, keyed by the
file's place, since two documents of one host get their final names only in order) and appends
what the parent needs to name and plan the host (`ReadDocument`, its envelopes' data let go) to a
pickle of its own.  The parent then takes the slices in order and moves each host's files in
under its name (`host_finished(..., staged=)`): nothing but names and summaries crosses over.
Given a judge (api/import_judged.py), a worker also judges each host while it holds the host's
data, into a spool part of its own, and says in the ReadDocument what it judged the host as.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import HostResult, ProbeResult, document_result
from orchestrator.inventory.model import Host
from orchestrator.store.rundir import (
    RunDirectory,
    host_input_from_result,
    release_envelope_data,
    write_probe_files,
)
from orchestrator.transport.base import DEFAULT_MAX_OUTPUT
from orchestrator.verdict.parallel import PartWriter, Tally, in_workers, slices

if TYPE_CHECKING:
    from orchestrator.api.collected import Imported
    from orchestrator.api.import_judged import JudgedAs, JudgeWhereRead


@dataclass
class ReadDocument:
    """What the parent keeps of one file: the document's host name, identity and plan, its results
    (envelopes' data let go) and where their files wait; or why the file holds no document."""

    source: str
    error: str = ""
    name: str | None = None
    identity: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    result: HostResult | None = None
    staged: Path | None = None
    judged: JudgedAs | None = None  # what the worker judged the host as (api/import_judged.py)


BUNDLE_PROBE = "bundle"  # the outcome's name for a file that held no usable document


def unreadable(host: Host, error: str) -> HostResult:
    """A file that held no usable document, as its host's one result."""
    return HostResult(host, {BUNDLE_PROBE: ProbeResult(BUNDLE_PROBE, Outcome.INVALID_OUTPUT, error)})


# collected.read_document, passed in: that module uses this one
Reader = Callable[[Path], "Imported"]
# (base name, identity) -> the host a document is classified as (its inventory entry, if any)
HostFor = Callable[[str, "dict[str, Any]"], Host]


def read_one(f: Path, read: Reader, host_for: HostFor) -> ReadDocument:
    """One file's document read and its answers classified (as its host by the document's name)."""
    item = read(f)
    doc = item.document
    if doc is None:
        return ReadDocument(item.source, item.error)
    res = document_result(host_for(doc.name, doc.identity), doc, DEFAULT_MAX_OUTPUT)
    return ReadDocument(item.source, "", doc.name, doc.identity, doc.plan, res)


def read_slice(files: Sequence[Path], first: int, read: Reader, host_for: HostFor, run: RunDirectory,
               part: Path, judge: JudgeWhereRead | None = None, judged_part: Path | None = None,
               done: Callable[[int], None] | None = None) -> None:
    """One worker: files[i] is the run's file first + i; its probe files staged under that number
    and its ReadDocument pickled to `part` as each is done, so the worker holds one document.
    With `judge`, each host is also judged while its data is held, into `judged_part`; `done`
    hears how many of its files it has finished."""
    with open(part, "wb", buffering=1 << 20) as out, contextlib.ExitStack() as stack:
        verdicts = stack.enter_context(PartWriter(judged_part)) if judge and judged_part else None
        for i, f in enumerate(files):
            rd = read_one(f, read, host_for)
            if judge is not None and verdicts is not None:  # while its data is held
                # a file with no document: its host named after the file, as the parent names it
                res = rd.result or unreadable(host_for(Path(rd.source).name, {}), rd.error)
                rd.judged = judge.judge(host_input_from_result(res), verdicts)
            if rd.result is not None:
                rd.staged = run.stage_dir(str(first + i))
                write_probe_files(rd.staged, rd.result, staged=True)
                release_envelope_data(rd.result)
            pickle.dump(rd, out, protocol=pickle.HIGHEST_PROTOCOL)
            if done is not None:
                done(i + 1)


def read_in_workers(files: Sequence[Path], workers: int, read: Reader, host_for: HostFor,
                    run: RunDirectory, judge: JudgeWhereRead | None = None,
                    heard: Callable[[int], None] | None = None) -> Iterable[ReadDocument] | None:
    """Every file read by `workers` forked processes, then handed back in the files' order; None
    when a worker failed (the caller reads them itself and meets what the worker met).  With
    `judge`, the workers judge each host too (api/import_judged.py).  `heard`: told how many
    files the workers have finished, a few times a second while they work.  The records can be
    read back more than once (the import weighs every document's claim before it names any)."""
    parts_dir = run.stage_dir("parts")
    parts = [parts_dir / f"{i}.pickle" for i in range(workers)]
    judged: list[Path | None] = list(judge.parts(workers)) if judge is not None else [None] * workers
    tally = Tally(workers) if heard is not None else None
    jobs = [functools.partial(_without_cyclic_gc, functools.partial(
                read_slice, files[a:b], a, read, host_for, run, part, judge, judged_part,
                None if tally is None else tally.setter(w)))
            for w, (part, judged_part, (a, b)) in enumerate(zip(parts, judged, slices(len(files), workers)))]
    while_waiting = None if tally is None or heard is None else (lambda: heard(tally.total()))
    try:
        finished = in_workers(jobs, while_waiting)
    finally:
        if tally is not None:
            tally.close()
    if not finished:
        run.drop_staged()
        return None
    return ReadBack(parts)


@dataclass(frozen=True)
class ReadBack:
    """The workers' records, in the files' order, each time they are iterated."""

    parts: list[Path]

    def __iter__(self) -> Iterator[ReadDocument]:
        return _read_back(self.parts)


def _without_cyclic_gc(job: Callable[[], None]) -> None:
    """A worker's job with the cyclic collector off, as a judging worker has it (verdict/judge.py:
    documents and facts are trees, freed by reference counting)."""
    gc.disable()
    job()


def _read_back(parts: list[Path]) -> Iterator[ReadDocument]:
    for part in parts:
        with open(part, "rb") as f:
            while True:
                try:
                    yield pickle.load(f)
                except EOFError:
                    break
