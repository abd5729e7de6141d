"""Prometheus textfile-collector output (node_exporter --collector.textfile.directory).

Names follow the Prometheus conventions: one `fleetprobe_` prefix, base units in the name
(`_seconds`, `_bytes_per_second`, `_lanes`), gauges only.  Per host: its health as a state set
(one series per health, 1 for the host's own: what to alert on), its faults by severity, its
transport outcome as a state set, reachability, GPU count, NVLink links up, the slowest P2P pair,
findings by severity and each probe's outcome.  Per finding: one series with
host, id, severity, kind, subject, action (verdict/actions.py) and the finding's devices
(`DEVICE_LABELS`: gpu, bus_id and uuid as the GPU series name them) (value: how many findings
share those labels), so an alert can name `nvlink.link.down` itself, route on the action and join
the GPU's series.  Per GPU (labels host, gpu, bus_id, uuid): NVLink links up and
total, its slowest P2P pair, PCIe generation and width, current and maximum.

Every per-GPU and per-finding series also carries dcgm-exporter's own labels, spelled as the
exporter prints them (`DCGM_LABELS`: `gpu`, `UUID`, `pci_bus_id` in NVML's 8-hex-digit-domain
upper-case form, `modelName`, `Hostname`), so a PromQL `on(UUID, pci_bus_id)` join or a Grafana
panel puts fleetprobe's verdict beside `DCGM_FI_DEV_*` of the same GPU with no relabelling
(docs/cron.md).  The names stay `fleetprobe_*`: never a `DCGM_FI_*` name.  Per fault of the
fabric (a rail, a path: verdict/fabric_faults.py): one series with id, severity, kind, subject and
action, its value the hosts it touches; those faults are in no host's series (no host is failed
for them: docs/fabric.md).

A value the run did not measure (no nvml, no p2p) is left out rather than written as 0, so
`absent()` alerts and dashboards do not read "0 GPUs" into a probe that did not run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.engine.outcomes import Outcome
from orchestrator.facts import read as F
from orchestrator.facts.normalize.gpus import dcgm_bus_id
from orchestrator.facts.textsafe import LINE_BREAKS, display_safe
from orchestrator.present.outputs import write_atomic
from orchestrator.verdict.fabric_faults import host_findings
from orchestrator.verdict.findings import SEVERITY_ORDER, Device
from orchestrator.verdict.health import HEALTH_ORDER
from orchestrator.verdict.result import FleetResult

GB = 1e9  # facts carry GB/s (1e9 B/s); Prometheus wants the base unit, bytes per second

# name -> help text; the order here is the order in the file
METRICS = {
    "fleetprobe_run_timestamp_seconds": "Unix time the fleetprobe run that produced these values finished.",
    "fleetprobe_host_health": "1 for the host's health in this run (healthy, degraded, failed, unreachable, "
                              "incomplete), 0 for every other.",
    "fleetprobe_host_faults": "Faults on the host by severity: root findings, each with what followed from it.",
    "fleetprobe_host_reachable": "1 if the host answered over its transport in this run, else 0.",
    "fleetprobe_host_outcome": "1 for the host's outcome in this run, 0 for every other outcome.",
    "fleetprobe_gpu_count": "GPUs found on the host (NVML, else the PCIe bus).",
    "fleetprobe_nvlink_links_up": "NVLink links in the active state, summed over the host's GPUs.",
    "fleetprobe_p2p_min_bandwidth_bytes_per_second": "Slowest measured GPU-to-GPU copy bandwidth on the host.",
    "fleetprobe_findings": "Findings on the host by severity.",
    "fleetprobe_finding": "Findings with these labels (host, id, severity, kind, subject, action and the devices: "
                          "device_kind, gpu, bus_id, uuid, peer_gpu, peer_bus_id, nic, port, link, rail, "
                          "peer_host, and dcgm-exporter's UUID, pci_bus_id, modelName, Hostname); usually 1.",
    "fleetprobe_fabric_fault": "Faults of the fabric (a rail, a path between two ports), not of a host, with "
                               "these labels (id, severity, kind, subject, action); the value is how many hosts "
                               "the fault touches.",
    "fleetprobe_probe_outcome": "1 for the outcome each probe had on the host in this run.",
    "fleetprobe_gpu_nvlink_links_up": "NVLink links of the GPU in the active state.",
    "fleetprobe_gpu_nvlink_links": "NVLink links the GPU reports.",
    "fleetprobe_gpu_p2p_min_bandwidth_bytes_per_second": "Slowest measured one-way copy-engine bandwidth "
                                                         "between this GPU and a peer.",
    "fleetprobe_gpu_pcie_link_generation": "PCIe generation the GPU's link trained at.",
    "fleetprobe_gpu_pcie_link_max_generation": "Highest PCIe generation the GPU's link supports.",
    "fleetprobe_gpu_pcie_link_width_lanes": "PCIe lanes the GPU's link trained at.",
    "fleetprobe_gpu_pcie_link_max_width_lanes": "PCIe lanes the GPU's link supports.",
}

_GPU_GAUGES = (
    ("fleetprobe_gpu_nvlink_links_up", "nvlink_links_up", 1.0),
    ("fleetprobe_gpu_nvlink_links", "nvlink_links", 1.0),
    ("fleetprobe_gpu_p2p_min_bandwidth_bytes_per_second", "p2p_min_gbps", GB),
    ("fleetprobe_gpu_pcie_link_generation", "pcie_gen", 1.0),
    ("fleetprobe_gpu_pcie_link_max_generation", "pcie_gen_max", 1.0),
    ("fleetprobe_gpu_pcie_link_width_lanes", "pcie_width", 1.0),
    ("fleetprobe_gpu_pcie_link_max_width_lanes", "pcie_width_max", 1.0),
)


def escape_label(value: Any) -> str:
    """Label value escaping of the text exposition format: backslash, double quote, newline."""
    text = LINE_BREAKS.sub("\n", display_safe(value))  # a CR or U+2028 must not break the line either
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


def _timestamp(fleet: FleetResult) -> float | None:
    for v in (fleet.run.finished, fleet.run.started):
        if v:
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def _samples(fleet: FleetResult) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {m: [] for m in METRICS}
    ts = _timestamp(fleet)
    outcomes = [o.value for o in Outcome]
    for h in fleet.hosts:
        name = h.name
        host = {"host": name}
        if ts is not None:
            out["fleetprobe_run_timestamp_seconds"].append((host, ts))
        for state in HEALTH_ORDER:
            out["fleetprobe_host_health"].append(({"host": name, "health": state},
                                                  1.0 if state == h.health.state.value else 0.0))
        for sev in SEVERITY_ORDER:
            out["fleetprobe_host_faults"].append(({"host": name, "severity": sev}, float(h.health.faults.get(sev, 0))))
        out["fleetprobe_host_reachable"].append((host, 1.0 if h.reachable else 0.0))
        mine = h.outcome
        for o in (outcomes if mine in outcomes else [*outcomes, mine]):
            out["fleetprobe_host_outcome"].append(({"host": name, "outcome": o}, 1.0 if o == mine else 0.0))
        facts = h.facts
        p2p_min = F.p2p_min_gbps(facts)
        for metric, value in (("fleetprobe_gpu_count", F.gpu_count(facts)),
                              ("fleetprobe_nvlink_links_up", F.nvlink_links_up(facts)),
                              ("fleetprobe_p2p_min_bandwidth_bytes_per_second",
                               None if p2p_min is None else p2p_min * GB)):
            if value is not None:
                out[metric].append((host, float(value)))
        mine_findings = host_findings(fleet.findings_of(name))  # the fabric's are its own series
        gauges = F.gpu_gauges(facts)
        hostname = _hostname(name, facts)
        by_bus = {dcgm_bus_id(g.bus_id): g for g in gauges}  # however each side spelled it
        for sev in SEVERITY_ORDER:
            n = sum(1 for f in mine_findings if f.severity.value == sev)
            out["fleetprobe_findings"].append(({"host": name, "severity": sev}, float(n)))
        per_finding: dict[tuple[tuple[str, str], ...], int] = {}
        for f in mine_findings:
            key = tuple({"host": name, "id": f.id, "severity": f.severity.value, "kind": f.kind.value,
                         "subject": f.subject, "action": f.action.value, **device_labels(f.devices),
                         **finding_dcgm_labels(f.devices, by_bus, hostname)}.items())
            per_finding[key] = per_finding.get(key, 0) + 1  # h2d and d2h of one GPU share id and subject
        for key, n in per_finding.items():
            out["fleetprobe_finding"].append((dict(key), float(n)))
        for probe, run in sorted(h.probes.items()):
            out["fleetprobe_probe_outcome"].append(({"host": name, "probe": probe, "outcome": run.outcome}, 1.0))
        for g in gauges:
            labels = {"host": name, "gpu": str(g.index), "bus_id": g.bus_id or "", "uuid": g.uuid or "",
                      **dcgm_labels(g, hostname)}
            for metric, attr, scale in _GPU_GAUGES:
                v = getattr(g, attr)
                if v is not None:
                    out[metric].append((labels, float(v) * scale))
    _fabric_samples(fleet, out)
    return out


def _fabric_samples(fleet: FleetResult, out: dict[str, list[tuple[dict[str, str], float]]]) -> None:
    for f in fleet.fabric_faults:
        labels = {"id": f.id, "severity": f.severity.value, "kind": f.kind.value, "subject": f.subject,
                  "action": f.action.value}
        out["fleetprobe_fabric_fault"].append((labels, float(len(f.hosts))))


# The device labels of a finding series: the same names as the GPU gauges' (gpu, bus_id, uuid), so
# a finding joins the GPU's series; a finding of several devices lists each label's values, comma-
# separated, in its devices' order; a host-wide finding has them empty.
DEVICE_LABELS = ("device_kind", "gpu", "bus_id", "uuid", "peer_gpu", "peer_bus_id", "nic", "port", "link", "rail",
                 "peer_host")


def device_labels(devices: Iterable[Device]) -> dict[str, str]:
    values: dict[str, list[str]] = {k: [] for k in DEVICE_LABELS}
    for d in devices:
        for label, v in zip(DEVICE_LABELS, (d.kind.value, d.gpu, d.bus_id, d.uuid, d.peer_gpu, d.peer_bus_id, d.nic,
                                            d.port, d.link, d.rail, d.host)):
            if v is not None and str(v) not in values[label]:
                values[label].append(str(v))
    return {k: ",".join(v) for k, v in values.items()}


# dcgm-exporter's per-GPU labels, in its order (its default `gpu`, `UUID`, `pci_bus_id`, `device`,
# `modelName`, `Hostname`; `device` is the /dev node name, which fleetprobe does not read, so it is
# left out rather than guessed): equal values join, whatever other labels either side has.
DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "modelName", "Hostname")


def _hostname(name: str, facts: Any) -> str:
    """What dcgm-exporter calls the node: the host's own hostname (its `Hostname` is the node's
    os.Hostname, or NODE_NAME in Kubernetes), else the inventory name."""
    host = facts.get("host") if isinstance(facts, dict) else None
    own = host.get("hostname") if isinstance(host, dict) else None
    return own if isinstance(own, str) and own else name


def dcgm_labels(g: F.GpuGauges, hostname: str) -> dict[str, str]:
    """A GPU's labels as dcgm-exporter prints them (`gpu` is already the GPU series' own)."""
    return {"UUID": g.uuid or "", "pci_bus_id": dcgm_bus_id(g.bus_id) or "", "modelName": g.name or "",
            "Hostname": hostname}


def finding_dcgm_labels(devices: Iterable[Device], gpus: Mapping[str | None, F.GpuGauges],
                        hostname: str) -> dict[str, str]:
    """A finding's GPUs in dcgm-exporter's label names (comma-separated for several, empty for a
    host-wide finding), so an alert on `fleetprobe_finding` joins `DCGM_FI_*` on UUID/pci_bus_id."""
    uuids: list[str] = []
    buses: list[str] = []
    models: list[str] = []
    for d in devices:
        bus = dcgm_bus_id(d.bus_id)
        g = gpus.get(bus) if bus else None
        for values, v in ((uuids, d.uuid or (g.uuid if g else None)), (buses, bus),
                          (models, g.name if g else None)):
            if v and v not in values:
                values.append(v)
    return {"UUID": ",".join(uuids), "pci_bus_id": ",".join(buses), "modelName": ",".join(models),
            "Hostname": hostname}


def _lines(samples: dict[str, list[tuple[dict[str, str], float]]]) -> Iterable[str]:
    for metric, help_text in METRICS.items():
        rows = samples[metric]
        if not rows:
            continue
        yield f"# HELP {metric} {_escape_help(help_text)}"
        yield f"# TYPE {metric} gauge"
        for labels, value in rows:
            lab = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
            yield f"{metric}{{{lab}}} {_fmt(value)}"


def render_prometheus(fleet: FleetResult) -> str:
    """fleet.json dict -> text exposition format (ends with a newline, as the format requires)."""
    return "\n".join(_lines(_samples(fleet))) + "\n"


def write_prometheus(fleet: FleetResult, path: str | Path) -> Path:
    """Write atomically: node_exporter may read the file at any moment."""
    return write_atomic(path, render_prometheus(fleet))
