"""Per-device health as every surface shows it is the verdict's (issue 47 item 6): `--show gpus`,
`--show nvlink`, `--show nic` and the report's GPU table, NV# matrix, NVLink graph and PCIe tree,
on real `probe run`s of the bundled demo (dgx-h100-04: GPU2 has 16 of 18 NVLinks, a
`nvlink.link.down` fail; vm-a100-01: GPU0 in MIG mode, only an info finding; dgx-h100-18: mlx5_3
port 1 down; dgx-h100-19: mlx5_5 at a low rate).  The same report in Chromium:
tests/present/test_report_browser.py."""

from __future__ import annotations

import copy
import functools
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.present.report.model import read_levels
from orchestrator.present.terminal.sections import render_views
from orchestrator.verdict import rules
from orchestrator.verdict.device_health import device_health
from orchestrator.verdict.findings import Device, DeviceKind, Finding, Kind, Severity
from orchestrator.verdict.result import FleetResult
from tests.cli.test_cli_terminal import probe
from tests.present.test_report import host_section, parse, pictures
from tests.support.judged import report as render_report
from tests.verdict.test_verdict_demo import run_cli

HOSTS = "dgx-h100-04,vm-a100-01,dgx-h100-18,dgx-h100-19"


@functools.lru_cache(maxsize=1)
def shown() -> str:
    results = tempfile.mkdtemp(prefix="device-health-")
    r = probe("run", "--results", results, "-l", HOSTS, "--show", "gpus,nvlink,nic")
    assert r.returncode not in (0, 2, 70) and "Traceback" not in r.stderr, r.stderr  # the demo's faults
    return r.stdout


@functools.lru_cache(maxsize=1)
def demo_run() -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="device-health-run-")) / "run"
    _, fleet, err = run_cli(["-l", HOSTS], out)
    assert fleet is not None, err
    return fleet


def _block(host: str, view: str) -> list[str]:
    text = shown().split(f"== {host}: {view}\n", 1)[1]
    return text.split("\n== ", 1)[0].split("\n\nUnhealthy hosts", 1)[0].splitlines()


def _gpu_rows(host: str) -> dict[str, str]:
    return {ln.split()[0]: ln for ln in _block(host, "gpus") if re.match(r"\s*\d+\s+0000:", ln)}


def test_show_gpus_fails_the_gpu_with_links_down_and_only_it() -> None:
    rows = _gpu_rows("dgx-h100-04")
    assert len(rows) == 8
    assert re.search(r"16/18\s+failed: nvlink\.link\.down\s*$", rows["2"])
    assert all(re.search(r"18/18\s+ok\s*$", rows[i]) for i in "0134567")


def test_show_gpus_keeps_a_gpu_with_only_an_info_finding_ok() -> None:
    rows = _gpu_rows("vm-a100-01")
    assert "on (2)" in rows["0"]  # MIG: gpu.mig.enabled, an info finding on this GPU
    assert demo_has("vm-a100-01", "gpu.mig.enabled", "info")
    assert rows["0"].rstrip().endswith(" ok") and rows["1"].rstrip().endswith(" ok")


def demo_has(host: str, fid: str, severity: str) -> bool:
    return any(f["host"] == host and f["id"] == fid and f["severity"] == severity for f in demo_run()["findings"])


def test_show_nvlink_marks_the_gpu_and_every_bond_of_it() -> None:
    lines = _block("dgx-h100-04", "nvlink")
    gpu2 = next(ln for ln in lines if ln.startswith("GPU2 "))
    assert gpu2.split()[:7] == ["GPU2", "0000:3a:00.0", "16/18", "4.0", "0", "16", "6,13"]
    assert gpu2.endswith("failed: nvlink.link.down")
    assert all(ln.rstrip().endswith(" ok") for ln in lines if re.match(r"GPU[013-7] +0000:", ln))
    matrix = {ln.split()[0]: ln.split()[1:] for ln in lines if re.match(r"GPU\d  +(X|NV)", ln)}
    assert matrix["GPU2"] == ["NV16!"] * 2 + ["X"] + ["NV16!"] * 5
    assert [row[2] for name, row in matrix.items() if name != "GPU2"] == ["NV16!"] * 7
    assert not any(c == "NV18!" for row in matrix.values() for c in row)  # the sound bonds stay sound
    assert "NV#!: a bond of a GPU whose NVLinks the verdict faulted (nvlink.link.down)" in lines
    assert "GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-3c6359e8-42c6-eaba-60f0-14aa1fb139eb)  [failed: nvlink.link.down]" \
        in lines
    assert sum("[failed" in ln for ln in lines) == 1


def test_show_nic_names_the_port_the_verdict_faulted() -> None:
    down = [ln for ln in _block("dgx-h100-18", "nic") if ln.startswith("mlx5_")]
    assert [ln.split()[0] for ln in down if ln.endswith("failed: nic.port.down")] == ["mlx5_3"]
    assert sum(ln.endswith(" ok") for ln in down) == len(down) - 1
    slow = [ln for ln in _block("dgx-h100-19", "nic") if ln.startswith("mlx5_")]
    assert [ln.split()[0] for ln in slow if ln.endswith("degraded: nic.port.rate_low")] == ["mlx5_5"]


def test_a_host_whose_nvml_probe_did_not_finish_shows_its_gpus_not_judged() -> None:
    doc = copy.deepcopy(demo_run())
    rec = next(h for h in doc["hosts"] if h["name"] == "vm-a100-01")
    for outcome in ("timeout", "failed", "skipped"):
        rec["probes"]["nvml"] = {"outcome": outcome, "reason": "stopped"}
        fleet = FleetResult.from_document(doc)
        text = next(t for t in render_views(fleet, ["gpus"]) if t.startswith("== vm-a100-01: gpus"))
        rows = [ln for ln in text.splitlines() if "0000:" in ln]
        want = "nvml not run" if outcome == "skipped" else f"nvml {outcome}"
        assert len(rows) == 2 and all(f"not judged ({want})" in ln for ln in rows), text
        assert not any(ln.rstrip().endswith(" ok") for ln in rows)


def _host(html: str, name: str) -> Any:
    return host_section(parse(html), name)


def test_the_report_draws_nv16_of_18_degraded_and_the_gpu_failed() -> None:
    html = render_report(demo_run())
    sec = _host(html, "dgx-h100-04")
    gpus = next(t for t in sec.find_all("table") if "gpus" in t.classes)
    cells = [td for td in gpus.find_all("td") if any(c.startswith("dev-") for c in td.classes)]
    assert [(set(td.classes), td.text()) for td in cells if "dev-ok" not in td.classes] == \
        [({"dev-failed"}, "failed: nvlink.link.down")]
    assert sum("dev-ok" in td.classes for td in cells) == 7
    levels = next(t for t in sec.find_all("table") if "levels" in t.classes)
    nv = [td for td in levels.find_all("td") if td.text().startswith("NV")]
    marked = [td for td in nv if "bond-degraded" in td.classes]
    assert len(marked) == 14 and {td.text() for td in marked} == {"NV16!"}
    assert all(td.attrs.get("title") == "degraded: nvlink.link.down" for td in marked)
    assert {td.text() for td in nv if td not in marked} == {"NV18"}
    assert not any("bond-failed" in td.classes for td in nv)
    graph = pictures(sec, "nvlink")[0]
    faulted = [g for g in graph.find_all("g") if "node-failed" in g.classes]
    assert len(faulted) == 1 and "GPU2" in faulted[0].find_all("title")[0].text()


def test_the_report_pcie_tree_marks_the_nic_with_its_port_down() -> None:
    sec = _host(render_report(demo_run()), "dgx-h100-18")
    tree = pictures(sec, "pcie")[0]
    failed = [g for g in tree.find_all("g") if "dev-failed" in g.classes]
    assert [g.attrs.get("data-bdf") for g in failed] == ["0000:5e:00.0"]
    assert "failed: nic.port.down" in failed[0].find_all("title")[0].text()


# A text import's `topo -m` matrix has names and no bus ids: a GPU is met by its NVML index (GPUn),
# and a name of any other form meets no finding (it is not guessed into a GPU).
@pytest.mark.parametrize("name, marked", [("GPU1", True), ("GPU01", False), ("gpu1", False), ("GPU1x", False),
                                          ("GPU-1", False), ("GPU", False), ("", False), (None, False)])
def test_the_level_matrix_meets_findings_by_nvml_index_without_bus_ids(name: str | None, marked: bool) -> None:
    facts: Any = {"topology": {"devices": [{"name": "GPU0", "kind": "gpu"}, {"name": name, "kind": "gpu"},
                                           {"name": "NIC0", "kind": "nic"}],
                               "matrix": [["X", "NV4", "PIX"], ["NV4", "X", "SYS"], ["PIX", "SYS", "X"]]}}
    down = Finding(rules.nvlink.LINK_DOWN.id, Severity.FAIL, Kind.FAULT, "h", "GPU1", "3 of 4 NVLinks active",
                   devices=(Device(DeviceKind.GPU, gpu=1),))
    levels = read_levels(facts, device_health([down], {"nvml": "ok", "nvlink": "ok", "pcie": "ok"}))
    assert levels is not None
    want = "degraded: nvlink.link.down" if marked else ""
    assert levels.bonds[0][1] == levels.bonds[1][0] == want
    assert levels.bonds[0][2] == levels.bonds[1][2] == levels.bonds[0][0] == ""  # PIX, SYS, X: no bond
