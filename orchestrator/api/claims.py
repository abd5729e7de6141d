"""Which bundle document speaks for a name (`probe import`): a host speaks only for itself.

Everything a document says about who wrote it (the inventory name it was written for, SLURMD_NODENAME,
the hostname) is written by the host, so a hostile node can claim any name.  The one thing the
controller holds that the host did not write is the file's place: `srun -o out/%N.json` (or the
operator) names the file after the node Slurm ran the task on.  So:

- a name one document alone claims is that document's, unless its own file's place names another
  host the run knows (a name another document claims, or an inventory host): then the place proves
  the claim false;
- a name several documents claim is the one whose file's place is that name (its name up to the
  first dot), when exactly one's is; the others are claimants;
- when no place, or several, decide, no claimant is the host: none is judged under that name;
- a document whose file's place is a job step slot (`srun -o out/%j.%t.json`) other than the one it
  says it ran in claims another rank's slot: a claimant, whatever name it gives.

A claimant keeps a name of its own (NAME#k, never NAME) and is not judged at all: its answers speak
for a host it cannot be shown to be, so they must not become findings, a drain line or a playbook
target.  Its one result says why (`CLAIM_PROBE`), which verdict/checks/host.py turns into its own
`identity.name.claimed` finding.  Pure: claims in, names out, in any order of the documents.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.facts.textsafe import one_line
from orchestrator.verdict.checks.host import CLAIM_PROBE

__all__ = ["CLAIM_PROBE", "Claim", "Named", "decide", "place_name", "place_slot", "quoted"]

# what of a claimed name a message quotes: names are the host's own words
_QUOTED = 80
# sources a contested name's message lists before counting the rest
_LISTED = 3


@dataclass(frozen=True)
class Claim:
    """One document's claim: its file (the controller's place) and the name it gives itself."""

    source: str
    name: str
    # the job step slot it says it ran in: (job id, step id, task id) from SLURM_*, "" where not said
    slot: tuple[str, str, str] | None = None


@dataclass(frozen=True)
class Named:
    """What a document is in the run: its name there, and why it does not speak for the name it
    claims ("" where it does)."""

    name: str
    refused: str = ""


def place_name(source: str) -> str:
    """The name a file's place gives: its name up to the first dot (`out/%N.json`, `node05.log`)."""
    return Path(source).name.split(".", 1)[0]


def quoted(name: str) -> str:
    return repr(one_line(name)[:_QUOTED])


def _file(source: str) -> str:
    return Path(source).name


def place_slot(source: str) -> tuple[str, str] | None:
    """The job and rank a file's place gives (`srun -o out/%j.%t.json`: JOB.RANK.EXT, both digits)."""
    parts = Path(source).name.split(".")
    if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
        return parts[0], parts[1]
    return None


def _slot_lie(c: Claim) -> str:
    """Why a document's own slot claim is false by its file's place ("" where it is not): it says it
    was another rank (or job) than the one whose output srun wrote there."""
    place = place_slot(c.source)
    if place is None or c.slot is None or not c.slot[0]:
        return ""
    job, step, task = c.slot
    if place[0] == job and place[1] in (task, step):  # `%j.%s` places by step: not a lie either
        return ""
    return (f"claims {quoted(c.name)} as rank {quoted(task)} of job {quoted(job)}, but its file's place is "
            f"rank {place[1]} of job {place[0]}: another rank's slot; a host speaks only for itself")


def decide(claims: Sequence[Claim], known: Collection[str] = ()) -> list[Named]:
    """What each document is in the run, in the claims' order.  `known`: the inventory's host names
    (a file placed under one of them is that host's; a claimant's name is never one of them).  A
    document its own place proves false about its job step is a claimant first; the others are
    weighed by name."""
    by_name: dict[str, list[int]] = {}
    refused: list[tuple[int, bool, str]] = []  # (claim, whether a winner holds its name, why)
    for i, c in enumerate(claims):
        lie = _slot_lie(c)
        if lie:
            refused.append((i, False, lie))
        else:
            by_name.setdefault(c.name, []).append(i)
    names = set(by_name) | {c.name for c in claims} | set(known)
    out: dict[int, Named] = {}
    for name, group in by_name.items():
        group = sorted(group, key=lambda i: (claims[i].source, i))  # the order of the files decides nothing
        proven = [i for i in group if place_name(claims[i].source) == name]
        if len(group) == 1:
            other = place_name(claims[group[0]].source)
            if other != name and other in names:
                refused.append((group[0], False, f"claims {quoted(name)}, but its file's place names {quoted(other)}, "
                                                 "another host of this run: a host speaks only for itself"))
            else:
                out[group[0]] = Named(name)
        elif len(proven) == 1:
            out[proven[0]] = Named(name)
            refused.extend((i, True, f"claims {quoted(name)}, which the place of {quoted(_file(claims[proven[0]].source))} "
                                     "proves is another host's: a host speaks only for itself")
                           for i in group if i != proven[0])
        else:
            why = _contested(name, [claims[i].source for i in group[:_LISTED]], len(group))
            refused.extend((i, False, why) for i in group)
    taken = {n.name for n in out.values()} | names
    following: dict[str, int] = {}  # name -> the k to try next (10,000 claimants of one name: no rescans)
    for i, held, why in sorted(refused, key=lambda r: (claims[r[0]].name, claims[r[0]].source, r[0])):
        name = claims[i].name
        k = following.get(name, 2 if held else 1)
        while f"{name}#{k}" in taken:
            k += 1
        taken.add(f"{name}#{k}")
        following[name] = k + 1
        out[i] = Named(f"{name}#{k}", why)
    return [out[i] for i in range(len(claims))]


def _contested(name: str, first: list[str], count: int) -> str:
    listed = ", ".join(quoted(_file(s)) for s in first)
    more = f" and {count - len(first)} more" if count > len(first) else ""
    return (f"{count} documents claim {quoted(name)} ({listed}{more}) and no file's place (srun -o "
            f"out/%N.json) decides which is that host: none is judged as {quoted(name)}")
