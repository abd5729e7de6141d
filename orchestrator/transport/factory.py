"""Choosing a transport for a host by its `ansible_connection`.

Other modules add kinds (the recorded-envelope `replay` transport, for one) with
`register_transport("replay", factory)`; the factory receives the host and the options.
"""

from __future__ import annotations

from typing import Callable

from orchestrator.inventory.model import Host
from orchestrator.transport.base import Transport, TransportError, TransportOptions
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.replay import ReplayTransport

TransportFactory = Callable[[Host, TransportOptions], Transport]


def _ssh(host: Host, options: TransportOptions) -> Transport:
    # Imported on first use: local and replay runs (the demo, a GPU box probing itself) need no
    # Fabric/Paramiko import and start faster.
    from orchestrator.transport.ssh import SshTransport

    return SshTransport(host, options)


# ansible_connection value -> factory. "paramiko" and "smart" are Ansible's other names for SSH.
TRANSPORTS: dict[str, TransportFactory] = {
    "ssh": _ssh,
    "paramiko": _ssh,
    "smart": _ssh,
    "local": LocalTransport,
    "replay": ReplayTransport,
}


def register_transport(name: str, factory: TransportFactory) -> None:
    TRANSPORTS[name] = factory


def open_transport(host: Host, options: TransportOptions) -> Transport:
    """The transport for `host`; nothing is connected yet (SSH connects on the first run)."""
    kind = host.connection
    factory = TRANSPORTS.get(kind)
    if factory is None:
        raise TransportError(
            "config",
            f"{host.name}: ansible_connection {kind!r} is not supported (known: {', '.join(sorted(TRANSPORTS))}); "
            "fix the inventory",
        )
    return factory(host, options)
