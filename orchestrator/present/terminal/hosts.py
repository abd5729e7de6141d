"""The per-host summary table and Ansible-style recap line."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tabulate import tabulate

from orchestrator.present.terminal.text import clean


def _board(host: dict[str, Any]) -> str:
    b = host.get("board") or {}
    parts = [b.get("vendor") or b.get("system_vendor"), b.get("model") or b.get("product")]
    return " ".join(clean(p, 40) for p in parts if isinstance(p, str)) or "-"


def _gpus(rec: dict[str, Any]) -> str:
    g = rec["facts"].get("gpus")
    if not g:
        return "-"
    gpus = g.get("list") or []
    names = Counter(x.get("name") if isinstance(x.get("name"), str) else "?" for x in gpus)  # unknown: never None
    return ", ".join(f"{n}x {clean(name, 40)}" for name, n in names.items()) or "0"


def hosts_table(fleet: dict[str, Any]) -> str:
    rows = []
    for rec in fleet["hosts"]:
        h = rec["facts"].get("host") or {}
        dur = sum(p.get("duration_s") or 0 for p in rec["probes"].values())
        rows.append([
            clean(rec["name"], 40),
            rec["outcome"] + (f": {clean(rec['reason'], 70)}" if rec["outcome"] != "ok" and rec["reason"] else ""),
            clean(h.get("os"), 30),
            clean(h.get("kernel"), 30),
            _board(h),
            clean((h.get("driver") or {}).get("version")),
            _gpus(rec),
            clean(rec.get("class")),
            f"{dur:.1f}s",
        ])
    return tabulate(rows, headers=["host", "outcome", "os", "kernel", "board", "driver", "gpus", "class", "time"])


def recap(fleet: dict[str, Any]) -> str:
    s = fleet["summary"]
    o = s["outcomes"]
    f = s["findings"]
    parts = [f"{k}={v}" for k, v in o.items() if v or k in ("ok", "failed", "unreachable", "timeout")]
    return (f"RECAP hosts={s['hosts']} " + " ".join(parts)
            + f" | findings fail={f.get('fail', 0)} warn={f.get('warn', 0)} info={f.get('info', 0)}")
