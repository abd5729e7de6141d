"""CTRF (Common Test Report Format) JSON: the JUnit report's cases, in the JSON form newer
test tooling reads beside JUnit (https://github.com/ctrf-io/ctrf, schema/ctrf.schema.json).

The cases are JUnit's, read from the same element tree (`junit.build_junit`), so the two reports
can never disagree: one case per host x check, per probe, per unreachable host, per fault of
the fabric.  A JUnit failure or error is `failed` (`rawStatus` says which), a skipped case
(a check that could not judge the host, a probe skipped) is `skipped` with its reason, never
`passed`; findings below the failing severity stay in the case's `stdout` of a passing case.
Each case's suite is `[host]` (or `["fabric"]`) and its `labels` carry the host, the check and
JUnit's properties (the finding's subject, action, devices).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator import __version__
from orchestrator.files.jsontext import dumps
from orchestrator.present.outputs import write_atomic
from orchestrator.present.outputs.junit import build_junit
from orchestrator.verdict.result import FleetResult

SPEC_VERSION = "1.0.0"  # the CTRF specification the vendored schema describes
STATUSES = ("passed", "failed", "skipped", "pending", "other")


def _ms(stamp: str | None) -> int:
    """An ISO time as milliseconds since the epoch; 0 when the run did not record it."""
    if not stamp:
        return 0
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def _labels(host: str, case: ET.Element) -> dict[str, Any]:
    """The case's host and check, then JUnit's properties (a key seen twice, for a case with
    several findings, becomes the list of its values, in order)."""
    labels: dict[str, Any] = {"host": host, "check": case.get("name", "")}
    for prop in case.findall("properties/property"):
        key, value = prop.get("name", ""), prop.get("value", "")
        if key in labels and key not in ("host", "check"):
            old = labels[key]
            labels[key] = [*old, value] if isinstance(old, list) else [old, value]
        elif key not in labels:
            labels[key] = value
    return labels


def _status(case: ET.Element) -> tuple[str, str, str | None]:
    """CTRF status, JUnit's own word for it, and the message that explains it."""
    for tag, status in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
        el = case.find(tag)
        if el is not None:
            return status, tag, el.get("message")
    return "passed", "passed", None


def _test(host: str, case: ET.Element) -> dict[str, Any]:
    status, raw, message = _status(case)
    seconds = case.get("time")
    test: dict[str, Any] = {"name": case.get("name") or "?", "status": status, "rawStatus": raw,
                            "duration": round(float(seconds) * 1000) if seconds else 0,
                            "suite": [host], "labels": _labels(host, case)}
    if message:
        test["message"] = message
    detail = next((el.text for el in (case.find("failure"), case.find("error")) if el is not None and el.text), None)
    if detail:
        test["trace"] = detail
    out = case.find("system-out")
    if out is not None and out.text:
        test["stdout"] = out.text.split("\n")
    return test


def build_ctrf(fleet: FleetResult, check_ids: Iterable[str] | None = None,
               fail_on: Iterable[str] = ("fail",)) -> dict[str, Any]:
    """The CTRF document (a dict ready for JSON) of JUnit's cases."""
    root = build_junit(fleet, check_ids, fail_on)
    tests = [_test(suite.get("name", "?"), case) for suite in root.findall("testsuite")
             for case in suite.findall("testcase")]
    run = fleet.run
    start, stop = _ms(run.started), _ms(run.finished)
    counts = {s: sum(1 for t in tests if t["status"] == s) for s in STATUSES}
    summary = {"tests": len(tests), **counts, "suites": len(root.findall("testsuite")), "start": start,
               "stop": max(stop, start), "duration": max(stop - start, 0)}
    doc: dict[str, Any] = {"reportFormat": "CTRF", "specVersion": SPEC_VERSION, "generatedBy": "fleetprobe",
                           "results": {"tool": {"name": "fleetprobe", "version": __version__},
                                       "summary": summary, "tests": tests,
                                       "extra": {"run_id": run.id}}}
    if run.finished or run.started:
        doc["timestamp"] = run.finished or run.started
    return doc


def render_ctrf(fleet: FleetResult, check_ids: Iterable[str] | None = None, fail_on: Iterable[str] = ("fail",)) -> str:
    return dumps(build_ctrf(fleet, check_ids, fail_on), indent=2, ensure_ascii=False) + "\n"


def write_ctrf(fleet: FleetResult, path: str | Path, check_ids: Iterable[str] | None = None,
               fail_on: Iterable[str] = ("fail",)) -> Path:
    return write_atomic(path, render_ctrf(fleet, check_ids, fail_on))
