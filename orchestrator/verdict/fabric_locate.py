"""Localisation of fabric faults from pairwise measurements (pure).

Every pair measurement says "these two ports, together, on this rail, were slow (or not)".  Who is
to blame follows from who else each port was fast with:

* a rail slow for (nearly) every pair on it is the rail: its switches, not any host;
* a port slow with (nearly) every peer, while those peers are fast with others, is that host's
  HCA on that rail (its PCIe link is named with it); a host whose HCAs are all slow that way is
  the host itself (its PCIe root, memory or CPU, not one card);
* a pair slow while both its ports are fast with everyone else is the path between them (both
  ports, and the switch where the fabric could be read);
* what cannot be told apart yet (a port measured with too few peers, peers that are themselves
  suspect) is a suspect, and the driver re-pairs suspects with cleared hosts for a bounded number
  of extra rounds (engine/fabric_plan.py:plan_repair).

Floors (one home: `judge_sample`): bandwidth at least `bw_ratio` (default 90 %) of the slower port's
active line rate, capped by what its PCIe link can carry at full width, and at least `peer_ratio`
(80 %) of the fleet's median of the same test; latency under `lat_typical_us` (2.5 us, NVIDIA's
ngc_multinode_perf criterion for writes) and a 99th percentile under `lat_p99_us` (4.2 us,
Imbue's host validation), and under 1/peer_ratio of the fleet's median.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.model import FabricFacts, FabricMeasure, FabricNcclGroup
from orchestrator.verdict.fabric_word import Dispute, disagree, impossible, pinned, port_on_rail, unreadable
from orchestrator.verdict.fabric_word import hca_of as _hca_of

RAIL_BAD_SHARE = 0.75  # of a rail's pairs slow: the rail
HCA_BAD_SHARE = 0.75  # of a port's pairs slow (its peers cleared): the port
MIN_PAIRS = 2  # a port judged on fewer pairs than this is a suspect, not a verdict
MIN_RAIL_HOSTS = 3  # a rail of two hosts cannot tell the rail from either host
_GT_PER_LANE = {"2.5": 2.0, "5.0": 4.0, "8.0": 7.877, "16.0": 15.754, "32.0": 31.508, "64.0": 60.5}


@dataclass(frozen=True)
class Thresholds:
    bw_ratio: float = 0.9
    peer_ratio: float = 0.8
    lat_typical_us: float = 2.5
    lat_p99_us: float = 4.2

    @classmethod
    def of(cls, spec: Mapping[str, Any] | None) -> Thresholds:
        d = dict(spec or {})
        out = {}
        for k in ("bw_ratio", "peer_ratio", "lat_typical_us", "lat_p99_us"):
            v = d.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                out[k] = float(v)
        return cls(**out)


@dataclass
class Sample:
    """One test of one pair on one rail, deduplicated (the client's figure, else the server's)."""

    round: int
    rail: int
    test: str
    kind: str
    a: str  # the client (the side that dialled)
    b: str
    a_hca: str
    b_hca: str
    value: float | None
    p99_us: float | None
    extra: bool
    error: str | None = None
    error_kind: str | None = None
    expected: float | None = None  # bw: the floor; lat: the ceiling
    basis: str = ""  # what the expected value comes from
    bad: bool | None = None  # None: not judged
    reporter: str = ""  # whose figure `value` is (the client's, else the server's)
    other: float | None = None  # the other end's figure of the same transfer, where it printed one
    disputed: bool = False  # the two ends disagree: not judged on either's word (fabric_word.py)

    @property
    def pair(self) -> tuple[str, str]:
        return (min(self.a, self.b), max(self.a, self.b))

    def describe(self) -> str:
        where = f"{self.a}:{self.a_hca} <-> {self.b}:{self.b_hca}"
        if self.value is None or self.disputed:
            return f"{where} round {self.round} {self.test}: {self.error or 'no figure'}"
        unit = "Gb/s" if self.kind == "bw" else "us"
        cmp = ("<" if self.bad else ">=") if self.kind == "bw" else (">" if self.bad else "<=")
        exp = f" {cmp} {self.expected:.1f} ({self.basis})" if self.expected is not None else ""
        p99 = f", p99 {self.p99_us:.2f} us" if self.p99_us is not None and self.kind == "lat" else ""
        return f"{where} round {self.round} {self.test}: {self.value:.2f} {unit}{p99}{exp}"


def pcie_gbps(link: Mapping[str, Any] | None, at_max: bool = True) -> float | None:
    """What a PCIe link carries in Gb/s (per direction): lanes x the generation's rate after encoding."""
    if not link:
        return None
    speed, width = (link.get("max_speed"), link.get("max_width")) if at_max else (link.get("speed"), link.get("width"))
    if not isinstance(speed, str) or not isinstance(width, int):
        return None
    per_lane = _GT_PER_LANE.get(speed.split()[0])
    return per_lane * width if per_lane else None


def link_text(link: Mapping[str, Any] | None) -> str:
    if not link:
        return "PCIe link unknown"
    cur = f"{(link.get('speed') or '?').split(' ')[0]} GT/s x{link.get('width') or '?'}"
    mx = f"{(link.get('max_speed') or '?').split(' ')[0]} GT/s x{link.get('max_width') or '?'}"
    return f"PCIe {cur}" + ("" if cur == mx else f" (max {mx})")


def downtrained(link: Mapping[str, Any] | None) -> bool:
    if not link:
        return False
    return (isinstance(link.get("width"), int) and isinstance(link.get("max_width"), int)
            and link["width"] < link["max_width"]) or (link.get("speed") != link.get("max_speed")
                                                       and link.get("speed") is not None)


def line_floor(facts: Mapping[str, FabricFacts], s: Sample, t: Thresholds) -> tuple[float | None, str]:
    """The bandwidth floor of a pair: bw_ratio x the slower port's active rate, capped by the
    narrower PCIe link (at its full width: a downtrained link is the fault, not the floor)."""
    caps: list[tuple[float, str]] = []
    for host, hca in ((s.a, s.a_hca), (s.b, s.b_hca)):
        h = _hca_of(facts, host, hca)
        rate = h["rate_gbps"] if h else None
        if h is None or rate is None:
            return None, "line rate unknown"
        caps.append((rate, f"{h['rate'] or rate}"))
        pc = pcie_gbps(h["pcie"])
        if pc is not None:
            caps.append((pc, "its PCIe link"))
    rate, what = min(caps)
    return round(rate * t.bw_ratio, 1), f"{t.bw_ratio:.0%} of {what}"


Side = tuple[str, FabricMeasure]  # the host that printed a figure, and its measurement


def _sides(facts: Mapping[str, FabricFacts], refused: dict[str, list[str]]) -> dict[tuple[Any, ...], dict[str, Side]]:
    """(round, rail, test, pair) -> role -> the end that reported it.  Only pairs of two hosts that
    took part: a host speaks of its planned peers, never of a host outside the qualification or of
    itself (the normalizer already dropped steps outside its plan).  A figure no port can produce
    is dropped and its sender noted in `refused`."""
    by_key: dict[tuple[Any, ...], dict[str, Side]] = {}
    for host, f in facts.items():
        for m in f.get("measurements") or []:
            if not isinstance(m, dict) or m.get("error_kind") in ("missing", "not_run"):
                continue
            if m["peer"] == host or m["peer"] not in facts:
                continue
            why = impossible(facts, host, m) or (unreadable(m) if m.get("error_kind") == "impossible" else None)
            if why is not None:
                refused.setdefault(host, []).append(why)
                m = {**m, "value": None, "p99_us": None, "error": why, "error_kind": "impossible"}
            role = "client" if m["role"] == "client" else "server"
            key = (m["round"], m["rail"], m["test"], tuple(sorted((host, m["peer"]))))
            ends = by_key.setdefault(key, {})
            if role not in ends or (ends[role][1]["value"] is None and m["value"] is not None):
                ends[role] = (host, m)
    return by_key


def _sample(facts: Mapping[str, FabricFacts], first: Side, ends: dict[str, Side]) -> Sample:
    """One pair test from its ends (`first`: any of them): each port named by its own host (its
    record, else its discovery), the client's figure where it has one, else the server's, and the
    other end's figure beside it."""
    client, server = ends.get("client"), ends.get("server")
    host, m = first
    a, b = (host, m["peer"]) if m["role"] == "client" else (m["peer"], host)

    def port(h: str, end: Side | None) -> str:
        return end[1]["hca"] if end is not None else (port_on_rail(facts, h, m["rail"]) or m["hca"])

    use, other = (client, server) if client is not None and client[1]["value"] is not None else (server, client)
    if use is None or use[1]["value"] is None:
        use, other = first, None
    u = use[1]
    s = Sample(m["round"], m["rail"], m["test"], m["kind"], a, b, port(a, client), port(b, server), u["value"],
               u["p99_us"], m["extra"], u["error"], u["error_kind"])
    s.reporter = use[0]
    s.other = other[1]["value"] if other is not None else None
    return s


def samples(facts: Mapping[str, FabricFacts], refused: dict[str, list[str]] | None = None) -> list[Sample]:
    """Every pair test once (`_sample`); `refused` collects, per host, the figures it printed that
    no port can produce."""
    found = [_sample(facts, next(iter(ends.values())), ends)
             for ends in _sides(facts, {} if refused is None else refused).values()]
    return sorted(found, key=lambda s: (s.round, s.rail, s.test, s.pair))


def _bw_verdict(facts: Mapping[str, FabricFacts], s: Sample, value: float, med: float | None,
                t: Thresholds) -> tuple[bool, float | None, str]:
    """(slow, its floor, what the floor comes from) of a bandwidth figure for this pair."""
    floor, basis = line_floor(facts, s, t)
    peer = round(med * t.peer_ratio, 1) if med is not None else None
    below_floor = floor is not None and value < floor
    below_peer = peer is not None and value < peer
    if below_floor or (floor is not None and not below_peer):
        return below_floor or below_peer, floor, basis
    peer_basis = f"{t.peer_ratio:.0%} of the fleet's median {med:.1f} Gb/s" if med is not None else ""
    return below_floor or below_peer, peer, peer_basis


def _lat_verdict(value: float, p99: float | None, med: float | None, t: Thresholds) -> tuple[bool, float | None, str]:
    """(slow, its ceiling, what the ceiling comes from) of a latency figure."""
    ceiling = t.lat_typical_us
    over_p99 = p99 is not None and p99 > t.lat_p99_us
    over_peer = med is not None and value > med / t.peer_ratio
    bad = bool(value > ceiling or over_p99 or over_peer)
    if over_p99 and value <= ceiling and p99 is not None:
        return bad, ceiling, f"99th percentile {p99:.2f} us over {t.lat_p99_us} us"
    if over_peer and value <= ceiling and med is not None:
        return bad, round(med / t.peer_ratio, 2), f"the fleet's median {med:.2f} us / {t.peer_ratio:.0%}"
    return bad, ceiling, "typical latency ceiling"


def _medians(found: list[Sample]) -> dict[str, float]:
    """test -> the fleet's median figure, of pair tests whose two ends agree (or only one printed)."""
    out: dict[str, float] = {}
    for test in {s.test for s in found}:
        vals = [s.value for s in found if s.test == test and s.value is not None
                and (s.other is None or not disagree(s.value, s.other, False, False))]
        if len(vals) >= 3:
            out[test] = statistics.median(vals)
    return out


def judge_samples(facts: Mapping[str, FabricFacts], found: list[Sample], t: Thresholds) -> None:
    """Each sample's floor or ceiling and verdict (in place), against the hardware and the fleet.
    A pair whose two ends disagree about it is not judged on either's word (fabric_word.py)."""
    medians = _medians(found)
    for s in found:
        if s.value is None:
            s.bad = None
            continue

        def verdict(value: float, p99: float | None, s: Sample = s) -> tuple[bool, float | None, str]:
            med = medians.get(s.test)
            return _bw_verdict(facts, s, value, med, t) if s.kind == "bw" else _lat_verdict(value, p99, med, t)

        bad, s.expected, s.basis = verdict(s.value, s.p99_us)
        if s.other is not None and disagree(s.value, s.other, bad, verdict(s.other, None)[0]):
            other_by = s.b if s.reporter == s.a else s.a
            unit = "Gb/s" if s.kind == "bw" else "us"
            s.disputed, s.bad = True, None
            s.error = (f"{s.reporter} says {s.value:.2f} {unit}, {other_by} says {s.other:.2f} {unit}: "
                       "the two ends disagree, not judged")
            continue
        s.bad = bad


def disputes(found: list[Sample]) -> list[Dispute]:
    return [Dispute(s.a, s.b, s.describe()) for s in found if s.disputed]


def agreed_peers(found: list[Sample]) -> dict[str, set[str]]:
    """host -> the peers it has a judged pair test with whose ends agree."""
    out: dict[str, set[str]] = {}
    for s in found:
        if s.bad is not None:
            out.setdefault(s.a, set()).add(s.b)
            out.setdefault(s.b, set()).add(s.a)
    return out


# ------------------------------------------------------------------------------- localisation


@dataclass
class Fault:
    """One localised fault: what, where, measured vs expected, and the samples that decided it."""

    kind: str  # host | hca | path | rail | gdr | failed
    hosts: tuple[str, ...]
    rail: int | None = None
    hcas: tuple[str, ...] = ()
    measured: float | None = None  # the median of the deciding samples' figures
    expected: float | None = None
    unit: str = "Gb/s"
    evidence: list[str] = field(default_factory=list)
    detail: str = ""


@dataclass
class Localisation:
    faults: list[Fault]
    suspects: dict[int, list[str]]  # rail -> hosts whose blame is still open (the driver re-pairs them)
    cleared: dict[int, list[str]]  # rail -> hosts fast with someone on it (referees)
    samples: list[Sample]
    pairs_judged: int = 0
    # host -> why its word was not taken: figures no port can produce, or disagreeing with peers
    # that agree with others (fabric_word.py); raised on that host alone
    distrusted: dict[str, list[str]] = field(default_factory=dict)


def _pair_verdicts(found: list[Sample]) -> dict[int, dict[tuple[str, str], list[Sample]]]:
    """rail -> pair -> its judged samples."""
    out: dict[int, dict[tuple[str, str], list[Sample]]] = {}
    for s in found:
        if s.bad is not None:
            out.setdefault(s.rail, {}).setdefault(s.pair, []).append(s)
    return out


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 2) if vals else None


def _decider(samples_: list[Sample]) -> list[Sample]:
    """The samples that speak for a verdict: the bad ones, bandwidth first."""
    bad = [s for s in samples_ if s.bad]
    return sorted(bad, key=lambda s: (s.kind != "bw", s.round, s.pair))


def _fault_numbers(deciding: list[Sample]) -> tuple[float | None, float | None, str]:
    bw = [s for s in deciding if s.kind == "bw"]
    use = bw or deciding
    unit = "Gb/s" if bw else "us"
    return _median(s.value for s in use), _median(s.expected for s in use), unit


def locate(facts: Mapping[str, FabricFacts], t: Thresholds | None = None) -> Localisation:
    t = t or Thresholds()
    distrusted: dict[str, list[str]] = {}
    found = samples(facts, distrusted)
    judge_samples(facts, found, t)
    for host, lines in pinned(disputes(found), agreed_peers(found)).items():
        distrusted.setdefault(host, []).extend(lines)
    by_rail = _pair_verdicts(found)
    faults: list[Fault] = []
    suspects: dict[int, list[str]] = {}
    cleared: dict[int, list[str]] = {}
    bad_ports: dict[str, dict[int, Fault]] = {}  # host -> rail -> its HCA fault
    rail_faults: set[int] = set()
    hca_name: dict[tuple[str, int], str] = {}
    for s in found:
        hca_name.setdefault((s.a, s.rail), s.a_hca)
        hca_name.setdefault((s.b, s.rail), s.b_hca)
    for rail, pairs in sorted(by_rail.items()):
        verdict = {p: any(s.bad for s in ss) for p, ss in pairs.items()}
        hosts = sorted({h for p in pairs for h in p})
        n_bad = sum(verdict.values())
        if len(hosts) >= MIN_RAIL_HOSTS and verdict and n_bad / len(verdict) >= RAIL_BAD_SHARE:
            deciding = _decider([s for ss in pairs.values() for s in ss])
            measured, expected, unit = _fault_numbers(deciding)
            faults.append(Fault("rail", tuple(hosts), rail, tuple(sorted({hca_name[(h, rail)] for h in hosts})),
                                measured, expected, unit, [s.describe() for s in deciding[:8]],
                                f"{n_bad} of {len(verdict)} pairs on the rail are slow"))
            rail_faults.add(rail)
            continue
        peers: dict[str, list[tuple[str, bool]]] = {h: [] for h in hosts}
        for (x, y), bad in verdict.items():
            peers[x].append((y, bad))
            peers[y].append((x, bad))
        good_with = {h: {p for p, bad in ps if not bad} for h, ps in peers.items()}
        ok_hosts = sorted(h for h, g in good_with.items() if g)
        cleared[rail] = ok_hosts
        candidates = [h for h, ps in peers.items()
                      if len(ps) >= MIN_PAIRS and sum(b for _, b in ps) / len(ps) >= HCA_BAD_SHARE]
        ports: set[str] = set()
        open_: set[str] = set()
        for h in candidates:
            bad_peers = [p for p, b in peers[h] if b]
            # a bad peer vouched for by someone else than h: the slowness is h's
            vouched = [p for p in bad_peers if good_with[p] - {h}]
            if len(vouched) >= min(MIN_PAIRS, len(bad_peers)):
                ports.add(h)
            else:
                open_.add(h)
        for h in sorted(ports):
            deciding = _decider([s for p, ss in pairs.items() if h in p for s in ss])
            measured, expected, unit = _fault_numbers(deciding)
            bad_n = sum(1 for _, b in peers[h] if b)
            bad_ports.setdefault(h, {})[rail] = Fault(
                "hca", (h,), rail, (hca_name[(h, rail)],), measured, expected, unit,
                [s.describe() for s in deciding[:8]], f"slow with {bad_n} of {len(peers[h])} peers on rail {rail}")
        for (x, y), bad in sorted(verdict.items()):
            if not bad or x in ports or y in ports:
                continue
            x_ok, y_ok = good_with[x] - {y}, good_with[y] - {x}
            if x_ok and y_ok:
                deciding = _decider(pairs[(x, y)])
                measured, expected, unit = _fault_numbers(deciding)
                faults.append(Fault("path", (x, y), rail, (hca_name[(x, rail)], hca_name[(y, rail)]), measured, expected,
                                    unit, [s.describe() for s in deciding[:4]] +
                                    [f"{x} is fast with {len(x_ok)} other peer(s) on rail {rail}, {y} with {len(y_ok)}"],
                                    "slow only together"))
            else:
                open_.update(h for h, ok in ((x, x_ok), (y, y_ok)) if not ok and h not in ports)
        if open_:
            suspects[rail] = sorted(open_)
    faults.extend(_hosts_or_hcas(bad_ports, facts, rail_faults))
    basis = evidence_basis(found, facts)
    for f in faults:
        f.evidence.append(basis)
    return Localisation(faults, suspects, cleared, found, sum(len(p) for p in by_rail.values()), distrusted)


def evidence_basis(found: list[Sample], facts: Mapping[str, FabricFacts]) -> str:
    """Which evidence the localisation used, said in every fault it names."""
    judged = [s for s in found if s.bad is not None]
    refused = sum(len(f.get("refused") or []) for f in facts.values())
    left = f"; {refused} answer line(s) outside the plan left out" if refused else ""
    disputed = sum(1 for s in found if s.disputed)
    left += f"; {disputed} pair test(s) whose two ends disagree left unjudged" if disputed else ""
    return (f"evidence: {len(judged)} planned pair test(s) of {len(facts)} host(s), each pair once (the client's "
            f"figure, else the server's), judged against line rate, PCIe and the fleet's medians of those "
            f"tests{left}")


def _rails_of(f: FabricFacts | None) -> set[int]:
    return {r for h in (f["hcas"] if f else []) if (r := h["rail"]) is not None}


def _hosts_or_hcas(bad_ports: dict[str, dict[int, Fault]], facts: Mapping[str, FabricFacts],
                   rail_faults: set[int]) -> list[Fault]:
    """A host whose every rail (the rails not slow everywhere) is slow with its peers is the host;
    otherwise each slow port is its HCA."""
    out = []
    for host, by_rail in sorted(bad_ports.items()):
        rails = (_rails_of(facts.get(host)) or set(by_rail)) - rail_faults
        if len(rails) >= 2 and rails <= set(by_rail):
            ports = [by_rail[r] for r in sorted(rails)]
            measured = _median(p.measured for p in ports)
            expected = _median(p.expected for p in ports)
            out.append(Fault("host", (host,), None, tuple(p.hcas[0] for p in ports), measured, expected, ports[0].unit,
                             [e for p in ports for e in p.evidence[:2]],
                             f"slow with its peers on all {len(rails)} rails"))
        else:
            out.extend(by_rail[r] for r in sorted(by_rail))
    return out


def gdr_faults(facts: Mapping[str, FabricFacts]) -> list[Fault]:
    """Hosts where GPUDirect RDMA is expected (a peer-memory module or DMA-BUF) but the traffic
    went through host memory: --use_cuda failed to register GPU memory, or NCCL's channels between
    hosts ran without GDRDMA."""
    out = []
    for host, f in sorted(facts.items()):
        gdr = f.get("gdr")
        if not gdr or gdr.get("expected") is not True:
            continue
        ev: list[str] = []
        hcas: set[str] = set()
        for m in f.get("measurements") or []:
            if m.get("gdr_error"):
                hcas.add(m["hca"])
                if len(ev) < 4:
                    ev.append(f"{m['test']} --use_cuda on {m['hca']} (round {m['round']}, {m['role']} with {m['peer']}): "
                              f"{m['gdr_error']}")
        for g in f.get("nccl") or []:
            if g.get("gdr") is False and g.get("transport", "") and str(g.get("transport")).startswith("NET/IB"):
                if g.get("hca"):
                    hcas.add(str(g["hca"]))
                if len(ev) < 6:
                    ev.append(f"NCCL group {g['group']}: transport {g['transport']} (no GDRDMA)")
        if ev:
            out.append(Fault("gdr", (host,), None, tuple(sorted(hcas)), None, None, "", ev, gdr.get("why") or ""))
    return out


def failed_hosts(facts: Mapping[str, FabricFacts]) -> list[Fault]:
    """Hosts whose fabric processes failed (no figure from any of their steps, or the wave failed)."""
    out = []
    for host, f in sorted(facts.items()):
        errs = list(f.get("errors") or [])
        # a figure refused as impossible is a reading the host gave (fabric.answer.distrusted), not a failure
        ms = [m for m in f.get("measurements") or [] if m.get("error_kind") not in ("missing", "not_run", "impossible")]
        if ms and all(m.get("value") is None for m in ms):
            kinds = sorted({str(m.get("error_kind")) for m in ms})
            errs.append(f"none of its {len(ms)} perftest runs gave a figure ({', '.join(kinds)}): "
                        f"{next((m['error'] for m in ms if m.get('error')), '')}")
        if errs:
            out.append(Fault("failed", (host,), evidence=errs[:6], detail=errs[0]))
    return out


def all_faults(facts: Mapping[str, FabricFacts], t: Thresholds | None = None) -> tuple[Localisation, list[Fault]]:
    """The localisation and every fault it and the GDR check name (what may explain a slow ring)."""
    loc = locate(facts, t)
    return loc, [*loc.faults, *gdr_faults(facts)]


def measured_hosts(facts: Mapping[str, FabricFacts]) -> set[str]:
    return {h for h, f in facts.items() if any(m.get("value") is not None for m in f.get("measurements") or [])}



# ------------------------------------------------------------------------------- NCCL rings

# A ring of one rank per host moves about its slowest link's rate: its bus bandwidth (GB/s) below
# this share of the slowest member port's line rate (Gb/s / 8) is slow.
NCCL_RAIL_RATIO = 0.7


def nccl_floor(g: FabricNcclGroup, facts: Mapping[str, FabricFacts]) -> float | None:
    """The bus bandwidth floor of a communicator across hosts (GB/s), from its members' ports on
    its rail (every rail for a communicator over all GPUs)."""
    rates: list[float] = []
    for m in g["members"]:
        f = facts.get(m)
        hcas = [h for h in (f["hcas"] if f else []) if g["rail"] is None or h["rail"] == g["rail"]]
        rates += [r for h in hcas if (r := h["rate_gbps"]) is not None]
    return round(min(rates) / 8 * NCCL_RAIL_RATIO, 1) if rates else None


NCCL_FLOOR_MIN_BYTES = 64 << 20  # the floor holds from this message size up (a plan may say less)


def largest_size(g: FabricNcclGroup) -> int | None:
    sizes = [r["size_bytes"] for r in g["results"] if r["op"] == "all_reduce" and r["busbw_gbps"] is not None]
    return max(sizes) if sizes else None


def ring_slow(g: FabricNcclGroup, facts: Mapping[str, FabricFacts], min_bytes: int = NCCL_FLOOR_MIN_BYTES) -> bool:
    """Below the floor at its largest all_reduce, when that message is large enough to be judged."""
    floor = nccl_floor(g, facts)
    size = largest_size(g)
    return (g["busbw_gbps"] is not None and floor is not None and size is not None and size >= min_bytes
            and g["busbw_gbps"] < floor)


def floor_min_bytes(spec: Mapping[str, Any] | None) -> int:
    v = ((spec or {}).get("nccl") or {}).get("floor_min_bytes")
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else NCCL_FLOOR_MIN_BYTES


def ring_explained(g: FabricNcclGroup, faults: list[Fault]) -> list[Fault]:
    """The localised faults that slow this ring: on one of its hosts, on its rail, or a path of it."""
    members = set(g["members"])

    def slows(f: Fault) -> bool:
        if f.kind in ("host", "gdr"):
            return f.hosts[0] in members
        on_rail = g["rail"] is None or f.rail == g["rail"]
        if f.kind == "path":
            return on_rail and set(f.hosts) <= members
        return f.kind in ("hca", "rail") and on_rail and bool(set(f.hosts) & members)

    return [f for f in faults if slows(f)]


# ------------------------------------------------------------------------------- NCCL: the members' word

@dataclass
class RingVerdict:
    """A communicator as its members' records agree on it: each member speaks for its own rank, so
    no single record (the longest, the first) decides for the others."""

    group: FabricNcclGroup  # the agreed record: the median member's figures, wrong only by a majority
    claims: int  # members whose record was counted
    wrong_by: list[str]  # members whose own verification found wrong elements
    lone_wrong: list[str]  # ... when they are not a majority: their own claim, judged on them alone
    refused: dict[str, str]  # member -> why its record was not counted (more results than the plan)

    def evidence(self) -> str:
        said = f"{len(self.wrong_by)} of {self.claims} member record(s) report wrong elements" if self.wrong_by \
            else f"all {self.claims} member record(s) verified their data"
        return f"judged on {self.claims} member record(s) of {len(self.group['members'])}: {said} (majority rule)"


def planned_results(spec: Mapping[str, Any] | None) -> int | None:
    """How many results one rank's record may hold: the plan's ops x its sizes (probes/nccl.py:_sizes,
    the step factor api/fabric_nccl.py gives); None when the stored plan does not say."""
    n = (spec or {}).get("nccl")
    if not isinstance(n, dict):
        return None
    lo, hi, ops = n.get("min_bytes"), n.get("max_bytes"), n.get("ops")
    if not isinstance(lo, int) or not isinstance(hi, int) or not isinstance(ops, list) or lo <= 0 or hi < lo:
        return None
    sizes, s = 1, lo // 4 * 4
    while 0 < s < hi and sizes < 64:
        sizes += 1
        s *= NCCL_STEP_FACTOR
    return len(ops) * sizes


NCCL_STEP_FACTOR = 4  # api/fabric_nccl.py hands every rank this step between sizes


def _agreed(name: str, by_host: Mapping[str, FabricNcclGroup], limit: int | None) -> RingVerdict:
    refused = {h: f"NCCL {name}: {len(g['results'])} results where the plan asks for at most {limit}"
               for h, g in by_host.items() if limit is not None and len(g["results"]) > limit}
    counted = {h: g for h, g in by_host.items() if h not in refused} or dict(by_host)
    ranked = sorted(counted.items(), key=lambda kv: (kv[1]["busbw_gbps"] is None, kv[1]["busbw_gbps"] or 0.0, kv[0]))
    measured = [kv for kv in ranked if kv[1]["busbw_gbps"] is not None]
    # a figure most members measured (the low median of theirs); else the record of one that did not
    pool = measured if len(measured) * 2 > len(ranked) else [kv for kv in ranked if kv[1]["busbw_gbps"] is None]
    pick = pool[(len(pool) - 1) // 2][1]
    wrong_by = sorted(h for h, g in counted.items() if g["wrong"])
    majority = len(wrong_by) * 2 > len(counted)
    wrong = statistics.median_low([counted[h]["wrong"] or 0 for h in wrong_by]) if majority else None
    transports = [g["transport"] for g in counted.values() if g["transport"]]
    transport = max(sorted(set(transports)), key=transports.count) if transports else None
    group: FabricNcclGroup = {**pick, "wrong": wrong, "transport": transport}
    return RingVerdict(group, len(counted), wrong_by, [] if majority else wrong_by, refused)


def ring_verdicts(facts: Mapping[str, FabricFacts], spec: Mapping[str, Any] | None = None) -> dict[str, RingVerdict]:
    """Every communicator once, from the records of its own members only (a host's record of a
    group it is not a member of, or of another host's rank, is not read)."""
    claims: dict[str, dict[str, FabricNcclGroup]] = {}
    for host, f in facts.items():
        for g in f.get("nccl") or []:
            if host in g["members"]:
                claims.setdefault(g["group"], {}).setdefault(host, g)
    limit = planned_results(spec)
    return {name: _agreed(name, by_host, limit) for name, by_host in sorted(claims.items())}
