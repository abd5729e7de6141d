"""Shared pieces of the text parsers: bounded decoding, notes, one-line errors.

Text evidence comes from pastes, tickets and SSH stdout, so it may be empty, binary, huge or cut
off.  Everything here turns such input into one clear `TextParseError` (file and line), and every
parser reports what it skipped as `Note`s instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.files.bounded import UnreadableInput, read_regular

# A topo matrix of 72 GPUs plus 72 NICs is well under 100 KiB; anything past this is not a
# command output we know, and reading it whole would let one file exhaust the controller.
MAX_BYTES = 8 * 1024 * 1024

# nvidia-smi underlines table headers on a TTY.  Pastes keep the sequence with or without the ESC
# byte (`\x1b[4m` or a bare `[4m`), so both forms are removed.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b|\[[0-9]{1,3}(?:;[0-9]{1,3})*m|\[m")
# Control characters that never occur in these outputs (tab, newline, CR, form feed are fine).
_JUNK = re.compile(r"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")


class TextParseError(ValueError):
    """Input that cannot be read as the expected output.  str() is one line: `file:line: why`."""

    def __init__(self, message: str, source: str | None = None, line: int | None = None):
        self.message = message.replace("\n", " ")
        self.source = source or "<text>"
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.message}"


class HalfReadable(TextParseError):
    """A file of a recognised kind cut or garbled before it states any fact (a default screen with
    no readable GPU row, `-q` cut above its first GPU block, `-q -x` cut before its end): `paste`
    names the command whose whole output to paste instead.  `probe import` gives it an exit code
    of its own (exitcodes.HALF_READABLE)."""

    def __init__(self, message: str, paste: str, source: str | None = None, line: int | None = None):
        self.paste = paste
        super().__init__(f"{message}; paste {paste} instead", source, line)


@dataclass
class Note:
    """Something the parser saw but could not read; `line` is 1-based, None for the whole file."""

    line: int | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "text": self.text}

    def __str__(self) -> str:
        return f"line {self.line}: {self.text}" if self.line is not None else self.text


def strip_ansi(s: str) -> str:
    return _ANSI.sub("", s)


# Text a user has, as editors and shells save it: UTF-8 with a byte-order mark (Notepad), UTF-16 with
# one (PowerShell's `>`).  The mark says the encoding; without one, UTF-8 is read.
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def _unmarked(data: bytes, source: str) -> bytes | str:
    """`data` decoded by its byte-order mark when it has one, else unchanged."""
    for mark, encoding in _BOMS:
        if data.startswith(mark):
            try:
                return data[len(mark):].decode(encoding)
            except UnicodeDecodeError as e:
                raise TextParseError(f"starts with a {encoding} byte-order mark but is not {encoding} text "
                                     f"({e.reason} at byte {e.start})", source) from None
    return data


def decode_input(data: bytes | str, source: str = "<text>") -> str:
    """Bytes or str -> text with LF line ends.  Raises TextParseError for empty, huge or binary input."""
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:
            raise TextParseError(
                f"input is larger than {MAX_BYTES // (1024 * 1024)} MiB; fleetprobe reads at most that much "
                "of a text output (is this really nvidia-smi or lspci output?)",
                source,
            )
        data = _unmarked(data, source)
    if isinstance(data, bytes):
        nul = data.find(b"\x00")
        if nul >= 0:
            raise TextParseError("binary data (NUL byte), not command output", source, data.count(b"\n", 0, nul) + 1)
        text = data.decode("utf-8", errors="replace")
    else:
        if len(data) > MAX_BYTES:
            raise TextParseError(
                f"input is larger than {MAX_BYTES // (1024 * 1024)} MiB; fleetprobe reads at most that much", source
            )
        text = data.lstrip("\ufeff")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    # Binary junk decodes to replacement characters and stray control bytes.  A few in a paste
    # are tolerated (a stray byte in a poster's annotation); many mean this is not text.
    bad = len(_JUNK.findall(text)) + text.count("\ufffd")
    if bad > max(8, len(text) // 100):
        m = _JUNK.search(text) or re.search("\ufffd", text)
        line = text.count("\n", 0, m.start()) + 1 if m else None
        raise TextParseError(f"binary data ({bad} non-text bytes), not command output", source, line)
    return text


def read_path(path: Path | str) -> str:
    """A regular file of at most MAX_BYTES, decoded; errors name the file (a FIFO is refused
    unopened rather than waited on for ever)."""
    try:
        data = read_regular(path, MAX_BYTES, "text output file")
    except UnreadableInput as e:
        raise TextParseError(e.why, e.path) from None
    return decode_input(data, str(path))


# No line of these outputs comes near this (a 144-device topo header is ~1.2 KiB); longer lines
# are refused so that no per-line pattern ever runs over megabytes.
MAX_LINE = 16384


def text_lines(text: str, source: str | None = "<text>") -> list[str]:
    """Lines without ANSI remnants or trailing whitespace.  Index i is line number i + 1.
    A line over MAX_LINE characters raises TextParseError (source None: it is cut instead)."""
    out = []
    for i, line in enumerate(text.split("\n"), start=1):
        if len(line) > MAX_LINE:
            if source is not None:
                raise TextParseError(f"line is {len(line)} characters long (over {MAX_LINE}): not command output",
                                     source, i)
            line = line[:MAX_LINE]
        out.append(strip_ansi(line).rstrip())
    return out


def lines_within(text: str) -> tuple[list[str], list[int]]:
    """text_lines for a log, where one line past MAX_LINE costs only itself: it reads as blank
    (index i is still line i + 1), and its number is in the second list for the caller's note."""
    out, long = [], []
    for i, line in enumerate(text.split("\n"), start=1):
        if len(line) > MAX_LINE:
            long.append(i)
            line = ""
        out.append(strip_ansi(line).rstrip())
    return out, long


def long_line_notes(long: list[int]) -> list[Note]:
    """One note per line lines_within blanked (at most 20, then how many more)."""
    notes = [Note(n, f"line over {MAX_LINE} characters (no tool prints one), skipped") for n in long[:20]]
    if len(long) > 20:
        notes.append(Note(None, f"{len(long) - 20} more line(s) over {MAX_LINE} characters skipped"))
    return notes


# What posters add to a paste.  An annotation marker (`<<<`, `<--`, `<==`, `# ` after two spaces or a
# tab) starts a comment to the end of the line; a whole line of `# ...` is a comment; a line that
# is only dots (or `[...]`, `<snip>`) marks rows left out.  nvidia-smi's own legend writes "a
# bonded set of # NVLinks" (one space before `#`), which the two-space rule leaves alone.
_ANNOTATION = re.compile(r"(?:\s*(?:<{3,}|<-{2,}|<={2,}|\u2190)|(?:\s{2,}|\t)#\s).*$")
_COMMENT_LINE = re.compile(r"^\s*#(?:\s|$)")
_ELISION = re.compile(r"^\s*(?:\.{3,}|\u2026|\[\s*\.{3,}\s*\]|\(\s*\.{3,}\s*\)|\[?<?snip(?:ped)?>?\]?.*)\s*$", re.I)
# Values a poster blanked out: `GPU-xxxxxxxx-...`, `<redacted>`, `****`, `[REMOVED]`.
_REDACTED = re.compile(r"x{4,}|\*{3,}|<\s*(?:redacted|removed|hidden)\s*>|\[\s*(?:redacted|removed|hidden)\s*\]|"
                       r"\bredacted\b|\.{3}|\u2026", re.I)  # `...` / `…`: the value cut away, as in `GPU-5269...`


# A launcher's prefix on every line of its ranks: `mpirun --tag-output` writes `[1,0]<stdout>:`
# (job, rank, stream).  The rank is kept: several ranks' lines interleave in one output.
_LAUNCHER_TAG = re.compile(r"^\[\d{1,9},(\d{1,9})\]<(?:stdout|stderr)>:")  # ranks past 9 digits: no launcher's


def untag(line: str) -> tuple[int | None, str]:
    """(rank or None, the line without mpirun's `[job,rank]<stdout>:` prefix)."""
    m = _LAUNCHER_TAG.match(line)
    return (int(m.group(1)), line[m.end():]) if m else (None, line)


def untagged(text: str) -> str:
    """The text without launcher prefixes, for recognising what printed it."""
    return "\n".join(untag(x)[1] for x in text.split("\n"))


def is_redacted(value: str | None) -> bool:
    """A value the poster blanked out: unknown, never an identity."""
    return bool(value) and bool(_REDACTED.search(value or ""))


def clean_lines(text: str, source: str | None = "<text>") -> tuple[list[str], list[Note]]:
    """text_lines, with poster annotations removed and comment/elision lines blanked (index i is
    still line i + 1); each removal is a Note naming the line."""
    lines = text_lines(text, source)
    notes: list[Note] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if _COMMENT_LINE.match(line):
            notes.append(Note(i + 1, f"comment line skipped: {line.strip()[:80]!r}"))
            lines[i] = ""
        elif _ELISION.match(line):
            notes.append(Note(i + 1, f"elision skipped ({line.strip()[:20]!r}): lines were left out here"))
            lines[i] = ""
        else:
            m = _ANNOTATION.search(line)
            if m and m.start() > 0 and line[: m.start()].strip():
                notes.append(Note(i + 1, f"annotation removed: {line[m.start():].strip()[:80]!r}"))
                lines[i] = line[: m.start()].rstrip()
    return lines, notes


def norm_bus_id(raw: str | None) -> str | None:
    """'00000000:18:00.0', '0000:18:00.0', '18:00.0' -> '0000:18:00.0'; None when not a bus id.

    lspci omits the domain only when every device is in domain 0000 (its documented rule), so a
    short id means domain 0000.
    """
    if not raw:
        return None
    m = re.fullmatch(r"\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*", raw)
    if not m:
        return None
    dom = int(m.group(1) or "0", 16)
    if dom > 0xFFFF:
        return None
    return f"{dom:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


CPULIST = re.compile(r"\d{1,7}(?:-\d{1,7})?(?:,\d{1,7}(?:-\d{1,7})?)*")  # CPU numbers: at most 7 digits


def parse_cpulist(s: str) -> list[int] | None:
    """'0-3,8' -> [0, 1, 2, 3, 8]; None when not a cpulist."""
    if not CPULIST.fullmatch(s):
        return None
    out: list[int] = []
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a or b - a > 65536:
            return None
        out.extend(range(a, b + 1))
    return out
