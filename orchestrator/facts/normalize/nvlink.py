"""Normalize the `nvlink` probe's data into `facts["nvlink"]`: per-GPU links and the NVLink graph.

Shape: docs/facts-gpus.md.  Pure.  NV# follows nvidia-smi (reference section 4.4): direct links
count the active links whose remote end is the other GPU; on an NVSwitch fabric every pair of
GPUs with active switch links gets the smaller of their active switch-link counts.
"""

from __future__ import annotations

from typing import Any

from orchestrator.facts.model import NvlinkFacts, NvlinkGpu, NvlinkLink, NvlinkPair, NvSwitch
from orchestrator.facts.normalize.gpus import bus_id


def _link(raw: dict[str, Any], gpu_bus: set[str]) -> NvlinkLink:
    get = raw.get
    u = get("unknown")
    unknown = dict(u) if u else {}
    remote = bus_id(get("remote_bus_id"))
    rtype = get("remote_type")
    state = get("state")
    if remote in gpu_bus:
        rtype = "gpu"  # the remote's bus id is one of ours: a GPU whatever an old driver can say
    elif rtype is None and state == "up" and remote is None:
        rtype = "nvswitch"  # NCCL's rule: an active link with an invisible remote goes to a switch
    errors = get("errors")
    return {"link": get("link"), "state": state, "version": get("version"),
            "remote_bus_id": remote, "remote_type": rtype,
            "p2p_supported": get("p2p_supported"), "sysmem_access": get("sysmem_access"),
            "p2p_atomics": get("p2p_atomics"), "errors": errors if isinstance(errors, dict) else None,
            "unknown": unknown}


def normalize(data: dict[str, Any]) -> NvlinkFacts:
    raw_gpus = [g for g in data.get("gpus") or [] if isinstance(g, dict)]
    order = [bus_id(g.get("bus_id")) for g in raw_gpus]
    gpu_bus = {b for b in order if b}
    n = len(raw_gpus)
    position: dict[str | None, int] = {}
    for i, b in enumerate(order):
        position.setdefault(b, i)  # the first GPU with that bus id, as order.index would find
    direct = [[0] * n for _ in range(n)]
    switch_up = [0] * n
    switches: dict[str, NvSwitch] = {}
    gpus: list[NvlinkGpu] = []
    any_links = False
    for i, g in enumerate(raw_gpus):
        u = g.get("unknown")
        unknown = dict(u) if u else {}
        links = [_link(lk, gpu_bus) for lk in g.get("links") or [] if isinstance(lk, dict)]
        # one pass over the links for every per-GPU figure (they were separate passes)
        up = 0
        version = None
        inactive = []
        link_lost = False
        row = direct[i]
        for lk in links:
            state, rtype, remote = lk["state"], lk["remote_type"], lk["remote_bus_id"]
            if state == "up":
                up += 1
                if version is None and lk["version"]:
                    version = lk["version"]
                if rtype == "gpu" and remote in position:
                    row[position[remote]] += 1
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
            if not link_lost and lk["unknown"] and "GPU_IS_LOST" in lk["unknown"].values():
                link_lost = True
        lost = "GPU_IS_LOST" in unknown.values() or link_lost
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
    pair_links = {(p["a"], p["b"]): p["links"] for p in pairs}
    nv: list[list[int | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        oi, si, nv_row = order[i], switch_up[i], nv[i]
        for j in range(n):
            if i == j:
                continue
            # an NVSwitch box has no direct pairs: skip the two lookups per cell there
            d = (pair_links.get((oi, order[j])) or pair_links.get((order[j], oi)) or 0) if pair_links else 0
            sj = switch_up[j]
            nv_row[j] = d + (si if si < sj else sj) or None  # fabric: the smaller switch-link count
    return {
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
