"""The fabric qualification of a play: discover, plan, pair rail by rail, re-pair suspects, NCCL rings.

`qualify` runs after a play's own probes, over the play's hosts that answered, and returns one
`fabric` probe result per host: the host's raw part of every coordinated step (its discovery, the
plan, each wave's perftest outputs, each NCCL communicator it was a rank of), stored like any
probe's envelope so `probe rejudge` reads it again.  The steps:

1. discovery (probes/fabric.py role discover) on every host at once; busy hosts (GPU compute
   processes, the busy guard) and hosts without an active port are left out, with the reason;
2. the plan (engine/fabric_plan.py): rails, a round-robin tournament, its time: stated (`notice`)
   before anything is sent, refused when it needs more than the play's budget;
3. the first wave: every host runs its steps of every round in one process (probes/fabric.py role
   pairs), the pairs meeting by themselves round after round;
4. extra waves while the localisation (verdict/fabric_locate.py) leaves suspects and extra rounds
   remain: suspects meet hosts cleared on that rail;
5. NCCL: one rail-aligned communicator per rail (one rank per host, NCCL_IB_HCA, IB only), one over
   every GPU of every host; a slow ring that no pairwise fault explains is bisected to a host.

Ctrl-C: the connections close (every process on every host ends, see engine/fabric_exec.py) and
`FabricInterrupted` carries what finished.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.engine import payload
from orchestrator.engine.envelope import Envelope
from orchestrator.engine.fabric_exec import (
    Connections,
    Stopped,
    envelope_data,
    run_wave,
)
from orchestrator.engine.fabric_plan import (
    FabricSpec,
    Member,
    Rail,
    Schedule,
    address_problem,
    plan_pairs,
    plan_repair,
    probe_steps,
    wave_seconds,
)
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import ProbeCall, ProbeResult, RunOptions, TransportFactory
from orchestrator.facts.model import FabricFacts
from orchestrator.facts.normalize.budget import check_fields
from orchestrator.facts.normalize.fabric import normalize, refused_answers
from orchestrator.facts.textsafe import one_line
from orchestrator.inventory.model import Host
from orchestrator.verdict.fabric_locate import Thresholds, locate

PROBE = "fabric"
DISCOVER_TIMEOUT_S = 60.0  # as any probe by default (-t): NVML, CUDA and `perftest --help` on a loaded host
WAVE_SLACK_S = 10.0  # a wave's process may take its rounds' windows plus this (start-up, the last reply)
SAY_TIMEOUT_S = 20.0  # rank 0 must say its ncclUniqueId within this


class FabricInterrupted(Exception):
    """Ctrl-C or SIGTERM during the qualification: `results` holds every host's part so far."""

    def __init__(self, results: dict[str, ProbeResult]) -> None:
        super().__init__("fabric qualification interrupted")
        self.results = results


@dataclass
class HostPart:
    """What one host's raw `fabric` envelope will hold."""

    host: Host
    discover: dict[str, Any] | None = None
    clock_offset: float = 0.0  # the host's clock minus this controller's (from its discovery answer)
    outcome: Outcome = Outcome.OK
    reason: str = ""
    skipped: str | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    waves: list[dict[str, Any]] = field(default_factory=list)
    nccl: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # what of its answers the controller refused (a bad address)
    stopped: bool = False  # the qualification was stopped while this host took part

    def data(self) -> dict[str, Any]:
        return {"discover": self.discover, "skipped": self.skipped, "plan": self.plan, "waves": self.waves,
                "nccl": self.nccl, "errors": self.errors, "refused": self.refused}

    def result(self, t0: float) -> ProbeResult:
        if self.discover is None:
            return ProbeResult(PROBE, self.outcome if self.outcome != Outcome.OK else Outcome.FAILED,
                               self.reason or "discovery gave no answer", duration_s=time.monotonic() - t0)
        env = Envelope(probe=PROBE, probe_version=payload.get(PROBE).version, status="ok", data=self.data(),
                       errors=[], warnings=list(self.errors), duration_s=round(time.monotonic() - t0, 3))
        if self.skipped:
            return ProbeResult(PROBE, Outcome.SKIPPED, self.skipped, envelope=env, duration_s=env.duration_s)
        outcome, reason = unfinished(self.data(), self.stopped)
        return ProbeResult(PROBE, outcome, reason, envelope=env, duration_s=env.duration_s)


# Worst first: the outcome a host's fabric part takes from its steps (engine/outcomes.py's order).
_STEP_OUTCOMES = (Outcome.TIMEOUT, Outcome.INVALID_OUTPUT, Outcome.FAILED)


def unfinished(data: Mapping[str, Any], stopped: bool) -> tuple[Outcome, str]:
    """How far a host's part of the qualification got (pure): ok; interrupted (the run was
    stopped); timeout, invalid output or failed when one of its steps was, or when the plan refused
    its answers; failed when a communicator it was a rank of never ran a collective.  Not ok makes
    it `incomplete`, judged on what finished, and is exit status 4 (interrupted: 130)."""
    if stopped:
        return Outcome.INTERRUPTED, "the qualification was stopped before its end"
    steps = [(f"wave {w.get('wave')}", w) for w in data.get("waves") or []]
    steps += [(f"NCCL {g.get('group')}", g) for g in data.get("nccl") or []]
    for outcome in _STEP_OUTCOMES:
        hit = next((f"{name}: {step.get('reason') or outcome.value}" for name, step in steps
                    if step.get("outcome") == outcome.value), None)
        if hit:
            return outcome, hit[:300]
        if outcome is Outcome.INVALID_OUTPUT:
            refused = refused_answers(dict(data))  # the controller's own refusals and the waves' results
            if refused:
                return outcome, f"{len(refused)} answer(s) outside the plan refused: {refused[0]}"[:300]
    idle = next((g.get("group") for g in data.get("nccl") or [] if g.get("outcome") == "ok"
                 and not ((g.get("data") or {}).get("results"))), None)
    if idle:
        return Outcome.FAILED, f"NCCL {idle}: no collective ran (the communicator never came up)"
    return Outcome.OK, ""


def _skip_reason(d: dict[str, Any]) -> str | None:
    busy = [g for g in d.get("gpus") or [] if isinstance(g.get("busy"), int) and g["busy"] > 0]
    if busy:
        return ("busy: " + ", ".join(f"GPU {g.get('bus_id')} runs {g['busy']} compute process(es)" for g in busy)
                + " (the busy guard leaves the host out)")
    ports = [h for h in d.get("hcas") or [] if h.get("state") == "ACTIVE"]
    if not ports:
        return "no active InfiniBand/RoCE port"
    return None


def _member(part: HostPart) -> Member:
    d = part.discover or {}
    override = part.host.vars.get("probe_fabric_addresses")
    override = override if isinstance(override, dict) else {}
    # a rail is a port's place among all of the host's ports (mlx5_3 is rail 3 even when mlx5_2 is
    # down), so hosts of one model line their rails up; only active ports take part
    ports = sorted(d.get("hcas") or [], key=lambda h: (h["hca"], h["port"] or 0))
    rails = []
    for i, h in enumerate(ports):
        if h.get("state") != "ACTIVE":
            continue
        address = _rail_address(part, h["hca"], override.get(h["hca"]), h.get("address"))
        if address is not False:
            rails.append(Rail(i, h["hca"], h.get("port") or 1, address, _lid(h.get("lid"))))
    return Member(part.host.name, part.host.address, tuple(rails))


def _rail_address(part: HostPart, hca: str, override: Any, said: Any) -> str | Literal[False] | None:
    """The address peers dial for one port, checked before it reaches any command line: the
    inventory's override, else what the host said, else None (its SSH address); False when it is
    no address (the port sits out: its pairs are not measured, and the host is named for it)."""
    if override not in (None, ""):
        why = address_problem(override)
        if why:
            part.errors.append(f"probe_fabric_addresses {hca}: {one_line(str(override))[:80]!r} is {why}: "
                               "the port sits out; fix the inventory")
            return False
        return str(override)
    if said in (None, ""):
        why = address_problem(part.host.address)
        if why:
            part.errors.append(f"{hca}: the host's address {one_line(part.host.address)[:80]!r} is {why}: the "
                               "port sits out; set probe_fabric_addresses")
            return False
        return None
    why = address_problem(said)
    if why:
        part.refused.append(f"{hca}: the rail address it said, {one_line(str(said))[:80]!r}, is {why}: the port "
                            "sits out, its pairs are not measured")
        return False
    return str(said)


def _lid(text: Any) -> int | None:
    try:
        return int(str(text), 16) if text not in (None, "") else None
    except ValueError:
        return None


def _cuda_map(part: HostPart, spec: FabricSpec) -> dict[str, int]:
    """HCA -> the CUDA ordinal of its nearest GPU, for --use_cuda, where perftest was built with CUDA
    and GPUDirect RDMA is expected (spec.use_cuda auto) or always asked for."""
    d = part.discover or {}
    if spec.use_cuda == "never" or (d.get("perftest") or {}).get("cuda") is not True:
        return {}
    if spec.use_cuda == "auto":
        facts = normalize({"discover": d})
        gdr = facts["gdr"]
        if not gdr or gdr["expected"] is not True:
            return {}
    ordinal = {g.get("bus_id"): g.get("ordinal") for g in d.get("gpus") or [] if isinstance(g.get("ordinal"), int)}
    return {h["hca"]: ordinal[h.get("nearest_gpu")] for h in d.get("hcas") or [] if h.get("nearest_gpu") in ordinal}


def _dmabuf_only(part: HostPart) -> bool:
    """GPU memory must be registered through DMA-BUF (--use_cuda_dmabuf): no peer-memory module is
    loaded, the GPUs support DMA-BUF and the tools take the flag."""
    d = part.discover or {}
    gdr = d.get("gdr") or {}
    return (not gdr.get("nvidia_peermem") and not gdr.get("nv_peer_mem") and gdr.get("dmabuf") is True
            and (d.get("perftest") or {}).get("dmabuf") is True)


@dataclass
class Notice:
    """What the operator is told before and while the qualification runs (stderr in the CLI)."""

    say: Callable[[str], None] = lambda msg: None


def budget_seconds(spec: FabricSpec, schedule: Schedule, nccl_rounds: int) -> float:
    """The qualification's ceiling: discovery, the first wave, the extra rounds, the NCCL rounds
    (rings that share no GPU run side by side: one round each for the rails, the whole, each
    bisection step)."""
    nccl = nccl_rounds * (spec.nccl.timeout_s + SAY_TIMEOUT_S) if spec.nccl.enabled else 0.0
    return DISCOVER_TIMEOUT_S + wave_seconds(schedule, spec) + WAVE_SLACK_S + \
        spec.extra_rounds * spec.round_s + (WAVE_SLACK_S if spec.extra_rounds else 0) + nccl


def nccl_rounds(members: list[Member], spec: FabricSpec) -> int:
    """NCCL rounds at most: the rail rings, the ring of every GPU, the bisection's steps (each
    bisection round may need two batches when referees are few)."""
    if not spec.nccl.enabled:
        return 0
    rails = 1 if spec.nccl.rail_aligned else 0
    bisect = 2 * (math.ceil(math.log2(max(2, len(members)))) + 1) if spec.nccl.bisect and rails else 0
    return rails + (1 if spec.nccl.all_gpus else 0) + bisect


def qualify(hosts: list[Host], spec: FabricSpec, options: RunOptions, factory: TransportFactory,
            stop: threading.Event, notice: Notice | None = None) -> dict[str, ProbeResult]:
    """Every host's `fabric` result (see the module's docstring)."""
    notice = notice or Notice()
    t0 = time.monotonic()
    parts = {h.name: HostPart(h) for h in hosts}
    conns = Connections(options, factory)
    try:
        _run(parts, spec, options, conns, stop, notice)
    except (Stopped, KeyboardInterrupt) as e:
        conns.close_all()
        for p in parts.values():
            if p.discover is None:
                p.outcome, p.reason = Outcome.INTERRUPTED, "the qualification was stopped"
            else:
                p.stopped = True  # cut off part-way: interrupted, not finished
        raise FabricInterrupted({n: p.result(t0) for n, p in parts.items()}) from e
    finally:
        conns.close_all()
    return {n: p.result(t0) for n, p in parts.items()}


def _run(parts: dict[str, HostPart], spec: FabricSpec, options: RunOptions, conns: Connections,
         stop: threading.Event, notice: Notice) -> None:
    t_fanout = time.monotonic()
    # discovery needs no meeting: the runner's forks bound it (and the logins it opens, kept for the waves)
    found = run_wave([(p.host, ProbeCall(PROBE, {"role": "discover", "step_id": "discover"}, DISCOVER_TIMEOUT_S))
                      for p in parts.values()], conns, stop, options.become, limit=options.forks)
    for name, r in found.items():
        part = parts[name]
        data = envelope_data(r)
        if r.result.outcome != Outcome.OK or data is None:
            part.outcome, part.reason = r.result.outcome, r.result.reason or "discovery failed"
            continue
        part.discover = data
        part.skipped = _skip_reason(data)
        if isinstance(data.get("clock"), (int, float)) and r.answered_at is not None:
            part.clock_offset = float(data["clock"]) - r.answered_at
    live = [p for p in parts.values() if p.discover is not None and not p.skipped]
    members = [_member(p) for p in live]
    by_name = {m.name: m for m in members}
    seed = ",".join(sorted(by_name))
    first = plan_pairs(members, spec, seed)
    for name, why in first.skipped.items():
        parts[name].skipped = why
    # the waves start together: as long after they are sent as the discovery's fan-out took
    lead = max(2.0, 1.5 * (time.monotonic() - t_fanout))
    ceiling = budget_seconds(spec, first, nccl_rounds(members, spec)) + lead * (1 + spec.extra_rounds)
    rails = sorted({s.rail for s in first.steps})
    notice.say(f"{len(members)} host(s) x {len(rails)} rail(s): {first.rounds} round(s) of {spec.round_s:g} s "
               f"(+ at most {spec.extra_rounds} extra), tests {', '.join(spec.tests)}; at most {ceiling:.0f} s "
               f"(budget {spec.budget_s:g} s)")
    plan_meta = {"hosts": len(members), "rails": len(rails), "rounds": first.rounds, "extra_rounds": 0,
                 "round_s": spec.round_s, "budget_s": spec.budget_s, "tests": list(spec.tests), "spec": spec.to_dict(),
                 "ceiling_s": round(ceiling, 1)}
    for p in live:
        m = by_name[p.host.name]
        p.plan = {**plan_meta, "rail_of": {r.hca: r.index for r in m.rails},
                  "addresses": {r.hca: r.address or m.address for r in m.rails}, "steps": []}
    if ceiling > spec.budget_s:
        why = (f"the plan needs up to {ceiling:.0f} s, over the budget of {spec.budget_s:g} s: lower fabric.rounds "
               "or fabric.round_s, or raise fabric.budget_s")
        for p in live:
            p.errors.append(why)
        notice.say(why)
        return
    _wave(1, first, live, by_name, spec, conns, stop, options, lead)
    extra_used = _extra_waves(first, live, by_name, members, spec, conns, stop, options, notice, lead)
    for p in live:
        p.plan["extra_rounds"] = extra_used
    if spec.nccl.enabled:
        from orchestrator.api.fabric_nccl import run_rings

        run_rings(live, by_name, spec, conns, stop, options, notice, _facts_of)


def _wave(n: int, schedule: Schedule, live: list[HostPart], by_name: Mapping[str, Member], spec: FabricSpec,
          conns: Connections, stop: threading.Event, options: RunOptions, lead: float) -> None:
    """One process per host with steps in `schedule`, all at once, counting their rounds from one
    moment `lead` seconds from now (each host's clock corrected by its measured offset)."""
    timeout = lead + wave_seconds(schedule, spec) + WAVE_SLACK_S
    start_at = time.time() + lead
    calls = []
    for p in live:
        steps = probe_steps(p.host.name, schedule, spec, by_name)
        if not steps:
            continue
        # what the host was asked, in its plan: only results for these steps are taken from it
        p.plan.setdefault("steps", []).extend([s["round"], s["rail"], s["role"], s["peer"], s["hca"]] for s in steps)
        args = {"role": "pairs", "step_id": f"wave{n}", "steps": steps, "tests": list(spec.tests), "size": spec.size,
                "iters": spec.iters, "lat_iters": min(1000, spec.iters), "duration_s": spec.duration_s,
                "gid_index": spec.gid_index, "cuda": _cuda_map(p, spec), "cuda_dmabuf": _dmabuf_only(p),
                "output_cap": spec.output_cap,
                "start_at": round(start_at + p.clock_offset, 3)}
        calls.append((p.host, ProbeCall(PROBE, args, timeout)))
    if not calls:
        return
    results = run_wave(calls, conns, stop, options.become)
    parts = {p.host.name: p for p in live}
    for name, r in results.items():
        parts[name].waves.append({"wave": n, "outcome": r.result.outcome.value, "reason": r.result.reason,
                                  "data": envelope_data(r)})


def _facts_of(live: list[HostPart]) -> dict[str, FabricFacts]:
    # figures out of their range (a negative busbw) are unknown here too, before any peer is judged
    return {p.host.name: normalize(check_fields("fabric", p.data())[0]) for p in live}


def _extra_waves(first: Schedule, live: list[HostPart], by_name: Mapping[str, Member], members: list[Member],
                 spec: FabricSpec, conns: Connections, stop: threading.Event, options: RunOptions,
                 notice: Notice, lead: float) -> int:
    """Re-pairing rounds while suspects remain, at most spec.extra_rounds in all."""
    met = first.pairs()
    used = 0
    wave = 1
    next_round = first.rounds
    while used < spec.extra_rounds:
        loc = locate(_facts_of(live), Thresholds.of(spec.to_dict()))
        if not loc.suspects:
            break
        repair = plan_repair(members, loc.suspects, loc.cleared, met, spec, next_round, spec.extra_rounds - used)
        if not repair.steps:
            break
        wave += 1
        notice.say(f"re-pairing {sum(len(v) for v in loc.suspects.values())} suspect port(s) with cleared hosts: "
                   f"{repair.rounds} extra round(s)")
        _wave(wave, repair, live, by_name, spec, conns, stop, options, lead)
        used += repair.rounds
        next_round += repair.rounds
    return used
