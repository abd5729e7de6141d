"""Values a finding or a host does not have read as unknown in JUnit and drift text, never as
Python's `None` (issue 16: "None is never printed anywhere")."""

from __future__ import annotations

from typing import Any

from orchestrator.present.outputs.junit import render_junit
from orchestrator.present.terminal.drift import render_diff
from orchestrator.verdict.drift import diff_fleets
from tests.support.judged import judged


def _fleet(cls: str | None, expected: Any) -> dict[str, Any]:
    probes = {p: {"outcome": "ok", "reason": ""} for p in ("host", "pcie", "nvml", "nvlink")}
    host = {"name": "gpu01", "outcome": "ok", "reason": "", "groups": [], "probes": probes,
            "facts": {"host": {}, "gpus": {"list": []}}, "class": cls, "fingerprint": None}
    finding = {"id": "gpu.count.mismatch", "severity": "fail", "kind": "fault", "host": "gpu01", "subject": "GPUs",
               "message": "7 GPUs", "expected": expected, "actual": 7, "evidence": [], "hint": ""}
    return {"schema_version": 1, "run": {"id": "r", "probes": list(probes)}, "summary": {}, "hosts": [host],
            "classes": [], "findings": [finding], "silenced": [], "not_judged": {}}


def test_junit_names_an_unknown_expectation_without_none() -> None:
    xml = render_junit(judged(_fleet("8xH100", None)), ["gpu.count.mismatch"])
    assert "expected: ?  actual: 7" in xml and "None" not in xml


def test_drift_of_a_host_that_lost_its_class_says_none_not_None() -> None:
    text = render_diff(diff_fleets(judged(_fleet("8xH100-SXM-NV18", 8)), judged(_fleet(None, 8))))
    assert "topology class 8xH100-SXM-NV18 -> none" in text and "None" not in text
