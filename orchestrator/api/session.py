"""Running a plan and judging what it collected: the one path `probe run`, `rejudge` and `import` share.

`execute` takes the results-directory lock, creates the run directory, runs each play over its
hosts (results are written as hosts finish, so a crash or Ctrl-C keeps them), judges every host
and finishes the run.  `judge` builds the fleet document from host inputs and a plan, and
`rejudge` does it again from a stored run's raw data.  Presentation (tables, drift, reports,
exit codes) is the caller's.
"""

from __future__ import annotations

import errno
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from orchestrator.api.errors import ResultsUnwritable, UsageError
from orchestrator.api.plan import PlanInputs, PlannedPlay, RunPlan, build_plan
from orchestrator.engine.outcomes import NOT_STARTED, Outcome, is_problem
from orchestrator.engine.results import HostInput
from orchestrator.engine.runner import HostResult, ProbeResult, RunInterrupted, RunOptions, run_fleet
from orchestrator.facts.model import PreviousFacts
from orchestrator.present.progress import Fanout, Progress
from orchestrator.store.history import RunNotFound, load_fleet, previous_run
from orchestrator.store.lock import RunLock, UnsafeLock
from orchestrator.store.rundir import RunDirectory, host_input_from_result, release_envelope_data
from orchestrator.transport.base import TransportOptions
from orchestrator.transport.factory import open_transport
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet, host_judge
from orchestrator.verdict.overrides import Override
from orchestrator.verdict.parallel import worker_count
from orchestrator.verdict.streaming import JudgingPool


@dataclass
class RunResult:
    """A whole run: every play's host results merged per host, the judged fleet, where it is stored."""

    run: RunDirectory
    fleet: dict[str, Any]
    hosts: dict[str, HostResult] = field(default_factory=dict)  # host -> its probes over all plays
    interrupted: bool = False

    def stopped_counts(self) -> tuple[int, int, int]:
        """(hosts finished, hosts cut off part-way, hosts never started): what a stopped run kept.
        Part-way: a probe cut off mid-run, or a later play's probes never started."""
        finished = cut = never = 0
        for res in self.hosts.values():
            unstarted = [p.outcome == Outcome.SKIPPED and p.reason == NOT_STARTED for p in res.probes.values()]
            if unstarted and all(unstarted):
                never += 1
            elif any(unstarted) or any(p.outcome == Outcome.INTERRUPTED for p in res.probes.values()):
                cut += 1
            else:
                finished += 1
        return finished, cut, never

    @property
    def failed_hosts(self) -> list[str]:
        return [r["name"] for r in self.fleet["hosts"] if is_problem(r["outcome"])]


def run_header(meta: dict[str, Any]) -> dict[str, Any]:
    """fleet.json's `run`: what of run.json a reader of the fleet document needs."""
    return {k: meta.get(k) for k in ("id", "started", "finished", "inventory", "playbook", "probes", "limit", "user")}


# The facts sections a check compares with the previous run (events and counters of one boot).
HISTORY_SECTIONS = ("kmsg", "nic", "gpus")
# Parts of other sections kept for the same reason (the whole PCIe tree is not needed): section -> keys.
# nvlink: each GPU's links and their error counters (gpu_health.nvlink_errors judges their growth).
# facts/model.py:PreviousFacts is the shape this gives the checks.
HISTORY_PARTS = {"pcie": ("aer_links",), "nvlink": ("gpus",)}


def previous_facts(root: Path, before: Path) -> dict[str, PreviousFacts]:
    """host -> its HISTORY_SECTIONS facts in the newest complete run of the same inventory before
    `before`; empty when there is none or it cannot be read (the checks then judge absolutes only)."""
    try:
        prev = previous_run(root, before)
        if prev is None:
            return {}
        fleet = load_fleet(prev.path)
    except (RunNotFound, OSError, ValueError):
        return {}
    out: dict[str, PreviousFacts] = {}
    for rec in fleet.get("hosts") or []:
        facts = rec.get("facts") or {}
        kept = {k: facts[k] for k in HISTORY_SECTIONS if k in facts}
        for section, keys in HISTORY_PARTS.items():
            if isinstance(facts.get(section), dict):
                kept[section] = {k: facts[section][k] for k in keys if k in facts[section]}
        # Picked by section name from a fleet.json this program judged: the sections and parts
        # PreviousFacts declares, in the shapes the normalizers wrote.
        out[str(rec.get("name"))] = cast(PreviousFacts, kept)
    return out


def judge(meta: dict[str, Any], inputs: list[HostInput], expectations: Mapping[str, Expectations] | RunPlan,
          overrides: Mapping[str, Mapping[str, Override]] | None = None, spool: Path | None = None,
          previous: Mapping[str, PreviousFacts] | None = None, pool: JudgingPool | None = None) -> dict[str, Any]:
    """The run's fleet document.  `expectations`: a plan (its per-host expectations and overrides)
    or a host -> Expectations table; `spool`: where a big fleet's host records wait on disk (the run
    directory; see orchestrator/verdict/parallel.py); `previous`: host -> facts of the previous run;
    `pool`: the judges started for this plan by start_judging."""
    expect_for, overrides_for = _rules(expectations, overrides)
    return build_fleet(run_header(meta), inputs, expect_for, overrides_for, spool=spool,
                       previous_for=(previous or {}).get, pool=pool)


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
        return JudgingPool(host_judge(expect_for, previous.get), workers, spool)
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


def _install_sigterm() -> None:
    if threading.current_thread() is threading.main_thread():
        def raise_interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt()
        signal.signal(signal.SIGTERM, raise_interrupt)


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


def open_lock(root: Path) -> RunLock:
    """The results directory's lock, held: raises LockHeld when another run has it."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = RunLock(root)
    except OSError as e:
        raise UsageError(f"cannot use the results directory {root}: {e.strerror or e}; choose another with --results") from None
    try:
        lock.acquire()
    except UnsafeLock as e:
        raise UsageError(e.strerror) from None
    except OSError as e:  # LockHeld is not one: it goes to the caller (exit 75)
        raise UsageError(f"cannot lock the results directory {root}: {e.strerror or e}; choose another with --results") from None
    return lock


def execute(plan: RunPlan, root: Path, transport: TransportOptions, options: dict[str, Any],
            output_dir: Path | None = None, show_progress: bool | None = None) -> RunResult:
    """Run every play of `plan`, store and judge it.  Raises LockHeld, ResultsUnwritable,
    UsageError; a Ctrl-C keeps what finished (RunResult.interrupted)."""
    lock = open_lock(root)
    try:
        return _execute_locked(plan, root, transport, options, output_dir, show_progress)
    finally:
        lock.release()


def _execute_locked(plan: RunPlan, root: Path, transport: TransportOptions, options: dict[str, Any],
                    output_dir: Path | None, show_progress: bool | None) -> RunResult:
    try:
        run = RunDirectory.create(root, {**plan.meta(), "options": options}, output_dir)
    except OSError as e:  # UnsafeRunPath included: -o DIR with a planted raw/ link
        why = e.strerror or str(e)
        raise UsageError(f"cannot create the run directory under {root}: {why}; "
                         "choose another with --results or -o") from None
    progress = Progress(len(plan.hosts), enabled=show_progress)
    _install_sigterm()
    stop = threading.Event()
    store = _StoreOrStop(run, stop)
    previous = previous_facts(root, run.dir)
    pool = start_judging(plan, previous, run.dir)
    try:
        return _run_and_judge(plan, run, transport, progress, store, stop, previous, pool)
    finally:
        if pool is not None:
            pool.close()


def _run_and_judge(plan: RunPlan, run: RunDirectory, transport: TransportOptions, progress: Progress,
                   store: _StoreOrStop, stop: threading.Event, previous: Mapping[str, PreviousFacts],
                   pool: JudgingPool | None) -> RunResult:
    merged: dict[str, HostResult] = {}
    interrupted = False
    sink = Fanout(store, _JudgeAsStored(pool, run, store), progress)
    try:
        for pp in plan.plays:
            if not pp.hosts:
                continue
            run_options = RunOptions(forks=pp.forks, transport=transport, become=pp.become)
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
    fleet = judge(run.meta, inputs, plan, spool=run.dir, previous=previous, pool=None if interrupted else pool)
    try:
        run.finish(fleet, state="interrupted" if interrupted else "complete")
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


def store_collected(plan: RunPlan, collected: list[tuple[HostResult, dict[str, Any]]], root: Path,
                    extra_meta: dict[str, Any]) -> RunResult:
    """Results that came by another road (bundle documents from srun or cron, Ansible job events)
    stored and judged exactly as a live run's: the same run directory writes, the same `judge` under
    the same plan.  `collected`: each host's results and where they came from (its `origin`)."""
    meta = {**plan.meta(), **extra_meta, "hosts_order": [r.host.name for r, _ in collected]}
    try:
        run = RunDirectory.create(root, meta)
    except OSError as e:
        raise UsageError(f"cannot create the run directory under {root}: {e.strerror or e}; "
                         "choose another with --results") from None
    try:
        for res, origin in collected:
            run.host_finished(res, origin=origin)
            release_envelope_data(res)
        inputs = [host_input_from_result(res, run.dir) for res, _ in collected]
        fleet = judge(run.meta, inputs, plan, spool=run.dir)
        run.finish(fleet)
    except OSError as e:
        raise _unwritable(run, e) from None
    return RunResult(run, fleet, {r.host.name: r for r, _ in collected})


def rejudge(source: Path, root: Path, playbook: str | None = None, expect: list[str] | None = None) -> RunResult:
    """A new run judged from `source`'s raw data with today's normalizers and checks, under the
    plan the run was made with (its playbook and --expect from run.json), or under `playbook` /
    `expect` when given."""
    stored = RunDirectory.open(source)
    problems: list[str] = []
    inputs = stored.host_inputs(problems=problems)
    for why in problems:
        print(f"warning: {source.name}: {why}; that host is left out", file=sys.stderr)
    if not inputs:
        raise UsageError(f"{source} has no readable raw host results to re-judge")
    meta = stored.meta
    inputs_of_run = PlanInputs.from_dict(meta.get("plan") or {"playbook": meta.get("playbook"),
                                                               "inventory": meta.get("inventory")})
    new_inputs = PlanInputs(inventory=tuple(meta.get("inventory") or ()), limit=meta.get("limit"),
                            playbook=playbook if playbook is not None else inputs_of_run.playbook,
                            probes=inputs_of_run.probes,
                            expect=tuple(expect) if expect is not None else inputs_of_run.expect,
                            forks=inputs_of_run.forks, timeout=inputs_of_run.timeout, become=inputs_of_run.become)
    if meta.get("imported"):
        plan = None
        from orchestrator.api.plan import parse_expect_items

        cli_expect = parse_expect_items(new_inputs.expect)
        new_meta = {k: meta.get(k) for k in ("inventory", "limit", "probes", "options", "hosts_order", "imported")}
        new_meta.update(playbook=None, plan=new_inputs.to_dict(), rejudged_from=source.name)
    else:
        plan = build_plan(new_inputs, stored=inputs)
        new_meta = {**plan.meta(), "options": meta.get("options"), "hosts_order": meta.get("hosts_order"),
                    "probes": meta.get("probes"), "rejudged_from": source.name}
    # Locked like a run (a concurrent `--keep` must not prune the source half-way), built in a
    # staging directory and renamed into the history only once complete.
    lock = open_lock(root)
    try:
        run = RunDirectory.create_staged(root, new_meta)
        try:
            # The raw data travels with the new run, so it can be shown, diffed and re-judged again.
            run.copy_raw_from(stored)
            # Compared with the run before the source (not with the source itself, nor a later run).
            before = previous_facts(root, source) if source.parent.resolve() == root.resolve() else {}
            if plan is not None:
                fleet = judge(run.meta, inputs, plan, spool=run.dir, previous=before)
            else:
                fleet = judge(run.meta, inputs, {h.name: cli_expect for h in inputs}, spool=run.dir, previous=before)
            # a re-judged stopped run is still the stopped run: never a complete baseline for drift
            run.finish(fleet, state="interrupted" if meta.get("state") == "interrupted" else "complete")
            run.publish()
        except OSError as e:
            run.discard()
            raise ResultsUnwritable(str(root), e) from None
        except BaseException:
            run.discard()
            raise
    finally:
        lock.release()
    return RunResult(run, fleet)
