"""A probe's timeout counts from its start on the host, not from when the controller sent it.

The real loopback sshd, reached through the benchmark's delay proxy (bench/delayproxy.c) at a
round-trip time of 1 s, and a probe timeout of 2.5 s: opening the session, the exec request, the
script's way there and the answer's way back cost three round trips (3 s) before a probe of 30 ms
has answered.  Counted from when the controller asked for the session, that healthy host would be
a timeout; counted from the probe's start on the host (its start mark, a bundle's magic line) it is
ok.  A probe that hangs on the host after it started is still a timeout, at its timeout.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import HostResult, ProbeCall, RunOptions, run_host
from orchestrator.inventory.model import Host
from orchestrator.transport.base import CommandResult, TransportOptions
from orchestrator.transport.ssh import SshTransport
from tests.support.delay import delayproxy
from tests.support.sshd import SshdServer, SshKeys, known_hosts_line

pytestmark = [pytest.mark.ssh, pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")),
                                                   reason="the delay proxy needs gcc")]

RTT_MS = 1000.0
TIMEOUT_S = 2.5


class SentClockTransport(SshTransport):
    """The transport as it was: run() without `clock_on_host`, so the runner counts the probe's timeout
    from the session request (the control: the same host, the old clock)."""

    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None, *,  # type: ignore[override]
            deadline: float | None = None) -> CommandResult:
        return super().run(command, stdin, timeout, deadline=deadline)


@pytest.fixture
def slow_link(sshd: SshdServer, ssh_keys: SshKeys, tmp_path: Path) -> Iterator[tuple[Host, TransportOptions]]:
    proxy = delayproxy().DelayProxy.start(sshd.port, RTT_MS, bind="127.0.0.1", upstream_host="127.0.0.1")
    known = tmp_path / "known_hosts"
    known.write_text(known_hosts_line("127.0.0.1", proxy.port, ssh_keys.public(ssh_keys.host_key)))
    # the probes run under this test's own interpreter: a login shell's rc files would only add noise
    host = sshd.host("far01", address="127.0.0.1", ansible_port=proxy.port, ansible_python_interpreter=sys.executable)
    try:
        yield host, sshd.options(known_hosts=str(known), connect_timeout=20.0)
    finally:
        proxy.stop()


def _run(host: Host, options: TransportOptions, calls: list[ProbeCall], kind: type[SshTransport] = SshTransport,
         ) -> HostResult:
    return run_host(host, calls, RunOptions(transport=options), lambda h, o: kind(h, o), threading.Event(), {},
                    threading.Lock())


def _hanging_interpreter(directory: Path) -> Path:
    """A `python3` that runs the probe it is fed, whose collect() first hangs in C with the GIL held:
    the probe has started (it announced it), and its own watchdog can never fire."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "python3-hangs"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "src = sys.stdin.buffer.read().replace(b'\\ndef collect(ctx):\\n',\n"
        "    b'\\ndef collect(ctx):\\n    import ctypes; ctypes.PyDLL(None).sleep(600)\\n', 1)\n"
        "exec(compile(src, '<stdin>', 'exec'), {'__name__': '__main__'})\n")
    path.chmod(0o755)
    return path


def test_a_healthy_host_behind_a_slow_link_is_not_a_timeout(slow_link: tuple[Host, TransportOptions]) -> None:
    host, options = slow_link
    got = _run(host, options, [ProbeCall("host", {}, TIMEOUT_S)])
    probe = got.probes["host"]
    assert probe.outcome == Outcome.OK, probe.reason
    assert probe.envelope is not None and probe.envelope.data["hostname"]
    # the answer took longer than the timeout from the session request: 3 round trips at least
    assert probe.duration_s > TIMEOUT_S, probe.duration_s


def test_counted_from_when_the_controller_sent_it_the_same_host_was_a_timeout(
        slow_link: tuple[Host, TransportOptions]) -> None:
    host, options = slow_link
    got = _run(host, options, [ProbeCall("host", {}, TIMEOUT_S)], kind=SentClockTransport)
    assert got.probes["host"].outcome == Outcome.TIMEOUT


def test_a_bundle_behind_a_slow_link_is_not_a_timeout(slow_link: tuple[Host, TransportOptions]) -> None:
    host, options = slow_link
    got = _run(host, options, [ProbeCall("host", {}, TIMEOUT_S), ProbeCall("pcie", {}, TIMEOUT_S)])
    assert {p.probe: p.outcome for p in got.probes.values()} == {"host": Outcome.OK, "pcie": Outcome.OK}, \
        {p.probe: p.reason for p in got.probes.values()}


def test_a_probe_that_hangs_on_the_host_is_still_a_timeout_at_its_timeout(
        slow_link: tuple[Host, TransportOptions], tmp_path: Path) -> None:
    host, options = slow_link
    hangs = _hanging_interpreter(tmp_path / "bin")
    far = Host(host.name, {**host.vars, "ansible_python_interpreter": str(hangs)}, host.groups)
    got = _run(far, options, [ProbeCall("host", {}, TIMEOUT_S)])
    probe: Any = got.probes["host"]
    assert probe.outcome == Outcome.TIMEOUT, probe.reason
    assert probe.reason == f"probe did not finish within {TIMEOUT_S:.0f}s"
    # given up at its timeout after it started: the session and exec (2 RTT), the mark's way back
    # (1 RTT incl. the script's way there), then the 2.5 s; not the host's whole deadline
    assert TIMEOUT_S + 2 * RTT_MS / 1000 < probe.duration_s < TIMEOUT_S + 4 * RTT_MS / 1000 + 2, probe.duration_s
