"""Parse and validate what a probe printed: exactly one JSON envelope, or a reason why not."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

ENVELOPE_VERSION = 1
STATUSES = ("ok", "error", "unsupported")


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
        return asdict(self)


def _str_list(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EnvelopeError(f"envelope field {name!r} must be a list of strings")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _finite(text: str) -> float:
    # 1e400 parses as inf: fleet.json would then carry `Infinity`, which strict JSON readers reject
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def parse_envelope(stdout: bytes, expected_probe: str) -> Envelope:
    text = stdout.decode("utf-8", errors="replace").strip()
    if not text:
        raise EnvelopeError("probe printed nothing on stdout")
    snippet = text[:60].encode("unicode_escape").decode("ascii")
    try:
        doc = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as e:
        raise EnvelopeError(f"stdout is not one JSON document ({e.msg} at char {e.pos}); starts with {snippet!r}") from None
    except ValueError as e:  # a 5000-digit integer, NaN/Infinity, a float beyond double range
        raise EnvelopeError(f"stdout is not usable JSON ({str(e).split(';')[0][:100]}); starts with {snippet!r}") from None
    except RecursionError:  # "[[[[..." nested deeper than the parser's stack
        raise EnvelopeError(f"stdout is JSON nested too deeply to read; starts with {snippet!r}") from None
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
