"""What the checks decided about each device of a host, for the report's pictures.

A picture paints a P2P pair against the floor `p2p.bandwidth.low` judged it by, a PCIe link red
only where `pcie.link.downgraded` called it a fault (a GPU idling at a lower speed is not), an
uplink amber only where `pcie.nic.shared_switch` flagged it.  Each answer comes from the check's
own code, here, so the report cannot disagree with the verdict it draws.

Pure: a judged host and its findings in, a HostDrawing out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.verdict import rules
from orchestrator.verdict.checks import p2p, pcie
from orchestrator.verdict.findings import Finding

SHARED_SWITCH = rules.pcie.NIC_SHARED_SWITCH.id


@dataclass(frozen=True)
class HostDrawing:
    # (source bus id, destination bus id) -> the GB/s floor the pair was judged against
    p2p_floors: Mapping[tuple[str, str], float] = field(default_factory=dict)
    # bus id -> pcie.LINK_FAIL / LINK_WARN (a fault: painted) or LINK_IDLE (slower at rest: said, not painted)
    link_verdicts: Mapping[str, str] = field(default_factory=dict)
    # uplinks, GPUs and NICs that a shared-uplink finding names
    shared_uplink_devices: frozenset[str] = frozenset()

    def link_degraded(self, bus_id: str) -> bool:
        return self.link_verdicts.get(bus_id.lower()) in (pcie.LINK_FAIL, pcie.LINK_WARN)


def _number(v: Any) -> float | int | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def host_drawing(facts: Mapping[str, Any], expect: Mapping[str, Any], findings: Sequence[Finding]) -> HostDrawing:
    """`facts`, `expect`: a judged host's (what it was judged against); `findings`: its own."""
    p2p_min = _number(expect.get("p2p_min_gbps"))
    gen, width = _number(expect.get("pcie_gen")), _number(expect.get("pcie_width"))
    shared: set[str] = set()
    for f in findings:
        if f.id == SHARED_SWITCH and isinstance(f.actual, dict):
            for key in ("gpus", "nics"):
                shared.update(str(b).lower() for b in f.actual.get(key) or () if isinstance(b, str))
            if isinstance(f.actual.get("uplink"), str):
                shared.add(f.actual["uplink"].lower())
    typed: Any = facts  # read tolerantly by each check's function
    return HostDrawing(
        p2p_floors=p2p.pair_floors(typed, float(p2p_min) if p2p_min is not None else None),
        link_verdicts={k.lower(): v for k, v in pcie.link_verdicts(typed, int(gen) if gen else None,
                                                                    int(width) if width else None).items()},
        shared_uplink_devices=frozenset(shared))
