"""`probe baseline` and `probe remediate`: what a judged run says beyond its findings.

    probe baseline RUN -o base.json    the run's class baselines (verdict/baseline.py), for
                                       --baseline-file on runs of other hosts of the same classes
    probe remediate RUN -o fix.yml     an Ansible playbook of the actions its faults ask for
                                       (verdict/remedy.py), guarded; fleetprobe never runs it
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any

from orchestrator.api.errors import UsageError
from orchestrator.cli import exitcodes
from orchestrator.cli.history import results_option, stored_fleet, stored_run
from orchestrator.cli.run import add_guard_arguments, max_share
from orchestrator.facts.textsafe import one_line
from orchestrator.inventory.targets import shown
from orchestrator.present.outputs import write_atomic
from orchestrator.store.atomic import encode_json
from orchestrator.verdict import baseline, remedy
from orchestrator.verdict.findings import Severity


def cmd_baseline(args: argparse.Namespace) -> int:
    run_dir = stored_run(args, args.run)
    fleet = stored_fleet(run_dir)
    hosts = ((h.name, h.fingerprint, h.topology_class, h.health.state.value, h.facts) for h in fleet.hosts)
    made = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    flagged: dict[str, set[str]] = {}
    for f in fleet.findings:  # a figure the run itself flagged is not known-good
        if f.severity in (Severity.FAIL, Severity.WARN):
            flagged.setdefault(f.host, set()).add(f.id)
    doc, left_out = baseline.class_baseline(hosts, fleet.run.id or run_dir.name, made, flagged)
    if not doc["classes"]:
        raise UsageError(f"{run_dir.name}: no healthy or degraded host measured anything the baselines compare "
                         "(run the p2p / nccl probes, e.g. -p premigration)")
    try:
        write_atomic(args.output, encode_json(doc) + "\n")
    except OSError as e:
        print(f"probe: could not write -o {args.output}: {e.strerror or e}", file=sys.stderr)
        return exitcodes.RESULTS_UNWRITABLE
    _say_left_out(left_out)
    classes = ", ".join(f"{c['name']} ({c['hosts']} host(s))" for c in doc["classes"].values())
    print(f"baseline: {args.output}: {classes}")
    return exitcodes.OK


def _say_left_out(left_out: dict[str, baseline.LeftOut]) -> None:
    """The hosts and figures the baseline does not hold, counted, and the first ten named."""
    whole = sum(1 for why in left_out.values() if why.whole)
    part = len(left_out) - whole
    if left_out:
        print(f"probe: baseline: {whole} host(s) left out (their health, class, or every figure flagged by the "
              f"run), {part} more with some figures left out (flagged by the run's own findings)", file=sys.stderr)
    for name, why in sorted(left_out.items())[:10]:
        print(f"probe: {one_line(name)} {'left out' if why.whole else 'partly left out'}: {one_line(why.why)}",
              file=sys.stderr)
    if len(left_out) > 10:
        print(f"probe: ... and {len(left_out) - 10} more", file=sys.stderr)


def cmd_remediate(args: argparse.Namespace) -> int:
    from orchestrator.present.outputs.remediation import write_playbook

    run_dir = stored_run(args, args.run)
    fleet = stored_fleet(run_dir)
    plan = remedy.plan(fleet, max_share(args), args.force, Severity(args.severity))
    if plan.blocked:
        raise UsageError(f"remediation refused: {plan.refusal_text()}; a rule that calls this many hosts faulty may "
                         "itself be wrong: check it, then rerun with --force (or a larger --max-drain)")
    try:
        write_playbook(plan, args.output)
    except OSError as e:
        print(f"probe: could not write -o {args.output}: {e.strerror or e}", file=sys.stderr)
        return exitcodes.RESULTS_UNWRITABLE
    counts: dict[str, int] = {}
    for h in plan.hosts:
        counts[h.action.value] = counts.get(h.action.value, 0) + 1
    summary = ", ".join(f"{n} {a}" for a, n in counts.items()) or "nothing to do"
    for left in plan.left_out:  # the playbook's header says it too; the status stays the writer's
        print(f"probe: warning: {shown(left.host)} left out of {args.output}: {left.why}; act on it by hand if it is "
              "a host of yours", file=sys.stderr)
    print(f"remediation: {args.output}: {summary}; review it, then run it with ansible-playbook (fleetprobe never does)")
    return exitcodes.OK


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("baseline", help="export a run's class baselines for --baseline-file",
                       description="Write the median and spread of every figure the fleet baselines compare, per "
                                   "topology class, from the healthy and degraded hosts of RUN (a known-good fleet). "
                                   "`probe run --baseline-file FILE` then judges hosts of those classes against it.")
    p.add_argument("run", nargs="?", help="run id, 'latest', -1, or a run directory (default: the latest)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the baseline file to write (JSON)")
    results_option(p)
    p.set_defaults(func=cmd_baseline)

    p = sub.add_parser("remediate", help="write an Ansible playbook of the actions a run's faults ask for",
                       description="Write an Ansible playbook, grouped by action and host, of what RUN's faults ask "
                                   "for: drain in Slurm, reset idle GPUs, restart services, reboot; what needs hands or "
                                   "a configuration change is listed in its header. fleetprobe never runs it. A host "
                                   "whose name Ansible would read as a pattern or template is left out, named on "
                                   "stderr and in the header; the status stays 0.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exitcodes.TABLE)
    p.add_argument("run", nargs="?", help="run id, 'latest', -1, or a run directory (default: the latest)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the playbook to write (YAML)")
    p.add_argument("--severity", choices=[Severity.FAIL.value, Severity.WARN.value], default=Severity.FAIL.value,
                   help="act on faults of this severity or worse (default fail)")
    add_guard_arguments(p)
    results_option(p)
    p.set_defaults(func=cmd_remediate)
