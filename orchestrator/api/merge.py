"""`probe merge`: runs of parts of one fleet (--shard, AWX slices, Slurm jobs, other controllers)
made into one run whose fleet-wide judgement covers all of them.

Each host keeps the judgement its own run gave it (its record in fleet.json: facts, outcome, and
its host findings with the playbook's overrides already applied): nothing of a host is judged
again.  Only the fleet-wide steps run again over every host of every run (duplicate GPU UUIDs and
serials, hostnames, system serials; topology classes and their outliers; verdict/judge.py
`assemble_judged`), their findings under each host's own plan's overrides.  The stored findings of
those steps are dropped first: they were judged over one part only.  The raw files travel with
the merged run, so it can be shown, diffed, reported and re-judged like any other.
"""

from __future__ import annotations

import json
import os
from array import array
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.api.errors import UsageError, usage_message
from orchestrator.api.plan import (
    anchored,
    build_plan,
    inventory_source,
    load_inventory,
    stored_plan_inputs,
    with_usable_expect,
)
from orchestrator.api.playbook import PlaybookError
from orchestrator.api.session import RunResult, holding
from orchestrator.api.stored import load_result
from orchestrator.facts.textsafe import one_line
from orchestrator.files.records import Body
from orchestrator.inventory.model import InventoryError
from orchestrator.store.carry import Carrier
from orchestrator.store.history import RunNotFound
from orchestrator.store.lock import LOCK_NAME
from orchestrator.store.rundir import RunDirectory
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict import handoff
from orchestrator.verdict.carried import CarriedPart, Decoders
from orchestrator.verdict.checks import is_fleet_finding
from orchestrator.verdict.expectations import ExpectationError
from orchestrator.verdict.findings import Finding
from orchestrator.verdict.held import Holder
from orchestrator.verdict.judge import HostVerdict, assemble_judged, fleet_step_findings
from orchestrator.verdict.overrides import Override, Silenced
from orchestrator.verdict.result import FleetResult


def _overrides(run: RunDirectory, warnings: list[str]) -> dict[str, dict[str, Override]]:
    """host -> the finding overrides of the plays that ran on it, from the run's own plan.  A plan
    that cannot be had here (a part made on another controller, whose playbook or reference files
    are not on this one) leaves its hosts' fleet-wide findings unsilenced, and says so."""
    meta = run.meta
    if meta.imported or not meta.plan:
        return {}  # text evidence: judged without a playbook
    hosts = run.host_inputs(with_data=False)
    if not hosts:
        return {}
    inputs, _moved = stored_plan_inputs(meta, run.dir.name)  # a part's files are often on its own controller
    # the plays' overrides do not depend on a host's own expectations: one host's stored
    # probe_expect this program cannot read must not cost the whole part its playbook
    hosts = [with_usable_expect(h)[0] for h in hosts]
    try:
        return build_plan(inputs, stored=hosts).overrides
    except (UsageError, PlaybookError, ExpectationError) as e:
        warnings.append(f"{run.dir.name}: its plan cannot be used here ({usage_message(e)}); its hosts keep their "
                        "own findings, and the fleet-wide findings over them are not silenced by its playbook")
        return {}


def _plan_of(runs: list[RunDirectory], warnings: list[str]) -> dict[str, Any]:
    """The plan the merged run is re-judged under: the parts' (without --shard) when they agree,
    its paths as the parts read them (the merged run is made elsewhere)."""
    plans = [{**(r.meta.plan or {}), **_paths_read(r), "shard": None} for r in runs]
    if any(p != plans[0] for p in plans[1:]):
        warnings.append("the runs were made under different plans; `probe rejudge` of the merged run uses the "
                        f"first one's ({runs[0].dir.name}); each host keeps the judgement of its own run here")
    return plans[0]


def _paths_read(run: RunDirectory) -> dict[str, Any]:
    """The files a part's plan names, as that part read them (plan.anchored)."""
    if not run.meta.plan:
        return {}
    inputs, _moved = stored_plan_inputs(run.meta, run.dir.name)
    return {"inventory": list(inputs.inventory), "playbook": inputs.playbook, "security_floor": inputs.security_floor,
            "baseline_file": inputs.baseline_file}


def _union(lists: list[list[Any]], key: Callable[[Any], Any] = lambda x: x) -> list[Any]:
    seen: dict[Any, Any] = {}
    for items in lists:
        for x in items:
            seen.setdefault(key(x), x)
    return list(seen.values())


def _inventories(metas: list[RunMeta]) -> list[str]:
    """The parts' inventory sources, each as its run read it (plan.anchored), one file once however
    the parts named it: shards of one controller name it from where each was run, parts of others
    by the path they gave, read from here."""
    def same_file(p: str) -> str:
        return os.path.realpath(p) if os.path.exists(p) else p

    return _union([[anchored(p, m.cwd, inventory_source) for p in m.inventory] for m in metas], key=same_file)


def _inventory_order(sources: list[str], demo: bool, warnings: list[str]) -> list[str]:
    """The host names of the runs' inventories in inventory order, when they can still be read
    (`demo`: every run was of the bundled demo fleet, whose runs name no inventory)."""
    if not sources and not demo:
        return []
    try:
        _inv, hosts, _ = load_inventory(tuple(sources), None)
    except (InventoryError, UsageError) as e:
        warnings.append(f"the runs' inventory cannot be read ({e}): hosts are kept in the order of the runs")
        return []
    return [h.name for h in hosts]


def _hosts_own(fleet: FleetResult, verdicts: list[HostVerdict], overrides: Mapping[str, Mapping[str, Override]]
               ) -> tuple[list[Finding], list[Silenced]]:
    """A stored run's findings and silenced findings without those of its fleet-wide steps, which
    were judged over that part only: the ones those steps raise again over its hosts, and any
    other of a fleet-only id (a run judged by an older fleetprobe)."""
    made, made_silenced = fleet_step_findings(verdicts, lambda host: overrides.get(host, {}))
    findings = _without(fleet.findings, made, lambda f: f)
    silenced = _without(fleet.silenced, made_silenced, lambda s: s.finding)
    return findings, silenced


T = TypeVar("T", Finding, Silenced)


def _without(stored: list[T], made: list[T], finding_of: Callable[[T], Finding]) -> list[T]:
    left = Counter(_key(finding_of(x)) for x in made)
    out = []
    for x in stored:
        key = _key(finding_of(x))
        if left[key] > 0:
            left[key] -= 1
        elif not is_fleet_finding(finding_of(x).to_dict()):
            out.append(x)
    return out


def _key(f: Finding) -> tuple[Any, ...]:
    """A finding as judged, apart from how it was grouped (its root is decided over the merged run)."""
    return (f.id, f.severity, f.kind, f.host, f.subject, f.message, f.hint, tuple(f.evidence),
            _value_key(f.expected), _value_key(f.actual))


def _value_key(v: Any) -> Any:
    """A finding's expected/actual value as its JSON text would tell it (1 is not 1.0 nor True)."""
    if v is None or type(v) in (str, int, float, bool):
        return type(v), v
    return json.dumps(v, sort_keys=True, default=str)


class _Bodies:
    """Where each carried record's text sits (file, offset, length), in the order read: the files
    once each, the numbers in arrays (a tuple of three was ~130 bytes a host)."""

    def __init__(self) -> None:
        self._files: dict[Path, int] = {}
        self._paths: list[Path] = []
        self._at = array("q")  # per record: file number, offset, length

    def append(self, body: Body) -> None:
        path, offset, length = body
        number = self._files.setdefault(path, len(self._paths))
        if number == len(self._paths):
            self._paths.append(path)
        self._at.extend((number, offset, length))

    def __getitem__(self, i: int) -> Body:
        number, offset, length = self._at[3 * i:3 * i + 3]
        return self._paths[number], offset, length


def merge_runs(sources: list[Path], root: Path,
               step: Callable[[str], None] | None = None) -> tuple[RunResult, list[str]]:
    """One run of `sources`, and the warnings; `step` hears where the merge stands (a line of safe text)."""
    if len({s.resolve() for s in sources}) != len(sources):
        raise UsageError("a run is named twice")
    # held from the first read of a part to the merged run's last write: a concurrent `--keep`
    # must not prune a part half-way
    with holding(root, *(s.parent for s in sources if (s.parent / LOCK_NAME).exists())), Carrier(root) as carrier:
        return _merge_locked(sources, root, carrier, step or (lambda _text: None))


def _merge_locked(sources: list[Path], root: Path, carrier: Carrier,
                  step: Callable[[str], None]) -> tuple[RunResult, list[str]]:
    runs = [RunDirectory.open(s) for s in sources]
    warnings: list[str] = []
    owner: dict[str, Path] = {}
    verdicts: list[HostVerdict] = []
    silenced: list[Silenced] = []
    rules: dict[str, Mapping[str, Override]] = {}
    bodies = _Bodies()
    sizes: list[int] = []
    # one part at a time, its records decoded once each (verdict/carried.py): a record's verdict is
    # what the fleet-wide steps read, its stored text is what the merged fleet.json gets.  The next
    # part is decoded in workers while this process judges the part before it.
    strings = handoff.Reader()  # the parts' verdicts are held together: their common words once
    holder = Holder()  # ... and each held compactly once its part is folded in (verdict/held.py)

    def start(r: RunDirectory) -> tuple[FleetResult, CarriedPart]:
        try:
            fleet = load_result(r.dir)
        except RunNotFound as e:
            raise UsageError(str(e)) from None  # it names the run and `probe rejudge`
        return fleet, decoders.start(r.dir, fleet.hosts)

    with Decoders(carrier, lambda run_dir: load_result(run_dir).hosts, strings) as decoders:
        upcoming = start(runs[0])
        for i, r in enumerate(runs):
            step(f"part {i + 1}/{len(runs)} ({one_line(r.dir.name)}), {len(verdicts):,} hosts read")
            fleet, decoding = upcoming
            carried = decoding.result()
            if i + 1 < len(runs):
                upcoming = start(runs[i + 1])
            warnings.extend(f"{r.dir.name}: {p}" for p in fleet.problems)
            if r.meta.state != "complete":
                warnings.append(f"{r.dir.name} is {r.meta.state if r.meta.started else 'without run.json'}: "
                                "merged with the hosts it has")
            run_rules = _overrides(r, warnings)
            rules.update(run_rules)
            part_verdicts = []
            for verdict, body in carried:
                name = verdict.name
                if name in owner:
                    # one run copied twice shares its name: then only the paths tell the parts apart
                    there, here = ((owner[name].name, r.dir.name) if owner[name].name != r.dir.name
                                   else (str(owner[name]), str(r.dir)))
                    raise UsageError(f"host {name!r} is in both {one_line(there)} and {one_line(here)}: the runs "
                                     "overlap (merge parts of one fleet, e.g. --shard K/N of one inventory)")
                owner[name] = r.dir
                part_verdicts.append(verdict)
                bodies.append(body)
            sizes.append(len(part_verdicts))
            own_findings, own_silenced = _hosts_own(fleet, part_verdicts, run_rules)
            own: dict[str, list[Finding]] = {}
            for f in own_findings:
                own.setdefault(f.host, []).append(f)
            silenced.extend(own_silenced)
            verdicts.extend(holder.verdict(replace(v, findings=own.get(v.name, []))) for v in part_verdicts)
            del carried, part_verdicts, own_findings, own  # this part's own state: only its held verdicts stay
    del fleet, upcoming
    metas = [r.meta for r in runs]
    inv_sources = _inventories(metas)
    # The fleet-wide messages name hosts in fleet order: in the inventory's order, a merge of its
    # shards says word for word what one run over the whole inventory says.
    order = _inventory_order(inv_sources, all(m.inventory == [] for m in metas), warnings)
    pos = {name: i for i, name in enumerate(order)}
    ranked = sorted(range(len(verdicts)), key=lambda i: (pos.get(verdicts[i].name, len(pos)), i))
    verdicts = [verdicts[i] for i in ranked]
    records = carrier.records([(v.name, bodies[i]) for v, i in zip(verdicts, ranked)])
    del bodies, owner
    meta = RunMeta(
        inventory=inv_sources, limit=None,
        playbook=metas[0].playbook and anchored(metas[0].playbook, metas[0].cwd),
        probes=sorted(_union([m.probes or [] for m in metas])), hosts_order=[v.name for v in verdicts],
        plan=_plan_of(runs, warnings), options=metas[0].options,
        merged_from=[{"id": r.dir.name, "hosts": n, "shard": (r.meta.plan or {}).get("shard")}
                     for r, n in zip(runs, sizes)],
        imported=all(m.imported for m in metas))
    merged = RunDirectory.create(root, meta)
    step(f"the parts' raw files, {len(verdicts):,} hosts")
    for r in runs:
        if (r.dir / "raw").is_dir():
            merged.copy_raw_from(r)
    merged.stop("complete")
    step(f"the fleet-wide steps over {len(verdicts):,} hosts")
    fleet = assemble_judged(merged.meta, records, verdicts, silenced, lambda host: rules.get(host, {}))
    verdicts.clear()  # judged: the merged run is written from its result, without them
    silenced.clear()
    step("writing the merged run")
    merged.finish(fleet.to_document())
    return RunResult(merged, fleet), warnings
