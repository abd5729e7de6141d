"""`probe run`: inventory -> probes on every host -> run directory -> tables and exit code."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from orchestrator import exitcodes, probes
from orchestrator.expectations import ExpectationError, Expectations
from orchestrator.fleet import HostInput, build_fleet
from orchestrator.inventory.model import Host, Inventory
from orchestrator.progress import Fanout, Progress
from orchestrator.results import RunWriter, default_results_dir, host_input_from_result
from orchestrator.runner import HostResult, ProbeCall, RunInterrupted, RunOptions, run_fleet
from orchestrator.transport.base import Transport, TransportOptions
from orchestrator.views.findings import classes_table, findings_table
from orchestrator.views.hosts import hosts_table, recap

DEMO_INVENTORY = Path(__file__).resolve().parent.parent / "demo" / "inventory.yml"


class UsageError(Exception):
    """A user's mistake: printed as one line, exit code 2."""


def open_transport(host: Host, options: TransportOptions) -> Transport:
    if host.connection == "replay":
        from orchestrator.transport.replay import ReplayTransport

        return ReplayTransport(host, options)
    from orchestrator.transport.factory import open_transport as open_real

    return open_real(host, options)


def load_hosts(sources: list[str] | None, limit: str | None) -> tuple[Inventory, list[Host]]:
    from orchestrator.inventory import InventoryError
    from orchestrator.inventory.loader import load_inventory
    from orchestrator.inventory.patterns import select_hosts

    try:
        inv = load_inventory(sources or [str(DEMO_INVENTORY)])
        hosts = select_hosts(inv, limit)
    except InventoryError as e:
        raise UsageError(str(e)) from None
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


def expectations_for_hosts(hosts: list[Host], override: Expectations) -> dict[str, Expectations]:
    out = {}
    for h in hosts:
        try:
            base = Expectations.from_mapping(h.vars.get("probe_expect"), where=f"host {h.name}: probe_expect")
        except ExpectationError as e:
            raise UsageError(str(e)) from None
        out[h.name] = base.merged(override)
    return out


def probe_calls(names: list[str], timeout: float, args: dict[str, dict[str, Any]] | None = None) -> list[ProbeCall]:
    calls = []
    for n in names:
        try:
            probes.get(n)
        except probes.UnknownProbe as e:
            raise UsageError(str(e.args[0])) from None
        calls.append(ProbeCall(n, dict((args or {}).get(n, {})), timeout))
    return calls


def default_probe_names() -> list[str]:
    """Without a playbook: every passive probe (the nightly-audit set), host first."""
    names = [s.name for s in probes.catalog().values() if s.passive]
    return sorted(names, key=lambda n: (n != "host", n))


def _install_sigterm() -> None:
    if threading.current_thread() is threading.main_thread():
        def raise_interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt()
        signal.signal(signal.SIGTERM, raise_interrupt)


def execute(args: argparse.Namespace) -> int:
    inv, hosts = load_hosts(args.inventory, args.limit)
    override = parse_expect_args(args.expect or [])
    expectations = expectations_for_hosts(hosts, override)
    calls = probe_calls(args.probe or default_probe_names(), args.timeout)
    topts = TransportOptions(connect_timeout=args.connect_timeout, command_timeout=args.timeout,
                             host_key_policy=args.host_key_policy)
    options = RunOptions(forks=args.forks, transport=topts, become=args.become)
    results_root = Path(args.results) if args.results else default_results_dir()
    meta = {
        "inventory": list(inv.sources),
        "limit": args.limit,
        "playbook": None,
        "probes": [c.name for c in calls],
        "options": {"forks": args.forks, "timeout": args.timeout, "connect_timeout": args.connect_timeout,
                    "host_key_policy": args.host_key_policy, "become": args.become},
        "hosts_order": [h.name for h in hosts],
    }
    try:
        writer = RunWriter.create(results_root, meta, Path(args.output_dir) if args.output_dir else None)
    except OSError as e:
        raise UsageError(f"cannot create the run directory under {results_root}: {e.strerror}; "
                         "choose another with --results or -o") from None
    progress = Progress(len(hosts), enabled=None if not args.quiet else False)
    _install_sigterm()
    interrupted = False
    try:
        results: list[HostResult] = run_fleet(hosts, calls, options, open_transport, Fanout(writer, progress))
    except RunInterrupted as e:
        results = e.results
        interrupted = True
    finally:
        progress.close()
    inputs = [host_input_from_result(r) for r in results]
    fleet = judge(writer.meta, inputs, expectations)
    writer.finish(fleet, state="interrupted" if interrupted else "complete")
    emit(fleet, args, writer.dir)
    if interrupted:
        print(f"interrupted: {len(results)} host results kept in {writer.dir}", file=sys.stderr)
        return exitcodes.INTERRUPTED
    return exitcodes.for_fleet(fleet)


def judge(meta: dict[str, Any], inputs: list[HostInput], expectations: dict[str, Expectations]) -> dict[str, Any]:
    run = {k: meta.get(k) for k in ("id", "started", "finished", "inventory", "playbook", "probes", "limit", "user")}
    return build_fleet(run, inputs, lambda h: expectations.get(h.name, Expectations()))


def emit(fleet: dict[str, Any], args: argparse.Namespace, run_dir: Path) -> None:
    if args.format == "json":
        json.dump(fleet, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
        return
    out = []
    if not args.quiet:
        out.append(hosts_table(fleet))
        ct = classes_table(fleet)
        if ct:
            out.append(ct)
    out.append(findings_table(fleet["findings"], "warn" if args.quiet else "info"))
    out.append(recap(fleet))
    out.append(f"run: {run_dir}")
    print("\n\n".join(out))


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run probes on the inventory's hosts and judge the results",
                       description="Run probes over SSH on every selected host, write a run directory, print "
                                   "the fleet table and findings. Without -i, runs the bundled demo fleet.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exitcodes.TABLE)
    p.add_argument("-i", "--inventory", action="append", metavar="INV",
                   help="inventory file, directory, or comma list 'h1,h2,' (repeatable; default: the demo fleet)")
    p.add_argument("-l", "--limit", metavar="PATTERN", help="host pattern as Ansible's --limit ('gpu:!gpu07', '@file')")
    p.add_argument("--probe", action="append", metavar="NAME", help="probe to run (repeatable; default: passive probes)")
    p.add_argument("-f", "--forks", type=int, default=32, help="hosts probed at once (default 32)")
    p.add_argument("-t", "--timeout", type=float, default=60.0, help="seconds per probe (default 60)")
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to connect and log in (default 10)")
    p.add_argument("--host-key-policy", choices=["strict", "accept-new", "off"], default="strict",
                   help="SSH host key checking, as OpenSSH's StrictHostKeyChecking (default strict)")
    p.add_argument("-b", "--become", action="store_true", help="run probes with sudo -n (fails fast without NOPASSWD)")
    p.add_argument("--expect", action="append", metavar="KEY=VALUE", help="expectation for every host, e.g. gpu_count=8")
    p.add_argument("--results", metavar="DIR", help="results directory holding all runs (default ~/.local/state/fleetprobe/runs)")
    p.add_argument("-o", "--output-dir", metavar="DIR", help="write this run exactly here")
    p.add_argument("--format", choices=["table", "json"], default="table", help="stdout format (default table)")
    p.add_argument("-q", "--quiet", action="store_true", help="only findings of severity warn/fail and errors")
    p.set_defaults(func=execute)
