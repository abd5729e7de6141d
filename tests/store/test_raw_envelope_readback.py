"""An envelope the controller accepted from a host is judged from the run's raw files exactly as
it was accepted: the stored file (Envelope.to_dict(), which adds the fields a host left out and
the note of the strings the parse cut) reads back within the budget, to the same data.  Were it
refused there, a host accepted live would be judged with no facts, and an import judging in its
reading workers (from the parsed data) would judge it otherwise than one judging from the files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.envelope import MAX_VALUES, EnvelopeError, check_budget, parse_envelope
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import HostResult, ProbeResult
from orchestrator.facts.normalize.budget import MAX_STRING
from orchestrator.inventory.model import Host
from orchestrator.store.rundir import read_envelope_data, write_probe_files


def _near_the_budget(long_strings: int) -> str:
    """An envelope's text without errors/warnings/duration_s, `long_strings` strings past
    MAX_STRING, and as many values as the budget allows (found by the budget check itself)."""
    def text(n: int) -> str:
        return json.dumps({"probe": "host", "probe_version": "1", "status": "ok", "envelope_version": 1,
                           "data": {"long": ["x" * (MAX_STRING + 10)] * long_strings, "n": [0] * n}})

    low, high = 0, MAX_VALUES  # within the budget at low, past it at high
    while high - low > 1:
        mid = (low + high) // 2
        try:
            check_budget(text(mid))
            low = mid
        except EnvelopeError:
            high = mid
    return text(low)


@pytest.mark.parametrize("long_strings", [0, 40])
def test_an_envelope_accepted_at_the_budget_reads_back_from_the_raw_files_as_accepted(
        tmp_path: Path, long_strings: int) -> None:
    text = _near_the_budget(long_strings)
    env = parse_envelope(text.encode(), "host")
    res = HostResult(Host("h1"), {"host": ProbeResult("host", Outcome.OK, envelope=env)})
    write_probe_files(tmp_path, res, staged=True)
    data: dict[str, Any] = read_envelope_data(tmp_path, ["host"])
    assert data == {"host": env.data}
    assert len(env.data["n"]) > MAX_VALUES - 100
