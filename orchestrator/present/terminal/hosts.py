"""The per-host summary table and Ansible-style recap line."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

from orchestrator.facts.model import HostFacts, HostRecord
from orchestrator.facts.shown import shown
from orchestrator.present.terminal.text import clean
from orchestrator.present.terminal.width import fit_table, wrap
from orchestrator.store.spool import records_with

# Host-controlled text is cleaned and bounded (a hostile host must not flood the terminal); the
# table then fits it to the terminal by wrapping, never by cutting.
_CELL = 200


def _board(host: HostFacts) -> str:
    b = host.get("board") or {}
    parts = [b.get("vendor") or b.get("system_vendor"), b.get("model") or b.get("product")]
    return " ".join(clean(p, _CELL) for p in parts if isinstance(p, str)) or "-"


def _gpus(rec: HostRecord) -> str:
    g = rec["facts"].get("gpus")
    if not g:
        return "-"
    gpus = g.get("list") or []
    # a GPU whose name the text does not give (topo -m, nvbandwidth) is "unknown model", never "None"
    names = Counter(shown(x.get("name") or x.get("model"), "unknown model") for x in gpus)
    text = ", ".join(f"{n}x {clean(name, _CELL)}" for name, n in names.items()) or "0"
    count, at_least = g.get("count"), g.get("count_at_least")
    if isinstance(count, int) and count > len(gpus):
        return f"{count} ({len(gpus)} described: {text})"  # a -q excerpt: Attached GPUs is the count
    if count is None and isinstance(at_least, int):
        return f">={at_least} ({text})"  # nvlink -s -i N: part of the host
    return text


def hosts_table(fleet: dict[str, Any], width: int | None = None) -> str:
    """One row per host.  The reason of a host that is not ok is never cut: without a width (not
    a terminal) it follows the outcome in the host's row, so `grep HOST` shows why on one line;
    with a width it goes beneath the table, whole and wrapped, so a column never cuts off its
    advice ("is sshd running there?")."""
    rows, reasons = [], []
    for rec in records_with(fleet["hosts"], ("host", "gpus")):
        h = cast(HostFacts, rec["facts"].get("host") or {})  # every read below is a .get
        dur = sum(p.get("duration_s") or 0 for p in rec["probes"].values())
        rows.append([
            clean(rec["name"], _CELL),
            rec["outcome"] + (f": {clean(rec['reason'], 1000)}" if width is None and rec["outcome"] != "ok"
                              and rec.get("reason") else ""),
            clean(h.get("os"), _CELL),
            clean(h.get("kernel"), _CELL),
            _board(h),
            clean((h.get("driver") or {}).get("version")),
            _gpus(rec),
            clean(rec.get("class")),
            f"{dur:.1f}s",
        ])
        if width is not None and rec["outcome"] != "ok" and rec.get("reason"):
            reasons.append(wrap(clean(rec["reason"], 1000), width, f"  {clean(rec['name'], _CELL)} ({rec['outcome']}): "))
    table = fit_table(rows, ["host", "outcome", "os", "kernel", "board", "driver", "gpus", "class", "time"], width,
                      droppable=("kernel", "os", "time", "driver", "board"), fixed=("host", "outcome"))
    return table + ("\n" + "\n".join(reasons) if reasons else "")


def recap(fleet: dict[str, Any], width: int | None = None) -> str:
    s = fleet["summary"]
    o = s["outcomes"]
    f = s["findings"]
    parts = [f"{k}={v}" for k, v in o.items() if v or k in ("ok", "failed", "unreachable", "timeout")]
    return wrap(f"RECAP hosts={s['hosts']} " + " ".join(parts)
                + f" | findings fail={f.get('fail', 0)} warn={f.get('warn', 0)} info={f.get('info', 0)}", width, "", "  ")
