"""SIGINT/SIGTERM at the edges of a command, where its own handling does not reach: while it is
imported and its options are read, and once its exit status is decided (the interpreter shutting
down puts the default handlers back, so a signal then killed a finished command: status -15)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from orchestrator.cli import info
from orchestrator.cli import main as cli
from tests.support.hostile import cli_env

HELD = {signal.SIGINT, signal.SIGTERM}


@pytest.fixture(autouse=True)
def _signals_restored() -> Iterator[None]:
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handlers = {s: signal.getsignal(s) for s in HELD}
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for s, handler in handlers.items():
            signal.signal(s, handler)


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


def test_the_command_ignores_interrupts_once_its_status_is_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ignored, not only held by this thread: another thread (an SSH stdin writer) would take a
    process-wide signal, and shutting down puts back the default action of a handled signal."""
    monkeypatch.setattr(sys, "argv", ["probe", "probes"])
    assert cli.main() == 0
    assert all(signal.getsignal(s) == signal.SIG_IGN for s in HELD)


@pytest.mark.parametrize("sig", sorted(HELD), ids=lambda s: s.name)
def test_a_signal_whose_handler_runs_once_the_status_is_decided_changes_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], sig: signal.Signals) -> None:
    """The signal lands as the command returns: Python runs its handler at a later bytecode, here
    inside the call that ignores the signals from then on, outside any handler of the command's."""
    real = signal.signal
    landed: list[int] = []

    def lands_first(signum: int, handler: object) -> object:
        if handler == signal.SIG_IGN and not landed:
            landed.append(signum)
            os.kill(os.getpid(), sig)
        return real(signum, handler)  # type: ignore[arg-type]

    monkeypatch.setattr(sys, "argv", ["probe", "probes"])
    monkeypatch.setattr(signal, "signal", lands_first)
    try:
        code = cli.main()
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped the command: a traceback for the user")
    assert landed and code == 0
    assert "interrupted" not in capsys.readouterr().err


def test_a_caller_in_this_process_keeps_its_signals() -> None:
    handlers = {s: signal.getsignal(s) for s in HELD}
    assert cli.main(["probes"]) == 0
    assert not HELD & signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert {s: signal.getsignal(s) for s in HELD} == handlers


@pytest.mark.parametrize("sig", sorted(HELD), ids=lambda s: s.name)
def test_a_signal_while_the_command_is_imported_is_130_not_a_death_or_a_traceback(sig: signal.Signals) -> None:
    """The console command imports most of fleetprobe before the command starts (a third of a
    second): the signal lands there, in the middle of that import."""
    script = (
        "import importlib.abc, os, signal, sys\n"
        "class Lands(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'orchestrator.cli.main':\n"
        f"            os.kill(os.getpid(), {int(sig)})\n"
        "        return None\n"
        "sys.meta_path.insert(0, Lands())\n"
        "sys.argv = ['probe', 'probes']\n"
        "from orchestrator.cli.entry import main\n"
        "sys.exit(main())\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=cli_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 130 and proc.stderr == "probe: interrupted\n", (proc.returncode, proc.stderr)


def _cut_lock_release(*_: object) -> None:
    """What CPython raises when Ctrl-C lands inside threading's Condition.wait: the interrupt is
    only the context of a RuntimeError from the lock it cut short."""
    try:
        raise KeyboardInterrupt()
    except KeyboardInterrupt:
        raise RuntimeError("release unlocked lock") from None


def test_an_interrupt_that_cut_a_locks_release_short_is_130_not_an_internal_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.engine.runner import ctrl_c_of

    monkeypatch.setattr(info, "list_probes", _cut_lock_release)
    assert cli.main(["probes"]) == 130
    assert "probe: interrupted" in capsys.readouterr().err
    try:
        _cut_lock_release()
    except RuntimeError as e:
        assert isinstance(ctrl_c_of(e), KeyboardInterrupt)
    assert ctrl_c_of(RuntimeError("another")) is None and ctrl_c_of(ValueError()) is None


def test_another_runtime_error_is_still_an_internal_error(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(info, "list_probes", broken)
    assert cli.main(["probes"]) == 70
    assert "internal error" in capsys.readouterr().err


def test_an_interrupt_handled_inside_a_string_exec_still_exits_130_under_python_m(tmp_path) -> None:
    """dataclasses and namedtuple write their methods as source and `exec` it, on import and after:
    an interrupt that lands there and that the command handles had CPython end a `python -m`
    process with SIGINT (status -2) after `probe: interrupted`."""
    (tmp_path / "sitecustomize.py").write_text(
        "from orchestrator.cli import info\n"
        "def interrupted(*_args, **_kwargs):\n"
        "    exec('raise KeyboardInterrupt')  # where a signal's handler raises it\n"
        "info.list_probes = interrupted\n")
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "probes"], capture_output=True, text=True,
                          timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 130 and proc.stderr == "probe: interrupted\n", (proc.returncode, proc.stderr)
