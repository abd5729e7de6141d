"""The differential check of bench/equivalence.py as a test: seeded mutations and targeted faults of
the demo recordings and the simulated PCIe corpus, through every normalizer, the topology merge
and every host check, against stored digests (tests/facts/golden/differential.txt: one line
`case sha256[:16]` per case; an exception's type and message count as output, so code must also
fail the same way on bad input).

Regenerate after a deliberate change, then review which cases moved:

    FLEETPROBE_REGEN_GOLDEN=1 python -m pytest -q tests/facts/test_normalize_differential.py
    git diff tests/facts/golden/differential.txt

To see what differs inside a case, compare against a worktree of the old commit:
`python bench/equivalence.py /tmp/base` names every differing case and which of its outputs differ.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tests.support.normalize_corpus import (
    differential_cases,
    differential_hosts,
    recorded_data,
    session_corpus,
)
from tests.support.skips import not_here

GOLDEN = Path(__file__).resolve().parent / "golden" / "differential.txt"
REGEN = os.environ.get("FLEETPROBE_REGEN_GOLDEN") == "1"


def digest(outputs: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(outputs, sort_keys=True).encode()).hexdigest()[:16]


def test_mutated_and_faulty_inputs_give_the_stored_outputs() -> None:
    hosts = differential_hosts(recorded_data(), session_corpus())
    actual = [f"{case} {digest(out)}" for case, out in differential_cases(hosts)]
    assert len(actual) == 9 * (46 + 2 * 63)  # 46 demo recordings, 63 PCIe corpus envelopes (21 machines x 3 sizes) x 2
    if REGEN:
        GOLDEN.write_text("\n".join(actual) + "\n")
        not_here(f"FLEETPROBE_REGEN_GOLDEN=1: regenerated {GOLDEN}; review `git diff {GOLDEN}`")
    expected = GOLDEN.read_text().splitlines()
    changed = [a.split()[0] for a, e in zip(actual, expected) if a != e]
    assert len(actual) == len(expected), "the case list changed: regenerate and review"
    assert changed == [], (f"{len(changed)} cases changed, first {changed[:10]}; run bench/equivalence.py "
                           "against the previous commit to see the outputs")
