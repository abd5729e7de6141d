"""The transport registry: a transport is its class plus one register_transport() call.

The inventory accepts exactly the registered `ansible_connection` names, the runner reads each
class's declared capabilities instead of knowing transports by name, and each failure kind
carries the outcome it gives the host.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from orchestrator.engine.outcomes import Outcome, transport_outcome
from orchestrator.engine.runner import HostResult, ProbeCall, RunOptions, bundles, probe_command, run_fleet
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.model import Host, InventoryError
from orchestrator.transport.base import (
    CommandResult,
    FailureKind,
    TransportCapabilities,
    TransportError,
    TransportOptions,
)
from orchestrator.transport.factory import (
    canonical_connection,
    capabilities,
    known_connections,
    open_transport,
    register_transport,
    unregister_transport,
)
from orchestrator.transport.local import LocalTransport


class PipedToPython:
    """A transport of the test's own: runs each command here, through the local transport."""

    capabilities: ClassVar[TransportCapabilities] = TransportCapabilities(pipes_to_interpreter=True)
    commands: ClassVar[list[str]] = []

    def __init__(self, host: Host, options: TransportOptions):
        self._local = LocalTransport(host, options)

    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None, *,
            deadline: float | None = None) -> CommandResult:
        PipedToPython.commands.append(command)
        return self._local.run(command, stdin, timeout, deadline=deadline)

    def close(self) -> None:
        self._local.close()


class _Sink:
    def __init__(self) -> None:
        self.results: list[HostResult] = []

    def host_finished(self, result: HostResult) -> None:
        self.results.append(result)


@pytest.fixture
def piped() -> Iterator[str]:
    register_transport("piped-test", PipedToPython, aliases=("piped-alias",))
    PipedToPython.commands.clear()
    try:
        yield "piped-test"
    finally:
        unregister_transport("piped-test")


def _inventory(tmp_path: Path, connection: str) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(
        "all:\n  hosts:\n    box01:\n      ansible_connection: " + connection + "\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    return path


def test_inventory_refuses_an_unregistered_connection_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as err:
        load_inventory([str(_inventory(tmp_path, "piped-test"))])
    msg = str(err.value)
    assert "inv.yml:4: host 'box01': ansible_connection 'piped-test' is not supported" in msg
    for name in ("ssh", "local", "replay"):
        assert name in msg


def test_a_registered_transport_runs_probes_end_to_end(tmp_path: Path, piped: str) -> None:
    inv = load_inventory([str(_inventory(tmp_path, piped))])
    host = inv.hosts["box01"]
    assert host.connection == piped
    calls = [ProbeCall("host", timeout=30), ProbeCall("nvml", timeout=30)]
    sink = _Sink()
    results = run_fleet([host], calls, RunOptions(), open_transport, sink)
    probes = results[0].probes
    assert probes["host"].outcome == Outcome.OK, probes["host"].reason
    assert probes["host"].envelope is not None and probes["host"].envelope.data
    assert probes["nvml"].outcome in (Outcome.OK, Outcome.UNSUPPORTED)
    # it declared that it pipes to an interpreter: both probes went to one interpreter start
    assert len(PipedToPython.commands) == 1 and sys.executable in PipedToPython.commands[0]
    assert [r.host.name for r in sink.results] == ["box01"]


def test_an_alias_stands_for_its_transport(tmp_path: Path, piped: str) -> None:
    inv = load_inventory([str(_inventory(tmp_path, "piped-alias"))])
    assert inv.hosts["box01"].connection == piped
    assert canonical_connection("piped-alias") == piped and canonical_connection("nope") is None
    assert "piped-alias" in known_connections()


def test_unregistering_removes_the_name_and_its_aliases(piped: str) -> None:
    unregister_transport(piped)
    assert piped not in known_connections() and "piped-alias" not in known_connections()
    with pytest.raises(TransportError) as err:
        open_transport(Host("x", {"ansible_connection": piped}), TransportOptions())
    assert err.value.kind is FailureKind.CONFIG


def test_the_built_in_transports_declare_what_they_can_do() -> None:
    assert capabilities("ssh").pipes_to_interpreter and not capabilities("ssh").runs_as_controller
    assert capabilities("paramiko") == capabilities("ssh")
    assert capabilities("local") == TransportCapabilities(pipes_to_interpreter=True, runs_as_controller=True)
    assert capabilities("replay") == TransportCapabilities()
    assert capabilities("not-registered") == TransportCapabilities()


def test_the_runner_bundles_only_where_the_transport_pipes_to_an_interpreter() -> None:
    calls = [ProbeCall("host"), ProbeCall("nvml")]
    assert bundles(Host("a", {"ansible_connection": "local"}), calls, RunOptions())
    assert not bundles(Host("b", {"ansible_connection": "replay"}), calls, RunOptions())


def test_become_needs_no_sudo_only_on_a_transport_running_as_this_root_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert "sudo" not in probe_command(Host("a", {"ansible_connection": "local"}), become=True)
    assert "sudo -n" in probe_command(Host("b", {"ansible_connection": "ssh"}), become=True)


@pytest.mark.parametrize(("kind", "outcome"), [
    (FailureKind.UNREACHABLE, Outcome.UNREACHABLE),
    (FailureKind.CONNECT_TIMEOUT, Outcome.UNREACHABLE),
    (FailureKind.AUTH, Outcome.UNREACHABLE),
    (FailureKind.HOSTKEY, Outcome.UNREACHABLE),
    (FailureKind.PROTOCOL, Outcome.UNREACHABLE),
    (FailureKind.DISCONNECTED, Outcome.FAILED),
    (FailureKind.CONFIG, Outcome.FAILED),
])
def test_each_failure_kind_carries_its_outcome(kind: FailureKind, outcome: Outcome) -> None:
    assert transport_outcome(kind) is outcome
    err = TransportError(kind.value, "x")  # given by value, as older callers do
    assert err.kind is kind and err.kind == kind.value


def test_an_undeclared_failure_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        TransportError("gremlins", "x")
