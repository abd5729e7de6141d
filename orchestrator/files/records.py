"""A fleet's host records as the judged fleet reads them, wherever they are kept.

`HostRecords` is what `verdict/result.py:FleetResult` needs of them, and all it may ask: the
verdict holds records and hands them out without knowing how they are stored.  Two kinds satisfy
it: `RecordList`, records in memory (a run judged in one process, a document read whole), and
`store/spool.py:SpooledRecords`, records kept as JSON text in files and parsed when read (a big
fleet judged in workers, a stored fleet.json read by its index).  mypy holds each to it where it
is handed over (verdict/judge.py, api/stored.py).

It sits below both the store and the verdict (store/ must not import verdict/), with no logic of
either: a lookup by name in memory is the only thing it decides.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# Where a record's stored text sits without its fleet-wide keys: file, offset, length.  A record
# carried into another run (`probe merge`) is copied as that text (store/carry.py).
Body = tuple[Path, int, int]


@runtime_checkable
class HostRecords(Protocol):
    """A fleet's host records in the run's order.  Each read may return a fresh record."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> Mapping[str, Any]: ...

    def __iter__(self) -> Iterator[Mapping[str, Any]]: ...

    def names(self) -> list[str]:
        """Every host's name, in order, without reading more of its record than the name."""

    def by_name(self, name: str) -> Mapping[str, Any] | None:
        """One host's record, or None: without reading the others where they are kept apart."""

    def digest_by_name(self, name: str) -> str | None:
        """The host record's drift digest where it was stored with one (verdict/drift.py), else None."""

    def with_facts(self, sections: Collection[str]) -> Iterable[Mapping[str, Any]]:
        """Every record, with at least the named facts sections: a reader of a section or two may
        skip decoding the rest (records in memory are handed over whole)."""

    def body(self, i: int) -> tuple[Mapping[str, Any], Body | None]:
        """Record i as reading it gives it, and where its stored text sits when that text can be
        copied as it is (None: write it from the record)."""


class RecordList(list[dict[str, Any]]):
    """Host records in memory: a plain list of the records (so they are written, compared and
    updated as one), with the lookups `HostRecords` asks for."""

    def names(self) -> list[str]:
        return [str(r.get("name")) for r in self]

    def by_name(self, name: str) -> dict[str, Any] | None:
        return next((r for r in self if r.get("name") == name), None)

    def digest_by_name(self, name: str) -> str | None:
        return None  # records in memory were never stored with a digest

    def with_facts(self, sections: Collection[str]) -> Iterable[dict[str, Any]]:
        return self

    def body(self, i: int) -> tuple[dict[str, Any], Body | None]:
        return self[i], None
