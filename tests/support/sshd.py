"""A real OpenSSH sshd on loopback for tests, with generated keys and a prepared known_hosts.

Addresses: sshd listens on 127.0.0.1 and, where the kernel lets us bind them (Linux routes the
whole 127.0.0.0/8 to `lo`), on 127.0.0.2 .. 127.0.0.16 as well, all on one port. OpenSSH accepts
at most 16 listen sockets, hence 16. We stay on loopback addresses (never 0.0.0.0) so the test
sshd, which accepts root logins with the session's key, is never reachable from the network.
A simulated fleet of N inventory hosts cycles over these addresses, so most hosts have their own
address and their own known_hosts entry, as on a real fleet.

Works as root (privilege separation in /run/sshd, created when missing) and as an ordinary user
(sshd then only lets that same user in, which is who the tests log in as).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.inventory.model import Host
from orchestrator.transport.base import TransportOptions
from tests.support.ports import free_port

ROOT_DIR = Path(__file__).resolve().parents[2]  # the repository root
SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
SSH_KEYGEN = shutil.which("ssh-keygen")
MAX_ADDRESSES = 16  # OpenSSH's MAX_LISTEN_SOCKS
KEY_PASSPHRASE = "correct horse battery staple"


def missing_reason() -> str | None:
    """Why a real sshd cannot be started here, or None when it can."""
    if SSHD is None:
        return "OpenSSH server (sshd) is not installed; apt-get install openssh-server"
    if SSH_KEYGEN is None:
        return "ssh-keygen is not installed; apt-get install openssh-client"
    return None


def _keygen(path: Path, passphrase: str = "") -> Path:
    subprocess.run(
        [str(SSH_KEYGEN), "-q", "-t", "ed25519", "-N", passphrase, "-C", path.name, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    path.chmod(0o600)
    return path


@dataclass
class SshKeys:
    """Key material generated once per test session."""

    dir: Path
    user_key: Path  # authorized, no passphrase
    passphrase_key: Path  # authorized, protected by KEY_PASSPHRASE
    wrong_key: Path  # valid key, not authorized
    host_key: Path  # the sshd host key
    other_host_key: Path  # a different host key, to fake a "changed host key"

    @classmethod
    def generate(cls, directory: Path) -> SshKeys:
        directory.mkdir(parents=True, exist_ok=True)
        return cls(
            dir=directory,
            user_key=_keygen(directory / "id_user"),
            passphrase_key=_keygen(directory / "id_passphrase", KEY_PASSPHRASE),
            wrong_key=_keygen(directory / "id_wrong"),
            host_key=_keygen(directory / "ssh_host_ed25519_key"),
            other_host_key=_keygen(directory / "other_host_ed25519_key"),
        )

    def public(self, key: Path) -> str:
        """`<type> <base64>` of a key (the comment dropped)."""
        parts = Path(str(key) + ".pub").read_text().split()
        return f"{parts[0]} {parts[1]}"


def loopback_addresses(limit: int = MAX_ADDRESSES) -> list[str]:
    """127.0.0.1 plus as many 127.0.0.x as this kernel lets us bind (only 127.0.0.1 elsewhere)."""
    found = ["127.0.0.1"]
    for i in range(2, limit + 1):
        addr = f"127.0.0.{i}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, 0))
            except OSError:
                break
        found.append(addr)
    return found


def known_hosts_line(address: str, port: int, public: str) -> str:
    name = address if port == 22 else f"[{address}]:{port}"
    return f"{name} {public}\n"


def descendants(pid: int) -> list[int]:
    """Every live process below pid (children first found first), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name is in parentheses and may contain spaces; ppid follows it
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


@dataclass
class SshdServer:
    """One running sshd. `host()`/`fleet()` build inventory hosts that point at it."""

    port: int
    addresses: list[str]
    user: str
    keys: SshKeys
    workdir: Path
    known_hosts: Path  # holds the host key for every address:port: `strict` passes
    ssh_config: Path  # an empty ssh_config, so tests never read the user's ~/.ssh/config
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return self.addresses[0]

    def host(self, name: str = "node01", address: str | None = None, **vars: object) -> Host:
        """An inventory host on this sshd; `vars` override (e.g. ansible_ssh_private_key_file=...)."""
        merged: dict[str, object] = {
            "ansible_host": address or self.address,
            "ansible_port": self.port,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.keys.user_key),
        }
        merged.update(vars)
        return Host(name=name, vars=merged, groups=["all"])

    def fleet(self, n: int, prefix: str = "node", **vars: object) -> list[Host]:
        """n hosts named <prefix>01.., spread over the loopback addresses (cycling when n > 16)."""
        width = max(2, len(str(n)))
        return [
            self.host(f"{prefix}{i + 1:0{width}d}", self.addresses[i % len(self.addresses)], **vars)
            for i in range(n)
        ]

    def options(self, **overrides: object) -> TransportOptions:
        """TransportOptions isolated from the user's ~/.ssh: this server's known_hosts, empty config."""
        opts = TransportOptions(
            connect_timeout=5.0,
            command_timeout=30.0,
            known_hosts=str(self.known_hosts),
            ssh_config=str(self.ssh_config),
            retry_backoff=0.05,
        )
        for k, v in overrides.items():
            if not hasattr(opts, k):
                raise AttributeError(f"TransportOptions has no field {k!r}")
            setattr(opts, k, v)
        return opts

    def inventory_yaml(self, hosts: list[Host], known_hosts: bool = True) -> str:
        """A YAML inventory for these hosts (end-to-end tests of the CLI).

        known_hosts=True adds `probe_known_hosts` pointing at this server's prepared file, so
        `strict` passes without touching ~/.ssh.
        """
        lines = ["all:"]
        if known_hosts:
            lines += ["  vars:", f"    probe_known_hosts: {json.dumps(str(self.known_hosts))}"]
        lines.append("  hosts:")
        for h in hosts:
            lines.append(f"    {h.name}:")
            lines += [f"      {k}: {json.dumps(v)}" for k, v in h.vars.items()]  # JSON is valid YAML
        return "\n".join(lines) + "\n"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill_all(self) -> None:
        """sshd dies: SIGKILL the listener and every sshd session process at once.

        Only sshd's own processes are killed, as in a real crash. The users' commands below them
        lose their connection and are then ended with SIGTERM (never SIGKILL: a login shell killed
        outright in the middle of its rc files can leave stale lock files in the user's home,
        e.g. pyenv's rehash lock, which then stall every later login).
        """
        if self.proc is None:
            return
        below = descendants(self.proc.pid)
        sshd_pids = [p for p in below if _comm(p).startswith("sshd")]
        for pid in [self.proc.pid, *sshd_pids]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        _end_gently([p for p in below if p not in sshd_pids])

    def stop(self) -> None:
        if self.proc is None:
            return
        sessions = descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        # sessions outlive the listener; tests must not leave them behind
        _end_gently(sessions)
        self.proc = None


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _end_gently(pids: list[int], grace: float = 3.0) -> None:
    """SIGTERM (shells run their EXIT traps), then SIGKILL whatever is left after `grace` s."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _config_text(server: SshdServer, extra: dict[str, str]) -> str:
    settings: list[tuple[str, str]] = [
        ("Port", str(server.port)),
        *[("ListenAddress", a) for a in server.addresses],
        ("HostKey", str(server.keys.host_key)),
        ("PidFile", "none"),
        ("AuthorizedKeysFile", str(server.workdir / "authorized_keys")),
        ("StrictModes", "no"),
        ("UsePAM", "no"),
        ("PubkeyAuthentication", "yes"),
        ("PasswordAuthentication", "no"),
        ("KbdInteractiveAuthentication", "no"),
        ("PermitRootLogin", "prohibit-password"),
        ("AllowUsers", server.user),
        ("MaxStartups", "200:30:400"),
        ("MaxSessions", "100"),
        ("LoginGraceTime", "30"),
        ("AllowTcpForwarding", "yes"),  # ProxyJump through this same sshd
        ("PrintMotd", "no"),
        ("LogLevel", "INFO"),
    ]
    overridden = {k.lower() for k in extra}
    lines = [f"{k} {v}" for k, v in settings if k.lower() not in overridden]
    lines += [f"{k} {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def start_sshd(
    workdir: Path,
    keys: SshKeys,
    extra_config: dict[str, str] | None = None,
    addresses: list[str] | None = None,
    startup_timeout: float = 10.0,
) -> SshdServer:
    """Start `sshd -D -e -f <generated config>` on a free port and wait until it accepts."""
    reason = missing_reason()
    if reason:
        raise RuntimeError(reason)
    workdir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        # sshd refuses to start as root without its privilege-separation directory
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    user = getpass.getuser()
    (workdir / "authorized_keys").write_text(
        keys.public(keys.user_key) + "\n" + keys.public(keys.passphrase_key) + "\n"
    )
    ssh_config = workdir / "ssh_config"
    ssh_config.write_text("# empty on purpose: tests never read ~/.ssh/config\n")
    addrs = addresses or loopback_addresses()
    last_error = ""
    for _attempt in range(3):  # the free port can be taken between choosing and binding it
        port = free_port()
        server = SshdServer(
            port=port,
            addresses=addrs,
            user=user,
            keys=keys,
            workdir=workdir,
            known_hosts=workdir / "known_hosts",
            ssh_config=ssh_config,
            log_path=workdir / "sshd.log",
        )
        server.known_hosts.write_text(
            "".join(known_hosts_line(a, port, keys.public(keys.host_key)) for a in addrs)
        )
        config = workdir / "sshd_config"
        config.write_text(_config_text(server, extra_config or {}))
        with open(server.log_path, "wb") as log:
            server.proc = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + startup_timeout
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                break
            if all(_accepts(a, port) for a in addrs[:1] + addrs[-1:]):
                return server
            time.sleep(0.05)
        last_error = server.log().strip()
        server.stop()
    raise RuntimeError(f"sshd did not start: {last_error or 'no output'}")


def _accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def running_sshd(
    workdir: Path,
    keys: SshKeys,
    extra_config: dict[str, str] | None = None,
    addresses: list[str] | None = None,
) -> Iterator[SshdServer]:
    server = start_sshd(workdir, keys, extra_config, addresses)
    try:
        yield server
    finally:
        server.stop()
