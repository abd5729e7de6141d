"""The budget check's two paths (a text of at most MAX_VALUES characters, and a longer one) say the
same of the same JSON: padding a text with blanks past MAX_VALUES characters adds no value and no
nesting, so the verdict, and the message of a refusal, must not change."""

from __future__ import annotations

import json

import pytest

from orchestrator.engine.envelope import MAX_DEPTH, MAX_VALUES, EnvelopeError, check_budget


def _verdict(text: str) -> str:
    try:
        check_budget(text)
    except EnvelopeError as e:
        return str(e)
    return "ok"


def _padded(text: str) -> str:
    return text + " " * (MAX_VALUES + 1 - len(text))


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


CASES = {
    "at the limit": _nested(MAX_DEPTH),
    "one past the limit": _nested(MAX_DEPTH + 1),
    "far past the limit": _nested(500),
    "objects past the limit": '{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1),
    # brackets inside strings are text: a shallow document that only looks deep
    "brackets in a string": json.dumps({"s": "[" * 200 + "{" * 200}),
    "escaped quotes before brackets": json.dumps({"s": '\\"[[[[' * 50, "t": [']]]]\\"' * 50]}),
    "a string of backslashes then brackets": json.dumps(["\\" * 7, "[" * 100, "\\\"" + "{" * 100]),
    "non-ASCII around brackets": json.dumps({"é[": ["ü" * 10 + "[[[", {"日本": "]]"}]}),
    # a string that ends in a backslash escape right before the real nesting
    "deep after escapes": '["\\\\\\"", ' + _nested(MAX_DEPTH + 4) + "]",
    "unbalanced": "[" * 40 + "1",
    "demo-like": json.dumps({"devices": [{"bdf": f"0000:{i:02x}:00.0", "path": ["a", "b"], "c": {"d": [1, 2]}}
                                         for i in range(200)]}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_short_and_long_texts_get_the_same_verdict(name: str) -> None:
    text = CASES[name]
    assert len(text) <= MAX_VALUES
    assert _verdict(text) == _verdict(_padded(text))


def test_the_verdicts_are_what_the_budget_says() -> None:
    assert _verdict(CASES["at the limit"]) == "ok"
    assert _verdict(CASES["brackets in a string"]) == "ok"
    assert _verdict(CASES["escaped quotes before brackets"]) == "ok"
    assert _verdict(CASES["a string of backslashes then brackets"]) == "ok"
    assert _verdict(CASES["non-ASCII around brackets"]) == "ok"
    assert _verdict(CASES["unbalanced"]) == "ok"  # json's to refuse, with its position
    assert f"({MAX_DEPTH + 1} levels, the limit is {MAX_DEPTH})" in _verdict(CASES["one past the limit"])
    assert f"(500 levels, the limit is {MAX_DEPTH})" in _verdict(CASES["far past the limit"])
    assert "nested too deeply" in _verdict(CASES["objects past the limit"])
    assert f"({MAX_DEPTH + 5} levels" in _verdict(CASES["deep after escapes"])


def test_the_brackets_outside_strings_are_found_as_a_json_string_scanner_finds_them() -> None:
    """Strings full of quotes, backslashes and brackets, as json.dumps escapes them: both paths find
    the brackets left once a regex that matches whole JSON strings, escapes and all, blanks them."""
    import random
    import re

    from orchestrator.engine.envelope import _brackets, _skeleton

    string = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
    rng = random.Random(33)
    alphabet = ['"', "\\", "[", "]", "{", "}", ",", "a", "é", "\n", "\\\\", '\\"', "\ufffd"]

    def value(depth: int) -> object:
        pick = rng.random()
        if depth > 4 or pick < 0.4:
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        if pick < 0.7:
            return [value(depth + 1) for _ in range(rng.randrange(0, 4))]
        return {"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 6))): value(depth + 1)
                for _ in range(rng.randrange(0, 4))}

    for _ in range(500):
        text = json.dumps(value(0), ensure_ascii=rng.random() < 0.5)
        want = bytes(c for c in string.sub("", text).encode() if c in b"[]{}")
        assert _brackets(text) == want, text
        assert bytes(c for c in _skeleton(text).encode() if c in b"[]{}") == want, text
