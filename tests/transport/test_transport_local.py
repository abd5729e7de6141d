"""LocalTransport (real subprocesses), the transport factory and the `sudo -n` wrapper."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from orchestrator.inventory.model import Host
from orchestrator.transport import (
    TRANSPORTS,
    CommandResult,
    LocalTransport,
    SshTransport,
    TransportError,
    TransportOptions,
    become_failure,
    open_transport,
    register_transport,
    wrap_command,
)


def _local(**opts: object) -> LocalTransport:
    return LocalTransport(Host("localhost", {"ansible_connection": "local"}), TransportOptions(**opts))  # type: ignore[arg-type]


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_local_runs_python_from_stdin_with_exit_code_and_streams() -> None:
    script = b"import sys\nprint('hello from', sys.argv[0])\nprint('note', file=sys.stderr)\nsys.exit(3)\n"
    r = _local().run(f"{shlex.quote(sys.executable)} -", script, timeout=20)
    assert r.exit_code == 3
    assert r.stdout == b"hello from -\n" and r.stderr == b"note\n"
    assert not r.timed_out


def test_local_large_stdin_and_stdout_round_trip() -> None:
    payload = os.urandom(5 * 1024 * 1024)  # more than any pipe buffer in both directions
    r = _local().run("cat", payload, timeout=30)
    assert r.exit_code == 0 and r.stdout == payload


def test_local_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    r = _local().run(f"sleep 60 & echo $! > {pidfile}; echo started; wait", b"", timeout=1.0)
    elapsed = time.monotonic() - start
    assert r.timed_out and r.exit_code is None and r.stdout == b"started\n"
    assert elapsed < 6, elapsed
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_alive(child), "the background child survived the deadline"


def test_local_child_holding_stdout_open_cannot_outlive_the_deadline() -> None:
    # the shell exits at once but its background child keeps the pipe open
    r = _local().run("sleep 60 &", b"", timeout=1.0)
    assert r.timed_out and r.exit_code is None


def test_local_stdout_cap_stops_the_command() -> None:
    cap = 256 * 1024
    r = _local(max_output=cap).run("head -c 50000000 /dev/zero", b"", timeout=30)
    assert r.stdout_truncated and len(r.stdout) == cap and r.exit_code is None


def test_local_stderr_cap_keeps_draining() -> None:
    r = _local(max_stderr=1000).run("head -c 1000000 /dev/zero >&2; echo ok", b"", timeout=30)
    assert r.exit_code == 0 and r.stdout == b"ok\n"
    assert r.stderr_truncated and len(r.stderr) == 1000


def test_local_command_that_ignores_stdin() -> None:
    r = _local().run("echo done", os.urandom(4 * 1024 * 1024), timeout=20)
    assert r.exit_code == 0 and r.stdout == b"done\n"


# -- factory ---------------------------------------------------------------------------------------


def test_factory_picks_by_ansible_connection() -> None:
    opts = TransportOptions(ssh_config=os.devnull)
    assert isinstance(open_transport(Host("a", {"ansible_connection": "local"}), opts), LocalTransport)
    for kind in ("ssh", "paramiko", "smart"):
        t = open_transport(Host("b", {"ansible_connection": kind}), opts)
        assert isinstance(t, SshTransport)
        t.close()
    assert isinstance(open_transport(Host("c"), opts), SshTransport)  # ssh is the default


def test_factory_rejects_unknown_connection_with_a_clear_message() -> None:
    with pytest.raises(TransportError) as err:
        open_transport(Host("gpu01", {"ansible_connection": "winrm"}), TransportOptions())
    assert err.value.kind == "config"
    assert "gpu01" in err.value.message and "winrm" in err.value.message and "local" in err.value.message


def test_factory_registry_accepts_new_kinds() -> None:
    class Canned:
        def __init__(self, host: Host, options: TransportOptions):
            self.host = host

        def run(self, command: str, stdin: bytes, timeout: float) -> CommandResult:
            return CommandResult(0, self.host.name.encode(), b"", 0.0)

        def close(self) -> None:
            pass

    register_transport("canned-test", Canned)
    try:
        t = open_transport(Host("x1", {"ansible_connection": "canned-test"}), TransportOptions())
        assert t.run("anything", b"", 1).stdout == b"x1"
    finally:
        del TRANSPORTS["canned-test"]


# -- become ----------------------------------------------------------------------------------------


def test_wrap_command_leaves_plain_commands_alone() -> None:
    assert wrap_command("python3 -", False) == "python3 -"


def test_wrap_command_quotes_so_the_shell_sees_exactly_the_command() -> None:
    cmd = """python3 - --name "it's; $(touch /tmp/x)" `id` && echo 'q'"""
    user = "svc; touch /tmp/pwned"
    wrapped = wrap_command(cmd, True, become_user=user)
    assert shlex.split(wrapped) == ["sudo", "-n", "-u", user, "--", "/bin/sh", "-c", cmd]


PASSWORDLESS_SUDO = """#!/bin/sh
# stands in for sudo with NOPASSWD: drops its own options and runs the rest
while [ "$#" -gt 0 ]; do
  case "$1" in -n) shift ;; -u) shift 2 ;; --) shift; break ;; *) break ;; esac
done
exec "$@"
"""


def test_wrapped_command_runs_unchanged_through_sudo(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sudo").write_text(PASSWORDLESS_SUDO)
    (bindir / "sudo").chmod(0o755)
    marker = tmp_path / "injected"
    cmd = f"""echo "a'b"; echo '$(touch {marker})'; echo $((1+2))"""
    r = _local().run(
        f"PATH={bindir}:$PATH; export PATH; " + wrap_command(cmd, True, "nobody; touch " + str(marker)),
        b"",
        timeout=10,
    )
    assert r.exit_code == 0, r
    assert r.stdout == f"a'b\n$(touch {marker})\n3\n".encode()
    assert not marker.exists()


def test_become_failure_reasons() -> None:
    assert become_failure(0, b"sudo: a password is required\n") is None
    pw = become_failure(1, b"sudo: a password is required\n")
    assert pw is not None and "NOPASSWD" in pw
    notin = become_failure(1, b"sudo: alice is not in the sudoers file.  This incident will be reported.\n")
    assert notin is not None and "sudoers" in notin
    missing = become_failure(127, b"sh: 1: sudo: not found\n")
    assert missing is not None and "not installed" in missing
    # a probe that failed on its own is not a sudo problem
    assert become_failure(1, b"Traceback (most recent call last):\n") is None
