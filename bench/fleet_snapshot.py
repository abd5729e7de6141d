#!/usr/bin/env python3
"""Write the fleet.json of N bench hosts with a fixed run dict, to prove that a speed change leaves
the output byte for byte the same:

    python bench/fleet_snapshot.py 1000 /tmp/before.json     # before the change
    python bench/fleet_snapshot.py 1000 /tmp/after.json      # after it
    cmp /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import controller_bench as cb  # noqa: E402

from orchestrator.store import atomic  # noqa: E402
from orchestrator.verdict.judge import build_fleet  # noqa: E402

RUN = {"id": "snapshot", "started": "2026-01-01T00:00:00Z", "finished": "2026-01-01T00:00:01Z",
       "inventory": ["demo"], "playbook": None, "probes": ["host", "pcie", "nvml", "nvlink"], "limit": None,
       "user": None}

n, out = int(sys.argv[1]), sys.argv[2]
inputs, expect = cb.make_inputs(n)
atomic.write_json(out, build_fleet(dict(RUN), inputs, lambda h: expect[h.name], lambda h: {}))
