"""JSON read from a file piece by piece: values one at a time, each within a bound.

json.loads wants the whole text: a stored document of a hundred megabytes costs its text, then its
parsed values, several times its size (a past run of 600,000 findings, 117 MiB, held 962 MiB).
`JsonStream` reads a region of a file in chunks and hands out one value at a time (an object's
members, an array's elements), so a reader keeps what it wants (the first N findings) and lets the
rest go as it passes.  No single value may be longer than `value_limit` characters: a member of
gigabytes is refused (ValueError), never held.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import IO, Any

CHUNK = 1 << 20
_WS = " \t\n\r"
_NUMBER = "0123456789.eE+-"


class JsonStream:
    """The JSON text of `f` from its current position to `end` (a byte offset), read in chunks."""

    def __init__(self, f: IO[bytes], end: int, value_limit: int) -> None:
        self._f, self._end, self._limit = f, end, value_limit
        self._decode = codecs.getincrementaldecoder("utf-8")()
        self._buf, self._at, self._eof = "", 0, False
        self._json = json.JSONDecoder()

    def _fill(self) -> bool:
        """More text into the buffer (what was read already dropped); False at the end."""
        if self._eof:
            return False
        want = min(CHUNK, self._end - self._f.tell())
        data = self._f.read(want) if want > 0 else b""
        self._eof = not data
        self._buf = self._buf[self._at:] + self._decode.decode(data, final=self._eof)
        self._at = 0
        return bool(data)

    def peek(self) -> str:
        """The next character that is not white space ('' at the end)."""
        while True:
            while self._at < len(self._buf) and self._buf[self._at] in _WS:
                self._at += 1
            if self._at < len(self._buf) or not self._fill():
                return self._buf[self._at:self._at + 1]

    def expect(self, char: str) -> None:
        got = self.peek()
        if got != char:
            raise ValueError(f"expected {char!r}, found {repr(got) if got else 'the end'}")
        self._at += 1

    def value(self) -> Any:
        """The next JSON value, read to its end however many chunks it spans (at most value_limit)."""
        self.peek()
        while True:
            try:
                value, end = self._json.raw_decode(self._buf, self._at)
            except json.JSONDecodeError:
                end = -1
            # a number at the buffer's end may go on in the next chunk ("6" of "6.02e23"): read on
            # before believing it (no complete value is followed by a number's characters)
            if end != -1 and (self._eof or (end < len(self._buf) and self._buf[end] not in _NUMBER)):
                self._at = end
                return value
            if len(self._buf) - self._at > self._limit:
                raise ValueError(f"a value longer than {self._limit:,} characters")
            if not self._fill():
                raise ValueError("the text ends inside a value")

    def elements(self) -> Iterator[Any]:
        """The elements of the array that comes next, one at a time."""
        self.expect("[")
        if self.peek() == "]":
            self._at += 1
            return
        while True:
            yield self.value()
            if self.peek() == "]":
                self._at += 1
                return
            self.expect(",")
