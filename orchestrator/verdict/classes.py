"""Topology fingerprints: what a host *is*, stable across identical machines; classes and outliers.

The descriptor keeps shape (GPU model and count, link classes, NVSwitches, NICs per GPU and their
levels, GPU PCIe gen/width, board model) and drops identity (serials, UUIDs, bus numbers).  Hosts
with one descriptor form a class; within a family (same GPU model, or same board when GPU-less), a
host whose descriptor differs from the family's majority is an outlier with the differences named.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from typing import Any

from orchestrator.facts.shown import shown
from orchestrator.verdict.findings import Finding, Severity, fault

_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def _most_common(values: list[Any]) -> Any:
    return Counter(values).most_common(1)[0][0] if values else None


def _pcie_shape(p: dict[str, Any]) -> str:
    gen, width = p.get("gen_current"), p.get("width_current")
    return f"Gen{gen if gen is not None else '?'}x{width if width is not None else '?'}"


def descriptor(facts: dict[str, Any]) -> dict[str, Any] | None:
    gpus = (facts.get("gpus") or {}).get("list") or []
    nvlink = facts.get("nvlink") or {}
    topo = facts.get("topology") or {}
    host = facts.get("host") or {}
    pcie = facts.get("pcie") or {}
    if not gpus and not host:
        return None
    board = host.get("board") or {}
    d: dict[str, Any] = {
        "gpu_model": _most_common([g.get("model") or g.get("name") for g in gpus]),
        "gpu_count": len(gpus),
        "board": board.get("model") or board.get("product"),
        "virtualized": bool((host.get("virtualization") or {}).get("virtualized")),
        "mig": any((g.get("mig") or {}).get("current") for g in gpus),
        "gpu_pcie": sorted(_pcie_shape(g.get("pcie") or {}) for g in gpus),  # per GPU: two slow links differ from one
        "nvlink_links_up": sorted(g.get("links_up") or 0 for g in nvlink.get("gpus") or []),
        "nvswitch_count": len(nvlink.get("nvswitches") or []),
    }
    devices = topo.get("devices") or []
    matrix = topo.get("matrix") or []
    gpu_idx = [i for i, dv in enumerate(devices) if dv.get("kind") == "gpu"]
    nic_idx = [i for i, dv in enumerate(devices) if dv.get("kind") == "nic"]
    if not devices and pcie:
        nics = [dv for dv in pcie.get("devices") or [] if dv.get("kind") == "nic"]
        d["nic_count"] = len(nics)
    else:
        d["nic_count"] = len(nic_idx)
    pair_levels: Counter[str] = Counter()
    nic_best: list[str] = []
    try:
        for a_pos, a in enumerate(gpu_idx):
            for b in gpu_idx[a_pos + 1:]:
                pair_levels[shown(matrix[a][b])] += 1
            levels = [shown(matrix[a][n]) for n in nic_idx if matrix[a][n]]
            nic_best.append(min(levels, key=lambda v: _RANK.get(v, 9)) if levels else "none")
    except (IndexError, TypeError):
        pair_levels = Counter({"unknown": 1})
    d["gpu_pair_levels"] = dict(sorted(pair_levels.items()))
    d["gpu_nearest_nic"] = sorted(nic_best)
    return d


def digest(desc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]


def _link_part(desc: dict[str, Any]) -> str | None:
    """The GPU-pair part of a class name: "NV18", "NV1/NV2", "NV4-pairs", "NV12-partial", "SYS"."""
    levels: dict[str, int] = desc["gpu_pair_levels"]
    if not levels:
        return None
    if len(levels) == 1:
        return next(iter(levels))
    nv = sorted((lv for lv in levels if lv.startswith("NV")), key=lambda lv: int(lv[2:]) if lv[2:].isdigit() else 0)
    if not nv:
        # PCIe only: name the spread, nearest first ("PIX/SYS"); more than three says little.
        pcie = sorted(levels, key=lambda lv: _RANK.get(lv, 9))
        return "/".join(pcie) if len(pcie) <= 3 else "mixed"
    nv_pairs = sum(levels[lv] for lv in nv)
    links_up = desc.get("nvlink_links_up") or []
    if len(nv) == 1 and desc["gpu_count"] >= 2 and nv_pairs * 2 == desc["gpu_count"]:
        return f"{nv[0]}-pairs"  # bridged pairs (workstation cards): each GPU bonded to exactly one peer
    if any(n == 0 for n in links_up) and any(n for n in links_up):
        return "/".join(nv) + "-partial"  # some GPUs have no NVLink at all while their peers do
    return "/".join(nv)  # e.g. the DGX-1 hybrid cube mesh: NV1 and NV2 pairs, the rest over PCIe


def class_name(desc: dict[str, Any]) -> str:
    parts: list[Any] = []
    if desc["gpu_count"]:
        parts.append(f"{desc['gpu_count']}x{shown(desc['gpu_model'], 'unknown-model')}")
        link = _link_part(desc)
        if link:
            parts.append(link)
    else:
        parts.append(f"cpu-only-{desc.get('board') or 'unknown-board'}")
    if desc["nic_count"]:
        parts.append(f"{desc['nic_count']}NIC")
        nearest = set(desc["gpu_nearest_nic"])
        if len(nearest) == 1 and desc["gpu_count"]:
            parts.append(nearest.pop())
    if desc["mig"]:
        parts.append("MIG")
    if desc["virtualized"]:
        parts.append("VM")
    return "-".join(str(p).replace(" ", "_") for p in parts)


def _distinguish(desc: dict[str, Any], first: dict[str, Any], fp: str) -> str:
    """A suffix that tells a class apart from the bigger class of the same name: the board when it
    differs (another product of the same shape), else the odd PCIe links, else the digest."""
    if desc.get("board") != first.get("board") and desc.get("board"):
        return "@" + str(desc["board"]).replace(" ", "_")
    odd = sorted({p for p in desc.get("gpu_pcie") or [] if p not in (first.get("gpu_pcie") or [])})
    if odd:
        return "+" + "+".join(odd)
    near = sorted(set(desc.get("gpu_nearest_nic") or []) - set(first.get("gpu_nearest_nic") or []))
    if near:
        return "+NIC-" + "+".join(near)  # a NIC moved: some GPU now has one at another level
    return "~" + fp[:4]


def _show(value: Any) -> str:
    """Descriptor values as a person reads them: lists as counts ("7×18, 1×16"), maps as "NV18: 28"."""
    if isinstance(value, list):
        if not value:
            return "none"
        return ", ".join(f"{n}×{v}" for v, n in sorted(Counter(map(str, value)).items(), key=lambda kv: (-kv[1], kv[0])))
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
    return str(value)


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [f"{k}: {_show(a.get(k))} (class usual: {_show(b.get(k))})" for k in sorted(b) if a.get(k) != b.get(k)]


def classify(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Finding]]:
    """Set record["fingerprint"]/["class"]; return the classes and the outlier findings."""
    classes, findings, of_host = classify_descriptors(
        [(rec["name"], descriptor(rec["facts"])) for rec in records])
    for rec in records:
        rec["fingerprint"], rec["class"] = of_host.get(rec["name"], (None, None))
    return classes, findings


def classify_descriptors(described: list[tuple[str, dict[str, Any] | None]]
                         ) -> tuple[list[dict[str, Any]], list[Finding], dict[str, tuple[str, str]]]:
    """Classes and outlier findings from (host, descriptor) pairs, and host -> (fingerprint, class).

    Works from descriptors alone so that a fleet judged host by host (in worker processes) can be
    classified without holding every host's facts."""
    descs: dict[str, dict[str, Any]] = {}
    members: dict[str, list[str]] = defaultdict(list)
    host_fp: dict[str, str] = {}
    for name, desc in described:
        if desc is None:
            continue
        fp = digest(desc)
        descs[fp] = desc
        members[fp].append(name)
        host_fp[name] = fp
    names: dict[str, str] = {}
    first_of: dict[str, str] = {}  # base name -> fingerprint of the biggest class that holds it
    taken: set[str] = set()
    # Bigger classes get the plain name; among equals, the class of the first host by name.
    for fp in sorted(members, key=lambda f: (-len(members[f]), min(members[f]), f)):
        base = class_name(descs[fp])
        if base not in first_of:
            first_of[base] = fp
            name = base
        else:
            name = base + _distinguish(descs[fp], descs[first_of[base]], fp)
            if name in taken:
                name = f"{base}~{fp[:4]}"
        taken.add(name)
        names[fp] = name
    # Families: hosts that should look alike.  The majority of a family defines its usual shape.
    families: dict[Any, list[str]] = defaultdict(list)
    for name, fp in host_fp.items():
        d = descs[fp]
        # Same GPU model on the same board: machines bought as one kind.  A different board is a
        # different product (its own class), not an outlier of this one.
        if d["gpu_count"] and not d["gpu_model"]:
            continue  # GPUs of unknown model (text evidence without names): no peers to compare with
        families[(d["gpu_model"] if d["gpu_count"] else "no-gpu", d.get("board"))].append(name)
    outliers: dict[str, list[dict[str, Any]]] = defaultdict(list)
    findings: list[Finding] = []
    for hosts in families.values():
        if len(hosts) < 3:
            continue  # with two machines nobody is the majority
        counts = Counter(host_fp[h] for h in hosts)
        (major_fp, major_n), *rest = counts.most_common()
        if rest and rest[0][1] == major_n:
            continue  # no strict majority: nothing to call an outlier against
        for h in hosts:
            fp = host_fp[h]
            if fp == major_fp:
                continue
            diffs = _differences(descs[fp], descs[major_fp])
            outliers[major_fp].append({"host": h, "class": names[fp], "differences": diffs})
            findings.append(fault(
                "topology.class.outlier", h, "topology",
                f"differs from {major_n} of {len(hosts)} similar hosts (class {names[major_fp]}): " + "; ".join(diffs),
                expected=names[major_fp], actual=names[fp], severity=Severity.WARN,
                evidence=["fingerprint descriptor"],
                hint="compare this host with its peers: a missing GPU, a down link or a moved NIC changes the shape"))
    classes = [{"name": names[fp], "fingerprint": fp, "descriptor": descs[fp], "members": members[fp],
                "outliers": outliers.get(fp, [])}
               for fp in sorted(members, key=lambda f: (-len(members[f]), names[f]))]
    return classes, findings, {name: (fp, names[fp]) for name, fp in host_fp.items()}
