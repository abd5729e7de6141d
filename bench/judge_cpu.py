#!/usr/bin/env python3
"""Judging's CPU a host, as a worker spends it: cyclic GC off, process_time, best and median of runs.

    python bench/judge_cpu.py [--hosts 100] [--runs 3] [REPO]   # REPO: another checkout to time

Judges N demo-derived hosts (bench/controller_bench.py's inputs) with `verdict/judge.host_judge`,
RUNS times over, after 25 hosts that warm the per-fleet memos.  The collector is off because a
worker is forked inside `build_fleet`, which pauses it; with it on, whichever step allocates when a
collection fires is charged for it (cProfile put 0.4 ms a host on `pcie._tree` that way).  On a
shared machine run two checkouts alternately, several times, and compare the best figures.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--hosts", type=int, default=100)
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("repo", nargs="?", default=str(Path(__file__).resolve().parent.parent))
args = ap.parse_args()
sys.path[:0] = [args.repo, str(Path(args.repo) / "bench")]

import controller_bench as cb  # noqa: E402

from orchestrator.verdict.judge import host_judge  # noqa: E402

WARM = 25
inputs, expect = cb.make_inputs(args.hosts + WARM, held=False)
judge = host_judge(lambda h: expect[h.name], lambda host: {})
gc.disable()
for h in inputs[:WARM]:
    judge(h)
spent = []
for _ in range(args.runs):
    t = time.process_time()
    for h in inputs[WARM:]:
        judge(h)
    spent.append((time.process_time() - t) / args.hosts * 1e3)
print(f"{args.repo}: best {min(spent):.2f}, median {statistics.median(spent):.2f} ms CPU a host "
      f"({args.hosts} hosts x {args.runs})")
