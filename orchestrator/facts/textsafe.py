"""Which characters of a host's text are unsafe to show, whatever the output: one home.

A host string can carry control characters (NUL, bell, backspace, C1 CSI), escape sequences,
bidi overrides that make a reader see text reversed, zero-width characters and (from JSON
escapes) lone surrogates that no UTF-8 writer can encode.  Lone surrogates are replaced once at
the boundary (engine/envelope.py); every output then escapes the rest its own way, with this
pattern: the terminal, CSV, JUnit, Prometheus and the HTML report.

The same text read as a number: `is_digits` says which host text int() can read, since Python's
own test (str.isdigit) also takes digits that int() refuses.  How many digits, and which range a
field's value may have, is facts/numbers.py's (read_int, read_float): parsers read numbers there.
"""

from __future__ import annotations

import re
from typing import Any

# C0 but tab/newline/CR (each output decides on those), DEL, C1, zero-width, bidi embeddings,
# overrides and isolates, surrogates
UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
LINE_BREAKS = re.compile("[\r\n\u0085\u2028\u2029]")


def display_safe(value: Any, replacement: str = "?") -> str:
    """`value` as text with every unsafe character replaced (line breaks and tabs kept)."""
    return UNSAFE.sub(replacement, "" if value is None else str(value))


def one_line(value: Any) -> str:
    """`value` as display_safe text with every line break a space: a message that must stay one
    line, so that nothing it quotes can start a line of its own that reads as another message."""
    return LINE_BREAKS.sub(" ", display_safe(value))


def is_digits(text: str) -> bool:
    """Whether `text` is a whole number as machines write one: ASCII digits only.  str.isdigit
    also says yes to superscripts and other digits that int() refuses ('²'), which a host, a file
    or a user can hand over."""
    return text.isascii() and text.isdigit()


def reasons(raw: Any) -> dict[str, str]:
    """A source's `unknown` map (field -> why it could not say it; a text import's, handed to a
    normalizer), strings only; anything but a mapping is no reasons at all."""
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
