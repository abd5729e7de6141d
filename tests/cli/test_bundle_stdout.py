"""`probe bundle` to a stdout that does not take the bundle whole: closed (`>&-`), a full device
(/dev/full), a pipe whose reader is gone.  One line saying so and RESULTS_UNWRITABLE (73), never
an internal error (70, on main: AttributeError for a closed stdout), nor a silent 0 for a bundle
cut short, nor a second complaint as the interpreter exits."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.sshd import ROOT_DIR

# the bundles asked for: a small one, the audit playbook's (bigger than a pipe's buffer), and `-o -`
BUNDLES = [["--probe", "host"], [], ["-p", "audit", "-o", "-"]]


@contextmanager
def _closed_stdout() -> Iterator[dict[str, Any]]:
    """The command started by a shell with its stdout closed (`>&-`)."""
    yield {"wrap": ["sh", "-c", 'exec "$0" "$@" >&-'], "stdout": None}


@contextmanager
def _full_device() -> Iterator[dict[str, Any]]:
    with open("/dev/full", "wb") as full:
        yield {"wrap": [], "stdout": full}


@contextmanager
def _pipe_closed_early() -> Iterator[dict[str, Any]]:
    read, write = os.pipe()
    os.close(read)  # the reader went away before a byte was written
    try:
        yield {"wrap": [], "stdout": write}
    finally:
        os.close(write)


STDOUTS = {"closed": _closed_stdout, "dev-full": _full_device, "pipe-closed-early": _pipe_closed_early}


@pytest.mark.parametrize("bundle", BUNDLES, ids=["one-probe", "audit", "dash-o-dash"])
@pytest.mark.parametrize("where", sorted(STDOUTS))
def test_a_bundle_stdout_cannot_take_is_one_message_and_73(tmp_path: Path, where: str, bundle: list[str]) -> None:
    if where == "dev-full" and not Path("/dev/full").exists():
        pytest.fail("/dev/full is missing on this machine")
    with STDOUTS[where]() as out:
        proc = subprocess.run([*out["wrap"], sys.executable, "-m", "orchestrator", "bundle", *bundle],
                              stdout=out["stdout"], stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                              cwd=str(tmp_path), timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT_DIR), "HOME": str(tmp_path)})
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("warning: ")]
    assert proc.returncode == 73, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("probe: cannot write the bundle to stdout: "), proc.stderr
    assert "give -o FILE" in lines[0] and "None" not in lines[0]
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_a_bundle_stdout_takes_is_written_whole(tmp_path: Path) -> None:
    """The same command to a stdout that takes it: the whole bundle, status 0."""
    with open(tmp_path / "b.py", "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "orchestrator", "bundle", "--probe", "host"], stdout=out,
                              stderr=subprocess.PIPE, text=True, cwd=str(tmp_path), timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT_DIR), "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b.py").read_bytes().rstrip().endswith(b")")
