"""Every finding rule fleetprobe has, one module per id prefix (verdict/rule.py says what a rule is).

Adding a rule is one declaration in the module of its prefix (a new prefix: a new module, listed
in `_MODULES`), raised by its check in verdict/checks/, plus its test; the registry, coverage,
actions, the grouping of one fault's findings and the docs rows follow from the declaration.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

from orchestrator.verdict.causes import Cause
from orchestrator.verdict.rule import Rule
from orchestrator.verdict.rules import (
    baseline,
    fabric,
    gpu,
    host,
    identity,
    nccl,
    nic,
    nvlink,
    nvswitch,
    p2p,
    pcie,
    probe,
    scheduler,
    sensor,
    software,
    topology,
)

__all__ = ["ALL", "BY_ID", "causes", "declared_in"]

_MODULES: tuple[ModuleType, ...] = (host, identity, topology, probe, gpu, sensor, nvlink, nvswitch, pcie, p2p,
                                    nccl, nic, fabric, software, baseline, scheduler)


def _declared(module: ModuleType) -> Iterator[Rule]:
    return (v for v in vars(module).values() if isinstance(v, Rule))


ALL: tuple[Rule, ...] = tuple(r for m in _MODULES for r in _declared(m))
BY_ID: dict[str, Rule] = {r.id: r for r in ALL}


def declared_in(rule: Rule) -> str:
    """The module that declares `rule` (its id's prefix names it)."""
    return next(m.__name__ for m in _MODULES if any(r is rule for r in _declared(m)))


def causes() -> Iterator[Cause]:
    """Every rule's roots (verdict/causes.py), module by module."""
    for m in _MODULES:
        declared = getattr(m, "causes", None)
        if declared is not None:
            yield from declared()
