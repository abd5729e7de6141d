"""Each device's health as the verdict decided it, for every per-device surface (issue 47).

`--show gpus`, `--show nvlink`, `--show nic` and the report's tables, matrices and pictures show a
GPU, an NVLink, a NIC port or a PCIe function as:

    failed      a fail finding names it in its `devices`
    degraded    a warn finding names it (and no fail finding)
    ok          the probe that judges it ran, and no warn or fail finding names it (an info
                finding, a platform limitation at info, leaves it ok)
    not judged  the probe that judges its kind did not run to its end: never "ok" from absence

A finding names its devices in `Finding.devices` (verdict/findings.py `Device`), so the answer is
a join on those, never on the subject text.  A device's faults include its parts': an NVLink's
finding is its GPU's, a NIC port's is its NIC's (a GPU with two links down is not "ok").  A pair
of GPUs (a slow P2P pair) is the pair's, not either GPU's: which end is at fault is not known.
Rails and peer hosts are the fabric's subjects, not a host's devices, and are not kept here.

Pure: a host's findings and its probes' outcomes in, a HostDevices out; presenters read it and
decide nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from orchestrator.verdict import rules
from orchestrator.verdict.findings import Device, DeviceKind, Finding, Severity
from orchestrator.verdict.rule import Rule


class DeviceState(str, Enum):
    """Worst first."""

    FAILED = "failed"
    DEGRADED = "degraded"
    OK = "ok"
    NOT_JUDGED = "not judged"


# The probe whose run judges a device of each kind: without it, the device is not judged.
# Rails and peer hosts are no device of a host (None): the fabric's own surfaces show them.
JUDGED_BY: Final[Mapping[DeviceKind, str | None]] = {
    DeviceKind.GPU: "nvml",
    DeviceKind.GPU_PAIR: "nvml",
    DeviceKind.NVLINK: "nvlink",
    DeviceKind.NIC_PORT: "nic",
    DeviceKind.NIC: "nic",
    DeviceKind.PCIE: "pcie",
    DeviceKind.NVSWITCH: "pcie",
    DeviceKind.RAIL: None,
    DeviceKind.PEER_HOST: None,
}

_STATE_OF: Final = {Severity.FAIL: DeviceState.FAILED, Severity.WARN: DeviceState.DEGRADED}
_FAULTED: Final = (DeviceState.FAILED, DeviceState.DEGRADED)


@dataclass(frozen=True)
class DeviceHealth:
    state: DeviceState
    findings: tuple[str, ...] = ()  # ids of the fail and warn findings that name it, worst first
    reason: str = ""  # not judged: why (the probe's outcome)

    def text(self) -> str:
        """One cell: "ok", "failed: nvlink.link.down", "not judged (nvml not run)"."""
        if self.state is DeviceState.NOT_JUDGED:
            return f"not judged ({self.reason})" if self.reason else "not judged"
        if self.findings:
            return f"{self.state.value}: {', '.join(self.findings)}"
        return self.state.value


# A device as a key: (kind family, field, value).  A GPU is kept under each identifier a finding
# gave (bus id, UUID, NVML index): checks of text imports know only the index.
Key = tuple[Any, ...]


@dataclass(frozen=True)
class HostDevices:
    """One host's devices by key -> the (severity rank, id) of each finding naming them."""

    marks: Mapping[Key, frozenset[tuple[int, str]]] = field(default_factory=dict)
    not_judged: Mapping[str, str] = field(default_factory=dict)  # probe -> why it judged nothing

    def gpu(self, record: Mapping[str, Any]) -> DeviceHealth:
        """A GPU record of the facts (index, bus_id, uuid: any may be missing)."""
        return self._health("nvml", _gpu_keys(record))

    def nvlink(self, record: Mapping[str, Any], link: Any) -> DeviceHealth:
        """One link of a GPU (the GPU's record, the link's index)."""
        return self._health("nvlink", [("nvlink", *k[1:], link) for k in _gpu_keys(record)])

    def gpu_links(self, record: Mapping[str, Any]) -> DeviceHealth:
        """A GPU's NVLinks as a whole: the findings naming one of its links, or naming the GPU by a
        rule that judges NVLink (NVLINK_RULES); not judged where the nvlink probe did not run."""
        return self._health("nvlink", [("links", *k[1:]) for k in _gpu_keys(record)])

    def nvlink_pair(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> DeviceHealth:
        """The NVLink bond between two GPUs (an NV# cell).  A bond with an end whose NVLinks the
        verdict faulted still carries traffic on fewer links: degraded (NV16 where the GPUs have
        18), whatever the end's severity; failed only where a fail finding that judges NVLink
        names the pair itself."""
        own = self._health("nvlink", _pair_keys(a, b) + _pair_keys(b, a))
        ends = self._health("nvlink", [("links", *k[1:]) for k in [*_gpu_keys(a), *_gpu_keys(b)]])
        if own.state is DeviceState.FAILED or ends.state not in _FAULTED:
            return own if own.state is not DeviceState.OK or ends.state is DeviceState.OK else ends
        ids = tuple(dict.fromkeys((*own.findings, *ends.findings)))
        return DeviceHealth(DeviceState.DEGRADED, ids)

    def nic(self, name: Any, bus_id: Any = None) -> DeviceHealth:
        """An adapter (an HCA by name, a netdev by its PCI function): its own findings and its ports'."""
        return self._health("nic", [*_nic_keys("nic", name, bus_id), *_nic_keys("nic_any", name, bus_id)])

    def nic_port(self, name: Any, port: Any, bus_id: Any = None) -> DeviceHealth:
        """One port of an HCA: its own findings and its adapter's (not its sibling ports')."""
        return self._health("nic", [("nic_port", name, port), *_nic_keys("nic", name, bus_id)])

    def pcie(self, bus_id: Any) -> DeviceHealth:
        """A PCI function by its bus id, whatever it is (a GPU's PCIe link, a switch port)."""
        bus = _bdf(bus_id)
        return self._health("pcie", [("gpu", "bus_id", bus), ("nic", "bus_id", bus), ("nic_any", "bus_id", bus),
                                     ("pcie", bus)] if bus else [])

    def _health(self, probe: str, keys: Iterable[Key]) -> DeviceHealth:
        found: set[tuple[int, str]] = set()
        for k in keys:
            found |= self.marks.get(k, frozenset())
        if probe in self.not_judged and not found:
            return DeviceHealth(DeviceState.NOT_JUDGED, reason=self.not_judged[probe])
        if not found:
            return DeviceHealth(DeviceState.OK)
        worst = max(rank for rank, _ in found)
        ids = tuple(dict.fromkeys(i for _, i in sorted(found, key=lambda x: (-x[0], x[1]))))
        return DeviceHealth(DeviceState.FAILED if worst >= Severity.FAIL.rank else DeviceState.DEGRADED, ids)


def _bdf(v: Any) -> str | None:
    return v.lower() if isinstance(v, str) and v else None


def _gpu_keys(g: Mapping[str, Any]) -> list[Key]:
    keys: list[Key] = []
    if _bdf(g.get("bus_id")):
        keys.append(("gpu", "bus_id", _bdf(g.get("bus_id"))))
    if isinstance(g.get("uuid"), str) and g.get("uuid"):
        keys.append(("gpu", "uuid", g["uuid"]))
    if isinstance(g.get("index"), int) and not isinstance(g.get("index"), bool):
        keys.append(("gpu", "index", g["index"]))
    return keys


def _pair_keys(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Key]:
    """A GPU pair's NVLink bond, by the identifiers both ends have (bus ids, NVML indices)."""
    ka, kb = {k[1]: k for k in _gpu_keys(a)}, {k[1]: k for k in _gpu_keys(b)}
    return [("links_pair", ka[f][2], kb[f][2]) for f in ("bus_id", "index") if f in ka and f in kb]


def _nic_keys(family: str, name: Any, bus_id: Any) -> list[Key]:
    """An adapter by its name (mlx5_0) and its PCI function: `family` "nic" for a finding about the
    adapter itself, "nic_any" for one about one of its ports."""
    name = name if isinstance(name, str) and name else None
    return [k for k in ((family, "name", name), (family, "bus_id", _bdf(bus_id))) if k[2]]


def _device_gpu(d: Device) -> dict[str, Any]:
    return {"bus_id": d.bus_id, "uuid": d.uuid, "index": d.gpu}


def _judges_nvlink(rule: Rule) -> bool:
    return (rules.declared_in(rule) == rules.nvlink.__name__
            or "nvlink" in (*rule.needs.sections, *rule.needs.any_of))


# The rules that judge NVLink: the nvlink.* area, and any other that reads the nvlink section (its
# declared Needs: gpu.nvlink.errors).
NVLINK_RULES: Final = frozenset(r.id for r in rules.ALL if _judges_nvlink(r))


def reads_nvlink(finding_id: str) -> bool:
    """The finding's rule judges NVLink (NVLINK_RULES)."""
    return finding_id in NVLINK_RULES


def device_keys(d: Device, nvlink: bool = False) -> list[Key]:
    """Every key a finding's device marks: itself, and the device it is part of.  `nvlink`: the
    finding judges NVLink (reads_nvlink), so a GPU it names has its links marked too."""
    if d.kind in (DeviceKind.GPU, DeviceKind.NVLINK):
        gpu = _gpu_keys(_device_gpu(d))
        links = [("nvlink", *k[1:], d.link) for k in gpu] if d.kind is DeviceKind.NVLINK else []
        whole = [("links", *k[1:]) for k in gpu] if nvlink or d.kind is DeviceKind.NVLINK else []
        return gpu + links + whole
    if d.kind is DeviceKind.NIC:
        return _nic_keys("nic", d.nic, d.bus_id)
    if d.kind is DeviceKind.NIC_PORT:
        return _nic_keys("nic_any", d.nic, d.bus_id) + ([("nic_port", d.nic, d.port)] if d.nic else [])
    if d.kind is DeviceKind.GPU_PAIR:
        pair = _pair_keys({"bus_id": d.bus_id, "index": d.gpu}, {"bus_id": d.peer_bus_id, "index": d.peer_gpu})
        return [("gpu_pair", *k[1:]) for k in pair] + (pair if nvlink else [])
    if d.kind in (DeviceKind.PCIE, DeviceKind.NVSWITCH) and _bdf(d.bus_id):
        return [("pcie", _bdf(d.bus_id))]
    return []  # rails and peer hosts: the fabric's subjects


def device_health(findings: Iterable[Finding], probes: Mapping[str, str]) -> HostDevices:
    """`findings`: one host's (every one, consequences included); `probes`: each probe the run
    asked of the host -> its outcome ("ok" when it ran to its end with an answer)."""
    marks: dict[Key, set[tuple[int, str]]] = {}
    for f in findings:
        if f.severity not in _STATE_OF:
            continue  # info: the device stays ok
        nvlink = reads_nvlink(f.id)
        for d in f.devices:
            for k in device_keys(d, nvlink):
                marks.setdefault(k, set()).add((f.severity.rank, f.id))
    wanted = {p for p in JUDGED_BY.values() if p}
    not_judged = {p: _why_not(p, probes.get(p)) for p in sorted(wanted) if probes.get(p) != "ok"}
    return HostDevices({k: frozenset(v) for k, v in marks.items()}, not_judged)


def without_verdict(probes: Iterable[str] = ()) -> HostDevices:
    """A host shown without its verdict (a view drawn from facts alone): every device not judged."""
    return HostDevices({}, {p: "no verdict" for p in {*(p for p in JUDGED_BY.values() if p), *probes}})


def _why_not(probe: str, outcome: str | None) -> str:
    return f"{probe} not run" if outcome in (None, "skipped") else f"{probe} {outcome}"
