"""The findings table, grouped by finding id, then host."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from orchestrator.present.terminal.text import clean
from orchestrator.present.terminal.width import fit_table, wrap
from orchestrator.verdict.findings import severity_rank


def findings_table(findings: list[dict[str, Any]], min_severity: str = "info", width: int | None = None) -> str:
    """Findings grouped by id: a head line, a host/subject/finding table fitted to `width` (the
    message wrapped, never cut), and the id's hint once beneath it."""
    shown = [f for f in findings if severity_rank(f["severity"]) >= severity_rank(min_severity)]
    if not shown:
        return "No findings."
    shown.sort(key=lambda f: (-severity_rank(f["severity"]), f["id"], f["host"], f["subject"]))
    blocks = []
    for fid, group in groupby(shown, key=lambda f: f["id"]):
        items = list(group)
        head = f"{items[0]['severity'].upper()} {fid} ({items[0]['kind']}) on {len({i['host'] for i in items})} host(s)"
        rows = [[clean(i["host"], 200), clean(i["subject"], 200), clean(i["message"], 2000)] for i in items]
        hint = wrap(clean(items[0].get("hint"), 2000), width, "  hint: ") if items[0].get("hint") else ""
        table = fit_table(rows, ["host", "subject", "finding"], width)
        blocks.append(wrap(head, width, "", "  ") + "\n" + table + ("\n" + hint if hint else ""))
    return "\n\n".join(blocks)


def classes_table(fleet: dict[str, Any], width: int | None = None) -> str:
    classes = fleet.get("classes") or []
    if not classes:
        return ""
    rows = []
    for c in classes:
        outl = ", ".join(clean(o["host"], 200) for o in c.get("outliers", []))
        rows.append([clean(c["name"], 200), str(len(c["members"])), outl or "-"])
    return fit_table(rows, ["topology class", "hosts", "outliers"], width, fixed=("hosts",))
