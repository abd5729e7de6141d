"""What this process may use for workers: the CPUs it may run on, and whether it may fork now."""

from __future__ import annotations

import os
import threading


def usable_cores() -> int:
    """The affinity mask's CPUs (a container's or taskset's cpuset) where the OS has one, else every CPU."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def may_fork() -> bool:
    """The OS forks and no thread runs but this one: a lock another thread held at the fork would
    stay held in the child forever."""
    return hasattr(os, "fork") and threading.active_count() == 1
