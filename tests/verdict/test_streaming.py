"""Hosts judged while the run goes on (verdict/streaming.py) give the fleet judged after it, byte for
byte; whatever the pool cannot vouch for is judged again after the run, never taken on trust."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.engine.results import HostInput
from orchestrator.store.spool import SpooledRecords
from orchestrator.verdict.judge import build_fleet, host_judge
from orchestrator.verdict.streaming import JudgingPool
from tests.support.demo_inputs import copies
from tests.support.judged import meta
from tests.verdict.test_fleet_parallel import _expect, _overrides, _text

ROOT = Path(__file__).resolve().parents[2]


_STARTED: list[int] = []  # the judges the tests' pools forked


def _no_children_left() -> bool:
    """Every judge a pool of these tests forked has ended and been reaped (the test session has
    children of its own, an sshd for one, so "no child at all" is not the question)."""
    for pid in _STARTED:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def _pool(tmp_path: Path, workers: int = 2) -> JudgingPool:
    pool = JudgingPool(host_judge(_expect), workers, tmp_path)
    _STARTED.extend(pool._pids)
    return pool


def test_hosts_handed_over_as_they_finish_give_the_fleet_judged_after_the_run(
        demo_inputs: list[HostInput], tmp_path: Path) -> None:
    inputs = copies(demo_inputs, 60)
    serial = build_fleet(meta("t"), inputs, _expect, _overrides, workers=1).to_document()
    pool = _pool(tmp_path, 3)
    for h in reversed(inputs):  # hosts finish in any order; the fleet keeps the run's order
        pool.submit(h)
    streamed = build_fleet(meta("t"), inputs, _expect, _overrides, spool=tmp_path, workers=1, pool=pool).to_document()
    assert isinstance(streamed["hosts"], SpooledRecords)  # judged by the pool, not again here
    assert _text(streamed) == _text(serial)
    assert list(streamed["hosts"]) == serial["hosts"]
    assert _no_children_left()


@pytest.mark.parametrize("spoil", ["missing", "changed", "twice", "extra"])
def test_a_pool_that_cannot_vouch_for_every_host_gives_way_to_judging_after_the_run(
        demo_inputs: list[HostInput], tmp_path: Path, spoil: str) -> None:
    inputs = copies(demo_inputs, 12)
    serial = build_fleet(meta("t"), inputs, _expect, _overrides, workers=1).to_document()
    pool = _pool(tmp_path)
    handed = list(inputs)
    if spoil == "missing":  # a host the run ends with was never handed over
        handed = handed[1:]
    for h in handed:
        pool.submit(h)
    final = list(inputs)
    if spoil == "changed":  # the run's last word on a host differs from what the pool judged
        final[3] = dataclasses.replace(final[3], probes={p: {**s, "outcome": "failed", "reason": "cut"}
                                                         for p, s in final[3].probes.items()})
        serial = build_fleet(meta("t"), final, _expect, _overrides, workers=1).to_document()
    elif spoil == "twice":
        pool.submit(inputs[5])
    elif spoil == "extra":  # judged there, but not a host of the run's fleet
        final = final[:-1]
        serial = build_fleet(meta("t"), final, _expect, _overrides, workers=1).to_document()
    assert pool.finish(final) is None
    assert not list(tmp_path.glob(".verdict-*")), "what the pool wrote is removed"
    assert _no_children_left()
    # the same path through build_fleet: judged again after the run, the same fleet as one process
    pool = _pool(tmp_path)
    for h in handed:
        pool.submit(h)
    if spoil == "twice":
        pool.submit(inputs[5])
    again = build_fleet(meta("t"), final, _expect, _overrides, workers=1, pool=pool).to_document()
    assert isinstance(again["hosts"], list)
    assert _text(again) == _text(serial)


def test_a_worker_that_dies_costs_the_pool_not_the_fleet(demo_inputs: list[HostInput], tmp_path: Path) -> None:
    inputs = copies(demo_inputs, 10)
    pool = _pool(tmp_path)
    os.kill(pool._pids[0], signal.SIGKILL)  # the test plays the kernel's OOM killer
    for h in inputs:
        pool.submit(h)  # never raises: a broken pipe only means judging after the run
    fleet = build_fleet(meta("t"), inputs, _expect, _overrides, workers=1, pool=pool).to_document()
    assert _text(fleet) == _text(build_fleet(meta("t"), inputs, _expect, _overrides, workers=1).to_document())
    assert _no_children_left()


def test_a_pool_whose_workers_cannot_be_waited_for_gives_way_to_judging_after_the_run(
        demo_inputs: list[HostInput], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """waitpid failing (ECHILD: something else reaped the judges) costs the pool, not the run."""
    inputs = copies(demo_inputs, 6)
    pool = _pool(tmp_path)
    for h in inputs:
        pool.submit(h)
    real = os.waitpid

    def lost(pid: int, options: int) -> tuple[int, int]:
        if pid in pool._pids:
            real(pid, options)  # reaped here, as by someone else, then reported lost
            raise ChildProcessError(10, "No child processes")
        return real(pid, options)

    monkeypatch.setattr(os, "waitpid", lost)
    fleet = build_fleet(meta("t"), inputs, _expect, _overrides, workers=1, pool=pool).to_document()
    monkeypatch.setattr(os, "waitpid", real)
    assert isinstance(fleet["hosts"], list)  # judged again here
    assert _text(fleet) == _text(build_fleet(meta("t"), inputs, _expect, _overrides, workers=1).to_document())
    assert not list(tmp_path.glob(".verdict-*"))
    assert _no_children_left()


def test_closing_a_pool_stops_its_workers_and_removes_their_files(demo_inputs: list[HostInput],
                                                                 tmp_path: Path) -> None:
    pool = _pool(tmp_path)
    for h in copies(demo_inputs, 6):
        pool.submit(h)
    pool.close()
    pool.close()  # twice is harmless (the run's finally after a failed finish)
    assert not list(tmp_path.glob(".verdict-*"))
    assert _no_children_left()


def test_probe_run_judges_hosts_as_they_finish(tmp_path: Path) -> None:
    """The real path: `probe run` of the demo with worker processes hands every host to the pool
    and takes its verdicts (the fleet equals the one judged in one process: test_fleet_parallel)."""
    script = (
        "import sys\n"
        "from orchestrator.verdict import streaming\n"
        "finish = streaming.JudgingPool.finish\n"
        "def spy(self, inputs):\n"
        "    got = finish(self, inputs)\n"
        "    print('judged by the pool:', 'none' if got is None else len(got[1]), file=sys.stderr)\n"
        "    return got\n"
        "streaming.JudgingPool.finish = spy\n"
        "from orchestrator.cli.main import main\n"
        f"sys.argv = ['probe', 'run', '-o', {str(tmp_path / 'run')!r}, '-q']\n"
        "sys.exit(main())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), FLEETPROBE_WORKERS="2", HOME=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 5, proc.stderr  # the demo has an unreachable host
    assert "judged by the pool: 48" in proc.stderr  # 46 demo hosts, this machine and the closed port
    assert not list((tmp_path / "run").glob(".verdict-*"))
