"""`probe run`: inventory -> probes on every host -> run directory -> tables and exit code."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.api.playbook import Override, Play, Playbook, PlaybookError, find_playbook, load_playbook
from orchestrator.cli import exitcodes
from orchestrator.engine import payload as probes
from orchestrator.engine.runner import (
    DEFAULT_FORKS,
    HostResult,
    ProbeCall,
    RunInterrupted,
    RunOptions,
    run_fleet,
)
from orchestrator.inventory.model import Host, Inventory
from orchestrator.present.outputs.emit import OutputError, write_outputs
from orchestrator.present.outputs.tabular import OUTPUT_FORMATS, render_findings, render_hosts
from orchestrator.present.progress import Fanout, Progress
from orchestrator.present.terminal.findings import classes_table, findings_table
from orchestrator.present.terminal.hosts import hosts_table, recap
from orchestrator.store import atomic
from orchestrator.store.history import RunNotFound, load_fleet, parse_keep, previous_run, prune, resolve_run
from orchestrator.store.lock import LockHeld, RunLock
from orchestrator.store.rundir import (
    RunWriter,
    default_results_dir,
    host_input_from_result,
    redact_message,
    release_envelope_data,
)
from orchestrator.transport.base import TransportOptions
from orchestrator.transport.factory import open_transport
from orchestrator.verdict.drift import diff_fleets, render_diff
from orchestrator.verdict.expectations import ExpectationError, Expectations
from orchestrator.verdict.judge import HostInput, build_fleet

DEMO_INVENTORY = Path(__file__).resolve().parent.parent / "demo" / "inventory.yml"


class UsageError(Exception):
    """A user's mistake: printed as one line, exit code 2."""


def load_hosts(sources: list[str] | None, limit: str | None) -> tuple[Inventory, list[Host]]:
    from orchestrator.inventory import InventoryError
    from orchestrator.inventory.loader import load_inventory
    from orchestrator.inventory.patterns import select_hosts

    warnings: list[str] = []
    try:
        inv = load_inventory(sources or [str(DEMO_INVENTORY)])
        hosts = select_hosts(inv, limit, warnings)
    except InventoryError as e:
        raise UsageError(redact_message(str(e))) from None
    for w in [*inv.warnings, *warnings]:
        print(f"warning: {redact_message(w)}", file=sys.stderr)
    if not hosts:
        raise UsageError("the inventory has no hosts" + (f" matching --limit {limit!r}" if limit else ""))
    return inv, hosts


def parse_expect_args(items: list[str]) -> Expectations:
    raw: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--expect takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        raw[k.strip()] = json.loads(v) if v.strip() in ("true", "false") or v.strip().lstrip("-").replace(".", "", 1).isdigit() else v
    try:
        return Expectations.from_mapping(raw, where="--expect")
    except ExpectationError as e:
        raise UsageError(str(e)) from None


def host_expectations(name: str, vars: dict[str, Any], override: Expectations) -> Expectations:
    """The host's `probe_expect` (inventory vars, or the vars stored with a run) under `override`."""
    try:
        base = Expectations.from_mapping(vars.get("probe_expect"), where=f"host {name}: probe_expect")
    except ExpectationError as e:
        raise UsageError(str(e)) from None
    return base.merged(override)


def expectations_for_hosts(hosts: list[Host], override: Expectations) -> dict[str, Expectations]:
    return {h.name: host_expectations(h.name, h.vars, override) for h in hosts}


# Probe arguments are embedded in the script as JSON.  YAML aliases share objects, so a few hundred
# bytes of playbook can stand for billions of values (or contain themselves): count before encoding.
MAX_ARG_VALUES = 100_000


def _args_problem(args: Any) -> str | None:
    seen = 0
    stack: list[tuple[Any, tuple[int, ...]]] = [(args, ())]
    while stack:
        value, parents = stack.pop()
        seen += 1
        if seen > MAX_ARG_VALUES:
            return f"expand to more than {MAX_ARG_VALUES:,} values (a YAML alias bomb?)"
        if isinstance(value, (dict, list)):
            if id(value) in parents:
                return "contain themselves (a recursive YAML alias)"
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, (*parents, id(value))) for v in items)
    return None


def probe_calls(steps: list[tuple[str, dict[str, Any], float]], where: str = "playbook") -> list[ProbeCall]:
    calls = []
    for name, args, timeout in steps:
        try:
            probes.get(name)
        except probes.UnknownProbe as e:
            raise UsageError(str(e.args[0])) from None
        problem = _args_problem(args)
        if problem:
            raise UsageError(f"{where}: the args of probe {name!r} {problem}; refusing to run it")
        calls.append(ProbeCall(name, dict(args), timeout))
    return calls


@dataclass
class PlannedPlay:
    play: Play
    hosts: list[Host]
    calls: list[ProbeCall]
    forks: int
    become: bool


def load_play_plan(args: argparse.Namespace, inv: Inventory, limited: list[Host]) -> tuple[Playbook, list[PlannedPlay]]:
    from orchestrator.inventory import InventoryError
    from orchestrator.inventory.patterns import select_hosts

    try:
        book = load_playbook(find_playbook(args.playbook))
    except PlaybookError as e:
        # PyYAML's errors quote the offending line with a caret underneath: keep the first line
        raise UsageError(str(e).strip().splitlines()[0]) from None
    allowed = {h.name for h in limited}
    plan = []
    for play in book.plays:
        try:
            hosts = [h for h in select_hosts(inv, play.hosts) if h.name in allowed]
        except InventoryError:
            hosts = []  # a play for a group this inventory lacks simply has nothing to do
        steps: list[tuple[str, dict[str, Any], float]]
        if args.probe:
            steps = [(n, {}, args.timeout) for n in args.probe]
        else:
            steps = [(s.name, s.args, s.timeout or args.timeout) for s in play.probes]
        plan.append(PlannedPlay(play, hosts, probe_calls(steps, str(book.path)), play.forks or args.forks, play.become or args.become))
    if not any(p.hosts for p in plan):
        raise UsageError(f"no play of {book.path} selects any of the {len(limited)} host(s) of the inventory/limit")
    return book, plan


def _install_sigterm() -> None:
    if threading.current_thread() is threading.main_thread():
        def raise_interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt()
        signal.signal(signal.SIGTERM, raise_interrupt)


def results_root(args: argparse.Namespace) -> Path:
    if getattr(args, "results", None):
        return Path(args.results)
    if getattr(args, "output_dir", None):
        return Path(args.output_dir).resolve().parent
    return default_results_dir()


def execute(args: argparse.Namespace) -> int:
    if args.inventory is None and not args.quiet:
        print(f"no -i given: running the bundled demo fleet ({DEMO_INVENTORY})", file=sys.stderr)
    inv, hosts = load_hosts(args.inventory, args.limit)
    override = parse_expect_args(args.expect or [])
    book, plan = load_play_plan(args, inv, hosts)
    inventory_expect = expectations_for_hosts(hosts, Expectations())
    expectations: dict[str, Expectations] = {}
    overrides: dict[str, dict[str, Override]] = {}
    for pp in plan:
        for h in pp.hosts:
            expectations[h.name] = inventory_expect[h.name].merged(pp.play.expect).merged(override)
            overrides.setdefault(h.name, {}).update(pp.play.findings)
    root = results_root(args)
    keep = None
    if args.keep:
        try:
            keep = parse_keep(args.keep)
        except ValueError as e:
            raise UsageError(f"--keep: {e}") from None
    baseline = None
    if args.baseline:
        try:
            baseline = resolve_run(root, args.baseline)
        except RunNotFound as e:
            raise UsageError(f"--baseline: {e}") from None
    topts = TransportOptions(connect_timeout=args.connect_timeout, command_timeout=args.timeout,
                             host_key_policy=args.host_key_policy, retries=args.retries,
                             known_hosts=args.known_hosts, ssh_config=args.ssh_config)
    ordered = [h for h in hosts if h.name in expectations]
    meta = {
        "inventory": list(inv.sources),
        "limit": args.limit,
        "playbook": str(book.path),
        "probes": sorted({c.name for pp in plan for c in pp.calls}),
        "options": {"forks": args.forks, "timeout": args.timeout, "connect_timeout": args.connect_timeout,
                    "host_key_policy": args.host_key_policy, "become": args.become},
        "hosts_order": [h.name for h in ordered],
    }
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = RunLock(root)
        lock.acquire()
    except LockHeld as e:
        print(f"probe: {e}", file=sys.stderr)
        return exitcodes.LOCKED
    except OSError as e:
        raise UsageError(f"cannot use the results directory {root}: {e.strerror or e}; choose another with --results") from None
    try:
        return _run_locked(args, root, meta, plan, ordered, expectations, overrides, topts, baseline, keep)
    finally:
        lock.release()


def _run_locked(args: argparse.Namespace, root: Path, meta: dict[str, Any], plan: list[PlannedPlay],
                ordered: list[Host], expectations: dict[str, Expectations],
                overrides: dict[str, dict[str, Override]], topts: TransportOptions,
                baseline: Path | None, keep: tuple[int | None, int | None] | None) -> int:
    try:
        writer = RunWriter.create(root, meta, Path(args.output_dir) if args.output_dir else None)
    except OSError as e:
        raise UsageError(f"cannot create the run directory under {root}: {e.strerror or e}; "
                         "choose another with --results or -o") from None
    progress = Progress(len(ordered), enabled=False if args.quiet else None)
    _install_sigterm()
    merged: dict[str, HostResult] = {}
    interrupted = False
    stop = threading.Event()
    store = _StoreOrStop(writer, stop)
    try:
        for pp in plan:
            if not pp.hosts:
                continue
            options = RunOptions(forks=pp.forks, transport=topts, become=pp.become)
            try:
                results = run_fleet(pp.hosts, pp.calls, options, open_transport, Fanout(store, progress), stop)
            except RunInterrupted as e:
                results = e.results
                interrupted = True
            if store.error is not None:
                return _results_unwritable(writer, store.error)
            for r in results:
                if r.host.name in merged:
                    merged[r.host.name].probes.update(r.probes)
                else:
                    merged[r.host.name] = r
            if interrupted:
                break
    finally:
        progress.close()
    inputs = [host_input_from_result(merged[h.name], writer.dir) for h in ordered if h.name in merged]
    fleet = judge(writer.meta, inputs, expectations, overrides, spool=writer.dir)
    try:
        writer.finish(fleet, state="interrupted" if interrupted else "complete")
    except OSError as e:
        return _results_unwritable(writer, e)
    previous = _previous_fleet(root, writer.dir, baseline)  # read once: drift on screen and in --html
    emit(fleet, args, writer.dir, previous)
    if args.html:
        from orchestrator.present.report import ReportError, write_report

        try:
            write_report(fleet, args.html, previous=previous)
        except (ReportError, OSError, ValueError) as e:
            print(f"probe: --html {args.html}: {e}", file=sys.stderr)
    try:
        write_outputs(fleet, prometheus=args.prometheus, junit=args.junit, ansible_inventory=args.ansible_inventory,
                      check_ids=known_check_ids(fleet))
    except OutputError as e:
        print(f"probe: {e}", file=sys.stderr)
    if keep:
        prune(root, keep[0], keep[1], protect=tuple(p.name for p in (baseline, writer.dir) if p))
    if interrupted:
        print(f"interrupted: {len(inputs)} host results kept in {writer.dir}", file=sys.stderr)
        return exitcodes.INTERRUPTED
    return exitcodes.for_fleet(fleet)


# EX_CANTCREAT from sysexits.h: the run could not store its results (disk full, read-only, quota).


class _StoreOrStop:
    """The run-directory writer as an event sink: the first write that fails (disk full, read-only
    remount, quota) stops the run, since nothing more it learns could be kept."""

    def __init__(self, writer: RunWriter, stop: threading.Event) -> None:
        self.writer = writer
        self.stop = stop
        self.error: OSError | None = None

    def host_finished(self, res: HostResult) -> None:
        if self.error is not None:
            return
        try:
            self.writer.host_finished(res)
        except OSError as e:
            self.error = e
            self.stop.set()
            return
        release_envelope_data(res)  # on disk now: judged from there, not held for the whole run


def _results_unwritable(writer: RunWriter, error: OSError) -> int:
    try:
        writer.mark("failed")  # a small file; on a full disk it may not fit either
    except OSError:
        pass
    print(f"probe: cannot write the results to {writer.dir}: {error.strerror or error}; the run was stopped "
          f"(files already there are complete). Free space or choose another directory with --results",
          file=sys.stderr)
    return exitcodes.RESULTS_UNWRITABLE


def known_check_ids(fleet: dict[str, Any]) -> list[str]:
    """Every finding id this run could have raised: the documented catalog plus what it did raise."""
    from orchestrator.verdict.checks import FINDING_IDS

    return sorted(set(FINDING_IDS) | {f["id"] for f in fleet["findings"]})


def judge(meta: dict[str, Any], inputs: list[HostInput], expectations: dict[str, Expectations],
          overrides: dict[str, dict[str, Override]] | None = None, spool: Path | None = None) -> dict[str, Any]:
    """The run's fleet document.  `spool`: where a big fleet's host records wait on disk (the run
    directory; see orchestrator/verdict/parallel.py)."""
    run = {k: meta.get(k) for k in ("id", "started", "finished", "inventory", "playbook", "probes", "limit", "user")}
    table = overrides or {}
    return build_fleet(run, inputs, lambda h: expectations.get(h.name, Expectations()),
                       lambda host: table.get(host, {}), spool=spool)


def _previous_fleet(root: Path, run_dir: Path, baseline: Path | None) -> dict[str, Any] | None:
    """The fleet to show drift against: --baseline, else the previous complete run of the inventory."""
    path = baseline
    if path is None:
        prev = previous_run(root, run_dir)
        path = prev.path if prev else None
    if path is None:
        return None
    try:
        return load_fleet(path)
    except RunNotFound as e:
        print(f"probe: no drift shown: {e}", file=sys.stderr)
        return None


def emit(fleet: dict[str, Any], args: argparse.Namespace, run_dir: Path,
         previous: dict[str, Any] | None = None) -> None:
    fmt = args.format
    if fmt == "json":
        sys.stdout.writelines(atomic.iter_json(fleet))  # the C encoder, streamed: fleets get large
        sys.stdout.write("\n")
        return
    if fmt in ("yaml", "csv"):
        print(render_findings(fleet, fmt) if args.quiet else render_hosts(fleet, fmt))
        return
    print(render_fleet_text(fleet, quiet=args.quiet, show=getattr(args, "show", None) or []))
    if previous is not None and not args.quiet:
        d = diff_fleets(previous, fleet)
        since = (previous.get("run") or {}).get("id") or "the previous run"
        print(f"\ndrift since {since}:\n" + (render_diff(d) if d.changes else "  no change"))
    print(f"\nrun: {run_dir}")


def render_fleet_text(fleet: dict[str, Any], quiet: bool = False, show: list[str] | None = None) -> str:
    out = []
    if not quiet:
        out.append(hosts_table(fleet))
        for section in show or []:
            out.extend(render_section(fleet, section))
        ct = classes_table(fleet)
        if ct:
            out.append(ct)
    out.append(findings_table(fleet["findings"], "warn" if quiet else "info"))
    if fleet.get("silenced"):
        out.append(f"{len(fleet['silenced'])} finding(s) silenced by the playbook")
    out.append(recap(fleet))
    return "\n\n".join(out)


def render_section(fleet: dict[str, Any], section: str) -> list[str]:
    """Per-host detail views (`--show pcie,gpus,topo,nvlink,p2p`)."""
    from orchestrator.present.terminal import sections

    out = []
    for rec in fleet["hosts"]:
        text = sections.render(section, rec)
        if text:
            out.append(f"== {rec['name']}: {section}\n{text}")
    return out


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run probes on the inventory's hosts and judge the results",
                       description="Run probes over SSH on every selected host, write a run directory, print "
                                   "the fleet table and findings. Without -i, runs the bundled demo fleet.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exitcodes.TABLE)
    p.add_argument("-i", "--inventory", action="append", metavar="INV",
                   help="inventory file, directory, or comma list 'h1,h2,' (repeatable; default: the demo fleet)")
    p.add_argument("-l", "--limit", metavar="PATTERN", help="host pattern as Ansible's --limit ('gpu:!gpu07', '@file')")
    p.add_argument("-p", "--playbook", metavar="PLAYBOOK",
                   help="playbook file or shipped name: audit (default), premigration, quick")
    p.add_argument("--probe", action="append", metavar="NAME", help="run only these probes (repeatable; overrides the playbook's)")
    p.add_argument("-f", "--forks", type=int, default=DEFAULT_FORKS,
                   help=f"hosts probed at once (default {DEFAULT_FORKS}; see docs/performance.md)")
    p.add_argument("-t", "--timeout", type=float, default=60.0, help="seconds per probe (default 60)")
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to connect and log in (default 10)")
    p.add_argument("--host-key-policy", choices=["strict", "accept-new", "off"], default="strict",
                   help="SSH host key checking, as OpenSSH's StrictHostKeyChecking (default strict)")
    p.add_argument("--retries", type=int, default=2, help="connection retries with jitter, refused/dropped only (default 2)")
    p.add_argument("--known-hosts", metavar="FILE", help="known_hosts file (default: ~/.ssh/config's, else ~/.ssh/known_hosts)")
    p.add_argument("--ssh-config", metavar="FILE", help="ssh config file instead of ~/.ssh/config (like ssh -F)")
    p.add_argument("-b", "--become", action="store_true", help="run probes with sudo -n (fails fast without NOPASSWD)")
    p.add_argument("--expect", action="append", metavar="KEY=VALUE", help="expectation for every host, e.g. gpu_count=8")
    p.add_argument("--results", metavar="DIR", help="results directory holding all runs (default ~/.local/state/fleetprobe/runs)")
    p.add_argument("-o", "--output-dir", metavar="DIR", help="write this run exactly here")
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table",
                   help="stdout: table (default), json (fleet.json), yaml/csv (hosts; findings with -q)")
    p.add_argument("--show", type=lambda v: [x.strip() for x in v.split(",") if x.strip()], default=[],
                   metavar="VIEWS", help="per-host detail views: pcie, gpus, topo, nvlink, p2p (comma list)")
    p.add_argument("--html", metavar="FILE", help="write the self-contained HTML report")
    p.add_argument("--prometheus", metavar="FILE", help="write a Prometheus textfile-collector file")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML (one test case per host x check)")
    p.add_argument("--ansible-inventory", metavar="FILE", help="write an Ansible inventory grouping hosts by class/finding")
    p.add_argument("--baseline", metavar="RUN", help="report drift against this run (default: the previous run)")
    p.add_argument("--keep", metavar="N|Nd", help="after the run keep only N runs and/or runs younger than N days ('30,14d')")
    p.add_argument("-q", "--quiet", action="store_true", help="only findings of severity warn/fail and errors")
    p.set_defaults(func=execute)
