"""What bench/micro_*.py and bench/equivalence.py share: the demo recordings' envelope data, and
timing (or profiling) one named piece of work on the CPU clock."""

from __future__ import annotations

import cProfile
import json
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def recorded_data(recordings: Path) -> list[tuple[str, dict[str, Any]]]:
    """(host, probe -> data of its ok envelopes) for every demo recording, in name order."""
    hosts = []
    for d in sorted(recordings.iterdir()):
        data = {}
        for f in sorted(d.glob("*.json")):
            env = json.loads(f.read_text())
            if env.get("status") == "ok":
                data[env["probe"]] = env["data"]
        hosts.append((d.name, data))
    return hosts


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
