"""Text imports fill the same records as live probes (issue 15): every top-level key of a section a
text import writes is declared on that section's TypedDict (facts/model.py), and the `nv` matrix
of the nvlink section is indexed by its `gpus` in both origins, never by a text-only label list."""

from __future__ import annotations

import typing

import pytest

from orchestrator.facts import model
from orchestrator.facts.normalize import normalize_host
from orchestrator.facts.textparse import import_files
from tests.facts.test_textparse_common import FIXTURES
from tests.support.evidence import EVIDENCE, evidence
from tests.support.normalize_corpus import recorded_data

SECTION_TYPES = typing.get_type_hints(model.Facts)
TEXTS = sorted(p for d in (FIXTURES, EVIDENCE) for p in d.iterdir() if p.suffix in (".txt", ".xml"))


def declared(section: str) -> set[str]:
    td = SECTION_TYPES[section]
    return set(td.__required_keys__) | set(td.__optional_keys__)


@pytest.mark.parametrize("path", TEXTS, ids=[p.name for p in TEXTS])
def test_text_sections_have_only_declared_keys(path) -> None:
    host = import_files([path])
    assert host.facts or host.errors, f"{path.name}: neither facts nor an error"
    for section, value in host.facts.items():
        assert set(value) - declared(section) == set(), f"{path.name}: {section} has undeclared keys"


def test_nv_rows_are_the_gpus_of_the_section_in_both_origins() -> None:
    text = import_files([evidence("topo_h100_6gpu_visible_2nic_01.txt")]).facts["nvlink"]
    lives = [normalize_host(data)[0]["nvlink"] for _, data in recorded_data()
             if "nvlink" in data]
    live = next(s for s in lives if any(x for row in s["nv"] for x in row))
    for section in (text, live):
        assert "nv_labels" not in section
        assert len(section["nv"]) == len(section["gpus"]) == len(section["order"])
        assert all(isinstance(g["index"], int) for g in section["gpus"])
    assert [g["index"] for g in text["gpus"]] == list(range(len(text["gpus"])))
    assert text["nv"][0][5] == 18 and text["nv"][0][0] is None
