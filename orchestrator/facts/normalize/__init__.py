"""Probe data -> normalized facts sections.  Pure functions; the registry maps probes to sections."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.facts import registry
from orchestrator.facts.normalize.budget import bound, bound_sections

Normalizer = Callable[[dict[str, Any]], Mapping[str, Any]]

# probe name -> (facts section, normalizer), from the registry; a module global so that bench/stages.py
# can wrap each normalizer with a timer.
NORMALIZERS: dict[str, tuple[str, Normalizer]] = {
    row.probe: (row.section, registry.resolve(row.normalizer)) for row in registry.PROBES
}

# Sections computed from several probes' facts, in order: facts -> new section (or None).
MERGERS: list[tuple[str, Callable[[dict[str, Any]], Mapping[str, Any] | None]]] = [
    (row.section, registry.resolve(row.merge)) for row in registry.MERGED
]


# Raw mode (no Python on the host): the outputs of nvidia-smi/lspci, parsed here on the controller.
RAW_PROBE = "raw"
RAW_OUTPUTS = "outputs"  # its data's key of the command outputs
# probe -> keys of its data whose strings are read back whole from the run's raw files: raw mode's
# outputs are text the controller read itself, within the output cap, and its parsers read whole
WHOLE_STRINGS: dict[str, tuple[str, ...]] = {RAW_PROBE: (RAW_OUTPUTS,)}


def _raw_facts(data: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    from orchestrator.facts.textparse import facts_from_raw_outputs

    outputs = {k: (v.encode() if isinstance(v, str) else None) for k, v in (data.get(RAW_OUTPUTS) or {}).items()}
    try:
        parsed = facts_from_raw_outputs(outputs)
    except ValueError as e:
        errors.append(f"raw: {e}")
        return {}
    errors.extend(f"raw: {e}" for e in parsed.get("errors", []))
    facts, cut = bound_sections(dict(parsed.get("facts") or {}), "raw")
    errors.extend(cut)
    return facts


def normalize_host(envelopes: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """facts from the `data` of every ok probe; errors name the probe whose data did not normalize."""
    facts: dict[str, Any] = {}
    errors: list[str] = []
    for probe, data in envelopes.items():
        if probe == RAW_PROBE:
            facts.update(_raw_facts(data, errors))
            continue
        entry = NORMALIZERS.get(probe)
        if entry is None:
            continue
        section, fn = entry
        data, cut = bound(probe, data)
        errors.extend(cut)
        try:
            facts[section] = fn(data)
        except Exception as e:
            # A host can send any shape; a broken section must not take the others with it.
            errors.append(f"{probe}: data could not be normalized ({type(e).__name__}: {e})")
    for section, merge in MERGERS:
        try:
            merged = merge(facts)
        except Exception as e:  # as above: the derived section is lost, not the host
            errors.append(f"{section}: could not be derived ({type(e).__name__}: {e})")
            continue
        if merged is not None:
            facts[section] = merged
    return facts, errors
