"""One JSON verdict per host in NVIDIA Health Validation's NodeVerdict shape (`--node-verdicts DIR`).

Health Validation judges one node and does no fleet aggregation; fleetprobe has the fleet and hands
each node's verdict on in that shape, so what reads HV's verdicts (a Slurm prolog, a pre-flight Job,
a controller) can read fleetprobe's.  Per host: `overall_severity` from its health (`SEVERITY`:
failed CRITICAL, degraded WARNING, healthy PASS, unreachable and incomplete UNKNOWN, never PASS: a
host fleetprobe could not judge whole is not a passing one), one check verdict per finding and one
per check it judged clean (PASS) or could not judge (UNKNOWN, with the reason), the categories with
non-PASS results (`affected_components`) and the escalation step: the worst action of the host's
faults (verdict/actions.py) in HV's escalation chain (verdict/action_map.py's `health_validation`
column; None where that chain has no step, with the reason).  Faults of the fabric are no host's
(docs/fabric.md): they are in no node's file.

The file is DIR/<host>.json, the host name made one safe path component (store/rundir.py's
`safe_component`: `../x` or a name with `/` stays inside DIR, two names never share a file).
fleetprobe writes the files; it applies nothing (docs/node-verdicts.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator import __version__
from orchestrator.files.jsontext import dumps
from orchestrator.present.outputs import write_atomic
from orchestrator.store.rundir import safe_component
from orchestrator.verdict import rules
from orchestrator.verdict.action_map import ACTION_MAP
from orchestrator.verdict.coverage import NOT_JUDGED, CheckState
from orchestrator.verdict.fabric_faults import host_findings
from orchestrator.verdict.findings import Action, Finding
from orchestrator.verdict.health import Health
from orchestrator.verdict.result import FleetResult, JudgedHost

# fleetprobe's host health -> HV's severity; a host not judged whole is UNKNOWN, never PASS
SEVERITY: dict[Health, str] = {Health.FAILED: "CRITICAL", Health.DEGRADED: "WARNING", Health.HEALTHY: "PASS",
                               Health.UNREACHABLE: "UNKNOWN", Health.INCOMPLETE: "UNKNOWN"}
# a finding's severity -> HV's
FINDING_SEVERITY = {"fail": "CRITICAL", "warn": "WARNING", "info": "INFO"}
SEVERITY_RANK = ("PASS", "INFO", "UNKNOWN", "WARNING", "CRITICAL")  # least first
# the finding id's area (its prefix) -> HV's check category; the rest are the node's
CATEGORY = {"gpu": "gpu", "nvlink": "nvlink", "nvswitch": "nvlink", "nic": "infiniband", "fabric": "infiniband"}
UNREACHABLE_CHECK = "host.reachable"  # JUnit's case for a host that did not answer


def category(check_id: str) -> str:
    area = check_id.split(".", 1)[0]
    return "xid" if check_id == rules.gpu.XID.id else CATEGORY.get(area, "node")


def _entity(f: Finding) -> str:
    """The device the finding is about, as HV names entities (a GPU's UUID, else its bus id), else
    the finding's subject."""
    for d in f.devices:
        if d.uuid or d.bus_id:
            return str(d.uuid or d.bus_id)
    return f.subject


def _escalation(action: Action) -> dict[str, Any]:
    step = ACTION_MAP[action]["health_validation"]
    return {"fleetprobe_action": action.value, "step": step.name, "note": step.note}


def _check(check_id: str, severity: str, entity: str, message: str, action: Action | None) -> dict[str, Any]:
    return {"check_id": check_id, "category": category(check_id), "severity": severity, "entity": entity,
            "message": message, "escalation": _escalation(action) if action is not None else None}


def _checks(h: JudgedHost, findings: list[Finding], states: dict[str, CheckState]) -> list[dict[str, Any]]:
    if not h.reachable:
        return [_check(UNREACHABLE_CHECK, "UNKNOWN", h.name, f"unreachable: {h.reason or 'no reason recorded'}", None)]
    by_id: dict[str, list[Finding]] = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f)
    out = []
    for check_id, state in states.items():
        if state.state == NOT_JUDGED:
            out.append(_check(check_id, "UNKNOWN", h.name, f"not judged: {state.reason}", None))
            continue
        hits = by_id.get(check_id, [])
        out.extend(_check(f.id, FINDING_SEVERITY.get(f.severity.value, "UNKNOWN"), _entity(f),
                          f"{f.subject}: {f.message}", f.action) for f in hits)
        if not hits:
            out.append(_check(check_id, "PASS", h.name, "judged: nothing wrong", None))
    return out


def _affected(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HV's AffectedComponent: per category with non-PASS results, its checks, entities and worst."""
    by_cat: dict[str, dict[str, Any]] = {}
    for c in checks:
        if c["severity"] == "PASS":
            continue
        comp = by_cat.setdefault(c["category"], {"category": c["category"], "check_ids": [], "entities": [],
                                                 "max_severity": "PASS"})
        for key, value in (("check_ids", c["check_id"]), ("entities", c["entity"])):
            if value not in comp[key]:
                comp[key].append(value)
        if SEVERITY_RANK.index(c["severity"]) > SEVERITY_RANK.index(comp["max_severity"]):
            comp["max_severity"] = c["severity"]
    return list(by_cat.values())


def node_verdict(fleet: FleetResult, h: JudgedHost, states: dict[str, CheckState]) -> dict[str, Any]:
    findings = host_findings(fleet.findings_of(h.name))
    checks = _checks(h, findings, states)
    faults = [f for f in findings if f.severity.value in ("fail", "warn")]
    worst = max((f.action for f in faults), key=lambda a: a.rank, default=None)
    return {"node": h.name, "overall_severity": SEVERITY[h.health.state], "health": h.health.state.value,
            "reason": h.health.reason, "timestamp": fleet.run.finished or fleet.run.started or None,
            "run_id": fleet.run.id, "generated_by": f"fleetprobe {__version__}", "checks": checks,
            "affected_components": _affected(checks),
            "escalation": _escalation(worst) if worst is not None else None}


def write_node_verdicts(fleet: FleetResult, directory: str | Path, check_ids: Iterable[str] | None = None) -> Path:
    """DIR/<host>.json for every host (atomically, each); returns DIR."""
    out = Path(directory)
    ids = sorted(set(fleet.check_ids if check_ids is None else check_ids) | {f.id for f in fleet.findings})
    for h, states in fleet.check_states(ids):
        write_atomic(out / f"{safe_component(h.name)}.json",
                     dumps(node_verdict(fleet, h, states), indent=2, ensure_ascii=False) + "\n")
    return out
