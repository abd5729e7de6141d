"""Whose word a pair figure is, and when a host's word is not taken (pure).

A pair test is measured by two processes, the client and the server, and perftest prints the
same transfer's figure on both ends.  A host speaks only for its own end, so a hostile or broken
host can say anything about the pairs it is in; what it says must not get a peer or the rail
charged (docs/fabric.md, "A forged answer costs its sender only"):

* a figure no port can produce (bandwidth over the reporting port's own line rate, a latency
  under `MIN_LATENCY_US`, a message size the plan did not ask for) is dropped, and its sender
  is named;
* two ends that disagree about one transfer (`disagree`) leave the pair unjudged: neither word
  is taken over the other, so one host's "slow" never charges its peer, the path or the rail;
* a host that disagrees with at least `PINNED_PEERS` distinct peers, each of which agrees with
  someone else, is the one whose word is wrong (`pinned`); a dispute with one peer alone cannot
  say which end lied, and names neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from orchestrator.facts.model import FabricFacts, FabricHca, FabricMeasure

# perftest's payload figure never exceeds the port's active rate (96-98 % of it on a good link);
# the margin covers rounding in the rate ibstat prints
LINE_MARGIN = 1.02
# an RDMA round trip on real hardware takes over half a microsecond; a tenth of that is no reading
MIN_LATENCY_US = 0.1
# the two ends of one transfer print the same figure (within noise): more apart than this, they disagree
AGREE_RATIO = 0.9
# ... and within noise but on either side of the floor is a disagreement about the verdict
NOISE_RATIO = 0.97
PINNED_PEERS = 2  # distinct peers a host must disagree with (each agreeing with others) to be named


def hca_of(facts: Mapping[str, FabricFacts], host: str, hca: str) -> FabricHca | None:
    f = facts.get(host)
    return next((h for h in f["hcas"] if h["hca"] == hca), None) if f else None


def port_on_rail(facts: Mapping[str, FabricFacts], host: str, rail: int) -> str | None:
    """The host's HCA on a rail, by its own discovery: the peer's port is the peer's word, never
    the word of the host that measured against it."""
    f = facts.get(host)
    return next((h["hca"] for h in f["hcas"] if h["rail"] == rail), None) if f else None


def _planned_size(f: FabricFacts | None, kind: str) -> int | None:
    """The message size the probe was told to use (probes/fabric.py: `-s size` for bandwidth, 2 for latency)."""
    plan = f.get("plan") if f else None
    if not plan:
        return None  # imported text, a run stored before plans: nothing said the size
    if kind == "lat":
        return 2
    size = (plan.get("spec") or {}).get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def impossible(facts: Mapping[str, FabricFacts], host: str, m: FabricMeasure) -> str | None:
    """Why a figure this host printed cannot be a measurement, None when it can be one."""
    v = m["value"]
    if v is None:
        return None
    where = f"round {m['round']} rail {m['rail']} {m['test']} with {m['peer'][:80]}"
    want = _planned_size(facts.get(host), m["kind"])
    if want is not None and m["size"] is not None and m["size"] != want:
        return f"{where}: a figure for {m['size']}-byte messages where the plan asked for {want}"
    if m["kind"] == "lat":
        return f"{where}: {v:g} us, under {MIN_LATENCY_US} us (no RDMA round trip is that fast)" \
            if v < MIN_LATENCY_US else None
    own = hca_of(facts, host, m["hca"])
    rate = own["rate_gbps"] if own else None
    if rate is not None and rate > 0 and v > rate * LINE_MARGIN:
        return f"{where}: {v:.1f} Gb/s, over its own port's line rate of {rate:g} Gb/s"
    return None


def unreadable(m: FabricMeasure) -> str:
    """A figure the parser refused (negative, not a number, past any port: facts/normalize/fabric.py)."""
    return f"round {m['round']} rail {m['rail']} {m['test']} with {m['peer'][:80]}: {m['error'] or 'no figure'}"


def disagree(mine: float, theirs: float, mine_bad: bool, theirs_bad: bool) -> bool:
    """Two ends' figures of one transfer disagree: far apart, or apart beyond noise and on either
    side of the floor (one end says slow, the other fast)."""
    lo, hi = sorted((abs(mine), abs(theirs)))
    ratio = lo / hi if hi > 0 else 1.0
    return ratio < AGREE_RATIO or (mine_bad != theirs_bad and ratio < NOISE_RATIO)


@dataclass(frozen=True)
class Dispute:
    """One pair test whose two ends disagree: who said what."""

    a: str
    b: str
    text: str  # "h1:mlx5_0 says 120.0 Gb/s, h2:mlx5_0 says 386.0 Gb/s (round 3 rail 0 ib_write_bw)"


def pinned(disputes: Iterable[Dispute], agreed: Mapping[str, set[str]]) -> dict[str, list[str]]:
    """host -> the disputes that name it: a host that disagrees with `PINNED_PEERS` or more
    distinct peers, each of which agrees with some other host about a pair of its own.
    `agreed`: host -> the peers it has an undisputed judged pair with."""
    by_host: dict[str, list[Dispute]] = {}
    for d in disputes:
        by_host.setdefault(d.a, []).append(d)
        by_host.setdefault(d.b, []).append(d)
    out: dict[str, list[str]] = {}
    for host, ds in sorted(by_host.items()):
        peers = {d.b if d.a == host else d.a for d in ds}
        vouched = [p for p in peers if agreed.get(p, set()) - {host}]
        if len(vouched) >= PINNED_PEERS:
            out[host] = [d.text for d in ds]
    return out
