"""Terminal views of GPU facts: the per-host table and the topo -m matrix."""

from __future__ import annotations

import copy

from orchestrator.facts.normalize import topology
from orchestrator.present.terminal.gpus import render_gpu_table, view_gpus
from orchestrator.present.terminal.topo import render_topo
from tests.engine.test_nvml_helpers import host_facts, needs_gcc
from tests.support.evidence import evidence

pytestmark = needs_gcc


def test_gpu_table_lists_every_gpu_and_marks_the_lost_one():
    f = host_facts("dgx-a100--gpu-lost")
    text = render_gpu_table("gpu07", f["gpus"], f["nvlink"])
    lines = text.splitlines()
    assert lines[0].startswith("gpu07: 8 GPU(s), driver 535.104.05")
    rows = [ln for ln in lines if "0000:" in ln]
    assert len(rows) == 8
    lost = [ln for ln in rows if "0000:90:00.0" in ln]
    assert lost and lost[0].rstrip().endswith("LOST")
    assert all("12/12" in ln for ln in rows if ln not in lost)


def test_gpu_table_strips_terminal_escapes_from_host_strings():
    f = copy.deepcopy(host_facts("consumer-8x4090"))
    f["gpus"]["list"][0]["name"] = "RTX\x1b[2J\x1b]0;pwned\x07 4090"
    text = render_gpu_table("h\x1b[31mred", f["gpus"], f["nvlink"])
    assert "\x1b" not in text and "\x07" not in text
    assert "30%/30%" in text and text.count("0000:") == 8


def test_topo_view_prints_the_dgx1_matrix_as_published():
    f = host_facts("dgx1-v100")
    text = render_topo(topology.merge(f["gpus"], f["nvlink"], None), legend=True)
    mine = [ln.split()[1:9] for ln in text.splitlines() if ln.startswith("GPU") and not ln.startswith("GPU0  GPU1")]
    published = evidence("topo_dgx1_v100_4nic_legacy_legend_01.txt").read_text().splitlines()
    theirs = [ln.split("\t")[1:9] for ln in published if ln.startswith("GPU") and ln[3].isdigit()]
    assert mine == [[c.strip() for c in row] for row in theirs]
    assert "0-19,40-59" in text and "NV#  = Connection traversing a bonded set of # NVLinks" in text


def test_topo_view_unknown_cells_and_no_data():
    assert render_topo(None) == "no topology data"
    f = host_facts("dgx-a100--gpu-lost")
    text = render_topo(topology.merge(f["gpus"], None, None), legend=False)
    row0 = next(ln for ln in text.splitlines() if ln.startswith("GPU0 "))
    assert row0.split()[6] == "?"  # GPU0-GPU5: NVML lost, no PCIe facts: unknown, not guessed


def test_section_renderers_take_one_facts_section():
    f = host_facts("ws-4xa6000")
    assert view_gpus(f["gpus"]).startswith("GPUs: 4 GPU(s), driver 535.129.03")
    merged = topology.merge_facts({"gpus": f["gpus"], "nvlink": f["nvlink"]})
    assert merged is not None and merged["matrix"][0][1] == "NV4"
    assert topology.merge_facts({"host": {}}) is None
    assert "NV4" in render_topo(merged)


def test_hosts_table_names_an_unknown_gpu_model_without_none() -> None:
    """dgx-a100-06 of the demo: NVML could not name one GPU ("7x A100, 1x None" before)."""
    from orchestrator.present.terminal.hosts import hosts_table
    from tests.support.judged import judged

    gpus = [{"name": "NVIDIA A100-SXM4-80GB"}] * 7 + [{"name": None}]
    rec = {"name": "h", "outcome": "ok", "reason": "", "facts": {"gpus": {"list": gpus}}, "probes": {},
           "class": None, "duration_s": 0.1}
    table = hosts_table(judged({"hosts": [rec]}))
    assert "None" not in table and "7x NVIDIA A100-SXM4-80GB, 1x unknown model" in table
