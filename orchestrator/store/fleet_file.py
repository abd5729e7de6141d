"""fleet.json on disk, with an index of where each host's record sits in it.

A stored fleet.json of 10,000 GPU servers is over a gigabyte of JSON; `probe run` reads the
previous run's for drift, `probe diff`/`show`/`report` read stored ones.  Parsing it whole costs
seconds per 100 MB and holds every host's facts at once.  So the writer also records, in
fleet.index.json beside it, the byte range of every host record, and the reader parses only the
small rest of the document; the hosts come back as records read one at a time on demand
(spool.SpooledRecords).  Without a matching index (older runs, a file edited by hand)
fleet.json is parsed whole, as before.

Files are written in schema 2 (store/compact.py) and read in either schema: a reader always gets
the schema-1 shape facts/model.py describes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.store import atomic, compact
from orchestrator.store.spool import SpooledRecords

INDEX_NAME = "fleet.index.json"
INDEX_VERSION = 1


def write_fleet(path: Path, fleet: dict[str, Any], mode: int = 0o644) -> Path:
    """fleet.json in schema 2 (store/compact.py: each value as compact.encode writes it), then its
    index (both atomically)."""
    fleet = {**fleet, "schema_version": compact.SCHEMA_VERSION}
    entries: list[list[Any]] = []

    def chunks() -> Iterator[bytes]:
        pos = 0

        def put(text: str) -> bytes:
            nonlocal pos
            data = text.encode("utf-8")
            pos += len(data)
            return data

        yield put("{")
        for i, (key, value) in enumerate(fleet.items()):
            yield put(("," if i else "") + atomic.encode_json(key) + ":")
            if key != "hosts":
                yield from map(put, atomic.iter_json(compact.encode(value)))
                continue
            yield put("[")
            records: Iterable[tuple[Any, str]]
            if isinstance(value, SpooledRecords):
                records = zip(value.names(), (compact.recode_text(value.text(j), value.version)
                                              for j in range(len(value))))
            else:
                records = ((rec.get("name"), compact.host_text(rec)) for rec in value)
            for j, (name, text) in enumerate(records):
                if j:
                    yield put(",")
                start = pos
                yield put(text)
                entries.append([name, start, pos - start])
            yield put("]")
        yield put("}\n")

    atomic.write_chunks(path, chunks(), mode)
    st = path.stat()
    atomic.write_json(path.with_name(INDEX_NAME), {"version": INDEX_VERSION, "size": st.st_size,
                                                   "mtime_ns": st.st_mtime_ns, "hosts": entries}, mode=mode)
    return path


def _index(path: Path) -> list[list[Any]] | None:
    """The host records' byte ranges, when the index belongs to this very file."""
    try:
        idx = json.loads(path.with_name(INDEX_NAME).read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return None
    if not isinstance(idx, dict) or idx.get("version") != INDEX_VERSION or idx.get("size") != st.st_size \
            or idx.get("mtime_ns") != st.st_mtime_ns or not isinstance(idx.get("hosts"), list):
        return None
    hosts = idx["hosts"]
    last = 0
    for e in hosts:
        if not (isinstance(e, list) and len(e) == 3 and isinstance(e[1], int) and isinstance(e[2], int)
                and e[1] >= last and e[2] > 0):
            return None
        last = e[1] + e[2]
    return hosts if last <= st.st_size else None


def read_fleet(path: Path) -> Any:
    """A stored fleet.json: its hosts read on demand when it has an index, else parsed whole.
    Raises OSError/UnicodeDecodeError/ValueError like json.loads(path.read_text())."""
    hosts = _index(path)
    if not hosts:
        return compact.decode_fleet(json.loads(path.read_text(encoding="utf-8")))
    start, end = hosts[0][1], hosts[-1][1] + hosts[-1][2]
    with open(path, "rb") as f:
        head = f.read(start)
        f.seek(end)
        tail = f.read()
    doc = json.loads((head + tail).decode("utf-8"))  # '"hosts":[' + ']': the rest, with no hosts
    if not isinstance(doc, dict) or doc.get("hosts") != []:
        # not the layout the index describes
        return compact.decode_fleet(json.loads(path.read_text(encoding="utf-8")))
    version = compact.stored_version(doc)
    doc = compact.decode_fleet(doc)
    records = SpooledRecords(remove=False, version=version)
    for name, offset, length in hosts:
        records.add(path, offset, length, str(name))
    doc["hosts"] = records
    return doc
