"""Terminal view of facts["nccl"] (`--show nccl`): an nccl-tests-like table per operation (size,
count, type, redop, time, algbw, busbw, #wrong) under a header naming NCCL's version, the GPUs, the
transport and channels, and the host's NCCL settings (pure: facts in, text out).  A figure nobody
measured is `?`; a result nobody verified shows `?` under #wrong, never 0."""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from orchestrator.facts.model import Facts, NcclFacts
from orchestrator.present.terminal.text import clean


def _num(v: Any, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "?"


def _known(facts: NcclFacts, key: str) -> str:
    v = facts.get(key)
    if v is None:
        why = facts.get(f"{key}_unknown")
        return f"? ({clean(str(why))})" if why else "?"
    return clean(str(v))


def render_nccl(nccl: NcclFacts | None, host: str = "", facts: Facts | None = None,
                width: int | None = None) -> str:
    if not nccl:
        return "no NCCL data"
    head = [f"NCCL {_known(nccl, 'version')} ({clean(str(nccl.get('source') or '?'))}), "
            f"{_known(nccl, 'gpu_count')} GPUs, transport {_known(nccl, 'transport')}, "
            f"channels {_known(nccl, 'channels')}"]
    overrides = nccl.get("env_overrides") or {}
    if overrides:
        how = "measured under them" if nccl.get("env_kept") else "neutralised for the test"
        head.append("host NCCL settings (" + how + "): "
                    + ", ".join(f"{clean(k)}={clean(v)}" for k, v in overrides.items()))
    if nccl.get("limitation"):
        head.append(f"not measured: {clean(str(nccl['limitation']))}")
    hang = nccl.get("hang")
    if isinstance(hang, dict):
        head.append(f"HANG: {clean(str(hang.get('op') or '?'))} of {_num(hang.get('size_bytes'), 'd')} bytes did not "
                    f"finish in {_num(hang.get('after_s'), 'g')} s (communicators aborted)")
    for e in nccl.get("errors") or []:
        head.append(f"error: {clean(str(e.get('where') or '?'))}: {clean(str(e.get('message') or e.get('error') or '?'))}")
    rows = []
    for r in nccl.get("results") or []:
        rows.append([r["op"], _num(r["size_bytes"], "d"), _num(r["count"], "d"), clean(r["dtype"] or "?"),
                     clean(r["redop"] or "-"), "in" if r["in_place"] else "out", _num(r["time_us"], ".1f"),
                     _num(r["algbw_gbps"], ".2f"), _num(r["busbw_gbps"], ".2f"), _num(r["wrong"], "d")])
    text = "\n".join(head)
    if rows:
        table = tabulate(rows, headers=["op", "size (B)", "count", "type", "redop", "place", "time (us)",
                                        "algbw (GB/s)", "busbw (GB/s)", "#wrong"],
                         colalign=("left", "right", "right", "left", "left", "left", "right", "right", "right",
                                   "right"))
        text += "\n" + table + f"\n Avg bus bandwidth : {_num(nccl.get('avg_busbw_gbps'), '.2f')} GB/s"
    else:
        text += "\nno message size measured"
    return text
