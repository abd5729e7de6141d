"""Atomic file writes: a reader (node_exporter, a CI job, `probe show`) sees the old file or the
new one, never half of one.

JSON is written compact and streamed: `json.dumps` with `indent` (or `json.dump` to a file, at any
indent) runs Python's pure-Python encoder, which for a 10,000-host fleet.json took a minute and
held the whole text twice in memory (the string and its bytes).  The C encoder runs only for
one-shot `dumps` without indent, so large containers are encoded one element at a time with it
and each piece goes straight into a buffered file: memory holds one host's text, not the fleet's.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from orchestrator.files import atomic as files_atomic
from orchestrator.files.atomic import replace
from orchestrator.files.jsontext import dumps, encode_compact

_encode: Callable[[Any], str] = encode_compact
encode_json = _encode  # one value as compact JSON, exactly as iter_json/write_json encode it
# Containers with more items than this are streamed item by item; smaller ones go in one dumps.
_STREAM_MIN = 64


def write_bytes(path: str | Path, data: bytes, mode: int = 0o644, durable: bool = True) -> Path:
    return write_chunks(path, [data], mode, durable)


def create_json(path: Path, doc: Any, mode: int) -> Path:
    """write_json's bytes as a new file in a directory no reader looks into yet (files/atomic.create):
    one document of bounded size (a probe's envelope), encoded in one piece."""
    return files_atomic.create(path, (_encode(doc) + "\n").encode("utf-8"), mode)


def create_bytes(path: Path, data: bytes, mode: int) -> Path:
    return files_atomic.create(path, data, mode)


def write_chunks(path: str | Path, chunks: Iterable[bytes], mode: int = 0o644, durable: bool = True) -> Path:
    """`chunks` written one after another: a large file produced piece by piece (fleet.json)."""
    return replace(path, lambda f: f.writelines(chunks), mode, durable)


def write_output(path: str | Path, data: str | bytes, mode: int = 0o644) -> Path:
    """An output file a user named (files/atomic.py:write_output: devices, FIFOs and links too)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return files_atomic.write_output(path, lambda f: f.write(raw), mode)


def write_text(path: str | Path, text: str, mode: int = 0o644) -> Path:
    if not isinstance(text, str):
        raise TypeError(f"write_text needs str, got {type(text).__name__}")
    return write_bytes(path, text.encode("utf-8"), mode)


def iter_json(doc: Any) -> Iterator[str]:
    """Compact JSON text of `doc` in pieces; the concatenation equals
    json.dumps(doc, separators=(",", ":"), default=str).  Only big lists and dicts (a fleet's hosts,
    findings, envelopes' device lists) are split; everything else is one C-encoder call.  A value
    with a `json_pieces()` method (spool.SpooledRecords: records kept encoded on disk)
    supplies its own text."""
    pieces = getattr(doc, "json_pieces", None)
    if pieces is not None:
        yield from pieces()
    elif isinstance(doc, (list, tuple)) and len(doc) > _STREAM_MIN:
        yield "["
        for i, item in enumerate(doc):
            if i:
                yield ","
            yield from iter_json(item)
        yield "]"
    elif isinstance(doc, dict) and (len(doc) > _STREAM_MIN or any(
            (isinstance(v, (list, tuple, dict)) and len(v) > _STREAM_MIN) or hasattr(v, "json_pieces")
            for v in doc.values())):
        if not all(isinstance(k, str) for k in doc):
            yield _encode(doc)  # json's own rules for int/float/None keys (or its TypeError)
            return
        yield "{"
        for i, (k, v) in enumerate(doc.items()):
            yield ("," if i else "") + _encode(k) + ":"
            yield from iter_json(v)
        yield "}"
    else:
        yield _encode(doc)


def _fill_json(doc: Any, indent: int | None) -> Callable[[IO[bytes]], None]:
    def fill(f: IO[bytes]) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8", write_through=False, newline="\n")
        try:
            if indent is None:
                for piece in iter_json(doc):
                    text.write(piece)
            else:
                text.write(dumps(doc, indent=indent, default=str))
            text.write("\n")
            text.flush()
        finally:
            text.detach()  # the caller still fsyncs and closes the binary file
    return fill


def write_json(path: str | Path, doc: Any, indent: int | None = None, mode: int = 0o644,
               durable: bool = True) -> Path:
    """Compact JSON, streamed (fleet.json, findings.json, raw envelopes).  Pass `indent` only for
    small files people read by eye (run.json): indenting runs the slow pure-Python encoder."""
    return replace(path, _fill_json(doc, indent), mode, durable)
