#!/usr/bin/env python3
"""One step of judging in two codes, in one process, ms CPU a host: a module as another checkout
has it against this checkout's.

    python bench/step_ab.py BASE_REPO MODULE STEP [PROBE]
    python bench/step_ab.py /tmp/base orchestrator.facts.normalize.budget bound
    python bench/step_ab.py /tmp/base orchestrator.facts.normalize.nvlink normalize nvlink
    python bench/step_ab.py /tmp/base orchestrator.verdict.checks.p2p check.check_p2p

BASE_REPO's file of MODULE is executed into a module object of its own (importing this checkout's
other modules), so the change measured must lie in that one file.  Both are run over the same 40
demo-derived hosts (bench/controller_bench.py's inputs), first compared answer by answer (their
repr: a step that answers otherwise is refused), then timed turn by turn, the collector off, and
the minimum of 40 rounds printed.  Alternating within one process is what shows a change of a few
microseconds a host on a shared machine, where separate runs of the same code differ by 20 %.
STEP: normalize (PROBE's normalizer), bound, check_fields, fleet_facts, level_matrix, measures, or
check.NAME (a host check of MODULE).
"""

from __future__ import annotations

import gc
import importlib
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(HERE), str(HERE / "bench")]

import controller_bench as cb  # noqa: E402

from orchestrator.facts.normalize import budget, normalize_host  # noqa: E402
from orchestrator.verdict import coverage  # noqa: E402
from orchestrator.verdict.checks.base import HostView  # noqa: E402

HOSTS, ROUNDS = 40, 40


def base_module(repo: Path, name: str) -> types.ModuleType:
    mine = importlib.import_module(name)
    rel = Path(str(mine.__file__)).relative_to(HERE)
    old = types.ModuleType(name)
    old.__dict__["__package__"] = mine.__package__
    path = repo / rel
    exec(compile(path.read_text(), str(path), "exec"), old.__dict__)
    return old


def work(m: Any, step: str, probe: str | None, inputs: tuple[Any, ...]) -> list[Callable[[], Any]]:
    """The calls of `step` in module `m`, one a host, on the inputs both codes share."""
    hosts, expect, datas, facts = inputs
    if step == "normalize" and probe:
        bounded = [budget.bound(probe, d[probe])[0] for d in datas if probe in d]
        return [lambda d=d: m.normalize(d) for d in bounded]
    if step in ("bound", "check_fields"):
        return [lambda d=d, p=p: getattr(m, step)(p, d[p]) for d in datas for p in d]
    if step in ("fleet_facts", "level_matrix", "measures"):
        return [lambda f=f: getattr(m, step)(f) for f in facts]
    if step.startswith("check."):
        check = getattr(m, step[len("check."):])
        views = [HostView(name=h.name, facts=f, outcomes=coverage.judged_outcomes(h.probes, f), expect=expect[h.name])
                 for h, f in zip(hosts, facts)]
        return [lambda v=v: list(check(v)) for v in views]
    raise SystemExit(f"unknown step {step!r}")


def main() -> None:
    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    repo, name, step = Path(sys.argv[1]).resolve(), sys.argv[2], sys.argv[3]
    probe = sys.argv[4] if len(sys.argv) == 5 else None
    made, expect = cb.make_inputs(HOSTS + 25, held=False)
    hosts = made[25:]
    datas = [h.load_data() for h in hosts]
    inputs = (hosts, expect, datas, [normalize_host(d)[0] for d in datas])
    runs = {"base": work(base_module(repo, name), step, probe, inputs),
            "this": work(importlib.import_module(name), step, probe, inputs)}
    for a, b in zip(runs["base"], runs["this"]):
        if repr(a()) != repr(b()):
            raise SystemExit("the two codes answer differently: no timing")
    gc.disable()
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(ROUNDS):
        for label, calls in runs.items():
            t = time.process_time()
            for call in calls:
                call()
            best[label] = min(best[label], time.process_time() - t)
    print(f"{name} {step}: " + ", ".join(f"{k} {v / HOSTS * 1e6:.1f}" for k, v in best.items())
          + f" us CPU a host (min of {ROUNDS} interleaved rounds, {HOSTS} hosts)")


if __name__ == "__main__":
    main()
