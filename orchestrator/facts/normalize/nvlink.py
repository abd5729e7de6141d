"""Normalize the `nvlink` probe's data into `facts["nvlink"]`: per-GPU links and the NVLink graph.

Shape: docs/facts-gpus.md.  Pure.  NV# follows nvidia-smi (reference section 4.4): direct links
count the active links whose remote end is the other GPU; on an NVSwitch fabric every pair of
GPUs with active switch links gets the smaller of their active switch-link counts.
"""

from __future__ import annotations

from typing import Any

from orchestrator.facts.model import NvlinkFacts, NvlinkGpu, NvlinkLink, NvlinkPair, NvSwitch
from orchestrator.facts.normalize.gpus import bus_id, unresponsive_calls

# What `nvidia-smi nvlink -s/-c` prints and NVML's probe does not read: kept when a text import sends it.
TEXT_LINK_KEYS = ("speed_gbps", "sysmem_atomics", "sli_supported", "link_supported")
# A source that cannot see remote ends (a text import, `remote_ends: false`): why pairs and switches are unknown.
NO_REMOTE_ENDS = {"pairs_unknown": "text does not tell direct GPU links from NVSwitch paths",
                  "nvswitches_unknown": "NVSwitches are not listed in nvidia-smi text"}


def _link(raw: dict[str, Any], gpu_bus: set[str], remote_ends: bool) -> NvlinkLink:
    remote = bus_id(raw.get("remote_bus_id"))
    rtype = raw.get("remote_type")
    state = raw.get("state")
    if remote in gpu_bus:
        rtype = "gpu"  # the remote's bus id is one of ours: a GPU whatever an old driver can say
    elif rtype is None and state == "up" and remote is None and remote_ends:
        rtype = "nvswitch"  # NCCL's rule: an active link with an invisible remote goes to a switch
    errors = raw.get("errors")
    out: NvlinkLink = {"link": raw.get("link"), "state": state, "version": raw.get("version"),
                       "remote_bus_id": remote, "remote_type": rtype,
                       "p2p_supported": raw.get("p2p_supported"), "sysmem_access": raw.get("sysmem_access"),
                       "p2p_atomics": raw.get("p2p_atomics"), "errors": errors if isinstance(errors, dict) else None,
                       "unknown": dict(raw.get("unknown") or {})}
    for key in TEXT_LINK_KEYS:
        if key in raw:
            out[key] = raw[key]  # type: ignore[literal-required]
    return out


def _counts(unknown: dict[str, Any], links: list[NvlinkLink], lost: bool, up: int,
            inactive: list[int | None]) -> tuple[int | None, int | None, list[int | None] | None]:
    """(links_total, links_up, inactive) of one GPU.  A source that lists only part of a GPU's links
    (a text excerpt, NVML's bare "all links are inActive", a topo -m NV# only) says so with
    `unknown["links_total"]`: then the count is null, the up links are a lower bound, and what it
    could not see at all (`unknown["links_up"]`, or no link listed) is null too."""
    counted = "links_total" not in unknown
    total: int | None = len(links) if counted and not (lost or "handle" in unknown) else None
    if unknown.get("links") == "NOT_SUPPORTED":
        total = 0
    seen_up = total is not None or (not counted and "links_up" not in unknown)
    seen_down = (counted or bool(links)) and "links_up" not in unknown
    return total, (up if seen_up else None), (inactive if seen_down else None)


def normalize(data: dict[str, Any]) -> NvlinkFacts:
    remote_ends = data.get("remote_ends") is not False  # the probe reads them; a text import cannot
    raw_gpus = [g for g in data.get("gpus") or [] if isinstance(g, dict)]
    order = [bus_id(g.get("bus_id")) for g in raw_gpus]
    gpu_bus = {b for b in order if b}
    n = len(raw_gpus)
    position: dict[str | None, int] = {}  # bus id -> ordinal without a scan of `order` per link
    for i, b in enumerate(order):
        position.setdefault(b, i)  # the first GPU with that bus id, as order.index would find
    direct = [[0] * n for _ in range(n)]
    switch_up = [0] * n
    switches: dict[str, NvSwitch] = {}
    gpus: list[NvlinkGpu] = []
    any_links = False
    for i, g in enumerate(raw_gpus):
        unknown = dict(g.get("unknown") or {})
        links = [_link(lk, gpu_bus, remote_ends) for lk in g.get("links") or [] if isinstance(lk, dict)]
        up = 0
        version = None  # the first active link's
        inactive = []
        direct_row = direct[i]
        for lk in links:  # one pass for every per-GPU figure: an NVSwitch GPU has 18 links
            state, rtype, remote = lk["state"], lk["remote_type"], lk["remote_bus_id"]
            if state == "up":
                up += 1
                version = version or lk["version"] or None
                if rtype == "gpu" and remote in position:
                    direct_row[position[remote]] += 1
                elif rtype == "nvswitch":
                    switch_up[i] += 1
            elif state == "down":
                inactive.append(lk["link"])
            if rtype == "nvswitch" and remote:
                sw = switches.get(remote)
                if sw is None:  # the switch's first link (a record made for every link was thrown away)
                    sw = switches[remote] = {"bus_id": remote, "links": 0, "links_up": 0, "gpus": []}
                sw["links"] += 1
                sw["links_up"] += 1 if state == "up" else 0
                if order[i] not in sw["gpus"]:
                    sw["gpus"].append(order[i])
        lost = "GPU_IS_LOST" in unknown.values() or any(
            "GPU_IS_LOST" in lk["unknown"].values() for lk in links if lk["unknown"])
        total, links_up, seen_inactive = _counts(unknown, links, lost, up, inactive)
        any_links = any_links or bool(links)
        gpus.append({
            "index": g.get("index"), "bus_id": order[i], "uuid": g.get("uuid"),
            "name": g.get("name"), "links_total": total, "links_up": links_up,
            "inactive": seen_inactive,
            "version": version, "lost": lost,
            "links": links, "unknown": unknown,
        })
    pairs = _pairs(gpus, direct, order)
    # a GPU whose links the source could not count leaves the host's totals unknown too
    uncounted = any("links_total" in g["unknown"] for g in gpus)
    out: NvlinkFacts = {
        "supported": any_links,
        "order": order,
        "gpus": gpus,
        "pairs": pairs if remote_ends else None,
        "nvswitches": sorted(switches.values(), key=lambda s: s["bus_id"]) if remote_ends else None,
        "nv": _nv_matrix(pairs, order, switch_up) if remote_ends else None,
        "links_total": None if uncounted else sum(g["links_total"] or 0 for g in gpus),
        "links_up_total": None if uncounted else sum(g["links_up"] or 0 for g in gpus),
        "driver_version": data.get("driver_version"),
    }
    if not remote_ends:
        out.update(NO_REMOTE_ENDS)  # type: ignore[typeddict-item]
    if data.get("unresponsive"):
        out["unresponsive"] = unresponsive_calls(data["unresponsive"])
    return out


def _pairs(gpus: list[NvlinkGpu], direct: list[list[int]], order: list[str | None]) -> list[NvlinkPair]:
    """Each GPU pair with direct links, counted once (a before b in CUDA order)."""
    n = len(gpus)
    pairs: list[NvlinkPair] = []
    for i in range(n):
        for j in range(i + 1, n):
            # both ends should agree; where they differ the smaller count is what works, unless one
            # end could not be read at all (lost GPU): then the readable end is all we know
            if gpus[i]["links_total"] is None or gpus[j]["links_total"] is None:
                c = max(direct[i][j], direct[j][i])
            else:
                c = min(direct[i][j], direct[j][i])
            if c:
                pairs.append({"a": order[i], "b": order[j], "links": c})
    return pairs


def _nv_matrix(pairs: list[NvlinkPair], order: list[str | None], switch_up: list[int]) -> list[list[int | None]]:
    """nvidia-smi's NV# between every two GPUs: direct links plus the fabric's share (None: none)."""
    n = len(order)
    pair_links = {(p["a"], p["b"]): p["links"] for p in pairs}
    nv: list[list[int | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j:
                direct_links = pair_links.get((order[i], order[j])) or pair_links.get((order[j], order[i])) or 0
                # fabric: the smaller switch-link count of the two
                nv[i][j] = direct_links + min(switch_up[i], switch_up[j]) or None
    return nv
