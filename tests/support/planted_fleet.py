"""A big judged fleet with a known number of planted faults, made from the demo run's own records.

Judging 10,000 simulated hosts takes minutes and copies of one recording share its identities
(every copy would be a duplicate serial); the terminal report needs neither: it reads judged
records.  So the fleet is the demo's fleet.json (a real `probe run` of the bundled demo) with its
healthy DGX H100 record copied under new names (`node00001` ...) into that class, and `faults`
of the demo's unhealthy DGX H100 hosts kept with their findings as they were judged.  The summary
is left out, so FleetResult counts it from the records (verdict/result.py:_summary_of).
Used by tests/present/test_answer_first.py and bench/terminal_bench.py."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

NOMINAL = "8xH100-SXM-NV18-8NIC-PIX"


def _template(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The first healthy host of the nominal DGX H100 class."""
    for h in doc["hosts"]:
        if h.get("class") == NOMINAL and (h.get("health") or {}).get("state") == "healthy":
            return dict(h)
    raise ValueError(f"the demo run has no healthy host of class {NOMINAL}")


def planted_fleet(doc: Mapping[str, Any], hosts: int, faults: int) -> dict[str, Any]:
    """A fleet.json document of `hosts` hosts of which `faults` (the demo's unhealthy dgx-h100
    hosts, in its order) carry their judged faults; the rest are healthy copies."""
    broken = [h for h in doc["hosts"] if str(h.get("name", "")).startswith("dgx-h100-")
              and (h.get("health") or {}).get("state") in ("failed", "degraded")][:faults]
    if len(broken) < faults:
        raise ValueError(f"the demo run has {len(broken)} unhealthy DGX H100 hosts, {faults} asked for")
    names = {h["name"] for h in broken}
    template = _template(doc)
    copies = []
    for i in range(hosts - faults):
        rec = copy.copy(template)  # shallow: the records are read, never changed
        rec["name"] = f"node{i + 1:05d}"
        copies.append(rec)
    classes = []
    for c in doc["classes"]:
        members = [m for m in c["members"] if m in names]
        outliers = [o for o in c.get("outliers") or [] if o.get("host") in names]
        if c["name"] == NOMINAL:
            members += [r["name"] for r in copies]
        if members or outliers:
            classes.append(dict(c, members=members, outliers=outliers))
    return {"schema_version": doc["schema_version"], "run": dict(doc["run"], id="planted"),
            "hosts": copies + [dict(h) for h in broken], "classes": classes,
            "findings": [f for f in doc["findings"] if f.get("host") in names], "silenced": [],
            "fabric_findings": []}
