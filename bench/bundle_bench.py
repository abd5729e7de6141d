"""Several probes per host: one interpreter per probe (bundle off) against one per host (bundle on).

Runs the audit playbook's probes (host, pcie, nvml, nvlink) against a fixture machine (sysfs tree
+ compiled fake NVML) on N hosts, over the local transport and over a real loopback sshd (the one
the tests start), alternating the two modes in every repeat.  Reports per mode the median and
min-max of wall time, controller CPU and host-side CPU per host (local: the children of this
process; ssh: the sshd listener's own and reaped children's CPU, from /proc/<pid>/stat).

    PYTHONPATH=. /work/venv/bin/python bench/bundle_bench.py --hosts 10 --repeats 5

Not part of the test suite.  The interpreter is /usr/bin/python3 (a pyenv shim would add its
own start-up to both modes alike).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.engine.runner import HostResult, ProbeCall, RunOptions, run_fleet  # noqa: E402
from orchestrator.inventory.model import Host  # noqa: E402
from orchestrator.simulate.fake_nvml import build_fake_nvml  # noqa: E402
from orchestrator.simulate.sysfs import build_machine  # noqa: E402
from orchestrator.transport.base import TransportOptions  # noqa: E402
from orchestrator.transport.factory import open_transport  # noqa: E402

PROBES = ["host", "pcie", "nvml", "nvlink"]  # playbooks/audit.yml
TICK = os.sysconf("SC_CLK_TCK")


class _Sink:
    def host_finished(self, result: HostResult) -> None:
        pass


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process plus its reaped children (utime, stime, cutime, cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


def _once(hosts: list[Host], topts: TransportOptions, bundle: bool, sshd_pid: int | None) -> dict[str, Any]:
    calls = [ProbeCall(p, {}, 60.0) for p in PROBES]
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    remote0 = _tree_cpu(sshd_pid) if sshd_pid else 0.0
    t0 = time.monotonic()
    results = run_fleet(hosts, calls, RunOptions(transport=topts, bundle=bundle), open_transport, _Sink(),
                        threading.Event())
    wall = time.monotonic() - t0
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    ctl = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
    if sshd_pid:
        time.sleep(0.3)  # let the per-connection sshd processes be reaped into the listener's counters
        host_cpu = _tree_cpu(sshd_pid) - remote0
    else:
        host_cpu = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    outcomes = sorted({(p, r.outcome.value) for h in results for p, r in h.probes.items()})
    return {"wall": wall, "ctl": ctl, "host_per_host_ms": 1000 * host_cpu / len(hosts), "outcomes": outcomes}


def _fixture(work: Path) -> dict[str, Any]:
    root = build_machine("dgx-h100", work / "h100")
    lib = build_fake_nvml("dgx-h100", work / "nvml")
    return {"probe_root": str(root), "ansible_python_interpreter": "/usr/bin/python3",
            "probe_args": {"nvml": {"lib": str(lib)}, "nvlink": {"lib": str(lib)}}}


def _report(label: str, runs: dict[bool, list[dict[str, Any]]]) -> None:
    print(f"\n{label}")
    for bundle in (False, True):
        rs = runs[bundle]
        cols = []
        for key, unit in (("wall", "s"), ("ctl", "s"), ("host_per_host_ms", "ms")):
            vals = [r[key] for r in rs]
            cols.append(f"{key} {statistics.median(vals):.3f}{unit} ({min(vals):.3f}-{max(vals):.3f})")
        print(f"  bundle={'on ' if bundle else 'off'}  " + "  ".join(cols))
    if runs[False][0]["outcomes"] != runs[True][0]["outcomes"]:
        print("  OUTCOMES DIFFER:", runs[False][0]["outcomes"], runs[True][0]["outcomes"])
    else:
        print("  outcomes (same in both):", runs[True][0]["outcomes"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-ssh", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fp-bundle-bench-") as tmp:
        work = Path(tmp)
        fixture = _fixture(work)
        local = [Host(f"l{i:03d}", {"ansible_connection": "local", **fixture}) for i in range(args.hosts)]
        modes: list[tuple[str, list[Host], TransportOptions, int | None]] = [("local", local, TransportOptions(), None)]
        server = None
        if not args.no_ssh:
            from tests.support.sshd import SshKeys, start_sshd

            server = start_sshd(work / "sshd", SshKeys.generate(work / "keys"))
            assert server.proc is not None
            modes.append(("ssh", server.fleet(args.hosts, **fixture), server.options(), server.proc.pid))
        try:
            for label, hosts, topts, pid in modes:
                _once(hosts, topts, True, pid)  # warm caches (page cache, compiled fixture, key loading)
                runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
                for i in range(args.repeats):
                    for bundle in ((False, True) if i % 2 == 0 else (True, False)):
                        runs[bundle].append(_once(hosts, topts, bundle, pid))
                _report(f"{label}: {args.hosts} hosts x {len(PROBES)} probes ({', '.join(PROBES)}), "
                        f"{args.repeats} repeats, median (min-max)", runs)
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
