"""Verdicts held compactly while every part of a `probe merge` waits for the fleet-wide steps.

A merge holds every host's verdict until the last part is read (the fleet-wide steps compare all
of them).  Most of a held verdict was its fleet view's facts: what the fleet checks read of the
host's GPUs, NICs and board, 4.1 KB of a DGX host's ~6 KB as dicts, even with equal values shared
(verdict/handoff.py), since each GPU's dict holds the host's own UUID and serial.  Held here, a
section no other host had is its value in `marshal`'s form (the same JSON types back, 1, 1.0 and
True kept apart) compressed by zlib, decoded each time a fleet check reads it (a few times a host,
~10 us each); a section equal, byte for byte in that form (told by a 128-bit BLAKE2 digest of it),
to one an earlier host had is that one object, so a check that keeps what it read (the NIC peers
group hosts by their ports) holds it once.  zlib's level 1 makes a DGX host's GPU section 2.4
times smaller and its NIC section 3.5 times (1,379 and 1,021 bytes to 568 and 292; 21 us each):
a merge of 5,000 hosts held 21.8 MiB where it had held 24.7 (tracemalloc).
"""

from __future__ import annotations

import hashlib
import marshal
import zlib
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
    """A host's facts sections: each held as its value where another host had an equal one (one
    object for all of them, as the handoff Reader gave it: read, never changed, by the fleet
    checks), else in marshal's form compressed, decoded at each read (a fresh value each time)."""

    __slots__ = ("_names", "_packed", "_values")

    def __init__(self, names: tuple[str, ...], values: tuple[Any, ...], packed: int) -> None:
        self._names = names
        self._values = values
        self._packed = packed  # bit k set: values[k] is marshal's bytes of section k, compressed

    def __getitem__(self, key: str) -> Any:
        try:
            k = self._names.index(key)
        except ValueError:
            raise KeyError(key) from None
        return marshal.loads(zlib.decompress(self._values[k])) if self._packed >> k & 1 else self._values[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __reduce__(self) -> tuple[Any, ...]:
        return PackedFacts, (self._names, self._values, self._packed)


class Holder:
    """Packs verdicts for holding, sharing what hosts have alike: facts sections equal byte for
    byte, the sections' names, and the expectations (most hosts of a playbook have the same)."""

    def __init__(self) -> None:
        self._shared: dict[Any, Any] = {}  # names and expectations
        self._once: dict[bytes, bytes] = {}  # a section's form's digest -> the form compressed, seen on one host
        self._sections: dict[bytes, Any] = {}  # ... -> the value, seen on more

    def _one(self, value: Any, key: Any = None) -> Any:
        if len(self._shared) >= MAX_SHARED:
            self._shared.clear()
        return self._shared.setdefault(value if key is None else key, value)

    def facts(self, facts: Mapping[str, Any]) -> PackedFacts:
        names = tuple(facts)
        values, packed = [], 0
        for k, value in enumerate(facts.values()):
            blob = marshal.dumps(value)
            digest = hashlib.blake2b(blob, digest_size=16).digest()
            held = self._sections.get(digest)
            if held is None and digest not in self._once:  # the first host with it: held small
                values.append(self._bounded(self._once).setdefault(digest, zlib.compress(blob, 1)))
                packed |= 1 << k
            else:  # a value hosts have alike: one object for all the hosts after the first
                if held is None:
                    held = self._bounded(self._sections)[digest] = value
                values.append(held)
        return PackedFacts(self._one(names, key=("names", names)), tuple(values), packed)

    @staticmethod
    def _bounded(table: dict[bytes, Any]) -> dict[bytes, Any]:
        if len(table) >= MAX_SHARED:
            table.clear()
        return table

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
