"""`probe bundle`, `probe import` of bundle outputs and Ansible jobs, `probe merge`: fleetprobe on
engines other than its own (Slurm, Ansible/AWX, several controllers).  docs/scale.md says when to
use which."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from orchestrator.api.errors import UsageError
from orchestrator.api.plan import PlanInputs
from orchestrator.api.session import RunResult
from orchestrator.cli import exitcodes, views
from orchestrator.cli.run import deliver, results_root
from orchestrator.facts.textsafe import one_line
from orchestrator.store import atomic


def cmd_bundle(args: argparse.Namespace) -> int:
    from orchestrator.api.collected import bundle_script

    inputs = PlanInputs(inventory=tuple(args.inventory or ()), playbook=args.playbook, probes=tuple(args.probe or ()),
                        expect=tuple(args.expect or ()), timeout=args.timeout)
    made = bundle_script(inputs, args.host)
    for w in made.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.output in (None, "-"):
        return _to_stdout(made.script)
    try:
        atomic.write_output(Path(args.output), made.script)
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from None
    names = ", ".join(c.name for c in made.calls)
    print(f"bundle: {args.output} ({len(made.script):,} bytes; probes {names}); on a host: "
          f"python3 -I -S - < {args.output} > HOST.json; then: probe import DIR", file=sys.stderr)
    return exitcodes.OK


def _to_stdout(script: bytes) -> exitcodes.ExitStatus:
    """The bundle on stdout, whole, or one line saying why not and RESULTS_UNWRITABLE (73): a bundle
    cut short is no bundle (a closed stdout, a full device, a reader that closed the pipe early)."""
    out = sys.stdout
    if out is None:  # started with stdout closed (`>&-`): Python gives no stream at all
        why = "stdout is closed"
    else:
        try:
            out.flush()
            out.buffer.write(script)
            out.flush()
            return exitcodes.OK
        except BrokenPipeError:
            why = "the reader closed the pipe before the whole bundle was written"
        except (OSError, ValueError) as e:  # ENOSPC (/dev/full), EBADF, a stream already closed
            why = getattr(e, "strerror", None) or str(e)
        _drop_unwritten(out)
    print(f"probe: cannot write the bundle to stdout: {why}; what reached it, if anything, is no bundle: give "
          "-o FILE, or a stdout that takes it whole", file=sys.stderr)
    return exitcodes.RESULTS_UNWRITABLE


def _drop_unwritten(out: Any) -> None:
    """Point stdout at /dev/null: what is left in its buffer would fail again as the interpreter
    exits (a second message, and status 120 instead of ours)."""
    import os

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, out.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


def present(args: argparse.Namespace, result: RunResult, warnings: list[str]) -> int:
    for w in warnings:  # they quote what documents, file names and stored runs hand over: one safe line each
        print(f"warning: {one_line(w)}", file=sys.stderr)
    return deliver(args, result.fleet, result.run.dir, result.drift, result.baseline.fleet)


def cmd_import_collected(args: argparse.Namespace) -> int:
    """`probe import` of bundle documents (files/directories) or of an ansible-runner job."""
    from orchestrator.present.progress import Steps

    inventory = tuple(args.inventory or ())
    expect = tuple(args.expect) if args.expect else None
    if args.ansible_runner and args.files:
        raise UsageError("give either --ansible-runner DIR or bundle output files, not both")
    steps = Steps("import", enabled=False if args.quiet else None)
    step = steps.step if steps.enabled else None  # None: the reading workers are waited for without a clock
    try:
        if args.ansible_runner:
            from orchestrator.api.ansible_job import import_runner_artifacts

            result, warnings = import_runner_artifacts(Path(args.ansible_runner), results_root(args), inventory,
                                                       args.playbook, expect, steps.step)
        else:
            from orchestrator.api.collected import import_documents

            result, warnings = import_documents([Path(f) for f in args.files], results_root(args), inventory,
                                                args.playbook, None, expect, step)
    finally:
        steps.close()
    return present(args, result, warnings)


def cmd_merge(args: argparse.Namespace) -> int:
    from orchestrator.api.merge import merge_runs
    from orchestrator.present.progress import Steps
    from orchestrator.store.history import RunNotFound, resolve_run

    root = results_root(args)
    try:
        sources = [resolve_run(root, ref) for ref in args.runs]
    except RunNotFound as e:
        raise UsageError(str(e)) from None
    steps = Steps("merge", enabled=False if args.quiet else None)
    try:
        result, warnings = merge_runs(sources, root, steps.step)
    finally:
        steps.close()
    return present(args, result, warnings)


def add_parsers(sub: Any) -> None:
    from orchestrator.present.outputs.tabular import OUTPUT_FORMATS

    p = sub.add_parser("bundle", help="write the self-contained script a run pipes to a host (for srun, Ansible, cron)",
                       description="Write the exact script `probe run` pipes to a host: the bundle runner, the "
                                   "probes and their arguments.  `python3 -I -S - < FILE` on any host prints one "
                                   "JSON document (with the host's identity: hostname, Slurm node name); "
                                   "`probe import` judges any number of them like a live run.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exitcodes.TABLE)
    p.add_argument("-p", "--playbook", metavar="PLAYBOOK", help="playbook file or shipped name (default audit)")
    p.add_argument("--probe", action="append", metavar="NAME", help="only these probes (repeatable)")
    p.add_argument("--expect", action="append", metavar="KEY=VALUE",
                   help="expectation for every host, carried in the bundle and used by `probe import`")
    p.add_argument("-t", "--timeout", type=float, default=60.0, help="seconds per probe (default 60)")
    p.add_argument("-i", "--inventory", action="append", metavar="INV",
                   help="with --host: the inventory the host is in (its plays and probe arguments)")
    p.add_argument("--host", metavar="NAME", help="write the bundle of this inventory host (its probe_root, probe_args)")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write it (default: stdout)")
    p.set_defaults(func=cmd_bundle)

    p = sub.add_parser("merge", help="join runs (shards, AWX slices, Slurm jobs) into one run, fleet-wide checks redone",
                       description="Make one run of several: every host's stored judgement is kept, the fleet-wide "
                                   "steps (duplicate identities, topology classes and outliers) are judged again "
                                   "across all of them.  A host in two runs is an error.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exitcodes.TABLE)
    p.add_argument("runs", nargs="+", metavar="RUN", help="run ids, prefixes or directories")
    p.add_argument("--results", metavar="DIR", help="results directory (default ~/.local/state/fleetprobe/runs)")
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table")
    p.add_argument("-q", "--quiet", action="store_true")
    from orchestrator.cli.run import add_slurm_drain

    add_slurm_drain(p)
    views.add_color(p)
    views.add_detail(p)
    p.set_defaults(func=cmd_merge, show=[], output_dir=None)
    add_collection_parser(sub)


def cmd_ansible_collection(args: argparse.Namespace) -> int:
    from orchestrator.api.ansible_collection import FQCN, write_collection

    try:
        root = write_collection(Path(args.dir))
    except OSError as e:
        raise UsageError(f"cannot write the collection under {args.dir}: {e.strerror or e}") from None
    print(f"{FQCN}: {root}")
    print(f"  ANSIBLE_COLLECTIONS_PATH={Path(args.dir).resolve()} ANSIBLE_CALLBACKS_ENABLED={FQCN}.fleetprobe "
          f"ansible-playbook -i INVENTORY {FQCN}.audit", file=sys.stderr)
    return exitcodes.OK


def add_collection_parser(sub: Any) -> None:
    p = sub.add_parser("ansible-collection", help="write the Ansible collection fleetprobe.gpu (modules, playbooks, callback)",
                       description="Write DIR/ansible_collections/fleetprobe/gpu, generated from this fleetprobe's "
                                   "probes and playbooks: one module per probe (the envelope unchanged, changed: "
                                   "false, check mode), the playbooks, and the callback fleetprobe.gpu.fleetprobe "
                                   "that writes a fleetprobe run.")
    p.add_argument("dir", metavar="DIR", help="where ansible_collections/ goes (e.g. a collections path)")
    p.set_defaults(func=cmd_ansible_collection)
