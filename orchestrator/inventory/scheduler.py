"""What a scheduler advertises about its nodes, read from its own output (issue 50 item 4):

* Slurm: `scontrol show node -o`, one node a line of `Key=Value` fields: `Gres` (`gpu:h100:8(S:0-1)`,
  several comma-separated, `(null)` for none) and `State` (`IDLE`, `MIXED+DRAIN`, `DOWN*`, ...);
* Kubernetes: `kubectl get nodes -o json`: `status.allocatable["nvidia.com/gpu"]` (else
  `capacity`), GPU feature discovery's `nvidia.com/gpu.product` label, `nvidia.com/mig-*`
  resources, `spec.unschedulable` and the `Ready` condition.

Pure: text or a JSON document in, one `Advert` per node out, and a line for each node that could
not be read (it costs that node only, never the run).  fleetprobe only reads: it never changes
what a scheduler advertises (verdict/checks/scheduler.py compares; docs/scheduler.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.facts.textsafe import is_digits, one_line
from orchestrator.inventory.model import K8S_NODE_VAR, SLURM_NODE_VAR

SLURM = "slurm"
KUBERNETES = "kubernetes"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GFD_PRODUCT = "nvidia.com/gpu.product"

# Slurm node states and flags under which slurmctld places no new job on the node
_SLURM_UNSCHEDULABLE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING",
                                  "MAINT", "MAINTENANCE", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN",
                                  "FUTURE", "INVAL", "UNKNOWN", "REBOOT_ISSUED", "REBOOT_REQUESTED"})
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")
_GRES = re.compile(r"^gpu(?::([^:(]+))?:(\d+)(?:\(.*\))?$")


@dataclass(frozen=True)
class Advert:
    """One node as its scheduler advertises it."""

    source: str  # SLURM or KUBERNETES
    node: str
    gpus: int  # whole GPUs it hands out (0: none advertised)
    models: tuple[str, ...]  # the GPU types it names (Slurm's Gres type, GFD's product); () none named
    schedulable: bool  # new work may be placed on it
    state: str  # as the scheduler words it, for messages
    mig: bool = False  # MIG slices advertised: the whole-GPU count is not comparable


@dataclass(frozen=True)
class SchedulerView:
    source: str
    nodes: Mapping[str, Advert]
    problems: tuple[str, ...] = ()  # nodes that could not be read, each with why

    def advert_of(self, host: str, host_vars: Mapping[str, Any]) -> Advert | None:
        """The host's node: by its probe_slurm_node / probe_k8s_node variable, else its name."""
        mapped = host_vars.get(SLURM_NODE_VAR if self.source == SLURM else K8S_NODE_VAR)
        return self.nodes.get(mapped if isinstance(mapped, str) and mapped else host)


def _slurm_fields(line: str) -> dict[str, str]:
    """`Key=Value` fields of one `scontrol show node -o` line; a value runs to the next key (a
    Reason holds spaces)."""
    marks = list(_FIELD.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


def slurm_gres(gres: str) -> tuple[int, tuple[str, ...]] | None:
    """(GPU count, types) of a Gres value; None when a gpu entry is not Slurm's form."""
    total, types = 0, []
    for entry in re.split(r",(?![^(]*\))", gres.strip()):
        if not entry.startswith("gpu"):
            continue  # (null), mps:..., shard:..., another gres
        m = _GRES.match(entry)
        if m is None:
            return None
        total += int(m.group(2))
        if m.group(1):
            types.append(m.group(1))
    return total, tuple(dict.fromkeys(types))


def slurm_schedulable(state: str) -> bool:
    words = set(re.split(r"[+]", state.upper().rstrip("*~#!%$@^-")))
    return not state.endswith("*") and not words & _SLURM_UNSCHEDULABLE


def parse_scontrol(text: str) -> SchedulerView:
    nodes: dict[str, Advert] = {}
    problems: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        f = _slurm_fields(line)
        name, state = f.get("NodeName", ""), f.get("State", "")
        gres = slurm_gres(f.get("Gres", "(null)"))
        if not name or not state or gres is None:
            problems.append(f"scontrol line {n}: not a node line with NodeName, State and a readable Gres: "
                            f"{one_line(line)[:120]}")
            continue
        nodes[name] = Advert(SLURM, name, gres[0], gres[1], slurm_schedulable(state), state)
    return SchedulerView(SLURM, nodes, tuple(problems))


def _count(value: Any) -> int | None:
    """A Kubernetes quantity of whole devices ("8"), else None."""
    return int(value) if isinstance(value, str) and is_digits(value) and len(value) < 7 else None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _k8s_node(item: Mapping[str, Any]) -> Advert | str:
    meta, spec, status = (_obj(item.get(k)) for k in ("metadata", "spec", "status"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return "a node without metadata.name"
    res = _obj(status.get("allocatable") if isinstance(status.get("allocatable"), dict) else status.get("capacity"))
    raw = res.get(GPU_RESOURCE, "0")
    gpus = _count(raw)
    if gpus is None:
        return f"{one_line(name)}: {GPU_RESOURCE} is {one_line(raw)!r}, not a count of devices"
    labels = _obj(meta.get("labels"))
    product = labels.get(GFD_PRODUCT)
    conds: list[Any] = status["conditions"] if isinstance(status.get("conditions"), list) else []
    ready = [c.get("status") for c in conds if isinstance(c, dict) and c.get("type") == "Ready"]
    cordoned = spec.get("unschedulable") is True
    state = "cordoned" if cordoned else "Ready" if ready == ["True"] else "not Ready"
    return Advert(KUBERNETES, name, gpus, (product,) if isinstance(product, str) and product else (),
                  not cordoned and ready == ["True"], state, mig=any(str(k).startswith(MIG_RESOURCE_PREFIX) for k in res))


def parse_k8s_nodes(doc: Any) -> SchedulerView:
    """`kubectl get nodes -o json` (a List of Nodes); ValueError when it is no such list."""
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ValueError("not the output of `kubectl get nodes -o json`: no `items` list")
    nodes: dict[str, Advert] = {}
    problems = []
    for i, item in enumerate(items):
        got = _k8s_node(item) if isinstance(item, dict) else f"item {i} is not an object"
        if isinstance(got, str):
            problems.append(f"kubectl node {i}: {got}")
        else:
            nodes[got.node] = got
    return SchedulerView(KUBERNETES, nodes, tuple(problems))
