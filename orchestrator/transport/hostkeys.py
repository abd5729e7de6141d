"""Host-key policies (strict / accept-new / off, as OpenSSH's StrictHostKeyChecking) for Paramiko.

known_hosts files are parsed once per process and shared read-only by every connection (a fleet of
thousands of hosts must not re-parse a large known_hosts file per host). Keys accepted under
`accept-new` are appended to the user's known_hosts under a lock, one line each, and added to the
shared copy so later connections in the same run see them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from paramiko import HostKeys, MissingHostKeyPolicy, PKey, SSHClient

from orchestrator.inventory.model import Host
from orchestrator.transport.base import FailureKind, TransportError, TransportOptions

POLICIES = ("strict", "accept-new", "off")


def host_key_policy(host: Host, options: TransportOptions) -> str:
    """The policy for this host: inventory variable probe_host_key_policy, else the option."""
    value = str(host.vars.get("probe_host_key_policy", options.host_key_policy)).strip().lower()
    if value not in POLICIES:
        raise TransportError(
            FailureKind.CONFIG,
            f"{host.name}: host-key policy {value!r} is not one of {', '.join(POLICIES)}; "
            "fix probe_host_key_policy in the inventory or --host-key-policy",
        )
    return value

_lock = threading.Lock()
# path -> ((mtime_ns, size) when parsed, parsed keys)
_cache: dict[str, tuple[tuple[int, int], HostKeys]] = {}


def _signature(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def load_known_hosts(paths: list[str]) -> HostKeys:
    """The keys of all existing files in `paths`, merged. Missing or unreadable files count as empty."""
    merged = HostKeys()
    for path in paths:
        keys = _load_one(path)
        if keys is None:
            continue
        if len(paths) == 1:
            return keys  # the common case: share the cached object itself
        for entry in keys._entries:  # type: ignore[attr-defined]
            merged._entries.append(entry)  # type: ignore[attr-defined]
    return merged


def _load_one(path: str) -> HostKeys | None:
    with _lock:
        return _load_locked(path)


def _load_locked(path: str) -> HostKeys | None:
    sig = _signature(path)
    if sig is None:
        return None
    cached = _cache.get(path)
    if cached is not None and cached[0] == sig:
        return cached[1]
    keys = HostKeys()
    try:
        keys.load(path)
    except (OSError, UnicodeDecodeError):
        return None
    _cache[path] = (sig, keys)
    return keys


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def append_known_host(path: str, name: str, key: PKey) -> None:
    """Record an accepted key the way ssh does: one plain line appended to the user's known_hosts."""
    line = f"{name} {key.get_name()} {key.get_base64()}\n"
    with _lock:
        current = _load_locked(path)
        if current is not None:
            known = current.lookup(name)
            if known is not None and known.get(key.get_name()) == key:
                return  # another connection to the same address recorded it a moment ago
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        # keep the shared parsed copy current instead of re-parsing the whole file next time
        sig = _signature(path)
        if sig is not None:
            if current is None:
                current = HostKeys()
            current.add(name, key.get_name(), key)
            _cache[path] = (sig, current)


class UnknownHostKey(Exception):
    def __init__(self, name: str, key: PKey):
        super().__init__(name)
        self.name = name
        self.key = key


class _Policy(MissingHostKeyPolicy):
    def __init__(self, policy: str, record_to: str):
        self.policy = policy
        self.record_to = record_to

    def missing_host_key(self, client: SSHClient, hostname: str, key: PKey) -> None:
        if self.policy == "off":
            return
        if self.policy == "accept-new":
            append_known_host(self.record_to, hostname, key)
            return
        raise UnknownHostKey(hostname, key)


@dataclass
class HostKeySetup:
    policy: str  # strict | accept-new | off
    read_from: list[str]  # known_hosts files consulted
    record_to: str  # where accept-new appends

    def apply(self, client: SSHClient) -> None:
        """Install the policy and the known keys on a Paramiko client (before it connects)."""
        if self.policy != "off":
            # Paramiko only ever reads this attribute (.get / lookup), so sharing one parsed
            # object between connections is safe; additions go through append_known_host.
            client._system_host_keys = load_known_hosts(self.read_from)  # type: ignore[attr-defined]
        client.set_missing_host_key_policy(_Policy(self.policy, self.record_to))
