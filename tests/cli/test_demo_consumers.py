"""The demo's run written for each consumer of issue 50 and read back by that consumer's validator:
CTRF by the CTRF schema, each node verdict by the (transcribed) NodeVerdict schema, the Prometheus
textfile by prometheus-client's parser with dcgm-exporter's labels on every per-GPU series."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.present.test_ctrf_node_verdicts import _validator

ROOT = Path(__file__).resolve().parents[2]
DCGM_BUS = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")  # dcgm-exporter's pci_bus_id


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo-consumers")
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(out / "state"))
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-o", str(out / "run"), "-q",
                           "--ctrf", str(out / "r.ctrf.json"), "--node-verdicts", str(out / "nv"),
                           "--prometheus", str(out / "p.prom")], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert proc.returncode in (1, 4, 5), proc.stderr  # the demo has faults and problem hosts
    return out


def test_the_demo_ctrf_validates_and_skips_what_it_could_not_judge(demo: Path):
    doc = json.loads((demo / "r.ctrf.json").read_text())
    _validator("ctrf.schema.json").validate(doc)
    s = doc["results"]["summary"]
    assert s["failed"] and s["skipped"] and s["passed"] and s["tests"] == s["passed"] + s["failed"] + s["skipped"]


def test_every_demo_node_verdict_validates_with_every_severity_seen(demo: Path):
    validator = _validator("node-verdict.schema.json")
    docs = [json.loads(p.read_text()) for p in sorted((demo / "nv").iterdir())]
    for d in docs:
        validator.validate(d)
        if d["health"] in ("unreachable", "incomplete"):
            assert d["overall_severity"] == "UNKNOWN"
    assert {d["overall_severity"] for d in docs} >= {"PASS", "WARNING", "CRITICAL", "UNKNOWN"}


def test_every_demo_gpu_series_carries_dcgm_exporters_labels(demo: Path):
    gpu = [s for fam in text_string_to_metric_families((demo / "p.prom").read_text())
           if fam.name.startswith("fleetprobe_gpu_") and fam.name != "fleetprobe_gpu_count" for s in fam.samples]
    assert gpu
    for s in gpu:
        assert DCGM_BUS.match(s.labels["pci_bus_id"]) and s.labels["UUID"].startswith("GPU-"), s.labels
        assert s.labels["modelName"] and s.labels["Hostname"] and s.labels["gpu"].isdigit()
