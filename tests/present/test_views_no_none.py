"""Every `--show` view of every demo host, with a seeded fifth of its facts unknown (null), never
prints "None" (issue 16, item 5): an unknown value is `?` or a word for it."""

from __future__ import annotations

import copy
import random
import re

import pytest

from orchestrator.facts import registry
from orchestrator.present.terminal import sections
from orchestrator.verdict.result import JudgedHost
from tests.verdict.test_no_none_in_findings import _null, _unknowable
from tests.verdict.test_verdict_demo import RECORDINGS, recorded_facts

NONE = re.compile(r"\bNone\b")


@pytest.mark.parametrize("host", sorted(p.name for p in RECORDINGS.iterdir() if p.is_dir()))
def test_views_of_unknown_values_never_read_none(host: str) -> None:
    facts = recorded_facts(host)
    paths = list(_unknowable(facts))
    rnd = random.Random(host)
    leaks, crashes = [], []
    for _ in range(15):
        mutated = copy.deepcopy(facts)
        for path in rnd.sample(paths, max(1, len(paths) // 5)):
            _null(mutated, path)
        record = JudgedHost.from_record({"name": host, "facts": mutated, "probes": {}})
        for view in registry.view_names():
            try:
                text = sections.render(view, record)
            except (TypeError, AttributeError, KeyError, ValueError) as e:
                crashes.append(f"{view}: {type(e).__name__}: {e}")
                continue
            leaks += [f"{view}: {ln}" for ln in text.splitlines() if NONE.search(ln)]
    assert leaks == [], "\n".join(sorted(set(leaks))[:20])
    assert crashes == [], "\n".join(sorted(set(crashes))[:20])  # an unknown value is shown, not fatal
