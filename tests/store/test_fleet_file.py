"""fleet.json schema 2 with its index: the bytes write_json writes for the schema-2 document
(store/compact.py), host records read back one at a time, and a plain full parse whenever the
index does not belong to the file.  The files are written by schema 2's own writer, kept in
tests/support/schema2.py since fleetprobe writes schema 3 (issue 51: tests/store/test_stored_forms.py);
the readers under test are the product's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.results import HostInput
from orchestrator.store import atomic
from orchestrator.store.compact import decode_fleet, encode_fleet, read_plain
from orchestrator.store.fleet_file import INDEX_NAME, LAYOUTS_NAME, read_fleet
from orchestrator.store.history import load_fleet
from orchestrator.store.spool import SpooledRecords
from orchestrator.verdict.drift import diff_fleets
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet
from tests.support.demo_inputs import copies as _copies
from tests.support.judged import judged, meta
from tests.support.schema2 import write_fleet


def _fleet(inputs: list[HostInput], workers: int, spool: Path, gpus: int = 8) -> dict:
    return build_fleet(meta(f"w{workers}"), inputs, lambda h: Expectations(gpu_count=gpus), lambda h: {},
                       spool=spool, workers=workers).to_document()


@pytest.mark.parametrize("workers", [1, 2])
def test_written_like_write_json_and_read_back_by_index(demo_inputs: list[HostInput], tmp_path: Path,
                                                       workers: int) -> None:
    fleet = _fleet(_copies(demo_inputs, 40), workers, tmp_path)
    plain = atomic.write_json(tmp_path / "plain.json", encode_fleet(fleet))
    run = tmp_path / "run"
    run.mkdir()
    path = write_fleet(run / "fleet.json", fleet)
    assert path.read_bytes() == plain.read_bytes()
    index = json.loads((run / INDEX_NAME).read_text())
    assert [e[0] for e in index["hosts"]] == [h["name"] for h in fleet["hosts"]]

    back = read_fleet(path)
    assert isinstance(back["hosts"], SpooledRecords)
    whole = decode_fleet(json.loads(path.read_text()))
    assert whole["hosts"] == [dict(h) for h in fleet["hosts"]]
    assert {k: v for k, v in back.items() if k != "hosts"} == {k: v for k, v in whole.items() if k != "hosts"}
    assert list(back["hosts"]) == whole["hosts"]
    assert back["hosts"].by_name(whole["hosts"][7]["name"]) == whole["hosts"][7]
    assert back["hosts"].by_name("no-such-host") is None
    assert load_fleet(run)["summary"] == whole["summary"]
    # written again from what was read back: still the same bytes
    again = tmp_path / "again"
    again.mkdir()
    assert write_fleet(again / "fleet.json", back).read_bytes() == plain.read_bytes()


def test_an_index_that_does_not_match_the_file_is_ignored(demo_inputs: list[HostInput], tmp_path: Path) -> None:
    path = write_fleet(tmp_path / "fleet.json", _fleet(_copies(demo_inputs, 12), 1, tmp_path))
    whole = decode_fleet(json.loads(path.read_text()))
    # edited by hand (same size, other time): parsed whole
    os.utime(path, ns=(1, 1))
    assert isinstance(read_fleet(path)["hosts"], list) and read_fleet(path) == whole
    for bad in ("{not json", json.dumps({"version": 99}), json.dumps({"version": 1, "size": path.stat().st_size,
                "mtime_ns": path.stat().st_mtime_ns, "hosts": [["a", 10, 5], ["b", 2, 5]]})):
        (tmp_path / INDEX_NAME).write_text(bad)
        assert read_fleet(path) == whole
    (tmp_path / INDEX_NAME).unlink()
    assert read_fleet(path) == whole


def test_drift_between_stored_fleets_reads_hosts_on_demand(demo_inputs: list[HostInput], tmp_path: Path) -> None:
    hosts = _copies(demo_inputs, 60)
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    write_fleet(old / "fleet.json", _fleet(hosts[:50], 2, tmp_path))
    # ten hosts gone, ten new, and a stricter expectation: findings appear on the rest
    write_fleet(new / "fleet.json", _fleet(hosts[10:], 2, tmp_path, gpus=16))
    lazy = diff_fleets(judged(load_fleet(old)), judged(load_fleet(new)))
    whole = diff_fleets(judged(read_plain(old / "fleet.json")), judged(read_plain(new / "fleet.json")))
    assert lazy.to_dict() == whole.to_dict()
    kinds = lazy.kinds()
    # hosts in one run only are listed, not changes (issue 16: one summary line, not one per host)
    assert len(lazy.not_in_new) == 10 and len(lazy.not_in_old) == 10 and kinds["finding.new"] >= 30


def test_record_text_cut_into_parts_is_the_compact_encoding() -> None:
    """The workers encode a record once and hash some of its parts for drift (record_text's
    `parts`): the text is still exactly what schema 2 stores (compact.host_text), and each part is
    its value's stored text."""
    from orchestrator.store import atomic, compact
    from tests.support.schema2 import record_text

    rec = {"name": "h1", "facts": {"gpus": {"list": [{"uuid": "GPU-ü", "x": float("nan")}]}, "pcie": {}},
           "probes": {"nvml": {"outcome": "ok", "duration_s": 0.5}}, "odd": {1: "int key"}, "class": None}
    parts: dict[str, str] = {}
    assert record_text(rec, parts) == compact.host_text(rec) == record_text(rec)
    assert parts["facts.gpus"] == compact.value_text(rec["facts"]["gpus"])
    assert parts["odd"] == compact.value_text(rec["odd"]) == '{"@v":{"1":"int key"}}' and parts["class"] == "null"
    # and it reads back as the record (json's text of it: the int key is "1" in any JSON)
    assert atomic.encode_json(compact.decode_host(json.loads(record_text(rec)))) == atomic.encode_json(rec)


@pytest.mark.parametrize("workers", [1, 2])
def test_readers_of_a_few_sections_get_those_and_everything_else_of_each_record(
        demo_inputs: list[HostInput], tmp_path: Path, workers: int) -> None:
    fleet = _fleet(_copies(demo_inputs, 30), workers, tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    write_fleet(run / "fleet.json", fleet)
    for hosts in (fleet["hosts"], read_fleet(run / "fleet.json")["hosts"]):
        whole = list(hosts)
        light = list(records_with(hosts, ("host", "gpus")))
        assert len(light) == len(whole) == 30
        for a, b in zip(light, whole):  # as long as each other (asserted above)
            if isinstance(hosts, SpooledRecords):
                assert set(a["facts"]) == {"host", "gpus"} & set(b["facts"])
            assert {k: v for k, v in a["facts"].items()} == {k: b["facts"][k] for k in a["facts"]}
            assert {k: v for k, v in a.items() if k != "facts"} == {k: v for k, v in b.items() if k != "facts"}


def test_facts_kept_verbatim_are_read_whole_by_a_reader_of_a_few_sections(tmp_path: Path) -> None:
    odd = {"name": "h1", "outcome": "ok", "facts": {"@odd": {"x": 1}, "host": {"hostname": "h1"}},
           "fingerprint": None, "class": None}
    fleet = {"run": {"id": "t"}, "summary": {}, "hosts": [odd], "classes": {}, "findings": []}
    write_fleet(tmp_path / "fleet.json", fleet)
    [back] = list(records_with(read_fleet(tmp_path / "fleet.json")["hosts"], ("host",)))
    assert back["facts"] == odd["facts"]


def records_with(hosts: Any, sections: tuple[str, ...]) -> Any:
    """What a reader of only these sections gets: a spooled fleet cuts each record to them, records
    in memory are handed over as they are."""
    return hosts.with_facts(sections) if isinstance(hosts, SpooledRecords) else hosts


def _parsed_texts(monkeypatch: pytest.MonkeyPatch) -> list[bytes | str]:
    """Every text the spool hands json.loads, from now on."""
    from orchestrator.store import spool

    seen: list[bytes | str] = []
    real = spool.json.loads

    def loads(text: bytes | str, *a: object, **k: object) -> object:
        seen.append(text)
        return real(text, *a, **k)
    monkeypatch.setattr(spool.json, "loads", loads)
    return seen


@pytest.mark.parametrize("workers", [1, 2])
def test_a_reader_of_a_few_sections_parses_only_those_where_the_layout_is_known(
        demo_inputs: list[HostInput], tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spool of a fleet judged in workers, and a stored fleet.json with its layouts file, know
    where each record's facts sections sit: a reader of names and a section or two never parses
    the other sections' text (instrumented), and gets what parsing the whole record gives."""
    fleet = _fleet(_copies(demo_inputs, 30), workers, tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    write_fleet(run / "fleet.json", fleet)
    assert (run / LAYOUTS_NAME).is_file()
    # in memory when judged in this process (a small fleet); read from the file either way
    spooled = [fleet["hosts"]] if workers > 1 else []
    for hosts in [*spooled, read_fleet(run / "fleet.json")["hosts"]]:
        assert isinstance(hosts, SpooledRecords)
        whole = list(hosts)
        pcie = [hosts.plain(i)[slice(*_span(hosts, i, "pcie"))] for i in range(len(hosts))]
        seen = _parsed_texts(monkeypatch)
        light = list(hosts.with_facts(("host", "gpus")))
        bare = list(hosts.with_facts(()))
        monkeypatch.undo()
        assert seen and not any(p in t for t in seen for p in pcie if isinstance(t, bytes))
        assert sum(map(len, seen)) < sum(len(hosts.plain(i)) for i in range(len(hosts))) / 2
        for a, b, c in zip(light, bare, whole):
            assert list(a["facts"]) == [s for s in c["facts"] if s in ("host", "gpus")]
            assert a["facts"] == {s: c["facts"][s] for s in a["facts"]} and b["facts"] == {}
            for r in (a, b):
                assert {k: v for k, v in r.items() if k != "facts"} == {k: v for k, v in c.items() if k != "facts"}


def _span(hosts: SpooledRecords, i: int, section: str) -> tuple[int, int]:
    layout = hosts.layout(i)
    assert layout is not None
    [(a, b)] = [(a, b) for name, a, b in layout[2] if name == section]
    return a, b


def test_a_layout_that_does_not_fit_its_record_costs_only_the_time_of_a_whole_parse(
        demo_inputs: list[HostInput], tmp_path: Path) -> None:
    """A layouts file that belongs to another fleet.json, or with entries that point elsewhere in a
    record, is never trusted: the records are parsed whole and read the same."""
    fleet = _fleet(_copies(demo_inputs, 12), 2, tmp_path)
    path = write_fleet(tmp_path / "fleet.json", fleet)
    want = [dict(r) for r in read_fleet(path)["hosts"].with_facts(("gpus",))]
    doc = json.loads((tmp_path / LAYOUTS_NAME).read_text())
    shifted = [[s + 7, e + 7, [[n, a + 7, b + 7] for n, a, b in secs]] for s, e, secs in doc["hosts"]]
    swapped = doc["hosts"][1:] + doc["hosts"][:1]
    for bad in ({**doc, "hosts": shifted}, {**doc, "hosts": swapped}, {**doc, "size": 1},
                {**doc, "hosts": [["x", 1, 2]] * len(doc["hosts"])}, {**doc, "hosts": doc["hosts"][1:]}):
        (tmp_path / LAYOUTS_NAME).write_text(json.dumps(bad))
        back = read_fleet(path)["hosts"]
        assert [dict(r) for r in back.with_facts(("gpus",))] == want


def test_the_index_and_layouts_have_a_row_per_host_that_points_into_fleet_json(
        demo_inputs: list[HostInput], tmp_path: Path) -> None:
    """Each index row is the host's byte range in fleet.json; each layout row where its facts and
    sections sit in that range, or null for a record whose facts are kept verbatim."""
    fleet = _fleet(_copies(demo_inputs, 6), 2, tmp_path)
    odd = {"name": "odd", "outcome": "ok", "facts": {"@odd": {"x": 1}}, "fingerprint": None, "class": None}
    fleet = {**fleet, "hosts": [*list(fleet["hosts"]), odd]}
    path = write_fleet(tmp_path / "fleet.json", fleet)
    data = path.read_bytes()
    rows = json.loads((tmp_path / INDEX_NAME).read_text())["hosts"]
    layouts = json.loads((tmp_path / LAYOUTS_NAME).read_text())["hosts"]
    assert [r[0] for r in rows] == [h["name"] for h in fleet["hosts"]] and len(layouts) == len(rows)
    for (name, start, length), layout in zip(rows, layouts):
        rec = json.loads(data[start:start + length])
        assert rec["name"] == name
        if name == "odd":
            assert layout is None
            continue
        facts_start, facts_end, sections = layout
        stored_facts = json.loads(data[start + facts_start:start + facts_end])
        assert stored_facts == rec["facts"] and [s[0] for s in sections] == list(rec["facts"])
        for section, a, b in sections:
            assert json.loads(data[start + a:start + b]) == rec["facts"][section]


def _rows_edited(path: Path, side: str, edit: Any) -> None:
    """Rewrite a file beside fleet.json (the index, the layouts) with its rows edited, keeping it
    stamped with fleet.json's size and time so that only the rows can make it wrong."""
    doc = json.loads((path.parent / side).read_text())
    doc["hosts"] = edit(json.loads(json.dumps(doc["hosts"])))
    (path.parent / side).write_text(json.dumps(doc))


def _row(i: int, field: int, value: Any) -> Any:
    def edit(rows: list[Any]) -> list[Any]:
        rows[i][field] = value(rows[i][field]) if callable(value) else value
        return rows
    return edit


def _swapped_names(rows: list[Any]) -> list[Any]:
    rows[1][0], rows[2][0] = rows[2][0], rows[1][0]
    return rows


# Index rows that do not describe fleet.json's records one for one: each would lose, rename or
# damage a host if it were trusted.
BAD_INDEX_ROWS = {
    "a middle row gone": lambda rows: rows[:3] + rows[4:],
    "the first row gone": lambda rows: rows[1:],
    "the last row gone": lambda rows: rows[:-1],
    "a row twice": lambda rows: rows[:3] + rows[2:],
    "a middle length one short": _row(3, 2, lambda n: n - 1),
    "the last length one short": _row(-1, 2, lambda n: n - 1),
    "the last length one long": _row(-1, 2, lambda n: n + 1),
    "a name null": _row(3, 0, None),
    "a name a number": _row(3, 0, 7),
    "a name another host's": _swapped_names,
    "a name no host's": _row(0, 0, "not-a-host"),
    "a name a prefix of the host's": _row(0, 0, lambda name: name[:-1]),
}


@pytest.mark.parametrize("case", sorted(BAD_INDEX_ROWS))
def test_an_index_that_does_not_name_every_record_exactly_is_not_trusted(
        demo_inputs: list[HostInput], tmp_path: Path, case: str) -> None:
    """fleet.json itself is whole: every host is read, under the name its record carries, as a
    full parse reads it (no host left out, none read as damaged, no name taken from the index)."""
    path = write_fleet(tmp_path / "fleet.json", _fleet(_copies(demo_inputs, 12), 2, tmp_path))
    whole = decode_fleet(json.loads(path.read_text()))
    _rows_edited(path, INDEX_NAME, BAD_INDEX_ROWS[case])
    back = read_fleet(path)
    assert back == whole
    hosts = back["hosts"]
    names = hosts.names() if isinstance(hosts, SpooledRecords) else [h["name"] for h in hosts]
    assert names == [h["name"] for h in whole["hosts"]]



def _sections_edited(edit: Any) -> Any:
    def rows_edit(rows: list[Any]) -> list[Any]:
        rows[0][2] = edit(rows[0][2])
        return rows
    return rows_edit


def _names_swapped(sections: list[Any]) -> list[Any]:
    sections[0][0], sections[2][0] = sections[2][0], sections[0][0]
    return sections


def _renamed(sections: list[Any]) -> list[Any]:
    sections[1][0] = "gpus"
    return sections


# Layout rows whose every span lies inside its record's facts but says the wrong thing of it.
BAD_SECTION_SPANS = {
    "two sections' names swapped": _names_swapped,
    "a section named as another": _renamed,
    "the gpus span gone": lambda sections: [s for s in sections if s[0] != "gpus"],
    "the first span gone": lambda sections: sections[1:],
    "a span twice": lambda sections: sections[:2] + sections[1:],
}


@pytest.mark.parametrize("case", sorted(BAD_SECTION_SPANS))
def test_a_layout_whose_sections_are_not_where_it_says_is_not_trusted(
        demo_inputs: list[HostInput], tmp_path: Path, case: str) -> None:
    """A reader of a few sections gets each record's facts as a whole parse gives them: a span
    is used only where its own section's key stands just before it."""
    path = write_fleet(tmp_path / "fleet.json", _fleet(_copies(demo_inputs, 6), 2, tmp_path))
    want = [dict(r) for r in read_fleet(path)["hosts"].with_facts(("host", "gpus", "pcie"))]
    assert all(r["facts"].get("gpus") for r in want)  # the demo's first host has GPUs to lose
    _rows_edited(path, LAYOUTS_NAME, _sections_edited(BAD_SECTION_SPANS[case]))
    back = read_fleet(path)["hosts"]
    assert [dict(r) for r in back.with_facts(("host", "gpus", "pcie"))] == want


@pytest.mark.parametrize("where", ["its name", "its closing brace"])
def test_a_record_damaged_where_the_index_checks_it_costs_only_its_host(
        demo_inputs: list[HostInput], tmp_path: Path, where: str) -> None:
    """The bytes the index's names are checked against can be damaged themselves: the file no
    longer parses whole, and it is read by its index, as damage anywhere else in a record is."""
    path = write_fleet(tmp_path / "fleet.json", _fleet(_copies(demo_inputs, 6), 2, tmp_path))
    whole = decode_fleet(json.loads(path.read_text()))
    rows = json.loads((tmp_path / INDEX_NAME).read_text())["hosts"]
    name, offset, length = rows[2]
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[offset + len('{"name":') if where == "its name" else offset + length - 1] = ord("X")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # bit rot: the file's size and time unchanged
    hosts = read_fleet(path)["hosts"]
    assert hosts.names() == [h["name"] for h in whole["hosts"]]
    assert [h for i, h in enumerate(hosts) if i != 2] == [h for i, h in enumerate(whole["hosts"]) if i != 2]
    assert hosts[2]["name"] == name and "does not read back" in hosts[2]["normalize_errors"][0]
