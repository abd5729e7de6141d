"""How a fact value reads to an operator: one home for "unknown is `?`, never `None`".

Facts carry `null` for what no probe could answer (docs/facts-model.md).  Every message, subject,
class name and table cell that puts a fact into text goes through `shown()`, so a missing value
reads `?` (or the caller's word for it) instead of Python's `None`.
"""

from __future__ import annotations

from typing import Any

UNKNOWN = "?"


def shown(value: Any, unknown: str = UNKNOWN) -> str:
    """`value` as text; None (and an empty string) as `unknown`."""
    if value is None or value == "":
        return unknown
    return str(value)
