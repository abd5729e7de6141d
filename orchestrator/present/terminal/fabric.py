"""`--show fabric`: one host's part of a fabric qualification: its ports, its pairs per rail, its NCCL rings."""

from __future__ import annotations

import statistics
from typing import Any

from tabulate import tabulate

from orchestrator.facts.model import FabricFacts, Facts
from orchestrator.present.terminal.text import clean


def _q(v: Any) -> str:
    return "?" if v is None else clean(v)


def _link(p: Any) -> str:
    if not isinstance(p, dict):
        return "?"
    cur = f"{str(p.get('speed') or '?').split(' ')[0]} x{p.get('width') or '?'}"
    mx = f"{str(p.get('max_speed') or '?').split(' ')[0]} x{p.get('max_width') or '?'}"
    return cur if cur == mx else f"{cur} (max {mx})"


def render_fabric(fabric: FabricFacts, host: str = "", facts: Facts | None = None,
                  width: int | None = None) -> str:
    if fabric.get("skipped"):
        return f"not part of the fabric qualification: {clean(fabric['skipped'], 300)}"
    out = []
    plan = fabric.get("plan")
    if plan:
        out.append(f"plan: {plan['hosts']} hosts x {plan['rails']} rails, {plan['rounds']} rounds "
                   f"(+{plan['extra_rounds']} extra), {plan['round_s']:g} s per round, tests {', '.join(plan['tests'])}")
    ports = [[clean(h["hca"]), _q(h.get("rail")), _q(h.get("state")), _q(h.get("rate")), _q(h.get("lid")),
              _q(h.get("bus_id")), _link(h.get("pcie")), _q(h.get("nearest_gpu")), _q(h.get("address"))]
             for h in fabric.get("hcas") or []]
    if ports:
        out.append(tabulate(ports, headers=["HCA", "rail", "state", "rate", "LID", "PCI", "PCIe", "GPU", "address"]))
    rows = []
    by: dict[tuple[int, str], list[float]] = {}
    peers: dict[tuple[int, str], int] = {}
    errors: dict[tuple[int, str], int] = {}
    for m in fabric.get("measurements") or []:
        key = (m["rail"], m["test"])
        peers[key] = peers.get(key, 0) + 1
        if m["value"] is not None:
            by.setdefault(key, []).append(m["value"])
        elif m["error"]:
            errors[key] = errors.get(key, 0) + 1
    for (rail, test), n in sorted(peers.items()):
        vals = by.get((rail, test)) or []
        unit = "us" if test.endswith("_lat") else "Gb/s"
        rows.append([rail, test, n, f"{min(vals):.2f}" if vals else "-", f"{statistics.median(vals):.2f}" if vals else "-",
                     f"{max(vals):.2f}" if vals else "-", unit, errors.get((rail, test), 0)])
    if rows:
        out.append(tabulate(rows, headers=["rail", "test", "runs", "min", "median", "max", "unit", "failed"]))
    gdr = fabric.get("gdr")
    if gdr:
        out.append(f"GPUDirect RDMA expected: {_q(gdr.get('expected'))} ({clean(gdr.get('why'))})")
    groups = [[clean(g["group"]), len(g["members"]), _q(g.get("transport")),
               f"{g['busbw_gbps']:.1f}" if g.get("busbw_gbps") is not None else "?", _q(g.get("wrong")),
               clean(g.get("error") or "", 60)] for g in fabric.get("nccl") or []]
    if groups:
        out.append(tabulate(groups, headers=["NCCL group", "hosts", "transport", "busbw GB/s", "wrong", "error"]))
    for e in fabric.get("errors") or []:
        out.append(f"error: {clean(e, 300)}")
    return "\n\n".join(out) or "no fabric measurements"
