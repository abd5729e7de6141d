"""SshTransport against a real OpenSSH sshd on loopback: commands, stdin, deadlines, caps, config."""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from orchestrator.inventory.model import Host
from orchestrator.transport import (
    CommandResult,
    SshTransport,
    TransportError,
    open_transport,
)
from orchestrator.transport.ssh import fabric_config
from tests.support.sshd import SshdServer

pytestmark = pytest.mark.ssh


def test_runs_command_with_stdin_and_reports_exit_code_and_streams(sshd: SshdServer) -> None:
    # the way probes are shipped: the script itself is python's stdin
    script = (
        b"import sys\nprint('probe on', sys.version_info[0])\nprint('warn', file=sys.stderr)\nsys.exit(4)\n"
    )
    with open_transport(sshd.host("gpu01"), sshd.options()) as t:
        assert isinstance(t, SshTransport)
        r = t.run("python3 -", script, timeout=20)
    assert r.exit_code == 4
    assert r.stdout == b"probe on 3\n"
    assert r.stderr == b"warn\n"
    assert not r.timed_out and not r.stdout_truncated and r.retried == 0


def test_large_stdin_and_stdout_pass_through_intact(sshd: SshdServer) -> None:
    # bigger than Paramiko's 2 MB window in both directions: the writer and reader must overlap
    payload = os.urandom(3 * 1024 * 1024)
    with open_transport(sshd.host(), sshd.options()) as t:
        r = t.run("cat", payload, timeout=30)
    assert r.exit_code == 0
    assert r.stdout == payload


def test_connection_is_reused_for_several_commands(sshd: SshdServer) -> None:
    with SshTransport(sshd.host(), sshd.options()) as t:
        first = t.run("echo $SSH_CONNECTION", b"", 10)
        second = t.run("echo $SSH_CONNECTION", b"", 10)
    # same client source port: one TCP connection carried both sessions
    assert first.stdout.split()[1] == second.stdout.split()[1]


def test_twenty_hosts_concurrently_each_get_their_own_answer(sshd: SshdServer) -> None:
    hosts = sshd.fleet(20)

    def one(host: Host) -> tuple[Host, CommandResult]:
        with open_transport(host, sshd.options()) as t:
            return host, t.run('cat; echo " $SSH_CONNECTION"', host.name.encode(), 30)

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(one, hosts))
    assert len(results) == 20
    for host, r in results:
        assert r.exit_code == 0, r
        name, rest = r.stdout.decode().split(" ", 1)
        assert name == host.name
        # SSH_CONNECTION = client_ip client_port server_ip server_port
        assert rest.split()[2:4] == [host.address, str(sshd.port)]
    assert len({h.address for h in hosts}) == len(sshd.addresses)


def test_hanging_command_times_out_within_its_deadline(sshd: SshdServer) -> None:
    with SshTransport(sshd.host(), sshd.options()) as t:
        start = time.monotonic()
        r = t.run("sleep 6", b"", timeout=1.0)  # short: sshd leaves it running after we go
        elapsed = time.monotonic() - start
        assert r.timed_out and r.exit_code is None
        assert elapsed < 6, elapsed  # generous: the deadline is 1 s
        # the connection survives a timed-out command
        assert t.run("echo again", b"", 10).stdout == b"again\n"


def test_output_before_the_deadline_is_kept(sshd: SshdServer) -> None:
    with SshTransport(sshd.host(), sshd.options()) as t:
        t.connect()  # the login is not part of the command's time: under load it can take seconds
        r = t.run("echo partial; echo err >&2; exec sleep 20", b"", timeout=3.0)
    assert r.timed_out and r.stdout == b"partial\n" and r.stderr == b"err\n"


def test_command_that_ignores_stdin_does_not_block_the_writer(sshd: SshdServer) -> None:
    with SshTransport(sshd.host(), sshd.options()) as t:
        r = t.run("echo done", os.urandom(8 * 1024 * 1024), timeout=20)
    assert r.exit_code == 0 and r.stdout == b"done\n" and not r.timed_out


def test_stdout_cap_truncates_without_holding_the_output_in_memory(sshd: SshdServer) -> None:
    cap = 1024 * 1024
    with SshTransport(sshd.host(), sshd.options(max_output=cap)) as t:
        t.connect()
        tracemalloc.start()
        try:
            r = t.run("head -c 50000000 /dev/zero; echo never-reached >&2", b"", timeout=60)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert t.run("echo still-usable", b"", 10).stdout == b"still-usable\n"
    assert r.stdout_truncated
    assert len(r.stdout) == cap and set(r.stdout) == {0}
    assert r.exit_code is None  # stopped, not finished
    assert peak < 12 * cap, f"peak Python allocation {peak} bytes for a {cap} byte cap"


def test_stderr_cap_keeps_draining_so_stdout_still_arrives(sshd: SshdServer) -> None:
    cmd = "head -c 3000000 /dev/zero >&2; echo result"
    with SshTransport(sshd.host(), sshd.options(max_stderr=64 * 1024)) as t:
        r = t.run(cmd, b"", timeout=30)
    assert r.exit_code == 0 and r.stdout == b"result\n"
    assert r.stderr_truncated and len(r.stderr) == 64 * 1024


def test_ssh_config_supplies_hostname_port_user_and_identity(sshd: SshdServer, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        "Host fleet-alias\n"
        f"    HostName {sshd.addresses[-1]}\n"
        f"    Port {sshd.port}\n"
        f"    User {sshd.user}\n"
        f"    IdentityFile {sshd.keys.user_key}\n"
        "    IdentitiesOnly yes\n"
    )
    host = Host(name="fleet-alias", vars={})  # nothing from the inventory but the name
    with open_transport(host, sshd.options(ssh_config=str(cfg))) as t:
        r = t.run("echo $SSH_CONNECTION; id -un", b"", 10)
    conn, user = r.stdout.decode().splitlines()
    assert conn.split()[2:4] == [sshd.addresses[-1], str(sshd.port)]
    assert user == sshd.user


def test_one_hosts_ssh_settings_do_not_leak_into_the_shared_config(sshd: SshdServer, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host alias1\n    HostName 127.0.0.1\n    Port {sshd.port}\n    IdentityFile {sshd.keys.user_key}\n"
    )
    opts = sshd.options(ssh_config=str(cfg))
    with SshTransport(Host("alias1"), opts) as t:
        assert t.run("true", b"", 10).exit_code == 0
    assert dict(fabric_config(str(cfg)).connect_kwargs) == {}


def test_inventory_key_is_the_only_key_used(sshd: SshdServer, tmp_path: Path) -> None:
    # ssh_config offers the right key, the inventory names the wrong one: the inventory wins alone
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host *\n    IdentityFile {sshd.keys.user_key}\n")
    host = sshd.host(ansible_ssh_private_key_file=str(sshd.keys.wrong_key))
    with pytest.raises(TransportError) as err:
        SshTransport(host, sshd.options(ssh_config=str(cfg))).run("true", b"", 10)
    assert err.value.kind == "auth"


def test_proxyjump_from_ssh_config(sshd: SshdServer, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        "Host jump\n"
        f"    HostName {sshd.addresses[0]}\n    Port {sshd.port}\n    User {sshd.user}\n"
        f"    IdentityFile {sshd.keys.user_key}\n"
        "Host behind\n"
        f"    HostName {sshd.addresses[-1]}\n    Port {sshd.port}\n    User {sshd.user}\n"
        f"    IdentityFile {sshd.keys.user_key}\n    ProxyJump jump\n"
    )
    with open_transport(Host(name="behind"), sshd.options(ssh_config=str(cfg))) as t:
        r = t.run("echo $SSH_CONNECTION", b"", 10)
    # the target saw the jump host's forwarded connection, to its own address
    assert r.exit_code == 0
    assert r.stdout.split()[2].decode() == sshd.addresses[-1]


def test_missing_ssh_config_file_is_a_config_error(sshd: SshdServer, tmp_path: Path) -> None:
    with pytest.raises(TransportError) as err:
        SshTransport(sshd.host(), sshd.options(ssh_config=str(tmp_path / "nope")))
    assert err.value.kind == "config" and "nope" in err.value.message


def test_no_pty_is_allocated(sshd: SshdServer) -> None:
    with SshTransport(sshd.host(), sshd.options()) as t:
        r = t.run("tty", b"", 10)
    assert r.exit_code == 1 and r.stdout.strip() == b"not a tty"


def test_default_user_ssh_config_and_its_known_hosts_file_are_honoured(
    sshd: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    kh = home / "fleet_known_hosts"
    kh.write_text(sshd.known_hosts.read_text())
    (home / ".ssh" / "config").write_text(
        "Host gpu-a\n"
        f"    HostName {sshd.addresses[1 % len(sshd.addresses)]}\n    Port {sshd.port}\n    User {sshd.user}\n"
        f"    IdentityFile {sshd.keys.user_key}\n    UserKnownHostsFile ~/fleet_known_hosts\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    opts = sshd.options(ssh_config=None, known_hosts=None)  # what a user gets without flags
    with open_transport(Host("gpu-a"), opts) as t:
        assert t.run("true", b"", 10).exit_code == 0  # strict passed on ~/fleet_known_hosts
    # accept-new records into that same file, not ~/.ssh/known_hosts
    kh.write_text("")
    with open_transport(Host("gpu-a", {"probe_host_key_policy": "accept-new"}), opts) as t:
        assert t.run("true", b"", 10).exit_code == 0
    assert f":{sshd.port} ssh-ed25519" in kh.read_text()
    assert not (home / ".ssh" / "known_hosts").exists()


def test_no_file_descriptors_or_threads_leak_across_commands_and_connections(sshd: SshdServer) -> None:
    def counts() -> tuple[int, int]:
        return len(os.listdir("/proc/self/fd")), threading.active_count()

    with SshTransport(sshd.host(), sshd.options()) as t:
        t.run("true", b"", 10)  # warm up: the connection and its thread exist from here
        before = counts()
        for i in range(10):
            t.run(f"echo {i}", b"x" * 1000, 10)
        t.run("sleep 6", b"", 0.3)  # a timed-out one too
        time.sleep(0.2)
        during = counts()
    for _ in range(3):
        with SshTransport(sshd.host(), sshd.options()) as t2:
            t2.run("true", b"", 10)
    time.sleep(0.3)
    after = counts()
    # a cancelled timer thread may still be winding down when counted: growth is what matters
    assert during[0] == before[0] and during[1] <= before[1], (before, during)
    assert after[0] <= before[0] and after[1] <= before[1], (before, after)


def test_inventory_yaml_describes_hosts_that_connect_under_strict(sshd: SshdServer, tmp_path: Path) -> None:
    hosts = sshd.fleet(3)
    data = yaml.safe_load(sshd.inventory_yaml(hosts))
    group_vars = data["all"]["vars"]
    assert group_vars == {"probe_known_hosts": str(sshd.known_hosts)}
    for h in hosts:
        merged = {**group_vars, **data["all"]["hosts"][h.name]}
        assert merged["ansible_host"] == h.address and merged["ansible_port"] == sshd.port
        # probe_known_hosts from the inventory replaces the (here: empty) known_hosts option
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        with SshTransport(Host(h.name, merged), sshd.options(known_hosts=str(empty))) as t:
            assert t.run("true", b"", 10).exit_code == 0
