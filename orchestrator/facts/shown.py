"""How a fact value reads to an operator: one home for "unknown is `?`, never `None`".

Facts carry `null` for what no probe could answer (docs/facts-model.md).  Every message, subject,
class name and table cell that puts a fact into text goes through `shown()`, so a missing value
reads `?` (or the caller's word for it) instead of Python's `None`.  A value quoted from a JSON
document (a stored plan, an Ansible event) goes through `json_shown()`: `null`, as the document
has it.
"""

from __future__ import annotations

import json
from typing import Any

UNKNOWN = "?"


def shown(value: Any, unknown: str = UNKNOWN) -> str:
    """`value` as text; None (and an empty string) as `unknown`."""
    if value is None or value == "":
        return unknown
    return str(value)


def json_shown(value: Any, limit: int = 60) -> str:
    """A value of a JSON document as that document writes it (null, true, [1, null]), never as
    Python's repr ('None'), cut to `limit` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."
