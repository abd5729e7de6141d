"""JUnit XML for CI: one test suite per host, one test case per host x check id.

Checks report only what is wrong, so the set of check ids is the caller's list (the check registry)
plus every id seen in this run.  A host without a finding of that id passes that case only if the
check judged it (verdict/coverage.py); a check that could not (its probe not in the play or not ok,
no expectation to compare with, no GPUs) is `<skipped message="not judged: why">`.  Findings at
a severity in `fail_on` are failures; lower ones leave the case passing with the text in
system-out, so a warning is visible in the CI report without failing the pipeline.  Probe outcomes
get their own cases: a probe that failed, timed out or printed garbage is an error, one that was
skipped or unsupported is skipped.  An unreachable host is one error case and nothing else.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.facts import read as F
from orchestrator.facts.shown import shown
from orchestrator.facts.textsafe import display_safe
from orchestrator.present.outputs import write_atomic
from orchestrator.verdict.coverage import NOT_JUDGED, CheckState, fleet_check_states

_ERROR_OUTCOMES = ("failed", "invalid_output", "timeout")
_SKIP_OUTCOMES = ("skipped", "unsupported", "interrupted")  # nothing measured, nothing wrong with the host
# XML 1.0 cannot carry most control characters even escaped; a host's text must not break the file.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", display_safe(value))


def _finding_text(f: dict[str, Any]) -> str:
    lines = [f"[{f.get('severity')}/{f.get('kind')}] {f.get('subject')}: {f.get('message')}"]
    if f.get("expected") is not None or f.get("actual") is not None:
        lines.append(f"  expected: {shown(f.get('expected'))}  actual: {shown(f.get('actual'))}")
    if f.get("hint"):
        lines.append(f"  hint: {f.get('hint')}")
    for e in f.get("evidence") or []:
        lines.append(f"  evidence: {e}")
    return "\n".join(lines)


def _host_suite(h: Mapping[str, Any], findings: list[dict[str, Any]], states: dict[str, CheckState],
                fail_sev: set[str]) -> ET.Element:
    name = str(h["name"])
    suite = ET.Element("testsuite", name=_x(name))

    def case(check: str) -> ET.Element:
        return ET.SubElement(suite, "testcase", classname=_x(f"fleetprobe.{name}"), name=_x(check))

    if h.get("outcome") == "unreachable":
        reason = h.get("reason") or "no reason recorded"
        err = ET.SubElement(case("host.reachable"), "error", message=_x(f"unreachable: {reason}"), type="unreachable")
        err.text = _x(reason)
        return suite
    for probe, rec in sorted((h.get("probes") or {}).items()):
        if not isinstance(rec, dict):
            continue
        tc = case(f"probe.{probe}")
        if isinstance(rec.get("duration_s"), (int, float)):
            tc.set("time", f"{float(rec['duration_s']):.3f}")
        outcome, reason = rec.get("outcome"), rec.get("reason") or ""
        if outcome in _ERROR_OUTCOMES:
            ET.SubElement(tc, "error", message=_x(f"{outcome}: {reason}"), type=_x(outcome)).text = _x(reason)
        elif outcome in _SKIP_OUTCOMES:
            ET.SubElement(tc, "skipped", message=_x(f"{outcome}: {reason}"))
    by_id: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        by_id.setdefault(str(f.get("id")), []).append(f)
    for check, state in states.items():
        tc = case(check)
        if state.state == NOT_JUDGED:
            ET.SubElement(tc, "skipped", message=_x(f"not judged: {state.reason}"))
            continue
        hits = by_id.get(check, [])
        failing = [f for f in hits if f.get("severity") in fail_sev]
        rest = [f for f in hits if f.get("severity") not in fail_sev]
        if failing:
            msg = f"{failing[0].get('subject')}: {failing[0].get('message')}"
            if len(failing) > 1:
                msg += f" (+{len(failing) - 1} more)"
            failure = ET.SubElement(tc, "failure", message=_x(msg), type=_x(failing[0].get("severity")))
            failure.text = _x("\n".join(_finding_text(f) for f in failing))
        if rest:
            ET.SubElement(tc, "system-out").text = _x("\n".join(_finding_text(f) for f in rest))
    return suite


def _set_counts(el: ET.Element, cases: list[ET.Element]) -> None:
    el.set("tests", str(len(cases)))
    for attr, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
        el.set(attr, str(sum(1 for c in cases if c.find(tag) is not None)))


def build_junit(fleet: dict[str, Any], check_ids: Iterable[str] = (), fail_on: Iterable[str] = ("fail",)) -> ET.Element:
    fail_sev = set(fail_on)
    findings = [f for f in fleet.get("findings") or [] if isinstance(f, dict)]
    ids = sorted(set(check_ids) | {str(f.get("id")) for f in findings})
    by_host = F.findings_by_host(fleet)
    run = fleet.get("run") or {}
    root = ET.Element("testsuites", name=_x(f"fleetprobe {run.get('id') or ''}".strip()))
    for h, states in fleet_check_states(fleet, ids):
        if h.get("name"):
            suite = _host_suite(h, by_host.get(str(h["name"]), []), states, fail_sev)
            if run.get("started"):
                suite.set("timestamp", _x(run["started"]))
            _set_counts(suite, suite.findall("testcase"))
            root.append(suite)
    _set_counts(root, root.findall("testsuite/testcase"))
    return root


def render_junit(fleet: dict[str, Any], check_ids: Iterable[str] = (), fail_on: Iterable[str] = ("fail",)) -> str:
    root = build_junit(fleet, check_ids, fail_on)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(fleet: dict[str, Any], path: str | Path, check_ids: Iterable[str] = (),
                fail_on: Iterable[str] = ("fail",)) -> Path:
    return write_atomic(path, render_junit(fleet, check_ids, fail_on))
