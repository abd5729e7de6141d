"""The fabric qualification's wall time and controller CPU for 16, 64 and 256 loopback hosts.

    PYTHONPATH=. python bench/fabric_bench.py [--sizes 16,64,256] [--rails 4] [--rounds all,256=8] [--nccl 16,64]

For each size: a simulated fleet of N hosts x R rails (orchestrator/simulate/fabric.py: the fake
perftest that really moves bytes between the hosts' 127.x rail addresses, the fake libnccl whose
ranks exchange data over TCP) with one slow host, one slow pair and one slow rail planted, behind
one private sshd (tests/support/sshd.py: 127.0.0.1..16, the hosts spread over them), and the real
`probe run -p <fabric playbook>`: discovery, the pairwise rounds (a full round robin: N-1 rounds,
or K rounds: K peers per host, `--rounds all,256=8` for 256 hosts), re-pairing, the rail-aligned
NCCL rings where asked.  Printed per size:

* wall: until `probe run` exits;
* controller CPU: user+system of `probe run` and everything it started and reaped (os.wait4);
* host-side CPU: what sshd's sessions, the probes and the tools cost (the sshd listener's
  cutime+cstime before and after), on the same cores here, spread over the fleet in reality;
* the rounds planned and used, the pairs measured, and whether the findings named exactly the
  planted faults (a wrong answer is printed as such, never as a figure).

Results go to bench/RESULTS-fabric.md and .json.  Not a test: the figures depend on the machine and
its load (`uptime` is printed with them); the machine's cores also run every simulated host.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.engine.fabric_plan import tournament  # noqa: E402
from orchestrator.simulate.fabric import FabricScenario, build_fleet  # noqa: E402
from tests.support.fabric import finding_keys, plan_of, playbook  # noqa: E402
from tests.support.sshd import SshKeys, start_sshd  # noqa: E402

SPEC: dict[str, Any] = {"round_s": 20, "iters": 5, "size": 8192, "extra_rounds": 2}  # round_s: a deadline; rounds run as fast as the pairs finish
NCCL: dict[str, Any] = {"min_bytes": 1 << 18, "max_bytes": 1 << 18, "iters": 1, "timeout_s": 120,
                        "floor_min_bytes": 1 << 18, "all_gpus": False}


def scenario(hosts: list[str], rounds: str) -> FabricScenario:
    """One slow host, pair and rail.  With K rounds (a sample of the pairs) the slow pair is one that
    the plan makes meet: a path between two hosts that never meet cannot be seen, by design."""
    n = len(hosts)
    slow = hosts[n // 3]
    a, b = hosts[1], hosts[n - 2]
    if rounds != "all":
        seed = ",".join(sorted(hosts))  # what the driver seeds its plan with (api/fabric.py)
        a, b = next(p for p in tournament(hosts, int(rounds), seed)[0] if slow not in p)
    return FabricScenario(seed=n, hosts={slow: 0.4}, pairs={(min(a, b), max(a, b), "mlx5_1"): 0.35},
                          rails={"mlx5_2": 0.5})


def _cpu_of(pid: int) -> float:
    """utime+stime+cutime+cstime of a process (seconds)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def run_size(n: int, rails: int, rounds: str, nccl: bool, work: Path, keys: SshKeys) -> dict[str, Any]:
    extra = {"MaxStartups": f"{max(400, 4 * n)}:30:{max(800, 8 * n)}", "MaxSessions": "1000"}
    server = start_sshd(work / "sshd", keys, extra_config=extra)
    try:
        inv_hosts = server.fleet(n)
        hosts = [h.name for h in inv_hosts]  # the simulated hosts know themselves by their inventory names
        sc = scenario(hosts, rounds)
        fleet = build_fleet(work / "hosts", hosts, rails, sc, work / "libs", nccl=nccl)
        for h, sim in zip(inv_hosts, fleet.hosts):
            h.vars.update(sim.vars)
        inventory = work / "inventory.yml"
        inventory.write_text(server.inventory_yaml(inv_hosts))
        spec = dict(SPEC, rounds=rounds if rounds == "all" else int(rounds), budget_s=7200,
                    nccl=dict(NCCL) if nccl else False)
        book = work / "fabric.yml"
        book.write_text(playbook(spec))
        env = dict(os.environ, XDG_STATE_HOME=str(work / "state"), PYTHONPATH=str(ROOT))
        argv = [sys.executable, "-m", "orchestrator", "run", "-i", str(inventory), "-p", str(book),
                "--format", "json", "--results", str(work / "runs")]
        host_cpu0 = _cpu_of(server.proc.pid) if server.proc else 0.0
        t0 = time.monotonic()
        with open(work / "out.json", "wb") as out, open(work / "err.txt", "wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=str(work))
            _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        time.sleep(1.0)  # the last sessions end and are reaped by the listener
        host_cpu = (_cpu_of(server.proc.pid) if server.proc else 0.0) - host_cpu0
        stderr = (work / "err.txt").read_text(errors="replace")
        try:
            doc = json.loads((work / "out.json").read_text())
        except ValueError:
            return {"hosts": n, "error": f"no fleet document (exit {proc.returncode}): {stderr[-1500:]}"}
        planted, found = sc.planted(), finding_keys(doc)
        plan = plan_of(doc)
        pairs = {(min(r["name"], m["peer"]), max(r["name"], m["peer"]), m["rail"])
                 for r in doc["hosts"] for m in ((r.get("facts") or {}).get("fabric") or {}).get("measurements") or []}
        ok = sum(1 for r in doc["hosts"] if r["probes"].get("fabric", {}).get("outcome") == "ok")
        return {"hosts": n, "rails": rails, "rounds_asked": rounds, "nccl": nccl, "wall_s": round(wall, 1),
                "controller_cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
                "controller_maxrss_mib": round(usage.ru_maxrss / 1024, 1), "host_cpu_s": round(host_cpu, 1),
                "rounds": plan.get("rounds"), "extra_rounds": plan.get("extra_rounds"), "pairs_measured": len(pairs),
                "hosts_ok": ok, "exit": proc.returncode, "correct": found == planted,
                "planted": {k: sorted(map(list, v)) for k, v in planted.items()},
                "found": {k: sorted(map(list, v)) for k, v in found.items()},
                "notices": [line for line in stderr.splitlines() if line.startswith("fabric")][:12]}
    finally:
        server.stop()


def write_results(rows: list[dict[str, Any]], args: argparse.Namespace, started: str) -> None:
    (ROOT / "bench/RESULTS-fabric.json").write_text(json.dumps(rows, indent=1) + "\n")
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    lines = [
        "# Fabric qualification benchmark",
        "",
        f"Generated by `python bench/fabric_bench.py --sizes {args.sizes} --rails {args.rails} --rounds {args.rounds} "
        f"--nccl {args.nccl or '-'}` on {started}.",
        "Do not edit by hand: rerun the command.  Raw measurements: `RESULTS-fabric.json`.",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, load average at the end {' '.join(load)} "
        "(the machine is shared; every simulated host's sshd session, probe and perftest run on these cores too).",
        "",
        "Each fleet: one slow host, one slow pair, one slow rail planted (with K rounds, a pair the plan makes meet); "
        "`correct`: the findings named exactly those.",
        "Controller CPU: `probe run` and everything it started (os.wait4).  Host-side CPU: sshd sessions, probes, tools.",
        "",
        "| hosts | rails | rounds asked | rounds (+extra) | pairs x rails measured | NCCL rings | wall | controller CPU "
        "| controller max RSS | host-side CPU | correct |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['hosts']} | - | - | - | - | - | - | - | - | - | run failed: {r['error'][:200]} |")
            continue
        lines.append(f"| {r['hosts']} | {r['rails']} | {r['rounds_asked']} | {r['rounds']} (+{r['extra_rounds']}) | {r['pairs_measured']} | "
                     f"{'yes' if r['nccl'] else 'no'} | {r['wall_s']} s | {r['controller_cpu_s']} s | "
                     f"{r['controller_maxrss_mib']} MiB | {r['host_cpu_s']} s | {'yes' if r['correct'] else 'NO'} |")
    (ROOT / "bench/RESULTS-fabric.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16,64,256")
    ap.add_argument("--rails", type=int, default=4)
    ap.add_argument("--rounds", default="all,256=8",
                    help="'all' (full round robin) or K rounds, then SIZE=all|K for a size of its own")
    ap.add_argument("--nccl", default="16,64", help="sizes that also run the rail-aligned NCCL rings (256: 1024 rank processes at once, more memory than this machine spares)")
    ap.add_argument("--no-write", action="store_true", help="print only, leave bench/RESULTS-fabric.* alone")
    ap.add_argument("--keep", metavar="DIR", help="copy the work of a size whose answer was wrong here")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the sshd and the temporary trees go with us
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    nccl_sizes = {int(s) for s in args.nccl.split(",") if s}
    rounds_of = {int(k): v for k, _, v in (r.partition("=") for r in args.rounds.split(",")) if v}
    default_rounds = next((r for r in args.rounds.split(",") if "=" not in r), "all")
    rows = []
    with tempfile.TemporaryDirectory(prefix="fabric-bench-") as tmp:
        keys = SshKeys.generate(Path(tmp) / "keys")
        for n in (int(s) for s in args.sizes.split(",")):
            work = Path(tmp) / f"n{n}"
            work.mkdir()
            row = run_size(n, args.rails, rounds_of.get(n, default_rounds), n in nccl_sizes, work, keys)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("planted", "found", "notices")}), flush=True)
            if not row.get("correct", False):
                print(json.dumps(row, indent=1), flush=True)
                if args.keep:
                    shutil.copytree(work, Path(args.keep) / f"n{n}", symlinks=True, dirs_exist_ok=True)
    if not args.no_write:
        write_results(rows, args, started)
    return 0 if all(r.get("correct") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
