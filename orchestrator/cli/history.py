"""`probe runs`, `show`, `diff`, `rejudge`, `playbooks`: working with stored runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tabulate import tabulate

from orchestrator.api.errors import UsageError
from orchestrator.api.playbook import shipped_playbooks
from orchestrator.api.session import rejudge
from orchestrator.cli import exitcodes, views
from orchestrator.cli.run import emit, results_root
from orchestrator.present.outputs.tabular import OUTPUT_FORMATS, render_rows, run_rows
from orchestrator.present.terminal.drift import render_diff
from orchestrator.store.history import (
    RunNotFound,
    diff_pair,
    list_runs,
    load_fleet,
    previous_run,
    resolve_run,
)
from orchestrator.verdict.drift import diff_fleets


def _resolve(args: argparse.Namespace, ref: str | None) -> Path:
    try:
        return resolve_run(results_root(args), ref)
    except RunNotFound as e:
        raise UsageError(str(e)) from None


def _fleet(path: Path) -> dict[str, Any]:
    try:
        return load_fleet(path)
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: no readable fleet.json ({e}); try `probe rejudge {path.name}` to rebuild it") from None


def cmd_runs(args: argparse.Namespace) -> int:
    rows = run_rows(list_runs(results_root(args)))
    if args.format == "table":
        if not rows:
            print(f"no runs under {results_root(args)}")
            return 0
        print(tabulate([list(r.values()) for r in rows], headers=list(rows[0].keys())))
    else:
        print(render_rows(rows, args.format))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    run_dir = _resolve(args, args.run)
    emit(_fleet(run_dir), args, run_dir)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    try:
        a, b = diff_pair(results_root(args), args.a, args.b)
    except RunNotFound as e:
        raise UsageError(str(e)) from None
    d = diff_fleets(_fleet(a), _fleet(b), bw_tolerance=args.tolerance)
    if args.format == "json":
        print(json.dumps(d.to_dict(), indent=1, default=str))
    else:
        print(render_diff(d), end="")
    return 0


def cmd_rejudge(args: argparse.Namespace) -> int:
    """Stored raw envelopes -> today's normalization and checks, under the run's own plan (or -p /
    --expect) -> a new run, with the exit status the run itself would have had."""
    result = rejudge(_resolve(args, args.run), results_root(args), playbook=args.playbook, expect=args.expect)
    emit(result.fleet, args, result.run.dir)
    return exitcodes.for_fleet(result.fleet)


def cmd_report(args: argparse.Namespace) -> int:
    from orchestrator.present.report import ReportError, write_report

    run_dir = _resolve(args, args.run)
    fleet = _fleet(run_dir)
    prev_dir = _resolve(args, args.previous) if args.previous else None
    if prev_dir is None:
        prev = previous_run(results_root(args), run_dir)
        prev_dir = prev.path if prev else None
    try:
        out = write_report(fleet, args.output, previous=_fleet(prev_dir) if prev_dir else None,
                           max_pictures=args.max_pictures)
    except ReportError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from None
    print(f"report: {out}")
    return 0


def cmd_playbooks(args: argparse.Namespace) -> int:
    print(tabulate([[n, str(p), d] for n, p, d in shipped_playbooks()], headers=["playbook", "file", "what it does"]))
    return 0


def _results_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", metavar="DIR", help="results directory (default ~/.local/state/fleetprobe/runs)")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("runs", help="list stored runs")
    _results_opt(p)
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("show", help="re-render a stored run's tables (default: the latest)")
    p.add_argument("run", nargs="?", help="run id, id prefix, 'latest', -1, -2 or a run directory")
    _results_opt(p)
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table")
    views.add_show(p)
    p.add_argument("-q", "--quiet", action="store_true", help="only warn/fail findings")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("diff", help="what changed between two runs (default: the last two of one inventory)")
    p.add_argument("a", nargs="?", help="older run")
    p.add_argument("b", nargs="?", help="newer run")
    _results_opt(p)
    p.add_argument("--tolerance", type=float, default=0.10, help="bandwidth change ignored below this fraction")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("rejudge", help="re-run normalization and checks on a stored run's raw data (writes a new run)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exitcodes.TABLE)
    p.add_argument("run", help="run to re-judge")
    _results_opt(p)
    p.add_argument("-p", "--playbook", help="judge with this playbook's expectations and overrides instead "
                                            "(a file or a shipped name: audit, premigration, quick, fabric)")
    p.add_argument("--expect", action="append", metavar="KEY=VALUE",
                   help="judge every host against these instead of the run's own --expect")
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_rejudge, show=[])

    p = sub.add_parser("report", help="write the self-contained HTML report of a run (default: the latest)")
    p.add_argument("run", nargs="?", help="run id, 'latest', -1, or a run directory")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--previous", metavar="RUN", help="run to show drift against (default: the run before)")
    p.add_argument("--max-pictures", type=int, default=100, help="hosts drawn with pictures (default 100)")
    _results_opt(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("playbooks", help="list the shipped playbooks")
    p.set_defaults(func=cmd_playbooks)
