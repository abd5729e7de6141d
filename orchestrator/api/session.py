"""Running a plan and judging what it collected: the one path `probe run`, `rejudge` and `import` share.

`execute` takes the results-directory lock, creates the run directory, runs each play over its
hosts (results are written as hosts finish, so a crash or Ctrl-C keeps them), judges every host
and finishes the run.  `judge` builds the fleet document from host inputs and a plan, and
`rejudge` does it again from a stored run's raw data.  Presentation (tables, drift, reports,
exit codes) is the caller's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from orchestrator.api.errors import ResultsUnwritable, UsageError, usage_message
from orchestrator.api.plan import (
    PlanInputs,
    PlannedPlay,
    ReferenceFileError,
    RunPlan,
    build_plan,
    stored_plan_inputs,
    with_usable_expect,
)
from orchestrator.api.playbook import PlaybookError
from orchestrator.api.stored import load_past_result
from orchestrator.engine.outcomes import NOT_STARTED, Outcome
from orchestrator.engine.results import HostInput
from orchestrator.engine.runner import HostResult, ProbeResult, RunInterrupted, RunOptions, run_fleet
from orchestrator.facts.model import PreviousFacts
from orchestrator.facts.textsafe import one_line
from orchestrator.present.progress import Fanout, Progress
from orchestrator.store.history import (
    RunNotFound,
    RunSummary,
    list_runs,
    previous_run,
    results_dir_named,
    summarize_run,
)
from orchestrator.store.lock import LOCK_NAME, RunLock, UnsafeLock
from orchestrator.store.rundir import RunDirectory, host_input_from_result, release_envelope_data
from orchestrator.store.runmeta import RunMeta
from orchestrator.transport.base import TransportOptions
from orchestrator.transport.factory import open_transport
from orchestrator.verdict import classes as fingerprint
from orchestrator.verdict import offenders
from orchestrator.verdict.changes import FleetDiff
from orchestrator.verdict.classes import CarriedClass
from orchestrator.verdict.drift import diff_fleets
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet, host_judge
from orchestrator.verdict.offenders import PastRun
from orchestrator.verdict.overrides import Override
from orchestrator.verdict.parallel import worker_count
from orchestrator.verdict.references import References
from orchestrator.verdict.result import FleetResult
from orchestrator.verdict.streaming import JudgingPool, Prejudged

if TYPE_CHECKING:
    from orchestrator.api.import_judged import JudgeWhereRead


@dataclass
class Baseline:
    """A run a new run is compared with, read once: its judged fleet for drift and for the checks
    that judge counters and events between runs."""

    path: Path | None = None
    fleet: FleetResult | None = None
    warnings: list[str] = field(default_factory=list)  # runs passed over, or why none could be read


@dataclass
class RunResult:
    """A whole run: every play's host results merged per host, the judged fleet, where it is stored."""

    run: RunDirectory
    fleet: FleetResult
    hosts: dict[str, HostResult] = field(default_factory=dict)  # host -> its probes over all plays
    interrupted: bool = False
    drift: FleetDiff | None = None  # against the baseline, where there is one
    baseline: Baseline = field(default_factory=Baseline)

    def stopped_counts(self) -> tuple[int, int, int]:
        """(hosts finished, hosts cut off part-way, hosts never started): what a stopped run kept."""
        return stopped_counts(self.hosts.values())

    @property
    def failed_hosts(self) -> list[str]:
        return self.fleet.failed_hosts


def stopped_counts(hosts: Iterable[HostResult]) -> tuple[int, int, int]:
    """(hosts finished, hosts cut off part-way, hosts never started): what a stopped run kept.
    Part-way: a probe cut off mid-run, or a later play's probes never started."""
    finished = cut = never = 0
    for res in hosts:
        unstarted = [p.outcome == Outcome.SKIPPED and p.reason == NOT_STARTED for p in res.probes.values()]
        if unstarted and all(unstarted):
            never += 1
        elif any(unstarted) or any(p.outcome == Outcome.INTERRUPTED for p in res.probes.values()):
            cut += 1
        else:
            finished += 1
    return finished, cut, never


# The facts sections a check compares with the previous run (events and counters of one boot).
HISTORY_SECTIONS = ("kmsg", "nic", "gpus")
# Parts of other sections kept for the same reason (the whole PCIe tree is not needed): section -> keys.
# nvlink: each GPU's links and their error counters (gpu_health.nvlink_errors judges their growth).
# facts/model.py:PreviousFacts is the shape this gives the checks.
HISTORY_PARTS = {"pcie": ("aer_links",), "nvlink": ("gpus",)}


def previous_baseline(root: Path, before: Path) -> Baseline:
    """The newest complete run of the same inventory, playbook and limit before `before`; empty
    (with why) when there is none or it cannot be read (the checks then judge absolutes only)."""
    skipped: list[RunSummary] = []
    try:
        prev = previous_run(root, before, skipped=skipped)
    except (RunNotFound, OSError):
        return Baseline()
    warnings = [f"run {bad.id} is not used as the drift baseline: {bad.problem}" for bad in skipped if bad.problem]
    return load_baseline(prev.path, warnings) if prev is not None else Baseline(warnings=warnings)


def load_baseline(path: Path, warnings: list[str] | None = None) -> Baseline:
    """A stored run as a baseline; without its fleet (and why) when fleet.json cannot be read."""
    warnings = warnings or []
    try:  # its findings read up to a bound: a past run of millions costs its own reading, and says so
        fleet, note = load_past_result(path)
        return Baseline(path, fleet, [*warnings, note] if note else warnings)
    except (RunNotFound, OSError, ValueError) as e:
        return Baseline(path, None, [*warnings, f"no drift shown: {e}"])


def run_history(root: Path, before: Path, warnings: list[str] | None = None,
                read: Baseline | None = None) -> tuple[PastRun, ...]:
    """What the last complete runs of the same inventory, playbook and limit before `before` said
    of their hosts (verdict/offenders.py: repeat offenders), oldest first; a run that cannot be
    read is passed over (and said in `warnings`).  `read`: the drift baseline, already read (the
    newest of those runs, as a rule): not read again."""
    try:
        me = summarize_run(before)
        same = [s for s in list_runs(root) if s.id < before.name and s.complete and s.real
                and (s.inventory, s.playbook_name, s.limit) == (me.inventory, me.playbook_name, me.limit)]
    except (RunNotFound, OSError):
        return ()
    out = []
    for s in same[-(offenders.WINDOW - 1):]:
        if read is not None and read.fleet is not None and read.path == s.path:
            out.append(_past_run(s.id, read.fleet))
            continue
        try:
            fleet, note = load_past_result(s.path)
        except (RunNotFound, OSError, ValueError) as e:
            if warnings is not None:
                warnings.append(f"run {s.id} is left out of the repeat-offender history: {e}")
            continue
        if note and warnings is not None:
            warnings.append(note)
        out.append(_past_run(s.id, fleet))
    return tuple(out)


# How many earlier runs of the inventory a class is looked for in (newest first): a host unclassed
# for longer than this many runs stays unclassed rather than reading the whole history.
CARRY_WINDOW = 20


def class_carrier(root: Path, before: Path) -> Callable[[Collection[str]], Mapping[str, CarriedClass]]:
    """What References.carry asks: hosts this run did not class -> their class in the newest
    complete, real (no what-if) run of the same inventory before `before` that measured them."""

    def carry(hosts: Collection[str]) -> Mapping[str, CarriedClass]:
        try:
            me = summarize_run(before)
            runs = [s for s in list_runs(root) if s.id < before.name and s.complete and s.real
                    and s.inventory == me.inventory]
        except (RunNotFound, OSError):
            return {}
        return fingerprint.carried_from(_classed(runs[::-1][:CARRY_WINDOW]), hosts)

    return carry


def _classed(runs: Iterable[RunSummary]) -> Iterator[tuple[str, dict[str, tuple[str | None, str | None]]]]:
    """(run id, host -> (fingerprint, class)) of each run, read only as far as carried_from asks; a
    run that cannot be read is passed over."""
    for s in runs:
        try:
            fleet, _note = load_past_result(s.path)
        except (RunNotFound, OSError, ValueError):
            continue
        yield s.id, {h.name: (h.fingerprint, h.topology_class) for h in fleet.hosts}


def _past_run(run_id: str, fleet: FleetResult) -> PastRun:
    judged = [h.name for h in fleet.hosts.with_facts(()) if h.health.state.value not in ("unreachable", "incomplete")]
    return offenders.run_of(run_id, judged, fleet.findings)


def previous_facts(prev: FleetResult | None) -> dict[str, PreviousFacts]:
    """host -> its HISTORY_SECTIONS facts in the previous run (the checks judge counters and events
    against them); empty without one."""
    out: dict[str, PreviousFacts] = {}
    if prev is None:
        return out
    for host in prev.hosts:
        facts: Mapping[str, Any] = host.facts  # picked by section name
        kept = {k: facts[k] for k in HISTORY_SECTIONS if k in facts}
        for section, keys in HISTORY_PARTS.items():
            if isinstance(facts.get(section), dict):
                kept[section] = {k: facts[section][k] for k in keys if k in facts[section]}
        # Picked by section name from a fleet.json this program judged: the sections and parts
        # PreviousFacts declares, in the shapes the normalizers wrote.
        out[host.name] = cast(PreviousFacts, kept)
    return out


def judge(meta: RunMeta, inputs: list[HostInput], expectations: Mapping[str, Expectations] | RunPlan,
          overrides: Mapping[str, Mapping[str, Override]] | None = None, spool: Path | None = None,
          previous: Mapping[str, PreviousFacts] | None = None, pool: Prejudged | None = None,
          history: tuple[PastRun, ...] | None = None,
          carry: Callable[[Collection[str]], Mapping[str, CarriedClass]] | None = None) -> FleetResult:
    """The run's fleet document.  `expectations`: a plan (its per-host expectations and overrides)
    or a host -> Expectations table; `spool`: where a big fleet's host records wait on disk (the run
    directory; see orchestrator/verdict/parallel.py); `previous`: host -> facts of the previous run;
    `pool`: hosts judged before, under this plan (start_judging's pool, an import's reading
    workers); `history`: the earlier runs (run_history), None when none was read; `carry`: the
    classes of hosts this run does not class (class_carrier), None without a history."""
    expect_for, overrides_for = _rules(expectations, overrides)
    refs = expectations.refs if isinstance(expectations, RunPlan) else References()
    refs = replace(refs, history=history, carry=carry)
    return build_fleet(meta, inputs, expect_for, overrides_for, spool=spool,
                       previous_for=(previous or {}).get, pool=pool, refs=refs)


def _rules(expectations: Mapping[str, Expectations] | RunPlan,
           overrides: Mapping[str, Mapping[str, Override]] | None = None
           ) -> tuple[Callable[[HostInput], Expectations], Callable[[str], Mapping[str, Override]]]:
    """(host -> what it is expected to be, host -> the playbook's overrides) of a plan or tables."""
    if isinstance(expectations, RunPlan):
        plan = expectations
        return (lambda h: plan.expectations_for(h.name, h.vars)), (lambda host: plan.overrides.get(host, {}))
    table, rules = expectations, overrides or {}
    return (lambda h: table.get(h.name, Expectations())), (lambda host: rules.get(host, {}))


def start_judging(plan: RunPlan, previous: Mapping[str, PreviousFacts], spool: Path) -> JudgingPool | None:
    """Judges forked now, before any SSH thread, for a run big enough for worker processes: each
    host is then judged as it finishes, and the verdict is ready moments after the last answer.
    None (judge after the fan-out) for runs of several plays, whose hosts finish once per play."""
    if sum(1 for pp in plan.plays if pp.hosts) != 1 or any(pp.play.fabric is not None for pp in plan.plays):
        return None  # several plays, or a fabric step after the probes: hosts finish more than once
    workers = worker_count(len(plan.hosts))  # 1 where this process may not fork (another thread runs)
    if workers < 2:
        return None
    expect_for, _ = _rules(plan)
    try:
        return JudgingPool(host_judge(expect_for, previous.get, plan.refs), workers, spool)
    except OSError:
        return None


class _JudgeAsStored:
    """The pool as an event sink: a host is handed over once its results are on disk."""

    def __init__(self, pool: JudgingPool | None, run: RunDirectory, store: _StoreOrStop) -> None:
        self.pool = pool
        self.run = run
        self.store = store

    def host_finished(self, res: HostResult) -> None:
        if self.pool is not None and self.store.error is None:
            self.pool.submit(host_input_from_result(res, self.run.dir))


class _StoreOrStop:
    """The run directory as an event sink: the first write that fails (disk full, read-only
    remount, quota) stops the run, since nothing more it learns could be kept."""

    def __init__(self, run: RunDirectory, stop: threading.Event) -> None:
        self.run = run
        self.stop = stop
        self.error: OSError | None = None

    def host_finished(self, res: HostResult) -> None:
        if self.error is not None:
            return
        try:
            _retry_out_of_descriptors(lambda: self.run.host_finished(res))
        except OSError as e:
            self.error = e
            self.stop.set()
            return
        except Exception as e:  # something in this host's results cannot be stored: it fails alone
            reason = f"this host's results could not be stored ({type(e).__name__}: {str(e)[:200]})"
            res.probes = {p: ProbeResult(p, Outcome.FAILED, reason) for p in res.probes}
            try:
                self.run.host_finished(res)
            except OSError as again:
                self.error = again
                self.stop.set()
                return
            except Exception:  # e.g. its directory is a planted link: nothing of it is stored
                pass
        release_envelope_data(res)  # on disk now: judged from there, not held for the whole run


# Out of file descriptors (EMFILE/ENFILE) is not a full disk: the hosts in flight hold them and
# give them back as they finish, so the write is tried again for a while before the run is stopped.
_FD_RETRY_S = 10.0


def _retry_out_of_descriptors(write: Callable[[], None]) -> None:
    give_up = time.monotonic() + _FD_RETRY_S
    while True:
        try:
            write()
            return
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE) or time.monotonic() > give_up:
                raise
            time.sleep(0.05)


def _unwritable(run: RunDirectory, error: OSError) -> ResultsUnwritable:
    try:
        run.mark("failed")  # a small file; on a full disk it may not fit either
    except OSError:
        pass
    return ResultsUnwritable(str(run.dir), error)


@contextlib.contextmanager
def holding(*results_dirs: Path) -> Iterator[None]:
    """The locks of these results directories (each once), held for the block: a command that
    reads runs another command may prune, or writes a run, holds them (raises LockHeld)."""
    with contextlib.ExitStack() as stack:
        seen: set[Path] = set()
        for d in results_dirs:
            key = Path(os.path.abspath(d))
            if key not in seen:
                seen.add(key)
                stack.callback(open_lock(d).release)
        yield


def open_lock(root: Path) -> RunLock:
    """The results directory's lock, held: raises LockHeld when another run has it."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = RunLock(root)
    except OSError as e:
        raise UsageError(f"cannot use the results directory {results_dir_named(root)}: {e.strerror or e}; "
                         "choose another with --results") from None
    try:
        lock.acquire()
    except UnsafeLock as e:
        raise UsageError(e.strerror) from None
    except OSError as e:  # LockHeld is not one: it goes to the caller (exit 75)
        raise UsageError(f"cannot lock the results directory {root}: {e.strerror or e}; choose another with --results") from None
    return lock


def execute(plan: RunPlan, root: Path, transport: TransportOptions, options: dict[str, Any],
            output_dir: Path | None = None, show_progress: bool | None = None,
            baseline: Path | None = None, procs: int | None = None) -> RunResult:
    """Run every play of `plan`, store and judge it, and compare it with `baseline` (default: the
    previous complete run of the same inventory).  Raises LockHeld, ResultsUnwritable, UsageError;
    a Ctrl-C keeps what finished (RunResult.interrupted).  `procs`: RunOptions.procs (None: one process)."""
    lock = open_lock(root)
    try:
        return _execute_locked(plan, root, transport, options, output_dir, show_progress, baseline, procs)
    finally:
        lock.release()


def _execute_locked(plan: RunPlan, root: Path, transport: TransportOptions, options: dict[str, Any],
                    output_dir: Path | None, show_progress: bool | None, baseline: Path | None,
                    procs: int | None = None) -> RunResult:
    run = _new_run(root, plan.meta(options=options), output_dir)
    progress = Progress(len(plan.hosts), enabled=show_progress)
    stop = threading.Event()
    store = _StoreOrStop(run, stop)
    prev = previous_baseline(root, run.dir)
    previous = previous_facts(prev.fleet)
    history = run_history(root, run.dir, prev.warnings, prev)
    pool = start_judging(plan, previous, run.dir)
    try:
        result = _run_and_judge(plan, run, transport, progress, store, stop, previous, pool, history,
                                class_carrier(root, run.dir), procs)
    finally:
        if pool is not None:
            pool.close()
    result.baseline = load_baseline(baseline) if baseline is not None else prev
    if result.baseline.fleet is not None:
        result.drift = diff_fleets(result.baseline.fleet, result.fleet)
    return result


def _run_and_judge(plan: RunPlan, run: RunDirectory, transport: TransportOptions, progress: Progress,
                   store: _StoreOrStop, stop: threading.Event, previous: Mapping[str, PreviousFacts],
                   pool: JudgingPool | None, history: tuple[PastRun, ...],
                   carry: Callable[[Collection[str]], Mapping[str, CarriedClass]],
                   procs: int | None = None) -> RunResult:
    merged: dict[str, HostResult] = {}
    interrupted = False
    sink = Fanout(store, _JudgeAsStored(pool, run, store), progress)
    try:
        for pp in plan.plays:
            if not pp.hosts:
                continue
            run_options = RunOptions(forks=pp.forks, transport=transport, become=pp.become, procs=procs)
            results: list[HostResult] = []
            if pp.calls:
                try:
                    results = run_fleet(pp.hosts, pp.calls, run_options, open_transport, sink, stop)
                except RunInterrupted as e:
                    results = e.results
                    interrupted = True
            if not interrupted and pp.play.fabric is not None:
                fabric, interrupted = _fabric_step(pp, results, run_options, store, stop)
                results = [*results, *fabric]
            if store.error is not None:
                raise _unwritable(run, store.error)
            for r in results:
                if r.host.name in merged:
                    merged[r.host.name].probes.update(r.probes)
                else:
                    merged[r.host.name] = r
            if interrupted:
                break
        if interrupted:
            _never_started(plan, merged, store)
    finally:
        progress.close()
    inputs = [host_input_from_result(merged[h.name], run.dir) for h in plan.hosts if h.name in merged]
    if interrupted:
        done, cut, never = stopped_counts(merged.values())
        run.stop("interrupted", {"finished": done, "cut": cut, "never": never})
    else:
        run.stop("complete")
    fleet = judge(run.meta, inputs, plan, spool=run.dir, previous=previous, pool=None if interrupted else pool,
                  history=history, carry=carry)
    try:
        run.finish(fleet.to_document())
    except OSError as e:
        raise _unwritable(run, e) from None
    return RunResult(run, fleet, merged, interrupted)


def _fabric_step(pp: PlannedPlay, results: list[HostResult], options: RunOptions, store: _StoreOrStop,
                 stop: threading.Event) -> tuple[list[HostResult], bool]:
    """The play's fabric qualification over its hosts that answered its probes (all of them when it
    has none); each host's `fabric` result stored as it would be for any probe.  (results, stopped)."""
    from orchestrator.api.fabric import FabricInterrupted, Notice, qualify

    answered = {r.host.name for r in results if not any(p.outcome == Outcome.UNREACHABLE for p in r.probes.values())}
    hosts = [h for h in pp.hosts if not results or h.name in answered]
    assert pp.play.fabric is not None
    t0 = time.monotonic()
    notice = Notice(lambda msg: print(f"fabric [{time.monotonic() - t0:.0f} s]: {msg}", file=sys.stderr, flush=True))
    interrupted = False
    try:
        got = qualify(hosts, pp.play.fabric, options, open_transport, stop, notice)
    except FabricInterrupted as e:
        got, interrupted = e.results, True
    out = []
    for h in pp.hosts:
        pr = got.get(h.name) or ProbeResult("fabric", Outcome.SKIPPED, "unreachable in this play's probes")
        res = HostResult(h, {"fabric": pr}, duration_s=pr.duration_s)
        store.host_finished(res)
        out.append(res)
    return out, interrupted


def _never_started(plan: RunPlan, merged: dict[str, HostResult], store: _StoreOrStop) -> None:
    """The plays a stopped run never reached: their hosts' probes are recorded as skipped (never
    started), so the run shows every host it was meant to probe, as far as it got."""
    for pp in plan.plays:
        for h in pp.hosts:
            res = merged.get(h.name)
            names = [c.name for c in pp.calls] + (["fabric"] if pp.play.fabric is not None else [])
            missing = [n for n in names if res is None or n not in res.probes]
            if not missing:
                continue
            extra = HostResult(h, {n: ProbeResult(n, Outcome.SKIPPED, NOT_STARTED) for n in missing})
            store.host_finished(extra)
            if res is None:
                merged[h.name] = extra
            else:
                res.probes.update(extra.probes)


@dataclass
class Collected:
    """One piece of a host's results that came by another road, and where it came from; `staged`:
    its probe files, already written by a worker into the run's stage_dir."""

    result: HostResult
    origin: dict[str, Any]
    staged: Path | None = None


def store_streamed(collect: Callable[[RunDirectory], Iterable[Collected]], root: Path, via: dict[str, Any],
                   plan_of: Callable[[list[HostResult]], tuple[RunPlan, dict[str, Any] | None]],
                   rank: Callable[[str], int], judged_as_read: JudgeWhereRead | None = None,
                   step: Callable[[str], None] = lambda _text: None) -> RunResult:
    """Results that came by another road (bundle documents from srun or cron, an Ansible job's
    events), stored and judged exactly as a live run's: the same run directory writes, the same
    `judge` under the same plan.  They come one piece at a time (a host's probes may come in
    several) from `collect`, given the run being built: each is written to the run directory, and
    its data let go, before the next is read, so an import of 10,000 hosts holds one host's data.
    The plan comes once every host is known (`plan_of`: the plan and run options, from the hosts'
    results, data released); `rank`: a host's place in the run's order (its inventory's).  The run
    is built out of sight and published whole: a road that ends without a host to judge (plan_of
    raises) leaves nothing.  `judged_as_read`: the hosts were judged as they were collected; kept
    where it vouches for them under the plan (api/import_judged.py), else judged here.  `step`
    hears where it stands once the hosts are collected."""
    try:
        return _store_streamed(collect, root, via, plan_of, rank, judged_as_read, step)
    finally:
        if judged_as_read is not None:
            judged_as_read.close()


def _store_streamed(collect: Callable[[RunDirectory], Iterable[Collected]], root: Path, via: dict[str, Any],
                    plan_of: Callable[[list[HostResult]], tuple[RunPlan, dict[str, Any] | None]],
                    rank: Callable[[str], int], judged_as_read: JudgeWhereRead | None,
                    step: Callable[[str], None]) -> RunResult:
    with holding(root):
        run = _new_run(root, RunMeta(collected=via), staged=True)
        with _published(run, root):
            by_name: dict[str, HostResult] = {}
            for piece in collect(run):
                res = piece.result
                run.host_finished(res, origin=piece.origin, staged=piece.staged)
                release_envelope_data(res)
                if res.host.name in by_name:  # more of a host's probes (a later play's replace an earlier's)
                    by_name[res.host.name].probes.update(res.probes)
                else:
                    by_name[res.host.name] = res
            run.drop_staged()
            kept = sorted(by_name.values(), key=lambda r: rank(r.host.name))
            plan, options = plan_of(kept)
            meta = plan.meta(collected=via, options=options)
            meta.hosts_order = [r.host.name for r in kept]
            run.replan(meta)
            inputs = [host_input_from_result(res, run.dir) for res in kept]
            run.stop("complete")
            pool = judged_as_read.vouched(plan, inputs) if judged_as_read is not None else None
            step(f"{'the fleet-wide steps over' if pool is not None else 'judging'} {len(inputs):,} hosts")
            # the spool beside the run, not in it: the run directory is renamed when it is published
            fleet = judge(run.meta, inputs, plan, spool=root, pool=pool)
            step("writing the run")
            run.finish(fleet.to_document())
    return RunResult(run, fleet, {r.host.name: r for r in kept})


@contextlib.contextmanager
def _published(run: RunDirectory, root: Path) -> Iterator[None]:
    """A staged run built in the block, published when it ends; discarded when it raises (a full
    disk says which results directory could not take it)."""
    try:
        yield
        run.publish()
    except OSError as e:
        run.discard()
        raise ResultsUnwritable(str(root), e) from None
    except BaseException:
        run.discard()
        raise


def store_imported(meta: RunMeta, inputs: list[HostInput], evidence: Mapping[str, dict[str, Any]], root: Path,
                   expectations: Mapping[str, Expectations]) -> RunResult:
    """Hosts judged from text evidence (`probe import` of command output), stored as a run: each
    host's facts and the parsed evidence they came from (`evidence`: host -> its record)."""
    with holding(root):
        run = _new_run(root, meta)
        try:
            for h in inputs:
                run.imported_host(h, evidence[h.name])
            run.stop("complete")
            fleet = judge(run.meta, inputs, expectations, spool=run.dir)
            run.finish(fleet.to_document())
        except OSError as e:
            raise _unwritable(run, e) from None
    return RunResult(run, fleet)


def _new_run(root: Path, meta: RunMeta, output_dir: Path | None = None, staged: bool = False) -> RunDirectory:
    """The run's directory (`staged`: built out of sight, published by _published)."""
    try:
        return RunDirectory.create_staged(root, meta) if staged else RunDirectory.create(root, meta, output_dir)
    except OSError as e:  # UnsafeRunPath included: -o DIR with a planted raw/ link
        raise UsageError(f"cannot create the run directory under {results_dir_named(root)}: {e.strerror or e}; "
                         "choose another with --results" + (" or -o" if output_dir else "")) from None


def rejudge(source: Path, root: Path, playbook: str | None = None, expect: list[str] | None = None,
            security_floor: str | None = None, baseline_file: str | None = None) -> RunResult:
    """A new run judged from `source`'s raw data with today's normalizers and checks, under the
    plan the run was made with (its playbook, --expect and reference files from run.json), or under
    `playbook` / `expect` / `security_floor` when given."""
    # Locked like a run from before the source is read until the new run is published: a
    # concurrent `--keep` must not prune the source half-way.
    others = [source.parent] if (source.parent / LOCK_NAME).exists() else []  # a results directory of its own
    with holding(root, *others):
        return _rejudge_locked(source, root, playbook, expect, security_floor, baseline_file)


def _stored_plan(inputs: PlanInputs, hosts: list[HostInput], run: str, given: frozenset[str]) -> RunPlan:
    """The plan a stored run is judged again under; UsageError saying what to give when a file its
    plan names (the playbook, the files judged against) cannot be used here: moved, or the run was
    made on another controller or from another directory.  `given`: the options the user gave,
    whose own errors are theirs."""
    try:
        return build_plan(inputs, stored=hosts)
    except PlaybookError as e:
        if "-p" in given:
            raise
        raise UsageError(f"{run}: the run's plan names playbook {inputs.playbook!r}, which cannot be used here "
                         f"({usage_message(e)}); give -p PLAYBOOK to re-judge it under a playbook of your own") from None
    except ReferenceFileError as e:
        if e.option in given:
            raise
        raise UsageError(f"{run}: the run was judged against a file its plan names with {e.option}, which cannot "
                         f"be used here ({e.why}); give {e.option} FILE to re-judge it "
                         "against a file of your own") from None


def _usable_expectations(inputs: list[HostInput], run: str) -> list[HostInput]:
    """The stored hosts, each with the part of its probe_expect this program can judge with: one
    host's unreadable expectations cost that host's expectations, not the whole rejudge."""
    out = []
    for h in inputs:
        host, why = with_usable_expect(h)
        if why:
            print(f"warning: {run}: host {one_line(h.name)}: {one_line(why)}; correct probe_expect in its _host.json "
                  "under raw/ and rejudge to judge it against what was meant",
                  file=sys.stderr)
        out.append(host)
    return out


def what_if_of(source: RunMeta, stored: PlanInputs, given: PlanInputs, judged: RunMeta) -> list[str]:
    """The options a rejudge judges under other than its source's (["--expect", "-p"]), and those
    its source (a what-if itself) had: a non-empty list makes the new run a what-if of its source,
    which history never takes for a state of the fleet (store/history.py).  Judging again the same
    raw data with the same inputs (today's checks) is no what-if."""
    changed = [option for option, was, now in (
        ("-p", source.playbook_name, judged.playbook_name),
        ("--expect", tuple(stored.expect), tuple(given.expect)),
        ("--security-floor", stored.security_floor, given.security_floor),
        ("--baseline-file", stored.baseline_file, given.baseline_file)) if was != now]
    return list(dict.fromkeys([*(source.what_if or []), *changed]))


def _rejudge_locked(source: Path, root: Path, playbook: str | None, expect: list[str] | None,
                    security_floor: str | None, baseline_file: str | None) -> RunResult:
    stored = RunDirectory.open(source)
    problems: list[str] = []
    inputs = stored.host_inputs(problems=problems)
    for why in problems:
        print(f"warning: {source.name}: {why}", file=sys.stderr)
    if not inputs:
        raise UsageError(f"{source} has no readable raw host results to re-judge")
    inputs = _usable_expectations(inputs, source.name)
    meta = stored.meta
    # the hosts this run has: a host left out above (or never finished) is not in it, so
    # re-judging it again does not say so again
    judged = [h.name for h in inputs]
    inputs_of_run, moved = stored_plan_inputs(meta, source.name)
    replaced = {"playbook": playbook, "security_floor": security_floor, "baseline_file": baseline_file}
    for field_name, note in moved.items():
        if replaced.get(field_name) is None:
            print(f"warning: {note}", file=sys.stderr)
    new_inputs = PlanInputs(inventory=inputs_of_run.inventory, limit=meta.limit,
                            playbook=playbook if playbook is not None else inputs_of_run.playbook,
                            probes=inputs_of_run.probes,
                            expect=tuple(expect) if expect is not None else inputs_of_run.expect,
                            forks=inputs_of_run.forks, timeout=inputs_of_run.timeout, become=inputs_of_run.become,
                            security_floor=security_floor or inputs_of_run.security_floor,
                            baseline_file=baseline_file or inputs_of_run.baseline_file)
    if meta.imported:
        plan = None
        from orchestrator.api.plan import parse_expect_items

        cli_expect = parse_expect_items(new_inputs.expect)
        new_meta = RunMeta(inventory=list(new_inputs.inventory), limit=meta.limit, probes=meta.probes, options=meta.options,
                           hosts_order=judged, imported=True, playbook=None, plan=new_inputs.to_dict(),
                           rejudged_from=source.name)
    else:
        given = frozenset(option for option, value in (("-p", playbook), ("--security-floor", security_floor),
                                                       ("--baseline-file", baseline_file)) if value is not None)
        plan = _stored_plan(new_inputs, inputs, source.name, given)
        new_meta = plan.meta(options=meta.options, rejudged_from=source.name)
        new_meta.hosts_order, new_meta.probes = judged, meta.probes
    new_meta.what_if = what_if_of(meta, inputs_of_run, new_inputs, new_meta) or None
    # built in a staging directory and renamed into the history only once complete
    run = RunDirectory.create_staged(root, new_meta)
    with _published(run, root):
        # The raw data travels with the new run, so it can be shown, diffed and re-judged again.
        run.copy_raw_from(stored)
        # Compared with the run before the source (not with the source itself, nor a later run).
        in_root = source.parent.resolve() == root.resolve()
        before = previous_facts(previous_baseline(root, source).fleet) if in_root else {}
        history = run_history(root, source) if in_root else None
        carry = class_carrier(root, source) if in_root else None
        # a re-judged stopped run is still the stopped run: never a complete baseline for drift
        run.stop("interrupted" if meta.interrupted else "complete", meta.stopped)
        # the spool beside the run, not in it: a spool in the staged directory would be renamed
        # into the published run with it, and never removed
        if plan is not None:
            fleet = judge(run.meta, inputs, plan, spool=root, previous=before, history=history, carry=carry)
        else:
            fleet = judge(run.meta, inputs, {h.name: cli_expect for h in inputs}, spool=root, previous=before,
                          history=history, carry=carry)
        run.finish(fleet.to_document())
    return RunResult(run, fleet)
