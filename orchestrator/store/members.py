"""fleet.json schema 3: the plain (schema-1) JSON document, one gzip member per piece.

The one home of the stored form chosen in bench/RESULTS.md (issue 51, "The stored forms side by
side"): the document's text is cut into pieces (its head up to the host list, each host record,
the separators between them, the rest), each piece compressed as a gzip member of its own at
zlib level 1.  Concatenated gzip members are one stream to every gzip reader (RFC 1952 2.2), so
`zcat fleet.json | jq` reads the whole run as one JSON document, while fleet.index.json keeps each
host's byte range for reading one host at a time.  A host record is two members: its text up to
the keys decided fleet-wide (spool.LATE_KEYS), left open, and those keys with the closing brace;
a merge then copies the first and writes only the second anew (store/carry.py).

The text is msgspec's JSON when msgspec is installed, else the standard library's, rewritten to
the same bytes (`text`: floats in msgspec's notation); a value msgspec does not write (a lone
surrogate, an int past 64 bits) is written by the standard library's path by both.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

from orchestrator.files.jsontext import StrictEncoder

SCHEMA_VERSION = 3
LEVEL = 1  # zlib level: 13 KiB a DGX host at about 1 ms (bench/RESULTS.md, issue 51)
MAGIC = b"\x1f\x8b\x08"  # a gzip member's first bytes: ID1, ID2, CM=deflate (RFC 1952 2.3.1)
_GZIP = 31  # zlib's wbits for a gzip wrapper

try:  # the compiled writer, where it is installed (pyproject: wheels for 3.9-3.13)
    import msgspec

    _fast: Callable[[Any], bytes] | None = msgspec.json.Encoder().encode
except ImportError:  # pragma: no cover - depends on the environment
    _fast = None

_plain = StrictEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)
_ascii = StrictEncoder(separators=(",", ":"), ensure_ascii=True, check_circular=False)
# A JSON string (left alone; written as an unrolled loop, twice as fast as an alternation per
# character) or a float's exponent in Python's notation (rewritten).
_EXPONENT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|(-?)(\d)(?:\.(\d+))?e([+-])(\d+)')
_MAYBE = re.compile(r"\de[+-]\d")  # what must be in a text for it to hold such a float
_FLOAT = re.compile(r"(-?)(\d)(?:\.(\d+))?e([+-])(\d+)")
_E = re.compile(r"e[+-]\d")
# msgspec writes a float whose decimal exponent is in this range without an exponent; Python's
# repr from -4, so only -5 differs (1.5e-05 is 0.000015 there).
_LOWEST_PLAIN = -5


def _msgspec_float(m: re.Match[str]) -> str:
    if m.group(4) is None:
        return m.group(0)  # a string: never touched
    sign, lead, frac, esign, digits = m.group(1), m.group(2), m.group(3) or "", m.group(4), m.group(5)
    exp = int(digits) * (-1 if esign == "-" else 1)
    if exp == _LOWEST_PLAIN:
        return f"{sign}0.{'0' * (-exp - 1)}{lead}{frac}"
    return f"{sign}{lead}{'.' + frac if frac else ''}e{'-' if exp < 0 else ''}{abs(exp)}"


def _floats_rewritten(out: str) -> str:
    """json's text with its floats in msgspec's notation.  Each exponent is found by a regex with
    a literal first character (C speed), its number read back from there, and told inside a
    string or not by the parity of the quotes before it (counted, not walked: walking every string
    of a 150 KB record with a regex cost about 7 ms); a text with an escaped backslash, where a
    quote's escaping is not local, takes the walking regex."""
    if "\\\\" in out:
        return _EXPONENT.sub(_msgspec_float, out)
    pieces: list[str] = []
    last = quotes = 0
    for e in _E.finditer(out):
        start = e.start()
        while start > last and (out[start - 1].isdigit() or out[start - 1] == "."):
            start -= 1
        if start > last and out[start - 1] == "-":
            start -= 1
        m = _FLOAT.match(out, start)
        if m is None or m.end() <= e.start():
            continue
        quotes += out.count('"', last, start) - out.count('\\"', last, start)
        pieces.append(out[last:start])
        pieces.append(m.group(0) if quotes % 2 else _msgspec_float(m))
        last = m.end()
    pieces.append(out[last:])
    return "".join(pieces)


def _stdlib(value: Any) -> bytes:
    """msgspec's text, written by the standard library (the pure-Python fallback, and the path
    both take for what msgspec does not write)."""
    out = _plain.encode(value)
    if _MAYBE.search(out):
        out = _floats_rewritten(out)
    try:
        return out.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not UTF-8, so every string is escaped
        return _EXPONENT.sub(_msgspec_float, _ascii.encode(value)).encode("ascii")


def text(value: Any, fast: bool = True) -> bytes:
    """`value` as compact JSON text in UTF-8 (non-finite floats as null, as every writer of
    fleetprobe's).  `fast=False`: the standard library's path, for the test that holds both to
    the same bytes."""
    if fast and _fast is not None:
        try:
            return _fast(value)
        except (TypeError, ValueError, OverflowError, RecursionError):
            pass  # UnicodeEncodeError is a ValueError: a lone surrogate
    return _stdlib(value)


def has_compiled_writer() -> bool:
    return _fast is not None


def pack(data: bytes) -> bytes:
    """`data` as one gzip member (zlib level LEVEL; no file name, no time: the same bytes in, the
    same member out)."""
    c = zlib.compressobj(LEVEL, zlib.DEFLATED, _GZIP)
    return c.compress(data) + c.flush()


class Packer:
    """One gzip member written in pieces (the document's head or tail, which may be large)."""

    def __init__(self) -> None:
        self._c = zlib.compressobj(LEVEL, zlib.DEFLATED, _GZIP)

    def add(self, data: bytes) -> bytes:
        return self._c.compress(data)

    def end(self) -> bytes:
        return self._c.flush()


COMMA = pack(b",")  # the separator between two host records, a member of its own


def member_sizes(data: bytes) -> list[tuple[int, bytes]]:
    """Each gzip member of `data` in order: its length in `data` and its decompressed text.
    ValueError when `data` is not whole members (damaged, cut short, not gzip)."""
    out: list[tuple[int, bytes]] = []
    rest = data
    while rest:
        if not rest.startswith(MAGIC):
            raise ValueError("not a gzip member where one should start")
        d = zlib.decompressobj(_GZIP)
        try:
            text_ = d.decompress(rest)
        except zlib.error as e:
            raise ValueError(f"a compressed member does not decompress ({e})") from None
        if not d.eof:
            raise ValueError("a compressed member is cut short")
        out.append((len(rest) - len(d.unused_data), text_))
        rest = d.unused_data
    return out


def unpack(data: bytes) -> bytes:
    """The text of every gzip member in `data`, joined (what zcat writes).  ValueError as
    member_sizes."""
    return b"".join(t for _, t in member_sizes(data))


def text_starts(data: bytes, want: bytes) -> bool:
    """Does the gzip member starting `data` (its first bytes, or all of it) decompress to a text
    starting with `want`?  False where it does not decompress (only as much is inflated as `want`
    needs)."""
    try:
        return zlib.decompressobj(_GZIP).decompress(data, len(want)) == want
    except zlib.error:
        return False


def is_members(head: bytes) -> bool:
    """Does a file starting with `head` hold gzip members (schema 3) rather than JSON text?"""
    return head.startswith(MAGIC[:2])


def scan(f: IO[bytes], chunk: int = 1 << 20) -> Iterator[tuple[int, int, bytes]]:
    """Each member of the file `f` (from where it stands): its offset, length and text.  Used when
    the index is missing or does not match (the file is then read through once).  ValueError where
    a member does not decompress: without the index, where the next one starts is not known."""
    d = zlib.decompressobj(_GZIP)
    offset = f.tell()
    start, out, pending = offset, bytearray(), b""
    while True:
        data = pending or f.read(chunk)
        pending = b""
        if not data:
            if start != offset or out:
                raise ValueError(f"the compressed member at byte {start:,} is cut short")
            return
        try:
            out += d.decompress(data)
        except zlib.error as e:
            raise ValueError(f"the compressed member at byte {start:,} does not decompress ({e})") from None
        if not d.eof:
            offset += len(data)
            continue
        used = len(data) - len(d.unused_data)
        offset += used
        yield start, offset - start, bytes(out)
        pending = d.unused_data
        start, out, d = offset, bytearray(), zlib.decompressobj(_GZIP)


def loads(data: bytes) -> Any:
    """A whole schema-3 file's document (every member), parsed."""
    return json.loads(unpack(data))
