"""SIGINT/SIGTERM at the two edges of a command, where the command's own handling does not reach:
while its options are read, and once its exit status is decided (the interpreter shutting down
puts the default handlers back, so a signal then killed a finished command: status -15)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator

import pytest

from orchestrator.cli import main as cli

HELD = {signal.SIGINT, signal.SIGTERM}


@pytest.fixture(autouse=True)
def _signals_restored() -> Iterator[None]:
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGTERM, handler)


def test_an_interrupt_while_the_options_are_read_is_130_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted() -> None:  # what the SIGTERM handler raises when the signal lands here
        raise KeyboardInterrupt()

    monkeypatch.setattr(cli, "_streams_never_fail", interrupted)
    try:
        code = cli.main(["probes"])
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped the command: a traceback and status -2 for the user")
    assert code == 130
    assert "probe: interrupted" in capsys.readouterr().err


def test_the_command_holds_interrupts_once_its_status_is_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["probe", "probes"])
    assert not HELD & signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert cli.main() == 0
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) >= HELD  # pending until the process exits


def test_a_caller_in_this_process_keeps_its_signals() -> None:
    assert cli.main(["probes"]) == 0
    assert not HELD & signal.pthread_sigmask(signal.SIG_BLOCK, [])
