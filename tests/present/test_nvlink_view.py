"""`--show nvlink`: links per GPU, NV# per pair, NVSwitches, and each link as `nvidia-smi nvlink -s` says it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orchestrator.facts.textparse import import_texts
from orchestrator.present.terminal.nvlink import render_nvlink
from tests.verdict.test_verdict_demo import recorded_facts

ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / "tests" / "fixtures" / "text"


def test_nvswitch_box_with_two_links_down() -> None:
    text = render_nvlink(recorded_facts("dgx-h100-04")["nvlink"])
    assert text.startswith("NVLink: 142/144 links up on 8 GPU(s), 4 NVSwitch(es)")
    row = next(line for line in text.splitlines() if line.startswith("GPU2 "))
    assert row.split()[:7] == ["GPU2", "0000:3a:00.0", "16/18", "4.0", "0", "16", "6,13"]
    assert row.endswith("not judged (no verdict)")  # facts alone: the health column is the verdict's
    # the fabric gives every pair the smaller switch-link count of its two GPUs
    assert "GPU2  NV16  NV16  X     NV16" in text
    assert "  0000:06:00.0: 31/32 links up from GPU0,GPU1,GPU2,GPU3,GPU4,GPU5,GPU6,GPU7" in text
    assert "\t Link 6: <inactive> -> NVSwitch 0000:06:00.0" in text
    assert "\t Link 0: active -> NVSwitch 0000:05:00.0" in text
    assert "None" not in text


def test_direct_links_name_the_peer_gpu() -> None:
    text = render_nvlink(recorded_facts("dgx1-v100-01")["nvlink"])
    assert "NVSwitch" not in text.split("\n\n")[0]
    assert "GPU0  X     NV1   NV1   NV2   NV2   -     -     -" in text
    assert "\t Link 2: active -> GPU3 0000:0b:00.0" in text


def test_no_nvlink_and_lost_gpu() -> None:
    text = render_nvlink(recorded_facts("rtx4090-01")["nvlink"])
    assert text == "NVLink: 0/0 links up on 8 GPU(s)\nno NVLink on these GPUs (NVML: not supported)"
    lost = render_nvlink(recorded_facts("dgx-a100-06")["nvlink"])
    row = next(line for line in lost.splitlines() if line.startswith("GPU5 "))
    assert "? (lost)" in row
    assert "GPU 5: N/A (UUID: N/A)\n\t links unknown (lost)" in lost
    assert render_nvlink(None) == "no NVLink data"


def test_text_import_shows_the_speeds_nvidia_smi_printed() -> None:
    src = TEXT / "nvlink_s_no_header_two_inactive.txt"
    facts = import_texts([(src.name, src.read_bytes())]).facts
    text = render_nvlink(facts["nvlink"])
    assert "\t Link 0: 26.562 GB/s" in text
    assert "\t Link 1: <inactive>" in text
    assert "None" not in text


def test_show_nvlink_on_the_cli_no_longer_crashes(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cp = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-l", "dgx-h100-04", "--show", "nvlink",
                         "--probe", "nvlink", "--results", str(tmp_path / "runs"), "-o", str(tmp_path / "run")],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert cp.returncode in (0, 1, 4, 5), cp.stderr
    assert "== dgx-h100-04: nvlink\nNVLink: 142/144 links up" in cp.stdout
