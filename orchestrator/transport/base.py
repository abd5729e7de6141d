"""The transport interface: run one command with stdin under a deadline, then close.

Implementations: `ssh.SshTransport` (Fabric/Paramiko), `local.LocalTransport` (subprocess) and
`replay.ReplayTransport` (recorded envelopes), registered by name in `factory.py`. A transport
never prints; it returns a CommandResult or raises TransportError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
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


@dataclass
class CapturedOutput:
    """A running command's stdout and stderr as far as their caps (max_output, max_stderr) allow:
    the one home of the capping every transport that reads a command's streams shares."""

    out_cap: int
    err_cap: int
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    out_trunc: bool = False
    err_trunc: bool = False

    def add_stdout(self, data: bytes) -> None:
        """Keep `data` up to the cap; past it the output is unusable and the caller stops reading."""
        room = self.out_cap - len(self.out)
        if len(data) > room:
            self.out += data[:room]
            self.out_trunc = True
        else:
            self.out += data

    def add_stderr(self, data: bytes) -> None:
        """Keep `data` up to the cap; past it the rest is dropped while the caller keeps draining,
        so a chatty library does not cost us stdout."""
        if self.err_trunc:
            return
        room = self.err_cap - len(self.err)
        if len(data) > room:
            self.err += data[:room]
            self.err_trunc = True
        else:
            self.err += data

    def result(self, exit_code: int | None, duration_s: float, timed_out: bool, retried: int = 0) -> CommandResult:
        return CommandResult(
            exit_code=exit_code,
            stdout=bytes(self.out),
            stderr=bytes(self.err),
            duration_s=duration_s,
            timed_out=timed_out,
            stdout_truncated=self.out_trunc,
            stderr_truncated=self.err_trunc,
            retried=retried,
        )


@dataclass
class CommandClock:
    """When a command is given up: one deadline, moved as the command shows it has reached the host.

    Plain (`on_host` False): `timeout` counts from the start (the session request), and, with
    `first_output`, the first stdout byte must come within that many seconds of the start.

    `on_host` (the runner's probe scripts, whose first stdout bytes announce that they started: a
    bundle's magic line, a lone probe's start mark): the probe's timeout is the host's time, not the
    link's or this controller's.  Reaching the host (opening the session, the exec request) gets `reach`
    seconds, the connection's share; from the exec reply, the first stdout byte must come within
    `first_output` (default `timeout`); from that byte, `timeout`: the host's own clock started just
    before it, and the probe's watchdog holds it to the same timeout there.  A slow link or a busy
    controller moves every phase's start later, so it never eats into the probe's time; a probe that
    hangs on the host is still given up at its timeout (docs/performance.md, "Timeouts under latency").

    `hard`, a time.monotonic() value (the host's deadline), caps every phase.
    """

    started: float
    timeout: float
    first_output: float | None = None
    on_host: bool = False
    reach: float = 10.0
    hard: float | None = None
    end: float = field(init=False)
    spoke: bool = field(init=False, default=False)  # the first stdout byte arrived

    def __post_init__(self) -> None:
        if self.on_host:
            self.end = self._cap(self.started + self.reach)
        elif self.first_output is not None:
            self.end = self._cap(self.started + min(self.first_output, self.timeout))
        else:
            self.end = self._cap(self.started + self.timeout)

    def _cap(self, t: float) -> float:
        return t if self.hard is None else min(t, self.hard)

    def reached(self, now: float) -> None:
        """The host accepted the command (sshd's exec reply; a local process spawned)."""
        if self.on_host and not self.spoke:
            self.end = self._cap(now + (self.timeout if self.first_output is None else self.first_output))

    def output(self, now: float) -> None:
        """Stdout bytes arrived."""
        if self.spoke:
            return
        self.spoke = True
        if self.on_host:
            self.end = self._cap(now + self.timeout)
        elif self.first_output is not None:
            self.end = self._cap(self.started + self.timeout)

    def left(self, now: float) -> float:
        return self.end - now


class FailureKind(str, Enum):
    """Why a transport gave up, and the probe outcome that makes for the host.

    The outcome is carried as its `engine.outcomes.Outcome` value: the transports sit below the
    engine and cannot import it (`engine.outcomes.transport_outcome` turns it into the Outcome).
    """

    outcome: str

    def __new__(cls, value: str, outcome: str) -> FailureKind:
        member = str.__new__(cls, value)
        member._value_ = value
        member.outcome = outcome
        return member

    UNREACHABLE = ("unreachable", "unreachable")  # refused, no route, DNS
    CONNECT_TIMEOUT = ("connect_timeout", "unreachable")
    AUTH = ("auth", "unreachable")
    HOSTKEY = ("hostkey", "unreachable")
    PROTOCOL = ("protocol", "unreachable")  # not an SSH server, banner never came
    # A dropped connection after login is the host failing mid-probe, not an unreachable host.
    DISCONNECTED = ("disconnected", "failed")
    # A setting such as the host-key policy or the connection type is invalid: ours to fix.
    CONFIG = ("config", "failed")

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, kind: FailureKind | str) -> FailureKind:
        """The member for `kind` (a member or its value); ValueError for a kind nobody declared."""
        for member in cls:
            if member.value == kind:
                return member
        raise ValueError(f"unknown transport failure kind {kind!r}")


class TransportError(Exception):
    """The host could not be reached or would not let us in.

    kind: a FailureKind (given as one or as its value). `message` is one line naming the host
    and saying what to do.
    """

    def __init__(self, kind: FailureKind | str, message: str, retried: int = 0):
        super().__init__(message)
        self.kind = FailureKind.of(kind)
        self.message = message
        self.retried = retried


class ProbeNotAvailable(Exception):
    """The transport has no answer for this one probe (the replay transport has no recording of it):
    the probe is skipped with `message` as its reason, so what it would have judged reads as not
    judged, never as the host's platform lacking the capability; the host's other probes still run."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class TransportCapabilities:
    """What the engine may rely on a transport for; each transport class declares its own."""

    # The command line given to run() starts a real interpreter that reads the script on stdin, so
    # several probes can share one interpreter start (engine/bundle.py). False: the transport
    # answers each probe script by itself (replay).
    pipes_to_interpreter: bool = False
    # Commands run as this controller process's own user: when that is root, `become` needs no sudo.
    runs_as_controller: bool = False


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
    # A transport class also declares `capabilities: ClassVar[TransportCapabilities]`; the registry
    # reads it (transport/factory.py), so a stand-in without one gets the defaults.
    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None, *,
            deadline: float | None = None) -> CommandResult: ...

    def close(self) -> None: ...
