"""What bench/micro_*.py and bench/equivalence.py share: the demo recordings' envelope data, and
timing (or profiling) one named piece of work on the CPU clock."""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.normalize_corpus import recorded_data  # one home, shared with the tests

__all__ = ["best_cpu", "profile", "recorded_data"]


def profile(run: Callable[[str], None], name: str) -> None:
    """cProfile `run(name)` on the CPU clock (the machine is shared) and print the top 20."""
    prof = cProfile.Profile(time.process_time)
    prof.runcall(run, name)
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def best_cpu(run: Callable[[str], None], name: str, repeat: int) -> float:
    """The least CPU seconds of `repeat` calls of `run(name)`."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        run(name)
        best = min(best, time.process_time() - t)
    return best
