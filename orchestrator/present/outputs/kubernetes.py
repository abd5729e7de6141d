"""`--k8s-out DIR`: the Kubernetes objects that carry the verdict, for a human or a controller to
apply (docs/kubernetes.md).  fleetprobe never calls an API server: it writes files and one shell
file of `kubectl` lines; applying them is the operator's act.

Per node (DIR/<node>.status.json, .labels.json, .devicetaintrules.json):

* a Node status patch with one condition per row of CONDITIONS (status True where a warn or fail
  finding of its rules names the host, Unknown where the probe that judges it did not run or the
  host did not answer, else False), one line of message, and `lastTransitionTime` carried from the
  previous run when the status did not change;
* a Node label patch: `fleetprobe.io/health`, `fleetprobe.io/class`, and GPU feature discovery's
  `nvidia.com/gpu.product` / `nvidia.com/gpu.count` where GFD would write the same (NVML ran, one
  model, no MIG);
* a `DeviceTaintRule` (resource.k8s.io/v1, Kubernetes 1.37) per GPU the verdict failed (effect
  NoSchedule) or degraded (effect None: informational).  NoExecute is never written: evicting
  running work is a decision fleetprobe leaves to people.

The node name is the host's `probe_k8s_node` variable, else its inventory name; a name that is not
a Kubernetes node name (a DNS subdomain) is left out, with a comment line in DIR/apply.sh saying
which and why: nothing a host supplied is ever spliced into a command unchecked.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.facts.textsafe import one_line
from orchestrator.files.bounded import read_regular
from orchestrator.files.jsontext import dumps, loads_strict
from orchestrator.inventory.model import K8S_NODE_VAR
from orchestrator.present.outputs import write_atomic
from orchestrator.store.rundir import safe_component
from orchestrator.verdict import rules
from orchestrator.verdict.device_health import DeviceState
from orchestrator.verdict.fabric_faults import host_findings
from orchestrator.verdict.health import Health
from orchestrator.verdict.result import FleetResult, JudgedHost
from orchestrator.verdict.rule import Rule


@dataclass(frozen=True)
class ConditionType:
    type: str  # fleetprobe's condition type
    aks: str | None  # AKS's GPU health condition type that means the same, where one does
    rules: tuple[Rule, ...]  # a warn or fail finding of any of these sets it True
    probe: str  # the probe whose run judges it: without it, Unknown


# One row per condition type fleetprobe writes (docs/kubernetes.md renders the table from it).
# AKS's IBLinkFlapping counts flaps over time; fleetprobe sees a port's state once, so its IB row
# maps to none.
CONDITIONS: tuple[ConditionType, ...] = (
    ConditionType("FleetprobeGPUMissing", "GPUMissing",
                  (rules.gpu.LOST, rules.gpu.COUNT_MISMATCH, rules.gpu.COUNT_PCI_VS_NVML,
                   rules.gpu.COUNT_PCI_VS_DRIVER, rules.gpu.FALLEN_OFF_BUS), "nvml"),
    ConditionType("FleetprobeXIDErrors", "XIDErrors", (rules.gpu.XID,), "kmsg"),
    ConditionType("FleetprobeNVLinkInactive", "NVLinkStatusInactive",
                  (rules.nvlink.LINK_DOWN, rules.nvlink.FABRIC_INCOMPLETE), "nvlink"),
    ConditionType("FleetprobeGPUClockThrottling", "GPUClockThrottling",
                  (rules.gpu.CLOCKS_SLOWDOWN, rules.gpu.CLOCKS_VIOLATION), "nvml"),
    ConditionType("FleetprobeIBPortDown", None,
                  (rules.nic.PORT_DOWN, rules.nic.PORT_RATE_LOW, rules.nic.PORT_ERRORS), "nic"),
)
HEALTH_CONDITION = "FleetprobeUnhealthy"  # the host's whole verdict: True failed/degraded, Unknown not judged
HEALTH_REASON = {Health.FAILED: "Failed", Health.DEGRADED: "Degraded", Health.HEALTHY: "Healthy",
                 Health.UNREACHABLE: "Unreachable", Health.INCOMPLETE: "Incomplete"}
HEALTH_STATUS = {Health.FAILED: "True", Health.DEGRADED: "True", Health.HEALTHY: "False",
                 Health.UNREACHABLE: "Unknown", Health.INCOMPLETE: "Unknown"}

DRA_DRIVER = "gpu.nvidia.com"  # the NVIDIA DRA driver's name; its pool per node is the node's name
TAINT_KEY = "fleetprobe.io/gpu-health"
TAINT_EFFECT = {DeviceState.FAILED: "NoSchedule", DeviceState.DEGRADED: "None"}  # never NoExecute
LABEL_PREFIX = "fleetprobe.io/"
MAX_MESSAGE = 1024  # characters: a condition's message is one line, read in `kubectl describe node`
PREVIOUS_LIMIT = 1 << 20  # bytes: the previous run's status patch, read to carry transition times

# A node name (RFC 1123 subdomain) and a label value, as the API server validates them.
_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_CHARS = re.compile(r"[^-A-Za-z0-9_.]")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def node_name(h: JudgedHost) -> str:
    """The host's Kubernetes node name: its `probe_k8s_node` variable, else its inventory name."""
    mapped = h.connection.get(K8S_NODE_VAR)
    return mapped if isinstance(mapped, str) and mapped else h.name


def bad_node_name(name: str) -> str | None:
    """Why `name` is no Kubernetes node name (None: it is one)."""
    if _SUBDOMAIN.match(name):
        return None
    return ("not a Kubernetes node name (lowercase letters, digits, '-' and '.', at most 253): "
            f"set its {K8S_NODE_VAR} host variable to the node's name")


def label_value(text: Any) -> str | None:
    """`text` as a label value where it is a valid one (at most 63 characters), else None."""
    return text if isinstance(text, str) and len(text) <= 63 and _LABEL_VALUE.match(text) else None


def _condition(fleet: FleetResult, h: JudgedHost, row: ConditionType) -> tuple[str, str, str]:
    """(status, reason, message) of one condition type on one host."""
    ids = {r.id for r in row.rules}
    hits = [f for f in host_findings(fleet.findings_of(h.name))
            if f.id in ids and f.severity.value in ("fail", "warn")]
    if hits:
        return "True", "FaultFound", "; ".join(f"{f.id}: {f.subject}: {f.message}" for f in hits)
    if not h.reachable or not h.ran(row.probe):
        why = h.reason if not h.reachable else (h.probes[row.probe].outcome if row.probe in h.probes else "not run")
        return "Unknown", "NotJudged", f"{row.probe} did not judge this node: {why or 'no reason recorded'}"
    return "False", "NoFault", f"{row.probe} judged it: nothing wrong"


def conditions_now(fleet: FleetResult, h: JudgedHost) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) for every condition fleetprobe writes, the host's whole
    verdict first."""
    state = h.health.state
    out = [(HEALTH_CONDITION, HEALTH_STATUS[state], HEALTH_REASON[state],
            h.health.reason or f"fleetprobe: {state.value}")]
    out += [(row.type, *_condition(fleet, h, row)) for row in CONDITIONS]
    return out


def _message(text: str) -> str:
    line = one_line(text)
    return line if len(line) <= MAX_MESSAGE else line[:MAX_MESSAGE - 1] + "…"


def previous_conditions(path: Path) -> dict[str, tuple[str, str]]:
    """type -> (status, lastTransitionTime) of the status patch an earlier run wrote at `path`;
    {} when there is none or it is not one (then every transition is this run's)."""
    try:
        doc = loads_strict(read_regular(path, PREVIOUS_LIMIT, "previous status patch"))
        conds = doc["status"]["conditions"]
        return {c["type"]: (c["status"], c["lastTransitionTime"]) for c in conds
                if isinstance(c, dict) and all(isinstance(c.get(k), str)
                                               for k in ("type", "status", "lastTransitionTime"))}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def status_patch(fleet: FleetResult, h: JudgedHost, node: str, now: str,
                 before: Mapping[str, tuple[str, str]], previous: FleetResult | None = None) -> dict[str, Any]:
    """The Node status patch: each condition's transition time is the earlier run's where its
    status did not change (`before`, the patch that run wrote), else `now`.  `previous`: the run
    before this one (history), where `before` has no time: a status it had too held since then."""
    old = _previous_states(previous, h.name)
    conds = []
    for ctype, status, reason, message in conditions_now(fleet, h):
        since = now
        if ctype in before and before[ctype][0] == status:
            since = before[ctype][1]
        elif old.get(ctype) == status and previous is not None and _run_time(previous):
            since = _run_time(previous)
        conds.append({"type": ctype, "status": status, "reason": reason, "message": _message(message),
                      "lastHeartbeatTime": now, "lastTransitionTime": since})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "status": {"conditions": conds}}


def _run_time(fleet: FleetResult) -> str:
    return fleet.run.finished or fleet.run.started or ""


def _previous_states(previous: FleetResult | None, host: str) -> dict[str, str]:
    if previous is None:
        return {}
    h = previous.hosts.by_name(host)
    return {} if h is None else {c[0]: c[1] for c in conditions_now(previous, h)}


def _gfd_labels(h: JudgedHost) -> dict[str, str]:
    """GFD's product and count labels, where GFD would write the same values: NVML ran and lists
    one model, no GPU in MIG mode (GFD then writes other names).  GFD's product is NVML's name
    with spaces as dashes."""
    gpus = h.facts.get("gpus") if h.ran("nvml") else None
    listed = gpus.get("list") if isinstance(gpus, dict) else None
    if not isinstance(listed, list) or not listed or not all(isinstance(g, dict) for g in listed):
        return {}
    names = {g.get("name") for g in listed}
    migs = [g.get("mig") for g in listed]
    if len(names) != 1 or any(isinstance(m, dict) and m.get("current") for m in migs):
        return {}
    product = label_value(str(next(iter(names)) or "").replace(" ", "-"))
    return {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(len(listed))} if product else {}


def label_patch(fleet: FleetResult, h: JudgedHost, node: str) -> dict[str, Any]:
    labels = {f"{LABEL_PREFIX}health": h.health.state.value}
    # this run's class only (a carried one may have changed), its '/' and the like as '_'
    cls = label_value(_LABEL_CHARS.sub("_", h.topology_class).strip("_.-")) if h.topology_class else None
    if cls:
        labels[f"{LABEL_PREFIX}class"] = cls
    labels.update(_gfd_labels(h))
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}


def _rule_name(node: str, device: str) -> str:
    name = f"fleetprobe-{node}-{device}"
    if len(name) <= 253:
        return name
    return f"fleetprobe-{hashlib.sha256(node.encode()).hexdigest()[:16]}-{device}"


def taint_rules(fleet: FleetResult, h: JudgedHost, node: str, run_label: str) -> list[dict[str, Any]]:
    """One DeviceTaintRule per GPU the verdict failed or degraded, selecting the device as the NVIDIA
    DRA driver names it (`gpu-<NVML index>` in the node's pool); its UUID and bus id annotated."""
    devices = fleet.devices(h)
    gpus = h.facts.get("gpus")
    listed = gpus.get("list") if isinstance(gpus, dict) else None
    out = []
    for g in listed if isinstance(listed, list) else []:
        if not isinstance(g, dict) or not isinstance(g.get("index"), int) or isinstance(g.get("index"), bool):
            continue  # no index: no device name the driver would know it by
        health = devices.gpu(g)
        if health.state not in TAINT_EFFECT:
            continue
        device = f"gpu-{g['index']}"
        notes = {"fleetprobe.io/uuid": g.get("uuid"), "fleetprobe.io/pci-bus-id": g.get("bus_id"),
                 "fleetprobe.io/minor-number": g.get("minor_number"), "fleetprobe.io/findings": ",".join(health.findings),
                 "fleetprobe.io/run": fleet.run.id}
        out.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": _rule_name(node, device),
                         "labels": {f"{LABEL_PREFIX}node": label_value(node) or "long-name", f"{LABEL_PREFIX}run": run_label},
                         "annotations": {k: one_line(v) for k, v in notes.items() if v is not None}},
            "spec": {"deviceSelector": {"driver": DRA_DRIVER, "pool": node, "device": device},
                     "taint": {"key": TAINT_KEY, "value": health.state.value, "effect": TAINT_EFFECT[health.state]}}})
    return out


def _apply_lines(node: str, base: str, has_rules: bool, run_label: str) -> list[str]:
    q = shlex.quote
    lines = [f"kubectl patch node {q(node)} --type=strategic --patch-file {q(base + '.labels.json')}",
             f"kubectl patch node {q(node)} --subresource=status --type=strategic "
             f"--patch-file {q(base + '.status.json')}"]
    if has_rules:
        lines.append(f"kubectl apply -f {q(base + '.devicetaintrules.json')}")
    # rules an earlier run wrote for this node that this run did not: its GPU is no longer faulted
    selector = f"{LABEL_PREFIX}node={label_value(node) or 'long-name'},{LABEL_PREFIX}run!={run_label}"
    lines.append(f"kubectl delete devicetaintrules.resource.k8s.io -l {q(selector)} --ignore-not-found")
    return lines


def write_k8s(fleet: FleetResult, directory: str | Path, previous: FleetResult | None = None) -> Path:
    """Write every node's objects and DIR/apply.sh; returns DIR."""
    out = Path(directory)
    now = _run_time(fleet) or "1970-01-01T00:00:00Z"
    run_label = label_value(_LABEL_CHARS.sub("_", fleet.run.id or "run")[:63].strip("_.-")) or "run"
    script = [f"#!/bin/sh\n# fleetprobe run {fleet.run.id or 'run'}: review, then apply with sh (fleetprobe "
              "never calls the API server)", "set -e", 'cd "$(dirname "$0")"']
    for h in fleet.hosts.with_facts(("gpus",)):
        node = node_name(h)
        why = bad_node_name(node)
        if why:
            script.append(f"# left out: {one_line(node)!r}: {why}")
            continue
        base = safe_component(node)
        status_path = out / f"{base}.status.json"
        rules_ = taint_rules(fleet, h, node, run_label)
        docs = {".labels.json": label_patch(fleet, h, node),
                ".status.json": status_patch(fleet, h, node, now, previous_conditions(status_path), previous)}
        if rules_:
            docs[".devicetaintrules.json"] = {"apiVersion": "v1", "kind": "List", "items": rules_}
        elif out.is_dir():  # an earlier run's rules for a GPU no longer faulted: apply.sh deletes them, the file goes
            (out / f"{base}.devicetaintrules.json").unlink(missing_ok=True)
        for suffix, doc in docs.items():
            write_atomic(out / f"{base}{suffix}", dumps(doc, indent=2, ensure_ascii=False) + "\n")
        script += _apply_lines(node, base, bool(rules_), run_label)
    write_atomic(out / "apply.sh", "\n".join(script) + "\n")
    return out
