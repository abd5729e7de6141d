"""Normalize the p2p probe's data into `facts["p2p"]` (pure; shape in docs/facts-p2p.md).

Matrices are lists of lists indexed by CUDA ordinal; the `order` list gives each ordinal's bus id
(CUDA order is not NVML order), so other sections (nvlink, topology, pcie) join on bus ids through
`order`, never on bare indices.  (A second copy keyed by bus id, `by_bus`, had no reader and was a
tenth of a host's facts; it was dropped.)

A text import (p2pBandwidthLatencyTest, nvbandwidth: facts/textparse/bench_facts.py) hands this
normalizer the probe's shape too.  What a tool's text cannot say it sends as null with a reason, and
that stays null here, never a default that reads as measured: a GPU or pair's `unknown` reasons,
`guard.ran: null` with `ran_unknown`, `staged: null` where a pair's `unknown` names `can_access_peer`
(the tool printed no peer-access matrix), the section's `unknown` (`rank`, `nvml_nvlink`, `all_to_host`, `dmabuf`: as
`<field>_unknown`), a bus id the tool does not print (null in `order`: the GPU's `unknown` names
`bus_id`), each direction of the bidirectional test as printed (`directed` entries).  The tool's own tables
without a probe counterpart stay as printed under `tool_matrices` (merged into `matrices`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.model import P2pFacts, P2pGpu
from orchestrator.facts.normalize.gpus import model_key
from orchestrator.facts.textsafe import is_digits, reasons

MATRIX_KEYS = ("can_access_peer", "peer_enabled", "ce_gbps", "sm_read_gbps", "bidir_gbps", "latency_us",
               "verified")


def _f(v: Any) -> float | None:
    """A JSON number as a float; anything else (a bool, a string, null) is None."""
    return float(v) if type(v) in (int, float) else None  # JSON numbers are exactly these: bool is not


def _all_true(verified: Any) -> bool | None:
    """True when every verified copy kind matched, False when one did not, None when none ran."""
    if not isinstance(verified, dict) or not verified:
        return None
    return all(verified.values())


@dataclass
class _Frame:
    """What every step shares: the GPU count, each CUDA ordinal's bus id, the matrices being
    filled and the copy mismatches found so far (in the order the steps meet them)."""
    n: int
    order: list[str | None]
    mats: dict[str, list[list[Any]]]
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    def ordinal(self, v: Any) -> bool:
        return isinstance(v, int) and 0 <= v < self.n

    def mismatch(self, copy: str, src: int, dst: int) -> None:
        self.mismatches.append({"copy": copy, "src": src, "dst": dst, "src_bus_id": self.order[src],
                                "dst_bus_id": self.order[dst]})


def normalize(data: dict[str, Any]) -> P2pFacts:
    if not isinstance(data, dict):
        raise ValueError("p2p data must be a mapping")
    raw_gpus: list[Any] = [g for g in data.get("gpus") or [] if isinstance(g, dict)]
    n = len(raw_gpus)
    order = [_bus_id(g) for g in raw_gpus]
    busy = (data.get("guard") or {}).get("busy") or {}
    frame = _Frame(n, order, {k: [[None] * n for _ in range(n)] for k in MATRIX_KEYS})
    frame.mats.update(_tool_matrices(data.get("tool_matrices")))
    gpus = [_gpu(frame, i, g, busy) for i, g in enumerate(raw_gpus)]
    _fill_can_access_peer(frame, data.get("can_access_peer") or [])
    for i, g in enumerate(gpus):  # the diagonal holds the device-local copy, as p2pBandwidthLatencyTest
        frame.mats["ce_gbps"][i][i] = g["local_ce_gbps"]
        frame.mats["sm_read_gbps"][i][i] = g["local_sm_gbps"]
    pairs = _pairs(frame, data.get("pairs") or [])
    _bidirectional(frame, data.get("bidirectional") or [], pairs)
    all_to_host = _all_to_host(frame, data.get("all_to_host"), gpus)
    guard = data.get("guard") or {}
    params = data.get("params") or {}
    out: P2pFacts = {
        "order": order,
        "summary": _summary(gpus, pairs),
        "driver": data.get("cuda_driver"),
        "gpus": gpus,
        "pairs": pairs,
        "matrices": frame.mats,
        "rank": data.get("p2p_rank"),
        "nvml_nvlink": data.get("nvml_nvlink"),
        "all_to_host": all_to_host,
        "mismatches": frame.mismatches,
        "guard": _guard(guard, busy, order),
        "errors": [e for e in data.get("errors") or [] if isinstance(e, dict)],
        "budget_exhausted": bool(data.get("budget_exhausted")),
        "not_reached": list(data.get("not_reached") or []),
        "complete": bool(data.get("complete")),
        "params": {k: params.get(k) for k in ("size_bytes", "repeats", "loops", "pairs", "budget_s")},
        "elapsed_s": _f(data.get("elapsed_s")),
        "dmabuf": _dmabuf(raw_gpus, order),
    }
    for key, why in reasons(data.get("unknown")).items():
        if key in _SECTION_UNKNOWN and out.get(key) is None:
            out[key + "_unknown"] = why  # type: ignore[literal-required]
    return out


# the section's fields a source may name unknown (a text import: the tool does not read them)
_SECTION_UNKNOWN = ("rank", "nvml_nvlink", "all_to_host", "dmabuf")


def _guard(guard: dict[str, Any], busy: Any, order: list[str | None]) -> dict[str, Any]:
    """The busy-GPU guard; `ran` stays null where the source says why it has none (a benchmark's text)."""
    unknown = guard.get("ran_unknown")
    out: dict[str, Any] = {
        "ran": None if guard.get("ran") is None and isinstance(unknown, str) else bool(guard.get("ran")),
        "reason": guard.get("reason"), "forced": bool(guard.get("forced")),
        "busy": {order[int(k)]: v for k, v in busy.items() if is_digits(str(k)) and int(k) < len(order)}}
    if out["ran"] is None:
        out["forced"] = None
        out["ran_unknown"] = unknown
    return out


def _tool_matrices(raw: Any) -> dict[str, list[list[Any]]]:
    """A tool's own tables that have no probe counterpart (P2P=Disabled, CPU latency, nvbandwidth's
    testcases), kept as printed; never one of the probe's keys, which the probe's records fill."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if k not in MATRIX_KEYS and isinstance(v, list)}


def _bus_id(g: dict[str, Any]) -> str | None:
    """A GPU's bus id, lower case; null only where the source says it cannot see it (a tool that
    prints none), so a probe record that lost its bus id reads as before ("")."""
    if not g.get("bus_id") and "bus_id" in reasons(g.get("unknown")):
        return None
    return str(g.get("bus_id") or "").lower()


def _gpu(frame: _Frame, i: int, g: dict[str, Any], busy: Any) -> P2pGpu:
    """One GPU's own figures (host copies, device-local copies, load readings); a copy kind it
    failed to verify is a mismatch of the GPU with itself."""
    gv = g.get("verified")
    verified: dict[str, Any] = gv if isinstance(gv, dict) else {}
    for kind, ok in verified.items():
        if not ok:
            frame.mismatch(kind, i, i)
    out: P2pGpu = {
        "index": i, "bus_id": frame.order[i], "name": g.get("name"), "model": model_key(g.get("name")),
        "status": g.get("status"), "error": g.get("error"),
        "busy_processes": busy.get(str(i)),
        "h2d_gbps": _f(g.get("h2d_gbps")), "d2h_gbps": _f(g.get("d2h_gbps")),
        "local_ce_gbps": _f(g.get("local_ce_gbps")), "local_sm_gbps": _f(g.get("local_sm_gbps")),
        "verified": _all_true(verified),
    }
    if reasons(g.get("unknown")):
        out["unknown"] = reasons(g.get("unknown"))  # a text import: what the tool does not print
    # p2p 1.1's readings under load: kept where the probe took them or said why it could not
    load = _load(g.get("load"))
    if load is not None:
        out["load"] = load
    elif isinstance(g.get("load_unknown"), str):
        out["load_unknown"] = g["load_unknown"]
    return out


def _fill_can_access_peer(frame: _Frame, cap: Any) -> None:
    """cuDeviceCanAccessPeer off the diagonal, as far as the probe's matrix reaches."""
    for a in range(min(frame.n, len(cap))):
        row = cap[a]
        for b in range(min(frame.n, len(row))):
            if a != b and row[b] is not None:
                frame.mats["can_access_peer"][a][b] = bool(row[b])


def _pairs(frame: _Frame, raw_pairs: Any) -> list[dict[str, Any]]:
    """Each measured one-way GPU->GPU pair between known ordinals, written into the matrices too."""
    mats = frame.mats
    pairs: list[dict[str, Any]] = []
    for p in raw_pairs:
        a, b = p.get("src"), p.get("dst")
        if not (frame.ordinal(a) and frame.ordinal(b)):
            continue
        pv = p.get("verified")
        pverified: dict[str, Any] = pv if isinstance(pv, dict) else {}
        for kind, ok in pverified.items():
            if not ok:
                frame.mismatch(kind, a, b)
        enabled = bool(p.get("peer_enabled"))
        # staged null: the source did not read the peer-access matrix (a benchmark's text)
        rec = {
            "src": a, "dst": b, "src_bus_id": frame.order[a], "dst_bus_id": frame.order[b],
            "can_access_peer": p.get("can_access_peer"), "peer_enabled": enabled,
            "peer_error": p.get("peer_error"),
            "staged": None if "can_access_peer" in reasons(p.get("unknown")) else not enabled,
            "ce_gbps": _f(p.get("ce_gbps")), "sm_read_gbps": _f(p.get("sm_read_gbps")),
            "latency_us": _f(p.get("latency_us")), "bidir_gbps": None, "verified": _all_true(pverified),
        }
        if reasons(p.get("unknown")):
            rec["unknown"] = reasons(p.get("unknown"))
        pairs.append(rec)
        mats["peer_enabled"][a][b], mats["verified"][a][b] = rec["peer_enabled"], rec["verified"]
        mats["ce_gbps"][a][b], mats["sm_read_gbps"][a][b] = rec["ce_gbps"], rec["sm_read_gbps"]
        mats["latency_us"][a][b] = rec["latency_us"]
    return pairs


def _bidirectional(frame: _Frame, raw: Any, pairs: list[dict[str, Any]]) -> None:
    """Both directions at once: the total goes into the symmetric matrix and onto both pairs."""
    by_pair = {(p["src"], p["dst"]): p for p in pairs}
    for bd in raw:
        a, b = bd.get("a"), bd.get("b")
        if not (frame.ordinal(a) and frame.ordinal(b)):
            continue
        total = _f(bd.get("total_gbps"))
        # the probe times both directions at once, one entry a pair: the total is both cells'; a
        # tool that prints each direction (p2pBandwidthLatencyTest) sends each as `directed`
        ends = ((a, b),) if bd.get("directed") is True else ((a, b), (b, a))
        for x, y in ends:
            frame.mats["bidir_gbps"][x][y] = total
            if (x, y) in by_pair:
                by_pair[(x, y)]["bidir_gbps"] = total
        if bd.get("verified") is False:
            frame.mismatch("bidirectional", a, b)


def _all_to_host(frame: _Frame, a2h: Any, gpus: list[P2pGpu]) -> dict[str, Any] | None:
    """Every GPU copying to and from the host at once, beside what the same GPUs reach alone."""
    if not isinstance(a2h, dict):
        return None
    members = [i for i in a2h.get("gpus") or [] if frame.ordinal(i)]
    out = {
        "gpus": [frame.order[i] for i in members],
        "d2h_total_gbps": _f(a2h.get("d2h_total_gbps")), "h2d_total_gbps": _f(a2h.get("h2d_total_gbps")),
        # what the same GPUs reach one at a time, for the contention judgement
        "d2h_sum_single_gbps": _sum([gpus[i]["d2h_gbps"] for i in members]),
        "h2d_sum_single_gbps": _sum([gpus[i]["h2d_gbps"] for i in members]),
        # one timed region spans all GPUs, so without contention the slowest GPU sets the
        # total: n x the smallest single figure
        "d2h_parallel_gbps": _parallel([gpus[i]["d2h_gbps"] for i in members]),
        "h2d_parallel_gbps": _parallel([gpus[i]["h2d_gbps"] for i in members]),
        "verified": _all_true(a2h.get("verified")),
    }
    for kind, ok in (a2h.get("verified") or {}).items():
        if not ok:
            frame.mismatches.append({"copy": "all_" + kind, "src": None, "dst": None, "src_bus_id": None,
                                     "dst_bus_id": None})
    return out


def _summary(gpus: list[P2pGpu], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    ce = [(p["ce_gbps"], _pair_label(p)) for p in pairs if p["ce_gbps"] is not None]
    ce_min = min(ce) if ce else None
    return {
        # the slowest one-way GPU->GPU copy-engine figure (what outputs/prometheus report)
        "min_gbps": ce_min[0] if ce_min else None,
        "min_pair": ce_min[1] if ce_min else None,
        "h2d_min_gbps": _min([g["h2d_gbps"] for g in gpus]),
        "d2h_min_gbps": _min([g["d2h_gbps"] for g in gpus]),
        "gpus_measured": sum(1 for g in gpus if g["h2d_gbps"] is not None),
        "pairs_measured": len(ce),
    }


def _pair_label(p: dict[str, Any]) -> str:
    """bus id -> bus id; GPU ordinals where the source names no bus ids (nvbandwidth's text)."""
    if p["src_bus_id"] is None or p["dst_bus_id"] is None:
        return f"GPU{p['src']}->GPU{p['dst']}"
    return f"{p['src_bus_id']}->{p['dst_bus_id']}"


def _load(raw: Any) -> dict[str, Any] | None:
    """NVML's readings while the probe loaded the GPU (p2p 1.1): SM clock (MHz), power (W),
    temperature (C); None where the probe took none (older probe, load_s 0, no NVML)."""
    if not isinstance(raw, dict):
        return None
    out: dict[str, Any] = {k: _f(raw.get(k)) for k in ("sm_clock_mhz", "power_w", "temperature_c", "seconds")}
    unknown = raw.get("unknown")
    if isinstance(unknown, dict) and unknown:
        out["unknown"] = {str(k): str(v) for k, v in unknown.items()}
    return out


def _dmabuf(raw_gpus: list[Any], order: list[str | None]) -> dict[str, bool | None] | None:
    """CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED per GPU by bus id (None: the driver did not answer it);
    None for the whole map when the probe did not read it (p2p before issue 18)."""
    if not any("dmabuf_supported" in g for g in raw_gpus):
        return None
    return {(order[i] or ""): (bool(g["dmabuf_supported"]) if isinstance(g.get("dmabuf_supported"), int) else None)
            for i, g in enumerate(raw_gpus)}


def _sum(values: list[Any]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return round(sum(v for v in values if v is not None), 3)


def _min(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _parallel(values: list[Any]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return round(len(values) * min(values), 3)
