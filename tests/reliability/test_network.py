"""Network faults against real sockets and real sshd processes: each is classified, none hangs."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from orchestrator.inventory.model import Host
from orchestrator.transport import CommandResult, SshTransport, TransportError
from tests.support import fakes
from tests.support.sshd import ROOT_DIR, SshdServer, SshKeys

pytestmark = pytest.mark.ssh


def _fails(host: Host, sshd: SshdServer, **opts: object) -> tuple[TransportError, float]:
    start = time.monotonic()
    with pytest.raises(TransportError) as err:
        SshTransport(host, sshd.options(**opts)).run("true", b"", 10)
    return err.value, time.monotonic() - start


def test_refused_port_is_unreachable_fast_after_retries(sshd: SshdServer) -> None:
    with fakes.closed_port() as port:
        err, elapsed = _fails(sshd.host("down01", ansible_port=port), sshd, retries=2)
    assert err.kind == "unreachable"
    assert f"127.0.0.1:{port}" in err.message and "refused" in err.message
    assert err.retried == 2  # refused can be a restarting sshd: retried, then given up
    assert elapsed < 5, elapsed
    assert "\n" not in err.message


def test_black_holed_address_gives_connect_timeout_at_the_deadline(sshd: SshdServer) -> None:
    with fakes.black_hole() as port:
        err, elapsed = _fails(sshd.host("dark01", ansible_port=port), sshd, connect_timeout=1.0)
    assert err.kind == "connect_timeout"
    assert "no TCP answer within 1s" in err.message
    assert err.retried == 0  # a timeout is never retried: it would multiply the wait
    assert 0.9 <= elapsed < 8, elapsed


def test_listener_that_never_sends_a_banner_is_a_protocol_error_at_the_deadline(sshd: SshdServer) -> None:
    with fakes.silent() as server:
        err, elapsed = _fails(sshd.host("mute01", ansible_port=server.port), sshd, connect_timeout=1.0)
    assert err.kind == "protocol"
    assert "no SSH banner within 1s" in err.message and f":{server.port}" in err.message
    assert err.retried == 0
    assert 0.9 <= elapsed < 8, elapsed


def test_slow_drip_server_cannot_hold_the_connection_past_the_deadline(sshd: SshdServer) -> None:
    # Paramiko's own banner timeout restarts with every byte; only our watchdog ends this
    with fakes.drip(interval=1.0) as server:
        err, elapsed = _fails(sshd.host("drip01", ansible_port=server.port), sshd, connect_timeout=1.5)
    assert err.kind == "protocol"
    assert "no SSH banner" in err.message
    assert elapsed < 10, elapsed


def test_web_server_on_the_ssh_port_is_a_protocol_error(sshd: SshdServer) -> None:
    with fakes.greeting() as server:
        err, elapsed = _fails(sshd.host("web01", ansible_port=server.port), sshd, connect_timeout=1.0)
    assert err.kind == "protocol" and "ansible_port" in err.message
    assert elapsed < 8, elapsed


def test_sshd_killed_mid_command_is_disconnected_and_other_hosts_finish(
    sshd_factory: Callable[..., SshdServer], sshd: SshdServer, tmp_path: Path
) -> None:
    doomed = sshd_factory(addresses=["127.0.0.1"])
    victims = [SshTransport(h, doomed.options()) for h in doomed.fleet(4, prefix="victim")]
    survivors = [SshTransport(h, sshd.options()) for h in sshd.fleet(4, prefix="ok")]
    for t in victims + survivors:
        t.connect()  # so the kill lands while commands run, not while connecting

    running = tmp_path / "running"
    running.mkdir()

    def run(t: SshTransport) -> CommandResult | TransportError:
        try:
            if t in victims:
                return t.run(f"touch {running}/{t.host.name}; exec sleep 30", b"", timeout=20)
            return t.run(f"sleep 1.5; echo {t.host.name}", b"", timeout=20)
        except TransportError as e:
            return e

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(run, t) for t in victims + survivors]
        # kill once every victim's command runs (its login shell is past its rc files)
        while len(list(running.iterdir())) < len(victims) and time.monotonic() - start < 15:
            time.sleep(0.05)
        doomed.kill_all()
        killed_at = time.monotonic()
        outcomes = [f.result(timeout=20) for f in futures]
    elapsed = time.monotonic() - killed_at
    for t in victims + survivors:
        t.close()
    for t, out in zip(victims, outcomes[:4]):
        assert isinstance(out, TransportError), out
        assert out.kind == "disconnected" and t.host.name in out.message
    for t, out in zip(survivors, outcomes[4:]):
        assert isinstance(out, CommandResult), out
        assert out.exit_code == 0 and out.stdout == f"{t.host.name}\n".encode()
    assert elapsed < 10, elapsed  # noticed at once, not at the 20 s command deadline


def test_a_new_command_after_sshd_died_reports_the_host_unreachable(
    sshd_factory: Callable[..., SshdServer],
) -> None:
    doomed = sshd_factory(addresses=["127.0.0.1"])
    with SshTransport(doomed.host(), doomed.options(retries=1)) as t:
        assert t.run("true", b"", 10).exit_code == 0
        doomed.kill_all()
        time.sleep(0.2)
        with pytest.raises(TransportError) as err:
            t.run("true", b"", 10)
    assert err.value.kind in ("unreachable", "disconnected")


def test_maxstartups_drops_are_retried_until_every_host_gets_in(tmp_path: Path, ssh_keys: SshKeys) -> None:
    server = fakes.tiny_maxstartups_sshd(tmp_path / "tiny", ssh_keys)
    try:
        hosts = server.fleet(8)
        options = server.options(retries=12, retry_backoff=0.1, connect_timeout=5.0)

        def one(host: Host) -> CommandResult:
            with SshTransport(host, options) as t:
                return t.run("echo in", b"", 20)

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(one, hosts))
    finally:
        server.stop()
    assert all(r.exit_code == 0 and r.stdout == b"in\n" for r in results), results
    assert sum(r.retried for r in results) > 0, "sshd dropped nobody: the fault was not exercised"
    assert "past MaxStartups" in server.log() or "drop connection" in server.log()


def test_failed_handshakes_print_nothing_on_the_terminal(tmp_path: Path) -> None:
    # Paramiko logs tracebacks for failed handshakes; without a handler Python prints them
    script = tmp_path / "noisy.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(ROOT_DIR)!r})\n"
        "from orchestrator.inventory.model import Host\n"
        "from orchestrator.transport import SshTransport, TransportOptions, TransportError\n"
        "from tests.support import fakes\n"
        "for server in (fakes.greeting(), fakes.silent()):\n"
        "    with server:\n"
        "        host = Host('h', {'ansible_host': '127.0.0.1', 'ansible_port': server.port})\n"
        "        opts = TransportOptions(connect_timeout=0.5, ssh_config=os.devnull, known_hosts=os.devnull)\n"
        "        try:\n"
        "            SshTransport(host, opts).run('true', b'', 5)\n"
        "        except TransportError as e:\n"
        "            print(e.kind)\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert proc.stdout.split() == [b"protocol", b"protocol"]
    assert proc.stderr == b""


def test_host_deadline_bounds_connecting_and_retrying(sshd: SshdServer) -> None:
    with fakes.black_hole() as port:
        t = SshTransport(sshd.host("dark02", ansible_port=port), sshd.options(connect_timeout=30.0))
        start = time.monotonic()
        with pytest.raises(TransportError) as err:
            t.run("true", b"", 30, deadline=start + 1.0)
        assert err.value.kind == "connect_timeout"
        assert time.monotonic() - start < 5
    with fakes.closed_port() as port:
        t = SshTransport(sshd.host("down02", ansible_port=port), sshd.options(retries=10, retry_backoff=1.0))
        start = time.monotonic()
        with pytest.raises(TransportError) as err:
            t.connect(deadline=start + 1.0)
        assert err.value.kind == "unreachable"
        assert time.monotonic() - start < 3  # ten retries with 1 s backoff would take minutes
        assert err.value.retried < 10


def test_retry_pause_overrunning_the_deadline_reports_what_the_host_did(
    sshd: SshdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loaded controller can wake from a retry's pause after the host's deadline: the host
    # still refused, it did not time out.
    from orchestrator.transport import ssh as ssh_module

    def late_wake(seconds: float) -> None:
        time.sleep(seconds + 1.0)

    monkeypatch.setattr(ssh_module, "time", SimpleNamespace(monotonic=time.monotonic, sleep=late_wake))
    with fakes.closed_port() as port:
        t = SshTransport(sshd.host("down03", ansible_port=port), sshd.options(retries=5, retry_backoff=0.05))
        with pytest.raises(TransportError) as err:
            t.connect(deadline=time.monotonic() + 0.5)
    assert err.value.kind == "unreachable"
    assert "refused" in err.value.message and "deadline passed before retry 1" in err.value.message
    assert err.value.retried == 0


def test_host_deadline_shortens_the_command(sshd: SshdServer) -> None:
    with SshTransport(sshd.host(), sshd.options()) as t:
        t.connect()
        r = t.run("sleep 6", b"", 30, deadline=time.monotonic() + 1.0)
    assert r.timed_out
