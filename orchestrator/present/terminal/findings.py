"""The findings table, grouped by finding id, then host."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from tabulate import tabulate

from orchestrator.present.terminal.text import clean
from orchestrator.verdict.findings import severity_rank


def findings_table(findings: list[dict[str, Any]], min_severity: str = "info") -> str:
    shown = [f for f in findings if severity_rank(f["severity"]) >= severity_rank(min_severity)]
    if not shown:
        return "No findings."
    shown.sort(key=lambda f: (-severity_rank(f["severity"]), f["id"], f["host"], f["subject"]))
    blocks = []
    for fid, group in groupby(shown, key=lambda f: f["id"]):
        items = list(group)
        head = f"{items[0]['severity'].upper()} {fid} ({items[0]['kind']}) on {len({i['host'] for i in items})} host(s)"
        rows = [[clean(i["host"], 40), clean(i["subject"], 40), clean(i["message"], 110)] for i in items]
        hint = f"  hint: {clean(items[0].get('hint'), 160)}" if items[0].get("hint") else ""
        blocks.append(head + "\n" + tabulate(rows, headers=["host", "subject", "finding"]) + ("\n" + hint if hint else ""))
    return "\n\n".join(blocks)


def classes_table(fleet: dict[str, Any]) -> str:
    classes = fleet.get("classes") or []
    if not classes:
        return ""
    rows = []
    for c in classes:
        outl = ", ".join(clean(o["host"], 30) for o in c.get("outliers", []))
        rows.append([clean(c["name"], 60), len(c["members"]), outl or "-"])
    return tabulate(rows, headers=["topology class", "hosts", "outliers"])
