"""Per-host detail views by name, for `--show` (names, sections and renderers: facts/registry.py).

A renderer takes its facts section, and as keywords the host's name, all its facts (the GPU
table fills its NVLink column from the nvlink section) and the terminal width (None: no limit;
the GPU table fits itself to it, matrices and trees cannot wrap and ignore it).  A renderer that shows
per-device health takes `devices` too: the verdict's (verdict/device_health.py), which it shows and
never decides.  A host without the section still gets a line saying why: the probe was not run, or
what its outcome was."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.facts import registry
from orchestrator.present.terminal.text import clean, terminal_safe
from orchestrator.verdict.device_health import HostDevices, without_verdict
from orchestrator.verdict.result import FleetResult, JudgedHost

Renderer = Callable[..., str]

# view name -> (facts key, renderer)
VIEWS: dict[str, tuple[str, Renderer]] = {
    name: (row.section, registry.resolve(row.renderer)) for name, row in registry.views().items() if row.renderer
}


def absent(section: str, host: JudgedHost) -> str:
    """Why a host has no facts for a view: "p2p not run on this host", or the probe's outcome."""
    row = registry.views().get(section)
    probe = row.probe if row else section
    run = host.probes.get(probe)
    if run is None or run.outcome == "skipped":
        return f"{probe} not run on this host" + (f" ({clean(run.reason, 300)})" if run and run.reason else "")
    why = f": {clean(run.reason, 300)}" if run.reason else ""
    if run.outcome == "ok":
        return f"{probe} ran but reported no {section} data{why}"
    return f"{probe} {run.outcome}{why}"


# The views whose renderer shows per-device health: they take the verdict's `devices`.
_READS_DEVICES = frozenset(name for name, (_, fn) in VIEWS.items() if "devices" in inspect.signature(fn).parameters)


def render(section: str, host: JudgedHost, width: int | None = None, devices: HostDevices | None = None) -> str:
    """`devices`: the host's per-device verdict (FleetResult.devices); without it every device
    shows "not judged", never "ok"."""
    entry = VIEWS.get(section)
    if entry is None:
        raise KeyError(f"unknown view {section!r}; known: {', '.join(VIEWS)}")
    key, fn = entry
    facts: Mapping[str, Any] = host.facts  # the view's section, by the name the registry gives it
    if not facts.get(key):
        return absent(section, host)
    kw: dict[str, Any] = {}
    if section in _READS_DEVICES:
        kw["devices"] = devices if devices is not None else without_verdict(host.probes)
    try:
        return terminal_safe(fn(facts[key], host=host.name, facts=facts, width=width, **kw))
    except Exception as e:  # one host's odd facts cost its view, not the run's output
        return f"(the {section} view could not be drawn from this host's facts: {type(e).__name__})"


def render_views(fleet: FleetResult, names: list[str], width: int | None = None) -> list[str]:
    """`--show a,b`: each view of each host, under a `== host: view` line."""
    if not names:
        return []
    return [f"== {clean(h.name)}: {name}\n{render(name, h, width, fleet.devices(h))}"
            for name in names for h in fleet.hosts]
