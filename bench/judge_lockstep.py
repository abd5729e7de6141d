#!/usr/bin/env python3
"""Whole judging of two checkouts, ms CPU a host, measured in lockstep.

    python bench/judge_lockstep.py BASE_REPO [OTHER_REPO] [--hosts 125] [--rounds 40]

One child process per checkout judges N demo-derived hosts (bench/controller_bench.py's inputs,
`verdict/judge.host_judge`, the cyclic collector off as in a worker) once a round, the two children
taking turns (A B, B A, ...), so both meet the same load on a shared machine; a run of one and then
of the other (bench/judge_cpu.py) differed by 20 % from one minute to the next there.  Prints each
checkout's best and median round and the median of the paired rounds' ratios, which a 2 % change
shows where the best and median of separate runs do not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
WARM = 25

CHILD = """
import gc, sys, time
repo, n, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path[:0] = [repo, repo + "/bench"]
import controller_bench as cb
from orchestrator.verdict.judge import host_judge
inputs, expect = cb.make_inputs(n + warm, held=False)
judge = host_judge(lambda h: expect[h.name], lambda host: {})
gc.disable()
for h in inputs[:warm]:
    judge(h)
print("ready", flush=True)
for _ in sys.stdin:
    t = time.process_time()
    for h in inputs[warm:]:
        judge(h)
    print((time.process_time() - t) / n * 1e3, flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("other", nargs="?", default=str(HERE))
    ap.add_argument("--hosts", type=int, default=125)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    repos = [str(Path(args.base).resolve()), str(Path(args.other).resolve())]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict layouts in both children
    kids = [subprocess.Popen([sys.executable, "-c", CHILD, repo, str(args.hosts), str(WARM)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env) for repo in repos]
    for kid in kids:
        assert kid.stdin is not None and kid.stdout is not None
        if kid.stdout.readline().strip() != "ready":
            raise SystemExit("a child did not start")
    spent: list[list[float]] = [[], []]
    for r in range(args.rounds):
        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
            stdin, stdout = kids[k].stdin, kids[k].stdout
            assert stdin is not None and stdout is not None
            stdin.write("go\n")
            stdin.flush()
            spent[k].append(float(stdout.readline()))
    for kid in kids:
        assert kid.stdin is not None
        kid.stdin.close()
        kid.wait()
    for repo, ms in zip(repos, spent):
        print(f"{repo}: best {min(ms):.3f}, median {statistics.median(ms):.3f} ms CPU a host "
              f"({args.hosts} hosts x {args.rounds} rounds)")
    ratios = [b / a for a, b in zip(*spent)]
    q = statistics.quantiles(ratios, n=4)
    print(f"paired rounds, other / base: median {statistics.median(ratios):.3f} (quartiles {q[0]:.3f}..{q[2]:.3f})")


if __name__ == "__main__":
    main()
