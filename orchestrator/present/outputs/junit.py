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

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.facts.textsafe import display_safe
from orchestrator.present.outputs import write_atomic
from orchestrator.present.readable import readable
from orchestrator.verdict.coverage import NOT_JUDGED, CheckState
from orchestrator.verdict.fabric_faults import FabricFault, host_findings
from orchestrator.verdict.findings import Finding
from orchestrator.verdict.result import FleetResult, JudgedHost

_ERROR_OUTCOMES = ("failed", "invalid_output", "timeout")
_SKIP_OUTCOMES = ("skipped", "unsupported", "interrupted")  # nothing measured, nothing wrong with the host
# XML 1.0 cannot carry most control characters even escaped; a host's text must not break the file.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", display_safe(value))


def _finding_text(f: Finding) -> str:
    lines = [f"[{f.severity.value}/{f.kind.value}] {f.subject}: {f.message}"]
    if f.caused_by is not None:
        lines.append(f"  follows from: {f.caused_by.id} {f.caused_by.subject}")
    if f.expected is not None or f.actual is not None:
        lines.append(f"  expected: {readable(f.expected)}  actual: {readable(f.actual)}")
    lines.append(f"  action: {f.action.value} ({f.because})")
    if f.hint:
        lines.append(f"  hint: {f.hint}")
    for e in f.evidence:
        lines.append(f"  evidence: {e}")
    return "\n".join(lines)


def _finding_properties(tc: ET.Element, findings: list[Finding]) -> None:
    """The case's findings as properties a CI reads without parsing text (pytest's record_property
    form): per finding, in order, its subject, action, the action's reason and its devices (JSON)."""
    if not findings:
        return
    props = ET.SubElement(tc, "properties")
    for f in findings:
        for key, value in (("subject", f.subject), ("action", f.action.value), ("because", f.because),
                           ("devices", json.dumps([d.to_dict() for d in f.devices], sort_keys=True))):
            ET.SubElement(props, "property", name=key, value=_x(value))


def _host_suite(h: JudgedHost, findings: list[Finding], states: dict[str, CheckState],
                fail_sev: set[str]) -> ET.Element:
    name = h.name
    suite = ET.Element("testsuite", name=_x(name))
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="health", value=h.health.state.value)
    if h.health.reason:
        ET.SubElement(props, "property", name="health_reason", value=_x(h.health.reason))

    def case(check: str) -> ET.Element:
        return ET.SubElement(suite, "testcase", classname=_x(f"fleetprobe.{name}"), name=_x(check))

    if not h.reachable:
        reason = h.reason or "no reason recorded"
        err = ET.SubElement(case("host.reachable"), "error", message=_x(f"unreachable: {reason}"), type="unreachable")
        err.text = _x(reason)
        return suite
    for probe, run in sorted(h.probes.items()):
        tc = case(f"probe.{probe}")
        if run.duration_s is not None:
            tc.set("time", f"{run.duration_s:.3f}")
        if run.outcome in _ERROR_OUTCOMES:
            ET.SubElement(tc, "error", message=_x(f"{run.outcome}: {run.reason}"), type=_x(run.outcome)).text = \
                _x(run.reason)
        elif run.outcome in _SKIP_OUTCOMES:
            ET.SubElement(tc, "skipped", message=_x(f"{run.outcome}: {run.reason}"))
    by_id: dict[str, list[Finding]] = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f)
    for check, state in states.items():
        tc = case(check)
        if state.state == NOT_JUDGED:
            ET.SubElement(tc, "skipped", message=_x(f"not judged: {state.reason}"))
            continue
        hits = by_id.get(check, [])
        _finding_properties(tc, hits)
        failing = [f for f in hits if f.severity.value in fail_sev]
        rest = [f for f in hits if f.severity.value not in fail_sev]
        if failing:
            msg = f"{failing[0].subject}: {failing[0].message}"
            if len(failing) > 1:
                msg += f" (+{len(failing) - 1} more)"
            failure = ET.SubElement(tc, "failure", message=_x(msg), type=_x(failing[0].severity.value))
            failure.text = _x("\n".join(_finding_text(f) for f in failing))
        if rest:
            ET.SubElement(tc, "system-out").text = _x("\n".join(_finding_text(f) for f in rest))
    return suite


def _fabric_suite(faults: list[FabricFault], fail_sev: set[str]) -> ET.Element:
    """The fabric's faults, one case each (a host's suite does not fail for them: docs/fabric.md)."""
    suite = ET.Element("testsuite", name="fabric")
    for f in faults:
        tc = ET.SubElement(suite, "testcase", classname="fleetprobe.fabric", name=_x(f"{f.id} {f.subject}"))
        text = "\n".join([f"[{f.severity.value}/{f.kind.value}] {f.subject}: {f.message}", f"  hosts: {f.hosts_text()}",
                          f"  action: {f.action.value} ({f.because})"] + ([f"  hint: {f.hint}"] if f.hint else [])
                         + [f"  evidence: {e}" for e in f.evidence])
        props = ET.SubElement(tc, "properties")
        ET.SubElement(props, "property", name="hosts", value=_x(json.dumps(list(f.hosts))))
        for key, value in (("action", f.action.value), ("because", f.because),
                           ("devices", json.dumps([d.to_dict() for d in f.devices]))):
            ET.SubElement(props, "property", name=key, value=_x(value))
        if f.severity.value in fail_sev:
            failure = ET.SubElement(tc, "failure", message=_x(f"{f.subject}: {f.message} ({f.hosts_text()})"),
                                    type=_x(f.severity.value))
            failure.text = _x(text)
        else:
            ET.SubElement(tc, "system-out").text = _x(text)
    return suite


def _set_counts(el: ET.Element, cases: list[ET.Element]) -> None:
    el.set("tests", str(len(cases)))
    for attr, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
        el.set(attr, str(sum(1 for c in cases if c.find(tag) is not None)))


def build_junit(fleet: FleetResult, check_ids: Iterable[str] | None = None,
                fail_on: Iterable[str] = ("fail",)) -> ET.Element:
    """One case per host and check id: `check_ids` (default: every id the run could raise, the
    catalog's, fleet.check_ids) and every id the run did raise; the fabric's faults in a suite of
    their own, one case each (a host's case for such an id passes: the fault is not the host's)."""
    fail_sev = set(fail_on)
    ids = sorted(set(fleet.check_ids if check_ids is None else check_ids) | {f.id for f in fleet.findings})
    run = fleet.run
    root = ET.Element("testsuites", name=_x(f"fleetprobe {run.id}".strip()))
    for h, states in fleet.check_states(ids):
        suite = _host_suite(h, host_findings(fleet.findings_of(h.name)), states, fail_sev)
        if run.started:
            suite.set("timestamp", _x(run.started))
        _set_counts(suite, suite.findall("testcase"))
        root.append(suite)
    if fleet.fabric_faults:
        suite = _fabric_suite(fleet.fabric_faults, fail_sev)
        _set_counts(suite, suite.findall("testcase"))
        root.append(suite)
    _set_counts(root, root.findall("testsuite/testcase"))
    return root


def render_junit(fleet: FleetResult, check_ids: Iterable[str] | None = None, fail_on: Iterable[str] = ("fail",)) -> str:
    root = build_junit(fleet, check_ids, fail_on)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(fleet: FleetResult, path: str | Path, check_ids: Iterable[str] | None = None,
                fail_on: Iterable[str] = ("fail",)) -> Path:
    return write_atomic(path, render_junit(fleet, check_ids, fail_on))
