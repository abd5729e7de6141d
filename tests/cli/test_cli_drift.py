"""Drift after a run: read the earlier fleet.json once; a baseline without one is a warning, not a crash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)


def test_drift_against_previous_and_a_partial_baseline(tmp_path: Path) -> None:
    results = str(tmp_path / "runs")
    first = probe("run", "-l", "dgx-h100-01,dgx-h100-04", "--results", results)
    assert first.returncode in (0, 1), first.stderr
    [first_dir] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    second = probe("run", "-l", "dgx-h100-01,dgx-h100-04", "--results", results, "--html", str(tmp_path / "r.html"))
    assert f"drift {first_dir.name} -> " in second.stdout and ": no changes" in second.stdout
    assert "Drift since" in (tmp_path / "r.html").read_text()
    (first_dir / "fleet.json").unlink()  # a crashed run: raw files, no fleet.json
    third = probe("run", "-l", "dgx-h100-01", "--results", results, "--baseline", first_dir.name)
    assert third.returncode in (0, 1), third.stderr
    assert "no drift shown" in third.stderr and "Traceback" not in third.stderr
