"""Listening ports for the daemons a test starts (sshd, slurmctld, slurmd).

A daemon is told its port in a config file and binds it later, so the port is chosen free and
then left unbound for a moment. A port from the kernel's ephemeral range can be taken in that
moment by any outgoing connection on the machine (the parallel test tiers open thousands), so
the ports come from below that range, where the kernel hands out nothing by itself. A daemon
that still finds its port taken (another test picked the same one) is started again by its
caller with new ports.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000


def _ephemeral_low() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default lower bound


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_range() -> tuple[int, int]:
    """Where the ports come from: below the ephemeral range, or any unprivileged port on a machine
    that made (nearly) every port ephemeral."""
    low, high = _LOWEST, _ephemeral_low()
    return (low, high) if high - low >= 1000 else (1024, 65536)


def free_port(taken: set[int] | None = None) -> int:
    """A port on 127.0.0.1 that is free now, from `port_range()` and not in `taken`."""
    low, high = port_range()
    for _ in range(200):
        port = random.randrange(low, high)
        if port not in (taken or set()) and _bindable(port):
            return port
    raise RuntimeError(f"no free port between {low} and {high} on 127.0.0.1")
