"""csv / yaml / json renderings of the main tables (hosts, findings, runs) for `--format`.

Rows are flat dicts with a fixed column order, so a csv header never depends on which host came
first.  CSV cells that a spreadsheet would run as a formula (host-controlled strings starting with
= + - @) are prefixed with a quote, the usual guard against CSV injection.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

from orchestrator.facts import read as F
from orchestrator.facts.textsafe import LINE_BREAKS, display_safe
from orchestrator.files import jsontext
from orchestrator.verdict.findings import SEVERITY_ORDER
from orchestrator.verdict.result import FleetResult

FORMATS = ("json", "yaml", "csv")
# what `--format` accepts: the terminal table, or one of the machine formats above
OUTPUT_FORMATS = ("table", *FORMATS)

# The identity columns are the procurement list (facts/read.py:host_identity): DMI system and
# board, BIOS, serials, driver, GPU model; then what the run measured and judged.
IDENTITY_COLUMNS = ("system_vendor", "system_product", "board_vendor", "board_model", "bios_vendor", "bios_version",
                    "bios_date", "system_serial", "board_serial", "driver", "gpu_model")
HOST_COLUMNS = ("host", "address", "health", "health_reason", "faults_fail", "faults_warn", "outcome", "reason",
                "class", *IDENTITY_COLUMNS, "gpus", "nvlink_up", "p2p_min_gbps", "fail", "warn", "info", "probes")
# action, because and devices (issue 46) come last: a reader that counts columns keeps its places.
FINDING_COLUMNS = ("host", "id", "severity", "kind", "subject", "message", "expected", "actual", "hint",
                   "caused_by", "action", "because", "devices")
# A run's hosts by their health as judged (healthy ... failed: the verdict's, what RECAP counts),
# then by their probes' transport outcome (ok ... probes_failed: whether the probes answered).
# `what_if`: a rejudge under other inputs than its source's, which no history takes for the fleet.
RUN_COLUMNS = ("id", "started", "state", "what_if", "inventory", "playbook", "limit", "hosts",
               "healthy", "degraded", "failed", "incomplete", "unreachable",
               "ok", "unsupported", "probes_failed", "skipped", "interrupted", "fail", "warn", "info", "problem")
_HEALTH_COLUMNS = ("healthy", "degraded", "failed", "incomplete")


def host_rows(fleet: FleetResult) -> list[dict[str, Any]]:
    rows = []
    for h in fleet.hosts:
        counts = dict.fromkeys(SEVERITY_ORDER, 0)
        for f in fleet.findings_of(h.name):
            counts[f.severity.value] += 1
        rows.append({
            "host": h.name, "address": h.address, "health": h.health.state.value,
            "health_reason": h.health.reason, "faults_fail": h.health.fail, "faults_warn": h.health.warn,
            "outcome": h.outcome, "reason": h.reason, "class": h.topology_class, **F.host_identity(h.facts),
            "gpus": F.gpu_count(h.facts), "nvlink_up": F.nvlink_links_up(h.facts),
            "p2p_min_gbps": F.p2p_min_gbps(h.facts), **counts,
            "probes": {p: r.outcome for p, r in h.probes.items()},
        })
    return rows


def finding_rows(fleet: FleetResult) -> list[dict[str, Any]]:
    rows = []
    for f in fleet.findings:
        d = f.to_dict()
        row = {k: d.get(k) for k in FINDING_COLUMNS}
        row["caused_by"] = f"{f.caused_by.id} {f.caused_by.subject}" if f.caused_by else None
        rows.append(row)
    return rows


def run_rows(summaries: Iterable[Any]) -> list[dict[str, Any]]:
    """history.RunSummary objects -> rows."""
    rows = []
    for s in summaries:
        d = s.to_dict()
        # as an operator reads them: inventory paths, the playbook's name (audit, not its full path)
        d.update(inventory=", ".join(s.inventory), playbook=s.playbook_name or "", probes_failed=d["failed"],
                 what_if=_what_if(s.rejudged_from, s.what_if))
        # a run stored before runs kept their hosts' health has none to count: left empty, not 0
        d.update({k: s.health.get(k, 0) if s.health else None for k in _HEALTH_COLUMNS})
        rows.append({k: d["findings"][k] if k in ("fail", "warn", "info") else d.get(k) for k in RUN_COLUMNS})
    return rows


def _what_if(source: str | None, changed: list[str]) -> str | None:
    """"of RUN (--expect)" for a what-if rejudge; None for a run of the fleet (a plain rejudge included)."""
    if not changed:
        return None
    return f"of {source or 'another run'} ({', '.join(changed)})"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    # Control characters become "?"; line breaks stay, each as "\n", the one csv quotes (a bare CR
    # or U+2028 left unquoted splits the record for one reader or another).  An importer that
    # splits lines, or a spreadsheet cell's later line, would start a formula at any of them: each
    # line is guarded, not only the first.
    lines = _BREAK.split(display_safe(str(value)).replace("\r\n", "\n"))
    return "".join(("'" + part if _formula(part) else part) if i % 2 == 0 else "\n" for i, part in enumerate(lines))


_BREAK = re.compile("(" + LINE_BREAKS.pattern + ")")


def _formula(text: str) -> bool:
    return text.lstrip()[:1] in ("=", "+", "-", "@") and not _is_number(text)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _safe_tree(value: Any) -> Any:
    if isinstance(value, str):
        return display_safe(value)
    if isinstance(value, list):
        return [_safe_tree(v) for v in value]
    if isinstance(value, dict):
        return {display_safe(k): _safe_tree(v) for k, v in value.items()}
    return value


def render_rows(rows: Sequence[dict[str, Any]], fmt: str, columns: Sequence[str] | None = None) -> str:
    """Rows -> text in `fmt` (json, yaml or csv)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)} (or table)")
    cols = list(columns or (rows[0].keys() if rows else []))
    data = [{c: r.get(c) for c in cols} for r in rows]
    if fmt == "json":
        return jsontext.dumps(data, indent=2, default=str) + "\n"
    if fmt == "yaml":
        # YAML prints bidi overrides and zero-width characters as they are (it escapes only what it
        # calls unprintable): they become "?" like on the terminal
        return yaml.safe_dump(_safe_tree(json.loads(jsontext.dumps(data, default=str))), sort_keys=False,
                              allow_unicode=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in data:
        w.writerow([_cell(r[c]) for c in cols])
    return buf.getvalue()


def render_hosts(fleet: FleetResult, fmt: str) -> str:
    return render_rows(host_rows(fleet), fmt, HOST_COLUMNS)


def render_findings(fleet: FleetResult, fmt: str) -> str:
    return render_rows(finding_rows(fleet), fmt, FINDING_COLUMNS)
