#!/usr/bin/env python3
"""Controller benchmark: the verdict layer (normalize, checks, classes, overrides = build_fleet) and
writing fleet.json, for fleets of recorded hosts.

Hosts are the 25 bundled demo recordings (orchestrator/demo/recordings) repeated with fresh
identities: every copy gets its own hostname, system/board serials and GPU UUIDs/serials, so the
fleet-wide duplicate checks see a realistic fleet, not 400 clones.  Expectations are the demo
inventory's.  Each size runs in a fresh interpreter so its peak RSS is its own.

    python bench/controller_bench.py                      # 1000 and 10000 hosts
    python bench/controller_bench.py --hosts 1000 --profile   # cProfile of build_fleet, top functions
    python bench/controller_bench.py --cloud-image        # all hosts "ubuntu" with a placeholder serial
    python bench/controller_bench.py --repeat 3           # medians (min-max) of 3 fresh runs per size

Fleets of 500 hosts and more are judged in one worker process per CPU (orchestrator/verdict/parallel.py;
`--workers 1` judges in this process): workers_cpu_s and worker_peak_rss_mb are theirs, the other
cpu_* and peak_rss_mb columns the parent's.  Wall seconds on a shared machine swing with its load, so
CPU seconds of the process are reported
beside them (cpu_* columns); both are medians over --repeat runs.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import functools
import io
import json
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.engine.results import HostInput  # noqa: E402
from orchestrator.store.fleet_file import write_fleet  # noqa: E402
from orchestrator.store.runmeta import RunMeta  # noqa: E402
from orchestrator.verdict import parallel as fleet_workers  # noqa: E402
from orchestrator.verdict.expectations import Expectations  # noqa: E402
from orchestrator.verdict.judge import build_fleet  # noqa: E402

RECORDINGS = REPO / "orchestrator" / "demo" / "recordings"
DEMO_INVENTORY = REPO / "orchestrator" / "demo" / "inventory.yml"


def _templates() -> list[tuple[str, dict[str, dict[str, Any]], dict[str, dict[str, Any]], Expectations]]:
    from orchestrator.api.plan import host_expectations, load_inventory

    _, hosts, _ = load_inventory((str(DEMO_INVENTORY),), "demo")
    expect = {h.name: host_expectations(h.name, h.vars, Expectations()) for h in hosts}
    out = []
    for h in hosts:
        probes: dict[str, dict[str, Any]] = {}
        data: dict[str, dict[str, Any]] = {}
        for path in sorted((RECORDINGS / h.name).glob("*.json")):
            env = json.loads(path.read_text())
            probes[env["probe"]] = {"outcome": "ok" if env["status"] == "ok" else env["status"], "reason": "",
                                    "duration_s": env.get("duration_s", 0.0), "probe_version": env.get("probe_version"),
                                    "retried": 0}
            data[env["probe"]] = env["data"]
        out.append((h.name, probes, data, expect[h.name]))
    return out


def _with_identity(data: dict[str, dict[str, Any]], i: int, cloud_image: bool = False) -> dict[str, dict[str, Any]]:
    """The template's data with this copy's own identities; the rest is shared, not copied
    (normalizers are pure), as a controller holding many hosts' envelopes would have it."""
    out = dict(data)
    tag = f"{i:07d}"
    if "host" in data:
        host = dict(data["host"])
        host["hostname"] = "ubuntu" if cloud_image else f"{host.get('hostname')}-{tag}"
        dmi = dict(host.get("dmi") or {})
        for key in ("product_serial", "board_serial"):
            if isinstance(dmi.get(key), str):
                dmi[key] = "To Be Filled By O.E.M." if cloud_image else dmi[key][:6] + tag
        host["dmi"] = dmi
        out["host"] = host
    for probe in ("nvml", "nvlink"):
        if probe in data and isinstance(data[probe].get("gpus"), list):
            section = dict(data[probe])
            gpus = []
            for g in section["gpus"]:
                g = dict(g)
                if isinstance(g.get("uuid"), str):
                    g["uuid"] = g["uuid"][:-7] + tag
                if isinstance(g.get("serial"), str):
                    g["serial"] = g["serial"][:6] + tag
                gpus.append(g)
            section["gpus"] = gpus
            out[probe] = section
    return out


def make_inputs(n: int, cloud_image: bool = False, held: bool = True) -> tuple[list[HostInput], dict[str, Expectations]]:
    """`held`: every host's envelope data in memory (as `probe rejudge` and the round-2 figures had
    it); otherwise each host's data is made when it is judged (`load_data`), as `probe run` reads
    it back from the raw files in the worker that judges the host: the controller holds none."""
    templates = _templates()
    inputs, expect = [], {}
    for i in range(n):
        name, probes, data, exp = templates[i % len(templates)]
        host = f"{name}-{i:05d}"
        address = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
        if held:
            inputs.append(HostInput(name=host, address=address, groups=["demo"], probes=copy.deepcopy(probes),
                                    data=_with_identity(data, i, cloud_image)))
        else:
            inputs.append(HostInput(name=host, address=address, groups=["demo"], probes=copy.deepcopy(probes),
                                    data={}, load_data=functools.partial(_with_identity, data, i, cloud_image)))
        expect[host] = exp
    return inputs, expect


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _children() -> tuple[float, float]:
    """CPU seconds of the worker processes judging the fleet, and the largest one's peak RSS MB."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime, r.ru_maxrss / 1024


def _pss_kib(pid: int) -> int:
    """Proportional set size of one process (shared pages split among the processes sharing them,
    so forked workers are not counted as full copies of the controller), as bench/fleet_bench.py."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _sample_tree_pss(pid: int, stop: threading.Event, peak: list[int]) -> None:
    """Peak summed PSS of process `pid` and everything below it (the controller and its workers),
    sampled from this (the benchmark's parent) process: a sampling thread inside the controller
    would itself keep the controller from forking its workers (parallel.worker_count).

    At most 20 times a second, and never more than a twentieth of one core: the kernel walks a
    process's whole memory for its PSS, so at 20 Hz the sampler of a 1.3 GB controller took CPU
    the benchmarked command, on the same 2 cores, then lacked.  Memory grows over seconds, so the
    peak is not missed."""
    while not stop.is_set():
        t = time.perf_counter()
        peak[0] = max(peak[0], sum(_pss_kib(p) for p in _tree(pid)))
        stop.wait(max(0.05, 20 * (time.perf_counter() - t)))


def communicate_sampled(child: subprocess.Popen[str]) -> tuple[str, str, int]:
    """The child's stdout and stderr, and the peak summed PSS (KiB) of its process tree meanwhile."""
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=_sample_tree_pss, args=(child.pid, stop, peak), daemon=True)
    sampler.start()
    out, err = child.communicate()
    stop.set()
    sampler.join()
    return out, err, peak[0]


def measure(n: int, profile: bool = False, cloud_image: bool = False, workers: int | None = None,
            held: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    inputs, expect = make_inputs(n, cloud_image, held)
    t1, c1 = time.perf_counter(), time.process_time()
    run = RunMeta(id=f"bench-{n}", inventory=[str(DEMO_INVENTORY)], probes=["host", "pcie", "nvml", "nvlink"])
    prof = cProfile.Profile(time.process_time) if profile else None  # CPU clock: load on a shared machine
    if prof:
        prof.enable()
    with tempfile.TemporaryDirectory(prefix="controller-bench-") as tmp:
        # as `probe run` judges: the spool in the run directory, fleet.json written with its index
        fleet = build_fleet(run, inputs, lambda h: expect[h.name], lambda host: {}, spool=Path(tmp),
                            workers=1 if profile else workers)
        if prof:
            prof.disable()
        t2, c2 = time.perf_counter(), time.process_time()
        path = write_fleet(Path(tmp) / "fleet.json", fleet.to_document())
        size = path.stat().st_size
        t3, c3 = time.perf_counter(), time.process_time()
        classes, findings = len(fleet.classes), len(fleet.findings)
        del fleet
    result: dict[str, Any] = {"hosts": n, "inputs_s": round(t1 - t0, 2), "build_fleet_s": round(t2 - t1, 2),
              "write_s": round(t3 - t2, 2), "total_s": round(t3 - t1, 2),
              "cpu_build_s": round(c2 - c1, 2), "cpu_write_s": round(c3 - c2, 2), "cpu_total_s": round(c3 - c1, 2),
              "cpu_per_1k_hosts_s": round((c3 - c1) / n * 1000, 2),
              "per_1k_hosts_s": round((t3 - t1) / n * 1000, 2), "peak_rss_mb": round(_peak_rss_mb()),
              "fleet_json_mb": round(size / 1e6, 1), "classes": classes,
              "workers": fleet_workers.worker_count(n, 1 if profile else workers),
              "workers_cpu_s": round(_children()[0], 2), "worker_peak_rss_mb": round(_children()[1]),
              "findings": findings}
    if prof:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
        result["profile"] = buf.getvalue()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--profile", action="store_true", help="cProfile build_fleet (largest size only)")
    ap.add_argument("--cloud-image", action="store_true",
                    help="every host reports hostname 'ubuntu' and a placeholder system serial (the duplicate-identity "
                         "worst case)")
    ap.add_argument("--repeat", type=int, default=1, help="fresh runs per size; the table shows medians (min-max)")
    ap.add_argument("--json", action="store_true", help="print every run's figures as JSON too")
    ap.add_argument("--workers", type=int, help="worker processes judging the fleet (default: one per CPU for big "
                    "fleets; 1 = in this process)")
    ap.add_argument("--held", action="store_true", help="hold every host's envelope data in the controller (as "
                    "probe rejudge does; the round-2 figures); default: made when judged, as probe run reads it back")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child mode: one size, JSON on stdout
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, profile=args.profile, cloud_image=args.cloud_image, workers=args.workers,
                                held=args.held)))
        return 0
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.hosts}
    for _ in range(max(1, args.repeat)):
        for n in args.hosts:  # interleaved, so a burst of load on the machine hits every size alike
            cmd = [sys.executable, __file__, "--one", str(n)]
            if args.profile and n == max(args.hosts) and not runs[n]:
                cmd.append("--profile")
            if args.cloud_image:
                cmd.append("--cloud-image")
            if args.workers is not None:
                cmd += ["--workers", str(args.workers)]
            if args.held:
                cmd.append("--held")
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err, peak_kib = communicate_sampled(child)
            if child.returncode != 0:
                print(f"{n} hosts: failed\n{err[-2000:]}", file=sys.stderr)
                return 1
            r = json.loads(out)
            r["peak_pss_mb"] = round(peak_kib / 1024)
            runs[n].append(r)
    cols = ["hosts", "workers", "build_fleet_s", "write_s", "total_s", "per_1k_hosts_s", "cpu_build_s", "cpu_write_s",
            "cpu_total_s", "workers_cpu_s", "peak_pss_mb", "peak_rss_mb", "worker_peak_rss_mb", "fleet_json_mb", "classes", "findings"]
    print(f"runs per size: {max(1, args.repeat)}; median (min-max)")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for rs in runs.values():
        cells = []
        for c in cols:
            values = [r[c] for r in rs]
            med = statistics.median(values)
            med = int(med) if all(isinstance(v, int) for v in values) and med == int(med) else round(med, 2)
            cells.append(str(med) if min(values) == max(values) else f"{med} ({min(values)}-{max(values)})")
        print("| " + " | ".join(cells) + " |")
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "profile"} for rs in runs.values() for r in rs]))
    rows = [r for rs in runs.values() for r in rs]
    for r in rows:
        if "profile" in r:
            print(f"\ncProfile of build_fleet, {r['hosts']} hosts (by own time):\n{r['profile']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
