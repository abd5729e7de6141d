"""What a host is supposed to be: the `probe_expect` mapping of inventory vars or a playbook.

Keys are fixed; a typo is an error (ExpectationError), never silence.  Where a key is absent,
checks derive the expectation from the hardware found (orchestrator.facts.gpu_models) and peers.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from typing import Any


class ExpectationError(ValueError):
    pass


def _did_you_mean(key: str, known: Any) -> str:
    """"gpu_cont (did you mean gpu_count?)": the closest known key, when one is close."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f"{key} (did you mean {close[0]}?)" if close else key


@dataclass(frozen=True)
class Expectations:
    gpu_count: int | None = None
    gpu_model: str | None = None  # substring match on the NVML name, case-insensitive: "H100"
    nvlink_links_per_gpu: int | None = None  # active links each GPU must have
    nvlink_all_up: bool | None = None  # every link the GPU has must be active
    nvswitch_count: int | None = None
    p2p_min_gbps: float | None = None  # floor for unidirectional GPU->GPU copy-engine bandwidth
    host_gpu_min_gbps: float | None = None  # floor for host<->GPU pinned copies
    pcie_gen: int | None = None  # GPU link generation (current) must be at least this
    pcie_width: int | None = None  # GPU link width (current) must be at least this
    gpu_nic_level: str | None = None  # each GPU must have a NIC at this level or closer: PIX, PXB, PHB, NODE
    nic_count: int | None = None
    mig: bool | None = None  # False: MIG must be off on every GPU
    virtualization: str | None = None  # "none": bare metal required; or a hypervisor name
    board_vendor: str | None = None
    board_model: str | None = None
    driver_min: str | None = None  # "535.104"
    driver_max: str | None = None
    acs_allowed: bool | None = None  # False (default on bare metal): ACS redirect on GPU paths is a finding
    nic_ports_up: bool | None = None  # True: every InfiniBand/RoCE port must be ACTIVE / LinkUp
    nic_rate_gbps: float | None = None  # each active InfiniBand/RoCE port must run at least this rate
    gdr: bool | None = None  # True: GPUDirect RDMA must be usable between the GPUs and the NICs
    # True: the driver and the ConnectX/BlueField firmware must carry the fixes of NVIDIA's security
    # bulletins (facts/security.py; `--security-floor FILE` sets it for every host)
    security_floor: bool | None = None
    # True: the scheduler's view of the host was given (`--slurm`, `--k8s-nodes`): its GPUs and state
    # are reconciled with the verdict (verdict/checks/scheduler.py); set by the plan, like the floor
    scheduler: bool | None = None

    @classmethod
    def from_mapping(cls, raw: Any, where: str = "probe_expect") -> Expectations:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise ExpectationError(f"{where} must be a mapping of expectation keys, got {type(raw).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ExpectationError(
                f"{where}: unknown expectation key(s) {', '.join(_did_you_mean(str(k), known) for k in unknown)}; "
                f"known keys: {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = {}
        for key, value in raw.items():
            values[key] = _coerce(key, known[key].type, value, where)
        return cls(**values)

    def merged(self, other: Expectations) -> Expectations:
        """`other` wins where it sets a value (a play's expectations over the inventory's)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for f in fields(other):
            v = getattr(other, f.name)
            if v is not None:
                values[f.name] = v
        return Expectations(**values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


_LEVELS = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
_MIN_INT = {"pcie_gen": 1, "pcie_width": 1}  # counts may be 0 (a CPU node has no GPU); a link has a lane


def _coerce(key: str, type_name: Any, value: Any, where: str) -> Any:
    t = str(type_name)
    try:
        if value is None:
            return None
        if t.startswith("int"):
            if isinstance(value, bool):
                raise TypeError
            if isinstance(value, float) and not value.is_integer():
                raise ValueError  # 8.5 GPUs is a typo, not 8
            number = int(value)
            if number < _MIN_INT.get(key, 0):
                raise ExpectationError(f"{where}.{key} must be at least {_MIN_INT.get(key, 0)}, got {value!r}")
            return number
        if t.startswith("float"):
            if isinstance(value, bool):
                raise TypeError
            real = float(value)
            if not real >= 0:  # also rejects NaN
                raise ExpectationError(f"{where}.{key} must be a number >= 0, got {value!r}")
            return real
        if t.startswith("bool"):
            if not isinstance(value, bool):
                raise TypeError
            return value
        value = str(value)
        if key == "gpu_nic_level" and value.upper() not in _LEVELS:
            raise ExpectationError(f"{where}.gpu_nic_level must be one of {', '.join(_LEVELS)}, got {value!r}")
        return value.upper() if key == "gpu_nic_level" else value
    except ExpectationError:
        raise  # already says exactly what is wrong
    except (TypeError, ValueError):
        raise ExpectationError(f"{where}.{key}: {value!r} is not a valid {t.split(' ')[0]}") from None


def usable_part(raw: Any, where: str = "probe_expect") -> tuple[dict[str, Any], list[str], tuple[str, ...]]:
    """The keys of a stored probe_expect this program can judge with, why each other was left out
    (one phrase each), and the keys left out.  A run is not its inventory: where a typo in an
    inventory stops the run before it starts, a run stored by another fleetprobe or a hand-edited
    _host.json costs only the keys it got wrong (a mapping that is not one: all of it, and it may
    have meant any key)."""
    known = {f.name: f for f in fields(Expectations)}
    if raw is None:
        return {}, [], ()
    if not isinstance(raw, dict):
        return {}, [f"{where} must be a mapping of expectation keys, got {type(raw).__name__}"], tuple(known)
    kept: dict[str, Any] = {}
    left: list[str] = []
    for key, value in raw.items():
        if key not in known:
            left.append(f"{where}: unknown expectation key {_did_you_mean(str(key), known)}")
            continue
        try:
            _coerce(key, known[key].type, value, where)
        except ExpectationError as e:
            left.append(str(e))
            continue
        kept[key] = value
    return kept, left, tuple(str(k) for k in raw if k not in kept)
