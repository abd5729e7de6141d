"""Per-host detail views by name, for `--show`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.present.terminal import bandwidth, gpus, pcie, topo

Renderer = Callable[[dict[str, Any]], str]

# section name -> (facts key, renderer); filled as view modules exist.
VIEWS: dict[str, tuple[str, Renderer]] = {
    "gpus": ("gpus", gpus.view_gpus),
    "topo": ("topology", topo.render_topo),
    "pcie": ("pcie", pcie.render_pcie),
    "p2p": ("p2p", bandwidth.render),
}


def render(section: str, host_record: dict[str, Any]) -> str:
    entry = VIEWS.get(section)
    if entry is None:
        raise KeyError(f"unknown view {section!r}; known: {', '.join(sorted(VIEWS))}")
    key, fn = entry
    facts = host_record.get("facts", {}).get(key)
    return fn(facts) if facts else ""
