"""The transport interface: run one command with stdin under a deadline, then close.

Implementations: `ssh.SshTransport` (Fabric/Paramiko) and `local.LocalTransport` (subprocess).
A transport never prints; it returns a CommandResult or raises TransportError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024  # bytes of stdout kept per command; beyond it: truncated
DEFAULT_MAX_STDERR = 1024 * 1024  # bytes of stderr kept; the rest is read and dropped


@dataclass
class CommandResult:
    exit_code: int | None  # None when killed at the deadline
    stdout: bytes
    stderr: bytes
    duration_s: float
    timed_out: bool = False
    stdout_truncated: bool = False  # the host sent more than max_output bytes
    stderr_truncated: bool = False
    retried: int = 0  # connection attempts that failed and were retried before this one got through


class TransportError(Exception):
    """The host could not be reached or would not let us in.

    kind: "unreachable" (refused, no route, DNS), "connect_timeout", "auth", "hostkey",
    "protocol" (not an SSH server, banner never came), "disconnected" (dropped mid-command),
    "config" (a setting such as the host-key policy or the connection type is invalid).
    `message` is one line naming the host and saying what to do.
    """

    def __init__(self, kind: str, message: str, retried: int = 0):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retried = retried


@dataclass
class TransportOptions:
    connect_timeout: float = 10.0
    command_timeout: float = 120.0
    host_key_policy: str = "strict"  # strict | accept-new | off
    known_hosts: str | None = None  # default ~/.ssh/known_hosts
    ssh_config: str | None = None  # default ~/.ssh/config when it exists
    retries: int = 2  # connection errors only, with jitter
    retry_backoff: float = 0.25  # first retry waits about this long (x0.5..1.5 jitter), doubling after
    max_output: int = DEFAULT_MAX_OUTPUT  # past it the command is stopped and stdout_truncated set
    max_stderr: int = DEFAULT_MAX_STDERR  # past it stderr is drained but not kept (stderr_truncated)
    extra: dict[str, str] = field(default_factory=dict)


class Transport(Protocol):
    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None, *,
            deadline: float | None = None) -> CommandResult: ...

    def close(self) -> None: ...
