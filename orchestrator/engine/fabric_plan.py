"""The plan of a fabric qualification: which hosts meet on which rail in which round (pure).

A fabric qualification pairs hosts rail by rail: in a round every host meets at most one peer,
and each of its HCAs carries one pair, so no HCA is busy twice in a round (the rails of a pair
run side by side).  Rounds come from the circle method of a round-robin tournament: with N hosts
(N-1 rounds, N rounds when N is odd and one host rests) every host meets every other once.  A
spec may ask for fewer rounds (every host then meets that many peers), and the driver may add a
bounded number of extra rounds that pair suspect hosts with hosts already cleared on that rail.

Nothing here touches a host: the schedule is data handed to probes/fabric.py on each host, which
runs its own steps in round order and meets its peers by connecting to them (the client retries
until the server listens, or until the step's deadline).  The same schedule is rebuilt from the
same inputs, so a recorded run replays and a re-judged run reads the same rounds.
"""

from __future__ import annotations

import functools
import ipaddress
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The perftest tools a qualification runs, in the order each round runs them.
PERFTEST_TOOLS = ("ib_write_bw", "ib_write_lat", "ib_send_bw")
BANDWIDTH_TOOLS = ("ib_write_bw", "ib_send_bw")
DEFAULT_TESTS = ("ib_write_bw", "ib_write_lat")
# Below this many rounds a host meets too few peers to tell its own fault from a peer's (2 peers
# can blame each other; with 3 the odd one out is the host).
MIN_ROUNDS = 3
MAX_EXTRA_ROUNDS = 4
DEFAULT_PORT_BASE = 18600  # perftest's default is 18515; a block of its own keeps clear of it
PORT_SPAN = 4096  # the ports a qualification may listen on, from its port_base (PortLayout)


# A rail address goes into a peer's perftest command line (its server argument) and NCCL's
# environment: it must be an address and nothing else.  IPv4, IPv6 (a RoCE GID is written as one)
# or an RFC 1123 host name: ASCII letters, digits, dots and inner hyphens, labels of 1-63, at most
# 253 in all; never starting with "-", so no tool can read it as an option.
ADDRESS_MAX = 253
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")


def address_problem(text: Any) -> str | None:
    """Why `text` is not a rail address (None: it is one)."""
    if not isinstance(text, str) or not text:
        return "empty"
    if len(text) > ADDRESS_MAX:
        return f"{len(text)} characters, over {ADDRESS_MAX}"
    if not text.isascii():
        return "not ASCII"
    if "%" in text:  # an IPv6 scope id takes any text: none is needed between hosts
        return "an IPv6 scope id (%...) is not taken"
    try:
        ipaddress.ip_address(text)
        return None
    except ValueError:
        pass
    labels = text[:-1].split(".") if text.endswith(".") else text.split(".")
    if all(_LABEL.match(label) for label in labels) and not text.replace(".", "").isdigit():
        return None
    return "not an IP address, GID or host name"


class FabricSpecError(ValueError):
    """A playbook's `fabric` mapping is wrong; the message says which key and why."""


@dataclass(frozen=True)
class NcclSpec:
    """The multi-host NCCL part: rail-aligned groups (one rank per host and rail, NCCL_IB_HCA),
    IB only (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE), a size sweep; and one group of every GPU."""

    enabled: bool = True
    ops: tuple[str, ...] = ("all_reduce", "all_gather")
    min_bytes: int = 1 << 20
    max_bytes: int = 64 << 20
    iters: int = 5
    rail_aligned: bool = True
    all_gpus: bool = True
    bisect: bool = True
    timeout_s: float = 60.0
    # the bus bandwidth floor holds from this message size up (smaller ones do not fill a link)
    floor_min_bytes: int = 64 << 20


@dataclass(frozen=True)
class FabricSpec:
    """A play's `fabric` mapping: what the qualification measures and the time it may take."""

    tests: tuple[str, ...] = DEFAULT_TESTS
    rounds: int | None = None  # None: every pair (a full round robin); else this many rounds
    extra_rounds: int = 2  # re-pairing rounds for suspects, at most
    round_s: float = 30.0  # each round's deadline, on every host of it
    budget_s: float = 1800.0  # the whole qualification; a plan that needs more is refused
    size: int = 65536  # bytes per message
    iters: int = 5000  # messages per bandwidth test (latency tests: 1000)
    duration_s: float | None = None  # perftest -D instead of -n
    use_cuda: str = "auto"  # auto (where built and GDR is expected) | always | never
    port_base: int = DEFAULT_PORT_BASE
    rails: int | None = None  # use the first N rails only
    gid_index: int | None = None  # perftest -x (RoCE)
    bw_ratio: float = 0.9  # a bandwidth below this share of the line rate is slow
    lat_typical_us: float = 2.5  # ib_write_lat typical above this is slow (NVIDIA ngc_multinode_perf)
    lat_p99_us: float = 4.2  # 99th percentile above this is slow (Imbue's host validation)
    peer_ratio: float = 0.8  # below this share of the fleet's median of the same test is slow
    output_cap: int = 16384  # bytes of a tool's stdout a host keeps per step
    nccl: NcclSpec = field(default_factory=NcclSpec)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        d = asdict(self)
        d["tests"] = list(self.tests)
        d["nccl"]["ops"] = list(self.nccl.ops)
        return d


def _num(raw: Mapping[str, Any], key: str, default: float, lo: float, hi: float, kind: type = float) -> Any:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not isinstance(v, int)):
        raise FabricSpecError(f"fabric.{key} must be a {'whole ' if kind is int else ''}number, got {v!r}")
    if not lo <= v <= hi:
        raise FabricSpecError(f"fabric.{key} must be between {lo:g} and {hi:g}, got {v!r}")
    return kind(v)


_SPEC_KEYS = ("tests", "rounds", "extra_rounds", "round_s", "budget_s", "size", "iters", "duration_s", "use_cuda",
              "port_base", "rails", "gid_index", "bw_ratio", "lat_typical_us", "lat_p99_us", "peer_ratio",
              "output_cap", "nccl")
_NCCL_KEYS = ("enabled", "ops", "min_bytes", "max_bytes", "iters", "rail_aligned", "all_gpus", "bisect", "timeout_s",
              "floor_min_bytes")


def spec_from_mapping(raw: Any) -> FabricSpec:
    """A `fabric:` mapping (true: every default) -> FabricSpec; FabricSpecError names the bad key."""
    if raw is True or raw is None:
        return FabricSpec()
    if not isinstance(raw, Mapping):
        raise FabricSpecError(f"fabric must be a mapping of settings (or true), got {raw!r}")
    unknown = [k for k in raw if k not in _SPEC_KEYS]
    if unknown:
        raise FabricSpecError(f"fabric: unknown key {unknown[0]!r}; known keys: {', '.join(_SPEC_KEYS)}")
    tests = raw.get("tests", list(DEFAULT_TESTS))
    if not isinstance(tests, list) or not tests or any(t not in PERFTEST_TOOLS for t in tests) \
            or len(set(tests)) != len(tests):
        raise FabricSpecError(f"fabric.tests must be a list of distinct perftest tools ({', '.join(PERFTEST_TOOLS)}), "
                              f"got {tests!r}")
    rounds = raw.get("rounds", "all")
    if rounds == "all":
        n_rounds = None
    elif isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= MIN_ROUNDS:
        n_rounds = rounds
    else:
        raise FabricSpecError(f"fabric.rounds must be 'all' or a whole number of at least {MIN_ROUNDS} "
                              f"(fewer peers cannot tell a host's fault from its peer's), got {rounds!r}")
    use_cuda = raw.get("use_cuda", "auto")
    if use_cuda is True:
        use_cuda = "always"
    if use_cuda is False:
        use_cuda = "never"
    if use_cuda not in ("auto", "always", "never"):
        raise FabricSpecError(f"fabric.use_cuda must be auto, always or never, got {use_cuda!r}")
    duration = raw.get("duration_s")
    if duration is not None:
        duration = _num(raw, "duration_s", 0, 1, 60)
    rails = raw.get("rails")
    if rails is not None:
        rails = _num(raw, "rails", 0, 1, 64, int)
    gid = raw.get("gid_index")
    if gid is not None:
        gid = _num(raw, "gid_index", 0, 0, 255, int)
    return FabricSpec(
        tests=tuple(tests), rounds=n_rounds, extra_rounds=_num(raw, "extra_rounds", 2, 0, MAX_EXTRA_ROUNDS, int),
        round_s=_num(raw, "round_s", 30.0, 1.0, 600.0), budget_s=_num(raw, "budget_s", 1800.0, 5.0, 86400.0),
        size=_num(raw, "size", 65536, 2, 1 << 30, int), iters=_num(raw, "iters", 5000, 5, 10_000_000, int),
        duration_s=duration, use_cuda=str(use_cuda), port_base=_num(raw, "port_base", DEFAULT_PORT_BASE, 1024, 65536 - PORT_SPAN, int),
        rails=rails, gid_index=gid, bw_ratio=_num(raw, "bw_ratio", 0.9, 0.1, 1.0),
        lat_typical_us=_num(raw, "lat_typical_us", 2.5, 0.1, 1000.0), lat_p99_us=_num(raw, "lat_p99_us", 4.2, 0.1, 1000.0),
        peer_ratio=_num(raw, "peer_ratio", 0.8, 0.1, 1.0), output_cap=_num(raw, "output_cap", 16384, 1024, 1 << 20, int),
        nccl=_nccl_spec(raw.get("nccl", True)),
    )


def _nccl_spec(raw: Any) -> NcclSpec:
    if raw is True or raw is None:
        return NcclSpec()
    if raw is False:
        return NcclSpec(enabled=False)
    if not isinstance(raw, Mapping):
        raise FabricSpecError(f"fabric.nccl must be a mapping (or true/false), got {raw!r}")
    unknown = [k for k in raw if k not in _NCCL_KEYS]
    if unknown:
        raise FabricSpecError(f"fabric.nccl: unknown key {unknown[0]!r}; known keys: {', '.join(_NCCL_KEYS)}")
    ops = raw.get("ops", ["all_reduce", "all_gather"])
    if not isinstance(ops, list) or not ops or any(o not in ("all_reduce", "all_gather") for o in ops):
        raise FabricSpecError(f"fabric.nccl.ops must be a list of all_reduce, all_gather, got {ops!r}")
    flags = {}
    for key in ("enabled", "rail_aligned", "all_gpus", "bisect"):
        v = raw.get(key, True)
        if not isinstance(v, bool):
            raise FabricSpecError(f"fabric.nccl.{key} must be true or false, got {v!r}")
        flags[key] = v
    lo = _num(raw, "min_bytes", 1 << 20, 4, 16 << 30, int)
    hi = _num(raw, "max_bytes", 64 << 20, 4, 16 << 30, int)
    if lo > hi:
        raise FabricSpecError(f"fabric.nccl.min_bytes ({lo}) is above max_bytes ({hi})")
    return NcclSpec(ops=tuple(ops), min_bytes=lo, max_bytes=hi, iters=_num(raw, "iters", 5, 1, 1000, int),
                    timeout_s=_num(raw, "timeout_s", 60.0, 5.0, 3600.0),
                    floor_min_bytes=_num(raw, "floor_min_bytes", 64 << 20, 4, 16 << 30, int), **flags)


# ------------------------------------------------------------------------------- rails


@dataclass(frozen=True)
class Rail:
    """One usable HCA port of a host: the rail's index, its device and the address peers dial."""

    index: int
    hca: str
    port: int
    address: str | None  # IPv4 of the port's interface (IPoIB/RoCE); None: the host's own address
    lid: int | None = None  # the port's LID: a measurement names its peer's, which must be this


@dataclass(frozen=True)
class Member:
    """A host taking part: its name, the address its SSH answers on, and its rails by index."""

    name: str
    address: str
    rails: tuple[Rail, ...]

    def rail(self, index: int) -> Rail | None:
        return next((r for r in self.rails if r.index == index), None)


# ------------------------------------------------------------------------------- rounds


def circle_rounds(names: Sequence[str]) -> list[list[tuple[str, str]]]:
    """The circle method: N names (one resting per round when N is odd) -> rounds of disjoint
    pairs in which every two names meet exactly once.  The first name stays, the rest rotate."""
    people: list[str | None] = list(names)
    if len(people) < 2:
        return []
    if len(people) % 2:
        people.append(None)  # the bye: whoever meets it rests that round
    n = len(people)
    out = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = people[i], people[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b))
        out.append(pairs)
        people = [people[0], people[-1], *people[1:-1]]
    return out


def tournament(names: Sequence[str], rounds: int | None, seed: str = "") -> list[list[tuple[str, str]]]:
    """`rounds` rounds of the circle method (None: all of them).  With fewer rounds than a full
    tournament, the hosts are first shuffled by `seed` so each one meets peers from across the
    fleet, not only its neighbours in name order; the same seed gives the same plan."""
    order = sorted(names)
    if rounds is not None and rounds < len(order) - 1:
        random.Random(f"fleetprobe-fabric:{seed}:{len(order)}").shuffle(order)
    full = circle_rounds(order)
    return full if rounds is None else full[:rounds]


@dataclass(frozen=True)
class PairStep:
    """One pair on one rail in one round: `server` listens, `client` dials `server`'s rail address."""

    round: int
    rail: int
    server: str
    client: str
    server_hca: str
    client_hca: str
    server_address: str
    port_base: int  # each test of the round adds its own offset (probe_steps)
    extra: bool = False  # a re-pairing round added after the first wave


@dataclass
class Schedule:
    """Every pair step of a wave, the rounds it spans, and who rests where."""

    steps: list[PairStep]
    rounds: int
    first_round: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # host -> why it takes no part

    def for_host(self, name: str) -> list[PairStep]:
        return list(self._by_host.get(name, ()))

    @functools.cached_property
    def _by_host(self) -> dict[str, list[PairStep]]:
        # each host's steps, in the plan's order: handing out a wave asks this of every host, and
        # a scan of every step for each one is hosts x steps (minutes at a thousand hosts)
        out: dict[str, list[PairStep]] = {}
        for s in self.steps:
            out.setdefault(s.server, []).append(s)
            out.setdefault(s.client, []).append(s)
        return out

    def pairs(self) -> set[tuple[str, str, int]]:
        return {(min(s.server, s.client), max(s.server, s.client), s.rail) for s in self.steps}

    @functools.cached_property
    def rail_slots(self) -> int:
        """Rail indices up to the highest any step uses (every host of the wave lays out its ports
        alike)."""
        return max((s.rail for s in self.steps), default=0) + 1


def rail_indices(members: Iterable[Member], limit: int | None = None) -> list[int]:
    """The rails at least two members have (a rail with one host has nobody to meet)."""
    counts: dict[int, int] = {}
    for m in members:
        for r in m.rails:
            counts[r.index] = counts.get(r.index, 0) + 1
    out = sorted(i for i, c in counts.items() if c >= 2)
    return out[:limit] if limit else out


def _steps_for(rounds: list[list[tuple[str, str]]], by_name: Mapping[str, Member], rails: list[int], port_base: int,
               first_round: int, extra: bool) -> list[PairStep]:
    steps = []
    served: dict[str, int] = {}
    for k, pairs in enumerate(rounds):
        rnd = first_round + k
        for i, (a, b) in enumerate(pairs):
            # the one who listened less so far listens: every host is the server about half the time
            ka, kb = served.get(a, 0), served.get(b, 0)
            server, client = (a, b) if ka < kb or (ka == kb and (rnd + i) % 2 == 0) else (b, a)
            served[server] = served.get(server, 0) + 1
            for rail in rails:
                rs, rc = by_name[server].rail(rail), by_name[client].rail(rail)
                if rs is None or rc is None:
                    continue
                steps.append(PairStep(rnd, rail, server, client, rs.hca, rc.hca,
                                      rs.address or by_name[server].address, port_base, extra))
    return steps


def plan_pairs(members: Sequence[Member], spec: FabricSpec, seed: str = "") -> Schedule:
    """The first wave: a tournament over every member with at least one shared rail."""
    rails = rail_indices(members, spec.rails)
    by_name = {m.name: m for m in members}
    usable = [m.name for m in members if any(m.rail(r) for r in rails)]
    skipped = {m.name: "no InfiniBand/RoCE port shared with another host" for m in members if m.name not in usable}
    rounds = tournament(usable, spec.rounds, seed)
    return Schedule(_steps_for(rounds, by_name, rails, spec.port_base, 0, False), len(rounds), 0, skipped)


def plan_repair(members: Sequence[Member], suspects: Mapping[int, Sequence[str]], referees: Mapping[int, Sequence[str]],
                met: set[tuple[str, str, int]], spec: FabricSpec, first_round: int, max_rounds: int) -> Schedule:
    """Extra rounds: each suspect host of a rail meets referees (hosts cleared on that rail) it has
    not met there yet, one referee per round, at most `max_rounds` rounds.  Within a round a host
    takes one pair per rail; different rails of one host may meet different referees, since the
    rails run side by side anyway."""
    by_name = {m.name: m for m in members}
    steps: list[PairStep] = []
    used_rounds = 0
    for k in range(max_rounds):
        rnd = first_round + k
        busy: set[tuple[str, int]] = set()
        made = False
        for rail in sorted(suspects):
            for sus in suspects[rail]:
                if (sus, rail) in busy:
                    continue
                for ref in referees.get(rail, ()):
                    key = (min(sus, ref), max(sus, ref), rail)
                    if ref == sus or key in met or (ref, rail) in busy:
                        continue
                    rs, rc = by_name[ref].rail(rail), by_name[sus].rail(rail)
                    if rs is None or rc is None:
                        continue
                    # the referee listens: a suspect that cannot listen still gets measured
                    steps.append(PairStep(rnd, rail, ref, sus, rs.hca, rc.hca, rs.address or by_name[ref].address,
                                          spec.port_base, True))
                    met.add(key)
                    busy.update({(sus, rail), (ref, rail)})
                    made = True
                    break
        if not made:
            break
        used_rounds += 1
    return Schedule(steps, used_rounds, first_round)


# ------------------------------------------------------------------------------- per host


# Each round of a wave listens on ports of its own, as far as PORT_SPAN allows: a server still
# waiting for a slow partner must never be dialled by a client of a later round (a host whose own
# partners were quick runs rounds ahead of the rest).  Where rounds `blocks` apart share ports, no
# host starts a round more than `blocks - 3` windows early: by then the server of the round it
# could reach has been stopped at its window's end, with two windows to spare for clock error.
@dataclass(frozen=True)
class PortLayout:
    """Where a wave's tests listen: `width` ports a round (one per test per rail index), rounds
    `blocks` apart on the same ones."""

    width: int
    blocks: int
    n_tests: int

    @classmethod
    def of(cls, schedule: Schedule, n_tests: int) -> PortLayout:
        width = schedule.rail_slots * n_tests
        return cls(width, max(3, PORT_SPAN // width), n_tests)

    def port(self, step: PairStep, test_index: int) -> int:
        return step.port_base + (step.round % self.blocks) * self.width + step.rail * self.n_tests + test_index

    def earliest_start(self, k: int, round_s: float) -> float:
        """The earliest a host may start the wave's k-th round, seconds from the wave's start
        (negative: as early as its partners are ready)."""
        return (k - (self.blocks - 3)) * round_s


def probe_steps(name: str, schedule: Schedule, spec: FabricSpec, by_name: Mapping[str, Member]) -> list[dict[str, Any]]:
    """What the host `name` is handed: its steps in round order, each with its role, peer, the
    port of each test, the round's window and the earliest it may start (seconds from the
    wave's start)."""
    ports = PortLayout.of(schedule, len(spec.tests))
    out = []
    for s in schedule.for_host(name):
        role = "server" if s.server == name else "client"
        peer = s.client if role == "server" else s.server
        hca = s.server_hca if role == "server" else s.client_hca
        rail = by_name[name].rail(s.rail)
        k = s.round - schedule.first_round
        peer_rail = by_name[peer].rail(s.rail)
        out.append({
            "round": s.round, "rail": s.rail, "hca": hca, "ib_port": rail.port if rail else 1, "role": role,
            "peer": peer, "peer_hca": s.client_hca if role == "server" else s.server_hca,
            "peer_lid": peer_rail.lid if peer_rail else None,
            "connect": s.server_address, "bind": rail.address if rail else None,
            "ports": [ports.port(s, i) for i in range(len(spec.tests))],
            "start_s": round(k * spec.round_s, 3), "end_s": round((k + 1) * spec.round_s, 3),
            "not_before_s": round(ports.earliest_start(k, spec.round_s), 3), "extra": s.extra,
        })
    out.sort(key=lambda d: (d["round"], d["rail"]))
    return out


def wave_seconds(schedule: Schedule, spec: FabricSpec) -> float:
    """How long a wave may take on a host: its rounds' windows."""
    return schedule.rounds * spec.round_s
