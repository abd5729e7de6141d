"""100 hosts over loopback sshd: `probe run --probe host` next to 100 parallel plain `ssh`.

    PYTHONPATH=. python bench/e2e_100.py [--hosts 100] [--forks 32 --forks 100]

Starts a private sshd (tests/support/sshd.py: 127.0.0.1..16 on one port, generated keys and
known_hosts), then, for the same 100 inventory hosts, same key and same known_hosts:

* fleetprobe: `python -m orchestrator run -i INV --probe host --format json` (once per --forks);
* plain ssh:  100 `ssh -i KEY ... python3 - < script` started at once, the script being exactly
              what fleetprobe ships (`orchestrator.engine.payload.build_script('host', {}, 30)`).

For each it prints the wall time and the peak memory of the controller's process tree: "peak RSS"
is each controller process's own peak RSS as GNU time reports it, summed over the 100 ssh
clients (they all run at once); "sampled" is the largest sum of RSS and of PSS (shared pages
divided among the processes sharing them, fairer to 100 ssh sharing one binary and libc) seen
every 50 ms in /proc, which a loaded machine can undersample.
Both sides must return 100 valid `ok` envelopes, else the figures are not printed as a success.
Not a test: the figures depend on the machine and its load (`uptime` is printed with them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.engine import payload as probes  # noqa: E402
from tests.support.sshd import SshKeys, descendants, start_sshd  # noqa: E402


@dataclass
class Figures:
    label: str
    wall_s: float
    peak_rss_mib: float
    peak_pss_mib: float
    peak_procs: int
    ok: int
    total: int
    maxrss_mib: float  # each controller process's peak RSS by GNU time (%M), summed

    def line(self) -> str:
        return (f"{self.label:<34} wall {self.wall_s:6.2f} s   peak RSS {self.maxrss_mib:7.1f} MiB   "
                f"sampled: RSS {self.peak_rss_mib:7.1f} MiB, PSS {self.peak_pss_mib:7.1f} MiB, "
                f"{self.peak_procs:3d} processes   ok {self.ok}/{self.total}")


def _kib(path: str, field: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeSampler:
    """Peak summed RSS/PSS of a set of processes, recomputed every `interval` seconds."""

    def __init__(self, pids: Callable[[], list[int]], interval: float = 0.05):
        self.pids = pids
        self.interval = interval
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        pids = self.pids()
        rss = sum(_kib(f"/proc/{p}/status", "VmRSS:") for p in pids)
        pss = sum(_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_procs = max(self.peak_procs, len(pids))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


TIME = "/usr/bin/time"


def timed(argv: list[str], report: Path) -> list[str]:
    """argv under GNU time, which writes the command's peak RSS (KiB) to `report`.

    time forks the command itself: Linux carries the forking process's peak RSS over into the
    child's, so a tiny parent (time, ~1 MiB) keeps the figure honest where this Python would not.
    """
    if not os.access(TIME, os.X_OK):
        raise SystemExit(f"{TIME} (GNU time) is needed for the memory figures: apt-get install time")
    return [TIME, "-f", "%M", "-o", str(report), *argv]


def maxrss_kib(reports: list[Path]) -> int:
    total = 0
    for r in reports:
        lines = r.read_text().split() if r.is_file() else []
        total += int(lines[-1]) if lines and lines[-1].isdigit() else 0
    return total


def run_fleetprobe(inv: Path, work: Path, forks: int, ssh_config: Path, total: int) -> Figures:
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "XDG_STATE_HOME")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(work / "home"))
    (work / "home").mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "-o", str(work / f"run-f{forks}"),
            "--results", str(work / "runs"), "--probe", "host", "--forks", str(forks), "--format", "json",
            "--ssh-config", str(ssh_config)]
    out_path, err_path = work / f"fleet-f{forks}.json", work / f"fleet-f{forks}.err"
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(timed(argv, work / f"fleet-f{forks}.rss"), env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
    with TreeSampler(lambda: descendants(proc.pid)) as sampler:
        proc.wait()
    wall = time.monotonic() - t0
    try:
        fleet = json.loads(out_path.read_bytes())
        ok = sum(1 for h in fleet["hosts"] if h["outcome"] == "ok")
    except ValueError:
        print(err_path.read_text(errors="replace"), file=sys.stderr)
        ok = 0
    return Figures(f"fleetprobe run --forks {forks}", wall, sampler.peak_rss / 1024, sampler.peak_pss / 1024,
                   sampler.peak_procs, ok, total, maxrss_kib([work / f"fleet-f{forks}.rss"]) / 1024)


def run_plain_ssh(hosts: list[tuple[str, int]], key: Path, known_hosts: Path, ssh_config: Path, user: str,
                  script: bytes, work: Path) -> Figures:
    ssh = shutil.which("ssh")
    if ssh is None:
        raise SystemExit("ssh (the OpenSSH client) is not installed")
    procs: list[subprocess.Popen[bytes]] = []
    outs: list[Path] = []
    t0 = time.monotonic()
    reports = [work / f"ssh-{i:03d}.rss" for i in range(len(hosts))]
    with TreeSampler(lambda: [p for pr in procs for p in descendants(pr.pid)]) as sampler:
        for i, (addr, port) in enumerate(hosts):
            out = work / f"ssh-{i:03d}.out"
            outs.append(out)
            argv = [ssh, "-F", str(ssh_config), "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                    "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
                    "-o", "ConnectTimeout=10", "-p", str(port), "-l", user, addr, "python3 -"]
            with open(out, "wb") as fo:
                procs.append(subprocess.Popen(timed(argv, reports[i]), stdin=subprocess.PIPE, stdout=fo,
                                              stderr=subprocess.DEVNULL))
        # The script goes in after every process exists: all 100 run at once, as the runner does.
        for pr in procs:
            assert pr.stdin is not None
            pr.stdin.write(script)
            pr.stdin.close()
        for pr in procs:
            pr.wait()
    wall = time.monotonic() - t0
    ok = 0
    for out in outs:
        try:
            ok += json.loads(out.read_bytes()).get("status") == "ok"
        except ValueError:
            pass
    return Figures(f"{len(hosts)} x plain ssh ... python3 -", wall, sampler.peak_rss / 1024,
                   sampler.peak_pss / 1024, sampler.peak_procs, ok, len(hosts), maxrss_kib(reports) / 1024)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--forks", type=int, action="append", help="fleetprobe --forks (repeatable; default 32 and 100)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    forks = a.forks or [32, 100]
    work = Path(tempfile.mkdtemp(prefix="fleetprobe-bench-"))
    keys = SshKeys.generate(work / "keys")
    server = start_sshd(work / "sshd", keys)
    try:
        fleet = server.fleet(a.hosts)
        inv = work / "bench.yml"
        inv.write_text(server.inventory_yaml(fleet))
        script = probes.build_script("host", {}, 30)
        endpoints = [(str(h.vars["ansible_host"]), server.port) for h in fleet]
        print(f"{a.hosts} hosts on sshd 127.0.0.1..{len(server.addresses)} port {server.port}; "
              f"script {len(script)} bytes; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}")
        results = [run_plain_ssh(endpoints, keys.user_key, server.known_hosts, server.ssh_config, server.user,
                                 script, work)]
        for f in forks:
            results.append(run_fleetprobe(inv, work, f, server.ssh_config, a.hosts))
        # the plain ssh run again, last, so neither side alone enjoys warm caches
        results.append(run_plain_ssh(endpoints, keys.user_key, server.known_hosts, server.ssh_config, server.user,
                                     script, work))
        for r in results:
            print(r.line())
        print(f"load after: {os.getloadavg()[0]:.1f}")
        return 0 if all(r.ok == r.total for r in results) else 1
    finally:
        server.stop()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
