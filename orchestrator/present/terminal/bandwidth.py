"""Terminal view of facts["p2p"]: the matrices p2pBandwidthLatencyTest prints, plus host links.

Rows are the source GPU, columns the destination (the copy's direction); the diagonal of the
unidirectional matrices is the device-local copy (bytes copied per second; p2pBandwidthLatencyTest
counts read+write there, i.e. twice this).  `-` is a value not measured.
"""

from __future__ import annotations

from typing import Any

from orchestrator.facts.model import Facts, P2pFacts
from orchestrator.facts.shown import shown
from orchestrator.present.terminal.text import clean as _clean


def _num(v: Any, digits: int = 2) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return f"{v:.{digits}f}"
    return "-"


def _matrix(title: str, m: list[list[Any]] | None, n: int, digits: int = 2, label: str = "D\\D") -> list[str]:
    if not m:
        return []
    width = 8
    lines = [title, f"{label:>6} " + "".join(f"{j:>{width}}" for j in range(n))]
    for i in range(n):
        row = m[i] if i < len(m) else []
        cells = [_num(row[j] if j < len(row) else None, digits) for j in range(n)]
        lines.append(f"{i:>6} " + "".join(f"{c:>{width}}" for c in cells))
    return lines


def render(p2p: P2pFacts | None, host: str = "", facts: Facts | None = None,
           width: int | None = None) -> str:
    if not isinstance(p2p, dict):
        return "p2p: not measured\n"
    order = [_clean(b) for b in p2p.get("order") or []]
    n = len(order)
    mats = p2p.get("matrices") or {}
    gpus = p2p.get("gpus") or []
    out = [f"[P2P bandwidth and latency]{(' ' + _clean(host)) if host else ''}"
           f"  CUDA driver {_clean(p2p.get('driver'))}"]
    for g in gpus:
        status = _clean(g.get("status"))
        extra = f" ({_clean(g.get('error'))})" if g.get("error") else ""
        out.append(f"Device: {shown(g.get('index'))}, {_clean(g.get('name'))}, bus {_clean(g.get('bus_id'))}, "
                   f"{status}{extra}")
    cap = [[(1 if i == j else row[j]) for j in range(len(row))] for i, row in enumerate(mats.get("can_access_peer") or [])]
    out += _matrix("P2P Connectivity Matrix (cuDeviceCanAccessPeer)", cap, n, 0)
    out += _matrix("Unidirectional copy-engine bandwidth (GB/s), row -> column; diagonal: device-local copy",
                   mats.get("ce_gbps"), n)
    out += _matrix("Unidirectional SM-kernel bandwidth (GB/s), column GPU reads row GPU; diagonal: local",
                   mats.get("sm_read_gbps"), n)
    out += _matrix("Bidirectional copy-engine bandwidth (GB/s), both directions together",
                   mats.get("bidir_gbps"), n)
    out += _matrix("Latency of a 16-byte copy (us)", mats.get("latency_us"), n, 2, "GPU")
    if gpus:
        out.append("Host <-> GPU (pinned, copy engine, GB/s)")
        out.append(f"{'GPU':>6} {'h2d':>9} {'d2h':>9}  verified")
        for g in gpus:
            v = g.get("verified")
            out.append(f"{shown(g.get('index')):>6} {_num(g.get('h2d_gbps')):>9} {_num(g.get('d2h_gbps')):>9}  "
                       f"{'-' if v is None else ('ok' if v else 'MISMATCH')}")
    a2h = p2p.get("all_to_host")
    if isinstance(a2h, dict):
        for d in ("h2d", "d2h"):
            total, single = a2h.get(f"{d}_total_gbps"), a2h.get(f"{d}_sum_single_gbps")
            share = f" ({total / single:.0%} of the single-GPU sum {single:.1f})" if total and single else ""
            out.append(f"All {len(a2h.get('gpus') or [])} GPUs {d} at once: {_num(total)} GB/s{share}")
    staged = [p for p in p2p.get("pairs") or [] if p.get("staged") and p.get("ce_gbps") is not None]
    if staged:
        out.append(f"Note: {len(staged)} pair(s) without peer access: their copies are staged through host memory")
    if p2p.get("mismatches"):
        out.append(f"DATA MISMATCH in {len(p2p['mismatches'])} copy kind(s): see findings p2p.data.mismatch")
    if p2p.get("budget_exhausted"):
        out.append(f"Budget exhausted: {len(p2p.get('not_reached') or [])} measurement(s) not reached")
    guard = p2p.get("guard") or {}
    if guard.get("busy"):
        out.append("Busy GPUs: " + ", ".join(f"{_clean(b)} ({_clean(c)} processes)" for b, c in guard["busy"].items()))
    if not guard.get("ran") and guard.get("reason"):
        out.append("Busy-GPU guard: " + _clean(guard["reason"]))
    return "\n".join(out) + "\n"
