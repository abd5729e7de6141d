"""Read the few facts that drift reports and machine outputs need, in ONE place.

The normalized fact shapes belong to the normalize modules (docs/facts-*.md).  Diff, Prometheus,
JUnit and the Ansible inventory only need a handful of numbers and identities from them, and they
all go through the functions here, so when a shape changes this is the one file to adapt.

Shapes read (tolerant: a missing or odd section yields None / empty, never an exception):

* `facts["gpus"]["gpus"]`: list of `{"index", "uuid", "bus_id", "name"}` (nvml).
* `facts["pcie"]["gpus"]`: list of `{"bus_id", ...}` (pcie), used when nvml did not run.
* `facts["nvlink"]["gpus"]`: list of `{"uuid"|"bus_id"|"index", "links": [{"link", "state"|"active",
  "remote_bus_id"}]}`; a link counts as up when `active` is true or `state` is up/active.
* `facts["topology"]`: `{"labels": [..]}` or `{"devices": [{"label", "bus_id"}]}` plus `"matrix"`
  (list of rows, or `{row: {col: level}}`).
* `facts["p2p"]`: any numeric leaf whose key path mentions `gbps` is a bandwidth figure; matrices
  (lists of rows) beside a `gpus`/`labels` list are labelled with those entries.
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

    @property
    def label(self) -> str:
        idx = f"GPU{self.index}" if self.index is not None else "GPU"
        return f"{idx} {self.bus_id or '?'}"


def gpus(facts: dict[str, Any] | None, source: str | None = None) -> list[GpuRef] | None:
    """The GPUs of a host from `source` ("gpus": NVML, "pcie": the bus); by default NVML's list,
    else the bus's.  None when that section is absent."""
    items = None
    for section in (source,) if source else ("gpus", "pcie"):
        items = _list_of_dicts(_section(facts, section), "gpus")
        if items is not None:
            break
    if items is None:
        return None
    out = []
    for i, g in enumerate(items):
        bus = g.get("bus_id")
        idx = g.get("index")
        out.append(GpuRef(
            uuid=g.get("uuid") if isinstance(g.get("uuid"), str) else None,
            bus_id=bus.lower() if isinstance(bus, str) else None,
            name=g.get("name") if isinstance(g.get("name"), str) else None,
            index=idx if isinstance(idx, int) and not isinstance(idx, bool) else i,
        ))
    return out


def gpu_count(facts: dict[str, Any] | None) -> int | None:
    g = gpus(facts)
    return None if g is None else len(g)


def _link_up(link: dict[str, Any]) -> bool:
    if isinstance(link.get("active"), bool):
        return bool(link["active"])
    return str(link.get("state", "")).lower() in UP_STATES


def nvlinks(facts: dict[str, Any] | None) -> dict[tuple[str, int], bool] | None:
    """(GPU key, link number) -> up; the GPU key is its bus id, else uuid, else `GPU<index>`."""
    items = _list_of_dicts(_section(facts, "nvlink"), "gpus")
    if items is None:
        return None
    out: dict[tuple[str, int], bool] = {}
    for gi, g in enumerate(items):
        key = g.get("bus_id") or g.get("uuid") or f"GPU{g.get('index', gi)}"
        links = g.get("links")
        if not isinstance(links, list):
            continue
        for li, link in enumerate(links):
            if not isinstance(link, dict):
                continue
            n = link.get("link", li)
            out[(str(key).lower() if g.get("bus_id") else str(key), int(n) if isinstance(n, int) else li)] = _link_up(link)
    return out


def nvlink_links_up(facts: dict[str, Any] | None) -> int | None:
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


def _walk_gbps(node: Any, path: str, labels: list[str] | None, out: dict[str, float]) -> None:
    if isinstance(node, dict):
        lab = node.get("gpus") if isinstance(node.get("gpus"), list) else node.get("labels")
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
                a = labels[i] if labels and i < len(labels) and not isinstance(v, dict) else str(i)
                _walk_gbps(v, f"{path}[{a}]", labels, out)
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
    pairs = [v for k, v in (bandwidths(facts) or {}).items() if "->" in k and "host" not in k.lower()
             and "bidir" not in k.lower()]
    return min(pairs) if pairs else None
