"""`probe run -i inventories/localhost.yml -p premigration` on a machine without NCCL: the nccl
probe runs for real through the local transport and reports `unsupported` with where it looked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orchestrator.store.compact import read_plain
from tests.support.skips import not_here

ROOT = Path(__file__).resolve().parents[2]


def _host_has_nccl() -> bool:
    # in a fresh interpreter: a test that loaded the fake libnccl.so.2 makes its soname resolve here
    proc = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libnccl.so.2')"],
                          capture_output=True, timeout=60)
    return proc.returncode == 0


def test_premigration_on_this_machine_reports_nccl_unsupported_with_the_reason(tmp_path: Path) -> None:
    if _host_has_nccl():
        not_here("NCCL is installed: the probe would measure it")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "CONDA_", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-i", "inventories/localhost.yml",
                           "-p", "premigration", "-o", str(tmp_path / "run"), "--format", "json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 70, proc.stderr[-2000:]
    fleet = read_plain(tmp_path / "run" / "fleet.json")
    [host] = fleet["hosts"]
    nccl = host["probes"]["nccl"]
    if "libnccl.so.2" not in nccl["reason"]:
        not_here(f"NCCL is installed where the probe looks: {nccl['reason']}")
    assert nccl["outcome"] == "unsupported"
    assert nccl["reason"].startswith("libnccl.so.2 not found")
    for place in ("the loader's path", "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "nvidia/nccl/lib/libnccl.so.2",
                  "torch/lib/libnccl.so.2", "/opt/conda/lib/libnccl.so.2"):
        assert place in nccl["reason"], place
    # not measured is never passed: no nccl section, so no nccl check judged anything
    assert "nccl" not in host["facts"]
    assert not [f for f in fleet["findings"] if f["id"].startswith("nccl.")]
