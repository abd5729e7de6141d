"""A stored-shape fleet document as the verdict hands it to every surface (FleetResult), and the
report of one, for tests that build fleet.json documents by hand."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.present.report import render_report
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict.drift import diff_fleets
from orchestrator.verdict.result import FleetResult


def judged(doc: Mapping[str, Any] | FleetResult) -> FleetResult:
    return doc if isinstance(doc, FleetResult) else FleetResult.from_document(doc)


def document(fleet: FleetResult | Mapping[str, Any]) -> dict[str, Any]:
    """fleet.json's dict form, hosts as a list."""
    if not isinstance(fleet, FleetResult):
        return dict(fleet)
    doc = fleet.to_document()
    doc["hosts"] = [dict(h) for h in doc["hosts"]]
    return doc


def report(doc: Mapping[str, Any] | FleetResult, previous: Mapping[str, Any] | FleetResult | None = None,
           **kw: Any) -> str:
    fleet = judged(doc)
    drift = diff_fleets(judged(previous), fleet) if previous is not None else None
    return render_report(fleet, drift, **kw)


def meta(run_id: str = "t", **kw: Any) -> RunMeta:
    return RunMeta(id=run_id, **kw)
