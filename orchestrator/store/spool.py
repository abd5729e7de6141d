"""Host records kept as JSON text in files and parsed when read.

A big fleet's judged records wait here (the workers' spool, orchestrator/verdict/parallel.py) and
a stored fleet.json is read through it by its index (orchestrator/store/fleet_file.py), so neither
the judge nor a reader holds every host's facts at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import weakref
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from orchestrator.files.records import Body
from orchestrator.store import members
from orchestrator.store.atomic import encode_json
from orchestrator.store.compact import damaged_host, decode_host

# A host record's fleet-wide keys, decided once every host is judged: the last keys of its text.
LATE_KEYS = ("fingerprint", "class", "health")
_NO_LATE = ',"fingerprint":null,"class":null,"health":null}'
# Where a record's facts sit in its stored text, in bytes from the record's start: the facts
# object's range and each section's value's (section, start, end).  With it a reader of names,
# outcomes and a section or two parses a few kilobytes of a record instead of all of it.
FactsLayout = tuple[int, int, tuple[tuple[str, int, int], ...]]
# As the spool holds a layout: its section names (one tuple shared by every record with those
# sections) and its offsets packed (start, end, then each section's start and end).  A layout held
# as tuples is about 1.5 KB a host, most of it small objects; packed it is a fifth of that.
_Packed = tuple[tuple[str, ...], array]


def _pack(layout: FactsLayout, names: dict[tuple[str, ...], tuple[str, ...]]) -> _Packed:
    start, end, members = layout
    key = tuple(name for name, _, _ in members)
    offsets = array("q", (start, end))
    for _, a, b in members:
        offsets.append(a)
        offsets.append(b)
    return names.setdefault(key, key), offsets


def _unpack(packed: _Packed) -> FactsLayout:
    names, offsets = packed
    return offsets[0], offsets[1], tuple(
        (name, offsets[2 + 2 * k], offsets[3 + 2 * k]) for k, name in enumerate(names))


def _late_text(keys: Mapping[str, Any], version: int = 2) -> str:
    """The fleet-wide keys as they end a record's text, its closing brace included (in schema 3,
    written as store/members.py writes every value, so a record's text is one writer's)."""
    if version == members.SCHEMA_VERSION:
        return "".join(f",{members.text(k).decode()}:{members.text(v).decode()}" for k, v in keys.items()) + "}"
    return "".join(f",{encode_json(k)}:{encode_json(v)}" for k, v in keys.items()) + "}"


class SpooledRecords(Sequence[dict[str, Any]]):
    """Host records kept as JSON in files, parsed when read: a fleet's spool (records without
    fingerprint/class, appended when read) or a stored fleet.json (whole records, by its index).
    Read-only: each read returns a fresh dict.  fleet.json is written from it by copying text."""

    def __init__(self, directory: Path | None = None, remove: bool = True, version: int = 1,
                 cut: bool = False) -> None:
        # the fleet.json schema the texts are in (2: store/compact.py's form; 3: gzip members of the
        # plain text, store/members.py, whose spool holds a record's text open: the keys follow)
        self.version = version
        # False: each text is a whole record ("}" last); True: each is a record's text cut before
        # its fleet-wide keys (store/carry.py: a stored run's record carried into a merged run)
        self._cut = cut
        self._dir = directory
        self._fds: dict[Path, int] = {}
        self._entries: list[tuple[Path, int, int, str]] = []  # file, offset, length, host
        # per entry, the record's drift digest (verdict/drift.py: what `probe diff` reads of it), None
        # where there is none; in the spool without the class, which is mixed in once it is decided
        self._digests: list[str | None] = []
        self._layouts: list[_Packed | None] = []  # per entry, where its facts sit (None: unknown)
        self._layout_names: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._classes: dict[str, tuple[Any, Any]] | None = None
        self._tail: dict[str, str] | None = None  # host -> ',"fingerprint":…,"class":…}' (spool only)
        self._where: dict[str, int] | None = None
        self._finalizer = weakref.finalize(self, _cleanup, directory if remove else None, self._fds)

    def add(self, part: int | Path, offset: int, length: int, name: str, digest: str | None = None,
            layout: FactsLayout | None = None) -> None:
        if isinstance(part, int):
            assert self._dir is not None, "a numbered part lives in the spool directory"
            path = self._dir / f"part{part}.json"
        else:
            path = part
        if path not in self._fds:
            self._fds[path] = os.open(path, os.O_RDONLY)
        self._entries.append((path, offset, length, name))
        self._digests.append(digest)
        self._layouts.append(None if layout is None else _pack(layout, self._layout_names))

    def layout(self, i: int) -> FactsLayout | None:
        """Where record i's facts sit in its stored text, when known."""
        packed = self._layouts[i]
        return None if packed is None else _unpack(packed)

    def set_late(self, of_host: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """(host, its fleet-wide keys: fingerprint, class, health, in the order they end its
        record), decided once every host was judged; each kept as its text."""
        self._classes, self._tail = {}, {}
        for name, keys in of_host:
            self._classes[name] = keys.get("fingerprint"), keys.get("class")
            self._tail[name] = _late_text(keys, self.version)

    def body(self, i: int) -> tuple[dict[str, Any], Body | None]:
        """Record i decoded, as reading it gives it, and where its stored members sit without its
        fleet-wide keys' member (file, offset, length), or None when its text is not in that form
        (schema 1 or 2, whose text a schema-3 file cannot copy; damaged; not ending with the keys as
        this writer writes them): a record carried into another run is then copied as stored
        members, decoded once (store/carry.py), or else encoded again."""
        if self.version != members.SCHEMA_VERSION or self._tail is not None or self._cut:
            return self[i], None
        return self._members_body(i)

    def _members_body(self, i: int) -> tuple[dict[str, Any], Body | None]:
        """body() of a schema-3 record: its members but the last, when the last holds exactly its
        fleet-wide keys as the writer writes them (store/members.py)."""
        path, offset, length, _ = self._entries[i]
        try:
            found = members.member_sizes(self.stored(i))
            rec = json.loads(b"".join(t for _, t in found))
        except ValueError:
            return self[i], None
        if not isinstance(rec, dict):
            return self[i], None
        if len(found) < 2 or list(rec)[-len(LATE_KEYS):] != list(LATE_KEYS) \
                or found[-1][1] != _late_text({k: rec[k] for k in LATE_KEYS}, self.version).encode("utf-8"):
            return rec, None
        return rec, (path, offset, length - found[-1][0])

    def text(self, i: int) -> str:
        """Record i as JSON text, exactly as fleet.json holds it (decompressed, schema 3)."""
        return self.plain(i).decode("utf-8")

    def plain(self, i: int) -> bytes:
        """Record i's JSON text in UTF-8 (schema 3's members decompressed).  ValueError: a member
        that does not decompress."""
        if self.version != members.SCHEMA_VERSION:
            return self.stored(i)
        tail = self._late(i)
        data = members.unpack(self._pread(i))
        return data if tail is None else data + tail.encode("utf-8")

    def stored(self, i: int) -> bytes:
        """Record i as fleet.json holds it (UTF-8 text, or schema 3's gzip members): what the
        fleet.json writer copies, never decoding a byte (a 10,000-host fleet is 1.3 GB of records)."""
        data = self._pread(i)
        tail = self._late(i)
        if tail is None:
            return data
        if self.version == members.SCHEMA_VERSION:
            return data + members.pack(tail.encode("utf-8"))  # the spool's member is open: the keys follow
        # an encoded record ends with "}": reopened for the fleet-wide keys (a cut one is open)
        return (data if self._cut else data[:-1]) + tail.encode("utf-8")

    def _pread(self, i: int) -> bytes:
        path, offset, length, name = self._entries[i]
        data = os.pread(self._fds[path], length, offset)
        if len(data) != length:
            raise OSError(f"{path}: host record {name} is cut short; was the file changed?")
        return data

    def _late(self, i: int) -> str | None:
        """The text of record i's fleet-wide keys that the spool adds, or None (stored whole)."""
        if self._tail is not None:
            return self._tail.get(self._entries[i][3], _NO_LATE)
        return _NO_LATE if self._cut else None

    def names(self) -> list[str]:
        return [e[3] for e in self._entries]

    def digest(self, i: int) -> str | None:
        """Record i's drift digest including its class, as fleet.digests.json stores it; None: none."""
        base = self._digests[i]
        if base is None or self._tail is None:
            return base  # none, or a stored fleet's (the class already in)
        cls = (self._classes or {}).get(self._entries[i][3], (None, None))[1]
        return hashlib.blake2b(f"{base}|{encode_json(cls)}".encode(), digest_size=16).hexdigest()

    def digests(self) -> list[str | None]:
        return [self.digest(i) for i in range(len(self._entries))]

    def _position(self, name: str) -> int | None:
        if self._where is None:
            self._where = {e[3]: i for i, e in enumerate(self._entries)}
        return self._where.get(name)

    def by_name(self, name: str) -> dict[str, Any] | None:
        """One host's record, or None: lookups without parsing the others (drift)."""
        i = self._position(name)
        return None if i is None else self[i]

    def digest_by_name(self, name: str) -> str | None:
        """One host's drift digest (without parsing its record), or None."""
        i = self._position(name)
        return None if i is None else self.digest(i)

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self._read(i, lambda rec: rec)

    def _read(self, i: int, narrow: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        # a record damaged on disk costs only its host: it is shown, named, not judged, and says why
        rec: Any = None
        try:
            rec = json.loads(self.plain(i))
            if not isinstance(rec, dict):
                raise ValueError(f"a JSON {type(rec).__name__}, not a host record")
            rec = narrow(rec)
            return decode_host(rec) if self.version == 2 else rec
        except ValueError as e:
            return damaged_host(rec, e, self._entries[i][3])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self._entries)))

    def with_facts(self, sections: Collection[str]) -> Iterator[dict[str, Any]]:
        """Every record with only the named facts sections: a reader of names, outcomes and a
        section or two (the terminal's tables) skips decoding the rest, most of a record, and skips
        parsing it where the record's layout is known."""
        def narrow(rec: dict[str, Any]) -> dict[str, Any]:
            facts = rec.get("facts")
            # facts kept verbatim ({"@v": ...}, odd section names) are decoded whole
            if isinstance(facts, dict) and not any(str(k).startswith("@") for k in facts):
                rec["facts"] = {k: v for k, v in facts.items() if k in sections}
            return rec

        for i in range(len(self._entries)):
            rec = self._without_facts(i, sections)
            yield self._read(i, narrow) if rec is None else rec

    def _without_facts(self, i: int, sections: Collection[str]) -> dict[str, Any] | None:
        """Record i with only the named facts sections, parsed from the parts of its text its
        layout names; None where there is no layout or the text is not what it describes (the
        caller then reads it whole, which says what is wrong with it)."""
        layout = self.layout(i)
        if layout is None or self.version == 1:
            return None
        start, end, spans = layout
        try:
            data = self.plain(i)
        except ValueError:
            return None
        if not 0 < start < end < len(data) or not _sections_where_laid_out(data, start, end, spans):
            return None
        try:
            rec = json.loads(data[:start] + b"{}" + data[end:])
            if not isinstance(rec, dict) or rec.get("facts") != {}:
                return None
            rec["facts"] = {name: json.loads(data[a:b]) for name, a, b in spans if name in sections}
            return decode_host(rec) if self.version == 2 else rec
        except (ValueError, RecursionError):
            return None

    def json_pieces(self) -> Iterator[str]:
        """The records as one JSON array, in pieces (what atomic.iter_json writes for this list)."""
        yield "["
        for i in range(len(self._entries)):
            yield ("," if i else "") + self._plain_text(i)
        yield "]"

    def _plain_text(self, i: int) -> str:
        """Record i as plain JSON text: its stored text where that is plain, else it read and written."""
        if self.version != 2:
            try:
                return self.text(i)
            except ValueError:  # a member that does not decompress: what reading it gives
                pass
        return encode_json(self[i])

    def close(self) -> None:
        self._finalizer()


def _sections_where_laid_out(data: bytes, start: int, end: int, members: Sequence[tuple[str, int, int]]) -> bool:
    """Do the spans tile the facts object data[start:end], each right after its own section's key?
    The layout is kept apart from the record: one that fits the record's size but not its text
    (sections swapped, one left out) would hand a reader another section's facts, or none, under
    a section's name.  Comparing the few bytes between the spans costs nothing beside parsing."""
    at = start
    for k, (name, a, b) in enumerate(members):
        key = ("{" if k == 0 else ",") + encode_json(name) + ":"
        if not at < a < b or data[at:a] != key.encode("utf-8"):
            return False
        at = b
    return data[at:end] == (b"}" if members else b"{}")


def _cleanup(directory: Path | None, fds: dict[Path, int]) -> None:
    for fd in fds.values():
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
