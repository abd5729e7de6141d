"""fleetprobe's Prometheus textfile joins a real dcgm-exporter scrape of the same GPUs (issue 50).

Both sides are read by prometheus-client's own parser.  The fleetprobe side describes the eight
H100s of the published scrape (tests/fixtures/dcgm_exporter/README.md) with their bus ids spelled
every way a probe or an import can spell them; each of its per-GPU and per-finding series must
find the exporter's series of the same GPU on (`UUID`, `pci_bus_id`), with equal `gpu`,
`modelName` and `Hostname`: what a PromQL `on(UUID, pci_bus_id)` join and a Grafana panel need.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.facts.normalize.gpus import dcgm_bus_id
from orchestrator.present.outputs.prometheus import render_prometheus
from tests.support.judged import judged
from tests.verdict.test_diff import finding, fleet

SCRAPE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm_exporter" / "h100-gpu-node-1.prom"


def _dcgm_gpus() -> dict[tuple[str, str], dict[str, str]]:
    """(UUID, pci_bus_id) -> the exporter's labels of that GPU, from every DCGM_FI_DEV_* series."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for fam in text_string_to_metric_families(SCRAPE.read_text()):
        assert fam.name.startswith("DCGM_FI_DEV_")
        for s in fam.samples:
            out.setdefault((s.labels["UUID"], s.labels["pci_bus_id"]), s.labels)
    return out


# How a bus id reaches fleetprobe: NVML's busId (8-hex-digit domain, upper case), sysfs and
# nvidia-smi's 4-digit lower case, lspci's short form without a domain, upper-case 4-digit, and
# padded with blanks.  Every spelling must come out as the exporter's.
SPELLINGS = {
    "nvml": lambda b: b,
    "sysfs": lambda b: b[4:].lower(),
    "lspci_short": lambda b: b[9:].lower(),
    "upper_4digit": lambda b: b[4:],
    "padded": lambda b: f"  {b[4:].lower()} ",
}


def _fleet(spell) -> dict:
    gpus = _dcgm_gpus()
    nvml = [{"index": int(lab["gpu"]), "uuid": uuid, "bus_id": spell(bus), "name": lab["modelName"],
             "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}}
            for (uuid, bus), lab in sorted(gpus.items(), key=lambda kv: int(kv[1]["gpu"]))]
    host = {"name": "gpu-node-1.cluster.example", "address": "10.0.172.246", "groups": ["all"], "outcome": "ok",
            "reason": None, "probes": {"nvml": {"outcome": "ok"}, "host": {"outcome": "ok"}},
            "facts": {"gpus": {"order": [g["bus_id"] for g in nvml], "list": nvml},
                      "host": {"hostname": "gpu-node-1"}},
            "fingerprint": None, "class": "A"}
    gpu5 = nvml[5]
    down = {**finding("nvlink.link.down", host["name"], "GPU5 link 3"),
            "devices": [{"kind": "nvlink", "gpu": 5, "bus_id": dcgm_bus_id(gpu5["bus_id"]).lower()[4:],
                         "uuid": gpu5["uuid"], "link": 3}]}
    doc = fleet("20260310T034111Z-dcgm", [host], [down])
    doc["run"].update(started="2026-03-10T03:40:00+00:00", finished="2026-03-10T03:41:11+00:00")
    return doc


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_gpu_series_joins_the_exporter_on_uuid_and_pci_bus_id(spelling: str):
    dcgm = _dcgm_gpus()
    assert len(dcgm) == 8
    families = {f.name: f.samples for f in text_string_to_metric_families(render_prometheus(judged(
        _fleet(SPELLINGS[spelling]))))}
    gpu_series = [s for name, samples in families.items() if name.startswith("fleetprobe_gpu_")
                  and name != "fleetprobe_gpu_count" for s in samples]
    assert gpu_series, "no per-GPU series to join"
    joined = set()
    for s in gpu_series:
        key = (s.labels.get("UUID"), s.labels.get("pci_bus_id"))
        assert key in dcgm, f"{s.name} {s.labels} finds no dcgm-exporter series"
        for label in ("gpu", "modelName", "Hostname"):
            assert s.labels[label] == dcgm[key][label], (label, s.labels, dcgm[key])
        joined.add(key)
    assert joined == set(dcgm)  # all eight GPUs, not one by luck
    assert not [n for n in families if n.startswith("DCGM_")]  # never the exporter's names


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_a_finding_series_joins_its_gpu_and_keeps_id_severity_and_action(spelling: str):
    dcgm = _dcgm_gpus()
    families = {f.name: f.samples for f in text_string_to_metric_families(render_prometheus(judged(
        _fleet(SPELLINGS[spelling]))))}
    (s,) = families["fleetprobe_finding"]
    key = (s.labels["UUID"], s.labels["pci_bus_id"])
    assert dcgm[key]["gpu"] == "5" and s.labels["gpu"] == "5"
    assert s.labels["modelName"] == "NVIDIA H100 80GB HBM3" and s.labels["Hostname"] == "gpu-node-1"
    assert (s.labels["id"], s.labels["severity"]) == ("nvlink.link.down", "fail") and s.labels["action"]


@pytest.mark.parametrize("text", ["", "x", "0000:zz:00.0", "0000:2a:00.8", "1:2:3:4", "00000000:2A:00"])
def test_what_is_not_a_bus_id_gives_no_pci_bus_id(text: str):
    assert dcgm_bus_id(text) is None
