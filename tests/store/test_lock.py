"""The results-directory lock between real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.exitcodes import LOCKED as LOCK_HELD_EXIT
from orchestrator.store.lock import LockHeld, RunLock

ROOT = Path(__file__).resolve().parents[2]

HOLDER = """
import sys
from orchestrator.store.lock import RunLock
with RunLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""

CONTENDER = """
import sys
from orchestrator.cli.exitcodes import LOCKED as LOCK_HELD_EXIT
from orchestrator.store.lock import LockHeld, RunLock
try:
    with RunLock(sys.argv[1]):
        print("got it")
except LockHeld as e:
    print(e, file=sys.stderr)
    sys.exit(LOCK_HELD_EXIT)
"""


def _py(code: str, *args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True, **kw)


@pytest.fixture
def holder(tmp_path: Path):
    p = _py(HOLDER, str(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline().strip() == "locked"
    yield p
    if p.poll() is None:
        p.kill()
    p.wait(timeout=10)


def test_second_process_fails_with_holder_pid_and_start_time(tmp_path: Path, holder: subprocess.Popen):
    second = _py(CONTENDER, str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = second.communicate(timeout=20)
    assert second.returncode == LOCK_HELD_EXIT, (out, err)
    assert out == ""
    assert f"(pid {holder.pid}, started 20" in err
    assert str(tmp_path / ".fleetprobe.lock") in err

    # in this process too, as an exception carrying the fields
    with pytest.raises(LockHeld) as e:
        RunLock(tmp_path).acquire()
    assert e.value.pid == holder.pid and e.value.started and e.value.started.endswith("Z")

    # once the holder finishes, the lock is free again
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.wait(timeout=10) == 0
    third = _py(CONTENDER, str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, _ = third.communicate(timeout=20)
    assert third.returncode == 0 and out.strip() == "got it"


def test_killed_holder_leaves_no_stale_lock(tmp_path: Path, holder: subprocess.Popen):
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    with RunLock(tmp_path) as lock:
        assert lock.held
    assert not lock.held


def test_same_process_second_lock_is_refused_and_release_is_idempotent(tmp_path: Path):
    first = RunLock(tmp_path / "new" / "dir").acquire()  # creates the directory
    with pytest.raises(LockHeld, match=rf"pid {os.getpid()}"):
        RunLock(tmp_path / "new" / "dir").acquire()
    first.release()
    first.release()
    with RunLock(tmp_path / "new" / "dir"):
        pass
