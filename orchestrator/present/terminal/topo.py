"""Terminal view: the `nvidia-smi topo -m` style matrix from facts["topology"] (pure)."""

from __future__ import annotations

from orchestrator.facts.model import Facts, TopologyFacts
from orchestrator.present.terminal.gpus import clean

LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
  ?    = unknown (no probe could answer)"""


def render_topo(topology: TopologyFacts | None, legend: bool = True, host: str = "",
                facts: Facts | None = None, width: int | None = None) -> str:
    if not topology or not topology.get("devices"):
        return "no topology data"
    devices = topology["devices"]
    names = [clean(d["name"]) for d in devices]
    width = max(6, *(len(n) + 2 for n in names))
    lines = [" " * width + "".join(n.ljust(width) for n in names) + "CPU Affinity".ljust(16) + "NUMA Affinity"]
    for i, d in enumerate(devices):
        cells = [(c if c is not None else "?") for c in topology["matrix"][i]]
        line = names[i].ljust(width) + "".join(clean(c).ljust(width) for c in cells)
        if d["kind"] == "gpu":
            numa = d.get("numa")
            line += clean(d.get("cpu_affinity") or "N/A").ljust(16) + ("N/A" if numa is None else str(numa))
        lines.append(line.rstrip())
    nics = [d for d in devices if d["kind"] == "nic"]
    if nics:
        lines += ["", "NIC Legend:", ""] + [f"  {clean(d['name'])}: {clean(d.get('label') or d['bus_id'])}"
                                          for d in nics]
    if legend:
        lines += ["", LEGEND]
    return "\n".join(lines)
