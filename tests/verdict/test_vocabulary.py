"""One home per vocabulary: the copies a lower layer must keep are held equal to their home."""

from __future__ import annotations

from orchestrator.facts import read
from orchestrator.verdict.findings import SEVERITY_ORDER, Severity, severity_rank


def test_severity_order_is_declared_once_worst_first() -> None:
    assert SEVERITY_ORDER == ("fail", "warn", "info")
    assert [s.rank for s in Severity] == [2, 1, 0]
    assert severity_rank("warn") == 1 and severity_rank("bogus") == -1 and severity_rank(None) == -1


def test_the_facts_layer_copy_of_the_severity_order_matches() -> None:
    assert read.SEVERITIES == SEVERITY_ORDER
