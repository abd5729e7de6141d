"""Machine outputs of a real `probe run` read by the tools that consume them (issue 16, item 7):
Prometheus by prometheus-client's parser, the CSVs by the csv module, the Ansible inventory by
the real `ansible-inventory` from the test extra."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.store.compact import read_plain
from tests.support.ansible import ANSIBLE_INVENTORY, SKIP_REASON, ansible_list

ROOT = Path(__file__).resolve().parents[2]
HOSTS = "dgx-h100-04,dgx-h100-06,offline-01"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("outputs")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-q", "-p", "premigration", "-l", HOSTS,
                        "-o", str(d / "run"), "--prometheus", str(d / "fleet.prom"), "--hosts-csv", str(d / "hosts.csv"),
                        "--findings-csv", str(d / "findings.csv"), "--ansible-inventory", str(d / "inventory.yml")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
    assert "Traceback" not in r.stderr and r.returncode not in (2, 70), r.stderr
    return d, read_plain(d / "run" / "fleet.json")


def _samples(path: Path) -> dict[str, list]:
    return {fam.name: fam.samples for fam in text_string_to_metric_families(path.read_text())}


def test_prometheus_per_finding_series(outputs: tuple[Path, dict]) -> None:
    d, fleet = outputs
    m = _samples(d / "fleet.prom")
    series = m["fleetprobe_finding"]
    down = [s for s in series if s.labels["id"] == "nvlink.link.down"]
    assert [(s.labels["host"], s.labels["severity"], s.labels["kind"], s.value) for s in down] == \
        [("dgx-h100-04", "fail", "fault", 1.0)]
    assert down[0].labels["subject"] == "GPU2 (0000:3a:00.0)"
    # one series per distinct label set; their values add up to every finding of the run
    keys = [tuple(sorted(s.labels.items())) for s in series]
    assert len(keys) == len(set(keys))
    assert sum(s.value for s in series) == len(fleet["findings"])


def test_prometheus_host_outcome_state_set(outputs: tuple[Path, dict]) -> None:
    m = _samples(outputs[0] / "fleet.prom")
    state = {(s.labels["host"], s.labels["outcome"]): s.value for s in m["fleetprobe_host_outcome"]}
    assert state[("offline-01", "unreachable")] == 1 and state[("offline-01", "ok")] == 0
    # every host: exactly one outcome set, the one fleet.json records (premigration on the demo: a
    # host without an nccl recording is "unsupported" for that probe, a state that is not a problem)
    for rec in outputs[1]["hosts"]:
        assert state[(rec["name"], rec["outcome"])] == 1
        assert sum(v for (h, _), v in state.items() if h == rec["name"]) == 1


def test_prometheus_per_gpu_gauges(outputs: tuple[Path, dict]) -> None:
    m = _samples(outputs[0] / "fleet.prom")

    def gpu(metric: str, host: str, index: str) -> float:
        hits = [s.value for s in m[metric] if s.labels["host"] == host and s.labels["gpu"] == index]
        assert len(hits) == 1, (metric, host, index, hits)
        return hits[0]

    assert gpu("fleetprobe_gpu_nvlink_links_up", "dgx-h100-04", "2") == 16
    assert gpu("fleetprobe_gpu_nvlink_links", "dgx-h100-04", "2") == 18
    assert gpu("fleetprobe_gpu_nvlink_links_up", "dgx-h100-04", "0") == 18
    assert gpu("fleetprobe_gpu_pcie_link_generation", "dgx-h100-06", "2") == 1
    assert gpu("fleetprobe_gpu_pcie_link_width_lanes", "dgx-h100-06", "2") == 8
    assert gpu("fleetprobe_gpu_pcie_link_max_generation", "dgx-h100-06", "2") == 5
    assert gpu("fleetprobe_gpu_pcie_link_max_width_lanes", "dgx-h100-06", "2") == 16
    p2p = gpu("fleetprobe_gpu_p2p_min_bandwidth_bytes_per_second", "dgx-h100-04", "2")
    assert 1e9 < p2p < 1e12  # bytes per second, not GB/s
    labels = next(s.labels for s in m["fleetprobe_gpu_nvlink_links_up"] if s.labels["host"] == "dgx-h100-04")
    assert set(labels) == {"host", "gpu", "bus_id", "uuid"} | {"UUID", "pci_bus_id", "Hostname", "modelName"}
    assert labels["uuid"].startswith("GPU-") and labels["UUID"] == labels["uuid"]  # dcgm-exporter's join labels
    assert labels["pci_bus_id"].endswith(labels["bus_id"][-7:].upper()) and len(labels["pci_bus_id"]) == 16
    assert not [s for s in m["fleetprobe_gpu_nvlink_links_up"] if s.labels["host"] == "offline-01"]


def test_prometheus_names_follow_the_conventions(outputs: tuple[Path, dict]) -> None:
    m = _samples(outputs[0] / "fleet.prom")
    assert "fleetprobe_run_timestamp_seconds" in m
    for name in m:
        assert re.fullmatch(r"fleetprobe_[a-z][a-z0-9_]*", name), name
        assert "gbps" not in name and not name.endswith("_total"), name  # base units; gauges only


def test_hosts_csv_has_the_identity_and_findings_csv_every_finding(outputs: tuple[Path, dict]) -> None:
    d, fleet = outputs
    rows = {r["host"]: r for r in csv.DictReader((d / "hosts.csv").open())}
    h = rows["dgx-h100-04"]
    assert h["board_vendor"] == "NVIDIA" and h["board_model"] == "DGXH100"
    assert h["bios_version"] and h["driver"] == "550.54.15"
    assert h["gpu_model"] == "NVIDIA H100 80GB HBM3" and h["gpus"] == "8"
    assert h["class"] == next(x["class"] for x in fleet["hosts"] if x["name"] == "dgx-h100-04")
    assert rows["offline-01"]["outcome"] == "unreachable" and rows["offline-01"]["board_model"] == ""
    found = list(csv.DictReader((d / "findings.csv").open()))
    assert len(found) == len(fleet["findings"]) and {"id", "host", "severity", "subject"} <= set(found[0])


@pytest.mark.skipif(not ANSIBLE_INVENTORY, reason=SKIP_REASON)
def test_ansible_inventory_file_loads_in_real_ansible(outputs: tuple[Path, dict]) -> None:
    d, _ = outputs
    got = ansible_list(d / "inventory.yml")
    assert got["finding_nvlink_link_down"]["hosts"] == ["dgx-h100-04"]
    assert got["outcome_unreachable"]["hosts"] == ["offline-01"]
    assert got["_meta"]["hostvars"]["dgx-h100-04"]["fleetprobe_gpu_count"] == 8
