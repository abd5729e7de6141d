"""Per-host detail views by name, for `--show` (names, sections and renderers: facts/registry.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.facts import registry
from orchestrator.present.terminal.text import terminal_safe

Renderer = Callable[[Any], str]

# view name -> (facts key, renderer)
VIEWS: dict[str, tuple[str, Renderer]] = {
    name: (row.section, registry.resolve(row.renderer)) for name, row in registry.views().items() if row.renderer
}


def render(section: str, host_record: Mapping[str, Any]) -> str:
    entry = VIEWS.get(section)
    if entry is None:
        raise KeyError(f"unknown view {section!r}; known: {', '.join(VIEWS)}")
    key, fn = entry
    facts = (host_record.get("facts") or {}).get(key)
    if not facts:
        return ""
    try:
        return terminal_safe(fn(facts))
    except Exception as e:  # one host's odd facts cost its view, not the run's output
        return f"(the {section} view could not be drawn from this host's facts: {type(e).__name__})"
