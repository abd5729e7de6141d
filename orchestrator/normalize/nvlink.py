"""Normalize the `nvlink` probe's data into `facts["nvlink"]`: per-GPU links and the NVLink graph.

Shape: docs/facts-gpus.md.  Pure.  NV# follows nvidia-smi (reference section 4.4): direct links
count the active links whose remote end is the other GPU; on an NVSwitch fabric every pair of
GPUs with active switch links gets the smaller of their active switch-link counts.
"""

from __future__ import annotations

from typing import Any

from orchestrator.normalize.gpus import bus_id


def _link(raw: dict[str, Any], gpu_bus: set[str]) -> dict[str, Any]:
    unknown = dict(raw.get("unknown") or {})
    remote = bus_id(raw.get("remote_bus_id"))
    rtype = raw.get("remote_type")
    if remote in gpu_bus:
        rtype = "gpu"  # the remote's bus id is one of ours: a GPU whatever an old driver can say
    elif rtype is None and raw.get("state") == "up" and remote is None:
        rtype = "nvswitch"  # NCCL's rule: an active link with an invisible remote goes to a switch
    errors = raw.get("errors") if isinstance(raw.get("errors"), dict) else None
    return {"link": raw.get("link"), "state": raw.get("state"), "version": raw.get("version"),
            "remote_bus_id": remote, "remote_type": rtype,
            "p2p_supported": raw.get("p2p_supported"), "sysmem_access": raw.get("sysmem_access"),
            "p2p_atomics": raw.get("p2p_atomics"), "errors": errors, "unknown": unknown}


def normalize(data: dict[str, Any]) -> dict[str, Any]:
    raw_gpus = [g for g in data.get("gpus") or [] if isinstance(g, dict)]
    order = [bus_id(g.get("bus_id")) for g in raw_gpus]
    gpu_bus = {b for b in order if b}
    gpus: list[dict[str, Any]] = []
    any_links = False
    for g in raw_gpus:
        unknown = dict(g.get("unknown") or {})
        links = [_link(lk, gpu_bus) for lk in g.get("links") or [] if isinstance(lk, dict)]
        lost = "GPU_IS_LOST" in unknown.values() or any(
            "GPU_IS_LOST" in (lk["unknown"] or {}).values() for lk in links)
        total: int | None = len(links) if not (lost or "handle" in unknown) else None
        if unknown.get("links") == "NOT_SUPPORTED":
            total = 0
        up = sum(1 for lk in links if lk["state"] == "up") if total is not None else None
        any_links = any_links or bool(links)
        versions = [lk["version"] for lk in links if lk["state"] == "up" and lk["version"]]
        gpus.append({
            "index": g.get("index"), "bus_id": order[len(gpus)], "uuid": g.get("uuid"),
            "name": g.get("name"), "links_total": total, "links_up": up,
            "inactive": [lk["link"] for lk in links if lk["state"] == "down"],
            "version": versions[0] if versions else None, "lost": lost,
            "links": links, "unknown": unknown,
        })
    n = len(gpus)
    pairs: list[dict[str, Any]] = []
    direct = [[0] * n for _ in range(n)]
    position: dict[str | None, int] = {}
    for i, b in enumerate(order):
        position.setdefault(b, i)  # the first GPU with that bus id, as order.index would find
    for i, g in enumerate(gpus):
        for lk in g["links"]:
            if lk["state"] == "up" and lk["remote_type"] == "gpu" and lk["remote_bus_id"] in position:
                direct[i][position[lk["remote_bus_id"]]] += 1
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
    switch_up = [sum(1 for lk in g["links"] if lk["state"] == "up" and lk["remote_type"] == "nvswitch")
                 for g in gpus]
    switches: dict[str, dict[str, Any]] = {}
    for g in gpus:
        for lk in g["links"]:
            if lk["remote_type"] == "nvswitch" and lk["remote_bus_id"]:
                sw = switches.setdefault(lk["remote_bus_id"], {"bus_id": lk["remote_bus_id"], "links": 0,
                                                               "links_up": 0, "gpus": []})
                sw["links"] += 1
                sw["links_up"] += 1 if lk["state"] == "up" else 0
                if g["bus_id"] not in sw["gpus"]:
                    sw["gpus"].append(g["bus_id"])
    pair_links = {(p["a"], p["b"]): p["links"] for p in pairs}
    nv: list[list[int | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            d = pair_links.get((order[i], order[j])) or pair_links.get((order[j], order[i])) or 0
            fabric = min(switch_up[i], switch_up[j])
            nv[i][j] = d + fabric or None
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
