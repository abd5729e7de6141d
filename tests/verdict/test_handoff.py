"""Verdicts handed from workers to the controller: equal after the trip, and holding each word once."""

from __future__ import annotations

import io
import pickle

import pytest

from orchestrator.verdict import handoff
from orchestrator.verdict.findings import Finding, Kind, Severity


def _verdict_like(i: int) -> dict:
    # words built at run time, as json.loads or an unpickle makes them: equal, never the same object
    state = "".join(["ACT", "IVE"])
    return {"name": f"host-{i}", "ports": [{"state": state, "rate": "400 Gb/sec (4X NDR)", "serial": f"MT{i:07d}"}],
            "finding": Finding("nic.port.down", Severity.FAIL, Kind.FAULT, f"host-{i}", "mlx5_0", "port is down")}


def _stream(objs: list) -> io.BytesIO:
    buf = io.BytesIO()
    for o in objs:
        handoff.dump(o, buf)
    buf.seek(0)
    return buf


def test_objects_come_back_equal_and_in_order() -> None:
    objs = [_verdict_like(i) for i in range(5)]
    assert list(handoff.Reader().load_all(_stream(objs))) == objs


def test_one_reader_holds_each_word_once_across_objects_and_streams() -> None:
    reader = handoff.Reader()
    first = list(reader.load_all(_stream([_verdict_like(0), _verdict_like(1)])))
    second = list(reader.load_all(_stream([_verdict_like(2)])))
    ports = [v["ports"][0] for v in first + second]
    keys = [next(k for k in p if k == "state") for p in ports]
    assert all(k is keys[0] for k in keys)  # dict keys
    assert all(p["state"] is ports[0]["state"] for p in ports)  # values
    assert all(p["rate"] is ports[0]["rate"] for p in ports)
    messages = [v["finding"].message for v in first + second]
    assert all(m is messages[0] for m in messages)  # inside records that are not dicts
    assert len({id(p["serial"]) for p in ports}) == 3  # what differs stays apart
    # a plain pickle of the same objects shares nothing between them: what this module is for
    plain = [pickle.loads(pickle.dumps(_verdict_like(i))) for i in range(2)]
    assert plain[0]["ports"][0]["state"] is not plain[1]["ports"][0]["state"]


def test_the_table_of_words_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handoff, "MAX_STRINGS", 8)
    reader = handoff.Reader()
    objs = [[f"unique-{i}-{j}" for j in range(5)] + ["common"] for i in range(20)]
    assert list(reader.load_all(_stream(objs))) == objs
    assert len(reader._strings) <= 8


def test_a_stream_with_another_kind_of_persistent_id_is_refused() -> None:
    class Other(pickle.Pickler):
        def persistent_id(self, obj: object) -> object:
            return 7 if obj == "x" else None

    buf = io.BytesIO()
    Other(buf).dump(["x"])
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="neither a string nor a Shared tuple"):
        list(handoff.Reader().load_all(buf))


def test_shared_tuples_are_held_once_and_their_strings_too() -> None:
    def keys() -> handoff.Shared:
        return handoff.Shared((("temperature_c", "idle", "".join(["0000:", "18:00.0"])), ("p2p", "NV18", None)))

    loaded = list(handoff.Reader().load_all(_stream([{"k": keys()}, {"k": keys()}])))
    assert loaded[0]["k"] == keys() and type(loaded[0]["k"]) is handoff.Shared
    assert loaded[0]["k"] is loaded[1]["k"]
    plain = [pickle.loads(pickle.dumps(keys())) for _ in range(2)]
    assert plain[0] is not plain[1]
