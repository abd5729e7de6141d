"""files/jsontext.py: text_of writes exactly what json's encoder writes, setting for setting, and
StrictEncoder never writes NaN or Infinity."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from orchestrator.files.jsontext import StrictEncoder, text_of

VALUES: list[Any] = [
    "plain", "ünïcode ✓ \u2028 \x00", 0, -0.0, 1.5e300, 2**70, True, None, [], {},
    {"b": [1, 2.5, {"c": None}], "a": "x", "é": [True, False]},
    [{"bus": "0000:18:00.0", "link": {"gen": 5, "width": 16}}] * 3,
]


@pytest.mark.parametrize("settings", [
    {"separators": (",", ":"), "check_circular": False},
    {"separators": (", ", ": "), "check_circular": False, "sort_keys": True},
    {"check_circular": False, "ensure_ascii": False},
    {"check_circular": False, "default": str},
    {"check_circular": True},  # json's own path
    {"check_circular": False, "indent": 2},  # json's own path
])
def test_text_of_writes_what_json_writes(settings: dict[str, Any]) -> None:
    encoder = json.JSONEncoder(**settings)
    text = text_of(encoder)
    for value in [*VALUES, {"when": object}] if "default" in settings else VALUES:
        assert text(value) == encoder.encode(value)
    # what json refuses, it refuses the same way
    if "default" not in settings:
        with pytest.raises(TypeError):
            text({"x": object()})


def test_strict_encoder_writes_null_for_what_is_not_a_finite_number() -> None:
    enc = StrictEncoder(separators=(",", ":"), check_circular=False)
    assert enc.encode({"a": math.nan, "b": [math.inf, -math.inf, 1.0]}) == '{"a":null,"b":[null,null,1.0]}'
    assert enc.encode(VALUES) == json.dumps(VALUES, separators=(",", ":"))
    with pytest.raises(TypeError):
        enc.encode(object())
