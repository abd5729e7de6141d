"""One fault, one root finding: which findings of a host follow from another of its findings.

A GPU missing from NVML is also a GPU count below the expectation, a GPU the driver did not
initialise and a host whose shape differs from its peers': four findings, one fault.  Each rule
declares which rules its findings may follow from (`follows(...)` in its module's `causes()`,
verdict/rules/<prefix>.py; the topology comparison's, which read its fingerprint, in
verdict/classes.py), and in what scope the two must meet: anywhere on the host, on the same PCI
device, or on the same subject.  `group` applies them once every finding of a run is known
(verdict/judge.py): each consequence names its root (`caused_by`), each root what followed from
it (`consequences`).  Health, RECAP and `-q` count roots; every finding keeps its id, so JUnit
and Prometheus still show each one.

Pure: findings in, findings out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from orchestrator.verdict.findings import Finding, FindingRef


class Scope(str, Enum):
    HOST = "host"  # anywhere on the host: a host-wide cause (a missing GPU changes the host's shape)
    DEVICE = "device"  # the same PCI device: the two findings' devices share a bus id
    SUBJECT = "subject"  # the same devices (the GPU, the link, the port); the same subject where none


@dataclass(frozen=True)
class Cause:
    """`consequence` findings follow from a `root` finding met in `scope`; `when`, if given, says
    whether this root explains this consequence (an outlier that differs only where the root
    changes the host).  A cause whose root and consequence are one id groups repeated findings
    of one host-wide setting (ACS enabled on every switch port) under the first of them."""

    root: str
    consequence: str
    scope: Scope = Scope.HOST
    when: Callable[[Finding, Finding], bool] | None = None


def _bus_ids(f: Finding) -> frozenset[str]:
    """The PCI devices a finding is about: the bus ids of its devices (set by its check)."""
    return frozenset(b for d in f.devices for b in d.bus_ids())


def _meet(scope: Scope, root: Finding, consequence: Finding) -> bool:
    if scope is Scope.HOST:
        return True
    if scope is Scope.SUBJECT:
        # the same devices; the same text only where neither names one (the driver, the host)
        if root.devices or consequence.devices:
            return set(root.devices) == set(consequence.devices)
        return root.subject == consequence.subject
    return bool(_bus_ids(root) & _bus_ids(consequence))


def by_consequence(causes: Iterable[Cause]) -> dict[str, list[Cause]]:
    out: dict[str, list[Cause]] = {}
    for c in causes:
        out.setdefault(c.consequence, []).append(c)
    return out


def group(findings: Sequence[Finding], causes: Mapping[str, list[Cause]]) -> list[Finding]:
    """`findings` (in their order) with `caused_by` / `consequences` set; findings of different
    hosts never meet.  A consequence with several possible roots takes the most severe one, then
    the one declared first, then the first in order; a root that itself follows from another
    hands its consequences up, so every chain ends at one root."""
    by_host: dict[str, list[int]] = {}
    for i, f in enumerate(findings):
        by_host.setdefault(f.host, []).append(i)
    parent: dict[int, int] = {}
    for positions in by_host.values():
        parent.update(_parents(findings, positions, causes))
    if not parent:
        return [replace(f, caused_by=None, consequences=()) if f.caused_by or f.consequences else f
                for f in findings]
    _break_loops(parent)
    top = {i: _top(i, parent) for i in parent}
    followers: dict[int, list[FindingRef]] = {}
    for i, root in top.items():
        followers.setdefault(root, []).append(findings[i].ref)
    out = []
    for i, f in enumerate(findings):
        caused_by = findings[top[i]].ref if i in top else None
        consequences = tuple(followers.get(i, ()))
        # a finding grouped as it was (a merge's stored ones, mostly) is kept, not copied: a merge
        # of 100,000 hosts held every finding twice here
        same = f.caused_by == caused_by and f.consequences == consequences
        out.append(f if same else replace(f, caused_by=caused_by, consequences=consequences))
    return out


def _parents(findings: Sequence[Finding], positions: list[int],
             causes: Mapping[str, list[Cause]]) -> dict[int, int]:
    """position -> the position of the finding it follows from, within one host's findings."""
    by_id: dict[str, list[int]] = {}
    for i in positions:
        by_id.setdefault(findings[i].id, []).append(i)
    out: dict[int, int] = {}
    for i in positions:
        f = findings[i]
        best: tuple[int, int, int] | None = None  # (-severity, declared order, position)
        for order, cause in enumerate(causes.get(f.id, ())):
            for j in by_id.get(cause.root, ()):
                # a repeated finding follows the first of its kind, never a later one (no cycles)
                if j == i or (cause.root == f.id and j > i):
                    continue
                r = findings[j]
                if not _meet(cause.scope, r, f) or (cause.when is not None and not cause.when(r, f)):
                    continue
                key = (-r.severity.rank, order, j)
                if best is None or key < best:
                    best = key
        if best is not None:
            out[i] = best[2]
    return out


def _break_loops(parent: dict[int, int]) -> None:
    """Two findings declared each other's cause (tests/verdict/test_causes.py forbids it in the
    tables) must not leave a fault without a root: the first finding of a loop becomes its root."""
    for i in sorted(parent):
        j, seen = parent.get(i), {i}
        while j is not None and j not in seen:
            seen.add(j)
            j = parent.get(j)
        if j == i:
            del parent[i]


def _top(i: int, parent: Mapping[int, int]) -> int:
    """The root a chain of causes ends at (no loops: _break_loops ran)."""
    while i in parent:
        i = parent[i]
    return i
