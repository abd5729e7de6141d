"""Normalize the `nvlink` probe's data into `facts["nvlink"]`: per-GPU links and the NVLink graph.

Shape: docs/facts-gpus.md.  Pure.  NV# follows nvidia-smi (reference section 4.4): direct links
count the active links whose remote end is the other GPU; on an NVSwitch fabric every pair of
GPUs with active switch links gets the smaller of their active switch-link counts.
"""

from __future__ import annotations

from typing import Any

from orchestrator.facts.model import NvlinkFacts, NvlinkGpu, NvlinkLink, NvlinkPair, NvSwitch
from orchestrator.facts.normalize.gpus import bus_id, unresponsive_calls


def _link(raw: dict[str, Any], gpu_bus: set[str]) -> NvlinkLink:
    remote = bus_id(raw.get("remote_bus_id"))
    rtype = raw.get("remote_type")
    state = raw.get("state")
    if remote in gpu_bus:
        rtype = "gpu"  # the remote's bus id is one of ours: a GPU whatever an old driver can say
    elif rtype is None and state == "up" and remote is None:
        rtype = "nvswitch"  # NCCL's rule: an active link with an invisible remote goes to a switch
    errors = raw.get("errors")
    return {"link": raw.get("link"), "state": state, "version": raw.get("version"),
            "remote_bus_id": remote, "remote_type": rtype,
            "p2p_supported": raw.get("p2p_supported"), "sysmem_access": raw.get("sysmem_access"),
            "p2p_atomics": raw.get("p2p_atomics"), "errors": errors if isinstance(errors, dict) else None,
            "unknown": dict(raw.get("unknown") or {})}


def normalize(data: dict[str, Any]) -> NvlinkFacts:
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
        links = [_link(lk, gpu_bus) for lk in g.get("links") or [] if isinstance(lk, dict)]
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
                sw = switches.setdefault(remote, {"bus_id": remote, "links": 0, "links_up": 0, "gpus": []})
                sw["links"] += 1
                sw["links_up"] += 1 if state == "up" else 0
                if order[i] not in sw["gpus"]:
                    sw["gpus"].append(order[i])
        lost = "GPU_IS_LOST" in unknown.values() or any(
            "GPU_IS_LOST" in lk["unknown"].values() for lk in links if lk["unknown"])
        total: int | None = len(links) if not (lost or "handle" in unknown) else None
        if unknown.get("links") == "NOT_SUPPORTED":
            total = 0
        any_links = any_links or bool(links)
        gpus.append({
            "index": g.get("index"), "bus_id": order[i], "uuid": g.get("uuid"),
            "name": g.get("name"), "links_total": total, "links_up": up if total is not None else None,
            "inactive": inactive,
            "version": version, "lost": lost,
            "links": links, "unknown": unknown,
        })
    pairs = _pairs(gpus, direct, order)
    nv = _nv_matrix(pairs, order, switch_up)
    out: NvlinkFacts = {
        "supported": any_links,
        "order": order,
        "gpus": gpus,
        "pairs": pairs,
        "nvswitches": sorted(switches.values(), key=lambda s: s["bus_id"]),
        "nv": nv,
        "links_total": sum(g["links_total"] or 0 for g in gpus),
        "links_up_total": sum(g["links_up"] or 0 for g in gpus),
        "driver_version": data.get("driver_version"),
    }
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
