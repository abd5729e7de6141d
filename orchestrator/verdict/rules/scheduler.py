"""The `scheduler.*` finding rules: what the scheduler advertises (Slurm's Gres and node state,
Kubernetes' nvidia.com/gpu capacity, GFD's labels) against what fleetprobe measured (issue 50).
Judged only where the run was given the scheduler's view (`--slurm`, `--k8s-nodes FILE`):
without it they are not judged, never passed (verdict/checks/scheduler.py, docs/scheduler.md).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.verdict.causes import Cause
from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule

_NEEDS = Needs(sections=("gpus",), switched_on=("scheduler",))

ADVERTISED_MISSING = Rule(
    "scheduler.gpus.advertised_missing",
    action=Action.CONFIGURE,
    because="the scheduler hands out GPUs the host does not have healthy: jobs land on missing or dead GPUs",
    needs=_NEEDS,
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="the scheduler advertises more GPUs (Slurm `Gres`, Kubernetes `allocatable` nvidia.com/gpu) "
        "than the host has healthy (NVML-listed, not lost, not failed by a finding)",
        todo="drain or cordon the node until the GPUs are back, then let the scheduler re-read them",
    ),
)

NOT_ADVERTISED = Rule(
    "scheduler.gpus.not_advertised",
    action=Action.CONFIGURE,
    because="healthy GPUs the scheduler does not hand out: capacity lost after a transient error",
    needs=_NEEDS,
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the host has more healthy GPUs than the scheduler advertises (none, where the device plugin "
        "or slurmd dropped them after a transient error)",
        todo="restart the device plugin / reconfigure slurmd (`scontrol reconfigure`) so it advertises them",
    ),
)

MODEL_MISMATCH = Rule(
    "scheduler.gpu.model_mismatch",
    action=Action.CONFIGURE,
    because="the scheduler's GPU type is not the model the host has: jobs asking for a model get another",
    needs=_NEEDS,
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the GPU type the scheduler advertises (Slurm `Gres=gpu:TYPE:N`, GFD's `nvidia.com/gpu.product`) "
        "is not the model NVML names",
        todo="correct gres.conf / the node's labels, or find why the host holds another model",
    ),
)

SCHEDULABLE_WHILE_FAILED = Rule(
    "scheduler.node.schedulable_while_failed",
    action=Action.CONFIGURE,
    because="the scheduler still places work on a node fleetprobe failed",
    needs=_NEEDS,
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="the node has fail findings of its own (not scheduler.*), and the scheduler has it schedulable (Slurm: not DRAIN/DOWN/FAIL; "
        "Kubernetes: not cordoned)",
        todo="drain or cordon it (`--slurm-drain`, `--k8s-out`), then fix its root fault",
    ),
)


NODE_UNKNOWN = Rule(
    "scheduler.node.unknown",
    action=Action.NONE,
    because="the scheduler's view names no node of this host: nothing to reconcile",
    needs=_NEEDS,
    host_wide=True,
    doc=Doc(
        severity="info",
        kind="unknown",
        means="the scheduler's output names no node for this host (it may be no node of that cluster), so "
        "nothing was reconciled on it",
        todo="map its node name with probe_slurm_node / probe_k8s_node where it is a node",
    ),
)


def causes() -> Iterator[Cause]:
    """None: each compares two views, and is its own root (the hardware's findings stand beside it)."""
    return iter(())
