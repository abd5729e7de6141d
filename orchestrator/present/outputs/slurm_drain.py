"""`--slurm-drain FILE`: the `scontrol` lines that would drain the nodes with fail findings.

fleetprobe never drains a node by itself: the operator reads the file and applies it (`sh FILE`).
One line per host with at least one finding of severity fail:

    scontrol update NodeName=node07 State=DRAIN Reason="fleetprobe 20261201T1030Z-ab12: gpu.count.mismatch,nvlink.link.down"

Host names are taken as Slurm node names (they are for `probe import` of srun output: the node
name comes from inside each document).  Slurm caps a reason's length, so the ids are listed up
to a limit and the rest counted; a name Slurm or the shell would misread is left out, with a
comment line saying why, rather than quoted into something that drains another node.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.present.outputs import write_atomic
from orchestrator.verdict.result import FleetResult

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # what a Slurm NodeName is (no ranges, no commas)
_ID_SAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_REASON = 200  # characters; slurmctld keeps longer reasons, `sinfo -R` shows the start of them


def _reason(run_id: str, ids: list[str]) -> str:
    text = f"fleetprobe {run_id}: "
    shown: list[str] = []
    for i, fid in enumerate(ids):
        rest = len(ids) - i
        candidate = ",".join([*shown, _ID_SAFE.sub("_", fid)])
        if len(text) + len(candidate) + len(f" +{rest} more") > MAX_REASON:
            return text + ",".join(shown) + f" +{rest} more"
        shown.append(_ID_SAFE.sub("_", fid))
    return text + ",".join(shown)


def render_drain(fleet: FleetResult) -> str:
    """One drain line per failed host, its reason naming its fail faults by their root ids."""
    # a stored run's id is only what its run.json says: nothing of it may reach the shell unsafe
    run_id = _ID_SAFE.sub("_", fleet.run.id or "run")
    failing: dict[str, set[str]] = {}
    for fault in fleet.faults("fail"):
        failing.setdefault(fault.host, set()).add(fault.root.id)
    lines = [f"# fleetprobe run {run_id}: {len(failing)} node(s) with fail findings; review, then apply with sh"]
    for host in sorted(failing):
        if not _NODE.fullmatch(host):
            lines.append(f"# not a Slurm node name, left out: {host!r}")
            continue
        lines.append(f'scontrol update NodeName={host} State=DRAIN Reason="{_reason(run_id, sorted(failing[host]))}"')
    return "\n".join(lines) + "\n"


def write_drain(fleet: FleetResult, path: Path) -> Path:
    return write_atomic(path, render_drain(fleet))
