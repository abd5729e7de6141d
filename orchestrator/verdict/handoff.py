"""Verdicts handed from worker processes to the controller as a stream of pickles, one per host.

Pickle shares a string only within one dump, so every host's verdict arrives with its own copies of
the same words: dict keys, states ("ACTIVE", "LinkUp"), models, firmware versions, bus ids.  Those
copies were 13.7 of a DGX verdict's 31.8 KB in the controller, which holds every host's verdict
for the fleet-wide steps.  Here each string travels by value as a persistent id and the reader
hands out one object per distinct string (`Reader`), so the controller holds each word once.

The same holds one level up: the facts the fleet checks read are mostly equal from host to host
(a NIC port's state and rate, a GPU's fabric clique, a class's topology descriptor), and as dicts
they were 10 of the 14 KB a DGX verdict kept after its strings were shared.  A sender `freeze`s
such a value; the reader hands out one dict or list for each distinct one, nested ones included.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from typing import IO, Any

# Identities (GPU UUIDs, serials, host names, and the values holding them) never repeat, so the
# table of words seen is emptied when it reaches this size rather than kept for a whole fleet: the
# words that do repeat are back in it within a host or two, and the table stays bounded.
MAX_STRINGS = 1 << 16


class Shared(tuple):
    """A tuple of tuples (of strings, numbers, None) that many held objects have equal copies of,
    such as the keys of a host's measured figures, the same on every host of a model: a Reader
    hands out one object for all of them, as for a string."""

    __slots__ = ()


class Frozen(tuple):
    """A JSON value (dicts with string keys, lists, strings, numbers, booleans, None) in a hashable
    form, made by `freeze`: a Reader turns it into a plain dict or list, one object for every equal
    value it has read.  What a Reader hands out this way is shared between the objects holding it,
    so it must be read, never changed."""

    __slots__ = ()


# A frozen node is a tagged pair: ("d", ((key, node), ...)), ("l", (node, ...)), or ("f", float) and
# ("b", bool), since 1, 1.0 and True are equal keys and must not stand for one another.  Strings,
# ints and None are their own nodes.  A node is never a bare tuple of another meaning, because JSON
# has no tuples.
_DICT, _LIST, _FLOAT, _BOOL = "d", "l", "f", "b"


class _NotJson(Exception):
    pass


# strings, ints and None, most of the leaves, are their own nodes (bool is a type of its own here)
_LEAVES = (str, int, type(None))


def _node(value: Any) -> Any:
    t = type(value)
    if t in _LEAVES:
        return value
    if t is dict:
        items = []
        for k, v in value.items():
            if type(k) is not str:
                raise _NotJson
            items.append((k, v if type(v) in _LEAVES else _node(v)))
        return (_DICT, tuple(items))
    if t is list:
        return (_LIST, tuple([v if type(v) in _LEAVES else _node(v) for v in value]))
    if t is float:
        if value == 0.0 and math.copysign(1.0, value) < 0:
            raise _NotJson  # -0.0 equals 0.0: it would be handed out as the other
        return (_FLOAT, value)
    if t is bool:
        return (_BOOL, value)
    raise _NotJson


def freeze(value: Any) -> Any:
    """`value` to be sent shared (a Frozen) when it is a JSON dict or list; anything else as it is."""
    if type(value) is not dict and type(value) is not list:
        return value
    try:
        return Frozen(_node(value))
    except _NotJson:
        return value


def thaw(value: Any) -> Any:
    """What `freeze` made, back as a plain dict or list (not shared: a Frozen that came through a
    plain pickle, not a Reader); anything else as it is."""
    return _thawed(value, None) if type(value) is Frozen else value


def _thawed(node: Any, nodes: dict[Any, Any] | None) -> Any:
    """The value of a frozen node; with `nodes` (a Reader's), one object for each distinct node."""
    if type(node) is not tuple and type(node) is not Frozen:
        return node
    tag, body = node
    if tag in (_FLOAT, _BOOL):
        return body
    if nodes is not None:
        got = nodes.get(node) if type(node) is tuple else None  # a Frozen comes here once missed
        if got is not None:
            return got
        if len(nodes) >= MAX_STRINGS:
            nodes.clear()
    # a leaf that is not a tuple (a string, an int, None) is its own value, without a call
    value: Any = ({k: v if type(v) is not tuple else _thawed(v, nodes) for k, v in body} if tag == _DICT
                  else [v if type(v) is not tuple else _thawed(v, nodes) for v in body])
    if nodes is not None:
        nodes[node] = value
    return value


_BY_VALUE = (str, Shared, Frozen)


class _Writer(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        return obj if type(obj) in _BY_VALUE else None


class _Words(dict[Any, Any]):
    """Each distinct string, Shared tuple and frozen value (and each dict or list inside one) once.
    A word already seen is found by the dict's own lookup, without a call into Python: only new
    words (a host's identities, a word's first time) come here.  The kinds of key cannot be equal
    to one another: a node is a pair whose first item is a string, a Shared tuple holds tuples."""

    def __missing__(self, word: Any) -> Any:
        t = type(word)
        if t not in _BY_VALUE:
            raise pickle.UnpicklingError(
                f"a persistent id that is neither a string nor a Shared or Frozen tuple: {t.__name__}")
        if t is Frozen:
            return _thawed(word, self)
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
