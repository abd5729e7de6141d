"""The stored-form comparison of issue 51 item 2 (bench/codec_bench.py --forms) measures what it
says: every form gives back the record it was given (JSON types included), and a file of one gzip
member per record is one JSON document to the real `zcat` and `jq`, which is the claim the
decision in bench/RESULTS.md rests on."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import codec_bench as cb  # noqa: E402

STDLIB = {"msgspec": None, "orjson": None, "zstandard": None}


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return list(cb.demo_records(6))  # six different demo machines, judged


def test_every_stdlib_form_reads_back_the_record_it_was_given(records: list[dict]) -> None:
    forms = cb.stored_forms(STDLIB)
    assert [f.name for f in forms] == ["schema 2 (read, written until issue 51): compact encode + json",
                                       "schema 1: json", "schema 1: json + zlib 1 (gzip member)",
                                       "schema 3 (written): fleet_file.stored_record + gzip member",
                                       "schema 3, the stdlib writer (no msgspec)"]
    plain = json.JSONEncoder(separators=(",", ":")).encode
    for rec in records:
        for f in forms:
            assert plain(f.read(f.write(rec))) == plain(rec), f.name


def test_gzip_members_of_hostile_texts_are_one_document_to_zcat_and_jq(tmp_path: Path) -> None:
    for tool in ("zcat", "jq"):
        assert shutil.which(tool), f"{tool} is not installed (apt-get install gzip jq)"
    form = cb.stored_forms(STDLIB)[2]
    # member texts that would break a reader splitting on bytes: ], }, commas, gzip's own magic
    # bytes and newlines inside strings, an empty object, non-ASCII
    hostile = [{"name": "a]},{", "facts": {}}, {"name": "\x1f\x8b\x08", "x": [1.0, -0.0, True]},
               {"name": "line\nbreak", "é": "ü"}, {}]
    members = [form.write(r) for r in hostile]
    assert cb.jq_reads(form, members, tmp_path) == "yes (zcat)"
    whole = (tmp_path / "fleet").read_bytes()
    # Python's own reader of the whole file must be gzip's, which reads every member: zlib's stops
    # after the first (what a schema of gzip members would have to get right)
    assert json.loads(gzip.decompress(whole)) == {"schema_version": 1, "hosts": hostile}
    assert cb.gunzip(whole) == b'{"schema_version":1,"hosts":['



def test_a_damaged_member_is_refused_by_jq(tmp_path: Path) -> None:
    form = cb.stored_forms(STDLIB)[2]
    members = [form.write({"name": "a"}), form.write({"name": "b"})[:-6]]  # the second cut short
    assert cb.jq_reads(form, members, tmp_path).startswith("no")
