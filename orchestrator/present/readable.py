"""A finding's expected/actual value as a person reads it, on every surface that prints one.

Values are JSON: numbers, text, lists and objects nested in each other (a link's AER counters per
end, a GPU's fabric state).  They read as `key: value` pairs, nested objects in parentheses,
lists joined by commas; what is empty or unknown inside an object is left out rather than shown
as an empty `correctable: ,`; an unknown value on its own reads `?`, never `None`.
"""

from __future__ import annotations

from typing import Any

from orchestrator.facts.shown import UNKNOWN

_DEPTH = 6  # deeper than any finding's value goes; past it the rest reads "…"


def readable(value: Any, depth: int = 0) -> str:
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".") if value == value else "NaN"
    if isinstance(value, (int, str)):
        return str(value)
    if depth >= _DEPTH:
        return "…"
    if isinstance(value, dict):
        if "unknown" in value and len(value) == 1:
            return f"unknown ({readable(value['unknown'], depth + 1)})"
        parts = [f"{k}: {_nested(v, depth)}" for k, v in value.items() if not _empty(v)]
        return ", ".join(parts) or "none"
    if isinstance(value, (list, tuple)):
        items = [_nested(v, depth) for v in value]
        return ", ".join(items) or "none"
    return str(value)


def _nested(value: Any, depth: int) -> str:
    text = readable(value, depth + 1)
    return f"({text})" if isinstance(value, (dict, list, tuple)) and len(value) > 1 else text


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (dict, list, tuple, str)) and not value)
