"""p2p then nccl in one bundle on one host, through the real CLI and the local transport: both
probes pull in probes/_cuda.py, each runs in its own forked child, and the nccl probe's fd-1 trap
and NCCL chatter leave the bundle's frames intact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from orchestrator.simulate.fake_cuda import build_fake_cuda
from orchestrator.simulate.fake_nccl import build_fake_nccl
from orchestrator.store.compact import read_plain

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = """\
- name: p2p then nccl
  hosts: all
  probes: [p2p, nccl]
"""


def test_p2p_and_nccl_share_one_bundle_and_judge_cleanly(tmp_path: Path) -> None:
    machine = "dgx-h100--nccl-stdout"  # NCCL that also prints to stdout
    cuda = build_fake_cuda(machine, tmp_path / "libs")
    nccl = build_fake_nccl(machine, tmp_path / "libs")
    inv = {"all": {"hosts": {"gpu-box": {
        "ansible_connection": "local",
        "probe_args": {
            "p2p": {"lib": str(cuda), "nvml_lib": str(cuda), "size_mb": 2, "repeats": 1, "loops": 2,
                    "latency_loops": 4, "pairs": [[0, 1]]},
            "nccl": {"lib": str(cuda), "nvml_lib": str(cuda), "nccl_lib": str(nccl), "min_bytes": 1 << 20,
                     "max_bytes": 1 << 20, "iters": 2},
        }}}}}
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    report = tmp_path / "cuda.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(PYTHONPATH=str(ROOT), FAKE_CUDA_REPORT=str(report))
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-i", str(tmp_path / "inv.yml"), "-p",
                           str(tmp_path / "pb.yml"), "-o", str(tmp_path / "run"), "--format", "json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    fleet = read_plain(tmp_path / "run" / "fleet.json")
    [host] = fleet["hosts"]
    assert {p: host["probes"][p]["outcome"] for p in ("p2p", "nccl")} == {"p2p": "ok", "nccl": "ok"}
    nccl_facts = host["facts"]["nccl"]
    assert nccl_facts["transport"] == "NVLS" and nccl_facts["stdout_bytes"] > 0
    assert [r["wrong"] for r in nccl_facts["results"]] == [0]
    # 1 MiB is too small a message for the published floor: said, not passed
    [small] = [f for f in fleet["findings"] if f["id"].startswith("nccl.")]
    assert (small["id"], small["kind"]) == ("nccl.busbw.low", "unknown") and "not judged" in small["message"]
    acct = json.loads(report.read_text())  # written last by the nccl child
    assert (acct["device_allocs"], acct["streams"], acct["events"], acct["retained_contexts"]) == (0, 0, 0, 0)
