"""The ports the tests' daemons (sshd, slurmctld, slurmd) are told to listen on.

A port is chosen free, written into the daemon's config and bound by the daemon a moment later.
A port from the kernel's ephemeral range can be taken in that moment by any outgoing connection
(CI's parallel tiers open thousands), which once stopped a slurmd with "Address already in use".
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import tests.support.slurm as slurm
from tests.support.ports import _ephemeral_low, free_port, port_range


def test_a_port_is_free_below_the_ephemeral_range_and_not_one_already_given() -> None:
    taken: set[int] = set()
    for _ in range(50):
        port = free_port(taken)
        low, high = port_range()
        assert low <= port < high and port not in taken
        assert high <= _ephemeral_low() or (low, high) == (1024, 65536)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
        taken.add(port)


@pytest.mark.slow
def test_a_cluster_whose_port_was_taken_starts_again_on_new_ports(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    reason = slurm.missing_reason()
    if reason:
        pytest.skip(reason)
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        given: list[int] = []

        def first_node_gets_the_held_port(taken: set[int] | None = None) -> int:
            given.append(free_port(taken) if len(given) != 1 else held.getsockname()[1])
            return given[-1]

        monkeypatch.setattr(slurm, "free_port", first_node_gets_the_held_port)
        cluster = slurm.start_cluster(tmp_path / "c", 2)
        try:
            assert "Address already in use" in "".join(
                p.read_text(errors="replace") for p in (tmp_path / "c" / "log").glob("slurmd-*.log"))
            assert cluster.dir == tmp_path / "c" / "2" and len(given) == 6
            nodes = cluster.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=30).stdout.split()
            assert nodes == ["node1", "idle", "node2", "idle"]
        finally:
            cluster.stop()
