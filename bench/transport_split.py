#!/usr/bin/env python3
"""The SSH transport's CPU a host, alone (no engine, run directory or verdict), against replayed hosts.

Starts the asyncssh replaying fleet of fleet_bench.py (--replay asyncssh), then:
  1. one host at a time, the process CPU of each phase: SshTransport(), connect(), run() of the
     `host` probe's script (19 KB, sent whole; the endpoint answers `python3 -` with its short
     "never recorded" message, exit 97, instead of the 1.3 KB envelope), close();
  2. the same hosts through a thread pool of 1 and of --workers threads, alternated, CPU a host.
What `probe run`'s fan-out costs beyond these is the engine's, the run directory's and the verdict's
(compare `bench/profile_run.py --timeline`).

    python bench/transport_split.py -n 400 --workers 256
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fleet_bench as fb

from orchestrator.inventory.model import Host
from orchestrator.transport.base import TransportOptions
from orchestrator.transport.ssh import SshTransport

PHASES = ("set-up", "connect", "command", "close")


def phases(hosts: list[Host], opts: TransportOptions, script: bytes) -> dict[str, float]:
    """Process CPU seconds per phase over `hosts`, one host at a time."""
    spent = dict.fromkeys(PHASES, 0.0)
    for h in hosts:
        c0 = time.process_time()
        t = SshTransport(h, opts)
        c1 = time.process_time()
        t.connect()
        c2 = time.process_time()
        t.run("python3 -", script, 30)
        c3 = time.process_time()
        t.close()
        c4 = time.process_time()
        for name, a, b in zip(PHASES, (c0, c1, c2, c3), (c1, c2, c3, c4)):
            spent[name] += b - a
    return spent


def pooled(hosts: list[Host], opts: TransportOptions, script: bytes, workers: int) -> tuple[float, float]:
    """(process CPU s, wall s) for every host through a pool of `workers` threads."""
    def one(h: Host) -> None:
        with SshTransport(h, opts) as t:
            t.run("python3 -", script, 30)

    c0, w0 = time.process_time(), time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, hosts))
    return time.process_time() - c0, time.monotonic() - w0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=400)
    ap.add_argument("--workers", type=int, default=256)
    a = ap.parse_args()
    fb.become_subreaper()
    tmp = Path(tempfile.mkdtemp(prefix="fpsplit-"))
    tmp.chmod(0o755)
    fb.record_answers(tmp / "fleet", fb.host_work(tmp), tmp, ["probe"])
    fleet = fb.start_fleet(a.n, tmp / "fleet", replay="asyncssh")
    try:
        script = (tmp / "host-scripts" / "host.py").read_bytes()
        opts = TransportOptions(known_hosts=str(fleet.known_hosts), ssh_config="/dev/null")
        hosts = [Host(f"b{i:05d}", vars={"ansible_host": x, "ansible_port": fleet.port, "ansible_user": fleet.user,
                                         "ansible_ssh_private_key_file": str(fleet.key)})
                 for i, x in enumerate(fleet.addresses)]
        spent = phases(hosts, opts, script)
        print(f"one host at a time, CPU ms a host: {sum(spent.values()) / a.n * 1000:.2f} = "
              + ", ".join(f"{k} {v / a.n * 1000:.2f}" for k, v in spent.items()))
        for workers in (1, a.workers, 1, a.workers):
            cpu, wall = pooled(hosts, opts, script, workers)
            print(f"{workers} threads: {cpu / a.n * 1000:.2f} ms CPU a host, wall {wall:.1f} s", flush=True)
    finally:
        fleet.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
