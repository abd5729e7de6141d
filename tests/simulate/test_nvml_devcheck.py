"""The device-check script must run anywhere: no NVIDIA library, no nvidia-smi, no pynvml."""

from __future__ import annotations

import json
import os
import subprocess

from tests.engine.test_nvml_helpers import PY, ROOT, fake_lib, needs_gcc

SCRIPT = ROOT / "tools" / "devcheck" / "nvml_check.py"


def _run(tmp_path, *args):
    env = dict(os.environ, OUT=str(tmp_path), PATH="/usr/bin:/bin")  # no nvidia-smi on this PATH
    proc = subprocess.run([PY, str(SCRIPT), "--runs", "1", *args], capture_output=True, text=True,
                          timeout=60, env=env)
    return proc, json.loads((tmp_path / "nvml_check.json").read_text())


def test_without_library_reports_unsupported_and_exits_cleanly(tmp_path):
    proc, result = _run(tmp_path, "--lib", str(tmp_path / "libnvidia-ml.so.1"))
    assert proc.returncode == 0, proc.stderr
    assert "no NVIDIA library / driver usable" in proc.stdout
    assert result["status"] == "unsupported" and "cannot load" in result["reason"]


@needs_gcc
def test_with_fake_library_skips_missing_references_and_runs_checks(tmp_path):
    proc, result = _run(tmp_path, "--lib", str(fake_lib("dgx-h100--links-down")))
    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "ok" and result["probes"]["nvml"]["duration_median_s"] is not None
    assert "error" in result["nvidia_smi"]  # not installed here: skipped, not crashed
    assert [f["id"] for f in result["findings"]] == ["nvlink.link.down"]
