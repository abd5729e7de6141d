"""fleet.json schema 2 as fleetprobe wrote it before schema 3 (issue 51): a7b062f's writer,
store/fleet_file.write_fleet and its record text, kept here so that the tests of the schema-2
readers (the index, the facts layouts, a damaged record) still have files of that form to read.
Only the product's readers are under test; this is the form's author, frozen.  Runs stored by it
are in tests/fixtures/runs_v2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.store import atomic, compact
from orchestrator.store.fleet_file import DIGESTS_NAME, INDEX_NAME, INDEX_VERSION, LAYOUTS_NAME
from orchestrator.store.spool import FactsLayout, SpooledRecords


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
                text, layout = stored_record(json.loads(hosts.text(j)), {})  # a schema-3 spool's record
                yield name, text, layout
        return
    for rec in hosts:
        text, layout = stored_record(rec, {})
        yield rec.get("name"), text, layout


def _layout_json(layout: FactsLayout) -> list[Any]:
    start, end, sections = layout
    return [start, end, [list(s) for s in sections]]
