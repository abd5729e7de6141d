"""The transport registry: `ansible_connection` name -> transport class, and what each can do.

A transport is a class taking (host, options) with a `capabilities` class attribute; adding one
is its module plus one `register_transport(name, cls)` call. The inventory validates
`ansible_connection` against this registry and the engine reads each class's capabilities, so no
other module keeps a list of connection names.
"""

from __future__ import annotations

import importlib
from typing import Callable

from orchestrator.inventory import connections
from orchestrator.inventory.model import Host
from orchestrator.transport.base import (
    FailureKind,
    Transport,
    TransportCapabilities,
    TransportError,
    TransportOptions,
)
from orchestrator.transport.local import LocalTransport
from orchestrator.transport.replay import ReplayTransport

TransportFactory = Callable[[Host, TransportOptions], Transport]
_NO_CAPABILITIES = TransportCapabilities()


class _Deferred:
    """A transport class imported on first use: local and replay runs (the demo, a GPU box
    probing itself) need no Fabric/Paramiko import and start faster."""

    def __init__(self, module: str, name: str):
        self._module = module
        self._name = name

    def load(self) -> TransportFactory:
        cls: TransportFactory = getattr(importlib.import_module(self._module), self._name)
        return cls

    def __call__(self, host: Host, options: TransportOptions) -> Transport:
        return self.load()(host, options)

    @property
    def capabilities(self) -> TransportCapabilities:
        return capabilities_of_factory(self.load())


# ansible_connection value -> transport class (or a factory with the same call).
TRANSPORTS: dict[str, TransportFactory] = {}
_ALIAS_OF: dict[str, str] = {}  # an alias -> the name it stands for


def register_transport(name: str, factory: TransportFactory, aliases: tuple[str, ...] = ()) -> None:
    """Make `ansible_connection: name` (and each alias) run through `factory`."""
    TRANSPORTS[name] = factory
    _ALIAS_OF.pop(name, None)
    for alias in aliases:
        TRANSPORTS[alias] = factory
        _ALIAS_OF[alias] = name


def unregister_transport(name: str) -> None:
    for alias in [a for a, n in _ALIAS_OF.items() if n == name]:
        TRANSPORTS.pop(alias, None)
        del _ALIAS_OF[alias]
    TRANSPORTS.pop(name, None)


def canonical_connection(name: str) -> str | None:
    """The registered name behind `name` (paramiko and smart -> ssh), or None when unknown."""
    if name not in TRANSPORTS:
        return None
    return _ALIAS_OF.get(name, name)


def known_connections() -> list[str]:
    """Every accepted name, aliases included, in registration order."""
    return list(TRANSPORTS)


def capabilities_of_factory(factory: object) -> TransportCapabilities:
    caps = getattr(factory, "capabilities", None)
    return caps if isinstance(caps, TransportCapabilities) else _NO_CAPABILITIES


def capabilities(connection: str) -> TransportCapabilities:
    """What the transport of `connection` can do; an unknown one is assumed to do nothing special."""
    factory = TRANSPORTS.get(connection)
    return capabilities_of_factory(factory) if factory is not None else _NO_CAPABILITIES


def open_transport(host: Host, options: TransportOptions) -> Transport:
    """The transport for `host`; nothing is connected yet (SSH connects on the first run)."""
    kind = host.connection
    factory = TRANSPORTS.get(kind)
    if factory is None:
        raise TransportError(
            FailureKind.CONFIG,
            f"{host.name}: ansible_connection {kind!r} is not supported (known: {', '.join(sorted(TRANSPORTS))}); "
            "fix the inventory",
        )
    return factory(host, options)


class _Book:
    def canonical(self, name: str) -> str | None:
        return canonical_connection(name)

    def known(self) -> list[str]:
        return known_connections()


# "paramiko" and "smart" are Ansible's other names for SSH.
register_transport("ssh", _Deferred("orchestrator.transport.ssh", "SshTransport"), aliases=("paramiko", "smart"))
register_transport("local", LocalTransport)
register_transport("replay", ReplayTransport)
register_transport("slurm", _Deferred("orchestrator.transport.slurm", "SlurmTransport"))
# What every process has from importing this module: a worker process (engine/procs.py) knows
# these and nothing registered later.
BUILT_IN: dict[str, TransportFactory] = dict(TRANSPORTS)
connections.install(_Book())
