"""What a check sees and returns.  Checks are pure: HostView in, findings out."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import Finding


@dataclass
class HostView:
    name: str
    facts: dict[str, Any]  # normalized facts keyed by section: host, pcie, gpus, nvlink, p2p, topology
    outcomes: dict[str, str] = field(default_factory=dict)  # probe name -> outcome value
    expect: Expectations = field(default_factory=Expectations)
    vars: dict[str, Any] = field(default_factory=dict)
    # This host's facts in the previous run of the same results directory (None: no previous run
    # or the host was not in it), so cumulative counters and events can be judged between runs.
    previous: dict[str, Any] | None = None
    # probe -> the reason its outcome gives (an unsupported/failed probe says why), for checks
    # that turn a refusal into a finding of its own
    reasons: dict[str, str] = field(default_factory=dict)

    def ran(self, probe: str) -> bool:
        return self.outcomes.get(probe) == "ok"


HostCheck = Callable[[HostView], Iterable[Finding]]
FleetCheck = Callable[[list[HostView]], Iterable[Finding]]
