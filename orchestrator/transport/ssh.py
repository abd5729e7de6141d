"""SSH transport: Fabric `Connection` (Paramiko underneath), one connection per host, reused.

Every wait is bounded:
* connecting (TCP, SSH banner, key exchange, authentication, and the ProxyJump hops before them)
  shares one budget of `connect_timeout` seconds per attempt; a watchdog shuts the sockets when
  it runs out, because Paramiko's own banner timeout restarts on every byte and a server that
  drips one byte per second would otherwise hold us forever;
* a command gets `timeout` seconds from the moment its channel is requested; at the deadline the
  channel is closed and the result says timed_out.
Only connection errors that look transient (refused, reset or closed before the banner, which is
what sshd does past MaxStartups) are retried, with jittered backoff. Authentication and host-key
failures are never retried: they will not fix themselves and retrying can lock accounts.
"""

from __future__ import annotations

import base64
import errno
import logging
import os
import random
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import paramiko
from fabric import Config, Connection
from paramiko.common import cMSG_CHANNEL_REQUEST
from paramiko.message import Message
from paramiko.ssh_exception import (
    AuthenticationException,
    BadAuthenticationType,
    BadHostKeyException,
    ChannelException,
    IncompatiblePeer,
    NoValidConnectionsError,
    PasswordRequiredException,
    SSHException,
)

from orchestrator.inventory.model import Host
from orchestrator.transport.base import CommandResult, TransportError, TransportOptions
from orchestrator.transport.hostkeys import POLICIES, HostKeySetup, UnknownHostKey, known_hosts_name

READ_CHUNK = 65536

# Paramiko logs every failed handshake with a traceback at ERROR; with no logging configured Python
# would print those to the terminal for each unreachable host. Our TransportError carries the
# reason; the records still reach handlers the application sets up (e.g. a --debug log).
logging.getLogger("paramiko").addHandler(logging.NullHandler())
# how often the read loop wakes without data to notice a connection that died silently
IDLE_WAKE_S = 1.0

_config_lock = threading.Lock()
# config file paths -> (their (mtime, size) when parsed, the parsed ssh_config)
_config_cache: dict[tuple[str, ...], tuple[tuple[tuple[int, int] | None, ...], paramiko.SSHConfig]] = {}


def host_key_policy(host: Host, options: TransportOptions) -> str:
    """The policy for this host: inventory variable probe_host_key_policy, else the option."""
    value = str(host.vars.get("probe_host_key_policy", options.host_key_policy)).strip().lower()
    if value not in POLICIES:
        raise TransportError(
            "config",
            f"{host.name}: host-key policy {value!r} is not one of {', '.join(POLICIES)}; "
            "fix probe_host_key_policy in the inventory or --host-key-policy",
        )
    return value


def _stat_sig(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def fabric_config(ssh_config: str | None) -> Config:
    """A Fabric Config of its own over an ssh_config parsed once per process.

    Like `ssh -F`, an explicit file replaces ~/.ssh/config and /etc/ssh/ssh_config; without one
    both are read (user first, so its settings win). Giving Fabric the parsed object also keeps it
    from re-reading the files every time a ProxyJump hop clones the config.

    The Config itself is never shared between connections: Fabric's Connection() stores a setting
    into its Config (inline_ssh_env), and invoke rebuilds the whole Config on every store, so a
    shared one is briefly empty while another thread reads it (seen as "No attribute or config key
    found for 'gateway'" at 500 hosts). A fresh lazy Config costs ~0.1 ms; the parse is what is shared.
    """
    return Config(ssh_config=parsed_ssh_config(ssh_config), lazy=True)


def parsed_ssh_config(ssh_config: str | None) -> paramiko.SSHConfig:
    """The ssh_config files, parsed once per process while they are unchanged (read-only after)."""
    if ssh_config is not None:
        paths: tuple[str, ...] = (os.path.expanduser(ssh_config),)
        if not os.path.exists(paths[0]):  # `-F /dev/null` is the usual way to read no config
            raise TransportError("config", f"ssh config file {ssh_config} does not exist; fix --ssh-config")
    else:
        paths = (os.path.expanduser("~/.ssh/config"), "/etc/ssh/ssh_config")
    sigs = tuple(_stat_sig(p) for p in paths)
    with _config_lock:
        cached = _config_cache.get(paths)
        if cached is not None and cached[0] == sigs:
            return cached[1]
        parsed = paramiko.SSHConfig()
        for path, sig in zip(paths, sigs):
            if sig is None:
                continue
            try:
                with open(path) as f:
                    parsed.parse(f)
            except (OSError, UnicodeDecodeError, ValueError) as e:
                raise TransportError(
                    "config", f"cannot read ssh config {path}: {_one_line(e)}; fix or remove it"
                ) from e
        _config_cache[paths] = (sigs, parsed)
        return parsed


_key_lock = threading.Lock()
# private key path -> ((mtime, size) when loaded, the key or None when Paramiko must load it itself)
_key_cache: dict[str, tuple[tuple[int, int] | None, paramiko.PKey | None]] = {}


def _loaded_key(path: str) -> paramiko.PKey | None:
    """The private key at `path`, read and parsed once per process while the file is unchanged.

    Given only key_filename, Paramiko re-reads the file for every connection and tries RSA, then
    ECDSA, then Ed25519 parsing on it (an ed25519 key costs two failed parses each time). None when
    Paramiko's own loading must run instead, so its behaviour and errors stay exactly as before:
    a passphrase-protected key (it raises PasswordRequiredException, classified as auth), an
    unreadable or unknown key, or a key with a `-cert.pub` certificate beside it (Paramiko pairs them).
    """
    sig = _stat_sig(path)
    with _key_lock:
        cached = _key_cache.get(path)
        if cached is not None and cached[0] == sig:
            return cached[1]
    key: paramiko.PKey | None = None
    if sig is not None and not os.path.exists(path + "-cert.pub"):
        try:
            key = paramiko.PKey.from_path(path)
        except Exception:  # any failure: leave it to Paramiko's path, which reports it properly
            key = None
    with _key_lock:
        _key_cache[path] = (sig, key)
    return key


def _one_line(e: object) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


@dataclass
class _Attempt:
    """One connection attempt: the transports it created and whether its budget ran out."""

    budget: float
    fired: bool = False
    transports: list[paramiko.Transport] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def transport_factory(self, sock: Any, **kwargs: Any) -> paramiko.Transport:
        t = paramiko.Transport(sock, **kwargs)
        with self.lock:
            self.transports.append(t)
            if self.fired:
                _shut(t)
        return t

    def expire(self) -> None:
        with self.lock:
            self.fired = True
            for t in self.transports:
                _shut(t)

    def banner_seen(self) -> bool:
        return bool(self.transports) and all(t.remote_version for t in self.transports)


def _shut(t: paramiko.Transport) -> None:
    # shutdown() wakes a thread blocked in recv() on this socket; close() alone would not
    sock = t.sock
    try:
        if isinstance(sock, socket.socket):
            sock.shutdown(socket.SHUT_RDWR)
        else:
            sock.close()  # a ProxyJump channel or ProxyCommand
    except (OSError, EOFError):
        pass
    try:
        t.close()
    except (OSError, EOFError, SSHException):
        pass


class _Failure(Exception):
    def __init__(self, kind: str, message: str, retryable: bool = False):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retryable = retryable


class SshTransport:
    """Runs commands on one host over one SSH connection. Not shared between threads."""

    def __init__(self, host: Host, options: TransportOptions):
        self.host = host
        self.options = options
        self.policy = host_key_policy(host, options)
        self.retried = 0  # connection attempts retried so far, reported on every result
        self._conn: Connection | None = None
        self._agent: paramiko.Agent | None = None
        self._closed_by_us = False  # close() from another thread (Ctrl-C) is not the host failing
        self._config = fabric_config(options.ssh_config)
        self._hostkeys = self._hostkey_setup()

    # -- naming -----------------------------------------------------------------------------

    def _endpoint(self) -> tuple[str, int]:
        """Address and port as they will be used (inventory first, then ssh_config, then 22)."""
        lookup = self._config.base_ssh_config.lookup(self.host.address)
        address = str(lookup.get("hostname", self.host.address))
        port = self.host.port or int(lookup.get("port", 22))
        return address, port

    def label(self) -> str:
        address, port = self._endpoint()
        where = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        return where if self.host.name in (address, self.host.address) else f"{self.host.name} ({where})"

    # -- connection ---------------------------------------------------------------------------

    def _hostkey_setup(self) -> HostKeySetup:
        # inventory variable first (per host/group), then the option; either replaces ssh's defaults
        given = self.host.vars.get("probe_known_hosts") or self.options.known_hosts
        if given:
            path = os.path.expanduser(str(given))
            return HostKeySetup(self.policy, [path], path)
        lookup = self._config.base_ssh_config.lookup(self.host.address)
        user_files = str(lookup.get("userknownhostsfile", "~/.ssh/known_hosts")).split()
        global_files = str(lookup.get("globalknownhostsfile", "/etc/ssh/ssh_known_hosts")).split()
        user = [os.path.expanduser(p) for p in user_files if p.lower() != "none"]
        glob = [os.path.expanduser(p) for p in global_files if p.lower() != "none"]
        record = user[0] if user else os.path.expanduser("~/.ssh/known_hosts")
        return HostKeySetup(self.policy, user + glob, record)

    def _make_connection(self, attempt: _Attempt) -> Connection:
        key = self.host.key_file
        # Never empty: Fabric uses an empty dict's place to hand out the shared Config's own
        # connect_kwargs, which it then fills with this host's IdentityFiles (leaking to all hosts).
        connect_kwargs: dict[str, Any] = {"allow_agent": True, "look_for_keys": True}
        agent_key = None
        if key is not None:
            # the inventory named the key: use it alone, as `ssh -i KEY -o IdentitiesOnly=yes`,
            # which still signs with the agent's copy when the agent holds that key
            key = os.path.expanduser(key)
            if not os.access(key, os.R_OK):
                why = "does not exist" if not os.path.exists(key) else "is not readable by this user"
                raise TransportError(
                    "auth", f"{self.label()}: private key {key} {why}; fix ansible_ssh_private_key_file"
                )
            agent_key = self._agent_copy(key) or _loaded_key(key)
            if agent_key is not None:
                connect_kwargs.update(pkey=agent_key, look_for_keys=False, allow_agent=False)
            else:
                connect_kwargs.update(key_filename=[key], look_for_keys=False, allow_agent=False)
        try:
            conn = Connection(
                self.host.address,
                user=self.host.user,
                port=self.host.port,
                config=self._config,
                connect_kwargs=connect_kwargs,
            )
        except (ValueError, KeyError, TypeError) as e:
            raise TransportError(
                "config", f"{self.label()}: bad SSH settings ({_one_line(e)}); check ssh_config and inventory"
            ) from e
        if agent_key is not None:
            conn.connect_kwargs.pop("key_filename", None)
        elif key is not None:
            # Fabric merges ssh_config IdentityFile into the list; the inventory key wins alone
            conn.connect_kwargs["key_filename"] = [key]
        for c in _chain(conn):
            self._prepare(c, attempt)
        return conn

    def _agent_copy(self, key_path: str) -> paramiko.AgentKey | None:
        """The ssh-agent's key matching `key_path` (by its .pub file), or None."""
        if not os.environ.get("SSH_AUTH_SOCK"):
            return None
        try:
            with open(key_path + ".pub") as f:
                blob = base64.b64decode(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            return None
        if self._agent is None:
            try:
                self._agent = paramiko.Agent()
            except (paramiko.SSHException, OSError):
                return None
        try:
            keys = self._agent.get_keys()
        except (paramiko.SSHException, OSError):
            return None
        return next((k for k in keys if k.asbytes() == blob), None)

    def _prepare(self, conn: Connection, attempt: _Attempt) -> None:
        budget = attempt.budget
        # Fabric would int() a float timeout (0.5 -> 0 -> no timeout): pass it to Paramiko ourselves
        conn.connect_timeout = None
        conn.connect_kwargs.update(
            timeout=budget,
            banner_timeout=budget,
            auth_timeout=budget,
            channel_timeout=budget,
            transport_factory=attempt.transport_factory,
        )
        self._hostkeys.apply(conn.client)

    def connect(self, deadline: float | None = None) -> None:
        """Open the connection if it is not open, retrying transient failures. Raises TransportError.

        Each attempt gets connect_timeout seconds; `deadline` (a time.monotonic() value, the
        host's overall deadline) shortens attempts and stops retries that could not finish by it.
        """
        if self._conn is not None and self._conn.is_connected:
            return
        self._drop()
        attempt_no = 0
        while True:
            budget = self.options.connect_timeout
            if deadline is not None:
                budget = min(budget, deadline - time.monotonic())
                if budget <= 0:
                    raise TransportError(
                        "connect_timeout",
                        f"{self.label()}: the host's deadline passed before a connection could be made",
                        retried=self.retried,
                    )
            try:
                self._conn = self._connect_once(budget)
                return
            except _Failure as f:
                pause = min(self.options.retry_backoff * (2**attempt_no), 5.0) * random.uniform(0.5, 1.5)
                late = deadline is not None and time.monotonic() + pause >= deadline
                if not f.retryable or attempt_no >= self.options.retries or late:
                    note = f" (after {attempt_no} retries)" if attempt_no else ""
                    raise TransportError(f.kind, f.message + note, retried=self.retried) from None
            attempt_no += 1
            self.retried += 1
            time.sleep(pause)

    def _connect_once(self, budget: float) -> Connection:
        attempt = _Attempt(budget)
        conn = self._make_connection(attempt)
        timer = threading.Timer(attempt.budget, attempt.expire)
        timer.daemon = True
        timer.start()
        try:
            conn.open()
            if attempt.fired:
                raise EOFError("connect budget ran out")
        except Exception as e:
            _close_quietly(conn)
            raise self._classify(e, attempt, conn) from e
        finally:
            timer.cancel()
        return conn

    # -- classification -------------------------------------------------------------------------

    def _classify(self, e: BaseException, attempt: _Attempt, conn: Connection) -> _Failure:
        label = self.label()
        secs = f"{attempt.budget:.3g}s"
        if isinstance(e, TransportError):
            return _Failure(e.kind, e.message)
        if isinstance(e, UnknownHostKey):
            host, port = _split_known_name(e.name)
            return _Failure(
                "hostkey",
                f"{label}: unknown host key for {e.name} ({e.key.get_name()} {e.key.fingerprint}) and the "
                f"host-key policy is strict; check the fingerprint, then add it with "
                f"`ssh-keyscan -p {port} {host} >> {self._hostkeys.record_to}` or run with --host-key-policy accept-new",
            )
        if isinstance(e, BadHostKeyException):
            port = next((c.port for c in _chain(conn) if c.host == e.hostname), 22)
            name = known_hosts_name(e.hostname, port)
            return _Failure(
                "hostkey",
                f"{label}: HOST KEY CHANGED for {name}: known_hosts has {e.expected_key.get_name()} "
                f"{e.expected_key.fingerprint}, the host offers {e.key.get_name()} {e.key.fingerprint}; refusing "
                f"(possible man-in-the-middle). If the host was reinstalled, remove the old key with "
                f"`ssh-keygen -R '{name}' -f {self._hostkeys.record_to}` and add the new one",
            )
        if isinstance(e, PasswordRequiredException):
            key = self.host.key_file or "the private key"
            return _Failure(
                "auth",
                f"{label}: {key} is protected by a passphrase and no ssh-agent offers it; load it with "
                f"`ssh-add {key}` (and run with SSH_AUTH_SOCK set) or give an unencrypted key",
            )
        user = str(conn.user)
        if isinstance(e, BadAuthenticationType):
            return _Failure(
                "auth",
                f"{label}: the server does not accept public keys for {user!r} (allows: {', '.join(e.allowed_types)}); "
                "enable PubkeyAuthentication on the host",
            )
        if isinstance(e, AuthenticationException) or (
            isinstance(e, SSHException) and "no authentication methods" in str(e).lower()
        ):
            how = (
                f"key {self.host.key_file}"
                if self.host.key_file
                else "the ssh-agent and the default/ssh_config keys"
            )
            return _Failure(
                "auth",
                f"{label}: authentication failed for user {user!r} with {how}; check ansible_user and "
                f"ansible_ssh_private_key_file, and that the public key is in that user's authorized_keys",
            )
        if attempt.fired:
            if attempt.banner_seen():
                return _Failure(
                    "connect_timeout",
                    f"{label}: SSH handshake/authentication did not finish within {secs}; "
                    "the host or its sshd is overloaded, or raise --connect-timeout",
                )
            if attempt.transports:
                return _Failure(
                    "protocol",
                    f"{label}: connected but no SSH banner within {secs}; this port is not a (working) SSH "
                    "server: check ansible_port, or the sshd is hung",
                )
            return _Failure("connect_timeout", f"{label}: no TCP answer within {secs}; {_TIMEOUT_HINT}")
        if isinstance(e, NoValidConnectionsError):
            codes = {getattr(err, "errno", None) for err in e.errors.values()}
            if codes == {errno.ECONNREFUSED}:
                return _Failure(
                    "unreachable",
                    f"{label}: connection refused; is sshd running there and is the port right (ansible_port)?",
                    retryable=True,
                )
            return _Failure(
                "unreachable", f"{label}: no route to host; check the address (ansible_host) and the network"
            )
        if isinstance(e, socket.gaierror):
            return _Failure(
                "unreachable",
                f"{label}: cannot resolve the host name ({_one_line(e)}); fix ansible_host or DNS",
            )
        if isinstance(e, (socket.timeout, TimeoutError)):
            return _Failure("connect_timeout", f"{label}: no TCP answer within {secs}; {_TIMEOUT_HINT}")
        if isinstance(e, ChannelException):
            return _Failure(
                "unreachable",
                f"{label}: the ProxyJump host could not open a connection to it ({_one_line(e)}); check the address and port",
            )
        if isinstance(e, IncompatiblePeer):
            return _Failure(
                "protocol", f"{label}: the server speaks an incompatible SSH version ({_one_line(e)})"
            )
        cause = e.__context__ if isinstance(e, SSHException) else e
        closed_early = isinstance(cause, (EOFError, ConnectionResetError, BrokenPipeError))
        if isinstance(e, SSHException) and "banner" in str(e).lower():
            if closed_early:
                # what sshd does to connections past MaxStartups, or while it restarts: worth a retry
                return _Failure(
                    "protocol",
                    f"{label}: the server closed the connection before sending its SSH banner "
                    "(sshd overloaded, MaxStartups, or a firewall); retry later or lower --forks",
                    retryable=True,
                )
            return _Failure(
                "protocol",
                f"{label}: connected but no SSH banner within {secs}; this port is not a (working) SSH server: "
                "check ansible_port",
            )
        if isinstance(e, SSHException) and "protocol version" in str(e).lower():
            return _Failure(
                "protocol", f"{label}: this port does not speak SSH ({_one_line(e)}); check ansible_port"
            )
        if closed_early:
            return _Failure(
                "protocol",
                f"{label}: the connection was closed during the SSH handshake; retry later or lower --forks",
                retryable=True,
            )
        if isinstance(e, SSHException) and "timeout" in str(e).lower():
            return _Failure(
                "connect_timeout", f"{label}: SSH handshake timed out after {secs} ({_one_line(e)})"
            )
        if isinstance(e, OSError):
            return _Failure(
                "unreachable",
                f"{label}: cannot connect ({_one_line(e)}); check ansible_host and ansible_port",
            )
        return _Failure("protocol", f"{label}: SSH connection failed ({type(e).__name__}: {_one_line(e)})")

    # -- commands ---------------------------------------------------------------------------

    def run(
        self, command: str, stdin: bytes = b"", timeout: float | None = None, *, deadline: float | None = None
    ) -> CommandResult:
        """Run `command` (no pty), feed it `stdin`; the command gets `timeout` s (default command_timeout).

        Connects first if needed (connect_timeout per attempt, see connect()). `deadline`, a
        time.monotonic() value, bounds connecting and the command together. Raises TransportError
        when the host cannot be reached or the connection dies mid-command.
        """
        limit = self.options.command_timeout if timeout is None else timeout
        self.connect(deadline)
        if deadline is not None:
            limit = min(limit, deadline - time.monotonic())
        assert self._conn is not None
        transport = self._conn.client.get_transport()
        started = time.monotonic()
        deadline = started + max(limit, 0.0)
        try:
            chan = transport.open_session(timeout=max(0.001, min(self.options.connect_timeout, limit)))
        except (SSHException, EOFError, OSError) as e:
            if not transport.is_active():
                self._drop()
                raise TransportError(
                    "disconnected",
                    f"{self.label()}: connection lost before the command started; "
                    "the host or its sshd went away",
                    retried=self.retried,
                ) from e
            raise TransportError(
                "protocol",
                f"{self.label()}: sshd refused a session ({_one_line(e)}); check MaxSessions on the host",
                retried=self.retried,
            ) from e
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            _kill_remote(chan)
            _close_channel(chan)

        # exec_command() and sendall() have no timeouts of their own: closing the channel wakes them
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
        timer.daemon = True
        timer.start()
        try:
            return self._exchange(chan, transport, command, stdin, deadline, started, expired)
        finally:
            timer.cancel()
            _close_channel(chan)

    def _exchange(
        self,
        chan: paramiko.Channel,
        transport: paramiko.Transport,
        command: str,
        stdin: bytes,
        deadline: float,
        started: float,
        expired: threading.Event,
    ) -> CommandResult:
        out = bytearray()
        err = bytearray()
        out_cap = self.options.max_output
        err_cap = self.options.max_stderr
        out_trunc = err_trunc = False
        try:
            chan.exec_command(command)
        except (SSHException, EOFError, OSError) as e:
            if expired.is_set():
                return CommandResult(
                    None, b"", b"", time.monotonic() - started, timed_out=True, retried=self.retried
                )
            self._raise_if_dropped(transport, e)
            raise TransportError(
                "protocol",
                f"{self.label()}: sshd refused to run the command ({_one_line(e)})",
                retried=self.retried,
            ) from e
        writer = threading.Thread(target=_feed, args=(chan, stdin), daemon=True)
        writer.start()
        fd = chan.fileno()  # readable whenever stdout or stderr has data, or on EOF/close

        def pump() -> bool:
            """Move what is buffered into out/err; True when something was read."""
            nonlocal out_trunc, err_trunc
            progressed = False
            if chan.recv_ready():
                data = chan.recv(READ_CHUNK)
                progressed = True
                room = out_cap - len(out)
                if len(data) > room:
                    out.extend(data[:room])
                    out_trunc = True
                else:
                    out.extend(data)
            if chan.recv_stderr_ready():
                data = chan.recv_stderr(READ_CHUNK)
                progressed = True
                if not err_trunc:
                    room = err_cap - len(err)
                    if len(data) > room:
                        err.extend(data[:room])
                        err_trunc = True  # keep draining: a chatty library should not cost us stdout
                    else:
                        err.extend(data)
            return progressed

        while not out_trunc:  # past the stdout cap the output is unusable: stop instead of draining
            if pump():
                continue
            if chan.eof_received or chan.closed:
                # data always precedes EOF on the wire, so what is buffered now is all there is
                while not out_trunc and pump():
                    pass
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                select.select([fd], [], [], min(remaining, IDLE_WAKE_S))
            except (OSError, ValueError):
                pass  # the deadline timer closed the channel (and its fd) under us: loop re-checks
        # the exit status can arrive after EOF
        timed_out = expired.is_set()
        if not out_trunc and not timed_out:
            remaining = deadline - time.monotonic()
            if not chan.status_event.wait(max(0.0, remaining)):
                timed_out = True
            timed_out = timed_out or expired.is_set()
        status = chan.exit_status if chan.status_event.is_set() else -1
        exit_code: int | None = status if status >= 0 and not timed_out and not out_trunc else None
        if out_trunc or timed_out:
            _kill_remote(chan)
        if exit_code is None and not timed_out and not out_trunc and not transport.is_active():
            if self._closed_by_us:
                # we hung up (Ctrl-C): hand back what arrived, so a bundle keeps its finished probes
                return CommandResult(None, bytes(out), bytes(err), time.monotonic() - started, retried=self.retried)
            self._drop()
            raise TransportError(
                "disconnected",
                f"{self.label()}: the connection dropped while the command ran (sshd or the host went away)",
                retried=self.retried,
            )
        _close_channel(chan)
        writer.join(timeout=1.0)
        return CommandResult(
            exit_code=exit_code,
            stdout=bytes(out),
            stderr=bytes(err),
            duration_s=time.monotonic() - started,
            timed_out=timed_out,
            stdout_truncated=out_trunc,
            stderr_truncated=err_trunc,
            retried=self.retried,
        )

    def _raise_if_dropped(self, transport: paramiko.Transport, e: BaseException) -> None:
        if not transport.is_active():
            self._drop()
            raise TransportError(
                "disconnected",
                f"{self.label()}: the connection dropped while starting the command",
                retried=self.retried,
            ) from e

    # -- cleanup ------------------------------------------------------------------------------

    def _drop(self) -> None:
        if self._conn is not None:
            _close_quietly(self._conn)
            self._conn = None

    def close(self) -> None:
        self._closed_by_us = True
        self._drop()
        if self._agent is not None:
            self._agent.close()
            self._agent = None

    def __enter__(self) -> SshTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_TIMEOUT_HINT = (
    "the host is down, black-holed or firewalled; check ansible_host/ansible_port or raise --connect-timeout"
)


def _feed(chan: paramiko.Channel, data: bytes) -> None:
    try:
        if data:
            chan.sendall(data)
        chan.shutdown_write()
    except (OSError, EOFError, SSHException):
        pass  # the command ended or hit its deadline before reading all of stdin


def _close_channel(chan: paramiko.Channel) -> None:
    # closing sends a message; on a connection that just died that raises, and it is closed anyway
    try:
        chan.close()
    except (OSError, EOFError, SSHException):
        pass


def _kill_remote(chan: paramiko.Channel) -> None:
    """Ask sshd to SIGTERM the command's process group before we close its channel.

    Closing the channel alone leaves a command that ignores its stdin running on the host until it
    ends by itself. OpenSSH honours the RFC 4254 "signal" request for sessions it runs under
    privilege separation (logins other than root) by signalling the session's process group.
    TERM, not KILL: a login shell killed outright in the middle of its rc files can leave lock
    files behind in the user's home (pyenv's rehash lock, for one) that stall every later login.
    Paramiko has no public call for this request, hence the hand-built message; where the server
    ignores it we lose nothing.
    """
    if chan.closed or chan.status_event.is_set():
        return
    try:
        m = Message()
        m.add_byte(cMSG_CHANNEL_REQUEST)
        m.add_int(chan.remote_chanid)
        m.add_string("signal")
        m.add_boolean(False)
        m.add_string("TERM")
        chan.get_transport()._send_user_message(m)  # type: ignore[attr-defined]
    except Exception:
        pass  # best effort: the channel is closed right after either way


def _chain(conn: Connection) -> list[Connection]:
    """The connection and its ProxyJump hops, outermost target first."""
    out = [conn]
    gw = conn.gateway
    while isinstance(gw, Connection):
        out.append(gw)
        gw = gw.gateway
    return out


def _close_quietly(conn: Connection) -> None:
    for c in _chain(conn):
        try:
            c.close()
        except Exception:
            pass  # closing a half-open connection can raise anything; it is gone either way
        try:
            c.client.close()
        except Exception:
            pass


def _split_known_name(name: str) -> tuple[str, int]:
    if name.startswith("[") and "]:" in name:
        host, port = name[1:].split("]:", 1)
        return host, int(port)
    return name, 22
