"""One home per vocabulary: the copies a lower layer must keep are held equal to their home."""

from __future__ import annotations

import dataclasses
import json

from orchestrator.verdict.findings import SEVERITY_ORDER, Severity, severity_rank


def test_severity_order_is_declared_once_worst_first() -> None:
    assert SEVERITY_ORDER == ("fail", "warn", "info")
    assert [s.rank for s in Severity] == [2, 1, 0]
    assert severity_rank("warn") == 1 and severity_rank("bogus") == -1 and severity_rank(None) == -1


def test_which_outcomes_are_a_problem_is_said_once() -> None:
    from orchestrator.engine.outcomes import NOT_PROBLEMS, Outcome, is_problem

    # interrupted: a probe the operator's Ctrl-C cut off is not the host's problem (the run exits 130)
    assert {o for o in Outcome if not o.is_problem} == {Outcome.OK, Outcome.SKIPPED, Outcome.UNSUPPORTED,
                                                          Outcome.INTERRUPTED}
    assert all(is_problem(o.value) == o.is_problem for o in Outcome)
    assert {"ok", "skipped", "unsupported", "interrupted"} == NOT_PROBLEMS


def test_one_pcie_rate_table() -> None:
    from orchestrator.facts import gpu_models
    from orchestrator.facts.normalize import pcie

    assert gpu_models.PCIE_SPEED_TEXT[4] == "16.0 GT/s" and gpu_models.gen_from_speed("32.0 GT/s PCIe") == 5
    assert pcie.parse_speed("16 GT/s") == (4, "16.0 GT/s") and pcie.parse_speed("2.5 GT/s PCIe") == (1, "2.5 GT/s")


def test_one_list_of_output_formats() -> None:
    from orchestrator.present.outputs.tabular import FORMATS, OUTPUT_FORMATS

    assert OUTPUT_FORMATS == ("table", *FORMATS) == ("table", "json", "yaml", "csv")


def test_a_finding_as_fleet_json_stores_it_has_every_field_in_order_and_round_trips() -> None:
    from dataclasses import fields

    from orchestrator.verdict.findings import Finding, FindingRef, Kind

    f = Finding("gpu.xid", Severity.WARN, Kind.UNKNOWN, "h1", "GPU0", "m", {"a": [1]}, [2], ["gpus.list"], "hint")
    d = f.to_dict()
    # a field added to Finding reaches fleet.json; the root fields only where they are set
    assert list(d) == [x.name for x in fields(Finding) if x.name not in ("caused_by", "consequences")]
    assert (d["severity"], d["kind"]) == ("warn", "unknown")
    assert Finding.from_dict(d) == f
    rooted = dataclasses.replace(f, caused_by=FindingRef("gpu.lost", "GPU0"), consequences=(FindingRef("a.b", "x"),))
    d = rooted.to_dict()
    assert list(d) == [x.name for x in fields(Finding)]
    assert d["caused_by"] == {"id": "gpu.lost", "subject": "GPU0"} and d["consequences"] == [{"id": "a.b", "subject": "x"}]
    assert Finding.from_dict(json.loads(json.dumps(d))) == rooted
