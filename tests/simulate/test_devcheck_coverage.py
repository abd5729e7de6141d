"""tools/devcheck/run_all.sh covers every GPU-touching probe, parses, and its per-probe check runs
anywhere (here: no NVIDIA driver, no nvidia-smi) without a crash.  The script itself needs a GPU
machine; these are the checks that do not."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.engine.payload import get, probes_dir

ROOT = Path(__file__).resolve().parents[2]
DEVCHECK = ROOT / "tools" / "devcheck"
# Probes that read what a GPU fault leaves behind without a GPU library: the kernel log (Xid),
# the NICs beside the GPUs, the GPUs' PCIe links.
GPU_SIDE = {"kmsg", "nic", "pcie"}


def gpu_touching() -> set[str]:
    """Every shipped probe that loads a GPU library (NVML or CUDA), plus GPU_SIDE."""
    names = {p.stem for p in probes_dir().glob("*.py") if not p.stem.startswith("_")}
    return {n for n in names if {"_nvml", "_cuda"} & set(get(n).requires)} | GPU_SIDE


def checked_probes() -> set[str]:
    tree = ast.parse((DEVCHECK / "probes_check.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "PROBES":
            assert isinstance(node.value, ast.Dict)
            return {ast.literal_eval(k) for k in node.value.keys if k is not None}
    raise AssertionError("tools/devcheck/probes_check.py has no PROBES table")


def test_the_script_parses() -> None:
    bash = shutil.which("bash")
    assert bash
    proc = subprocess.run([bash, "-n", str(DEVCHECK / "run_all.sh")], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def test_every_gpu_touching_probe_is_checked() -> None:
    assert {"nvml", "nvlink", "p2p", "nccl", "fabric"} <= gpu_touching()  # the derivation finds them
    assert sorted(gpu_touching() - checked_probes()) == []


@pytest.mark.parametrize("step", ["tools/devcheck/nvml_check.py", "tools/devcheck/p2p_check.py",
                                  "tools/devcheck/probes_check.py", "tests/engine/test_driver_wedged.py",
                                  "-p premigration", "-p fabric"])
def test_run_all_runs_each_step(step: str) -> None:
    """nvml vs nvidia-smi/nvidia-ml-py, p2p vs PyTorch, every probe alone, the wedged-driver
    watchdog, the controller on this machine, the fabric probe over loopback."""
    lines = [line for line in (DEVCHECK / "run_all.sh").read_text().splitlines() if not line.lstrip().startswith("#")]
    assert any(step in line for line in lines), step


def test_the_steps_fit_in_eight_minutes() -> None:
    text = (DEVCHECK / "run_all.sh").read_text()
    limits = [int(n) for n in re.findall(r"^\s*(?:step \w+|timeout) (\d+) ", text, re.MULTILINE)]
    assert len(limits) >= 9 and sum(limits) <= 480, limits


def test_probes_check_answers_without_a_gpu(tmp_path: Path) -> None:
    env = dict(os.environ, OUT=str(tmp_path), PATH="/usr/bin:/bin", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(DEVCHECK / "probes_check.py"), "--budget", "100"],
                          capture_output=True, text=True, timeout=150, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "probes_check.json").read_text())
    assert set(report) == checked_probes()
    for name, entry in report.items():
        assert entry["envelope"] is not None and entry["envelope"]["status"] in ("ok", "unsupported"), name
        assert "Traceback" not in proc.stderr
