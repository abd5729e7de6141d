#!/usr/bin/env python3
"""How long `probe run` takes to end after the last host answered (issue 22: within 1 s at 1,000 hosts).

    python bench/end_latency.py --hosts 1000 --forks 32 --probe-ms 50

Hosts replay the demo recordings (DGX-sized data, so judging costs what a real fleet's does), and
each probe's answer is held back `--probe-ms` milliseconds, what the host and the network take:
the controller waits on them as on a socket (a sleep releases the GIL like a read does), so the
fan-out takes seconds and the hosts finish one after another as in a real run.  Both ways of
judging run, each in a fresh interpreter:

* `as they finish`: what `probe run` does (verdict/streaming.py: judges forked before the fan-out);
* `after the fan-out`: the pool disabled, every host judged once the last one answered (before).

"after last answer" is the process's exit (seen by this script) minus the moment the last probe
answer returned to the controller (CLOCK_MONOTONIC is one clock for both processes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from controller_bench import _with_identity  # noqa: E402

from orchestrator.simulate.record import demo_hosts  # noqa: E402
from orchestrator.transport.replay import DEMO_RECORDINGS  # noqa: E402

_CHILD = r"""
import json, sys, time, threading
from orchestrator.transport import replay
from orchestrator.api import session
delay = float(sys.argv[1]) / 1000
mode = sys.argv[2]
last = [0.0]
lock = threading.Lock()
answer = replay.ReplayTransport.run
def held_back(self, *a, **k):
    time.sleep(delay)
    out = answer(self, *a, **k)
    now = time.monotonic()
    with lock:
        last[0] = max(last[0], now)
    return out
replay.ReplayTransport.run = held_back
if mode == "after":
    session.start_judging = lambda *a, **k: None
from orchestrator.cli.main import main
sys.argv = ["probe", "run", "-i", sys.argv[3], "-o", sys.argv[4], "-f", sys.argv[5], "-q"]
code = main()
print(json.dumps({"last_answer": last[0], "returned": time.monotonic()}), file=sys.stderr)
sys.exit(code)
"""


def inventory(path: Path, n: int) -> None:
    """`n` hosts replaying copies of the demo recordings, each copy with identities of its own
    (hostname, serials, GPU UUIDs: controller_bench's), so the fleet-wide checks find what a real
    fleet's would, not one duplicate per clone."""
    names = list(demo_hosts())
    lines = ["all:", "  hosts:"]
    for i in range(n):
        src = names[i % len(names)]
        recorded = {env["probe"]: env for env in
                    (json.loads(p.read_text()) for p in sorted((DEMO_RECORDINGS / src).glob("*.json")))}
        data = _with_identity({probe: env["data"] for probe, env in recorded.items()}, i)
        own = path.parent / "recordings" / f"{i:05d}"
        own.mkdir(parents=True)
        for probe, env in recorded.items():
            (own / f"{probe}.json").write_text(json.dumps({**env, "data": data[probe]}))
        lines += [f"    r{i:05d}-{src}:", "      ansible_connection: replay", f"      probe_replay: {json.dumps(str(own))}"]
    path.write_text("\n".join(lines) + "\n")


def measure(mode: str, inv: Path, out: Path, probe_ms: float, forks: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(out.parent)}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(probe_ms), mode, str(inv), str(out), str(forks)],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    ended = time.monotonic()
    marks = json.loads(proc.stderr.strip().splitlines()[-1])
    return {"wall_s": ended - start, "fanout_s": marks["last_answer"] - start,
            "after_last_answer_s": ended - marks["last_answer"], "rc": proc.returncode}


def section(hosts: int, forks: int, probe_ms: float, repeats: int) -> str:
    """The Markdown table of both ways of judging, `repeats` interleaved runs each (median, min-max)."""
    work = Path(tempfile.mkdtemp(prefix="fp-endlat-"))
    try:
        inv = work / "replay.yml"
        inventory(inv, hosts)
        got: dict[str, list[dict[str, float]]] = {"stream": [], "after": []}
        for r in range(repeats):
            for mode in got:
                out = work / f"{mode}{r}"
                got[mode].append(measure(mode, inv, out, probe_ms, forks))
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def cell(runs: list[dict[str, float]], key: str) -> str:
        xs = sorted(r[key] for r in runs)
        med = statistics.median(xs)
        return f"{med:.2f}" if len(xs) == 1 else f"{med:.2f} ({xs[0]:.2f}-{xs[-1]:.2f})"

    rows = [f"`python bench/end_latency.py --hosts {hosts} --forks {forks} --probe-ms {probe_ms:g} "
            f"--repeats {repeats}`: {hosts} hosts replaying the demo recordings with identities of their own, "
            f"each probe answer held back {probe_ms:g} ms (host and network time), forks {forks}; median of "
            f"{repeats} interleaved runs (min-max).",
            "",
            "| judged | wall, s | fan-out (to the last answer), s | from the last answer to the end, s | exit codes |",
            "|---|---:|---:|---:|---|"]
    for mode, label in (("stream", "as each host finishes (probe run)"), ("after", "after the fan-out (before)")):
        runs = got[mode]
        rows.append(f"| {label} | {cell(runs, 'wall_s')} | {cell(runs, 'fanout_s')} | "
                    f"{cell(runs, 'after_last_answer_s')} | {', '.join(str(int(r['rc'])) for r in runs)} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--forks", type=int, default=32)
    ap.add_argument("--probe-ms", type=float, default=50.0)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    print(section(args.hosts, args.forks, args.probe_ms, args.repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
