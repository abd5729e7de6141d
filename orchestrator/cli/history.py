"""`probe runs`, `show`, `diff`, `rejudge`, `playbooks`: working with stored runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tabulate import tabulate

from orchestrator.api.errors import UsageError
from orchestrator.api.playbook import shipped_playbooks
from orchestrator.api.session import rejudge
from orchestrator.api.stored import load_result
from orchestrator.cli import exitcodes, views
from orchestrator.cli.run import add_reference_arguments, deliver, emit, results_root
from orchestrator.files import jsontext
from orchestrator.present.outputs.tabular import OUTPUT_FORMATS, render_rows, run_rows
from orchestrator.present.terminal.drift import render_diff
from orchestrator.store.history import (
    RunNotFound,
    diff_pair,
    list_runs,
    previous_run,
    resolve_run,
)
from orchestrator.verdict.drift import diff_fleets
from orchestrator.verdict.result import FleetResult


def stored_run(args: argparse.Namespace, ref: str | None) -> Path:
    try:
        return resolve_run(results_root(args), ref)
    except RunNotFound as e:
        raise UsageError(str(e)) from None


def stored_fleet(path: Path) -> FleetResult:
    try:
        fleet = load_result(path)
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: no readable fleet.json ({e}); try `probe rejudge {path.name}` to rebuild it") from None
    for why in fleet.problems[:5]:
        print(f"probe: warning: {path.name}: fleet.json: {why}", file=sys.stderr)
    if len(fleet.problems) > 5:
        print(f"probe: warning: {path.name}: fleet.json: {len(fleet.problems) - 5} more thing(s) left out",
              file=sys.stderr)
    return fleet


def cmd_runs(args: argparse.Namespace) -> int:
    rows = run_rows(list_runs(results_root(args)))
    if args.format == "table":
        if not rows:
            print(f"no runs under {results_root(args)}")
            return 0
        from orchestrator.present.terminal.text import clean
        from orchestrator.present.terminal.width import fit_table, terminal_width

        cells = [["" if v is None else clean(v, 400) for v in r.values()] for r in rows]
        print(fit_table(cells, list(rows[0].keys()), terminal_width(), drop_before_wrap=True,
                        droppable=("limit", "inventory", "skipped", "interrupted", "unsupported", "started", "problem",
                                   "info", "ok", "probes_failed", "incomplete", "unreachable", "degraded", "warn",
                                   "hosts", "healthy"),
                        fixed=("id", "state")))
    else:
        print(render_rows(rows, args.format))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    run_dir = stored_run(args, args.run)
    emit(stored_fleet(run_dir), args, run_dir)
    return exitcodes.OK


def cmd_diff(args: argparse.Namespace) -> int:
    try:
        a, b = diff_pair(results_root(args), args.a, args.b)
    except RunNotFound as e:
        raise UsageError(str(e)) from None
    d = diff_fleets(stored_fleet(a), stored_fleet(b), bw_tolerance=args.tolerance)
    if args.format == "json":
        print(jsontext.dumps(d.to_dict(), indent=1, default=str))
    else:
        print(render_diff(d), end="")
    return 0


def cmd_rejudge(args: argparse.Namespace) -> int:
    """Stored raw envelopes -> today's normalization and checks, under the run's own plan (or -p /
    --expect) -> a new run, with the exit status the run itself would have had."""
    result = rejudge(stored_run(args, args.run), results_root(args), playbook=args.playbook, expect=args.expect,
                     security_floor=args.security_floor, baseline_file=args.baseline_file)
    meta = result.run.meta
    if meta.what_if:  # said once, where it is made: the history passes over it from now on
        print(f"probe: {meta.id} is a what-if of {meta.rejudged_from} (judged under other "
              f"{', '.join(meta.what_if)}): later runs, `probe diff` and reports do not compare with it "
              "unless it is named", file=sys.stderr)
    return deliver(args, result.fleet, result.run.dir)


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.present.report import ReportError, write_report

    run_dir = stored_run(args, args.run)
    fleet = stored_fleet(run_dir)
    prev_dir = stored_run(args, args.previous) if args.previous else None
    if prev_dir is None:
        prev = previous_run(results_root(args), run_dir)
        prev_dir = prev.path if prev else None
    drift = diff_fleets(stored_fleet(prev_dir), fleet) if prev_dir else None
    try:
        out = write_report(fleet, args.output, drift, max_pictures=args.max_pictures)
    except ReportError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        print(f"probe: could not write -o {args.output}: {e.strerror or e}", file=sys.stderr)
        return exitcodes.RESULTS_UNWRITABLE
    print(f"report: {out}")
    return exitcodes.OK


def cmd_playbooks(args: argparse.Namespace) -> int:
    print(tabulate([[n, str(p), d] for n, p, d in shipped_playbooks()], headers=["playbook", "file", "what it does"]))
    return 0


def results_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", metavar="DIR", help="results directory (default ~/.local/state/fleetprobe/runs)")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("runs", help="list stored runs")
    results_option(p)
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("show", help="re-render a stored run's tables (default: the latest)")
    p.add_argument("run", nargs="?", help="run id, id prefix, 'latest', -1, -2 or a run directory")
    results_option(p)
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table")
    views.add_show(p)
    views.add_findings_view(p)
    views.add_color(p)
    views.add_detail(p)
    p.add_argument("-q", "--quiet", action="store_true", help="only unhealthy hosts with their warn/fail faults")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("diff", help="what changed between two runs (default: the last two of one inventory)")
    p.add_argument("a", nargs="?", help="older run")
    p.add_argument("b", nargs="?", help="newer run")
    results_option(p)
    p.add_argument("--tolerance", type=float, default=0.10, help="bandwidth change ignored below this fraction")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("rejudge", help="re-run normalization and checks on a stored run's raw data (writes a new run)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exitcodes.TABLE)
    p.add_argument("run", help="run to re-judge")
    results_option(p)
    p.add_argument("-p", "--playbook", help="judge with this playbook's expectations and overrides instead "
                                            "(a file or a shipped name: audit, premigration, quick, fabric)")
    p.add_argument("--expect", action="append", metavar="KEY=VALUE",
                   help="judge every host against these instead of the run's own --expect")
    add_reference_arguments(p)
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table")
    p.add_argument("-q", "--quiet", action="store_true")
    views.add_color(p)
    views.add_detail(p)
    p.set_defaults(func=cmd_rejudge, show=[])

    p = sub.add_parser("report", help="write the self-contained HTML report of a run (default: the latest)")
    p.add_argument("run", nargs="?", help="run id, 'latest', -1, or a run directory")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--previous", metavar="RUN", help="run to show drift against (default: the run before)")
    p.add_argument("--max-pictures", type=int, default=100, help="hosts drawn with pictures (default 100)")
    results_option(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("playbooks", help="list the shipped playbooks")
    p.set_defaults(func=cmd_playbooks)
