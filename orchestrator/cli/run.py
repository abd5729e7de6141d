"""`probe run`: the command line -> a run plan -> the run API -> tables, reports and an exit code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from orchestrator.api.errors import UsageError
from orchestrator.api.plan import DEMO_INVENTORY, PlanInputs, build_plan
from orchestrator.api.session import RunResult, execute, holding
from orchestrator.cli import exitcodes, views
from orchestrator.engine.runner import DEFAULT_FORKS
from orchestrator.inventory.targets import shown
from orchestrator.present.outputs.emit import OutputError, requested, write_outputs
from orchestrator.present.outputs.emit import add_arguments as add_output_arguments
from orchestrator.present.outputs.tabular import OUTPUT_FORMATS, render_findings, render_hosts
from orchestrator.present.terminal.drift import render_diff
from orchestrator.present.terminal.findings import (
    classes_table,
    fabric_view,
    findings_table,
    hosts_view,
    notes_block,
)
from orchestrator.present.terminal.hosts import HEADERS, hosts_table, recap
from orchestrator.present.terminal.judged import not_judged_block
from orchestrator.present.terminal.quiet import quiet_text
from orchestrator.store import atomic
from orchestrator.store.history import RunNotFound, default_results_dir, parse_keep, prune, resolve_run
from orchestrator.store.lock import LockHeld
from orchestrator.transport.base import TransportOptions
from orchestrator.verdict import remedy
from orchestrator.verdict.changes import FleetDiff
from orchestrator.verdict.fabric_faults import host_findings
from orchestrator.verdict.result import FleetResult


def plan_inputs(args: argparse.Namespace) -> PlanInputs:
    return PlanInputs(inventory=tuple(args.inventory or ()), limit=args.limit, playbook=args.playbook,
                      probes=tuple(args.probe or ()), expect=tuple(args.expect or ()), forks=args.forks,
                      timeout=args.timeout, become=args.become, shard=getattr(args, "shard", None),
                      security_floor=getattr(args, "security_floor", None),
                      baseline_file=getattr(args, "baseline_file", None),
                      slurm=bool(getattr(args, "slurm", False)), k8s_nodes=getattr(args, "k8s_nodes", None))


def execute_cli(args: argparse.Namespace) -> int:
    if args.inventory is None and not args.quiet:
        print(f"no -i given: running the bundled demo fleet ({DEMO_INVENTORY})", file=sys.stderr)
    if not args.connect_timeout > 0:
        raise UsageError(f"--connect-timeout must be a positive number of seconds, got {args.connect_timeout}")
    if args.retries < 0:
        raise UsageError(f"--retries must be 0 or more, got {args.retries}")
    procs = getattr(args, "procs", None)
    if procs is not None and procs < 1:
        raise UsageError(f"--procs must be a whole number of at least 1, got {procs}")
    max_share(args)  # a bad --max-drain is a usage error before anything runs
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
                     show_progress=False if args.quiet else None, baseline=baseline, procs=procs)
    return present_run(args, root, result, keep)


def present_run(args: argparse.Namespace, root: Path, result: RunResult,
                keep: tuple[int | None, int | None] | None) -> int:
    run_dir = result.run.dir
    for w in result.baseline.warnings:
        print(f"probe: warning: {w}", file=sys.stderr)
    status = deliver(args, result.fleet, run_dir, result.drift, result.baseline.fleet)
    if keep:
        _prune(root, keep, tuple(p.name for p in (result.baseline.path, run_dir) if p))
    if result.interrupted:
        finished, cut, never = result.stopped_counts()
        print(f"interrupted: {finished} of {finished + cut + never} host(s) finished, {cut} cut off part-way, "
              f"{never} never started; results kept in {run_dir}", file=sys.stderr)
        return exitcodes.RESULTS_UNWRITABLE if status is exitcodes.RESULTS_UNWRITABLE else exitcodes.INTERRUPTED
    return status


def _prune(root: Path, keep: tuple[int | None, int | None], protect: tuple[str, ...]) -> None:
    """--keep, under the results directory's lock: a rejudge or merge reading an old run holds it."""
    try:
        with holding(root):
            prune(root, keep[0], keep[1], protect=protect)
    except LockHeld as e:
        print(f"probe: warning: nothing pruned this time ({e}); the next run prunes", file=sys.stderr)


def deliver(args: argparse.Namespace, fleet: FleetResult, run_dir: Path, drift: FleetDiff | None = None,
            previous: FleetResult | None = None) -> exitcodes.ExitStatus:
    """Show the judged fleet and write every output the command line asked for.  An output that
    cannot be written is one line naming it and why; the others are still written and the status
    is RESULTS_UNWRITABLE (73), so cron does not read a missing file as success."""
    emit(fleet, args, run_dir, drift)
    failed = write_requested(args, fleet, drift, previous)
    return exitcodes.RESULTS_UNWRITABLE if failed else exitcodes.for_fleet(fleet)


def write_requested(args: argparse.Namespace, fleet: FleetResult, drift: FleetDiff | None = None,
                    previous: FleetResult | None = None) -> int:
    """Write --html and every registered output file; how many could not be written (each said).
    `previous`: the run before this one (--k8s-out carries its conditions' transition times)."""
    failed = 0
    html = getattr(args, "html", None)
    if html:
        from orchestrator.present.report import ReportError, write_report

        try:
            write_report(fleet, html, drift)
        except (ReportError, OSError) as e:
            print(f"probe: could not write --html {html}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            failed += 1
    wanted = requested(args)
    drain = None
    if wanted.get("slurm_drain"):
        drain = remedy.drain_plan(fleet, max_share(args), bool(getattr(args, "force", False)))
        if drain.blocked:
            print(f"probe: warning: --slurm-drain {wanted['slurm_drain']}: no node drained, the list is refused: "
                  f"{drain.refusal_text()}; check the rule, then rerun with --force (or a larger --max-drain)",
                  file=sys.stderr)
        for left in drain.left_out:
            print(f"probe: warning: --slurm-drain {wanted['slurm_drain']}: {shown(left.host)} left out: {left.why}; "
                  "drain it by hand if it is a node of yours", file=sys.stderr)
    try:
        write_outputs(fleet, drain=drain, previous=previous, **wanted)
    except OutputError as e:
        for line in e.failures:
            print(f"probe: {line}", file=sys.stderr)
        failed += len(e.failures)
    return failed


def results_root(args: argparse.Namespace) -> Path:
    if getattr(args, "results", None):
        return Path(args.results)
    if getattr(args, "output_dir", None):
        return Path(args.output_dir).resolve().parent
    return default_results_dir()


def emit(fleet: FleetResult, args: argparse.Namespace, run_dir: Path, drift: FleetDiff | None = None) -> None:
    fmt = args.format
    if fmt == "json":
        sys.stdout.writelines(atomic.iter_json(fleet.to_document()))  # the C encoder, streamed: fleets get large
        sys.stdout.write("\n")
        return
    if fmt in ("yaml", "csv"):
        print(render_findings(fleet, fmt) if args.quiet else render_hosts(fleet, fmt))
        return
    from orchestrator.present.terminal.colour import wanted

    text = render_fleet_text(fleet, quiet=args.quiet, show=getattr(args, "show", None) or [],
                             by=getattr(args, "findings", None) or "hosts",
                             colour=wanted(getattr(args, "color", None) or "auto", sys.stdout),
                             full=views.full_report(args))
    if not text:
        return  # -q on a healthy fleet: nothing at all, so cron sends no mail
    print(text)
    if drift is not None and not args.quiet:
        print("\n" + render_diff(drift), end="")
    print(f"\nrun: {run_dir}")


def render_fleet_text(fleet: FleetResult, quiet: bool = False, show: list[str] | None = None,
                      by: str = "hosts", colour: bool = False, full: bool = True) -> str:
    """The terminal report, fitted to the terminal's width.  Without `full` the answer first
    (present/terminal/answer.py: RECAP, the classes, the unhealthy hosts, one line of what was not
    judged), then the `--show` views.  With `full` (-v, --hosts all, --findings checks) the hosts
    table (one line per host, health first), the `--show` views, the classes, the findings by host
    or by check, what was not judged, RECAP.  Health and severity coloured with `colour`.  With
    `quiet` the cron report (unhealthy hosts and their warn/fail faults, "" on a healthy fleet)."""
    from orchestrator.present.terminal.colour import Painter
    from orchestrator.present.terminal.sections import render_views
    from orchestrator.present.terminal.width import terminal_width

    width = terminal_width()
    if quiet:
        return quiet_text(fleet, width)
    paint = Painter(colour)
    if not full and by != "checks":
        return _answer(fleet, paint, width, show or [])
    out = [paint.column(hosts_table(fleet, width), HEADERS.index("health"))]
    out.extend(render_views(fleet, show or [], width))
    ct = classes_table(fleet, width)
    if ct:
        out.append(ct)
    if by == "checks":
        out.append(paint.faults(findings_table(host_findings(fleet.findings), "info", width)))
    else:
        out.append(paint.faults(hosts_view(fleet, width, "warn")))
    fabric = fabric_view(fleet, width, "info" if by == "checks" else "warn")
    if fabric:
        out.append(paint.faults(fabric))
    notes = notes_block(fleet, width) if by != "checks" else ""
    if notes:
        out.append(notes)
    judged = not_judged_block(fleet, width)
    if judged:
        out.append(paint.dim(judged))
    if fleet.silenced:
        out.append(f"{len(fleet.silenced)} finding(s) silenced by the playbook")
    out.append(paint.counts(recap(fleet, width)))
    return "\n\n".join(out)


def _answer(fleet: FleetResult, paint: Any, width: int | None, show: list[str]) -> str:
    """The default report: the answer first, in one screen (answer.py), then any `--show` views."""
    from orchestrator.present.terminal.answer import answer_text
    from orchestrator.present.terminal.sections import render_views

    blocks = answer_text(fleet, width, recap(fleet, width))
    out = [paint.counts(blocks[0]), *(paint.faults(b) for b in blocks[1:])]
    out.extend(render_views(fleet, show, width))
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
    p.add_argument("--procs", type=int, metavar="N",
                   help="processes the hosts are spread over, forks shared among them (default: one per core "
                        "for 100 hosts a core or more where workers can be forked, else 1; see docs/performance.md)")
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
    views.add_findings_view(p)
    views.add_color(p)
    views.add_detail(p)
    p.add_argument("--html", metavar="FILE", help="write the self-contained HTML report")
    add_output_arguments(p)  # --prometheus, --junit, ... : present/outputs/emit.py's OUTPUT_FILES
    add_guard_arguments(p)
    p.add_argument("--shard", metavar="K/N", help="run only part K of N of the selected hosts (stable hash of the "
                                                  "host name; `probe merge` joins the parts; docs/scale.md)")
    p.add_argument("--baseline", metavar="RUN", help="report drift against this run (default: the previous run)")
    add_reference_arguments(p)
    add_scheduler_arguments(p)
    p.add_argument("--keep", metavar="N|Nd", help="after the run keep only N runs and/or runs younger than N days ('30,14d')")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="cron mode: problem hosts with their reason and warn/fail findings; nothing on a healthy fleet")
    p.set_defaults(func=execute_cli)


def add_reference_arguments(p: argparse.ArgumentParser) -> None:
    """The files a run (or a rejudge) judges its hosts against, beyond their expectations."""
    p.add_argument("--security-floor", metavar="FILE",
                   help="judge every host's driver and ConnectX/BlueField firmware against this security floor "
                        "(made by tools/security_floor.py from NVIDIA's bulletins) instead of the shipped one; "
                        "sets the expectation security_floor: true for every host")
    p.add_argument("--baseline-file", metavar="FILE",
                   help="judge each topology class's measured figures against this class baseline (made by "
                        "`probe baseline RUN -o FILE` from a known-good fleet) instead of the run's own hosts")


def add_scheduler_arguments(p: argparse.ArgumentParser) -> None:
    """What the scheduler advertises, reconciled with the verdict (docs/scheduler.md); read only."""
    p.add_argument("--slurm", action="store_true",
                   help="reconcile with Slurm: read `scontrol show node -o` (Gres, State) and compare each node's "
                        "GPUs, GPU type and state with what the run found (node names: probe_slurm_node)")
    p.add_argument("--k8s-nodes", metavar="FILE|-",
                   help="reconcile with Kubernetes: read `kubectl get nodes -o json` from FILE (- for standard input) "
                        "and compare nvidia.com/gpu, GFD's product label and cordoning with what the run found "
                        "(node names: probe_k8s_node)")


def add_slurm_drain(p: argparse.ArgumentParser) -> None:
    add_output_arguments(p, only=("slurm_drain", "slurm_resume"))
    add_guard_arguments(p)


def add_guard_arguments(p: argparse.ArgumentParser) -> None:
    """The blast-radius guard of the drain list and the remediation playbook (verdict/remedy.py)."""
    p.add_argument("--max-drain", metavar="PCT", type=float, default=remedy.DEFAULT_MAX_SHARE * 100,
                   help=f"refuse a drain list or remediation that takes more than PCT %% of the fleet or of a "
                        f"topology class out of service (default {remedy.DEFAULT_MAX_SHARE * 100:g} %%; one host is "
                        "always allowed)")
    p.add_argument("--force", action="store_true",
                   help="write the drain list or remediation even where it takes more than --max-drain")


def max_share(args: argparse.Namespace) -> float:
    pct = getattr(args, "max_drain", remedy.DEFAULT_MAX_SHARE * 100)
    if not 0 < pct <= 100:
        raise UsageError(f"--max-drain must be a percentage above 0 and at most 100, got {pct:g}")
    return float(pct) / 100.0
