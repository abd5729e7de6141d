"""Read the few facts that drift reports and machine outputs need, in ONE place.

The normalized fact shapes belong to the normalize modules (docs/facts-*.md).  Diff, Prometheus,
JUnit and the Ansible inventory only need a handful of numbers and identities from them, and they
all go through the functions here, so when a shape changes this is the one file to adapt.

Shapes read (docs/facts-gpus.md, docs/facts-pcie.md; tolerant: a missing or odd section yields
None / empty, never an exception):

* `facts["gpus"]["list"]`: `[{"index", "uuid", "bus_id", "name", "lost"}]` (nvml).
* `facts["pcie"]["gpus"]`: sorted GPU bus ids (pcie), used when nvml did not run.
* `facts["nvlink"]["gpus"]`: `[{"bus_id", "uuid", "index", "links": [{"link", "state": up|down|null}]}]`
  and `links_up_total`.
* `facts["topology"]`: `{"devices": [{"name", "kind", "bus_id"}], "matrix": [[level|null]]}`.
* `facts["p2p"]` (normalized shape not yet published; read like the probe's raw data): any numeric
  leaf whose key path mentions `gbps` is a bandwidth figure; matrices (lists of rows) beside an
  `order`/`gpus`/`labels` list are labelled with those entries, list records by their
  `src_bus_id`/`dst_bus_id`, `a_bus_id`/`b_bus_id` or `bus_id`; a `min_gbps` at the top or under
  `summary` is the slowest pair, else the smallest one-way copy-engine GPU->GPU figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

UP_STATES = ("up", "active", "enabled")


def _section(facts: dict[str, Any] | None, name: str) -> Any:
    if not isinstance(facts, dict):
        return None
    return facts.get(name)


def _list_of_dicts(value: Any, key: str) -> list[dict[str, Any]] | None:
    if isinstance(value, dict):
        value = value.get(key)
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


def gpus(facts: dict[str, Any] | None, source: str | None = None) -> list[GpuRef] | None:
    """The GPUs of a host from `source` ("gpus": NVML, "pcie": the bus); by default NVML's list,
    else the bus's.  None when that section is absent."""
    if source in (None, "gpus"):
        items = _list_of_dicts(_section(facts, "gpus"), "list")
        if items is not None:
            out = []
            for i, g in enumerate(items):
                idx = g.get("index")
                bus = _str(g.get("bus_id"))
                out.append(GpuRef(uuid=_str(g.get("uuid")), bus_id=bus.lower() if bus else None,
                                  name=_str(g.get("name")),
                                  index=idx if isinstance(idx, int) and not isinstance(idx, bool) else i,
                                  lost=g.get("lost") is True))
            return out
    if source in (None, "pcie"):
        pcie = _section(facts, "pcie")
        bdfs = pcie.get("gpus") if isinstance(pcie, dict) else None
        if isinstance(bdfs, list):
            return [GpuRef(uuid=None, bus_id=b.lower(), name=None, index=i)
                    for i, b in enumerate(x for x in bdfs if isinstance(x, str))]
    return None


def gpu_count(facts: dict[str, Any] | None) -> int | None:
    g = gpus(facts)
    return None if g is None else len(g)


def _link_up(link: dict[str, Any]) -> bool | None:
    state = link.get("state")
    if state is None:
        return None  # NVML could not say: unknown, not down
    return str(state).lower() in UP_STATES


def nvlinks(facts: dict[str, Any] | None) -> dict[tuple[str, int], bool | None] | None:
    """(GPU key, link number) -> up (None: state unknown); the GPU key is its bus id, else uuid,
    else `GPU<index>`."""
    items = _list_of_dicts(_section(facts, "nvlink"), "gpus")
    if items is None:
        return None
    out: dict[tuple[str, int], bool | None] = {}
    for gi, g in enumerate(items):
        bus = _str(g.get("bus_id"))
        key = bus.lower() if bus else (_str(g.get("uuid")) or f"GPU{g.get('index', gi)}")
        links = g.get("links")
        if not isinstance(links, list):
            continue
        for li, link in enumerate(links):
            if isinstance(link, dict):
                n = link.get("link", li)
                out[(key, n if isinstance(n, int) else li)] = _link_up(link)
    return out


def nvlink_links_up(facts: dict[str, Any] | None) -> int | None:
    section = _section(facts, "nvlink")
    if isinstance(section, dict) and isinstance(section.get("links_up_total"), int):
        return int(section["links_up_total"])
    links = nvlinks(facts)
    return None if links is None else sum(1 for up in links.values() if up)


def level_matrix(facts: dict[str, Any] | None) -> dict[tuple[str, str], str] | None:
    """(row, column) -> level (NV#/PIX/PXB/PHB/NODE/SYS); devices named by bus id where known, so
    a GPU that disappears does not shift every later index."""
    topo = _section(facts, "topology")
    if not isinstance(topo, dict):
        return None
    matrix = topo.get("matrix")
    labels: list[str] = []
    if isinstance(topo.get("devices"), list):
        for i, d in enumerate(topo["devices"]):
            if isinstance(d, dict):
                labels.append(str(d.get("bus_id") or d.get("label") or i))
            else:
                labels.append(str(d))
    elif isinstance(topo.get("labels"), list):
        labels = [str(x) for x in topo["labels"]]
    out: dict[tuple[str, str], str] = {}
    if isinstance(matrix, dict):
        for r, row in matrix.items():
            if isinstance(row, dict):
                for c, level in row.items():
                    if r != c and level is not None:
                        out[(str(r), str(c))] = str(level)
    elif isinstance(matrix, list):
        for i, row in enumerate(matrix):
            if not isinstance(row, list):
                continue
            for j, level in enumerate(row):
                if i != j and level is not None and i < len(labels) and j < len(labels):
                    out[(labels[i], labels[j])] = str(level)
    else:
        return None
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


def bandwidths(facts: dict[str, Any] | None) -> dict[str, float] | None:
    """Every measured bandwidth figure of the p2p section, by a readable path -> GB/s."""
    p2p = _section(facts, "p2p")
    if not isinstance(p2p, dict):
        return None
    out: dict[str, float] = {}
    _walk_gbps(p2p, "", None, out)
    return out


def p2p_min_gbps(facts: dict[str, Any] | None) -> float | None:
    """The slowest GPU->GPU copy: the section's own minimum if it has one, else the smallest
    off-diagonal GPU-pair figure."""
    p2p = _section(facts, "p2p")
    if not isinstance(p2p, dict):
        return None
    for holder in (p2p, p2p.get("summary")):
        if isinstance(holder, dict) and isinstance(holder.get("min_gbps"), (int, float)):
            return float(holder["min_gbps"])
    # one direction only (a->b, never the a<->b totals), GPU to GPU (no host copies); the copy
    # engine figures when there are any, as p2pBandwidthLatencyTest reports them
    pairs = {k: v for k, v in (bandwidths(facts) or {}).items()
             if "->" in k and "<->" not in k and "host" not in k.lower() and "bidir" not in k.lower()}
    ce = [v for k, v in pairs.items() if "ce" in k.rsplit(".", 1)[-1].lower()]
    values = ce or list(pairs.values())
    return min(values) if values else None


# The severity order (worst first) is verdict/findings.py:SEVERITY_ORDER; the facts layer sits
# below the verdict and cannot import it, so this copy is held equal to it by
# tests/verdict/test_vocabulary.py.
SEVERITIES = ("fail", "warn", "info")


def findings_by_host(fleet: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """host -> its findings (fleet.json finding dicts), in run order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for f in fleet.get("findings") or []:
        if isinstance(f, dict):
            out.setdefault(str(f.get("host")), []).append(f)
    return out


def severity_counts(fleet: dict[str, Any]) -> dict[str, dict[str, int]]:
    """host -> {fail, warn, info: number of findings}; a host without findings is not a key."""
    counts: dict[str, dict[str, int]] = {}
    for host, findings in findings_by_host(fleet).items():
        for f in findings:
            if f.get("severity") in SEVERITIES:
                counts.setdefault(host, dict.fromkeys(SEVERITIES, 0))[f["severity"]] += 1
    return counts


def gpu_p2p_min_gbps(facts: dict[str, Any] | None) -> dict[str, float] | None:
    """GPU bus id -> its slowest measured one-way copy-engine GPU<->GPU figure (as source or
    destination), from the p2p section's `pairs`; None when p2p did not run."""
    p2p = _section(facts, "p2p")
    pairs = _list_of_dicts(p2p, "pairs")
    if pairs is None:
        return None
    out: dict[str, float] = {}
    for p in pairs:
        v = p.get("ce_gbps")
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        for key in ("src_bus_id", "dst_bus_id"):
            bus = _str(p.get(key))
            if bus:
                out[bus.lower()] = min(out.get(bus.lower(), float(v)), float(v))
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


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def gpu_gauges(facts: dict[str, Any] | None) -> list[GpuGauges]:
    """One record per NVML GPU: its NVLink links (nvlink section, matched by bus id, else UUID,
    else index), its slowest P2P pair (p2p) and its PCIe link (nvml)."""
    items = _list_of_dicts(_section(facts, "gpus"), "list") or []
    nvl = _list_of_dicts(_section(facts, "nvlink"), "gpus") or []
    links: dict[tuple[str, Any], dict[str, Any]] = {}
    for lg in nvl:
        for key in ("bus_id", "uuid", "index"):
            if lg.get(key) is not None:
                links.setdefault((key, lg[key]), lg)
    p2p = gpu_p2p_min_gbps(facts) or {}
    out = []
    for i, g in enumerate(items):
        bus = _str(g.get("bus_id"))
        lk = next((links[(k, g[k])] for k in ("bus_id", "uuid", "index")
                   if g.get(k) is not None and (k, g[k]) in links), {})
        pcie: dict[str, Any] = g["pcie"] if isinstance(g.get("pcie"), dict) else {}
        out.append(GpuGauges(
            index=_int(g.get("index")) if _int(g.get("index")) is not None else i, bus_id=bus.lower() if bus else None,
            uuid=_str(g.get("uuid")), name=_str(g.get("name")),
            nvlink_links_up=_int(lk.get("links_up")), nvlink_links=_int(lk.get("links_total")),
            p2p_min_gbps=p2p.get(bus.lower()) if bus else None,
            pcie_gen=_int(pcie.get("gen_current")), pcie_width=_int(pcie.get("width_current")),
            pcie_gen_max=_int(pcie.get("gen_max")), pcie_width_max=_int(pcie.get("width_max"))))
    return out


def host_identity(facts: dict[str, Any] | None) -> dict[str, str | None]:
    """The procurement-list identity of a host (DMI board, BIOS, serials, driver, GPU model and
    count): what the CSV host rows carry.  A DMI value that needs root reads None."""
    section = _section(facts, "host")
    host: dict[str, Any] = section if isinstance(section, dict) else {}
    board: dict[str, Any] = host["board"] if isinstance(host.get("board"), dict) else {}
    driver: dict[str, Any] = host["driver"] if isinstance(host.get("driver"), dict) else {}

    def dmi(key: str) -> str | None:
        return _str(board.get(key))

    gl = gpus(facts)
    names = sorted({g.name for g in gl or [] if g.name})
    gsec = _section(facts, "gpus")
    drv = _str(driver.get("version")) or (_str(gsec.get("driver_version")) if isinstance(gsec, dict) else None)
    return {
        "system_vendor": dmi("system_vendor"), "system_product": dmi("product"),
        "board_vendor": dmi("vendor"), "board_model": dmi("model"),
        "bios_vendor": dmi("bios_vendor"), "bios_version": dmi("bios_version"), "bios_date": dmi("bios_date"),
        "system_serial": dmi("system_serial"), "board_serial": dmi("board_serial"),
        "driver": drv, "gpu_model": " / ".join(names) or None,
    }
