"""`--shard K/N`: one of N disjoint parts of an inventory, the same on every controller.

A host belongs to part 1 + (the first 8 bytes of SHA-256 of its name, big-endian) mod N.  It
depends on the name alone: not on the inventory's order, on other hosts, on the Python version
or the machine (str hash is salted per process), so N controllers (or AWX slices, cron jobs)
given the same N and their own K cover every host exactly once, and a host keeps its part when
others are added or removed.
"""

from __future__ import annotations

import hashlib
import re

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardError(ValueError):
    pass


def parse_shard(spec: str) -> tuple[int, int]:
    """'K/N' -> (K, N), 1 <= K <= N."""
    m = _SPEC.match(spec)
    if not m:
        raise ShardError(f"--shard takes K/N (e.g. 2/8), got {spec!r}")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= k <= n:
        raise ShardError(f"--shard {spec}: K must be between 1 and N")
    return k, n


def shard_of(name: str, n: int) -> int:
    """The part (1..n) a host name falls in."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()
    return 1 + int.from_bytes(digest[:8], "big") % n


def in_shard(name: str, k: int, n: int) -> bool:
    return shard_of(name, n) == k
