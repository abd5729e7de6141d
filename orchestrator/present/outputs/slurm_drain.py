"""`--slurm-drain FILE`: the `scontrol` lines that would drain the nodes with fail findings.

fleetprobe never drains a node by itself: the operator reads the file and applies it (`sh FILE`).
One line per host with at least one finding of severity fail:

    scontrol update NodeName=node07 State=DRAIN Reason="fleetprobe 20261201T1030Z-ab12: gpu.count.mismatch,nvlink.link.down"

Host names are taken as Slurm node names (they are for `probe import` of srun output: the node
name comes from inside each document).  Slurm caps a reason's length, so the ids are listed up
to a limit and the rest counted; a name Slurm or the shell would misread is left out, with a
comment line saying why, rather than quoted into something that drains another node
(inventory/targets.py is the grammar; verdict/remedy.py drain_plan keeps such a host out of the
plan and out of the guard's count: the file cannot drain it).

Which nodes, and whether the list may be written at all, is the verdict's decision
(verdict/remedy.py drain_plan: a list that would drain more than the stated share of the fleet or
of a class is refused without --force); this file renders it.  A refused list is comment lines
only, naming the rules that would have drained the nodes, so `sh FILE` drains nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.inventory.targets import shown
from orchestrator.present.outputs import write_atomic
from orchestrator.verdict.remedy import Plan, drain_plan
from orchestrator.verdict.result import FleetResult

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


def render_drain(fleet: FleetResult, decision: Plan | None = None) -> str:
    """One drain line per failed host, its reason naming its fail faults by their root ids; only
    comments where the guard refused the list (`decision`: verdict/remedy.py drain_plan)."""
    decision = decision if decision is not None else drain_plan(fleet)
    # a stored run's id is only what its run.json says: nothing of it may reach the shell unsafe
    run_id = _ID_SAFE.sub("_", decision.run_id or "run")
    failing = {hp.host: {s.finding.id for s in hp.steps} for hp in decision.hosts}
    left = [f"# not a Slurm node name, left out: {shown(lo.host)}: {lo.why}" for lo in decision.left_out]
    if decision.blocked:
        return "\n".join([
            f"# fleetprobe run {run_id}: {len(failing)} node(s) with fail findings: NOT drained, the list is refused",
            *(f"# refused: {r.text(decision.max_share)}" for r in decision.refused),
            "# a rule that calls this many nodes faulty may itself be wrong: check it, then rerun with --force "
            "(or a larger --max-drain) to write the drain lines",
            *left,
        ]) + "\n"
    forced = (f"; written with --force over the guard ({decision.refusal_text()})" if decision.refused else "")
    lines = [f"# fleetprobe run {run_id}: {len(failing)} node(s) with fail findings; review, then apply with sh{forced}",
             *left]
    for host in sorted(failing):
        lines.append(f'scontrol update NodeName={host} State=DRAIN Reason="{_reason(run_id, sorted(failing[host]))}"')
    return "\n".join(lines) + "\n"


def write_drain(fleet: FleetResult, path: Path, decision: Plan | None = None) -> Path:
    return write_atomic(path, render_drain(fleet, decision))
