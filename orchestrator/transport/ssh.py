"""SSH transport: Fabric `Connection` (Paramiko underneath), one connection per host, reused.

Every wait is bounded:
* connecting (TCP, SSH banner, key exchange, authentication, and the ProxyJump hops before them)
  shares one budget of `connect_timeout` seconds per attempt; a watchdog shuts the sockets when
  it runs out, because Paramiko's own banner timeout restarts on every byte and a server that
  drips one byte per second would otherwise hold us forever;
* a command gets `timeout` seconds from the moment its channel is requested, or, for the runner's
  probe scripts (`clock_on_host`), from their first stdout bytes, which they write as they start on
  the host (base.CommandClock); at the deadline the channel is closed and the result says timed_out.
Only connection errors that look transient (refused, reset or closed before the banner, which is
what sshd does past MaxStartups) are retried, with jittered backoff. Authentication and host-key
failures are never retried: they will not fix themselves and retrying can lock accounts.
"""

from __future__ import annotations

import base64
import logging
import os
import random
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paramiko
from fabric import Connection
from paramiko.common import cMSG_CHANNEL_REQUEST
from paramiko.message import Message
from paramiko.ssh_exception import SSHException

from orchestrator.inventory.model import Host
from orchestrator.transport.base import (
    CapturedOutput,
    CommandClock,
    CommandResult,
    FailureKind,
    TransportCapabilities,
    TransportError,
    TransportOptions,
)
from orchestrator.transport.hostkeys import HostKeySetup, confined_known_hosts, host_key_policy
from orchestrator.transport.ssh_errors import AttemptFacts, Failure, classify, one_line
from orchestrator.transport.ssh_files import fabric_config, loaded_key, parsed_ssh_config

__all__ = ["SshTransport", "fabric_config", "host_key_policy", "parsed_ssh_config"]

READ_CHUNK = 65536

# Paramiko logs every failed handshake with a traceback at ERROR; with no logging configured Python
# would print those to the terminal for each unreachable host. Our TransportError carries the
# reason; the records still reach handlers the application sets up (e.g. a --debug log).
logging.getLogger("paramiko").addHandler(logging.NullHandler())
# how often the read loop wakes without data to notice a connection that died silently
IDLE_WAKE_S = 1.0

@dataclass
class _Attempt:
    """One connection attempt: the transports it created and whether its budget ran out."""

    budget: float
    fired: bool = False
    transports: list[paramiko.Transport] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def transport_factory(self, sock: Any, **kwargs: Any) -> paramiko.Transport:
        t = paramiko.Transport(sock, **kwargs)
        prefer_aead(t)
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


def prefer_aead(t: paramiko.Transport) -> None:
    """Offer AES-GCM first, the rest of Paramiko's ciphers after it, in their order.

    Under AES-GCM (an AEAD) Paramiko seals each packet in one call into OpenSSL; under the CTR
    ciphers it adds an HMAC built per packet in Python, on the one core a fan-out's threads share.
    Same set offered (what disabled_algorithms removed stays removed), only the order: a server
    without GCM still agrees on what it did before.
    """
    opts = t.get_security_options()
    offered = tuple(opts.ciphers)
    aead = tuple(c for c in offered if c.endswith("-gcm@openssh.com"))
    opts.ciphers = aead + tuple(c for c in offered if c not in aead)


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


class SshTransport:
    """Runs commands on one host over one SSH connection. Not shared between threads."""

    capabilities = TransportCapabilities(pipes_to_interpreter=True)

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
        from_inventory = self.host.vars.get("probe_known_hosts")
        given = from_inventory or self.options.known_hosts
        if given:
            path = os.path.expanduser(str(given))
            # --known-hosts is the operator's choice; an inventory's path is only appended to in ~/.ssh
            return HostKeySetup(self.policy, [path], path, may_record=not from_inventory or confined_known_hosts(path))
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
                    FailureKind.AUTH, f"{self.label()}: private key {key} {why}; fix ansible_ssh_private_key_file"
                )
            agent_key = self._agent_copy(key) or loaded_key(key)
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
                FailureKind.CONFIG, f"{self.label()}: bad SSH settings ({one_line(e)}); check ssh_config and inventory"
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
        last: Failure | None = None
        while True:
            budget = self.options.connect_timeout
            if deadline is not None:
                budget = min(budget, deadline - time.monotonic())
                if budget <= 0:
                    # A retry's pause can overrun the deadline on a loaded controller; what the
                    # host last did (refused, reset...) is then still the truth to report.
                    if last is not None:
                        raise TransportError(
                            last.kind, f"{last.message} (the host's deadline passed before retry {attempt_no})",
                            retried=self.retried)
                    raise TransportError(
                        FailureKind.CONNECT_TIMEOUT,
                        f"{self.label()}: the host's deadline passed before a connection could be made",
                        retried=self.retried,
                    )
            if attempt_no:
                self.retried += 1
            try:
                self._conn = self._connect_once(budget)
                return
            except Failure as f:
                last = f
                pause = min(self.options.retry_backoff * (2**attempt_no), 5.0) * random.uniform(0.5, 1.5)
                late = deadline is not None and time.monotonic() + pause >= deadline
                if not f.retryable or attempt_no >= self.options.retries or late:
                    note = f" (after {attempt_no} retries)" if attempt_no else ""
                    raise TransportError(f.kind, f.message + note, retried=self.retried) from None
            attempt_no += 1
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
            raise classify(e, self._facts(attempt, conn)) from e
        finally:
            timer.cancel()
        return conn

    def _facts(self, attempt: _Attempt, conn: Connection) -> AttemptFacts:
        return AttemptFacts(
            label=self.label(),
            budget=attempt.budget,
            fired=attempt.fired,
            tcp_connected=bool(attempt.transports),
            banner_seen=attempt.banner_seen(),
            user=str(conn.user),
            key_file=self.host.key_file,
            record_to=self._hostkeys.record_to,
            hops=tuple((str(c.host), int(c.port)) for c in _chain(conn)),
        )

    # -- commands ---------------------------------------------------------------------------

    def run(
        self, command: str, stdin: bytes = b"", timeout: float | None = None, *, deadline: float | None = None,
        first_output: float | None = None, clock_on_host: bool = False,
        on_output: Callable[[bytes], None] | None = None,
    ) -> CommandResult:
        """Run `command` (no pty), feed it `stdin`; the command gets `timeout` s (default command_timeout).

        Connects first if needed (connect_timeout per attempt, see connect()). `deadline`, a
        time.monotonic() value, bounds connecting and the command together. `first_output` and
        `clock_on_host`: when the timeout starts counting (base.CommandClock). `on_output`: called
        with each piece of stdout as it arrives (a coordinated step reads its first line while the
        command runs on).  Raises TransportError when the host cannot be reached or the connection
        dies mid-command.
        """
        limit = self.options.command_timeout if timeout is None else timeout
        self.connect(deadline)
        assert self._conn is not None
        transport = self._conn.client.get_transport()
        started = time.monotonic()
        clock = CommandClock(started, max(limit, 0.0), first_output, on_host=clock_on_host,
                             reach=self.options.connect_timeout, hard=deadline)
        try:
            chan = transport.open_session(
                timeout=max(0.001, min(self.options.connect_timeout, clock.left(time.monotonic()))))
        except (SSHException, EOFError, OSError) as e:
            if not transport.is_active():
                self._drop()
                raise TransportError(
                    FailureKind.DISCONNECTED,
                    f"{self.label()}: connection lost before the command started; "
                    "the host or its sshd went away",
                    retried=self.retried,
                ) from e
            raise TransportError(
                FailureKind.PROTOCOL,
                f"{self.label()}: sshd refused a session ({one_line(e)}); check MaxSessions on the host",
                retried=self.retried,
            ) from e
        expired = threading.Event()

        def expire() -> None:
            if clock.left(time.monotonic()) > 0.001:
                return  # the clock moved on (the command reached the host): the read loop keeps it now
            expired.set()
            _kill_remote(chan)
            _close_channel(chan)

        # exec_command() and sendall() have no timeouts of their own: closing the channel wakes them
        timer = threading.Timer(max(0.0, clock.left(time.monotonic())), expire)
        timer.daemon = True
        timer.start()
        try:
            return self._exchange(chan, transport, command, stdin, clock, expired, on_output)
        finally:
            timer.cancel()
            _close_channel(chan)

    def _exchange(
        self,
        chan: paramiko.Channel,
        transport: paramiko.Transport,
        command: str,
        stdin: bytes,
        clock: CommandClock,
        expired: threading.Event,
        on_output: Callable[[bytes], None] | None = None,
    ) -> CommandResult:
        started = clock.started
        if not self._start(chan, transport, command, expired):
            return CommandResult(None, b"", b"", time.monotonic() - started, timed_out=True, retried=self.retried)
        clock.reached(time.monotonic())
        writer = threading.Thread(target=_feed, args=(chan, stdin), daemon=True)
        writer.start()
        got = CapturedOutput(self.options.max_output, self.options.max_stderr)
        _read_outputs(chan, clock, got, on_output)
        timed_out = _await_status(chan, clock, expired, got.out_trunc)
        status = chan.exit_status if chan.status_event.is_set() else -1
        exit_code: int | None = status if status >= 0 and not timed_out and not got.out_trunc else None
        if got.out_trunc or timed_out:
            _kill_remote(chan)
        if exit_code is None and not timed_out and not got.out_trunc and not transport.is_active():
            if self._closed_by_us:
                # we hung up (Ctrl-C): hand back what arrived, so a bundle keeps its finished probes
                return CommandResult(None, bytes(got.out), bytes(got.err), time.monotonic() - started,
                                     retried=self.retried)
            self._drop()
            raise TransportError(
                FailureKind.DISCONNECTED,
                f"{self.label()}: the connection dropped while the command ran (sshd or the host went away)",
                retried=self.retried,
            )
        _close_channel(chan)
        writer.join(timeout=1.0)
        return got.result(exit_code, time.monotonic() - started, timed_out, self.retried)

    def _start(self, chan: paramiko.Channel, transport: paramiko.Transport, command: str,
               expired: threading.Event) -> bool:
        """Send the exec request; False when the deadline timer closed the channel first (timed out)."""
        try:
            chan.exec_command(command)
        except (SSHException, EOFError, OSError) as e:
            if expired.is_set():
                return False
            self._raise_if_dropped(transport, e)
            raise TransportError(
                FailureKind.PROTOCOL,
                f"{self.label()}: sshd refused to run the command ({one_line(e)})",
                retried=self.retried,
            ) from e
        return True

    def _raise_if_dropped(self, transport: paramiko.Transport, e: BaseException) -> None:
        if not transport.is_active():
            self._drop()
            raise TransportError(
                FailureKind.DISCONNECTED,
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


def _feed(chan: paramiko.Channel, data: bytes) -> None:
    try:
        if data:
            chan.sendall(data)
        chan.shutdown_write()
    except (OSError, EOFError, SSHException):
        pass  # the command ended or hit its deadline before reading all of stdin


def _read_outputs(chan: paramiko.Channel, clock: CommandClock, got: CapturedOutput,
                  on_output: Callable[[bytes], None] | None) -> None:
    """Read stdout/stderr into `got` until EOF, the clock runs out, or stdout passes its cap (past
    it the output is unusable: stop instead of draining)."""
    fd = chan.fileno()  # readable whenever stdout or stderr has data, or on EOF/close
    while not got.out_trunc:
        if _pump(chan, clock, got, on_output):
            continue
        if chan.eof_received or chan.closed:
            # data always precedes EOF on the wire, so what is buffered now is all there is
            while not got.out_trunc and _pump(chan, clock, got, on_output):
                pass
            break
        remaining = clock.left(time.monotonic())
        if remaining <= 0:
            break
        try:
            select.select([fd], [], [], min(remaining, IDLE_WAKE_S))
        except (OSError, ValueError):
            pass  # the deadline timer closed the channel (and its fd) under us: loop re-checks


def _pump(chan: paramiko.Channel, clock: CommandClock, got: CapturedOutput,
          on_output: Callable[[bytes], None] | None) -> bool:
    """Move what is buffered into `got`; True when something was read."""
    progressed = False
    if chan.recv_ready():
        data = chan.recv(READ_CHUNK)
        progressed = True
        if data:
            clock.output(time.monotonic())
            if on_output is not None:
                on_output(data)
        got.add_stdout(data)
    if chan.recv_stderr_ready():
        got.add_stderr(chan.recv_stderr(READ_CHUNK))
        progressed = True
    return progressed


def _await_status(chan: paramiko.Channel, clock: CommandClock, expired: threading.Event, out_trunc: bool) -> bool:
    """Wait (what is left of the command's time) for the exit status, which can arrive after EOF;
    whether the command timed out."""
    timed_out = expired.is_set()
    if not out_trunc and not timed_out:
        if not chan.status_event.wait(max(0.0, clock.left(time.monotonic()))):
            timed_out = True
        timed_out = timed_out or expired.is_set()
    return timed_out


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
