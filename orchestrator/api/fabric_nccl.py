"""The NCCL part of a fabric qualification: communicators across hosts, and bisection of slow ones.

Each communicator is one nccl-probe process per member host (probes/nccl.py with `comm`): the first
member's process makes the ncclUniqueId and says it (engine/fabric_exec.run_gated), the others are
started with it.  Rings:

* rail-aligned, one per rail: one rank per host, the GPU nearest that rail's HCA, NCCL_IB_HCA set
  to it, P2P and SHM off (the traffic takes that rail and nothing else);
* every GPU of every host (hosts with the same GPU count), IB only, all rails;
* bisection: a rail ring that is slow (verdict/fabric_locate.ring_slow) and that no pairwise fault
  explains is split in halves, each tested as its own ring (side by side: they share no host), the
  slow half split again, and a slow pair tested each with a referee from a fast ring; at most
  ceil(log2 N) + 1 rounds, every slow rail bisected in the same rounds.

The rings of different rails use different GPUs and HCAs, so they run side by side too.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.api.fabric import SAY_TIMEOUT_S, HostPart, Notice
from orchestrator.engine.fabric_exec import Connections, StepResult, Stopped, envelope_data, run_gated
from orchestrator.engine.fabric_plan import FabricSpec, Member
from orchestrator.engine.runner import ProbeCall, RunOptions
from orchestrator.facts.model import FabricFacts, FabricNcclGroup
from orchestrator.verdict.fabric_locate import (
    Thresholds,
    all_faults,
    ring_explained,
    ring_slow,
    ring_verdicts,
)

NCCL = "nccl"


class _Ring:
    """One communicator: its name, kind, rail, and per member host the GPUs it drives."""

    def __init__(self, name: str, kind: str, rail: int | None, hca_of: Mapping[str, str | None],
                 gpus: Mapping[str, list[int]]) -> None:
        self.name = name
        self.kind = kind
        self.rail = rail
        self.members = list(gpus)
        self.gpus = dict(gpus)
        self.hca_of = dict(hca_of)


def _nccl_args(spec: FabricSpec, ring: _Ring, host: str, first_rank: int, nranks: int, uid: str | None) -> dict[str, Any]:
    n = spec.nccl
    return {"step_id": f"nccl-{ring.name}", "gpus": ring.gpus[host], "ops": list(n.ops), "min_bytes": n.min_bytes,
            "max_bytes": n.max_bytes, "step_factor": 4, "iters": n.iters, "warmup_iters": 1,
            "budget_s": max(5.0, n.timeout_s - 15), "hang_s": max(5.0, n.timeout_s / 3),
            "comm": {"nranks": nranks, "first_rank": first_rank, "id": uid, "ib_hca": ring.hca_of.get(host),
                     "ib_only": True, "group": ring.name}}


def _run_ring(ring: _Ring, parts: Mapping[str, HostPart], spec: FabricSpec, conns: Connections,
              stop: threading.Event, options: RunOptions) -> None:
    """One communicator to its end; each member's part records it."""
    firsts, rank = {}, 0
    for h in ring.members:
        firsts[h] = rank
        rank += len(ring.gpus[h])
    nranks = rank
    lead = ring.members[0]

    def make(host: str) -> Callable[[dict[str, Any]], ProbeCall]:
        return lambda said: ProbeCall(NCCL, _nccl_args(spec, ring, host, firsts[host], nranks,
                                                       str(said.get("nccl_id") or "")), spec.nccl.timeout_s)

    results = run_gated((parts[lead].host, ProbeCall(NCCL, _nccl_args(spec, ring, lead, 0, nranks, None),
                                                     spec.nccl.timeout_s)),
                        [(parts[h].host, make(h)) for h in ring.members[1:]], conns, stop, SAY_TIMEOUT_S,
                        options.become, refuse=said_id_problem)
    for h in ring.members:
        r: StepResult | None = results.get(h)
        parts[h].nccl.append({"group": ring.name, "kind": ring.kind, "rail": ring.rail, "hca": ring.hca_of.get(h),
                              "members": ring.members, "rank": firsts[h],
                              "outcome": r.result.outcome.value if r else "skipped",
                              "reason": r.result.reason if r else "not started",
                              "data": envelope_data(r) if r else None})


NCCL_ID_HEX = 256  # an ncclUniqueId is 128 bytes; rank 0's probe says it in hex (probes/nccl.py)
_HEX = frozenset("0123456789abcdef")


def said_id_problem(said: dict[str, Any]) -> str | None:
    """Why rank 0's said line is no ncclUniqueId (it goes into every other rank's arguments)."""
    uid = said.get("nccl_id")
    if isinstance(uid, str) and len(uid) == NCCL_ID_HEX and set(uid) <= _HEX:
        return None
    shown = f"{len(uid)} characters" if isinstance(uid, str) else type(uid).__name__
    return f"rank 0 said no ncclUniqueId ({shown}, not {NCCL_ID_HEX} hex digits): no other rank was started"


def _batches(rings: list[_Ring]) -> list[list[_Ring]]:
    """The rings in batches that share no GPU of any host (each batch runs side by side)."""
    out: list[tuple[set[tuple[str, int]], list[_Ring]]] = []
    for ring in rings:
        used = {(h, g) for h in ring.members for g in ring.gpus[h]}
        for taken, batch in out:
            if not taken & used:
                taken.update(used)
                batch.append(ring)
                break
        else:
            out.append((used, [ring]))
    return [b for _, b in out]


def _side_by_side(rings: list[_Ring], parts: Mapping[str, HostPart], spec: FabricSpec, conns: Connections,
                  stop: threading.Event, options: RunOptions) -> None:
    for batch in _batches(rings):
        _one_batch(batch, parts, spec, conns, stop, options)


def _one_batch(rings: list[_Ring], parts: Mapping[str, HostPart], spec: FabricSpec, conns: Connections,
               stop: threading.Event, options: RunOptions) -> None:
    """Rings that share no GPU at once, each in its own thread; Stopped if the run is stopped."""
    errors: list[BaseException] = []

    def one(ring: _Ring) -> None:
        try:
            _run_ring(ring, parts, spec, conns, stop, options)
        except BaseException as e:  # Stopped: re-raised below in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(r,), name=f"ring-{r.name}", daemon=True) for r in rings]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            if stop.is_set():
                raise Stopped()
            t.join(0.2)
    if errors:
        raise errors[0]


def _ordinal_near(part: HostPart, hca: str) -> int | None:
    d = part.discover or {}
    near = next((h.get("nearest_gpu") for h in d.get("hcas") or [] if h.get("hca") == hca), None)
    return next((g.get("ordinal") for g in d.get("gpus") or [] if g.get("bus_id") == near
                 and isinstance(g.get("ordinal"), int)), None)


def _rail_rings(live: list[HostPart], by_name: Mapping[str, Member]) -> list[_Ring]:
    rails = sorted({r.index for m in by_name.values() for r in m.rails})
    out = []
    for rail in rails:
        gpus: dict[str, list[int]] = {}
        hcas: dict[str, str | None] = {}
        for p in live:
            r = by_name[p.host.name].rail(rail)
            ordinal = _ordinal_near(p, r.hca) if r else None
            if r is not None and ordinal is not None:
                gpus[p.host.name] = [ordinal]
                hcas[p.host.name] = r.hca
        if len(gpus) >= 2:
            out.append(_Ring(f"rail{rail}", "rail", rail, hcas, gpus))
    return out


def _all_gpus_ring(live: list[HostPart]) -> _Ring | None:
    gpus: dict[str, list[int]] = {}
    for p in live:
        ords = sorted(g["ordinal"] for g in (p.discover or {}).get("gpus") or [] if isinstance(g.get("ordinal"), int))
        if ords:
            gpus[p.host.name] = ords
    if not gpus:
        return None
    counts = [len(v) for v in gpus.values()]
    common = max(set(counts), key=counts.count)  # hosts with another GPU count stay out of this ring
    gpus = {h: v for h, v in gpus.items() if len(v) == common}
    return _Ring("all", "all", None, dict.fromkeys(gpus), gpus) if len(gpus) >= 2 else None


def _sub_ring(parent: _Ring, name: str, hosts: list[str]) -> _Ring:
    return _Ring(name, "bisect", parent.rail, {h: parent.hca_of.get(h) for h in hosts},
                 {h: parent.gpus[h] for h in hosts})


def run_rings(live: list[HostPart], by_name: Mapping[str, Member], spec: FabricSpec, conns: Connections,
              stop: threading.Event, options: RunOptions, notice: Notice,
              facts_of: Callable[[list[HostPart]], dict[str, FabricFacts]]) -> None:
    parts = {p.host.name: p for p in live}
    rings = _rail_rings(live, by_name) if spec.nccl.rail_aligned else []
    if rings:
        notice.say(f"NCCL: {len(rings)} rail-aligned ring(s) over {len(live)} host(s), IB only")
        _side_by_side(rings, parts, spec, conns, stop, options)
    whole = _all_gpus_ring(live) if spec.nccl.all_gpus else None
    if whole is not None:
        notice.say(f"NCCL: one ring over every GPU of {len(whole.members)} host(s)")
        _side_by_side([whole], parts, spec, conns, stop, options)
    if spec.nccl.bisect and rings:
        _bisect(rings, parts, spec, conns, stop, options, notice, facts_of)


def _group_of(ring: _Ring, facts: Mapping[str, FabricFacts]) -> FabricNcclGroup | None:
    """The ring as its members' records agree on it (no one member steers the bisection)."""
    v = ring_verdicts({h: f for h in ring.members if (f := facts.get(h)) is not None}).get(ring.name)
    return v.group if v else None


def _bisect(rings: list[_Ring], parts: Mapping[str, HostPart], spec: FabricSpec, conns: Connections,
            stop: threading.Event, options: RunOptions, notice: Notice,
            facts_of: Callable[[list[HostPart]], dict[str, FabricFacts]]) -> None:
    live = list(parts.values())
    facts = facts_of(live)
    _, faults = all_faults(facts, Thresholds.of(spec.to_dict()))
    todo: dict[str, tuple[_Ring, list[list[str]], set[str]]] = {}  # rail ring -> (itself, open sets, fast hosts)
    for ring in rings:
        g = _group_of(ring, facts)
        if g is None or not ring_slow(g, facts, spec.nccl.floor_min_bytes) or ring_explained(g, faults):
            continue
        todo[ring.name] = (ring, [list(ring.members)], set())
    if not todo:
        return
    depth = math.ceil(math.log2(max(2, max(len(r.members) for r, _, _ in todo.values())))) + 1
    notice.say(f"NCCL: bisecting {len(todo)} slow ring(s) no pairwise finding explains: at most {depth} round(s)")
    for rnd in range(depth):
        batch: list[tuple[str, _Ring]] = []
        for name, (ring, open_sets, fast) in todo.items():
            for i, hosts in enumerate(open_sets):
                for j, part in enumerate(_split(hosts, ring, fast)):
                    batch.append((name, _sub_ring(ring, f"bisect:{name}:{rnd}:{i}.{j}", part)))
            open_sets.clear()
        if not batch:
            break
        _side_by_side([r for _, r in batch], parts, spec, conns, stop, options)
        facts = facts_of(live)
        for name, sub in batch:
            ring, open_sets, fast = todo[name]
            g = _group_of(sub, facts)
            if g is None or g["busbw_gbps"] is None:
                continue
            if ring_slow(g, facts, spec.nccl.floor_min_bytes):
                if len(sub.members) > 2 or not (set(sub.members) & fast):
                    open_sets.append([h for h in sub.members if h not in fast])
            else:
                fast.update(sub.members)


def _split(hosts: list[str], ring: _Ring, fast: set[str]) -> list[list[str]]:
    """The next rings of a slow set: halves; a pair (or a lone host) each with a referee from a
    fast ring of the same rail."""
    if len(hosts) >= 4:
        half = len(hosts) // 2
        return [hosts[:half], hosts[half:]]
    refs = [h for h in ring.members if h in fast and h not in hosts]
    if not refs:  # nobody known fast yet: the rest of the ring stands in
        refs = [h for h in ring.members if h not in hosts]
    if not refs:
        return []
    if len(hosts) == 3:
        return [hosts[:2], [hosts[2], refs[0]]]
    return [[h, refs[i % len(refs)]] for i, h in enumerate(hosts)]
