"""What a check sees and returns.  Checks are pure: HostView in, findings out.

`Needs` (what a rule's check must have measured) is declared with the rule (verdict/rule.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts import gpu_models, registry
from orchestrator.facts.model import Facts, GpusFacts, NvlinkFacts, PcieFacts, PreviousFacts
from orchestrator.facts.security import SecurityFloor
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import Finding


@dataclass
class HostView:
    name: str
    facts: Facts  # normalized facts keyed by section (facts/registry.py), typed by facts/model.py
    outcomes: dict[str, str] = field(default_factory=dict)  # probe name -> outcome value
    expect: Expectations = field(default_factory=Expectations)
    vars: dict[str, Any] = field(default_factory=dict)
    # This host's facts in the previous run of the same results directory (None: no previous run
    # or the host was not in it), so cumulative counters and events can be judged between runs;
    # only the sections api/session.py:previous_facts keeps.
    previous: PreviousFacts | None = None
    # probe -> the reason its outcome gives (an unsupported/failed probe says why), for checks
    # that turn a refusal into a finding of its own
    reasons: dict[str, str] = field(default_factory=dict)
    # The security floor the run judges against (`--security-floor FILE`); None: the shipped one.
    security_floor: SecurityFloor | None = None

    def ran(self, probe: str) -> bool:
        return self.outcomes.get(probe) == "ok"

    def measured(self, section: str) -> Any:
        """The facts of `section` where the probe standing for it ran ok (facts/registry.py names
        it; coverage asks the same of the same table), else None: the one place a check asks
        whether a section was measured.  Facts without outcomes (a check's own test, pieces of a
        text import) are taken as they are."""
        if self.outcomes and not self.ran(registry.probe_of(section) or section):
            return None
        sec = self.facts.get(section)
        return sec if isinstance(sec, dict) else None




HostCheck = Callable[[HostView], Iterable[Finding]]
FleetCheck = Callable[[list[HostView]], Iterable[Finding]]
# What an area's fleet checks read of a facts value: key -> what they read of that key's value
# (None: all of it); applied to each object of a list.  checks/__init__.fleet_facts cuts by it.
FleetReads = Mapping[str, "FleetReads | None"]


# A section, or None when its probe did not run successfully (the probe outcome already says why).
def gpus_ran(view: HostView) -> GpusFacts | None:
    facts: GpusFacts | None = view.measured("gpus")
    return facts


def pcie_ran(view: HostView) -> PcieFacts | None:
    facts: PcieFacts | None = view.measured("pcie")
    return facts


def nvlink_ran(view: HostView) -> NvlinkFacts | None:
    facts: NvlinkFacts | None = view.measured("nvlink")
    return facts


def gpu_models_of(view: HostView) -> list[gpu_models.GpuModel]:
    """The known models of this host's GPUs, from whatever named them: NVML's names and PCI ids,
    the PCIe tree's GPU functions (device id), an imported matrix has neither."""
    found: list[gpu_models.GpuModel] = []
    gpus = gpus_ran(view)
    for g in (gpus.get("list") if gpus else None) or []:
        if isinstance(g, dict):
            m = gpu_models.lookup(g.get("name"), g.get("pci_device_id"))
            if m is not None:
                found.append(m)
    pcie = pcie_ran(view)
    for d in (pcie.get("devices") if pcie else None) or []:
        if isinstance(d, dict) and d.get("kind") == "gpu":
            m = gpu_models.lookup(d.get("model"), d.get("device"))
            if m is not None:
                found.append(m)
    return found


def c2c_host(view: HostView) -> bool:
    """GPUs that hang off their CPU by NVLink-C2C (Grace: GH200, GB200, GB10): known by model, or
    by GPU memory that is a NUMA node of its own (NVML's NUMA node id, topo -m's "GPU NUMA ID"),
    which only coherent C2C platforms give."""
    if any(m.c2c for m in gpu_models_of(view)):
        return True
    gpus = gpus_ran(view)
    for g in (gpus.get("list") if gpus else None) or []:
        node = g.get("numa_node") if isinstance(g, dict) else None
        if isinstance(node, int) and not isinstance(node, bool) and node >= 0:
            return True
    topo = view.facts.get("topology")
    devices = topo.get("devices") if isinstance(topo, dict) else None
    return any(isinstance(d, dict) and d.get("kind") == "gpu" and isinstance(d.get("gpu_numa_id"), int)
               for d in devices or [])
