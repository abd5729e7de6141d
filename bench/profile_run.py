#!/usr/bin/env python3
"""Profile `probe run --probe host` against the benchmark's simulated fleet.

Starts the same sshd fleet as fleet_bench.py, then runs the controller once under py-spy (samples
the thread holding the GIL) when it is installed, else under cProfile (main thread only: the
workers' costs then show up only as waits), and prints the top functions by own and total time.

    python bench/profile_run.py -n 500 -f 32 [--py-spy /tmp/tools-venv/bin/py-spy]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet_bench as fb


def top_from_collapsed(path: Path, limit: int) -> str:
    """Own and inclusive sample counts per function from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  if " (" in f else f for f in stack.split(";")[1:]]  # first frame: the thread
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    out = [f"{total} samples (200 Hz, the thread holding the GIL)", "", "own time:"]
    out += [f"  {n / total * 100:5.1f}%  {f}" for f, n in own.most_common(limit)]
    out += ["", "inclusive:"]
    out += [f"  {n / total * 100:5.1f}%  {f}" for f, n in incl.most_common(limit)]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("-f", "--forks", type=int, default=32)
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "/tmp/tools-venv/bin/py-spy")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--out", default="/tmp/fp-profile")
    ap.add_argument("--no-profile", action="store_true", help="just time the run (for A/B experiments)")
    ap.add_argument("--no-fsync", action="store_true",
                    help="experiment: run with os.fsync a no-op, to measure what per-file fsync costs")
    a = ap.parse_args()
    fb.become_subreaper()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="fpprof-"))
    tmp.chmod(0o755)
    fleet = fb.start_fleet(a.n, tmp / "fleet")
    try:
        inv = tmp / "inv.yml"
        hosts = "\n".join(f"    b{i:05d}: {{ansible_host: '{x}'}}" for i, x in enumerate(fleet.addresses))
        inv.write_text(f"all:\n  vars:\n    ansible_port: {fleet.port}\n    ansible_user: {fleet.user}\n"
                       f"    ansible_ssh_private_key_file: {fleet.key}\n  hosts:\n{hosts}\n")
        run = [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "-f", str(a.forks), "-o",
               str(tmp / "results" / "run"), "-q", "--format", "json", "--known-hosts", str(fleet.known_hosts),
               "--ssh-config", "/dev/null", "--probe", "host"]
        env = dict(fb.plain_env(), PYTHONPATH=str(fb.REPO))
        if a.no_fsync:
            run[1:3] = ["-c", "import os, runpy, sys; os.fsync = lambda fd: None; sys.argv[0] = 'probe'; "
                        "runpy.run_module('orchestrator', run_name='__main__')"]
        t0 = time.monotonic()
        if a.no_profile:
            subprocess.run(run, env=env, stdout=subprocess.DEVNULL, check=False)
            report = ""
        elif os.path.exists(a.py_spy):
            raw = out / "pyspy.txt"
            # --gil: only the thread holding the GIL is sampled, i.e. where the controller's Python
            # CPU goes (threads blocked on sockets and timers are left out)
            subprocess.run([a.py_spy, "record", "--gil", "-r", "200", "-f", "raw", "-o", str(raw), "--", *run],
                           env=env, stdout=subprocess.DEVNULL, check=False)
            report = top_from_collapsed(raw, a.top)
        else:
            prof = out / "cprofile.out"
            subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), *run[1:]], env=env,
                           stdout=subprocess.DEVNULL, check=False)
            import pstats

            report = ""
            pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(a.top)
        wall = time.monotonic() - t0
        envs = fb.envelopes_from_files((tmp / "results" / "run" / "raw").glob("*/host.json"))
        reached, ok = fb.reached_from_envelopes(envs, fleet.port)
        print(f"n={a.n} forks={a.forks} wall={wall:.1f}s (profiled) reached={reached} ok={ok}\n{report}")
    finally:
        fleet.sshd.terminate()
        fleet.sshd.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
