"""Usage errors stop `probe run` before any work (issue 16, item 9): exit 2, one line, no run
directory created, nothing probed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "orchestrator", "run", "--results", str(tmp_path / "runs"), *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def assert_refused(r: subprocess.CompletedProcess[str], tmp_path: Path, *words: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("probe: error:")]
    assert len(err) == 1, r.stderr
    for w in words:
        assert w in err[0], err[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*/run.json"))  # nothing ran
    return err[0]


@pytest.mark.parametrize("forks", ["0", "-3"])
def test_forks_below_one(tmp_path: Path, forks: str) -> None:
    assert_refused(run(tmp_path, "-f", forks), tmp_path, "forks", "at least 1", forks)


@pytest.mark.parametrize("timeout", ["0", "-1", "nan"])
def test_timeout_not_positive(tmp_path: Path, timeout: str) -> None:
    assert_refused(run(tmp_path, "-t", timeout), tmp_path, "timeout", "positive")


def test_connect_timeout_and_retries(tmp_path: Path) -> None:
    assert_refused(run(tmp_path, "--connect-timeout", "0"), tmp_path, "--connect-timeout")
    assert_refused(run(tmp_path, "--retries", "-1"), tmp_path, "--retries")


def test_missing_key_file_names_host_and_file(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    key = tmp_path / "no-such-key"
    inv.write_text(f"all:\n  hosts:\n    gpu01:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n"
                   f"      ansible_ssh_private_key_file: {key}\n    gpu02:\n      ansible_host: 127.0.0.1\n"
                   f"      ansible_port: 1\n      ansible_ssh_private_key_file: {key}\n")
    line = assert_refused(run(tmp_path, "-i", str(inv)), tmp_path, "gpu01", str(key), "does not exist")
    assert "1 more host" in line


def test_existing_key_file_is_accepted(tmp_path: Path) -> None:
    key = tmp_path / "id_test"
    key.write_text("not really a key\n")
    inv = tmp_path / "inv.yml"
    inv.write_text(f"all:\n  hosts:\n    gpu01:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n"
                   f"      ansible_ssh_private_key_file: {key}\n")
    r = run(tmp_path, "-i", str(inv), "--retries", "0", "--connect-timeout", "2", "-p", "quick")
    assert r.returncode != 2, r.stderr  # the run went ahead: the host is merely unreachable


def test_expect_typo_suggests_the_key(tmp_path: Path) -> None:
    assert_refused(run(tmp_path, "--expect", "gpu_cont=8"), tmp_path, "gpu_cont", "did you mean gpu_count?")
    assert_refused(run(tmp_path, "--expect", "nvlink_links_per_gp=18"), tmp_path, "did you mean nvlink_links_per_gpu?")
