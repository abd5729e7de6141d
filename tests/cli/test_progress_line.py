"""The progress line on a real terminal (issue 49, item 3): its counts add up to the hosts done
(`[48/48] ok=46 problems=1` counted the host without a GPU library nowhere), and it is ended
before any other line is written, so a fabric step's notice never lands at its end
(`[48/48] ok=47 problems=1 elapsed 1.1s fabric [0 s]: 24 host(s) ...`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.support.tty import run_on_tty

_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]((?: [a-z_]+=\d+)+) elapsed \d+\.\ds ?$")


def progress_lines(lines: list[str]) -> list[re.Match[str]]:
    return [m for m in map(_PROGRESS.match, lines) if m]


@pytest.mark.parametrize("argv, hosts", [
    (["run"], 48),  # ok, unsupported (this-machine), unreachable (offline-01), fail findings
    (["run", "-l", "this-machine,offline-01,dgx-h100-0[1:2]"], 4),
    (["run", "-p", "premigration", "-l", "dgx-h100-0[1:6],this-machine,offline-01"], 8),  # unsupported mostly
    (["run", "-p", "quick", "-l", "this-machine,offline-01"], 2),
])
def test_the_counts_add_up_to_the_hosts_done(tmp_path: Path, argv: list[str], hosts: int) -> None:
    r = run_on_tty([*argv, "--results", str(tmp_path / "runs")])
    assert r.code in (0, 1, 4, 5), r.raw[-3000:]
    shown = progress_lines(r.lines)
    assert shown, r.raw[:2000]
    last = shown[-1]
    assert (int(last[1]), int(last[2])) == (hosts, hosts), last[0]
    counts = dict(pair.split("=") for pair in last[3].split())
    assert sum(map(int, counts.values())) == hosts, last[0]
    assert "ok" in counts and "problems" in counts


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["dgx-h100-0[1:3],this-machine", "dgx-h100-1[0:2]"])
def test_no_line_is_written_onto_the_progress_line(tmp_path: Path, limit: str) -> None:
    r = run_on_tty(["run", "-p", "fabric", "-l", limit, "--results", str(tmp_path / "runs"), "-v"])  # the hosts table
    lines = r.lines
    notices = [ln for ln in lines if "fabric [" in ln]
    assert notices, r.raw[:3000]  # the fabric step spoke while the progress line was up
    assert all(ln.startswith("fabric [") and "elapsed" not in ln for ln in notices), notices
    # every line that says "elapsed" is a progress line and nothing else; every other line is whole
    assert all(_PROGRESS.match(ln) for ln in lines if " elapsed " in ln), [ln for ln in lines if " elapsed " in ln]
    assert any(ln.startswith("host ") for ln in lines) and any(ln.startswith("RECAP ") for ln in lines)


def _speak(i: int) -> None:
    print(f"probe: warning: known_hosts:{i}: skipped", file=sys.stderr)
    print(f"stdout line {i}")


def test_a_line_from_another_thread_ends_the_progress_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A transport's warning comes from a worker thread: on a real pty it still lands on a line of
    its own, and the progress line is drawn again beneath it; stdout and stderr are given back."""
    import os
    import pty
    import threading

    from orchestrator.engine.outcomes import Outcome
    from orchestrator.engine.runner import HostResult, ProbeResult
    from orchestrator.inventory.model import Host
    from orchestrator.present.progress import Progress
    from tests.support.tty import screen

    master, slave = pty.openpty()
    tty = os.fdopen(slave, "w", buffering=1)
    monkeypatch.setattr("sys.stdout", tty)
    monkeypatch.setattr("sys.stderr", tty)
    progress = Progress(3)  # its stream is the pty: shown
    assert progress.enabled
    outcomes = [Outcome.OK, Outcome.UNSUPPORTED, Outcome.UNREACHABLE]
    for i, outcome in enumerate(outcomes):
        progress.host_finished(HostResult(Host(f"gpu{i}"), {"host": ProbeResult("host", outcome)}))
        worker = threading.Thread(target=_speak, args=(i,))
        worker.start()
        worker.join()
    progress.close()
    assert sys.stdout is tty and sys.stderr is tty
    tty.close()
    raw = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        raw += chunk
    os.close(master)
    lines = screen(raw.decode())
    assert [ln for ln in lines if not _PROGRESS.match(ln)] == [
        f"{w}" for i in range(3) for w in (f"probe: warning: known_hosts:{i}: skipped", f"stdout line {i}")]
    assert _PROGRESS.match(lines[-1]) and lines[-1].startswith("[3/3] ok=1 unsupported=1 problems=1 ")
