"""`probe import`: judge text evidence (nvidia-smi, lspci output) with the same checks as a live run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from orchestrator.api.errors import UsageError
from orchestrator.api.plan import parse_expect_items
from orchestrator.api.session import store_imported
from orchestrator.cli import exitcodes, views
from orchestrator.cli.run import add_slurm_drain, deliver, results_root
from orchestrator.engine.results import HostInput
from orchestrator.files.bounded import is_regular
from orchestrator.present.outputs.tabular import OUTPUT_FORMATS
from orchestrator.store.runmeta import RunMeta


def _inputs(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.facts.textparse import TextParseError, import_files, import_fleet

    if args.fleet:
        skipped: list[str] = []
        try:
            hosts = import_fleet(Path(args.fleet), args.kind, skipped)
        except TextParseError as e:
            raise UsageError(str(e)) from None
        for line in skipped:  # said once each, beside what was imported (stderr: never in a machine format)
            print(f"note: {line}", file=sys.stderr)
        if not hosts:
            raise UsageError(f"{args.fleet}: no evidence files (one sub-directory or name prefix per host)")
        return hosts
    if not args.files:
        raise UsageError("give evidence files (nvidia-smi / lspci output) or --fleet DIR")
    missing = [f for f in args.files if not Path(f).exists()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)}")
    odd = [f for f in args.files if not is_regular(f)]
    if odd:
        raise UsageError(f"not a regular file (a directory, FIFO, socket or device): {', '.join(odd)}; "
                         "give the files the commands' output was saved in")
    name = args.host or Path(args.files[0]).name.split(".", 1)[0]
    return {name: import_files([Path(f) for f in args.files], args.kind)}


def _bundle_outputs(args: argparse.Namespace) -> bool:
    """Whether the files are bundle documents (`probe bundle`'s output on hosts): a directory, or
    any file that is one; then every file is taken as one, and a file that is not costs its host."""
    from orchestrator.engine.bundle import looks_like_document

    for f in args.files or []:
        path = Path(f)
        if path.is_dir():
            return True
        if not is_regular(path):  # a FIFO would block the sniffing for ever: _inputs refuses it
            continue
        try:
            with open(path, "rb") as fh:
                if looks_like_document(fh.read(256)):
                    return True
        except OSError:
            continue
    return False


def cmd_import(args: argparse.Namespace) -> int:
    from orchestrator.facts.textparse import summary_lines

    if args.ansible_runner or _bundle_outputs(args):
        from orchestrator.cli import collect

        return collect.cmd_import_collected(args)
    imported = _inputs(args)
    expect = parse_expect_items(args.expect or [])
    inputs = []
    for name, host in imported.items():
        ok = bool(host.facts)
        probes = {p: {"outcome": "ok", "reason": "imported from text", "duration_s": 0.0, "probe_version": "text",
                      "retried": 0} for p in host.outcomes}
        if not ok:
            why = _no_facts_reason(host)
            probes = {"import": {"outcome": "invalid_output", "reason": why, "duration_s": 0.0,
                                 "probe_version": "text", "retried": 0}}
        inputs.append(HostInput(name=name, address="(imported)", groups=["imported"], probes=probes, data={},
                                facts=host.facts, vars={}))
    meta = RunMeta(inventory=[str(Path(f).resolve()) for f in (args.files or [args.fleet])], playbook=None,
                   probes=sorted({p for h in inputs for p in h.probes}), imported=True,
                   hosts_order=[h.name for h in inputs], plan={"expect": list(args.expect or [])})
    result = store_imported(meta, inputs, {name: host.to_dict() for name, host in imported.items()},
                            results_root(args), {h.name: expect for h in inputs})
    # what each file gave: on stdout before the table, on stderr beside a machine format (a file
    # that could not be read, a table cut to the GPU budget are said whatever the format)
    out = sys.stdout if args.format == "table" else sys.stderr
    for name, host in imported.items():
        print(f"== {name}: imported", file=out)
        print("\n".join(f"  {line}" for line in summary_lines(host)), file=out)
    print(file=out)
    return _half_readable_status(deliver(args, result.fleet, result.run.dir), imported)


def _no_facts_reason(host: Any) -> str:
    """The host record's reason when no file gave a fact.  Each file's own reason (with the command to
    paste) is printed once, in the import's file list, and kept in the run's evidence record: here the
    files are only named, so the host table, its detail and the not-judged list do not repeat it."""
    refused = [f for f in host.files if not f.ok]
    if not refused:
        return "no facts in the imported files"
    named = ", ".join(f"{Path(f.source).name} ({'half-readable' if f.paste else 'unreadable'})"
                      for f in refused[:8])
    more = f" and {len(refused) - 8} more" if len(refused) > 8 else ""
    return f"no file could be read: {named}{more}; each file's reason is in the import's file list"[:500]


def _half_readable_status(status: exitcodes.ExitStatus, imported: dict[str, Any]) -> exitcodes.ExitStatus:
    """A half-readable file is named in the exit code where nothing worse is: a run that is otherwise
    clean (0), or whose only failed hosts are those a half-readable file left without facts (4)."""
    cut = [f for host in imported.values() for f in host.half_readable]
    if not cut:
        return status
    failed = [host for host in imported.values() if not host.facts]
    if status is exitcodes.OK or (status is exitcodes.HOSTS_FAILED and all(
            f.paste for h in failed for f in h.files if not f.ok)):
        return exitcodes.HALF_READABLE
    return status


def add_parser(sub: Any) -> None:
    p = sub.add_parser("import", help="judge nvidia-smi / lspci / benchmark text, bundle outputs or Ansible jobs like a live run",
                       description="Recognise each file by its content (nvidia-smi topo -m/-c/-p2p, -q, -q -x, --query-gpu CSV, the default screen, "
                                   "-L, nvlink -s/-c, lspci -tv/-vvv, p2pBandwidthLatencyTest, nvbandwidth, nccl-tests, "
                                   "dmesg / journalctl -k, ibstat / ibv_devinfo), merge the files of one host, run the same "
                                   "checks as a live run and store the result as a run. Lines a file cannot explain are skipped "
                                   "with a note. Bundle outputs (`probe bundle`'s documents, any number of hosts, files or "
                                   "directories) and Ansible jobs (--ansible-runner) are judged as the live run they stand for "
                                   "(docs/scale.md).",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exitcodes.TABLE)
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="evidence files of one host, or bundle outputs (`probe bundle`'s documents: files or "
                        "directories of them, any number of hosts)")
    p.add_argument("--host", help="name for the host (default: the first file's name up to the first dot)")
    p.add_argument("--kind", help="force the kind of every file instead of sniffing it")
    p.add_argument("--fleet", metavar="DIR", help="a folder of hosts: one sub-folder (or name prefix) per host")
    p.add_argument("--expect", action="append", metavar="KEY=VALUE", help="what the host should be, e.g. gpu_count=8")
    p.add_argument("--ansible-runner", metavar="ARTIFACT_DIR",
                   help="an ansible-runner / AWX job's artifacts (job_events/): the fleetprobe.gpu modules' envelopes")
    p.add_argument("-i", "--inventory", action="append", metavar="INV",
                   help="bundle outputs / Ansible jobs: the inventory their hosts are in (groups, probe_expect)")
    p.add_argument("-p", "--playbook", metavar="PLAYBOOK",
                   help="bundle outputs / Ansible jobs: judge under this playbook instead of the bundle's own")
    add_slurm_drain(p)
    p.add_argument("--results", metavar="DIR", help="results directory (default ~/.local/state/fleetprobe/runs)")
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table")
    views.add_show(p, what="detail views", importable_only=True)
    views.add_color(p)
    views.add_detail(p)
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_import, output_dir=None)


