"""Findings: the verdicts the checks produce.  Pure data, no I/O."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any


class Severity(str, Enum):
    """Worst first: the declaration order is the severity order every reader sorts and filters by."""

    FAIL = "fail"
    WARN = "warn"
    INFO = "info"

    @property
    def rank(self) -> int:
        """2 for fail, 1 for warn, 0 for info: higher is worse."""
        return len(SEVERITY_ORDER) - 1 - SEVERITY_ORDER.index(self.value)


# Severity values, worst first (fleet.json, tables, the report, Prometheus and CSV columns).
SEVERITY_ORDER: tuple[str, ...] = tuple(s.value for s in Severity)


def severity_rank(value: object) -> int:
    """Severity.rank of a severity value read back from fleet.json; -1 for anything else."""
    return Severity(value).rank if value in SEVERITY_ORDER else -1


class Kind(str, Enum):
    FAULT = "fault"
    PLATFORM_LIMITATION = "platform_limitation"
    UNKNOWN = "unknown"  # could not be judged, e.g. needs root


class Action(str, Enum):
    """What a finding asks of its host (verdict/actions.py gives each id its class and the reason).
    Least disruptive first: the declaration order is the escalation order."""

    NONE = "none"  # nothing to do on the host (a platform limitation, a reading fleetprobe could not take)
    CONFIGURE = "configure"  # change software or settings: a driver, a package, a kernel parameter, firmware
    RESET_GPU = "reset_gpu"  # `nvidia-smi -r` on the GPU, once nothing runs on it
    RESTART_SERVICE = "restart_service"  # restart a daemon (the fabric manager, persistenced)
    REBOOT = "reboot"  # the node
    RESEAT_INSPECT = "reseat_inspect"  # hands on the hardware: reseat, cable, cooling, diagnostics
    RMA = "rma"  # return it to the vendor

    @property
    def rank(self) -> int:
        return list(Action).index(self)


class DeviceKind(str, Enum):
    """What a finding's device is; docs/fleet-schema.md says which fields each kind fills."""

    GPU = "gpu"  # gpu (index), bus_id, uuid
    GPU_PAIR = "gpu_pair"  # gpu + bus_id (source), peer_gpu + peer_bus_id (destination)
    NVLINK = "nvlink"  # gpu, bus_id, uuid of the GPU and link (its link index)
    NIC_PORT = "nic_port"  # nic (the HCA, e.g. mlx5_0), port, bus_id where known
    NIC = "nic"  # nic, bus_id: the adapter as a whole
    PCIE = "pcie"  # bus_id: a PCI function or switch port that is no GPU or NIC
    NVSWITCH = "nvswitch"  # bus_id
    RAIL = "rail"  # rail
    PEER_HOST = "peer_host"  # host: another host of the fleet (a duplicate identity, a fabric peer)


@dataclass(frozen=True)
class Device:
    """One device a finding is about, by the fields that identify it (None: not known or not of
    its kind), so consumers join on them instead of reading `subject` (the human text)."""

    kind: DeviceKind
    gpu: int | None = None
    bus_id: str | None = None  # lower-case domain:bus:device.function
    uuid: str | None = None
    peer_gpu: int | None = None
    peer_bus_id: str | None = None
    nic: str | None = None
    port: int | None = None
    link: int | None = None
    rail: int | None = None
    host: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value}
        for f in _DEVICE_FIELDS:
            v = getattr(self, f)
            if v is not None:
                out[f] = v
        return out

    @classmethod
    def from_dict(cls, d: Any) -> Device | None:
        """A stored device, or None when it is not one (a damaged file: the finding keeps the others)."""
        if not isinstance(d, dict) or not isinstance(d.get("kind"), str) or d["kind"] not in _DEVICE_KINDS:
            return None
        kw: dict[str, Any] = {}
        for f, typ in _DEVICE_FIELDS.items():
            v = d.get(f)
            if isinstance(v, typ) and not isinstance(v, bool):
                kw[f] = v
        for f in ("bus_id", "peer_bus_id"):
            kw[f] = _bdf(kw.get(f))
        return cls(DeviceKind(d["kind"]), **kw)

    def bus_ids(self) -> tuple[str, ...]:
        return tuple(b for b in (self.bus_id, self.peer_bus_id) if b)


_DEVICE_KINDS = {k.value for k in DeviceKind}
# Device's fields after `kind`, in order, with the type a stored value must have to be read back.
_DEVICE_FIELDS: dict[str, type] = {"gpu": int, "bus_id": str, "uuid": str, "peer_gpu": int, "peer_bus_id": str,
                                   "nic": str, "port": int, "link": int, "rail": int, "host": str}
assert list(_DEVICE_FIELDS) == [f.name for f in fields(Device)][1:]


def gpu_device(g: Any) -> Device:
    """A GPU record of the facts (index, bus_id, uuid; any may be missing) as a device."""
    g = g if isinstance(g, dict) else {}
    return Device(DeviceKind.GPU, gpu=_int(g.get("index")), bus_id=_bdf(g.get("bus_id")), uuid=_str(g.get("uuid")))


def gpu_pair(src: Any, dst: Any) -> Device:
    """Two GPUs (a direction where it matters: source first), from their GPU records or bus ids."""
    a, b = gpu_device(src if isinstance(src, dict) else {"bus_id": src}), gpu_device(
        dst if isinstance(dst, dict) else {"bus_id": dst})
    return Device(DeviceKind.GPU_PAIR, gpu=a.gpu, bus_id=a.bus_id, peer_gpu=b.gpu, peer_bus_id=b.bus_id)


def pci_device(kind: DeviceKind, bdf: Any, **kw: Any) -> Device:
    if "peer_bus_id" in kw:
        kw["peer_bus_id"] = _bdf(kw["peer_bus_id"])
    return Device(kind, bus_id=_bdf(bdf), **kw)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


# A PCI address as the facts write it.  A device's bus id is used, not only shown: `probe remediate`
# hands it to `nvidia-smi -r` in an Ansible playbook, where a stored "{{ lookup('pipe', ...) }}"
# would run on the controller; a value of any other form is not kept (the device stays, without it).
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def _bdf(v: Any) -> str | None:
    low = v.lower() if isinstance(v, str) else None
    return low if low and _PCI_ADDRESS.fullmatch(low) else None


@dataclass(frozen=True)
class Located:
    """A subject with the devices it names: what a check passes where a finding's subject goes."""

    text: str
    devices: tuple[Device, ...] = ()

    def __str__(self) -> str:
        return self.text


def located(text: str, devices: Iterable[Device]) -> Located:
    return Located(text, tuple(devices))


def joined(parts: Iterable[Located]) -> Located:
    """Several subjects as one ("GPU0 (…), GPU3 (…)"), with all their devices."""
    parts = list(parts)
    return Located(", ".join(p.text for p in parts), tuple(d for p in parts for d in p.devices))


@dataclass(frozen=True)
class FindingRef:
    """Another finding of the same host, by what tells it apart there: its id and subject."""

    id: str
    subject: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "subject": self.subject}

    @classmethod
    def from_dict(cls, d: Any) -> FindingRef | None:
        """A stored reference, or None when it is not one (a damaged file)."""
        if isinstance(d, dict) and isinstance(d.get("id"), str) and isinstance(d.get("subject"), str):
            return cls(d["id"], d["subject"])
        return None


@dataclass
class Finding:
    id: str  # stable dotted id, e.g. "nvlink.link.down"
    severity: Severity
    kind: Kind
    host: str
    subject: str  # "GPU1 (0000:2a:00.0)", "link 3", "GPU0->GPU5", "0000:18:00.0"
    message: str  # one line a person reads
    expected: Any = None
    actual: Any = None
    evidence: list[str] = field(default_factory=list)  # probe fields the verdict rests on
    hint: str = ""
    # What to do and why (verdict/actions.py), decided once when the finding is made; a stored
    # finding keeps its own, one of an older run (no `because`) is given its id's.
    action: Action = Action.NONE
    because: str = ""
    # The devices the finding is about, set by the check that raised it from the facts it read
    # (empty: the rule is about the whole host, verdict/actions.py HOST_WIDE).
    devices: tuple[Device, ...] = ()
    # One fault, one root (verdict/causes.py): a finding that follows from another of its host names
    # that root; the root names what followed from it.  Set once every finding is known.
    caused_by: FindingRef | None = None
    consequences: tuple[FindingRef, ...] = ()

    def __post_init__(self) -> None:
        if not self.because:
            from orchestrator.verdict.actions import decide  # actions.py reads findings: import late

            self.action, self.because = decide(self)

    @property
    def ref(self) -> FindingRef:
        return FindingRef(self.id, self.subject)

    @property
    def is_root(self) -> bool:
        """Counted as a fault of its own: it follows from no other finding."""
        return self.caused_by is None

    def to_dict(self) -> dict[str, Any]:
        # Built by hand, not with dataclasses.asdict: asdict deep-copies expected/actual/evidence
        # value by value, which was a fifth of `probe merge` (69,000 findings at 2,000 hosts).
        # The values are shared, not copied: some `actual` values are a host's facts themselves
        # (nccl, p2p), so neither a finding's dict nor fleet.json's facts may be changed in place
        # once judged (nothing does: overrides build new findings, writers encode as they read).
        # The root fields are written only where they are set: a finding with neither is one fault.
        out = {"id": self.id, "severity": self.severity.value, "kind": self.kind.value, "host": self.host,
               "subject": self.subject, "message": self.message, "expected": self.expected,
               "actual": self.actual, "evidence": list(self.evidence), "hint": self.hint,
               "action": self.action.value, "because": self.because,
               "devices": [d.to_dict() for d in self.devices]}
        if self.caused_by is not None:
            out["caused_by"] = self.caused_by.to_dict()
        if self.consequences:
            out["consequences"] = [c.to_dict() for c in self.consequences]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        d = dict(d)
        d["severity"] = Severity(d["severity"])
        d["kind"] = Kind(d["kind"])
        d["caused_by"] = FindingRef.from_dict(d.get("caused_by"))
        d["consequences"] = tuple(r for r in map(FindingRef.from_dict, d.get("consequences") or ()) if r)
        d["devices"] = devices_from(d.get("devices"))
        d["action"], d["because"] = stored_action(d.get("action"), d.get("because"))
        return cls(**d)


def devices_from(stored: Any) -> tuple[Device, ...]:
    """Stored devices (a run of a fleetprobe before them has none: empty)."""
    return tuple(x for x in map(Device.from_dict, stored if isinstance(stored, list) else ()) if x)


def stored_action(action: Any, because: Any) -> tuple[Action, str]:
    """A stored action and its reason; anything else (an older run, a damaged file) reads as unset,
    so the finding is given its id's (Finding.__post_init__)."""
    if isinstance(action, str) and action in _ACTIONS and isinstance(because, str) and because:
        return Action(action), because
    return Action.NONE, ""


_ACTIONS = {a.value for a in Action}


def _where(subject: str | Located, kw: dict[str, Any]) -> str:
    """The subject's text; a Located subject brings its devices (unless the call names them)."""
    if isinstance(subject, Located):
        kw.setdefault("devices", subject.devices)
        return subject.text
    return subject


def fault(id: str, host: str, subject: str | Located, message: str, **kw: Any) -> Finding:
    subject = _where(subject, kw)
    return Finding(id=id, severity=kw.pop("severity", Severity.FAIL), kind=Kind.FAULT, host=host,
                   subject=subject, message=message, **kw)


def limitation(id: str, host: str, subject: str | Located, message: str, **kw: Any) -> Finding:
    subject = _where(subject, kw)
    return Finding(id=id, severity=kw.pop("severity", Severity.INFO), kind=Kind.PLATFORM_LIMITATION,
                   host=host, subject=subject, message=message, **kw)


def unknown(id: str, host: str, subject: str | Located, message: str, **kw: Any) -> Finding:
    subject = _where(subject, kw)
    return Finding(id=id, severity=kw.pop("severity", Severity.INFO), kind=Kind.UNKNOWN, host=host,
                   subject=subject, message=message, **kw)
