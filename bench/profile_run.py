#!/usr/bin/env python3
"""Profile `probe run --probe host` against the benchmark's simulated fleet.

Starts the same sshd fleet as fleet_bench.py, then runs the controller once under py-spy (samples
the thread holding the GIL) when it is installed, else under cProfile (main thread only: the
workers' costs then show up only as waits), and prints the top functions by own and total time.

    python bench/profile_run.py -n 500 -f 32 [--py-spy /tmp/tools-venv/bin/py-spy]
    python bench/profile_run.py -n 200 -f 256 --rtt-ms 100     # through bench/delayproxy.c
    python bench/profile_run.py -n 200 -f 256 --rtt-ms 100 --threads active   # every thread on a CPU
    python bench/profile_run.py -n 1000 -f 256 --replay asyncssh --timeline   # hosts from recordings
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
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet_bench as fb


def _samples(path: Path) -> Iterator[tuple[str, int]]:
    """(stack, sample count) per line of py-spy's collapsed output."""
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        yield stack, int(count)


def top_from_collapsed(path: Path, limit: int, what: str = "the thread holding the GIL") -> str:
    """Own and inclusive sample counts per function from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for stack, n in _samples(path):
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  if " (" in f else f for f in stack.split(";")[1:]]  # first frame: the thread
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    out = [f"{total} samples ({what})", "", "own time:"]
    out += [f"  {n / total * 100:5.1f}%  {f}" for f, n in own.most_common(limit)]
    out += ["", "inclusive:"]
    out += [f"  {n / total * 100:5.1f}%  {f}" for f, n in incl.most_common(limit)]
    return "\n".join(out)


PHASES = (  # first match wins: a sample's phase is the innermost of these its stack passes through
    ("connect: key exchange, auth (paramiko transport thread)", ("paramiko/kex", "paramiko/auth_handler",
                                                                 "paramiko/ed25519", "cryptography")),
    ("connect: opening (SSHClient.connect, Fabric)", ("SSHClient.connect", "Connection.open", "_connect_once")),
    ("paramiko packets: cipher, MAC, read/write", ("paramiko/packet",)),
    ("paramiko transport loop (messages, channels)", ("paramiko/transport", "paramiko/channel")),
    ("command exchange (ssh.py run/_exchange)", ("_exchange", "SshTransport.run")),
    ("thread start", ("Thread.start",)),
    ("run directory writes", ("rundir", "store/")),
    ("judge (verdict)", ("judge", "verdict/")),
    ("imports", ("importlib",)),
)


def phases(path: Path) -> str:
    """Samples by phase of the run (PHASES), so one profile says where the controller's CPU went."""
    by: collections.Counter[str] = collections.Counter()
    total = 0
    for stack, n in _samples(path):
        total += n
        name = next((label for label, keys in PHASES if any(k in stack for k in keys)), "other")
        by[name] += n
    return "by phase:\n" + "\n".join(f"  {n / max(total, 1) * 100:5.1f}%  {label}" for label, n in by.most_common())


def _tree_cpu(pid: int) -> float:
    """utime+stime of `pid` and its live children (the verdict's workers), from /proc."""
    children, _ = fb._proc_table()
    total = 0.0
    for p in [pid, *fb.descendants(pid, set(), children)]:
        try:
            f = fb._stat_fields(p)
        except OSError:
            continue
        total += (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / fb.CLK_TCK
    return total


def cpu_timeline(run: list[str], env: dict, raw: Path, n: int) -> str:
    """Run `probe run`, sampling its CPU and how many hosts are finished (raw/<host>/_host.json) every 0.1 s."""
    proc = subprocess.Popen(run, env=env, stdout=subprocess.DEVNULL)
    t0 = time.monotonic()
    samples: list[tuple[float, float, int]] = []
    while proc.poll() is None:
        done = sum(1 for _ in raw.glob("*/_host.json")) if raw.is_dir() else 0
        try:
            samples.append((time.monotonic() - t0, _tree_cpu(proc.pid), done))
        except OSError:
            break
        time.sleep(0.1)
    end = time.monotonic() - t0
    cpu_end = samples[-1][1] if samples else 0.0
    first = next((s for s in samples if s[2] > 0), None)
    last = next((s for s in samples if s[2] >= n), samples[-1] if samples else None)
    if not first or not last:
        return "no host finished"
    fan_wall, fan_cpu = last[0] - first[0], last[1] - first[1]
    rate = max(((b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(samples, samples[5:]) if b[0] > a[0]), default=0.0)
    return (f"start-up (until the first host is done): {first[0]:.1f} s wall, {first[1]:.2f} s CPU\n"
            f"fan-out (first to last host done): {fan_wall:.1f} s wall, {fan_cpu:.2f} s CPU "
            f"({fan_cpu / max(last[2] - first[2], 1) * 1000:.1f} ms per host), CPU rate {fan_cpu / max(fan_wall, 1e-9):.2f} "
            f"cores on average, {rate:.2f} at most over 0.5 s\n"
            f"judging and writing (last host to exit): {end - last[0]:.1f} s wall, {cpu_end - last[1]:.2f} s CPU "
            "(the last sample before exit; the verdict's workers counted while alive)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("-f", "--forks", type=int, default=32)
    ap.add_argument("--procs", type=int, default=None, help="probe run --procs N (default: its own choice)")
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "/tmp/tools-venv/bin/py-spy")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second (lower: less overhead)")
    ap.add_argument("--rtt-ms", type=float, default=None,
                    help="reach the fleet through bench/delayproxy.c at this round-trip time")
    ap.add_argument("--threads", choices=("gil", "active", "all"), default="gil",
                    help="gil: the thread holding the GIL (py-spy --gil; with hundreds of threads it mostly "
                    "catches the main one); active: every thread that is on a CPU, not blocked (py-spy's "
                    "default); all: idle threads too (--idle), where they wait")
    ap.add_argument("--out", default="/tmp/fp-profile")
    ap.add_argument("--no-profile", action="store_true", help="just time the run (for A/B experiments)")
    ap.add_argument("--timeline", action="store_true",
                    help="no sampler: the controller's CPU (/proc) and its finished hosts every 0.1 s, split into "
                    "start-up, fan-out and judging, with the fan-out's CPU rate (1.0 = one core, the GIL's ceiling)")
    ap.add_argument("--replay", choices=fb.ENDPOINTS, default="",
                    help="the hosts answer from recordings of the real probe (bench/replayhost.py), so the "
                         "profile is the controller's and not the simulated hosts' CPU")
    ap.add_argument("--no-fsync", action="store_true",
                    help="experiment: run with os.fsync a no-op, to measure what per-file fsync costs")
    a = ap.parse_args()
    fb.become_subreaper()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="fpprof-"))
    tmp.chmod(0o755)
    if a.replay:
        fb.record_answers(tmp / "fleet", fb.host_work(tmp), tmp, ["probe"])
    base = fleet = fb.start_fleet(a.n, tmp / "fleet", replay=a.replay)
    if a.rtt_ms is not None:
        fleet = fb.via_proxy(base, a.rtt_ms)
    try:
        inv = tmp / "inv.yml"
        hosts = "\n".join(f"    b{i:05d}: {{ansible_host: '{x}'}}" for i, x in enumerate(fleet.addresses))
        inv.write_text(f"all:\n  vars:\n    ansible_port: {fleet.port}\n    ansible_user: {fleet.user}\n"
                       f"    ansible_ssh_private_key_file: {fleet.key}\n  hosts:\n{hosts}\n")
        run = [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "-f", str(a.forks), "-o",
               str(tmp / "results" / "run"), "-q", "--format", "json", "--known-hosts", str(fleet.known_hosts),
               "--ssh-config", "/dev/null", "--probe", "host", *(["--procs", str(a.procs)] if a.procs else [])]
        env = dict(fb.plain_env(), PYTHONPATH=str(fb.REPO))
        if a.no_fsync:
            run[1:3] = ["-c", "import os, runpy, sys; os.fsync = lambda fd: None; sys.argv[0] = 'probe'; "
                        "runpy.run_module('orchestrator', run_name='__main__')"]
        t0 = time.monotonic()
        if a.timeline:
            report = cpu_timeline(run, env, tmp / "results" / "run" / "raw", a.n)
        elif a.no_profile:
            subprocess.run(run, env=env, stdout=subprocess.DEVNULL, check=False)
            report = ""
        elif os.path.exists(a.py_spy):
            raw = out / "pyspy.txt"
            # --gil: only the thread holding the GIL is sampled, i.e. where the controller's Python
            # CPU goes (threads blocked on sockets and timers are left out)
            mode = {"gil": ["--gil"], "active": [], "all": ["--idle"]}[a.threads]
            subprocess.run([a.py_spy, "record", *mode, "-r", str(a.rate), "-f", "raw", "-o", str(raw), "--", *run],
                           env=env, stdout=subprocess.DEVNULL, check=False)
            report = top_from_collapsed(raw, a.top, {"gil": "the thread holding the GIL",
                                                     "active": "every thread on a CPU",
                                                     "all": "every thread, idle included"}[a.threads])
            report += "\n\n" + phases(raw)
        else:
            prof = out / "cprofile.out"
            subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), *run[1:]], env=env,
                           stdout=subprocess.DEVNULL, check=False)
            import pstats

            report = ""
            pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(a.top)
        wall = time.monotonic() - t0
        envs = fb.envelopes_from_files((tmp / "results" / "run" / "raw").glob("*/host.json"))
        reached, ok = fb.reached_from_envelopes(envs, fleet.sshd_port)
        print(f"n={a.n} forks={a.forks} procs={a.procs or 'auto'} wall={wall:.1f}s (profiled) reached={reached} ok={ok}\n{report}")
    finally:
        if fleet.proxy is not None:
            fleet.proxy.stop()
        base.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
