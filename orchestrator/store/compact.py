"""fleet.json schema 2: the same JSON values, written without repetition (docs/fleet-schema.md).

In memory every reader sees the shapes facts/model.py describes (schema 1); only the file is
compact.  The codec knows no section: it recognizes repetition in any JSON value, so a section
added tomorrow is compacted the day it ships and a record of a shape nobody expected (a hostile
probe, a hand-edited file) round-trips exactly:

* a list of objects is a table: the column names once, each column one list
  (`{"@table": 75, "bdf": [...], "vendor": ...}`); a column some rows lack says which rows have it
  (`{"@some": [row, ...], "v": [...]}`);
* a list whose items are all equal is `{"@all": value, "n": count}` (a column of defaults:
  `acs: null` on every device is written once);
* an object whose values are all objects is its keys and a table of the objects
  (`{"@keys": ["host", "nvml"], "v": {"@table": 2, ...}}`: a host's probe records);
* a list of few distinct values names them once and indexes them (`{"@enum": [values], "i": "010"}`,
  one character per item while there are at most 62 values, else a list of numbers): devices
  referenced by bus id, link states, a matrix's cells, a GPU's PCIe link;
* an object with a key that starts with "@" (what the markers look like) is kept verbatim under
  `{"@v": ...}`, so no data is ever read as a marker.

Each column and each distinct value is encoded the same way again, so the NVLink links of a GPU,
the ports of a NIC and the counters of a port become tables of their own.  decode(encode(v)) equals
v, key order included; `tests/store/test_compact.py` holds that for every demo record, the PCIe
corpus, text imports and hostile shapes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Any

from orchestrator.files.bounded import open_regular
from orchestrator.files.jsontext import StrictEncoder, text_of
from orchestrator.store import members

SCHEMA_VERSION = 2  # fleet.json files written by this codec; 1: the plain records (no codec)

_text: Callable[[Any], str] = text_of(json.JSONEncoder(separators=(",", ":"), check_circular=False))
_MARK = "@"
_MIN_TABLE = 2  # rows: a table of one row is longer than the object
_MIN_RUN = 3  # items: shorter lists are written as they are
_MIN_KEYED = 10  # keys: an object with fewer is written as it is, even when its values repeat
# Rows whose keys together name more columns than this are keyed by data, not records (a fleet's
# not-judged ids: id -> {host: why}): no table, whose column order costs columns x columns to
# work out (10,000 hosts: 0.9 s, 100,000: over a minute) and would write each row's absence of
# every other host.
_MAX_COLUMNS = 256


def encode(value: Any) -> Any:
    """`value` (JSON data) in the compact form."""
    if isinstance(value, dict):
        if value and not _plain_keys(value):
            return {"@v": value}
        if len(value) >= _MIN_KEYED and not any(type(v) in _LISTLIKE for v in value.values()):
            values = _encode_list(list(value.values()))
            if type(values) is dict and next(iter(values)) in ("@all", "@enum"):
                return {"@keys": list(value), "v": values}
        elif len(value) >= _MIN_TABLE and all(type(v) is dict for v in value.values()):
            # records by name (a host's probes, a port's counters): one table of the records
            values = _encode_list(list(value.values()))
            if type(values) is dict and next(iter(values)) == "@table":
                return {"@keys": list(value), "v": values}
        return {k: (v if type(v) not in _LISTLIKE else encode(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return _encode_list(list(value))
    return value


def decode(value: Any) -> Any:
    """The JSON data `value` (compact form) stands for."""
    t = type(value)
    if t is dict:
        if value:
            first = next(iter(value))
            if first[:1] == _MARK:
                if first == "@v":
                    return value["@v"]
                if first == "@keys":
                    return dict(zip(value["@keys"], _decode_list(value["v"])))
                return _decode_list(value)
        return {k: (v if type(v) not in _CONTAINERS else decode(v)) for k, v in value.items()}
    if t is list:
        return [v if type(v) not in _CONTAINERS else decode(v) for v in value]
    return value


_CONTAINERS = (dict, list)
# an enum's indices, one character each while it has at most 62 values ("0a1" is [0, 10, 1])
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_CODE = {ch: i for i, ch in enumerate(_DIGITS)}
_LISTLIKE = (dict, list, tuple)


def _plain_keys(d: Iterable[Any]) -> bool:
    """Keys json writes as they are and no marker's ("@..."): such an object is written as it is."""
    try:
        return not any(map(_AT_MARK, d))
    except (AttributeError, TypeError):  # a key that is not a string
        return False


_AT_MARK = methodcaller("startswith", _MARK)


def _key(x: Any) -> Any:
    """What makes two items the same value: their JSON text (True is not 1, 1.0 is not 1, -0.0 is
    not 0.0), computed cheaply for scalars."""
    t = type(x)
    if t is str or t is int or t is bool or x is None:
        return (t, x)
    if t is float:
        return (t, repr(x))
    return _text(x)


def _size(key: Any, value: Any) -> int:
    """About how many characters `value` takes in JSON (the choice of a form only needs about)."""
    t = type(value)
    if t is str:
        return len(value) + 2
    if t in _LISTLIKE:
        return len(key)  # its JSON text
    if t is float:
        return len(repr(value))
    return 4 if value is None or value is True else (5 if value is False else len(str(value)))


# items of these types are equal exactly when their JSON texts are, unless bool and int meet (True == 1)
_HASHED_AS_IS = frozenset((str, int, bool, type(None)))


def _encode_list(items: Sequence[Any]) -> Any:
    n = len(items)
    types = set(map(type, items))
    if n >= _MIN_TABLE and len(types) == 1:
        if dict in types:
            table = _table(items)
            if table is not None:
                return table
        elif list in types:
            return _nest(items)
    if n < _MIN_RUN:
        return [x if type(x) not in _LISTLIKE else encode(x) for x in items]
    if types <= _STR_INT_NONE:
        return _COLUMNS.get(items, types, 0, _encode_run)
    if types <= _BOOL_NONE:
        return _COLUMNS.get(items, types, 1, _encode_run)
    return _encode_run(items, types)


def _encode_run(items: Sequence[Any], types: set[type]) -> Any:
    """A list of at least _MIN_RUN items that is neither a table nor lists: as it is, one repeated
    value, or an enum, whichever is shorter."""
    n = len(items)
    try:
        if types <= _HASHED_AS_IS and not (bool in types and int in types):
            keys = items
        elif types == _FLOATS:
            keys = list(map(float.__repr__, items))
        else:
            keys = list(map(_key, items))
        distinct = len(set(keys))
    except (TypeError, ValueError):  # not JSON data: its items as they are (json's default=str writes them)
        return [x if type(x) not in _LISTLIKE else encode(x) for x in items]
    if distinct == 1:
        item = items[0]
        return {"@all": item if type(item) not in _LISTLIKE else encode(item), "n": n}
    if distinct == n:  # nothing repeats: an index could only add to the list
        return [x if type(x) not in _CONTAINERS else encode(x) for x in items]
    count = Counter(keys)
    first = dict(zip(keys, items))  # key -> its value (equal keys: equal values)
    # Naming each distinct value once saves (count - 1) copies of each repeated one and costs a
    # character or four per item plus the list of values; only repeated values decide.
    short = distinct <= len(_DIGITS)
    saved = sum(_size(k, first[k]) * (c - 1) for k, c in count.items() if c > 1)
    if saved <= distinct + n * (0 if short else 3) + 16:
        return [x if type(x) not in _CONTAINERS else encode(x) for x in items]
    code = {k: i for i, k in enumerate(count)}  # Counter keeps first-seen order
    codes = list(map(code.__getitem__, keys))
    return {"@enum": [x if type(x) not in _LISTLIKE else encode(x) for x in first.values()],
            "i": "".join(map(_DIGITS.__getitem__, codes)) if short else codes}


_FLOATS = {float}
# Scalars whose equality is their JSON text's, as long as the two sets do not meet (True == 1):
# a column of them can be looked up by its items.
_STR_INT_NONE = frozenset((str, int, type(None)))
_BOOL_NONE = frozenset((bool, type(None)))


class _Memo:
    """Encodings of scalar columns, by their items.  A fleet's machines repeat them host after host
    (the same slots, vendors, link widths, zero counters: in the bench fleet 98 % of the columns a
    host encodes were encoded for an earlier host), so each is worked out once per process.  The
    encodings are shared: nothing mutates an encoding once made (it only becomes text).  Bounded by
    the items its keys hold; full, it starts again.

    Columns of identities (GPU UUIDs and serials, hostnames) never repeat, so the memo fills at
    about 33 items a DGX host: a worker of a 100,000-host fleet held a million items (about 100 MB)
    before starting again.  At 131,072 it starts again every ~4,000 hosts, and the host after it
    encodes its columns anew (a millisecond): about 15 MB at most."""

    MAX_ITEMS = 1 << 17

    def __init__(self) -> None:
        self._kinds: tuple[dict[tuple[Any, ...], Any], ...] = ({}, {})
        self._items = 0

    def get(self, items: Sequence[Any], types: set[type], kind: int, make: Callable[[Sequence[Any], set[type]], Any]) -> Any:
        key = tuple(items)
        seen = self._kinds[kind]
        try:
            return seen[key]
        except KeyError:
            pass
        value = seen[key] = make(items, types)
        self._items += len(key)
        if self._items > self.MAX_ITEMS:
            self.clear()
        return value

    def clear(self) -> None:
        for d in self._kinds:
            d.clear()
        self._items = 0


_COLUMNS = _Memo()


def _nest(lists: Sequence[list[Any]]) -> dict[str, Any]:
    """A list of lists as one list of all their items and the lengths: a matrix's cells, every
    GPU's NVLink links, every NIC's ports can then share one table or one set of values."""
    lens = list(map(len, lists))
    flat = list(chain.from_iterable(lists))
    same = lens[0] and lens.count(lens[0]) == len(lens)
    return {"@nest": lens[0] if same else lens, "v": _encode_list(flat)}


def _table(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Rows as columns, or None when the rows' keys cannot be put in one order (or look like markers)."""
    first = tuple(rows[0])
    if all(map(first.__eq__, map(tuple, rows))):  # the usual case: one shape
        if not _plain_keys(rows[0]):
            return None
        out: dict[str, Any] = {"@table": len(rows)}
        for c, column in zip(first, zip(*map(dict.values, rows))):
            out[c] = _encode_list(column)
        return out
    row_shapes = list(map(tuple, rows))
    shapes = list(dict.fromkeys(row_shapes))  # the few distinct key sequences, in first-seen order
    if not all(map(_plain_keys, shapes)):  # a row's keys are its shape's: asked once per shape
        return None
    if len(set(chain.from_iterable(shapes))) > _MAX_COLUMNS:
        return None
    cols = _column_order(shapes)
    if cols is None:
        return None
    keysets = {shape: set(shape) for shape in shapes}
    out = {"@table": len(rows)}
    for c in cols:
        if all(c in ks for ks in keysets.values()):
            out[c] = _encode_list(list(map(itemgetter(c), rows)))
        else:
            present = [i for i, shape in enumerate(row_shapes) if c in keysets[shape]]
            out[c] = {"@some": present, "v": _encode_list([rows[i][c] for i in present])}
    return out


def _column_order(shapes: Sequence[tuple[str, ...]]) -> list[str] | None:
    """One order of every key that keeps each shape's own order, or None when two shapes order
    their keys differently (a table would change one of them)."""
    cols: list[str] = []
    seen: set[str] = set()
    for shape in shapes:
        at = 0
        for k in shape:
            if k in seen:
                at = cols.index(k) + 1
            else:
                cols.insert(at, k)
                seen.add(k)
                at += 1
    order = {k: i for i, k in enumerate(cols)}
    for shape in shapes:
        pos = [order[k] for k in shape]
        if pos != sorted(pos):
            return None
    return cols


def _decode_list(obj: Any) -> list[Any]:
    """A marker object back to its list (or a list given plainly, decoded item by item)."""
    if type(obj) is list:
        return [v if type(v) not in _CONTAINERS else decode(v) for v in obj]
    first = next(iter(obj))
    if first == "@all":
        item = obj["@all"]
        if type(item) not in _CONTAINERS:
            return [item] * obj["n"]
        return [decode(item) for _ in range(obj["n"])]  # equal but separate values, as json.loads gives
    if first == "@enum":
        values = obj["@enum"]
        codes = obj["i"]
        if not any(type(v) in _CONTAINERS for v in values):
            if type(codes) is str:
                return list(map(dict(zip(_DIGITS, values)).__getitem__, codes))
            return [values[i] for i in codes]
        if type(codes) is str:
            codes = [_CODE[ch] for ch in codes]
        return [decode(values[i]) for i in codes]
    if first == "@nest":
        lens = obj["@nest"]
        flat = _decode_list(obj["v"])
        if type(lens) is int:
            return [flat[i:i + lens] for i in range(0, len(flat), lens)]
        out, at = [], 0
        for k in lens:
            out.append(flat[at:at + k])
            at += k
        return out
    if first == "@table":
        n = obj["@table"]
        cols = [c for c in obj if c != "@table"]
        encs = [obj[c] for c in cols]
        if not any(type(e) is dict and "@some" in e for e in encs):
            if not cols:
                return [{} for _ in range(n)]
            return [dict(zip(cols, vals)) for vals in zip(*map(_decode_list, encs))]
        rows: list[dict[str, Any]] = [{} for _ in range(n)]
        for col, enc in zip(cols, encs):
            if type(enc) is dict and enc and next(iter(enc)) == "@some":
                for i, v in zip(enc["@some"], _decode_list(enc["v"])):
                    rows[i][col] = v
            else:
                for row, v in zip(rows, _decode_list(enc)):
                    row[col] = v
        return rows
    raise ValueError(f"a schema-2 value that does not decode (unknown form {first!r})")


# ------------------------------------------------------------------------- host records and files

def encode_host(record: dict[str, Any]) -> dict[str, Any]:
    """One fleet.json host record as schema 2 writes it: its own keys stay (name, outcome, facts,
    ...), so the spool can still append the fleet-wide ones to its text (spool.set_late)."""
    if not isinstance(record, dict) or not _plain_keys(record):
        out: dict[str, Any] = _safe(record)
        return out
    facts = record.get("facts")
    return {k: (v if type(v) not in _LISTLIKE
                else {s: _safe(x) for s, x in v.items()} if k == "facts" and type(facts) is dict and _plain_keys(facts)
                else _safe(v))
            for k, v in record.items()}


def _safe(value: Any) -> Any:
    """encode(value), or the value verbatim when it nests deeper than the codec recurses (json
    itself writes it; the budget, facts/normalize/budget.py, keeps real records far shallower)."""
    try:
        return encode(value)
    except RecursionError:
        return {"@v": value}


def decode_host(stored: dict[str, Any]) -> dict[str, Any]:
    """A schema-2 host record as every reader reads it (the schema-1 shape).  ValueError when it is
    not what encode_host writes (a damaged or hand-edited file)."""
    return _checked(decode, stored)


def damaged_host(raw: Any, error: ValueError, name: str | None = None) -> dict[str, Any]:
    """What a host record that does not read back leaves readers: its name, how the host answered
    where that survived, and why its facts are gone (a damaged record costs only its host)."""
    kept: dict[str, Any] = {k: raw[k] for k in ("name", "outcome", "reason")
                            if isinstance(raw, dict) and isinstance(raw.get(k), str)}
    if isinstance(raw, dict) and isinstance(raw.get("health"), dict):
        kept["health"] = raw["health"]  # the judgement of the host, made when its record was whole
    if name is not None:
        kept["name"] = name
    return {**kept, "facts": {}, "probes": {},
            "normalize_errors": [f"stored record: it does not read back ({error}); its facts are left out"]}


def _host_or_damaged(stored: Any) -> Any:
    if not isinstance(stored, dict):
        return stored
    try:
        return decode_host(stored)
    except ValueError as e:
        return damaged_host(stored, e)


def _checked(fn: Callable[[Any], Any], stored: Any) -> Any:
    try:
        return fn(stored)
    except (KeyError, TypeError, IndexError, AttributeError, StopIteration, RecursionError) as e:
        raise ValueError(f"a schema-2 value that does not decode ({type(e).__name__}: {e})") from None


def host_text(record: dict[str, Any]) -> str:
    """The record's text in a schema-2 fleet.json."""
    return _text_default(encode_host(record))


def stored_text(stored: Any) -> str:
    """Text of a value already in the compact form (encode_host's output or one of its members)."""
    return _text_default(stored)


def value_text(value: Any) -> str:
    """The stored text of one member of a host record (a top-level value, a facts section)."""
    return _text_default(_safe(value))


def is_member_wise(value: Any, stored: Any) -> bool:
    """Did encode_host encode this object member by member (so its stored text is its members'
    texts joined), rather than as one value?"""
    return (isinstance(value, dict) and isinstance(stored, dict) and _plain_keys(value)
            and list(stored) == list(value))


def stored_version(doc: dict[str, Any]) -> int:
    """Which schema a parsed fleet.json (hosts aside) was written in: 1 when it does not say 2."""
    return SCHEMA_VERSION if doc.get("schema_version") == SCHEMA_VERSION else 1


def decode_fleet_rest(doc: dict[str, Any]) -> dict[str, Any]:
    """A parsed schema-2 fleet.json's keys other than its hosts, as readers read them (schema 1)."""
    out = {k: (v if k == "hosts" else _checked(decode, v)) for k, v in doc.items()}
    out["schema_version"] = 1  # in memory every fleet document has the schema-1 shape
    return out


def encode_fleet(doc: dict[str, Any]) -> dict[str, Any]:
    """A whole fleet document as a schema-2 file holds it (store/fleet_file.write_fleet writes the
    same bytes piece by piece)."""
    out: dict[str, Any] = {}
    for k, v in {**doc, "schema_version": SCHEMA_VERSION}.items():
        out[k] = [encode_host(h) for h in v] if k == "hosts" else encode(v)
    return out


def decode_fleet(doc: Any) -> Any:
    """A parsed fleet.json of any schema as readers read it; anything else is returned as it is
    (the readers say what is wrong with it)."""
    if isinstance(doc, dict) and doc.get("schema_version") == members.SCHEMA_VERSION:
        return {**doc, "schema_version": 1}  # schema 3 is the plain document, compressed
    if not isinstance(doc, dict) or stored_version(doc) != SCHEMA_VERSION:
        return doc
    out = decode_fleet_rest(doc)
    hosts = doc.get("hosts")
    if isinstance(hosts, list):
        out["hosts"] = [_host_or_damaged(h) for h in hosts]
    return out


_text_default: Callable[[Any], str] = StrictEncoder(separators=(",", ":"), default=str, check_circular=False).encode


def read_plain(path: Path) -> Any:
    """A fleet.json of any schema parsed whole, as readers read it (tools and tests; a run's
    readers go through fleet_file.read_fleet, which reads hosts on demand)."""
    with open_regular(path, "fleet.json") as f:  # a FIFO would hold the reader for ever
        data = f.read()
    return decode_fleet(members.loads(data) if members.is_members(data) else json.loads(data.decode("utf-8")))


def plain_record(text: str, version: int) -> dict[str, Any]:
    """A stored record's text (from a file of schema `version`) as readers read it.  ValueError:
    it is not a record of that schema."""
    rec = json.loads(text)
    if not isinstance(rec, dict):
        raise ValueError(f"a JSON {type(rec).__name__}, not a host record")
    return decode_host(rec) if version == SCHEMA_VERSION else rec
