"""Make host-controlled strings safe for a terminal."""

from __future__ import annotations

import re
from typing import Any

# CSI/OSC escape sequences and every C0/C1 control character except tab.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def clean(value: Any, limit: int = 200) -> str:
    """A one-line, escape-free rendering of a value a host sent us."""
    if value is None:
        return "-"
    if isinstance(value, dict) and "unknown" in value:
        return "(needs root)"
    s = str(value)
    s = _ESCAPES.sub("", s)
    s = _CONTROLS.sub("?", s)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s


# every control character but the tab and the newline that lay a view out, bidi and zero-width too
_BLOCK_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def terminal_safe(text: str) -> str:
    """A whole rendered view made safe for a terminal, whatever a renderer let through: escape
    sequences removed, other control, bidi and zero-width characters (and lone surrogates) as `?`.
    The last line of defence; each cell is still cleaned where it is drawn."""
    return _BLOCK_CONTROLS.sub("?", _ESCAPES.sub("", text))
