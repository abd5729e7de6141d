"""Host-key policies (strict / accept-new / off, as OpenSSH's StrictHostKeyChecking) for Paramiko.

known_hosts files are parsed once per process and shared read-only by every connection (a fleet of
thousands of hosts must not re-parse a large known_hosts file per host). Keys accepted under
`accept-new` are appended to the user's known_hosts under a lock (threads and processes), one line each, and added to the
shared copy so later connections in the same run see them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from paramiko import HostKeys, MissingHostKeyPolicy, PKey, SSHClient
from paramiko.hostkeys import HostKeyEntry

from orchestrator.files import atomic
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


class IndexedHostKeys(HostKeys):
    """Paramiko's HostKeys, with lookup() finding a name through a dict instead of a scan.

    Paramiko compares the name with every entry on every connection: one known_hosts file listing
    a 1,000-host fleet cost a million comparisons per run, on the core the fan-out shares.  Here a
    plain name (or a hashed one given as such) is one dict access; only hashed entries (`|1|salt|hash`,
    each with its own salt) are still tried one by one, with Paramiko's own match.  The answer is
    Paramiko's: the same entries in file order, in Paramiko's own mapping of key types.
    """

    def __init__(self) -> None:
        super().__init__()
        self._index_lock = threading.Lock()
        self._indexed: tuple[int, int] = (0, 0)  # (id of the entry list, entries covered)
        self._by_name: dict[str, list[tuple[int, HostKeyEntry]]] = {}
        self._hashed: list[tuple[int, HostKeyEntry]] = []

    def _refresh(self) -> None:
        # entries are appended (parsing, add()); anything else (a deletion, clear()) rebuilds
        entries: list[HostKeyEntry] = self._entries  # type: ignore[attr-defined]
        start = self._indexed[1] if self._indexed[0] == id(entries) and self._indexed[1] <= len(entries) else 0
        if start == 0:
            self._by_name, self._hashed = {}, []
        for pos in range(start, len(entries)):
            entry = entries[pos]
            for name in dict.fromkeys(entry.hostnames):
                self._by_name.setdefault(name, []).append((pos, entry))
            if any(name.startswith("|1|") for name in entry.hostnames):
                self._hashed.append((pos, entry))
        self._indexed = (id(entries), len(entries))

    def lookup(self, hostname: str) -> Any:
        with self._index_lock:
            self._refresh()
            found = dict(self._by_name.get(hostname, ()))
            if not hostname.startswith("|1|"):
                found.update((pos, e) for pos, e in self._hashed
                             if pos not in found and self._hostname_matches(hostname, e))  # type: ignore[attr-defined]
        if not found:
            return None
        view = HostKeys()
        view._entries = [found[pos] for pos in sorted(found)]  # type: ignore[attr-defined]
        sub: Any = view.lookup(hostname)
        sub._hostkeys = self  # a key set through the answer is added here, as Paramiko's would be
        return sub


# paths -> (the parsed files and their entry counts when merged, the merge); the parsed objects
# themselves are kept, not their ids, which a re-parsed file's new object could reuse
_merged: dict[tuple[str, ...], tuple[list[tuple[HostKeys, int]], HostKeys]] = {}


def load_known_hosts(paths: list[str]) -> HostKeys:
    """The keys of all existing files in `paths`, merged. Missing or unreadable files count as empty.

    Shared between connections: one file's parsed object itself, several files' merge kept while
    none of them changed (a merge per connection would copy every entry per host)."""
    loaded = [keys for keys in (_load_one(path) for path in paths) if keys is not None]
    if len(loaded) == 1:
        return loaded[0]
    parts = [(k, len(k._entries)) for k in loaded]  # type: ignore[attr-defined]
    with _lock:
        cached = _merged.get(tuple(paths))
        if cached is not None and len(cached[0]) == len(parts) and all(
                a is b and m == n for (a, m), (b, n) in zip(cached[0], parts)):
            return cached[1]
        merged = IndexedHostKeys()
        for keys in loaded:
            merged._entries.extend(keys._entries)  # type: ignore[attr-defined]
        _merged[tuple(paths)] = (parts, merged)
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
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    _cache[path] = (sig, parse_known_hosts(path, lines))
    return _cache[path][1]


def parse_known_hosts(path: str, lines: list[str]) -> HostKeys:
    """known_hosts lines as OpenSSH reads them: a line it cannot parse is skipped with a warning
    (Paramiko's own loader raises on the first one, which cost the whole run)."""
    keys = IndexedHostKeys()
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            entry = HostKeyEntry.from_line(text, lineno)
        except Exception as e:  # InvalidHostKey, binascii errors, an unknown key type's ValueError
            entry = None
            why = type(e).__name__
        else:
            why = "not a known_hosts line"
        if entry is None:
            print(f"probe: warning: {path}:{lineno}: skipped ({why}), as ssh does", file=sys.stderr)
            continue
        keys._entries.append(entry)  # type: ignore[attr-defined]
    return keys


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def append_known_host(path: str, name: str, key: PKey) -> None:
    """Record an accepted key the way ssh does: one plain line appended to the user's known_hosts."""
    line = f"{name} {key.get_name()} {key.get_base64()}\n"
    with _lock, _across_processes(path):
        current = _load_locked(path)
        if current is not None:
            known = current.lookup(name)
            if known is not None and known.get(key.get_name()) == key:
                return  # another connection to the same address recorded it a moment ago
        _append_line(path, line.encode())
        # keep the shared parsed copy current instead of re-parsing the whole file next time
        sig = _signature(path)
        if sig is not None:
            if current is None:
                current = IndexedHostKeys()
            current.add(name, key.get_name(), key)
            _cache[path] = (sig, current)


@contextlib.contextmanager
def _across_processes(path: str) -> Iterator[None]:
    """The append held against other processes too (`probe run`'s workers, engine/procs.py; another
    run): an flock on the file's directory, since the file itself is replaced by each append
    (a lock on it would be on the old copy).  Without it two processes read the same file and
    the second replacement loses the first one's line."""
    parent = os.path.dirname(os.path.realpath(path)) or "."
    os.makedirs(parent, mode=0o700, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _append_line(path: str, line: bytes) -> None:
    """`line` added to the file at `path` atomically (a reader, or ssh itself, sees the file before or
    after, never half a line), after a newline where its last line has none (appending onto it would
    corrupt both), with the file's permissions kept (0600 for a new file).  A symbolic link (dotfiles)
    is followed to the file it names, which is replaced; the link stays."""
    target = os.path.realpath(path)
    parent = os.path.dirname(target)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
    try:
        with open(target, "rb") as f:
            before = f.read()
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        before, mode = b"", 0o600
    if before and not before.endswith(b"\n"):
        before += b"\n"
    atomic.replace(target, lambda f: f.write(before + line), mode)


def confined_known_hosts(path: str) -> bool:
    """Whether an inventory may have accepted keys recorded to `path`: only a file in the user's
    ~/.ssh (an inventory is data; it must not make fleetprobe append to /etc/cron.d/x)."""
    ssh_dir = os.path.realpath(os.path.expanduser("~/.ssh"))
    real = os.path.realpath(path)
    return os.path.dirname(real) == ssh_dir and os.path.basename(real).startswith("known_hosts")


class UnknownHostKey(Exception):
    def __init__(self, name: str, key: PKey):
        super().__init__(name)
        self.name = name
        self.key = key


class _Policy(MissingHostKeyPolicy):
    def __init__(self, policy: str, record_to: str, may_record: bool = True):
        self.policy = policy
        self.record_to = record_to
        self.may_record = may_record

    def missing_host_key(self, client: SSHClient, hostname: str, key: PKey) -> None:
        if self.policy == "off":
            return
        if self.policy == "accept-new" and self.may_record:
            append_known_host(self.record_to, hostname, key)
            return
        raise UnknownHostKey(hostname, key)  # strict, or accept-new where nothing may be recorded


@dataclass
class HostKeySetup:
    policy: str  # strict | accept-new | off
    read_from: list[str]  # known_hosts files consulted
    record_to: str  # where accept-new appends
    may_record: bool = True  # False: an inventory's probe_known_hosts outside ~/.ssh is read, never written

    def apply(self, client: SSHClient) -> None:
        """Install the policy and the known keys on a Paramiko client (before it connects)."""
        if self.policy != "off":
            # Paramiko only ever reads this attribute (.get / lookup), so sharing one parsed
            # object between connections is safe; additions go through append_known_host.
            client._system_host_keys = load_known_hosts(self.read_from)  # type: ignore[attr-defined]
        client.set_missing_host_key_policy(_Policy(self.policy, self.record_to, self.may_record))
