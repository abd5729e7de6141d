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
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from orchestrator.files.jsonstream import JsonStream
from orchestrator.store import atomic, compact
from orchestrator.store.spool import FactsLayout, SpooledRecords

INDEX_NAME = "fleet.index.json"
INDEX_VERSION = 1
# Each host record's drift digest (verdict/drift.py: what `probe diff` compares), in index order:
# two runs' records with one digest need not be parsed to be diffed.  Written for fleets judged in
# workers; without it (small fleets, older runs) diff parses every record, as before.
DIGESTS_NAME = "fleet.digests.json"
# Where each record's facts sit in its text (spool.FactsLayout), in index order: readers of a
# section or two (the terminal, `probe show`) parse those instead of whole records.  Apart from the
# index, so that a reader that does not know it still reads the index.
LAYOUTS_NAME = "fleet.layouts.json"


def record_text(rec: dict[str, Any], parts: dict[str, str] | None = None) -> str:
    """One host record as fleet.json stores it (schema 2, compact.host_text): the one place a record
    becomes stored text (the workers' spool holds the same text, verdict/parallel.py; the writer
    copies it unchanged).

    `parts`, when given, is filled with the stored text of each top-level value and of each facts
    section ("facts.<section>"), cut from the same encoding (verdict/drift.py hashes some of them:
    encoding them apart again cost a fifth of judging a host).  The stored text of an object is its
    members' texts joined, so the text is byte for byte compact.host_text(rec)."""
    return stored_record(rec, parts)[0]


def stored_record(rec: dict[str, Any], parts: dict[str, str] | None = None) -> tuple[str, FactsLayout | None]:
    """record_text(rec, parts), and where its facts sit in that text (spool.FactsLayout; None when
    the facts are not stored section by section, or `parts` is not asked for)."""
    stored = compact.encode_host(rec)
    if parts is None or not compact.is_member_wise(rec, stored):
        return compact.stored_text(stored), None
    enc = compact.stored_text
    members: list[str] = []
    layout: FactsLayout | None = None
    at = 1  # characters so far, the opening brace included; the text is ASCII (json escapes the rest)
    for key, value in stored.items():
        head = f"{',' if members else ''}{enc(key)}:"
        at += len(head)
        if key == "facts" and isinstance(value, dict) and compact.is_member_wise(rec[key], value):
            sections: list[str] = []
            spans: list[tuple[str, int, int]] = []
            inner = at + 1
            for section, facts in value.items():
                text = parts[f"facts.{section}"] = enc(facts)
                name = f"{',' if sections else ''}{enc(section)}:"
                spans.append((section, inner + len(name), inner + len(name) + len(text)))
                inner += len(name) + len(text)
                sections.append(name + text)
            parts[key] = "{" + "".join(sections) + "}"
            layout = (at, at + len(parts[key]), tuple(spans))
        else:
            parts[key] = enc(value)
        at += len(parts[key])
        members.append(head + parts[key])
    text = "{" + "".join(members) + "}"
    return text, (layout if text.isascii() else None)


def write_fleet(path: Path, fleet: dict[str, Any], mode: int = 0o644) -> Path:
    """fleet.json in schema 2 (store/compact.py: each value as compact.encode writes it), then its
    index (both atomically)."""
    fleet = {**fleet, "schema_version": compact.SCHEMA_VERSION}
    entries, layouts = _JsonRows(), _JsonRows()

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
            for j, (name, text, layout) in enumerate(_stored_records(value)):
                if j:
                    yield put(",")
                start = pos
                yield put(text)
                entries.append([name, start, pos - start])
                layouts.append(_layout_json(layout) if layout else None)
            yield put("]")
        yield put("}\n")

    atomic.write_chunks(path, chunks(), mode)
    st = path.stat()
    atomic.write_json(path.with_name(INDEX_NAME), {"version": INDEX_VERSION, "size": st.st_size,
                                                   "mtime_ns": st.st_mtime_ns, "hosts": entries}, mode=mode)
    hosts = fleet.get("hosts")
    digests = hosts.digests() if isinstance(hosts, SpooledRecords) else []
    for name, per_host, known in ((DIGESTS_NAME, digests, any(digests)), (LAYOUTS_NAME, layouts, layouts.any_set)):
        if known:
            atomic.write_json(path.with_name(name), {"version": INDEX_VERSION, "size": st.st_size,
                                                     "mtime_ns": st.st_mtime_ns, "hosts": per_host}, mode=mode)
    return path


class _JsonRows:
    """A list written beside fleet.json with a row per host (the index, the facts layouts), each
    row held as its JSON text.  As lists the rows were over a million small objects at 100,000
    hosts, all alive until the end, and each one counted towards the cyclic collector's next full
    pass over them: at 30,000 hosts writing took 1.68 s, and 0.91 s with the collector paused,
    and it grew faster than the fleet.  A string is not tracked by the collector."""

    def __init__(self) -> None:
        self._texts: list[str] = []
        self.any_set = False  # a row other than null

    def append(self, row: Any) -> None:
        self._texts.append(atomic.encode_json(row))
        self.any_set = self.any_set or row is not None

    def json_pieces(self) -> Iterator[str]:
        """The list's JSON text, as atomic.iter_json writes a list of the rows."""
        yield "["
        for i, text in enumerate(self._texts):
            yield ("," if i else "") + text
        yield "]"


def _stored_records(hosts: Any) -> Iterator[tuple[Any, str | bytes, FactsLayout | None]]:
    """Each host's name, stored text and facts layout, as fleet.json writes them."""
    if isinstance(hosts, SpooledRecords):  # judged in workers, or a stored file: its text is copied
        for j, name in enumerate(hosts.names()):
            if hosts.version == compact.SCHEMA_VERSION:
                yield name, hosts.stored(j), hosts.layout(j)
            else:
                yield name, compact.recode_text(hosts.text(j), hosts.version), None
        return
    for rec in hosts:
        text, layout = stored_record(rec, {})
        yield rec.get("name"), text, layout


def _layout_json(layout: FactsLayout) -> list[Any]:
    start, end, sections = layout
    return [start, end, [list(s) for s in sections]]


def _layout(stored: Any, length: int) -> FactsLayout | None:
    """A stored facts layout of a record `length` bytes long, when it fits inside the record (one
    that does not is ignored: the record is then parsed whole)."""
    if not isinstance(stored, list) or len(stored) != 3:
        return None
    start, end, sections = stored
    if not (_int(start) and _int(end) and 0 < start < end < length and isinstance(sections, list)):
        return None
    spans = []
    for s in sections:
        if not (isinstance(s, list) and len(s) == 3 and isinstance(s[0], str) and _int(s[1]) and _int(s[2])
                and start < s[1] < s[2] < end):
            return None
        spans.append((s[0], s[1], s[2]))
    return start, end, tuple(spans)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _per_host(path: Path, name: str, count: int) -> list[Any]:
    """The per-record list of a file beside fleet.json (`name`: digests, layouts) when it belongs
    to this very fleet.json, else one None per record."""
    try:
        doc = json.loads(path.with_name(name).read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return [None] * count
    if not isinstance(doc, dict) or doc.get("version") != INDEX_VERSION or doc.get("size") != st.st_size \
            or doc.get("mtime_ns") != st.st_mtime_ns or not isinstance(doc.get("hosts"), list) \
            or len(doc["hosts"]) != count:
        return [None] * count
    return list(doc["hosts"])


def _index(path: Path) -> list[list[Any]] | None:
    """The host records' byte ranges, when the index belongs to this very file and its ranges
    follow one another as the records do in fleet.json."""
    try:
        idx = json.loads(path.with_name(INDEX_NAME).read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return None
    if not isinstance(idx, dict) or idx.get("version") != INDEX_VERSION or idx.get("size") != st.st_size \
            or idx.get("mtime_ns") != st.st_mtime_ns or not isinstance(idx.get("hosts"), list):
        return None
    hosts = idx["hosts"]
    return hosts if _contiguous(hosts, st.st_size) else None


def _contiguous(rows: list[Any], size: int) -> bool:
    """Do the rows' ranges lie one separator apart, inside a file of `size` bytes?  The records of
    fleet.json's host list do, so a row left out (or a length off) leaves a gap or an overlap that
    this sees; the head and tail read_fleet parses around them see one left out at either end."""
    end = None
    for e in rows:
        if not (isinstance(e, list) and len(e) == 3 and _int(e[1]) and _int(e[2]) and e[1] > 0 and e[2] > 0):
            return False
        if end is not None and e[1] != end + 1:
            return False
        end = e[1] + e[2]
    return end is None or end <= size


def _named_as_indexed(fd: int, rows: list[list[Any]]) -> bool:
    """Does each row's range start with the record the row names?  Records are built name first
    (verdict/judge.py) and stored in their key order, so a record's text starts with its name; each
    after the first follows the previous one's closing brace and the separator.  A few bytes read
    per record, never the record: readers take each host's name from the index without parsing
    it.  A record stored otherwise (one kept verbatim, one without a name) makes the file be
    parsed whole, as an index that is wrong does."""
    for j, (name, offset, _length) in enumerate(rows):
        if not isinstance(name, str):
            return False
        want = (b"}," if j else b"") + b'{"name":' + atomic.encode_json(name).encode("utf-8")
        if os.pread(fd, len(want), offset - (2 if j else 0)) != want:
            return False
    return True


def fleet_index_names(path: Path) -> list[str]:
    """The host names fleet.json's index lists, in its order; [] without an index of this very
    file (the names are then only in the records, which this does not read)."""
    return [e[0] for e in _index(path) or [] if isinstance(e[0], str)]


def read_fleet(path: Path) -> Any:
    """A stored fleet.json: its hosts read on demand when it has an index, else parsed whole.
    Raises OSError/UnicodeDecodeError/ValueError like json.loads(path.read_text())."""
    hosts = _index(path)
    if not hosts:
        return _parsed_whole(path)
    rest, named = _rest_by_index(path, hosts)
    if rest is None:
        return _parsed_whole(path)
    if not named:
        try:
            return _parsed_whole(path)
        except ValueError:
            # Damaged as well, and its ranges fit the index: read by it, a damaged record costs
            # only its host (named by the index), as where the names match.  Never under a name
            # that is not one.
            if not all(isinstance(h[0], str) for h in hosts):
                raise
    return _spooled(path, rest, hosts)


# What a reader of the history (the previous run for drift, the earlier runs for repeat offenders)
# reads of a stored run, whatever the run holds: a past run costs its own reading, bounded.
HEAD_LIMIT = 16 << 20  # bytes before the host records: the run's header and summary
VALUE_LIMIT = 64 << 20  # characters of any one other member (classes, not_judged) or finding
WHOLE_LIMIT = 64 << 20  # bytes of a fleet.json without a valid index, which is parsed whole


@dataclass(frozen=True)
class Bounded:
    """A stored fleet read for the history: the document, and whether it held more findings than
    the `kept` read (the rest of the file, after them, is then not read)."""

    doc: dict[str, Any]
    kept: int
    more: bool


def read_fleet_bounded(path: Path, max_findings: int) -> Bounded:
    """read_fleet for a reader of the history: the first `max_findings` findings only (what follows
    them, the silenced findings and the not-judged table, is not read then), and no part of the
    file held past its bound.
    Raises OSError/ValueError (the file is unreadable, or a part of it is over its bound)."""
    hosts = _index(path)
    if hosts:
        with open(path, "rb") as f:
            named = _named_as_indexed(f.fileno(), hosts)
            rest, kept, more = _rest_streamed(f, hosts, max_findings)
        if named and rest is not None:
            return Bounded(_spooled(path, rest, hosts), kept, more)
    size = path.stat().st_size
    if size > WHOLE_LIMIT:
        raise ValueError(f"fleet.json is {size:,} bytes without a valid index of its host records; a past run is "
                         f"read whole only up to {WHOLE_LIMIT:,}")
    doc = _parsed_whole(path)
    if not isinstance(doc, dict):
        return Bounded(doc, 0, False)
    found = doc.get("findings")
    if isinstance(found, list) and len(found) > max_findings:
        doc["findings"] = found[:max_findings]
        return Bounded(doc, max_findings, True)
    return Bounded(doc, len(found) if isinstance(found, list) else 0, False)


def _rest_streamed(f: IO[bytes], hosts: list[list[Any]], max_findings: int) -> tuple[dict[str, Any] | None, int, bool]:
    """fleet.json without its host records, read up to its first `max_findings` findings, and
    whether it has more (None when the index's ranges do not leave a document with an empty
    host list)."""
    start, end = hosts[0][1], hosts[-1][1] + hosts[-1][2]
    if start > HEAD_LIMIT:
        raise ValueError(f"fleet.json has {start:,} bytes before its host records, over the {HEAD_LIMIT:,} read")
    try:
        doc = json.loads(f.read(start).decode("utf-8") + "]}")  # '"hosts":[' closed: the head alone
    except ValueError:
        return None, 0, False
    if not isinstance(doc, dict) or doc.get("hosts") != []:
        return None, 0, False
    f.seek(end)
    stream = JsonStream(f, os.fstat(f.fileno()).st_size, VALUE_LIMIT)
    try:
        stream.expect("]")
        while stream.peek() == ",":
            stream.expect(",")
            key = stream.value()
            stream.expect(":")
            if key != "findings" or stream.peek() != "[":
                doc[str(key)] = stream.value()
                continue
            kept: list[Any] = []
            for finding in stream.elements():
                if len(kept) == max_findings:
                    doc["findings"] = kept
                    return doc, len(kept), True  # one more: the rest is not read
                kept.append(finding)
            doc["findings"] = kept
        stream.expect("}")
    except ValueError:
        return None, 0, False  # cut inside a record, or not the document the index describes
    return doc, len(doc.get("findings") or ()), False


def _parsed_whole(path: Path) -> Any:
    return compact.decode_fleet(json.loads(path.read_text(encoding="utf-8")))


def _rest_by_index(path: Path, hosts: list[list[Any]]) -> tuple[dict[str, Any] | None, bool]:
    """fleet.json without its host records, parsed (None when the index's ranges do not leave the
    document with an empty host list), and whether each range starts with the record it names."""
    start, end = hosts[0][1], hosts[-1][1] + hosts[-1][2]
    with open(path, "rb") as f:
        head = f.read(start)
        f.seek(end)
        tail = f.read()
        named = _named_as_indexed(f.fileno(), hosts)
    try:
        doc = json.loads((head + tail).decode("utf-8"))  # '"hosts":[' + ']': the rest, with no hosts
    except ValueError:
        return None, named  # cut inside a record: the index is wrong, the file may well be whole
    return (doc if isinstance(doc, dict) and doc.get("hosts") == [] else None), named


def _spooled(path: Path, rest: dict[str, Any], hosts: list[list[Any]]) -> dict[str, Any]:
    """The document with its hosts read on demand, from the ranges the index gives."""
    version = compact.stored_version(rest)
    doc: dict[str, Any] = compact.decode_fleet(rest)
    records = SpooledRecords(remove=False, version=version)
    digests = _per_host(path, DIGESTS_NAME, len(hosts))
    layouts = _per_host(path, LAYOUTS_NAME, len(hosts))
    for (name, offset, length), digest, layout in zip(hosts, digests, layouts):
        records.add(path, offset, length, name, digest if isinstance(digest, str) else None,
                    _layout(layout, length))
    doc["hosts"] = records
    return doc
