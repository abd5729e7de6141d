"""fleet.json on disk, with an index of where each host's record sits in it.

A stored fleet.json of 10,000 GPU servers is over a gigabyte of JSON; `probe run` reads the
previous run's for drift, `probe diff`/`show`/`report` read stored ones.  Parsing it whole costs
seconds per 100 MB and holds every host's facts at once.  So the writer also records, in
fleet.index.json beside it, the byte range of every host record, and the reader parses only the
small rest of the document; the hosts come back as records read one at a time on demand
(spool.SpooledRecords).  Without a matching index (older runs, a file edited by hand)
fleet.json is parsed whole, as before.

Files are written in schema 3 (store/members.py: the schema-1 document as gzip members, with the
index of each host's members) and read in any schema (2: store/compact.py): a reader always gets
the schema-1 shape facts/model.py describes.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from orchestrator.files.bounded import open_regular, read_regular
from orchestrator.files.jsonstream import JsonStream
from orchestrator.store import atomic, compact, members
from orchestrator.store.spool import LATE_KEYS, FactsLayout, SpooledRecords

# The fleet.json schemas this fleetprobe reads: 1 (plain JSON), 2 (store/compact.py's forms) and 3
# (plain JSON in gzip members, store/members.py), which it writes.
READ_VERSIONS = (1, compact.SCHEMA_VERSION, members.SCHEMA_VERSION)
INDEX_NAME = "fleet.index.json"
INDEX_VERSION = 1
# The index of a schema-3 fleet.json (members of gzip, store/members.py): each host's byte range
# covers its members, and "rest" says where the head's member ends and the rest's starts.  Another
# number than schema 1 and 2's index, so a reader of those never takes it for one of theirs.
MEMBERS_INDEX_VERSION = 2
# Each host record's drift digest (verdict/drift.py: what `probe diff` compares), in index order:
# two runs' records with one digest need not be parsed to be diffed.  Written for fleets judged in
# workers; without it (small fleets, older runs) diff parses every record, as before.
DIGESTS_NAME = "fleet.digests.json"
# Where each record's facts sit in its text (spool.FactsLayout), in index order: readers of a
# section or two (the terminal, `probe show`) parse those instead of whole records.  Apart from the
# index, so that a reader that does not know it still reads the index.
LAYOUTS_NAME = "fleet.layouts.json"


@dataclass(frozen=True)
class StoredRecord:
    """One host record as fleet.json schema 3 stores it (store/members.py): its JSON text, where its
    facts sit in that text (spool.FactsLayout, in bytes; None when not stored section by section),
    and where the keys decided fleet-wide begin (spool.LATE_KEYS, when they are its last keys)."""

    text: bytes
    layout: FactsLayout | None
    late_at: int | None

    def members(self) -> bytes:
        """The record as gzip members: its text up to the fleet-wide keys, then those (a merge
        copies the first and writes the second anew), or one member when it has no such keys."""
        if self.late_at is None:
            return members.pack(self.text)
        return members.pack(self.text[:self.late_at]) + members.pack(self.text[self.late_at:])


def record_text(rec: dict[str, Any], parts: dict[str, str] | None = None) -> bytes:
    """One host record's JSON text as fleet.json stores it: the one place a record becomes stored
    text (the workers' spool holds the same text, verdict/parallel.py; the writer copies it).

    `parts`, when given, is filled with the text of each top-level value and of each facts section
    ("facts.<section>"), cut from the same encoding (verdict/drift.py hashes some of them: encoding
    them apart again cost a fifth of judging a host).  The text of a record is its members' texts
    joined (members.text of each), so a reader can cut a section out by the layout."""
    return stored_record(rec, parts).text


def stored_record(rec: dict[str, Any], parts: dict[str, str] | None = None) -> StoredRecord:
    """record_text(rec, parts), where its facts sit in it, and where its fleet-wide keys begin."""
    enc = members.text
    pieces: list[bytes] = []
    layout: FactsLayout | None = None
    late_at: int | None = None
    keys = list(rec)
    late_first = len(keys) - len(LATE_KEYS) if keys[-len(LATE_KEYS):] == list(LATE_KEYS) else -1
    at = 1  # bytes so far, the opening brace included
    for i, (key, value) in enumerate(rec.items()):
        if i == late_first:
            late_at = at
        head = (b"," if i else b"") + enc(key) + b":"
        at += len(head)
        if key == "facts" and isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            sections: list[bytes] = []
            spans: list[tuple[str, int, int]] = []
            inner = at + 1
            for section, facts in value.items():
                data = enc(facts)
                if parts is not None:
                    parts[f"facts.{section}"] = data.decode("utf-8")
                name = (b"," if sections else b"") + enc(section) + b":"
                spans.append((section, inner + len(name), inner + len(name) + len(data)))
                inner += len(name) + len(data)
                sections.append(name + data)
            data = b"{" + b"".join(sections) + b"}"
            layout = (at, at + len(data), tuple(spans))
        else:
            data = enc(value)
        if parts is not None:
            parts[str(key)] = data.decode("utf-8")
        at += len(data)
        pieces.append(head + data)
    return StoredRecord(b"{" + b"".join(pieces) + b"}", layout, late_at)


def write_fleet(path: Path, fleet: dict[str, Any], mode: int = 0o644) -> Path:
    """fleet.json in schema 3 (store/members.py: the plain document, a gzip member for its head,
    one for each separator, two for each host record and one for the rest), then its index (both
    atomically)."""
    fleet = {**fleet, "schema_version": members.SCHEMA_VERSION}
    entries, layouts = _JsonRows(), _JsonRows()
    ends: list[int] = []  # the head's length, then where the rest's member starts

    def chunks() -> Iterator[bytes]:
        pos = 0
        packer = members.Packer()

        def put(data: bytes) -> bytes:
            nonlocal pos
            pos += len(data)
            return data

        yield put(packer.add(b"{"))
        for i, (key, value) in enumerate(fleet.items()):
            yield put(packer.add((b"," if i else b"") + members.text(key) + b":"))
            if key != "hosts":
                for piece in _value_pieces(value):
                    yield put(packer.add(piece))
                continue
            yield put(packer.add(b"[") + packer.end())
            ends.append(pos)
            for j, (name, data, layout) in enumerate(_stored_records(value)):
                if j:
                    yield put(members.COMMA)
                start = pos
                yield put(data)
                entries.append([name, start, pos - start])
                layouts.append(_layout_json(layout) if layout else None)
            ends.append(pos)
            packer = members.Packer()
            yield put(packer.add(b"]"))
        yield put(packer.add(b"}\n") + packer.end())

    atomic.write_chunks(path, chunks(), mode)
    st = path.stat()
    atomic.write_json(path.with_name(INDEX_NAME), {"version": MEMBERS_INDEX_VERSION, "size": st.st_size,
                                                   "mtime_ns": st.st_mtime_ns, "rest": ends,
                                                   "hosts": entries}, mode=mode)
    hosts = fleet.get("hosts")
    digests = hosts.digests() if isinstance(hosts, SpooledRecords) else []
    for name, per_host, known in ((DIGESTS_NAME, digests, any(digests)), (LAYOUTS_NAME, layouts, layouts.any_set)):
        if known:
            atomic.write_json(path.with_name(name), {"version": INDEX_VERSION, "size": st.st_size,
                                                     "mtime_ns": st.st_mtime_ns, "hosts": per_host}, mode=mode)
    return path


def _value_pieces(value: Any) -> Iterator[bytes]:
    """A top-level value's text in pieces (a list item by item, an object member by member, as one
    text would be: the findings and not-judged table of a big fleet are not held as one text)."""
    if isinstance(value, (list, tuple)):
        yield b"["
        for i, item in enumerate(value):
            yield (b"," if i else b"") + members.text(item)
        yield b"]"
    elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
        yield b"{"
        for i, (key, item) in enumerate(value.items()):
            yield (b"," if i else b"") + members.text(key) + b":" + members.text(item)
        yield b"}"
    else:
        yield members.text(value)


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


def _stored_records(hosts: Any) -> Iterator[tuple[Any, bytes, FactsLayout | None]]:
    """Each host's name, stored members and facts layout, as fleet.json writes them."""
    if isinstance(hosts, SpooledRecords):  # judged in workers, or a stored file: its members are copied
        for j, name in enumerate(hosts.names()):
            if hosts.version == members.SCHEMA_VERSION:
                yield name, hosts.stored(j), hosts.layout(j)
            else:
                stored = stored_record(compact.plain_record(hosts.text(j), hosts.version))
                yield name, stored.members(), stored.layout
        return
    for rec in hosts:
        stored = stored_record(rec)
        yield rec.get("name"), stored.members(), stored.layout


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


def _side_file(path: Path, name: str, fleet_size: int) -> bytes:
    """The bytes of a file beside fleet.json (its index, digests, layouts): a regular file, and
    smaller than a few times fleet.json, whose records it describes in a few bytes each.  Past
    that, or not a file (a FIFO would hold the reader for ever), UnreadableInput, an OSError: the
    side file is not believed, and fleet.json is read without it."""
    return read_regular(path.with_name(name), 4 * fleet_size + (1 << 20), name)


def _per_host(path: Path, name: str, count: int) -> list[Any]:
    """The per-record list of a file beside fleet.json (`name`: digests, layouts) when it belongs
    to this very fleet.json, else one None per record."""
    try:
        st = path.stat()
        doc = json.loads(_side_file(path, name, st.st_size))
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
        st = path.stat()
        idx = json.loads(_side_file(path, INDEX_NAME, st.st_size))
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
    try:
        if _is_members(path):
            with open_regular(path, "fleet.json") as f:
                found = _members_index(path, f.fileno())
            return [e[0] for e in found.hosts] if found else []
    except OSError:
        return []
    return [e[0] for e in _index(path) or [] if isinstance(e[0], str)]


def read_fleet(path: Path) -> Any:
    """A stored fleet.json: its hosts read on demand when it has an index, else parsed whole.
    Raises OSError/UnicodeDecodeError/ValueError like json.loads(path.read_text())."""
    if _is_members(path):
        return _members_read(path, None).doc
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
    if _is_members(path):
        return _members_read(path, max_findings)
    hosts = _index(path)
    if hosts:
        with open_regular(path, "fleet.json") as f:
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
    return _stream_rest(doc, JsonStream(f, os.fstat(f.fileno()).st_size, VALUE_LIMIT), max_findings)


def _stream_rest(doc: dict[str, Any], stream: JsonStream, max_findings: int) -> tuple[dict[str, Any] | None, int, bool]:
    """The rest of fleet.json after its host records (from the list's "]"), read into `doc` up to
    its first `max_findings` findings, and whether it has more."""
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
    return compact.read_plain(path)


def _rest_by_index(path: Path, hosts: list[list[Any]]) -> tuple[dict[str, Any] | None, bool]:
    """fleet.json without its host records, parsed (None when the index's ranges do not leave the
    document with an empty host list), and whether each range starts with the record it names."""
    start, end = hosts[0][1], hosts[-1][1] + hosts[-1][2]
    with open_regular(path, "fleet.json") as f:
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


# Schema 3: gzip members (store/members.py).  The index gives each host's members; without one
# that matches (a file copied without it, edited, or checked out of git, which keeps no file
# times) the file is read through once and the same ranges found by its members.


@dataclass(frozen=True)
class _Members:
    """Where a schema-3 file's pieces sit: its head's member ends at `head`, each host's members
    are a row (name, offset, length), and the rest's member starts at `rest`."""

    head: int
    hosts: list[list[Any]]
    rest: int


def _is_members(path: Path) -> bool:
    with open_regular(path, "fleet.json") as f:
        return members.is_members(f.read(2))


def _members_index(path: Path, fd: int) -> _Members | None:
    """The schema-3 index, when it belongs to this very file: its ranges follow one another, a
    separator apart, between the head and the rest, and each starts a gzip member."""
    try:
        st = os.fstat(fd)
        idx = json.loads(_side_file(path, INDEX_NAME, st.st_size))
    except (OSError, ValueError):
        return None
    if not isinstance(idx, dict) or idx.get("version") != MEMBERS_INDEX_VERSION or idx.get("size") != st.st_size \
            or idx.get("mtime_ns") != st.st_mtime_ns or not isinstance(idx.get("hosts"), list):
        return None
    rest, rows = idx.get("rest"), idx["hosts"]
    if not (isinstance(rest, list) and len(rest) == 2 and all(_int(v) for v in rest)):
        return None
    at = rest[0]
    for j, e in enumerate(rows):
        at += len(members.COMMA) if j else 0
        if not (isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and _int(e[1]) and _int(e[2])
                and e[1] == at and e[2] > 0):
            return None
        if os.pread(fd, len(members.MAGIC), at) != members.MAGIC:
            return None
        at += e[2]
    return _Members(rest[0], rows, rest[1]) if at == rest[1] < st.st_size else None


def _named_members(fd: int, rows: list[list[Any]]) -> bool:
    """Does each row's first member decompress to the record the row names?  Records are stored
    name first, so a few bytes are inflated per record, never the record: an index whose names or
    ranges are another host's is not believed (the members are then read through)."""
    for name, offset, length in rows:
        want = b'{"name":' + members.text(name)
        if not members.text_starts(os.pread(fd, min(length, 1024), offset), want) and \
                not members.text_starts(os.pread(fd, length, offset), want):
            return False
    return True


def _members_scanned(f: IO[bytes]) -> _Members:
    """The pieces of a schema-3 file found by reading it through (no index that matches it).
    ValueError when it is not the document schema 3 writes, or a member does not decompress."""
    f.seek(0)
    head: int | None = None
    rows: list[list[Any]] = []
    new_host = True
    for offset, length, text in members.scan(f):
        if head is None:
            if not text.endswith(b'"hosts":['):
                raise ValueError("its first compressed member is not the head of a fleet document")
            head = length
        elif text.startswith(b"]"):
            return _Members(head, rows, offset)
        elif text == b",":
            new_host = True
        elif new_host:
            rows.append([_name_in(text, len(rows)), offset, length])
            new_host = False
        else:
            rows[-1][2] = offset + length - rows[-1][1]
    raise ValueError("it ends before the rest of the document (cut short?)")


def _name_in(text: bytes, j: int) -> str:
    """The host name a record's text starts with (records are stored name first), else its place."""
    if text.startswith(b'{"name":'):
        try:
            name, _ = json.JSONDecoder().raw_decode(text[8:8 + 4096].decode("utf-8", "replace"))
            if isinstance(name, str):
                return name
        except ValueError:
            pass
    return f"host record {j + 1}"


def _members_read(path: Path, max_findings: int | None) -> Bounded:
    """A schema-3 fleet.json: its hosts read on demand, the rest parsed (the first `max_findings`
    findings only, when given: a reader of the history)."""
    with open_regular(path, "fleet.json") as f:
        found = _members_index(path, f.fileno())
        if found is None:
            size = os.fstat(f.fileno()).st_size
            if max_findings is not None and size > WHOLE_LIMIT:
                raise ValueError(f"fleet.json is {size:,} bytes without a valid index of its host records; a "
                                 f"past run is read through only up to {WHOLE_LIMIT:,}")
            found = _members_scanned(f)
        elif not _named_members(f.fileno(), found.hosts):
            try:
                found = _members_scanned(f)
            except ValueError:
                pass  # damaged as well: read by the index, a damaged record costs only its host
        if max_findings is not None and found.head > HEAD_LIMIT:
            raise ValueError(f"fleet.json has {found.head:,} bytes before its host records, over the {HEAD_LIMIT:,} read")
        head = members.unpack(os.pread(f.fileno(), found.head, 0))
        f.seek(found.rest)
        if max_findings is None:
            doc, kept, more = json.loads(head + members.unpack(f.read())), 0, False
        else:
            start = json.loads(head + b"]}")
            if not isinstance(start, dict):
                raise ValueError("its head is not a fleet document's")
            try:
                with gzip.GzipFile(fileobj=f, mode="rb") as rest:
                    doc, kept, more = _stream_rest(start, JsonStream(cast(IO[bytes], rest), 1 << 62, VALUE_LIMIT),
                                                   max_findings)
            except (OSError, EOFError, zlib.error) as e:  # gzip's words for a member that does not decompress
                raise ValueError(f"the rest of the document does not decompress ({e})") from None
    if not isinstance(doc, dict) or doc.get("hosts") != []:
        raise ValueError("its compressed members are not the document schema 3 writes")
    return Bounded(_spooled_members(path, doc, found.hosts), kept, more)


def _spooled_members(path: Path, rest: dict[str, Any], hosts: list[list[Any]]) -> dict[str, Any]:
    rest["schema_version"] = 1  # in memory every fleet document has the schema-1 shape
    records = SpooledRecords(remove=False, version=members.SCHEMA_VERSION)
    layouts = _per_host(path, LAYOUTS_NAME, len(hosts))
    digests = _per_host(path, DIGESTS_NAME, len(hosts))
    for (name, offset, length), digest, layout in zip(hosts, digests, layouts):
        # a layout is in the record's decompressed text, whose length the index does not hold: one
        # that does not fit it is found so when it is used (spool: the record is then parsed whole)
        records.add(path, offset, length, name, digest if isinstance(digest, str) else None,
                    _layout(layout, 1 << 62))
    rest["hosts"] = records
    return rest
