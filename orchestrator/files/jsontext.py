"""Strict JSON in and out: no NaN, no Infinity, on every road.

Python's json reads and writes `NaN` and `Infinity` by default, and a float past 1.8e308 parses
as infinity; none of them is JSON, and Prometheus' textfile collector, jq, a browser and every
strict reader downstream refuse the whole file for one of them.  Readers of what a host or a user
hands over (envelopes, bundle documents) refuse them; writers never produce them: a value that is
not finite is written as null, which every surface shows as "not measured".
"""

from __future__ import annotations

import json
import math
from typing import Any


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


class StrictEncoder(json.JSONEncoder):
    """A JSONEncoder that writes a non-finite float as null.  The C encoder does the work; only a
    document that holds such a float (rare: a forged or overflowing figure) is walked once more."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**{**kw, "allow_nan": False})

    def encode(self, o: Any) -> str:
        try:
            return super().encode(o)
        except ValueError as e:
            if "JSON compliant" not in str(e):  # json's words for a non-finite float
                raise
            return super().encode(finite(o))


def dumps(value: Any, **kw: Any) -> str:
    """json.dumps that writes null for a non-finite float (never NaN or Infinity)."""
    return StrictEncoder(**kw).encode(value)
