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
# Each host record's drift digest (verdict/drift.py: what `probe diff` compares), in index order:
# two runs' records with one digest need not be parsed to be diffed.  Written for fleets judged in
# workers; without it (small fleets, older runs) diff parses every record, as before.
DIGESTS_NAME = "fleet.digests.json"


def record_text(rec: dict[str, Any], parts: dict[str, str] | None = None) -> str:
    """One host record as fleet.json stores it (schema 2, compact.host_text): the one place a record
    becomes stored text (the workers' spool holds the same text, verdict/parallel.py; the writer
    copies it unchanged).

    `parts`, when given, is filled with the stored text of each top-level value and of each facts
    section ("facts.<section>"), cut from the same encoding (verdict/drift.py hashes some of them:
    encoding them apart again cost a fifth of judging a host).  The stored text of an object is its
    members' texts joined, so the text is byte for byte compact.host_text(rec)."""
    stored = compact.encode_host(rec)
    if parts is None or not compact.is_member_wise(rec, stored):
        return compact.stored_text(stored)
    enc = compact.stored_text
    members = []
    for key, value in stored.items():
        if key == "facts" and isinstance(value, dict) and compact.is_member_wise(rec[key], value):
            sections = []
            for section, facts in value.items():
                text = parts[f"facts.{section}"] = enc(facts)
                sections.append(f"{enc(section)}:{text}")
            parts[key] = "{" + ",".join(sections) + "}"
        else:
            parts[key] = enc(value)
        members.append(f"{enc(key)}:{parts[key]}")
    return "{" + ",".join(members) + "}"


def write_fleet(path: Path, fleet: dict[str, Any], mode: int = 0o644) -> Path:
    """fleet.json in schema 2 (store/compact.py: each value as compact.encode writes it), then its
    index (both atomically)."""
    fleet = {**fleet, "schema_version": compact.SCHEMA_VERSION}
    entries: list[list[Any]] = []

    def chunks() -> Iterator[bytes]:
        pos = 0

        def put(text: str | bytes) -> bytes:
            nonlocal pos
            data = text if isinstance(text, bytes) else text.encode("utf-8")
            pos += len(data)
            return data

        yield put("{")
        for i, (key, value) in enumerate(fleet.items()):
            yield put(("," if i else "") + atomic.encode_json(key) + ":")
            if key != "hosts":
                yield from map(put, atomic.iter_json(compact.encode(value)))
                continue
            yield put("[")
            records: Iterable[tuple[Any, str | bytes]]
            if isinstance(value, SpooledRecords):  # judged in workers, or a stored file: its text is copied
                records = zip(value.names(), (value.stored(j) if value.version == compact.SCHEMA_VERSION
                                              else compact.recode_text(value.text(j), value.version)
                                              for j in range(len(value))))
            else:
                records = ((rec.get("name"), record_text(rec)) for rec in value)
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
    hosts = fleet.get("hosts")
    digests = hosts.digests() if isinstance(hosts, SpooledRecords) else []
    if any(digests):
        atomic.write_json(path.with_name(DIGESTS_NAME), {"version": INDEX_VERSION, "size": st.st_size,
                                                         "mtime_ns": st.st_mtime_ns, "hosts": digests}, mode=mode)
    return path


def _digests(path: Path, count: int) -> list[str | None]:
    """The records' drift digests when the digests file belongs to this very fleet.json, else none."""
    try:
        doc = json.loads(path.with_name(DIGESTS_NAME).read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return [None] * count
    if not isinstance(doc, dict) or doc.get("version") != INDEX_VERSION or doc.get("size") != st.st_size \
            or doc.get("mtime_ns") != st.st_mtime_ns or not isinstance(doc.get("hosts"), list) \
            or len(doc["hosts"]) != count:
        return [None] * count
    return [d if isinstance(d, str) else None for d in doc["hosts"]]


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
    for (name, offset, length), digest in zip(hosts, _digests(path, len(hosts))):
        records.add(path, offset, length, str(name), digest)
    doc["hosts"] = records
    return doc
