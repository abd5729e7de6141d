"""Shared test fixtures: a real OpenSSH sshd on loopback and the keys it trusts.

Fixtures (see tests/support/sshd.py for the objects):
* `ssh_keys`      session: SshKeys (user_key, passphrase_key, wrong_key, host_key, other_host_key)
* `sshd`          session: SshdServer on 127.0.0.1..16, one free port; `.host()`, `.fleet(n)`,
                  `.options()`, `.known_hosts`, `.inventory_yaml(hosts)`; skipped when sshd is missing
* `demo_inputs`   session: list[HostInput] of the demo fleet, from a real demo run's raw files
* `sshd_factory`  function: `sshd_factory(extra_config={...}, addresses=[...])` starts a private
                  sshd (for tests that kill or reconfigure it); all are stopped after the test
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.skips import accepted_in_ci  # noqa: E402
from tests.support.sshd import SshdServer, SshKeys, missing_reason, start_sshd  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI=true a skip is a check that did not run: it fails, unless it says the kind of
    machine cannot have the part at all (tests/support/skips.py)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get("CI", "").lower() == "true":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not accepted_in_ci(reason):
            report.outcome = "failed"
            report.longrepr = f"CI=true and this test was skipped, so its check did not run: {reason}"


def pytest_sessionstart(session: pytest.Session) -> None:
    # A shell starts a background job (`nohup ... &`) with Ctrl-C ignored, and every `probe run`
    # the tests start would inherit that and never see the SIGINT the interrupt tests send.
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def ssh_keys(tmp_path_factory: pytest.TempPathFactory) -> SshKeys:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    return SshKeys.generate(tmp_path_factory.mktemp("ssh-keys"))


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory, ssh_keys: SshKeys) -> Iterator[SshdServer]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"), ssh_keys)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sshd_factory(tmp_path: Path, ssh_keys: SshKeys) -> Iterator[Callable[..., SshdServer]]:
    started: list[SshdServer] = []

    def make(extra_config: dict[str, str] | None = None, addresses: list[str] | None = None) -> SshdServer:
        server = start_sshd(tmp_path / f"sshd{len(started)}", ssh_keys, extra_config, addresses)
        started.append(server)
        return server

    try:
        yield make
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ssh-agent for this test, whatever the developer's shell has."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    assert "SSH_AUTH_SOCK" not in os.environ


@pytest.fixture(scope="session")
def demo_inputs(tmp_path_factory: pytest.TempPathFactory) -> list:
    from tests.support.demo_inputs import stored_demo_inputs

    return stored_demo_inputs(tmp_path_factory.mktemp("demo-inputs"))
