"""What a run collected of one host, in the shape the verdict reads: from a live run, a stored
run's raw files, or imported evidence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class HostInput:
    """One host as collected: probe summaries plus the `data` of every envelope that parsed."""

    name: str
    address: str
    groups: list[str]
    probes: dict[str, dict[str, Any]]  # probe -> ProbeResult.summary()
    data: dict[str, dict[str, Any]]  # probe -> envelope data (status ok/error with data)
    warnings: dict[str, list[str]] = field(default_factory=dict)
    vars: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] | None = None  # already normalized (imported text evidence): used as is
    # `data` kept on disk instead (a run's raw files): read when the host is judged, so a run
    # does not hold every host's envelopes until the end
    load_data: Callable[[], dict[str, dict[str, Any]]] | None = None
    # what of its stored inputs could not be used (a probe_expect this program cannot read): said
    # in its record, beside what it was judged against, so the record never reads as if the host
    # had asked for nothing
    notes: list[str] = field(default_factory=list)
    # the expectation keys of its stored probe_expect left out for that reason: an id they would
    # have judged says so, not that nothing was asked
    unusable_expect: tuple[str, ...] = ()
