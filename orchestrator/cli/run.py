"""`probe run`: the command line -> a run plan -> the run API -> tables, reports and an exit code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from orchestrator.api.errors import UsageError
from orchestrator.api.plan import DEMO_INVENTORY, PlanInputs, RunPlan, build_plan
from orchestrator.api.session import RunResult, execute
from orchestrator.cli import exitcodes, views
from orchestrator.engine.runner import DEFAULT_FORKS
from orchestrator.present.outputs.emit import OutputError, requested, write_outputs
from orchestrator.present.outputs.emit import add_arguments as add_output_arguments
from orchestrator.present.outputs.tabular import OUTPUT_FORMATS, render_findings, render_hosts
from orchestrator.present.terminal.drift import render_diff
from orchestrator.present.terminal.findings import classes_table, findings_table
from orchestrator.present.terminal.hosts import hosts_table, recap
from orchestrator.present.terminal.judged import not_judged_block
from orchestrator.present.terminal.quiet import quiet_text
from orchestrator.store import atomic
from orchestrator.store.history import (
    RunNotFound,
    RunSummary,
    load_fleet,
    parse_keep,
    previous_run,
    prune,
    resolve_run,
)
from orchestrator.store.rundir import default_results_dir
from orchestrator.transport.base import TransportOptions
from orchestrator.verdict.drift import diff_fleets


def plan_inputs(args: argparse.Namespace) -> PlanInputs:
    return PlanInputs(inventory=tuple(args.inventory or ()), limit=args.limit, playbook=args.playbook,
                      probes=tuple(args.probe or ()), expect=tuple(args.expect or ()), forks=args.forks,
                      timeout=args.timeout, become=args.become, shard=getattr(args, "shard", None))


def execute_cli(args: argparse.Namespace) -> int:
    if args.inventory is None and not args.quiet:
        print(f"no -i given: running the bundled demo fleet ({DEMO_INVENTORY})", file=sys.stderr)
    if not args.connect_timeout > 0:
        raise UsageError(f"--connect-timeout must be a positive number of seconds, got {args.connect_timeout}")
    if args.retries < 0:
        raise UsageError(f"--retries must be 0 or more, got {args.retries}")
    plan = build_plan(plan_inputs(args))
    for w in plan.warnings:
        print(f"warning: {w}", file=sys.stderr)
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
    options = {"forks": args.forks, "timeout": args.timeout, "connect_timeout": args.connect_timeout,
               "host_key_policy": args.host_key_policy, "become": args.become}
    result = execute(plan, root, topts, options, Path(args.output_dir) if args.output_dir else None,
                     show_progress=False if args.quiet else None)
    return present_run(args, root, plan, result, baseline, keep)


def present_run(args: argparse.Namespace, root: Path, plan: RunPlan, result: RunResult,
                baseline: Path | None, keep: tuple[int | None, int | None] | None) -> int:
    fleet, run_dir = result.fleet, result.run.dir
    previous = _previous_fleet(root, run_dir, baseline)  # read once: drift on screen and in --html
    emit(fleet, args, run_dir, previous)
    if args.html:
        from orchestrator.present.report import ReportError, write_report

        try:
            write_report(fleet, args.html, previous=previous)
        except (ReportError, OSError, ValueError) as e:
            print(f"probe: --html {args.html}: {e}", file=sys.stderr)
    try:
        write_outputs(fleet, check_ids=known_check_ids(fleet), **requested(args))
    except OutputError as e:
        print(f"probe: {e}", file=sys.stderr)
    if keep:
        prune(root, keep[0], keep[1], protect=tuple(p.name for p in (baseline, run_dir) if p))
    if result.interrupted:
        finished, cut, never = result.stopped_counts()
        print(f"interrupted: {finished} of {finished + cut + never} host(s) finished, {cut} cut off part-way, "
              f"{never} never started; results kept in {run_dir}", file=sys.stderr)
        return exitcodes.INTERRUPTED
    return exitcodes.for_fleet(fleet)


def results_root(args: argparse.Namespace) -> Path:
    if getattr(args, "results", None):
        return Path(args.results)
    if getattr(args, "output_dir", None):
        return Path(args.output_dir).resolve().parent
    return default_results_dir()


def known_check_ids(fleet: dict[str, Any]) -> list[str]:
    """Every finding id this run could have raised: the documented catalog plus what it did raise."""
    from orchestrator.verdict.checks import FINDING_IDS

    return sorted(set(FINDING_IDS) | {f["id"] for f in fleet["findings"]})


def _previous_fleet(root: Path, run_dir: Path, baseline: Path | None) -> dict[str, Any] | None:
    """The fleet to show drift against: --baseline, else the previous complete run of the inventory."""
    path = baseline
    if path is None:
        skipped: list[RunSummary] = []
        prev = previous_run(root, run_dir, skipped=skipped)
        for bad in skipped:
            if bad.problem:
                print(f"probe: warning: run {bad.id} is not used as the drift baseline: {bad.problem}",
                      file=sys.stderr)
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
    text = render_fleet_text(fleet, quiet=args.quiet, show=getattr(args, "show", None) or [])
    if not text:
        return  # -q on a healthy fleet: nothing at all, so cron sends no mail
    print(text)
    if previous is not None and not args.quiet:
        print("\n" + render_diff(diff_fleets(previous, fleet)), end="")
    print(f"\nrun: {run_dir}")


def render_fleet_text(fleet: dict[str, Any], quiet: bool = False, show: list[str] | None = None) -> str:
    """The terminal report, fitted to the terminal's width; with `quiet` the cron report (problem
    hosts and warn/fail findings, "" on a healthy fleet)."""
    from orchestrator.present.terminal.sections import render_views
    from orchestrator.present.terminal.width import terminal_width

    width = terminal_width()
    if quiet:
        return quiet_text(fleet, width)
    out = [hosts_table(fleet, width)]
    out.extend(render_views(fleet, show or [], width))
    ct = classes_table(fleet, width)
    if ct:
        out.append(ct)
    out.append(findings_table(fleet["findings"], "info", width))
    judged = not_judged_block(fleet, width)
    if judged:
        out.append(judged)
    if fleet.get("silenced"):
        out.append(f"{len(fleet['silenced'])} finding(s) silenced by the playbook")
    out.append(recap(fleet, width))
    return "\n\n".join(out)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run probes on the inventory's hosts and judge the results",
                       description="Run probes over SSH on every selected host, write a run directory, print "
                                   "the fleet table and findings. Without -i, runs the bundled demo fleet.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exitcodes.TABLE)
    p.add_argument("-i", "--inventory", action="append", metavar="INV",
                   help="inventory file, directory, or comma list 'h1,h2,' (repeatable; default: the demo fleet)")
    p.add_argument("-l", "--limit", metavar="PATTERN", help="host pattern as Ansible's --limit ('gpu:!gpu07', '@file')")
    p.add_argument("-p", "--playbook", metavar="PLAYBOOK",
                   help="playbook file or shipped name: audit (default), premigration, quick, fabric")
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
    views.add_show(p, suffix=" (comma list)")
    p.add_argument("--html", metavar="FILE", help="write the self-contained HTML report")
    add_output_arguments(p)  # --prometheus, --junit, ... : present/outputs/emit.py's OUTPUT_FILES
    p.add_argument("--shard", metavar="K/N", help="run only part K of N of the selected hosts (stable hash of the "
                                                  "host name; `probe merge` joins the parts; docs/scale.md)")
    p.add_argument("--baseline", metavar="RUN", help="report drift against this run (default: the previous run)")
    p.add_argument("--keep", metavar="N|Nd", help="after the run keep only N runs and/or runs younger than N days ('30,14d')")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="cron mode: problem hosts with their reason and warn/fail findings; nothing on a healthy fleet")
    p.set_defaults(func=execute_cli)


def add_slurm_drain(p: argparse.ArgumentParser) -> None:
    add_output_arguments(p, only=("slurm_drain",))
