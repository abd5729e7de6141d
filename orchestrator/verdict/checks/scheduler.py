"""Scheduler reconciliation (issue 50 item 4): what Slurm or Kubernetes advertises about a host
(inventory/scheduler.py) against what fleetprobe measured and judged on it.

Run after the host's own checks, because "healthy GPUs" and "failed" are their verdict: a GPU is
healthy when NVML lists it, it is not lost, and no fail finding names it (verdict/device_health.py).
Judged only with `expect.scheduler` (the plan sets it where the run was given a view) and where NVML
ran; a host the view does not name gets an info finding saying nothing was reconciled (it may be no
node of that cluster), never a silent pass.
Where MIG slices are advertised or enabled the whole-GPU count is not compared (the slices are the
scheduler's units then): only the node's state is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from orchestrator.inventory.scheduler import Advert
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.device_health import DeviceState, device_health
from orchestrator.verdict.findings import Finding, Kind, Severity

FINDING_IDS: tuple[str, ...] = (rules.scheduler.ADVERTISED_MISSING.id, rules.scheduler.NOT_ADVERTISED.id,
                                 rules.scheduler.MODEL_MISMATCH.id, rules.scheduler.SCHEDULABLE_WHILE_FAILED.id,
                                 rules.scheduler.NODE_UNKNOWN.id)


def _word(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _gpus(view: HostView) -> list[dict]:
    section = view.measured("gpus")
    listed = section.get("list") if section else None
    return [g for g in listed if isinstance(g, dict)] if isinstance(listed, list) else []


def healthy_gpus(view: HostView, findings: Iterable[Finding]) -> int:
    devices = device_health(findings, view.outcomes)
    return sum(1 for g in _gpus(view) if g.get("lost") is not True and devices.gpu(g).state is not DeviceState.FAILED)


def model_agrees(advertised: str, nvml_name: str) -> bool:
    """Slurm's Gres type ("h100") is a part of NVML's name; GFD's product is the name with dashes
    for spaces ("NVIDIA-H100-80GB-HBM3", "-SHARED" where time-sliced)."""
    product = re.sub(r"-SHARED$", "", advertised)
    if product.replace("-", " ").lower() == nvml_name.lower():
        return True
    return bool(_word(advertised)) and _word(advertised) in _word(nvml_name)


def _finding(view: HostView, rule_id: str, severity: Severity, message: str, expected: object, actual: object,
             advert: Advert, hint: str) -> Finding:
    return Finding(rule_id, severity, Kind.FAULT, view.name, f"{advert.source} node {advert.node}",
                   message, expected=expected, actual=actual, hint=hint,
                   evidence=[f"{advert.source}: {advert.state}, {advert.gpus} GPU(s) advertised"])


def _count(view: HostView, advert: Advert, healthy: int, listed: int) -> list[Finding]:
    if advert.gpus > healthy:
        return [_finding(view, rules.scheduler.ADVERTISED_MISSING.id, Severity.FAIL,
                         f"{advert.source} advertises {advert.gpus} GPU(s); the host has {healthy} healthy "
                         f"(NVML lists {listed})", advert.gpus, healthy, advert,
                         "drain or cordon the node until the GPUs are back")]
    if advert.gpus < healthy:
        return [_finding(view, rules.scheduler.NOT_ADVERTISED.id, Severity.WARN,
                         f"{advert.source} advertises {advert.gpus} GPU(s); the host has {healthy} healthy",
                         advert.gpus, healthy, advert, "restart the device plugin or reconfigure slurmd")]
    return []


def _models(view: HostView, advert: Advert) -> list[Finding]:
    names = sorted({str(g.get("name")) for g in _gpus(view) if isinstance(g.get("name"), str)})
    wrong = [m for m in advert.models if "-MIG-" not in m and names and not any(model_agrees(m, n) for n in names)]
    if not wrong:
        return []
    return [_finding(view, rules.scheduler.MODEL_MISMATCH.id, Severity.WARN,
                     f"{advert.source} advertises GPU type {', '.join(wrong)}; NVML names {', '.join(names)}",
                     list(advert.models), names, advert, "correct gres.conf or the node's labels")]


def reconcile(view: HostView, advert: Advert | None, findings: list[Finding]) -> list[Finding]:
    """The scheduler findings of one host, its own checks' `findings` already made."""
    if view.expect.scheduler is not True or view.measured("gpus") is None:
        return []
    if advert is None:
        return [Finding(rules.scheduler.NODE_UNKNOWN.id, Severity.INFO, Kind.UNKNOWN, view.name, "scheduler",
                        "the scheduler's view names no node for this host: nothing reconciled",
                        hint="map its node name with probe_slurm_node / probe_k8s_node where it is a node")]
    gpus = _gpus(view)
    mig = (advert is not None and advert.mig) or any(isinstance(g.get("mig"), dict) and g["mig"].get("current")
                                                   for g in gpus)
    out = [] if mig else _count(view, advert, healthy_gpus(view, findings), len(gpus))
    out += _models(view, advert)
    # the host's own faults: a count the scheduler has wrong is fixed in its config, not by a drain
    failed = [f.id for f in findings if f.severity is Severity.FAIL]
    if advert.schedulable and failed:
        out.append(_finding(view, rules.scheduler.SCHEDULABLE_WHILE_FAILED.id, Severity.FAIL,
                            f"{advert.source} has the node {advert.state} (schedulable) while it has fail findings: "
                            f"{', '.join(sorted(set(failed)))}", "not schedulable", advert.state, advert,
                            "drain or cordon it (--slurm-drain / --k8s-out), then fix its root fault"))
    return out
