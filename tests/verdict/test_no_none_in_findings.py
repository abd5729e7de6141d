"""`None` never reaches an operator through a finding or a class name (issue 16, item 5).

Facts carry `null` for what no probe could answer.  Each demo host's recorded facts are judged
again with a seeded fifth of their values unknown (null), over and over; no subject, message,
hint or topology class name may then read "None": an unknown value is `?` or a word for it.
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.verdict.checks import HOST_CHECKS
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.classes import class_name, descriptor
from tests.verdict.test_verdict_demo import RECORDINGS, recorded_facts

NONE = re.compile(r"\bNone\b")
# Identities the normalizers always fill (a device without its bus id is not in the section at all).
_ALWAYS = {"bdf", "port", "id", "link", "index"}
TRIALS = 25


def _unknowable(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths of the values that may be null: dict values, and the cells of level matrices."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _unknowable(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, (dict, list)) or "matrix" in path:
                yield from _unknowable(v, (*path, i))
    elif node is not None and path and path[-1] not in _ALWAYS:
        yield path


def _null(facts: dict[str, Any], path: tuple[Any, ...]) -> None:
    node: Any = facts
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = None


def _texts(view: HostView) -> Iterator[tuple[str, str]]:
    for check in HOST_CHECKS:
        try:
            found = list(check(view))
        except (TypeError, AttributeError):
            continue  # a check refusing an impossible shape is another test's concern; text is ours
        for f in found:
            for field in ("subject", "message", "hint"):
                yield f"{check.__name__} {f.id} {field}", getattr(f, field) or ""
    d = descriptor(view.facts)
    if d:
        yield "class name", class_name(d)


@pytest.mark.parametrize("host", sorted(p.name for p in RECORDINGS.iterdir() if p.is_dir()))
def test_unknown_values_never_read_none(host: str) -> None:
    facts = recorded_facts(host)
    paths = list(_unknowable(facts))
    rnd = random.Random(host)
    leaks = []
    for _ in range(TRIALS):
        mutated = copy.deepcopy(facts)
        for path in rnd.sample(paths, max(1, len(paths) // 5)):
            _null(mutated, path)
        view = HostView(host, mutated, {p: "ok" for p in ("host", "nvml", "nvlink", "pcie", "p2p")})
        leaks += [f"{where}: {text}" for where, text in _texts(view) if NONE.search(text)]
    assert leaks == [], "\n".join(sorted(set(leaks))[:20])


def test_gpu_model_unknown_to_the_class_name_is_named_unknown() -> None:
    facts = recorded_facts("ws-a6000-01")
    for g in facts["gpus"]["list"]:
        g["name"] = g["model"] = None
    d = descriptor(facts)
    assert d is not None and class_name(d).startswith("4x?-")  # an unknown model is "?"
