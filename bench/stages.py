#!/usr/bin/env python3
"""CPU seconds per normalizer, merger and check for N bench hosts (bench/controller_bench.py's inputs).

    python bench/stages.py 1000 [REPO]     # REPO: another checkout to time (default: this one)

Each normalizer and check is wrapped with time.process_time (checks are generators: the wrapper
lists them, so the time is the check's own).  The wrappers add a little per call; compare runs of
this script with each other, not with controller_bench's totals.  Stages under 1 % are left out.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path
from typing import Any

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
repo = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent
sys.path[:0] = [str(repo), str(repo / "bench")]

import controller_bench as cb  # noqa: E402

from orchestrator.facts import normalize  # noqa: E402
from orchestrator.verdict import checks  # noqa: E402
from orchestrator.verdict import classes as fingerprint  # noqa: E402
from orchestrator.verdict import judge as fleet  # noqa: E402

T: collections.defaultdict[str, float] = collections.defaultdict(float)


def wrap(name: str, fn: Any) -> Any:
    def timed(*a: Any, **k: Any) -> Any:
        t = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            T[name] += time.process_time() - t
    return timed


def listed(c: Any) -> Any:
    return lambda *a: list(c(*a))


normalize.NORMALIZERS = {p: (s, wrap("norm." + s, f)) for p, (s, f) in normalize.NORMALIZERS.items()}
normalize.MERGERS = [(s, wrap("merge." + s, f)) for s, f in normalize.MERGERS]
checks.HOST_CHECKS[:] = [wrap("check." + c.__module__.split(".")[-1] + "." + c.__name__, listed(c))
                         for c in checks.HOST_CHECKS]
checks.FLEET_CHECKS[:] = [wrap("fleetcheck." + c.__name__, listed(c)) for c in checks.FLEET_CHECKS]
fleet.fingerprint.classify = wrap("classify", fingerprint.classify)
inputs, expect = cb.make_inputs(n)
t = time.process_time()
# in this process (workers=1): the wrappers' sums are this process's own
doc = fleet.build_fleet(cb.RunMeta(id=f"stages-{n}"), inputs, lambda h: expect[h.name], lambda h: {}, workers=1)
T["TOTAL build"] = time.process_time() - t
for k, v in sorted(T.items(), key=lambda x: -x[1]):
    if v > 0.01 * n / 1000:
        print(f"{v:7.2f}  {k}")
