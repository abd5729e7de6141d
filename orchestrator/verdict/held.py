"""Verdicts held compactly while every part of a `probe merge` waits for the fleet-wide steps.

A merge holds every host's verdict until the last part is read (the fleet-wide steps compare all
of them).  Most of a held verdict was its fleet view's facts: what the fleet checks read of the
host's GPUs, NICs and board, 4.1 KB of a DGX host's ~6 KB as dicts, even with equal values shared
(verdict/handoff.py), since each GPU's dict holds the host's own UUID and serial.  Held here, each
facts section is its value in `marshal`'s form (the same JSON types back, 1, 1.0 and True kept
apart), equal sections one bytes object: about 1.6 KB a DGX host.  A section is decoded each time
a fleet check reads it, which the fleet-wide steps do a few times a host.
"""

from __future__ import annotations

import marshal
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, cast

from orchestrator.facts.model import Facts
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import HostVerdict

# Distinct values kept for sharing are forgotten past this many (identities never repeat, so the
# table would otherwise grow with the fleet); a value that repeats is back in it within a part.
MAX_SHARED = 1 << 14


class PackedFacts(Mapping[str, Any]):
    """A host's facts sections, each decoded when read: a fresh value at each read, never changed
    by the fleet checks (they only read facts)."""

    __slots__ = ("_blobs", "_names")

    def __init__(self, names: tuple[str, ...], blobs: tuple[bytes, ...]) -> None:
        self._names = names
        self._blobs = blobs

    def __getitem__(self, key: str) -> Any:
        try:
            return marshal.loads(self._blobs[self._names.index(key)])
        except ValueError:
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __reduce__(self) -> tuple[Any, ...]:
        return PackedFacts, (self._names, self._blobs)


class Holder:
    """Packs verdicts for holding, sharing what hosts have alike: facts sections equal byte for
    byte, the sections' names, and the expectations (most hosts of a playbook have the same)."""

    def __init__(self) -> None:
        self._shared: dict[Any, Any] = {}

    def _one(self, value: Any, key: Any = None) -> Any:
        if len(self._shared) >= MAX_SHARED:
            self._shared.clear()
        return self._shared.setdefault(value if key is None else key, value)

    def facts(self, facts: Mapping[str, Any]) -> PackedFacts:
        names = tuple(facts)
        blobs = tuple(self._one(marshal.dumps(v)) for v in facts.values())
        return PackedFacts(self._one(names, key=("names", names)), blobs)

    def expect(self, expect: Expectations) -> Expectations:
        try:
            return cast(Expectations, self._one(expect))
        except TypeError:  # a value of an unhashable field: held as it is
            return expect

    def verdict(self, v: HostVerdict) -> HostVerdict:
        """`v` as held: the same answers to every fleet-wide step.  Facts marshal cannot write (not
        JSON values: a check's own test) are held as they are."""
        view = v.fleet_view
        try:
            facts = cast(Facts, self.facts(view.facts))
        except ValueError:
            facts = view.facts
        return replace(v, fleet_view=replace(view, facts=facts, expect=self.expect(view.expect)))
