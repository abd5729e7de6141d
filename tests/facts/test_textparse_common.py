"""Shared helpers for the textparse tests: where the text fixtures live, pairs as index tuples."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "text"


def gpu_pairs(m, level: str) -> set[tuple[int, int]]:
    return {(int(a[3:]), int(b[3:])) for a, b in m.pairs(level)}


# ---- tests of the shared pieces (decoding, bus ids, cpulists, ANSI) --------------------------

import pytest  # noqa: E402

from orchestrator.facts.textparse.common import (  # noqa: E402
    MAX_BYTES,
    TextParseError,
    decode_input,
    norm_bus_id,
    parse_cpulist,
    strip_ansi,
)


def test_norm_bus_id_forms():
    assert norm_bus_id("00000000:18:00.0") == "0000:18:00.0"
    assert norm_bus_id("0000:C3:00.0") == "0000:c3:00.0"
    assert norm_bus_id("01:00.0") == "0000:01:00.0"  # lspci drops the domain only when all are 0000
    assert norm_bus_id("00000001:01:00.0") == "0001:01:00.0"
    assert norm_bus_id("GPU0") is None and norm_bus_id("1:2") is None and norm_bus_id(None) is None


def test_cpulist():
    assert parse_cpulist("0-3,8") == [0, 1, 2, 3, 8]
    assert parse_cpulist("N/A") is None and parse_cpulist("3-1") is None


def test_strip_ansi_with_and_without_escape_byte():
    assert strip_ansi("\x1b[4mGPU0\tGPU1\x1b[0m") == "GPU0\tGPU1"
    assert strip_ansi("[4mGPU0\tGPU1[0m") == "GPU0\tGPU1"
    assert strip_ansi("NVIDIA GH100 [H100 SXM5 80GB]") == "NVIDIA GH100 [H100 SXM5 80GB]"


def test_decode_rejects_empty_binary_and_huge():
    with pytest.raises(TextParseError, match=r"^f\.txt:1: empty input"):
        decode_input(b"  \n\n", "f.txt")
    with pytest.raises(TextParseError, match=r"^f\.bin:3: binary data \(NUL byte\)"):
        decode_input(b"GPU0\nGPU1\n\x00\x01\x02", "f.bin")
    with pytest.raises(TextParseError, match="larger than 8 MiB"):
        decode_input(b"x" * (MAX_BYTES + 1), "big.txt")
    assert decode_input(b"GPU0\r\nGPU1\r\n", "crlf") == "GPU0\nGPU1\n"
