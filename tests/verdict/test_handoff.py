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
    with pytest.raises(pickle.UnpicklingError, match="neither a string nor a Shared or Frozen tuple"):
        list(handoff.Reader().load_all(buf))


def test_shared_tuples_are_held_once_and_their_strings_too() -> None:
    def keys() -> handoff.Shared:
        return handoff.Shared((("temperature_c", "idle", "".join(["0000:", "18:00.0"])), ("p2p", "NV18", None)))

    loaded = list(handoff.Reader().load_all(_stream([{"k": keys()}, {"k": keys()}])))
    assert loaded[0]["k"] == keys() and type(loaded[0]["k"]) is handoff.Shared
    assert loaded[0]["k"] is loaded[1]["k"]
    plain = [pickle.loads(pickle.dumps(keys())) for _ in range(2)]
    assert plain[0] is not plain[1]


def _nic(bus: str, state: str = "ACTIVE") -> dict:
    # built anew each time, as json.loads makes facts: equal values, never the same objects
    return {"devices": [{"name": "mlx5_0", "bus_id": bus, "fw_ver": "28.39.1002",
                         "ports": [{"port": 1, "state": "".join(state), "rate_gbps": 400.0, "up": True}]}]}


def test_frozen_values_come_back_equal_and_equal_ones_are_one_object() -> None:
    objs = [{"nic": handoff.freeze(_nic("0000:19:00.0"))}, {"nic": handoff.freeze(_nic("0000:19:00.0"))},
            {"nic": handoff.freeze(_nic("0000:2b:00.0"))}, {"nic": handoff.freeze(_nic("0000:2b:00.0", "DOWN"))}]
    loaded = list(handoff.Reader().load_all(_stream(objs)))
    assert [o["nic"] for o in loaded] == [_nic("0000:19:00.0"), _nic("0000:19:00.0"), _nic("0000:2b:00.0"),
                                          _nic("0000:2b:00.0", "DOWN")]
    assert all(type(o["nic"]) is dict for o in loaded)
    assert loaded[0]["nic"] is loaded[1]["nic"]  # the whole value
    ports = [o["nic"]["devices"][0]["ports"] for o in loaded]
    assert ports[2] is ports[0]  # a nested value, inside values that differ
    assert ports[3] is not ports[0] and ports[3][0]["state"] == "DOWN"  # what differs stays apart


def test_frozen_values_keep_their_types() -> None:
    # 1, 1.0 and True are equal (and -0.0 and 0.0): each must come back as what was sent
    values = [{"v": 1}, {"v": 1.0}, {"v": True}, {"v": 0.0}, {"v": -0.0}, {"v": None}, {"v": "1"}, {"v": [1]},
              {"v": {"1": 1}}, [1, True, 1.0], {"v": float("nan")}]
    loaded = list(handoff.Reader().load_all(_stream([handoff.freeze(v) for v in values])))
    assert [repr(x) for x in loaded] == [repr(v) for v in values]
    assert [type(x["v"]) for x in loaded[:9]] == [type(v["v"]) for v in values[:9]]  # type: ignore[index]


def test_what_is_not_json_is_sent_as_it_is() -> None:
    for value in ({"k": (1, 2)}, {1: "a"}, [b"x"], {"f": Finding("a", Severity.FAIL, Kind.FAULT, "h", "x", "m")},
                  "word", 7, None):
        assert handoff.freeze(value) is value
    loaded = list(handoff.Reader().load_all(_stream([handoff.freeze({"k": (1, 2)})])))
    assert loaded == [{"k": (1, 2)}]


def test_a_frozen_value_through_a_plain_pickle_is_thawed_by_its_reader() -> None:
    frozen = handoff.freeze(_nic("0000:19:00.0"))
    assert type(frozen) is handoff.Frozen
    assert handoff.thaw(pickle.loads(pickle.dumps(frozen))) == _nic("0000:19:00.0")
    assert handoff.thaw(_nic("x")) == _nic("x")  # a value that was not frozen is handed on


def test_the_table_stays_bounded_with_frozen_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handoff, "MAX_STRINGS", 16)
    reader = handoff.Reader()
    objs = [handoff.freeze(_nic(f"0000:{i:02x}:00.0")) for i in range(50)]
    assert list(reader.load_all(_stream(objs))) == [_nic(f"0000:{i:02x}:00.0") for i in range(50)]
    assert len(reader._strings) <= 16 + 8  # at most one value's nodes and words past the bound
