"""CapturedOutput: the output caps every transport that reads a command's streams shares
(transport/base.py; local.py and ssh.py read into it).

stdout is kept up to max_output bytes and then marked truncated (the caller stops reading: the
answer is unusable); stderr is kept up to max_stderr bytes, the rest dropped while the command runs on."""

from __future__ import annotations

import pytest

from orchestrator.transport.base import CapturedOutput

CAP = 8

# (pieces as they arrive, what is kept, whether the cap was passed); the edges of the cap as a class
_CASES = [
    ([b""], b"", False),  # an empty read (EOF) keeps nothing and passes nothing
    ([b"x" * CAP], b"x" * CAP, False),  # exactly the cap is whole
    ([b"x" * (CAP - 1), b"y"], b"x" * (CAP - 1) + b"y", False),  # reaching it piece by piece
    ([b"x" * (CAP + 1)], b"x" * CAP, True),  # one byte over, in one piece
    ([b"x" * CAP, b"y"], b"x" * CAP, True),  # one byte over, in the next piece
    ([b"abc", b"defghijk"], b"abcdefgh", True),  # a piece that straddles the cap is cut at it
    ([b"x" * (CAP * 100)], b"x" * CAP, True),  # far over
]


@pytest.mark.parametrize(("pieces", "kept", "passed"), _CASES)
def test_stdout_is_kept_up_to_its_cap_then_marked_truncated(pieces: list[bytes], kept: bytes, passed: bool) -> None:
    got = CapturedOutput(out_cap=CAP, err_cap=1 << 20)
    for piece in pieces:
        got.add_stdout(piece)
    assert (bytes(got.out), got.out_trunc) == (kept, passed)
    assert (got.err, got.err_trunc) == (bytearray(), False)  # stderr untouched


@pytest.mark.parametrize(("pieces", "kept", "passed"), _CASES)
def test_stderr_is_kept_up_to_its_cap_and_the_rest_dropped(pieces: list[bytes], kept: bytes, passed: bool) -> None:
    got = CapturedOutput(out_cap=1 << 20, err_cap=CAP)
    for piece in [*pieces, b"more after the cap"]:  # still drained after the cap: nothing more is kept
        got.add_stderr(piece)
    more = b"more after the cap"
    expect = kept if passed else (kept + more)[:CAP]
    assert bytes(got.err) == expect
    assert got.err_trunc is (passed or len(kept + more) > CAP)
    assert (got.out, got.out_trunc) == (bytearray(), False)  # stdout untouched


def test_the_result_carries_what_was_kept_and_both_flags() -> None:
    got = CapturedOutput(out_cap=CAP, err_cap=2)
    got.add_stdout(b"0123456789")
    got.add_stderr(b"warn")
    res = got.result(None, 1.5, timed_out=False, retried=2)
    assert (res.exit_code, res.stdout, res.stderr, res.duration_s) == (None, b"01234567", b"wa", 1.5)
    assert (res.timed_out, res.stdout_truncated, res.stderr_truncated, res.retried) == (False, True, True, 2)
