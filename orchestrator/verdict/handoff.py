"""Verdicts handed from worker processes to the controller as a stream of pickles, one per host.

Pickle shares a string only within one dump, so every host's verdict arrives with its own copies of
the same words: dict keys, states ("ACTIVE", "LinkUp"), models, firmware versions, bus ids.  Those
copies were 13.7 of a DGX verdict's 31.8 KB in the controller, which holds every host's verdict
for the fleet-wide steps.  Here each string travels by value as a persistent id and the reader
hands out one object per distinct string (`Reader`), so the controller holds each word once.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import IO, Any

# Identities (GPU UUIDs, serials, host names) never repeat, so the table of strings seen is emptied
# when it reaches this size rather than kept for a whole fleet: the words that do repeat are back in
# it within a host or two, and the table stays a few megabytes at any fleet size.
MAX_STRINGS = 1 << 16


class Shared(tuple):
    """A tuple of strings (or of tuples of them) that many held objects have equal copies of, such
    as the keys of a host's measured figures, the same on every host of a model: a Reader hands out
    one object for all of them, as for a string."""

    __slots__ = ()


_BY_VALUE = (str, Shared)


class _Writer(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        return obj if type(obj) in _BY_VALUE else None


class _Words(dict[Any, Any]):
    """Each distinct string (or Shared tuple) once.  A word already seen is found by the dict's own
    lookup, without a call into Python: only new words (a host's identities, a word's first time)
    come here."""

    def __missing__(self, word: Any) -> Any:
        if type(word) not in _BY_VALUE:
            raise pickle.UnpicklingError(f"a persistent id that is neither a string nor a Shared tuple: {type(word).__name__}")
        if len(self) >= MAX_STRINGS:
            self.clear()
        self[word] = word
        return word


def dump(obj: Any, file: IO[bytes]) -> None:
    """Append one object to a handoff stream."""
    _Writer(file, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)


class _Loader(pickle.Unpickler):
    def __init__(self, file: IO[bytes], words: _Words) -> None:
        self._words = words
        super().__init__(file)

    # The table's own lookup, not a method of ours: a word already seen costs no call into Python.
    # (A property, since Python 3.13 refuses an instance attribute of this name.)
    @property
    def persistent_load(self) -> Any:
        return self._words.__getitem__


class Reader:
    """Loads objects from handoff streams; equal strings among everything one Reader loads are one
    object.  Keep one Reader for the objects that are held together, and let it go with them."""

    def __init__(self) -> None:
        self._strings = _Words()

    def load_all(self, file: IO[bytes]) -> Iterator[Any]:
        """Every object of one stream, in order."""
        while True:
            try:
                yield _Loader(file, self._strings).load()
            except EOFError:
                return
