"""`--slurm-drain FILE` and `--slurm-resume FILE`: the `scontrol` lines that would drain the nodes
with fail findings, and resume the nodes fleetprobe drained that this run found clean.

fleetprobe never drains or resumes a node by itself: the operator reads the file and applies it
(`sh FILE`).  One line per host with at least one finding of severity fail:

    unless_foreign_reason scontrol update NodeName=node07 State=DRAIN Reason="fleetprobe 20261201T1030Z-ab12: gpu.count.mismatch,nvlink.link.down"

and, in the resume list, one per clean host (verdict/remedy.py resume_plan):

    if_fleetprobe_reason scontrol update NodeName=node03 State=RESUME

Slurm keeps one drain reason per node, and its convention (the node health check's) is never to
overwrite a reason someone else set and to resume only the nodes one drained oneself.  What the
reason is must be read when the line runs, not when the file was written, so each line goes
through a shell function the file defines first: it reads the node's reason from slurmctld
(`scontrol show node`) and runs the scontrol command only when the reason is empty or fleetprobe's
own (drain), or fleetprobe's own (resume: DRAIN_REASON_PREFIX starts every reason fleetprobe
writes); a foreign reason skips the node, and says so on stderr.

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
from orchestrator.verdict.remedy import DRAIN_REASON_PREFIX, Plan, Resume, drain_plan, resume_plan
from orchestrator.verdict.result import FleetResult

_ID_SAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_REASON = 200  # characters; slurmctld keeps longer reasons, `sinfo -R` shows the start of them


# The functions the lines go through (see above): `$3` is `NodeName=NODE`; the reason is the value of
# the `Reason=` line of `scontrol show node` (Slurm appends `[user@time]` to it).  Ours, fixed text.
_READ_REASON = """  node=${3#NodeName=}
  reason=$(scontrol show node "$node" 2>/dev/null | sed -n 's/^ *Reason=//p')
  case $reason in"""
DRAIN_GUARD = "\n".join([
    "unless_foreign_reason() {  # run the scontrol command unless its node carries someone else's drain reason",
    _READ_REASON,
    f'    ""|"{DRAIN_REASON_PREFIX}"*) "$@" ;;',
    '    *) echo "fleetprobe: $node not drained: it carries a drain reason that is not fleetprobe\'s: $reason" >&2 ;;',
    "  esac", "}"])
RESUME_GUARD = "\n".join([
    "if_fleetprobe_reason() {  # run the scontrol command only if its node carries fleetprobe's own drain reason",
    _READ_REASON,
    f'    "{DRAIN_REASON_PREFIX}"*) "$@" ;;',
    '    "") ;;  # no reason: not drained, nothing to resume',
    '    *) echo "fleetprobe: $node not resumed: it carries a drain reason that is not fleetprobe\'s: $reason" >&2 ;;',
    "  esac", "}"])


def _reason(run_id: str, ids: list[str]) -> str:
    text = f"{DRAIN_REASON_PREFIX}{run_id}: "
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
    if failing:
        lines += ["# a node that carries someone else's drain reason is skipped (said on stderr), never overwritten",
                  DRAIN_GUARD]
    for host in sorted(failing):
        lines.append(f'unless_foreign_reason scontrol update NodeName={host} State=DRAIN '
                     f'Reason="{_reason(run_id, sorted(failing[host]))}"')
    return "\n".join(lines) + "\n"


def render_resume(fleet: FleetResult, decision: Resume | None = None) -> str:
    """One resume line per host this run found clean; each resumes its node only if the node's
    drain reason is fleetprobe's own when the line runs (`decision`: verdict/remedy.py resume_plan)."""
    decision = decision if decision is not None else resume_plan(fleet)
    run_id = _ID_SAFE.sub("_", decision.run_id or "run")
    lines = [f"# fleetprobe run {run_id}: {len(decision.hosts)} clean node(s); each is resumed only if fleetprobe "
             "drained it (its drain reason starts with 'fleetprobe '); review, then apply with sh",
             "# apply the list of the latest complete run only: an older run does not know a fault found since",
             *(f"# not a Slurm node name, left out: {shown(lo.host)}: {lo.why}" for lo in decision.left_out)]
    if decision.hosts:
        lines.append(RESUME_GUARD)
    lines += [f"if_fleetprobe_reason scontrol update NodeName={host} State=RESUME" for host in sorted(decision.hosts)]
    return "\n".join(lines) + "\n"


def write_drain(fleet: FleetResult, path: Path, decision: Plan | None = None) -> Path:
    return write_atomic(path, render_drain(fleet, decision))


def write_resume(fleet: FleetResult, path: Path) -> Path:
    return write_atomic(path, render_resume(fleet))
