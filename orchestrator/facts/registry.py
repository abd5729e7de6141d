"""One row per probe: which facts section it fills, how, from which text, how it is shown, where it is documented.

Every table that pairs a probe with a facts section (normalization, raw-mode and import outcomes,
drift, `--show` views, the CLI help) reads this module instead of keeping its own copy.

Code in other modules is named by a `"module:function"` string and resolved on first use: the
terminal views live in a higher layer (`present/`), which this layer must not import, and the
normalizer package's `__init__` reads this registry, so importing it from here would be a cycle.
`tests/facts/test_registry.py` resolves every name, so a typo fails the suite, not a run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Section:
    """What every facts section has, whether a probe fills it or it is merged from others."""

    section: str  # key in a host record's `facts`
    probe: str  # the probe whose outcome stands for the section: checks ask `view.measured(section)`
    text_kinds: tuple[str, ...]  # textparse kinds (detect.PARSED_KINDS) that can fill it on import
    view: str | None  # `--show` name, None: no per-host view (the hosts table shows it)
    renderer: str | None  # "module:function", section -> terminal text
    docs: str  # the page that documents the section's shape


@dataclass(frozen=True)
class ProbeRow(Section):
    normalizer: str = ""  # "module:function", probe data -> section


@dataclass(frozen=True)
class MergedRow(Section):
    merge: str = ""  # "module:function", facts so far -> section, or None when nothing to merge
    made_from: tuple[str, ...] = ()  # the probes whose sections the merge reads


_N = "orchestrator.facts.normalize."
_V = "orchestrator.present.terminal."

# In the order the probes' sections are normalized (= the key order of `facts` in fleet.json).
PROBES: tuple[ProbeRow, ...] = (
    ProbeRow("host", "host", (), None, None, "docs/facts-host.md", normalizer=_N + "host:normalize"),
    ProbeRow("pcie", "pcie", ("lspci_tree", "lspci_verbose"), "pcie", _V + "pcie:render_pcie",
             "docs/facts-pcie.md", normalizer=_N + "pcie:normalize"),
    ProbeRow("gpus", "nvml", ("smi_list", "smi_query", "smi_query_xml", "smi_query_csv", "smi_screen", "topo_matrix", "topo_p2p",
                              "nvlink_status", "nvlink_caps"),
             "gpus", _V + "gpus:view_gpus", "docs/facts-gpus.md", normalizer=_N + "gpus:normalize"),
    ProbeRow("nvlink", "nvlink", ("nvlink_status", "nvlink_caps", "topo_matrix"), "nvlink",
             _V + "nvlink:render_nvlink", "docs/facts-gpus.md", normalizer=_N + "nvlink:normalize"),
    ProbeRow("p2p", "p2p", ("p2p_bandwidth_latency", "nvbandwidth"), "p2p", _V + "bandwidth:render", "docs/facts-p2p.md",
             normalizer=_N + "p2p:normalize"),
    ProbeRow("nccl", "nccl", ("nccl_tests",), "nccl", _V + "nccl:render_nccl", "docs/facts-nccl.md",
             normalizer=_N + "nccl:normalize"),
    ProbeRow("kmsg", "kmsg", ("kernel_log",), "kmsg", _V + "health:render_kmsg", "docs/facts-kmsg.md",
             normalizer=_N + "kmsg:normalize"),
    ProbeRow("nic", "nic", ("ibstat",), "nic", _V + "health:render_nic", "docs/facts-nic.md",
             normalizer=_N + "nic:normalize"),
    ProbeRow("fabric", "fabric", ("perftest",), "fabric", _V + "fabric:render_fabric", "docs/facts-fabric.md",
             normalizer=_N + "fabric:normalize"),
)

# Sections derived from other sections after every probe is normalized, in order.
MERGED: tuple[MergedRow, ...] = (
    MergedRow("topology", "nvml", ("topo_matrix", "topo_cpu"), "topo", _V + "topo:render_topo",
              "docs/facts-gpus.md", merge=_N + "topology:merge_facts", made_from=("pcie", "nvml", "nvlink")),
)

SECTIONS: tuple[Section, ...] = (*PROBES, *MERGED)

# The order `--show` lists its views in the help (the order operators read a host in: bus, GPUs,
# the topo -m matrix, links, measured bandwidth).
VIEW_ORDER = ("pcie", "gpus", "topo", "nvlink", "p2p", "nccl", "kmsg", "nic", "fabric")


@cache
def resolve(name: str) -> Callable[..., Any]:
    """"package.module:function" -> the function (imported on first use)."""
    module, _, attr = name.partition(":")
    fn = getattr(importlib.import_module(module), attr)
    if not callable(fn):
        raise TypeError(f"{name} is not a function")
    return fn


def by_probe(probe: str) -> ProbeRow | None:
    return next((r for r in PROBES if r.probe == probe), None)


# section -> its row, the first that names it (as a scan of SECTIONS finds it): checks and coverage
# ask this ~74 times a host (0.6 us a scan of every row, 0.1 us this lookup).
_BY_SECTION: dict[str, Section] = {r.section: r for r in reversed(SECTIONS)}


def by_section(section: str) -> Section | None:
    return _BY_SECTION.get(section)


def probe_of(section: str) -> str | None:
    """The probe a section stands for (a section imported from text counts as that probe having run)."""
    row = by_section(section)
    return row.probe if row else None


def probes_of(section: str) -> tuple[str, ...]:
    """Every probe whose outcome a section depends on: its own probe, and for a merged section
    each probe it is made from (the `topo -m` matrix without NVLink facts is a different matrix)."""
    row = by_section(section)
    if row is None:
        return (section,)
    made_from = row.made_from if isinstance(row, MergedRow) else ()
    return tuple(dict.fromkeys((row.probe, *made_from)))


def probes_standing_for(sections: Iterable[str]) -> list[str]:
    """The probes whose sections these are: facts imported from text count as those probes having
    run (raw mode, `probe import`), so their checks judge them."""
    return [p for p in (probe_of(s) for s in sections) if p]


def views() -> dict[str, Section]:
    """`--show` name -> its section row, in VIEW_ORDER."""
    rows = {r.view: r for r in SECTIONS if r.view}
    return {v: rows[v] for v in VIEW_ORDER if v in rows} | {v: r for v, r in rows.items() if v not in VIEW_ORDER}


def view_names(importable_only: bool = False) -> list[str]:
    """The `--show` names; with importable_only, those whose section a text import can fill."""
    return [v for v, r in views().items() if r.text_kinds or not importable_only]
