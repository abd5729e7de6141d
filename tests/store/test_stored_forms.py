"""Every fleet.json form that exists in the wild reads back (issue 51): schema 1 (plain JSON,
tests/fixtures/runs_v1), schema 2 (store/compact.py's forms, runs_v2) and schema 3 (the plain
document as gzip members, store/members.py, runs_v3), through the index and without it; schema
3's text is the same bytes whether msgspec or the standard library writes it; a member that does
not decompress costs only its host; `zcat fleet.json | jq` reads a schema-3 run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.results import HostInput
from orchestrator.store import members
from orchestrator.store.compact import read_plain
from orchestrator.store.fleet_file import (
    INDEX_NAME,
    fleet_index_names,
    read_fleet,
    read_fleet_bounded,
    write_fleet,
)
from orchestrator.store.history import RunNotFound, load_fleet
from orchestrator.store.spool import LATE_KEYS, SpooledRecords
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet
from orchestrator.verdict.result import FleetResult
from tests.support.demo_inputs import copies
from tests.support.judged import meta

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
V1 = FIXTURES / "runs_v1" / "20261201T134403Z-916ca5822"
V2 = FIXTURES / "runs_v2" / "20261207T090123Z-39971c393"
V3 = FIXTURES / "runs_v3" / "20261207T090124Z-39971c394"
NAMES = ["dgx-h100-01", "dgx-h100-05", "dgx-a100-03"]


def _copy(src: Path, dest: Path, indexed: bool = True) -> Path:
    """A fixture run copied; `indexed`: fleet.json given the time its index recorded (a checkout
    keeps no file times), so the readers take the index; else the index is removed."""
    shutil.copytree(src, dest)
    idx = json.loads((dest / INDEX_NAME).read_text())
    if indexed:
        os.utime(dest / "fleet.json", ns=(idx["mtime_ns"], idx["mtime_ns"]))
    else:
        (dest / INDEX_NAME).unlink()
    return dest


def _texts(hosts: Any) -> list[str]:
    return [json.dumps(h) for h in hosts]


@pytest.mark.parametrize("indexed", [True, False])
@pytest.mark.parametrize("fixture", [V1, V2, V3], ids=["schema1", "schema2", "schema3"])
def test_every_stored_form_reads_back_its_records(tmp_path: Path, fixture: Path, indexed: bool) -> None:
    run = _copy(fixture, tmp_path / fixture.name, indexed)
    whole = read_plain(run / "fleet.json")
    assert whole["schema_version"] == 1 and [h["name"] for h in whole["hosts"]] == (
        NAMES if fixture != V1 else ["dgx-h100-01", "dgx-h100-05", "dgx-a100-03"])
    doc = read_fleet(run / "fleet.json")
    # the names without reading a record (store/rundir.py names hosts whose raw files are missing)
    assert fleet_index_names(run / "fleet.json") == ([h["name"] for h in whole["hosts"]] if indexed else [])
    if indexed or fixture == V3:  # schema 3 finds its records by its members without the index
        assert isinstance(doc["hosts"], SpooledRecords)
    assert _texts(doc["hosts"]) == _texts(whole["hosts"])
    assert {k: v for k, v in doc.items() if k != "hosts"} == {k: v for k, v in whole.items() if k != "hosts"}
    fleet = FleetResult.from_document(load_fleet(run))
    assert fleet.hosts.names() == [h["name"] for h in whole["hosts"]]
    assert all(not any("does not read back" in e for e in h.normalize_errors) for h in fleet.hosts)


def test_schema_2_and_schema_3_hold_the_same_document() -> None:
    two, three = read_plain(V2 / "fleet.json"), read_plain(V3 / "fleet.json")
    three["run"]["id"] = two["run"]["id"]
    assert json.dumps(two) == json.dumps(three)
    assert (V3 / "fleet.json").stat().st_size * 2 < (V2 / "fleet.json").stat().st_size


def test_standard_tools_read_schema_3(tmp_path: Path) -> None:
    """`zcat fleet.json | jq` reads the whole run: the members are one gzip stream."""
    out = subprocess.run(f"zcat '{V3 / 'fleet.json'}' | jq -c '[.schema_version, (.hosts | map(.name)), "
                         f"(.findings | length)]'", shell=True, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    whole = read_plain(V3 / "fleet.json")
    assert json.loads(out.stdout) == [3, NAMES, len(whole["findings"])]
    raw = subprocess.run(["gzip", "-dc", str(V3 / "fleet.json")], capture_output=True, timeout=60).stdout
    assert raw == members.unpack((V3 / "fleet.json").read_bytes())


# Values whose text two JSON writers are known to write differently: floats' notation (msgspec
# writes 1e16 and 0.000015, Python's repr 1e+16 and 1.5e-05), non-finite floats, strings past
# ASCII, control characters and lone surrogates, ints past 64 bits, deep nesting.
HOSTILE: list[tuple[Any, bytes]] = [
    ([1e16, 1e-7, 1.5e-05, -1.5e-05, 1e-05, 1.5e300, 5e-324, 1e22, 0.0001, 1e15, -0.0, 1.0],
     b"[1e16,1e-7,0.000015,-0.000015,0.00001,1.5e300,5e-324,1e22,0.0001,1000000000000000.0,-0.0,1.0]"),
    ([float("nan"), float("inf"), -float("inf"), {"x": float("nan")}], b'[null,null,null,{"x":null}]'),
    ({"é": "ünïcødé \u2028 \U0001f600 \x00\x1f\x7f \"\\/ e+16 1e-05"},
     '{"é":"ünïcødé \u2028 \U0001f600 \\u0000\\u001f\x7f \\"\\\\/ e+16 1e-05"}'.encode()),
    (["a\ud800b", 1e-05], b'["a\\ud800b",0.00001]'),
    ([2 ** 64, -(2 ** 63) - 1, 10 ** 40, 2 ** 63 - 1], b"[18446744073709551616,-9223372036854775809,"
                                                         b"10000000000000000000000000000000000000000,"
                                                         b"9223372036854775807]"),
]


def _deep(levels: int) -> Any:
    value: Any = [1.5e-05]
    for i in range(levels):
        value = {f"k{i}": value} if i % 2 else [value, None]
    return value


@pytest.mark.parametrize("value,expected", [*HOSTILE, (_deep(300), None)])
def test_both_writers_write_the_same_bytes(value: Any, expected: bytes | None) -> None:
    """msgspec (where installed) and the standard library's fallback write one text, on hostile
    values; the fallback is held to msgspec's known text where msgspec is not installed."""
    fast, stdlib = members.text(value), members.text(value, fast=False)
    assert fast == stdlib
    if expected is not None:
        assert stdlib == expected
    back = json.loads(stdlib)
    assert json.dumps(back) == json.dumps(json.loads(json.dumps(value).replace("NaN", "null")
                                                     .replace("-Infinity", "null").replace("Infinity", "null")))


def _fleet(n: int, findings: int = 0) -> dict[str, Any]:
    hosts = [{"name": f"h{i}", "outcome": "ok", "probes": {}, "facts": {"x": {"v": [i, 1.5e-05, "é"]}},
              "fingerprint": f"f{i}", "class": "c", "health": {"state": "healthy"}} for i in range(n)]
    return {"schema_version": 1, "run": {"id": "r"}, "summary": {}, "hosts": hosts, "classes": [],
            "findings": [{"id": "x.y", "subject": f"h{i % n}", "n": i} for i in range(findings)], "silenced": []}


def _damage(path: Path, at: int, data: bytes) -> None:
    """Bytes of fleet.json overwritten in place, its size and time kept (the index still matches)."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)
    os.utime(path, ns=(st.st_mtime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("where", ["deflate data", "crc", "length"])
def test_a_member_that_does_not_decompress_costs_only_its_host(tmp_path: Path, where: str) -> None:
    path = write_fleet(tmp_path / "fleet.json", _fleet(3))
    name, offset, length = json.loads((tmp_path / INDEX_NAME).read_text())["hosts"][1]
    first = members.member_sizes(path.read_bytes()[offset:offset + length])[0][0]  # its body member
    at = {"deflate data": offset + 12, "crc": offset + first - 8, "length": offset + first - 3}[where]
    _damage(path, at, b"\xff\x00\xff")
    fleet = FleetResult.from_document(load_fleet(tmp_path))
    assert fleet.hosts.names() == ["h0", "h1", "h2"]
    h0, h1, h2 = fleet.hosts
    assert name == "h1" and dict(h1.facts) == {}
    assert any("does not read back" in e and "compressed member" in e for e in h1.normalize_errors)
    assert dict(h0.facts) == {"x": {"v": [0, 1.5e-05, "é"]}} and dict(h2.facts) == {"x": {"v": [2, 1.5e-05, "é"]}}


@pytest.mark.parametrize("index", ["missing", "not json", "offsets shifted", "another file's", "names not strings",
                                   "names swapped", "a name another host's"])
def test_an_index_that_does_not_match_is_rebuilt_from_the_members(tmp_path: Path, index: str) -> None:
    fleet = _fleet(4, findings=5)
    path = write_fleet(tmp_path / "fleet.json", fleet)
    idx_path = tmp_path / INDEX_NAME
    idx = json.loads(idx_path.read_text())
    if index == "missing":
        idx_path.unlink()
    elif index == "not json":
        idx_path.write_text("{ not json")
    elif index == "offsets shifted":
        idx["hosts"] = [[n, o + 1, ln] for n, o, ln in idx["hosts"]]
        idx_path.write_text(json.dumps(idx))
    elif index == "another file's":
        idx["size"] += 1
        idx_path.write_text(json.dumps(idx))
    elif index == "names not strings":
        idx["hosts"][0][0] = None
        idx_path.write_text(json.dumps(idx))
    else:  # the ranges right, the names wrong: a few bytes of each member are checked
        rows = idx["hosts"]
        if index == "names swapped":
            rows[1][0], rows[2][0] = rows[2][0], rows[1][0]
        else:
            rows[3][0] = rows[0][0]
        idx_path.write_text(json.dumps(idx))
        st = path.stat()
        os.utime(path, ns=(st.st_mtime_ns, st.st_mtime_ns))
    doc = read_fleet(path)
    assert isinstance(doc["hosts"], SpooledRecords) and doc["hosts"].names() == ["h0", "h1", "h2", "h3"]
    assert _texts(doc["hosts"]) == _texts(fleet["hosts"]) and doc["findings"] == fleet["findings"]


@pytest.mark.parametrize("damage", ["cut short", "garbage inside", "not gzip after the head", "head only"])
def test_a_damaged_file_without_its_index_is_one_message(tmp_path: Path, damage: str) -> None:
    path = write_fleet(tmp_path / "fleet.json", _fleet(3))
    (tmp_path / INDEX_NAME).unlink()
    data = path.read_bytes()
    with open(path, "rb") as f:
        head = next(members.scan(f))[1]  # the head member's length
    broken = {"cut short": data[:-30], "garbage inside": data[:head + 15] + b"\x00" * 40 + data[head + 55:],
              "not gzip after the head": data[:head] + b"{json}", "head only": data[:head]}[damage]
    path.write_bytes(broken)
    with pytest.raises(RunNotFound) as e:
        load_fleet(tmp_path)
    assert "fleet.json is unreadable" in str(e.value) and "Traceback" not in str(e.value)
    assert "None" not in str(e.value)


@pytest.mark.parametrize("indexed", [True, False])
def test_the_bounded_reader_reads_every_member(tmp_path: Path, indexed: bool) -> None:
    """zlib.decompress(data, 31) stops after the first member; the history's reader reads the
    findings from the last one, whether the index says where it starts or the members are read."""
    fleet = _fleet(3, findings=50)
    path = write_fleet(tmp_path / "fleet.json", fleet)
    if not indexed:
        (tmp_path / INDEX_NAME).unlink()
    some = read_fleet_bounded(path, 7)
    assert (some.kept, some.more) == (7, True) and some.doc["findings"] == fleet["findings"][:7]
    every = read_fleet_bounded(path, 1000)
    assert (every.kept, every.more) == (50, False) and every.doc["findings"] == fleet["findings"]
    assert every.doc["silenced"] == [] and _texts(every.doc["hosts"]) == _texts(fleet["hosts"])


def test_a_merge_copies_a_record_member_and_writes_its_keys_anew(tmp_path: Path) -> None:
    """store/carry.py: a schema-3 record is its text up to the fleet-wide keys, one member, and
    those keys, another: body() names the first, which the merged fleet.json copies as it is."""
    fleet = _fleet(2)
    path = write_fleet(tmp_path / "fleet.json", fleet)
    hosts = read_fleet(path)["hosts"]
    data = path.read_bytes()
    for i, rec in enumerate(fleet["hosts"]):
        back, body = hosts.body(i)
        assert json.dumps(back) == json.dumps(rec) and body is not None
        where, offset, length = body
        assert where == path
        text = members.unpack(data[offset:offset + length])
        late = "".join(f",{json.dumps(k)}:{json.dumps(rec[k], separators=(',', ':'))}" for k in LATE_KEYS) + "}"
        assert json.loads(text + late.encode()) == rec


def test_a_record_whose_last_keys_are_not_the_fleet_wide_ones_is_one_member(tmp_path: Path) -> None:
    fleet = _fleet(1)
    rec = fleet["hosts"][0]
    fleet["hosts"][0] = {"name": rec["name"], "fingerprint": None, **{k: v for k, v in rec.items() if k != "name"},
                         "extra": 1}
    path = write_fleet(tmp_path / "fleet.json", fleet)
    hosts = read_fleet(path)["hosts"]
    back, body = hosts.body(0)
    assert body is None and json.dumps(back) == json.dumps(fleet["hosts"][0])


@pytest.mark.parametrize("workers", [1, 2])
def test_a_fleet_judged_in_workers_is_written_from_their_members(demo_inputs: list[HostInput], tmp_path: Path,
                                                                 workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers spool each record as schema 3's member (verdict/parallel.PartWriter) and the
    writer copies it: the file is byte for byte the one written from the same records in memory,
    reads back as them, and a reader of a section or two parses only those (the facts layouts are
    byte offsets in the decompressed text, which is UTF-8, not ASCII)."""
    from orchestrator.store import spool

    fleet = build_fleet(meta(f"w{workers}"), copies(demo_inputs, 30), lambda h: Expectations(gpu_count=8),
                        lambda h: {}, spool=tmp_path, workers=workers).to_document()
    hosts = fleet["hosts"]
    assert not isinstance(hosts, SpooledRecords) if workers == 1 else hosts.version == members.SCHEMA_VERSION
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path = write_fleet(tmp_path / "a" / "fleet.json", fleet)
    in_memory = {**fleet, "hosts": [json.loads(json.dumps(h)) for h in hosts]}
    assert path.read_bytes() == write_fleet(tmp_path / "b" / "fleet.json", in_memory).read_bytes()
    back = read_fleet(path)["hosts"]
    assert _texts(back) == _texts(in_memory["hosts"])
    seen: list[Any] = []
    real = spool.json.loads
    monkeypatch.setattr(spool.json, "loads", lambda text, *a, **k: seen.append(text) or real(text, *a, **k))
    light = list(back.with_facts(("gpus",)))
    monkeypatch.undo()
    assert seen and sum(map(len, seen)) < sum(len(back.plain(i)) for i in range(len(back))) / 2
    for a, c in zip(light, in_memory["hosts"]):
        assert a["facts"] == {s: c["facts"][s] for s in ("gpus",) if s in c["facts"]}


@pytest.mark.parametrize("reader", ["load_fleet", "load_past_fleet"])
@pytest.mark.parametrize("where", ["head", "rest", "rest cut short"])
def test_a_head_or_rest_that_does_not_decompress_is_one_message(tmp_path: Path, reader: str, where: str) -> None:
    """With the index matching, the head's or the rest's member damaged (same size): the run is
    unreadable, said once, by the whole reader and by the history's bounded one."""
    from orchestrator.store.history import load_past_fleet

    path = write_fleet(tmp_path / "fleet.json", _fleet(3, findings=40))
    _head, rest = json.loads((tmp_path / INDEX_NAME).read_text())["rest"]
    size = path.stat().st_size
    at = {"head": 14, "rest": rest + 14, "rest cut short": size - 6}[where]
    _damage(path, at, b"\x00\xff\x00\xff")
    read = load_fleet if reader == "load_fleet" else load_past_fleet
    with pytest.raises(RunNotFound) as e:
        read(tmp_path)
    assert "fleet.json is unreadable" in str(e.value) and "None" not in str(e.value)


@pytest.mark.parametrize("fixture", [V1, V2], ids=["schema1", "schema2"])
def test_a_record_of_an_older_schema_is_never_copied_into_schema_3(tmp_path: Path, fixture: Path) -> None:
    """A merge copies a record's stored members only from a schema-3 file: an older run's record
    text is not a gzip member, so it is encoded again (body() names no bytes to copy)."""
    run = _copy(fixture, tmp_path / fixture.name)
    hosts = read_fleet(run / "fleet.json")["hosts"]
    whole = read_plain(run / "fleet.json")["hosts"]
    for i in range(len(hosts)):
        rec, body = hosts.body(i)
        assert body is None and json.dumps(rec) == json.dumps(whole[i])
