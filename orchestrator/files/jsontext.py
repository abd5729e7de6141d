"""Strict JSON in and out: no NaN, no Infinity, on every road.

Python's json reads and writes `NaN` and `Infinity` by default, and a float past 1.8e308 parses
as infinity; none of them is JSON, and Prometheus' textfile collector, jq, a browser and every
strict reader downstream refuse the whole file for one of them.  Readers of what a host or a user
hands over (envelopes, bundle documents) refuse them; writers never produce them: a value that is
not finite is written as null, which every surface shows as "not measured".
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring, encode_basestring_ascii  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

from orchestrator.files.bounded import read_regular


def no_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def loads_strict(text: str | bytes, max_float: float = math.inf) -> Any:
    """json.loads refusing NaN, Infinity and floats past `max_float` (1e400 parses as inf and
    would come back out as `Infinity`): ValueError."""
    def bounded(number: str) -> float:
        value = float(number)
        if not -max_float <= value <= max_float:  # NaN fails it too
            raise ValueError(f"number {number[:20]} is out of range")
        return value
    return json.loads(text, parse_constant=no_constant, parse_float=bounded)


def finite(value: Any) -> Any:
    """`value` with every float that is not finite replaced by None (tuples become lists, as in JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def text_of(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """`encoder.encode`, its C encoder made once.  json makes it anew for every value it writes,
    about a third of the cost of a small value's text, and the record codec (store/compact.py)
    writes thousands of small values a host.  The same C encoder with the same settings writes the
    same text; where json would not use it (no C accelerator, an indent, circular checks, whose
    state lives in one call) json's own path is kept."""
    plain = functools.partial(json.JSONEncoder.encode, encoder)
    if c_make_encoder is None or encoder.indent is not None or encoder.check_circular:
        return plain
    write = c_make_encoder(None, encoder.default,
                           encode_basestring_ascii if encoder.ensure_ascii else encode_basestring, None,
                           encoder.key_separator, encoder.item_separator, encoder.sort_keys, encoder.skipkeys,
                           encoder.allow_nan)
    return lambda o: "".join(write(o, 0))


class StrictEncoder(json.JSONEncoder):
    """A JSONEncoder that writes a non-finite float as null.  The C encoder does the work; only a
    document that holds such a float (rare: a forged or overflowing figure) is walked once more."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**{**kw, "allow_nan": False})
        self._text = text_of(self)

    def encode(self, o: Any) -> str:
        try:
            return self._text(o)
        except ValueError as e:
            if "JSON compliant" not in str(e):  # json's words for a non-finite float
                raise
            return self._text(finite(o))


# compact separators: no spaces after "," and ":" (about a tenth of fleet.json was blanks).  No
# circular-reference bookkeeping (a tenth of the encoding time): documents here are trees, and a
# cycle would still fail, with RecursionError instead of ValueError.
_COMPACT = StrictEncoder(separators=(",", ":"), default=str, check_circular=False)
# one value as compact JSON: how fleet.json and every streamed file writes it (store/atomic.py)
encode_compact: Callable[[Any], str] = _COMPACT.encode


def dumps(value: Any, **kw: Any) -> str:
    """json.dumps that writes null for a non-finite float (never NaN or Infinity)."""
    return StrictEncoder(**kw).encode(value)


def non_finite_at(value: Any) -> str | None:
    """The path (`classes.x.host.p2p.median`, `driver[3].fixed`) of the first float in `value`
    that is not finite, or None.  Walked without recursion: a document nested as deep as json
    allows must not end the walk in a RecursionError."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return path or "the document"
        if isinstance(v, dict):
            stack.extend((f"{path}.{k}" if path else str(k), x) for k, x in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


def read_json_file(path: str | Path, limit: int, what: str) -> Any:
    """The strict JSON document in file `path` (a reference file a run judges against: a baseline
    file, a security floor).  Read through read_regular (no FIFO, device or directory, at most
    `limit` bytes): UnreadableInput.  Not UTF-8, not JSON, nested past json's depth, or holding
    NaN / Infinity / a float past 1.8e308: ValueError naming the field.  NaN and Infinity are
    parsed first and then named by their place, so the message says which field to correct."""
    data = read_regular(path, limit, what)
    try:
        doc = json.loads(data.decode("utf-8"), parse_int=_int_or_inf)
    except RecursionError:
        raise ValueError("nested deeper than a JSON document this program reads") from None
    except ValueError as e:  # not UTF-8, not JSON, an integer of more digits than Python converts
        raise ValueError(f"not a JSON file ({e})") from None
    bad = non_finite_at(doc)
    if bad is not None:
        raise ValueError(f"{bad}: not a finite number (NaN, Infinity and numbers past 1.8e308 are not read)")
    return doc


def _int_or_inf(digits: str) -> int | float:
    """An integer of JSON text; one of more than 400 digits (past any float, and past the 4,300
    Python converts at all) as infinity, so that non_finite_at names its field."""
    return int(digits) if len(digits) <= 400 else math.inf
