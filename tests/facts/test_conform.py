"""facts/conform.py: facts read back from a file checked against facts/model.py.

Two promises: what is not of its declared type is left out with the place it differs, and
everything the normalizers and the text importer make *is* of its declared type (else a stored
run would lose real data on reading, and model.py would describe something else than fleet.json)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from orchestrator.facts.conform import conform_facts, conform_probes
from orchestrator.facts.normalize import normalize_host
from orchestrator.facts.textparse.importer import import_files
from tests.support.normalize_corpus import recorded_data, session_corpus

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = sorted(p for d in ("text", "evidence") for p in (ROOT / "tests" / "fixtures" / d).iterdir()
                  if p.is_file() and p.suffix != ".md")


@pytest.fixture(scope="module")
def demo_facts() -> dict[str, Any]:
    facts, errors = normalize_host(dict(recorded_data()[0][1]))
    assert not errors
    return facts


@pytest.mark.parametrize("host, data", recorded_data(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_recorded_host_normalizes_to_its_declared_types(host: str, data: dict[str, Any]) -> None:
    facts, _errors = normalize_host(data)
    kept, problems = conform_facts(facts)
    assert problems == [], (host, problems)
    assert kept == facts


def test_the_simulated_pcie_corpus_normalizes_to_its_declared_types() -> None:
    for host, data in session_corpus():
        facts, _errors = normalize_host(data)
        assert conform_facts(facts)[1] == [], host


@pytest.mark.parametrize("path", EVIDENCE, ids=lambda p: p.name)
def test_every_published_output_imports_to_its_declared_types(path: Path) -> None:
    host = import_files([path])
    assert not [e for e in host.errors if "left out" in e], host.errors


@pytest.mark.parametrize("where, value, says", [
    (("gpus",), 7, "facts.gpus: object expected, integer found"),
    (("gpus", "list", 0, "index"), "zero", "facts.gpus.list[0].index: integer or null expected, string found"),
    (("gpus", "list", 0, "index"), True, "bool found"),  # a bool is not a number here
    (("gpus", "count"), float("nan"), "facts.gpus.count"),
    (("host", "cpu", "cores"), [4], "list found"),
    (("nvlink", "gpus"), {"a": 1}, "facts.nvlink.gpus: list expected, object found"),
])
def test_a_section_of_another_type_is_left_out_saying_where(demo_facts: dict[str, Any], where: tuple[Any, ...],
                                                             value: Any, says: str) -> None:
    facts = copy.deepcopy(demo_facts)
    node = facts
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    kept, problems = conform_facts(facts)
    assert len(problems) == 1 and says in problems[0] and "left out" in problems[0], problems
    assert where[0] not in kept
    assert set(kept) == set(demo_facts) - {where[0]}, "the other sections are kept"


def test_a_missing_key_or_an_unknown_one_is_no_difference(demo_facts: dict[str, Any]) -> None:
    facts = copy.deepcopy(demo_facts)
    del facts["gpus"]["list"][0]["index"]  # a run stored before the key existed
    facts["gpus"]["from_the_future"] = {"x": 1}
    facts["a_section_of_the_future"] = [1, 2]
    kept, problems = conform_facts(facts)
    assert problems == [] and kept == facts


def test_a_float_where_a_number_is_declared_may_be_an_int_never_infinite(demo_facts: dict[str, Any]) -> None:
    facts = copy.deepcopy(demo_facts)
    p2p = facts.get("p2p") or {}
    for gpu in p2p.get("gpus") or []:
        gpu["h2d_gbps"] = 25  # JSON has one kind of number
    assert conform_facts(facts)[1] == []
    if p2p.get("gpus"):
        p2p["gpus"][0]["h2d_gbps"] = float("inf")
        assert "not a finite number" in conform_facts(facts)[1][0]


def test_facts_that_are_not_an_object_are_none() -> None:
    assert conform_facts([1, 2]) == ({}, ["facts: object expected, list found; no facts kept"])


def test_probe_records_lose_only_their_wrong_fields() -> None:
    probes, problems = conform_probes({
        "host": {"outcome": "ok", "reason": "", "duration_s": float("nan"), "retried": 0},
        "nvml": 5,
        "pcie": {"outcome": 3, "reason": "r", "duration_s": 1.5},
    })
    assert probes == {"host": {"outcome": "ok", "reason": "", "retried": 0}, "pcie": {"reason": "r", "duration_s": 1.5}}
    assert len(problems) == 3 and all("left out" in p for p in problems)
