"""Transports: run one command with stdin under a deadline on a host (SSH or local), then close."""

from orchestrator.transport.base import (
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MAX_STDERR,
    CommandResult,
    FailureKind,
    ProbeNotAvailable,
    Transport,
    TransportCapabilities,
    TransportError,
    TransportOptions,
)
from orchestrator.transport.become import become_failure, wrap_command
from orchestrator.transport.factory import (
    TRANSPORTS,
    capabilities,
    known_connections,
    open_transport,
    register_transport,
    unregister_transport,
)
from orchestrator.transport.local import LocalTransport


def __getattr__(name: str) -> object:
    # SshTransport pulls in Fabric and Paramiko: only when someone asks for it.
    if name == "SshTransport":
        from orchestrator.transport.ssh import SshTransport

        return SshTransport
    raise AttributeError(name)


__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_MAX_STDERR",
    "TRANSPORTS",
    "CommandResult",
    "FailureKind",
    "LocalTransport",
    "ProbeNotAvailable",
    "SshTransport",
    "Transport",
    "TransportCapabilities",
    "TransportError",
    "TransportOptions",
    "become_failure",
    "capabilities",
    "known_connections",
    "open_transport",
    "register_transport",
    "unregister_transport",
    "wrap_command",
]
