"""How many CPUs this process may run on: the affinity mask (a container's or taskset's cpuset)
where the OS has one, else every CPU."""

from __future__ import annotations

import os


def usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
