#!/usr/bin/env python3
"""CPU milliseconds per host of each host check over the 25 demo recordings with the demo
inventory's expectations (best of --repeat passes of --hosts hosts; checks are listed, since
they are generators).

    python bench/micro_checks.py [--hosts 1000] [--repeat 5] [--repo PATH] [--only check_p2p] [--profile check_p2p]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microtime import best_cpu, profile

ap = argparse.ArgumentParser()
ap.add_argument("--hosts", type=int, default=1000)
ap.add_argument("--repeat", type=int, default=5)
ap.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
ap.add_argument("--only", nargs="+", help="check function names")
ap.add_argument("--profile", help="cProfile this check")
args = ap.parse_args()
sys.path[:0] = [str(Path(args.repo).resolve()), str(Path(args.repo).resolve() / "bench")]

import controller_bench as cb  # noqa: E402

from orchestrator.facts import normalize  # noqa: E402
from orchestrator.verdict import checks  # noqa: E402
from orchestrator.verdict.checks.base import HostView  # noqa: E402
from orchestrator.verdict.coverage import judged_outcomes  # noqa: E402

# Every host its own facts, as in a build: a check walks cold data, not 25 hot templates.
inputs, expect = cb.make_inputs(args.hosts)
fleet = []
for h in inputs:
    facts, _ = normalize.normalize_host(h.data)
    fleet.append(HostView(name=h.name, facts=facts, outcomes=judged_outcomes(h.probes, facts), expect=expect[h.name]))
by_name = {c.__name__: c for c in checks.HOST_CHECKS}


def run(name: str) -> None:
    check = by_name[name]
    for v in fleet:
        list(check(v))


if args.profile:
    profile(run, args.profile)
    sys.exit(0)

rows = []
for name in args.only or list(by_name):
    rows.append((best_cpu(run, name, args.repeat), name))
for best, name in sorted(rows, reverse=True):
    print(f"{name:28s} {best * 1000 / args.hosts:7.3f} ms/host  ({best:.3f} s per {args.hosts} hosts)")
