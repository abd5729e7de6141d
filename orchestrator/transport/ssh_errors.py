"""How a failed SSH connection attempt is told apart: the exception (and what the attempt saw)
to a FailureKind, a one-line reason naming the host and what to do, and whether to retry.

Only failures that look transient (refused, reset or closed before the banner, which is what
sshd does past MaxStartups) are retryable; authentication and host-key failures never are.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

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

from orchestrator.transport.base import FailureKind, TransportError
from orchestrator.transport.hostkeys import UnknownHostKey, known_hosts_name

TIMEOUT_HINT = (
    "the host is down, black-holed or firewalled; check ansible_host/ansible_port or raise --connect-timeout"
)


class Failure(Exception):
    def __init__(self, kind: FailureKind, message: str, retryable: bool = False):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class AttemptFacts:
    """What one connection attempt knew when it failed."""

    label: str  # the host as messages name it
    budget: float  # seconds the attempt had
    fired: bool  # the budget ran out and the watchdog shut the sockets
    tcp_connected: bool  # at least one SSH transport (a TCP connection) was created
    banner_seen: bool  # every such transport got the server's SSH banner
    user: str
    key_file: str | None  # the inventory's private key, if it named one
    record_to: str  # the known_hosts file a new key would be written to
    hops: tuple[tuple[str, int], ...]  # (host, port) of the target and each ProxyJump hop


def one_line(e: object) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


def classify(e: BaseException, at: AttemptFacts) -> Failure:
    """Why connecting failed, as a FailureKind and one line saying what to do."""
    # The order of the steps matters: what the exception says for certain (host key, credentials)
    # wins over the watchdog having fired, which wins over what the socket saw as it was shut.
    for step in (_host_key_failure, _auth_failure, _budget_failure, _network_failure, _handshake_failure):
        failure = step(e, at)
        if failure is not None:
            return failure
    return _other_failure(e, at)


def _host_key_failure(e: BaseException, at: AttemptFacts) -> Failure | None:
    """A failure already classified (TransportError), or a host key unknown or changed."""
    label = at.label
    if isinstance(e, TransportError):
        return Failure(e.kind, e.message)
    if isinstance(e, UnknownHostKey):
        host, port = split_known_name(e.name)
        return Failure(
            FailureKind.HOSTKEY,
            f"{label}: unknown host key for {e.name} ({e.key.get_name()} {e.key.fingerprint}) and the "
            f"host-key policy is strict; check the fingerprint, then add it with "
            f"`ssh-keyscan -p {port} {host} >> {at.record_to}` or run with --host-key-policy accept-new",
        )
    if isinstance(e, BadHostKeyException):
        port = next((p for h, p in at.hops if h == e.hostname), 22)
        name = known_hosts_name(e.hostname, port)
        return Failure(
            FailureKind.HOSTKEY,
            f"{label}: HOST KEY CHANGED for {name}: known_hosts has {e.expected_key.get_name()} "
            f"{e.expected_key.fingerprint}, the host offers {e.key.get_name()} {e.key.fingerprint}; refusing "
            f"(possible man-in-the-middle). If the host was reinstalled, remove the old key with "
            f"`ssh-keygen -R '{name}' -f {at.record_to}` and add the new one",
        )
    return None


def _auth_failure(e: BaseException, at: AttemptFacts) -> Failure | None:
    """The key or the user was refused: never retried, it will not fix itself."""
    label = at.label
    if isinstance(e, PasswordRequiredException):
        key = at.key_file or "the private key"
        return Failure(
            FailureKind.AUTH,
            f"{label}: {key} is protected by a passphrase and no ssh-agent offers it; load it with "
            f"`ssh-add {key}` (and run with SSH_AUTH_SOCK set) or give an unencrypted key",
        )
    user = at.user
    if isinstance(e, BadAuthenticationType):
        return Failure(
            FailureKind.AUTH,
            f"{label}: the server does not accept public keys for {user!r} (allows: {', '.join(e.allowed_types)}); "
            "enable PubkeyAuthentication on the host",
        )
    if isinstance(e, AuthenticationException) or (
        isinstance(e, SSHException) and "no authentication methods" in str(e).lower()
    ):
        how = (
            f"key {at.key_file}"
            if at.key_file
            else "the ssh-agent and the default/ssh_config keys"
        )
        return Failure(
            FailureKind.AUTH,
            f"{label}: authentication failed for user {user!r} with {how}; check ansible_user and "
            f"ansible_ssh_private_key_file, and that the public key is in that user's authorized_keys",
        )
    return None


def _budget_failure(e: BaseException, at: AttemptFacts) -> Failure | None:
    """The watchdog shut the sockets: how far the attempt got says what is wrong."""
    if not at.fired:
        return None
    label = at.label
    secs = f"{at.budget:.3g}s"
    if at.banner_seen:
        return Failure(
            FailureKind.CONNECT_TIMEOUT,
            f"{label}: SSH handshake/authentication did not finish within {secs}; "
            "the host or its sshd is overloaded, or raise --connect-timeout",
        )
    if at.tcp_connected:
        return Failure(
            FailureKind.PROTOCOL,
            f"{label}: connected but no SSH banner within {secs}; this port is not a (working) SSH "
            "server: check ansible_port, or the sshd is hung",
        )
    return Failure(FailureKind.CONNECT_TIMEOUT, f"{label}: no TCP answer within {secs}; {TIMEOUT_HINT}")


def _network_failure(e: BaseException, at: AttemptFacts) -> Failure | None:
    """No SSH server was reached: refused, no route, no name, no answer, a hop that could not get there."""
    label = at.label
    if isinstance(e, NoValidConnectionsError):
        codes = {getattr(err, "errno", None) for err in e.errors.values()}
        if codes == {errno.ECONNREFUSED}:
            return Failure(
                FailureKind.UNREACHABLE,
                f"{label}: connection refused; is sshd running there and is the port right (ansible_port)?",
                retryable=True,
            )
        return Failure(
            FailureKind.UNREACHABLE, f"{label}: no route to host; check the address (ansible_host) and the network"
        )
    if isinstance(e, socket.gaierror):
        return Failure(
            FailureKind.UNREACHABLE,
            f"{label}: cannot resolve the host name ({one_line(e)}); fix ansible_host or DNS",
        )
    if isinstance(e, (socket.timeout, TimeoutError)):
        return Failure(FailureKind.CONNECT_TIMEOUT, f"{label}: no TCP answer within {at.budget:.3g}s; {TIMEOUT_HINT}")
    if isinstance(e, ChannelException):
        return Failure(
            FailureKind.UNREACHABLE,
            f"{label}: the ProxyJump host could not open a connection to it ({one_line(e)}); check the address and port",
        )
    if isinstance(e, IncompatiblePeer):
        return Failure(
            FailureKind.PROTOCOL, f"{label}: the server speaks an incompatible SSH version ({one_line(e)})"
        )
    return None


def _handshake_failure(e: BaseException, at: AttemptFacts) -> Failure | None:
    """Something answered but the SSH handshake did not complete: no banner, not SSH, closed, timed out."""
    label = at.label
    secs = f"{at.budget:.3g}s"
    cause = e.__context__ if isinstance(e, SSHException) else e
    closed_early = isinstance(cause, (EOFError, ConnectionResetError, BrokenPipeError))
    if isinstance(e, SSHException) and "banner" in str(e).lower():
        if closed_early:
            # what sshd does to connections past MaxStartups, or while it restarts: worth a retry
            return Failure(
                FailureKind.PROTOCOL,
                f"{label}: the server closed the connection before sending its SSH banner "
                "(sshd overloaded, MaxStartups, or a firewall); retry later or lower --forks",
                retryable=True,
            )
        return Failure(
            FailureKind.PROTOCOL,
            f"{label}: connected but no SSH banner within {secs}; this port is not a (working) SSH server: "
            "check ansible_port",
        )
    if isinstance(e, SSHException) and "protocol version" in str(e).lower():
        return Failure(
            FailureKind.PROTOCOL, f"{label}: this port does not speak SSH ({one_line(e)}); check ansible_port"
        )
    if closed_early:
        return Failure(
            FailureKind.PROTOCOL,
            f"{label}: the connection was closed during the SSH handshake; retry later or lower --forks",
            retryable=True,
        )
    if isinstance(e, SSHException) and "timeout" in str(e).lower():
        return Failure(
            FailureKind.CONNECT_TIMEOUT, f"{label}: SSH handshake timed out after {secs} ({one_line(e)})"
        )
    return None


def _other_failure(e: BaseException, at: AttemptFacts) -> Failure:
    """What no step above recognised: a socket error, else whatever Paramiko raised, named."""
    if isinstance(e, OSError):
        return Failure(
            FailureKind.UNREACHABLE,
            f"{at.label}: cannot connect ({one_line(e)}); check ansible_host and ansible_port",
        )
    return Failure(FailureKind.PROTOCOL, f"{at.label}: SSH connection failed ({type(e).__name__}: {one_line(e)})")


def split_known_name(name: str) -> tuple[str, int]:
    if name.startswith("[") and "]:" in name:
        host, port = name[1:].split("]:", 1)
        return host, int(port)
    return name, 22
