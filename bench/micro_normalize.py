#!/usr/bin/env python3
"""CPU milliseconds per host of each normalizer and the topology merge, over the 25 demo recordings
(best of --repeat passes of --hosts hosts; a quiet, less noisy figure than a whole build).

    python bench/micro_normalize.py [--hosts 1000] [--repeat 5] [--repo PATH] [--profile pcie] [--only pcie p2p]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from microtime import best_cpu, profile, recorded_data

ap = argparse.ArgumentParser()
ap.add_argument("--hosts", type=int, default=1000)
ap.add_argument("--repeat", type=int, default=5)
ap.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
ap.add_argument("--profile", help="cProfile this probe's normalizer (or 'topology')")
ap.add_argument("--only", nargs="+", default=["pcie", "nvlink", "p2p", "nvml", "host", "topology"],
                help="normalizers to time (probe names, or 'topology' for the merge)")
args = ap.parse_args()
sys.path.insert(0, str(Path(args.repo).resolve()))

from orchestrator.facts import normalize  # noqa: E402

RECORDINGS = Path(args.repo) / "orchestrator" / "demo" / "recordings"
hosts = [data for _, data in recorded_data(RECORDINGS)]
fleet = [hosts[i % len(hosts)] for i in range(args.hosts)]
facts = [normalize.normalize_host(h)[0] for h in hosts]
fleet_facts = [facts[i % len(facts)] for i in range(args.hosts)]


def run(name: str) -> None:
    if name == "topology":
        for f in fleet_facts:
            normalize.topology.merge_facts(f)
        return
    _, fn = normalize.NORMALIZERS[name]
    for h in fleet:
        if name in h:
            fn(h[name])


if args.profile:
    profile(run, args.profile)
    sys.exit(0)


for name in args.only:
    best = best_cpu(run, name, args.repeat)
    print(f"{name:9s} {best * 1000 / args.hosts:7.3f} ms/host  ({best:.3f} s per {args.hosts} hosts)")
