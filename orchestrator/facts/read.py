"""Read the few facts that drift reports and machine outputs need, in ONE place.

The normalized fact shapes are declared in facts/model.py (docs/facts-*.md); every reader here
takes a host's `Facts`, so mypy holds each key it reads to the model.  Diff, Prometheus, JUnit,
the CSV tables and the Ansible inventory need only a handful of numbers and identities, and they
all go through the functions here.

Tolerant at run time: facts come from stored runs, which may be old or damaged, so a missing or
odd section yields None / empty, never an exception.  The p2p section is read as every numeric
leaf whose key path mentions `gbps` (`bandwidths`), so drift compares each figure of every table
the section holds, a table added later included, without a list of known keys here: matrices
(lists of rows) beside an `order`/`gpus`/`labels` list are labelled with those entries, list
records by their `src_bus_id`/`dst_bus_id`, `a_bus_id`/`b_bus_id` or `bus_id`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from orchestrator.facts.model import Facts, GpuPcie, GpusFacts, HostBoard, HostDriver, HostFacts, NvlinkGpu

UP_STATES = ("up", "active", "enabled")

T = TypeVar("T")


def _facts(facts: Facts | None) -> Facts:
    return facts if isinstance(facts, dict) else {}


def host_facts(record: Mapping[str, Any]) -> Facts:
    """A fleet.json host record's facts (empty when it has none, or they are not an object)."""
    facts = record.get("facts")
    return cast(Facts, facts) if isinstance(facts, dict) else {}  # each section is read tolerantly


def _dict(value: T | None) -> T | None:
    """`value` when it is a JSON object (a section or record of the model), else None."""
    return value if isinstance(value, dict) else None


def _dicts(value: list[T] | None) -> list[T] | None:
    """The records of a list (entries that are not objects dropped); None when it is no list."""
    if not isinstance(value, list):
        return None
    return [x for x in value if isinstance(x, dict)]


@dataclass(frozen=True)
class GpuRef:
    uuid: str | None
    bus_id: str | None
    name: str | None
    index: int | None
    lost: bool = False  # NVML answered GPU_IS_LOST: listed, but fallen off the bus

    @property
    def label(self) -> str:
        idx = f"GPU{self.index}" if self.index is not None else "GPU"
        return f"{idx} {self.bus_id or '?'}"


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _index(v: Any, position: int) -> int:
    """A GPU's index as its section gives it, else its position in the section's list."""
    n = _int(v)
    return position if n is None else n


def _lower(v: Any) -> str | None:
    s = _str(v)
    return s.lower() if s else None


def _nvml_gpus(facts: Facts | None) -> list[Any] | None:
    section: GpusFacts | None = _dict(_facts(facts).get("gpus"))
    return _dicts(section.get("list")) if section else None


def gpus(facts: Facts | None, source: str | None = None) -> list[GpuRef] | None:
    """The GPUs of a host from `source` ("gpus": NVML, "pcie": the bus); by default NVML's list,
    else the bus's.  None when that section is absent."""
    if source in (None, "gpus"):
        items = _nvml_gpus(facts)
        if items is not None:
            return [GpuRef(uuid=_str(g.get("uuid")), bus_id=_lower(g.get("bus_id")), name=_str(g.get("name")),
                           index=_index(g.get("index"), i), lost=g.get("lost") is True)
                    for i, g in enumerate(items)]
    if source in (None, "pcie"):
        pcie = _dict(_facts(facts).get("pcie"))
        bdfs = pcie.get("gpus") if pcie else None
        if isinstance(bdfs, list):
            return [GpuRef(uuid=None, bus_id=b.lower(), name=None, index=i)
                    for i, b in enumerate(x for x in bdfs if isinstance(x, str))]
    return None


def gpu_count(facts: Facts | None) -> int | None:
    g = gpus(facts)
    return None if g is None else len(g)


def _nvlink_gpus(facts: Facts | None) -> list[NvlinkGpu] | None:
    section = _dict(_facts(facts).get("nvlink"))
    return _dicts(section.get("gpus")) if section else None


def _link_up(state: Any) -> bool | None:
    if state is None:
        return None  # NVML could not say: unknown, not down
    return str(state).lower() in UP_STATES


def nvlinks(facts: Facts | None) -> dict[tuple[str, int], bool | None] | None:
    """(GPU key, link number) -> up (None: state unknown); the GPU key is its bus id, else uuid,
    else `GPU<index>`."""
    items = _nvlink_gpus(facts)
    if items is None:
        return None
    out: dict[tuple[str, int], bool | None] = {}
    for gi, g in enumerate(items):
        key = _lower(g.get("bus_id")) or _str(g.get("uuid")) or f"GPU{g.get('index', gi)}"
        for li, link in enumerate(_dicts(g.get("links")) or []):
            n = _int(link.get("link"))
            out[(key, li if n is None else n)] = _link_up(link.get("state"))
    return out


def nvlink_links_up(facts: Facts | None) -> int | None:
    section = _dict(_facts(facts).get("nvlink"))
    total = _int(section.get("links_up_total")) if section else None
    if total is not None:
        return total
    links = nvlinks(facts)
    return None if links is None else sum(1 for up in links.values() if up)


def level_matrix(facts: Facts | None) -> dict[tuple[str, str], str] | None:
    """(row, column) -> level (NV#/PIX/PXB/PHB/NODE/SYS) of the topology section; devices named by
    bus id where known, so a GPU that disappears does not shift every later index."""
    topo = _dict(_facts(facts).get("topology"))
    matrix = topo.get("matrix") if topo else None
    if topo is None or not isinstance(matrix, list):
        return None
    devices = topo.get("devices")
    labels = [str(d.get("bus_id") or d.get("label") or i) if isinstance(d, dict) else str(d)
              for i, d in enumerate(devices if isinstance(devices, list) else [])]
    out: dict[tuple[str, str], str] = {}
    n = len(labels)  # rows and columns past the labels name no device: never read
    for i, row in enumerate(matrix[:n]):
        if not isinstance(row, list):
            continue
        a = labels[i]
        for j, level in enumerate(row[:n]):
            if level is not None and i != j:
                out[(a, labels[j])] = str(level)
    return out


def _item_label(item: Any, i: int, labels: list[str] | None) -> str:
    """A list entry named by what it measures, not by its position (which moves when a GPU goes)."""
    if isinstance(item, dict):
        for a, b, sep in (("src_bus_id", "dst_bus_id", "->"), ("a_bus_id", "b_bus_id", "<->")):
            if isinstance(item.get(a), str) and isinstance(item.get(b), str):
                return f"{item[a]}{sep}{item[b]}"
        if isinstance(item.get("bus_id"), str):
            return str(item["bus_id"])
        return str(i)
    return labels[i] if labels and i < len(labels) else str(i)


def _walk_gbps(node: Any, path: str, labels: list[str] | None, out: dict[str, float]) -> None:
    if isinstance(node, dict):
        lab = next((node[k] for k in ("order", "gpus", "labels") if isinstance(node.get(k), list)), None)
        if isinstance(lab, list):
            labels = [str(x.get("bus_id") or x.get("index")) if isinstance(x, dict) else str(x) for x in lab]
        for k, v in node.items():
            _walk_gbps(v, f"{path}.{k}" if path else str(k), labels, out)
    elif isinstance(node, list):
        is_matrix = bool(node) and all(isinstance(r, list) for r in node)
        for i, v in enumerate(node):
            if is_matrix and isinstance(v, list):
                for j, x in enumerate(v):
                    if i == j:  # a GPU to itself is local memory bandwidth, not a pair
                        continue
                    a = labels[i] if labels and i < len(labels) else str(i)
                    b = labels[j] if labels and j < len(labels) else str(j)
                    _walk_gbps(x, f"{path}[{a}->{b}]", labels, out)
            else:
                _walk_gbps(v, f"{path}[{_item_label(v, i, labels)}]", labels, out)
    elif isinstance(node, (int, float)) and not isinstance(node, bool) and "gbps" in path.lower():
        out[path] = float(node)


def bandwidths(facts: Facts | None) -> dict[str, float] | None:
    """Every measured bandwidth figure of the p2p section, by a readable path -> GB/s."""
    p2p = _dict(_facts(facts).get("p2p"))
    if p2p is None:
        return None
    out: dict[str, float] = {}
    _walk_gbps(p2p, "", None, out)
    return out


def p2p_min_gbps(facts: Facts | None) -> float | None:
    """The slowest GPU->GPU copy: the summary's minimum if it has one, else the smallest
    off-diagonal GPU-pair figure."""
    p2p = _dict(_facts(facts).get("p2p"))
    if p2p is None:
        return None
    summary: Mapping[str, Any] = _dict(p2p.get("summary")) or {}
    for holder in (p2p, summary):
        low = holder.get("min_gbps")
        if isinstance(low, (int, float)) and not isinstance(low, bool):
            return float(low)
    # one direction only (a->b, never the a<->b totals), GPU to GPU (no host copies); the copy
    # engine figures when there are any, as p2pBandwidthLatencyTest reports them
    pairs = {k: v for k, v in (bandwidths(facts) or {}).items()
             if "->" in k and "<->" not in k and "host" not in k.lower() and "bidir" not in k.lower()}
    ce = [v for k, v in pairs.items() if "ce" in k.rsplit(".", 1)[-1].lower()]
    values = ce or list(pairs.values())
    return min(values) if values else None


def gpu_p2p_min_gbps(facts: Facts | None) -> dict[str, float] | None:
    """GPU bus id -> its slowest measured one-way copy-engine GPU<->GPU figure (as source or
    destination), from the p2p section's `pairs`; None when p2p did not run."""
    p2p = _dict(_facts(facts).get("p2p"))
    pairs = _dicts(p2p.get("pairs")) if p2p else None
    if pairs is None:
        return None
    out: dict[str, float] = {}
    for p in pairs:
        v = p.get("ce_gbps")
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        for key in ("src_bus_id", "dst_bus_id"):
            bus = _lower(p.get(key))
            if bus:
                out[bus] = min(out.get(bus, float(v)), float(v))
    return out


@dataclass
class GpuGauges:
    """What the per-GPU machine outputs carry; None where nothing measured it."""

    index: int | None
    bus_id: str | None
    uuid: str | None
    name: str | None
    nvlink_links_up: int | None
    nvlink_links: int | None
    p2p_min_gbps: float | None
    pcie_gen: int | None
    pcie_width: int | None
    pcie_gen_max: int | None
    pcie_width_max: int | None


_GPU_KEYS = ("bus_id", "uuid", "index")  # how a GPU of one section is found in another, best first


def _gpu_keys(g: Mapping[str, Any]) -> list[tuple[str, Any]]:
    # a bus id, UUID or index is a string or a number; any other value (a damaged record) names no GPU
    return [(k, g[k]) for k in _GPU_KEYS if isinstance(g.get(k), (str, int))]


def gpu_gauges(facts: Facts | None) -> list[GpuGauges]:
    """One record per NVML GPU: its NVLink links (nvlink section, matched by bus id, else UUID,
    else index), its slowest P2P pair (p2p) and its PCIe link (nvml)."""
    links: dict[tuple[str, Any], NvlinkGpu] = {}
    for lg in _nvlink_gpus(facts) or []:
        for key in _gpu_keys(lg):
            links.setdefault(key, lg)
    p2p = gpu_p2p_min_gbps(facts) or {}
    out = []
    for i, g in enumerate(_nvml_gpus(facts) or []):
        bus = _lower(g.get("bus_id"))
        lk: Mapping[str, Any] = next((links[k] for k in _gpu_keys(g) if k in links), {})
        pcie: GpuPcie | Mapping[str, Any] = _dict(g.get("pcie")) or {}
        out.append(GpuGauges(
            index=_index(g.get("index"), i), bus_id=bus,
            uuid=_str(g.get("uuid")), name=_str(g.get("name")),
            nvlink_links_up=_int(lk.get("links_up")), nvlink_links=_int(lk.get("links_total")),
            p2p_min_gbps=p2p.get(bus) if bus else None,
            pcie_gen=_int(pcie.get("gen_current")), pcie_width=_int(pcie.get("width_current")),
            pcie_gen_max=_int(pcie.get("gen_max")), pcie_width_max=_int(pcie.get("width_max"))))
    return out


def host_identity(facts: Facts | None) -> dict[str, str | None]:
    """The procurement-list identity of a host (DMI board, BIOS, serials, driver, GPU model and
    count): what the CSV host rows carry.  A DMI value that needs root reads None."""
    host: HostFacts | Mapping[str, Any] = _dict(_facts(facts).get("host")) or {}
    board: HostBoard | Mapping[str, Any] = _dict(host.get("board")) or {}
    driver: HostDriver | Mapping[str, Any] = _dict(host.get("driver")) or {}

    def dmi(key: str) -> str | None:
        return _str(board.get(key))

    names = sorted({g.name for g in gpus(facts) or [] if g.name})
    gsec = _dict(_facts(facts).get("gpus"))
    drv = _str(driver.get("version")) or (_str(gsec.get("driver_version")) if gsec else None)
    return {
        "system_vendor": dmi("system_vendor"), "system_product": dmi("product"),
        "board_vendor": dmi("vendor"), "board_model": dmi("model"),
        "bios_vendor": dmi("bios_vendor"), "bios_version": dmi("bios_version"), "bios_date": dmi("bios_date"),
        "system_serial": dmi("system_serial"), "board_serial": dmi("board_serial"),
        "driver": drv, "gpu_model": " / ".join(names) or None,
    }
