"""Parse and validate what a probe printed: exactly one JSON envelope, or a reason why not."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from orchestrator.facts.normalize.budget import MAX_FIGURE, MAX_STRING, cut_long_strings
from orchestrator.files.jsontext import loads_strict
from orchestrator.transport.base import DEFAULT_MAX_OUTPUT

ENVELOPE_VERSION = 1
STATUSES = ("ok", "error", "unsupported")

# What one envelope may cost the controller, whatever the host claims.  The largest real envelope
# (the demo fleet's pcie and nvlink recordings) is 7 deep and holds ~4,200 values; these limits
# leave 4x and 45x of room.  Both are checked on a skeleton of the text before json builds a
# single object, so a 15 MiB reply of nested empty lists (5 M lists, ~940 MiB once parsed) is
# refused at the cost of scanning it.  docs/reliability.md has the measured figures.
MAX_DEPTH = 32
MAX_VALUES = 200_000
# A stored envelope (the run's raw file: Envelope.to_dict() of what was accepted) may hold more
# values than the host sent: the fields a host left out (8 at most, each a string key and a value)
# and the note of the strings the parse cut (a key and one length per string: at most one string
# per MAX_STRING characters of the output cap).  It is read back within the budget plus these, so
# a host accepted live is judged from its raw files as it was accepted.
STORED_MAX_VALUES = MAX_VALUES + 16 + DEFAULT_MAX_OUTPUT // MAX_STRING + 2
# Hosts finish together; at most this many envelopes are parsed at once, so the parse peaks of
# 32 forks do not add up (each is bounded by MAX_VALUES and the 16 MiB output cap).
MAX_CONCURRENT_PARSES = 2
_PARSE_SLOTS = threading.BoundedSemaphore(MAX_CONCURRENT_PARSES)


class EnvelopeError(ValueError):
    """The host's output is not a usable envelope; the message says why in one line."""


@dataclass
class Envelope:
    probe: str
    probe_version: str
    status: str
    data: dict[str, Any]
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    envelope_version: int = ENVELOPE_VERSION

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies `data` recursively, which is wasted work on a
        # JSON tree and a RecursionError on a deep one.
        return {"probe": self.probe, "probe_version": self.probe_version, "status": self.status, "data": self.data,
                "errors": list(self.errors), "warnings": list(self.warnings), "duration_s": self.duration_s,
                "envelope_version": self.envelope_version}


def _str_list(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EnvelopeError(f"envelope field {name!r} must be a list of strings")
    return value


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NOT_MARKS = bytes(b for b in range(256) if b not in b'"[]{}')
_DEPTH_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")
# \ud800-\udfff written as an escape: json.loads turns it into a lone surrogate, which no UTF-8
# writer (terminal, file, YAML) can encode.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


# a quote, then more characters than a string may hold before the next one
_PAST_MAX_STRING = re.compile(f'"[^"]{{{MAX_STRING + 1}}}')


def _may_hold_long_string(text: str) -> bool:
    """Whether a JSON string (a key or a value) of `text` may be longer than MAX_STRING characters
    (C-level, within the parse slots).  Once `_unescaped` made each escape that could hide a
    string's end the one character it stands for, every string is the run between two quotes, and
    its text is at least as long as its value; the runs between strings are looked at too, which
    only costs a walk that cuts nothing.  On the raw text, a string with an escaped quote every few
    thousand characters hid its length."""
    return len(text) > MAX_STRING and _PAST_MAX_STRING.search(_unescaped(text, "_")) is not None


def _unescaped(text: str, each: str = "") -> str:
    """`text` with the escapes that could hide a string's end replaced by `each`: every `\\\\`
    pair, then every `\\"` (a run of backslashes in a JSON string starts an escape, so removing
    pairs from its left leaves one backslash exactly where the run escapes the next character).
    Other escapes stay as text inside their strings.  Two C-level passes: a regex over every escape
    cost ten times more on a bundle document, whose envelopes are strings with every quote escaped."""
    return text.replace("\\\\", each).replace('\\"', each) if "\\" in text else text


def _skeleton(text: str, max_values: int = MAX_VALUES) -> str:
    """`text` without its JSON strings (C-level): once the escapes that could hide a string's end
    are gone (`_unescaped`), the quotes left are exactly the strings' ends, so the strings are
    every other piece of a split on '"'."""
    plain = _unescaped(text)
    if plain.count('"') // 2 > max_values:
        raise EnvelopeError(f"stdout holds more than {max_values} JSON strings, more than an envelope may; "
                            "refused unparsed")
    return "".join(plain.split('"')[::2])


def _brackets(text: str) -> bytes:
    """The brackets of `text` outside its JSON strings, for a text of at most MAX_VALUES characters
    (so of fewer strings than the budget): as `_skeleton`, but on the UTF-8 bytes with only quotes
    and brackets kept (no other character's bytes can look like one), a few times cheaper."""
    marks = _unescaped(text).encode("utf-8", "replace").translate(None, _NOT_MARKS)
    return b"".join(marks.split(b'"')[::2])


def _check_depth(brackets: bytes) -> None:
    """Refuse nesting past MAX_DEPTH: what is left of `brackets` after removing the innermost empty
    pairs MAX_DEPTH times is nesting deeper than the limit (unbalanced text is json's to refuse)."""
    for _ in range(MAX_DEPTH):
        shorter = _EMPTY_PAIR.sub(b"", brackets)
        if len(shorter) == len(brackets):
            return  # balanced within the limit, or unbalanced: json says where
        brackets = shorter
    if _EMPTY_PAIR.search(brackets):  # a pair left: nesting past the limit (else unbalanced)
        deepest = max(accumulate(_DEPTH_STEP[c] for c in brackets), default=0) + MAX_DEPTH
        raise EnvelopeError(f"stdout is JSON nested too deeply ({deepest} levels, the limit is {MAX_DEPTH}); "
                            "refused unparsed")


def check_budget(text: str, max_values: int = MAX_VALUES) -> None:
    """Refuse JSON text past `max_values` values or MAX_DEPTH nesting, before any object is built.

    Strings are blanked first (a bracket or comma inside one is text); then every value but the
    first in its container is preceded by a comma, so commas + non-empty containers + 1 is the
    count (an object's member counts once), and the nesting is what is left after removing the
    innermost empty pairs depth times.  Each step is a C-level scan whose cost is bounded by the
    budget itself (no step makes an object per match past MAX_VALUES matches), so refusing 15 MiB
    of `[],[],...` costs a few copies of the text.  Malformed text is json's to refuse."""
    if len(text) <= max_values:
        # every value takes at least a character, so only the nesting can be past the budget
        brackets = _brackets(text)
        if len(brackets) > MAX_DEPTH:
            _check_depth(brackets)
        return
    skeleton = _skeleton(text, max_values)
    containers = skeleton.count("[") + skeleton.count("{")
    if MAX_DEPTH < containers <= 2 * max_values:  # else too shallow to matter, or refused by the count below
        _check_depth(skeleton.encode("utf-8", "replace").translate(None, _NOT_BRACKETS))
    # a container holds commas + 1 values unless it is empty
    values = skeleton.count(",") + containers - skeleton.count("[]") - skeleton.count("{}") + 1
    if values > max_values:
        raise EnvelopeError(f"stdout holds {values} JSON values, more than the {max_values} an envelope may; "
                            "refused unparsed")


def clean_strings(value: Any) -> Any:
    """`value` with every lone surrogate (in keys and strings) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [clean_strings(v) for v in value]
    if isinstance(value, dict):
        return {clean_strings(k): clean_strings(v) for k, v in value.items()}
    return value


def loads_bounded(text: str, max_values: int = MAX_VALUES, whole: Collection[str] = ()) -> Any:
    """json.loads within the budget: strict JSON (no NaN/Infinity, finite floats), no lone surrogates.
    `max_values`: STORED_MAX_VALUES for an envelope this program stored; `whole`: keys of its
    `data` whose strings are not cut (budget.cut_long_strings).

    Raises EnvelopeError past the budget, ValueError/RecursionError as json.loads does."""
    with _PARSE_SLOTS:
        return _loads(text, max_values, whole)


def _loads(text: str, max_values: int = MAX_VALUES, whole: Collection[str] = ()) -> Any:
    check_budget(text, max_values)
    doc = loads_strict(text, MAX_FIGURE)
    if _SURROGATE_ESCAPE.search(text):
        doc = clean_strings(doc)
    return cut_long_strings(doc, whole) if _may_hold_long_string(text) else doc


_NOT_BLANK = re.compile(rb"[^ \t\r\n\x0b\x0c]")
_BLANKS = frozenset(b" \t\r\n\x0b\x0c")


def parse_envelope(stdout: bytes, expected_probe: str) -> Envelope:
    # The decode is inside the parse slots too: 32 hosts finishing together with 15 MiB answers
    # must not hold 32 decoded copies at once.  The blanks around the document are skipped by
    # index, not by strip(), which would copy the text once more.
    with _PARSE_SLOTS:
        first = _NOT_BLANK.search(stdout)
        if first is None:
            raise EnvelopeError("probe printed nothing on stdout")
        start = first.start()
        end = len(stdout)
        while end > start and stdout[end - 1] in _BLANKS and len(stdout) - end < 4096:
            end -= 1
        if end > start and stdout[end - 1] in _BLANKS:  # a hostile run of blanks: let C find its start
            end = start + len(stdout[start:end].rstrip())
        text = str(memoryview(stdout)[start:end], "utf-8", "replace")
        snippet = text[:60].encode("unicode_escape").decode("ascii")
        try:
            doc = _loads(text)
        except EnvelopeError:
            raise
        except json.JSONDecodeError as e:
            raise EnvelopeError(f"stdout is not one JSON document ({e.msg} at char {e.pos}); starts with {snippet!r}") from None
        except ValueError as e:  # a 5000-digit integer, NaN/Infinity, a float beyond double range
            raise EnvelopeError(f"stdout is not usable JSON ({str(e).split(';')[0][:100]}); starts with {snippet!r}") from None
        except RecursionError:  # "[[[[..." nested deeper than the parser's stack
            raise EnvelopeError(f"stdout is JSON nested too deeply to read; starts with {snippet!r}") from None
        del text
    return envelope_from_dict(doc, expected_probe)


def envelope_from_dict(doc: Any, expected_probe: str) -> Envelope:
    if not isinstance(doc, dict):
        raise EnvelopeError(f"envelope must be a JSON object, got {type(doc).__name__}")
    version = doc.get("envelope_version")
    if version != ENVELOPE_VERSION:
        raise EnvelopeError(f"unknown envelope_version {version!r} (this controller reads {ENVELOPE_VERSION})")
    if doc.get("probe") != expected_probe:
        raise EnvelopeError(f"envelope is for probe {doc.get('probe')!r}, expected {expected_probe!r}")
    status = doc.get("status")
    if status not in STATUSES:
        raise EnvelopeError(f"envelope status {status!r} is not one of {', '.join(STATUSES)}")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise EnvelopeError("envelope field 'data' must be an object")
    duration = doc.get("duration_s", 0.0)
    if not isinstance(duration, (int, float)) or isinstance(duration, bool) or duration < 0:
        raise EnvelopeError("envelope field 'duration_s' must be a non-negative number")
    probe_version = doc.get("probe_version")
    if not isinstance(probe_version, str):
        raise EnvelopeError("envelope field 'probe_version' must be a string")
    return Envelope(
        probe=expected_probe,
        probe_version=probe_version,
        status=status,
        data=data,
        errors=_str_list(doc.get("errors", []), "errors"),
        warnings=_str_list(doc.get("warnings", []), "warnings"),
        duration_s=float(duration),
    )
