"""Judge measured copy bandwidth against what the links found can carry (pure).

Inputs: facts["p2p"] (normalize/p2p.py) and, when those probes ran, facts["topology"],
facts["nvlink"] and facts["gpus"] (shapes in docs/facts-gpus.md).  Everything this module needs
from the other sections goes through `_HostLinks` and `_HostPcie`, so a change of their shapes is
adapted in one place.  Without them the probe's own evidence is used: the GPU model (name),
NVML's NVLink P2P status the probe read, and CUDA's P2P performance rank.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from orchestrator.facts import gpu_models
from orchestrator.facts.model import Facts, NvlinkFacts, P2pFacts, P2pGpu
from orchestrator.facts.shown import shown
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.findings import (
    Device,
    DeviceKind,
    Finding,
    Located,
    Severity,
    fault,
    gpu_device,
    gpu_pair,
    limitation,
    located,
    pci_device,
    unknown,
)

# Measured/ceiling ratios below which a pair is "low" when no published floor applies.  NVLink
# copies reach ~0.75-0.8 of the per-direction link figure on healthy machines (H100: 376 of
# 478 GB/s; A100: 262 of 300), PCIe P2P ~0.65-0.8 of the encoded lane rate.
NVLINK_MIN_RATIO = 0.6
PCIE_MIN_RATIO = 0.5
# A copy staged through host memory runs device->host then host->device: without overlap it
# gets half the slower leg.  P2P below that is slower than not using P2P at all.
STAGED_FACTOR = 0.5
ASYMMETRY_RATIO = 0.75  # slower direction / faster direction
OUTLIER_RATIO = 0.7  # pair / median of the host's own pairs of the same link class
CONTENTION_RATIO = 0.6  # all GPUs at once / sum of single-GPU figures
# AzHPC host<->GPU floors per (gen, width); other links: this share of the encoded rate.
HOST_FLOORS = {(4, 16): 21.0, (5, 16): 48.0}
HOST_MIN_RATIO = 0.6
# Its expected value is the pair's floor; the HTML report reads it (present/report/model.py).
BANDWIDTH_LOW = rules.p2p.BANDWIDTH_LOW.id
STICKY = ("CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_TIMEOUT",
          "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_UNKNOWN")


@dataclass(frozen=True)
class Link:
    kind: str | None  # "nvlink" | "pcie" | None (unknown)
    nv: int | None  # bonded NVLink count when known
    level: str | None  # NV#/PIX/PXB/PHB/NODE/SYS when known
    source: str  # where the answer came from: topology | nvlink | nvml-p2p | rank | none


def _positions(order: Any) -> dict[Any, int] | None:
    """bus id -> its first position in `order` (what order.index finds); None when not a list."""
    if not isinstance(order, list):
        return None
    pos: dict[Any, int] = {}
    for i, b in enumerate(order):
        try:
            pos.setdefault(b, i)
        except TypeError:
            pass  # an unhashable entry equals no bus id
    return pos


_TOPO_PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NV = re.compile(r"NV(\d+)")


@lru_cache(maxsize=256)  # a topology cell: a handful of spellings ("NV18", "SYS", ...) in a fleet
def _topology_link(cell: str) -> Link | None:
    m = _NV.fullmatch(cell)
    if m:
        return Link("nvlink", int(m.group(1)), cell, "topology")
    if cell in _TOPO_PCIE:
        return Link("pcie", None, cell, "topology")
    return None


class _HostLinks:
    """What connects two GPUs of one host, from the best source present: each section's bus id ->
    index map is built once (the first time a pair needs that section), not once per pair."""

    def __init__(self, facts: Facts, p2p: P2pFacts) -> None:
        self.facts, self.p2p = facts, p2p
        topo = facts.get("topology")
        devices = (topo.get("devices") if topo else None) or []
        # positions in the dict-filtered device list index the matrix, as before
        self.topo_pos = _positions([d.get("bus_id") for d in devices if isinstance(d, dict)])
        self.matrix = (topo.get("matrix") if topo else None) or []
        self.nvl: NvlinkFacts | None = None
        self.nvl_done = False
        self.nvl_pos: dict[Any, int] | None = None
        self.p2p_pos: dict[Any, int] | None = None
        self.p2p_done = False

    @staticmethod
    def _index(pos: dict[Any, int] | None, bus: Any) -> int | None:
        # A null bus id (text imports without `nvidia-smi -q`) is unknown: it matches nothing, never
        # the first GPU whose bus id is also unknown.
        if pos is None or not bus:
            return None
        try:
            return pos.get(bus)
        except TypeError:
            return None

    def link(self, bus_a: str, bus_b: str) -> Link:
        ia, ib = self._index(self.topo_pos, bus_a), self._index(self.topo_pos, bus_b)
        matrix = self.matrix
        if ia is not None and ib is not None and ia < len(matrix) and ib < len(matrix[ia] or []):
            cell = matrix[ia][ib]
            if isinstance(cell, str):
                found = _topology_link(cell)
                if found is not None:
                    return found
        if not self.nvl_done:
            self.nvl, self.nvl_done = self.facts.get("nvlink"), True
            self.nvl_pos = _positions(self.nvl.get("order") if self.nvl else None)
        nvl = self.nvl
        ia, ib = self._index(self.nvl_pos, bus_a), self._index(self.nvl_pos, bus_b)
        nv = (nvl.get("nv") if nvl else None) or []
        if ia is not None and ib is not None and ia < len(nv) and ib < len(nv[ia] or []):
            links = nv[ia][ib]
            if isinstance(links, int) and links > 0:
                return Link("nvlink", links, f"NV{links}", "nvlink")
            if nvl and nvl.get("supported") is not None:
                return Link("pcie", None, None, "nvlink")
        if not self.p2p_done:
            self.p2p_pos, self.p2p_done = _positions(self.p2p.get("order")), True
        ia, ib = self._index(self.p2p_pos, bus_a), self._index(self.p2p_pos, bus_b)
        if ia is None or ib is None:
            return Link(None, None, None, "none")
        flag = _cell(self.p2p.get("nvml_nvlink"), ia, ib)
        if flag is True:
            return Link("nvlink", None, None, "nvml-p2p")
        if flag is False:
            return Link("pcie", None, None, "nvml-p2p")
        return Link(None, None, None, "none")


def _cell(m: Any, a: int, b: int) -> Any:
    try:
        return m[a][b]
    except (TypeError, IndexError, KeyError):
        return None


def _nvml_pcie(facts: Facts, bus: str) -> tuple[int, int] | None:
    """NVML's (generation, width) maximum of a GPU's host link, None when NVML does not say."""
    gpus = facts.get("gpus")
    for g in (gpus.get("list") if gpus else None) or []:
        if bus and isinstance(g, dict) and g.get("bus_id") == bus:
            pcie = g.get("pcie")
            gen = (pcie.get("gen_max") or pcie.get("gen_current")) if pcie else None
            width = (pcie.get("width_max") or pcie.get("width_current")) if pcie else None
            if gen and width:
                return int(gen), int(width)
    return None


class _HostPcie:
    """The (generation, width) a GPU's host link should run at: NVML's maximum, else the model's;
    NVML's answer per bus id looked up once per host (every pair asks twice)."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.nvml: dict[Any, tuple[int, int] | None] = {}

    def get(self, bus: str | None, model: gpu_models.GpuModel | None) -> tuple[int | None, int | None]:
        nvml = None
        if bus is not None:  # else a text import that names no bus id: no link of its own to read
            if bus not in self.nvml:
                self.nvml[bus] = _nvml_pcie(self.facts, bus)
            nvml = self.nvml[bus]
        if nvml is not None:
            return nvml
        if model is not None:
            return model.pcie_gen, model.pcie_width
        return None, None


def _platform_blocks_p2p(facts: Facts) -> str | None:
    """MIG or a virtual machine: no P2P there is a platform limitation, not a fault."""
    gpus = facts.get("gpus")
    if gpus and gpus.get("mig_enabled_any"):
        return "MIG is enabled: CUDA peer access is unavailable between MIG instances"
    if gpus and gpus.get("virtualized"):
        return "GPUs are virtualized (vGPU or pass-through): peer access depends on the hypervisor"
    return None


def _name(i: int, bus: str | None) -> str:
    # an imported benchmark (nvbandwidth) may not print bus ids: unknown, never "None"
    return f"GPU{i} ({bus or 'bus id unknown'})"


def _gpu_at(i: int, bus: str | None) -> Located:
    """A measured GPU as a finding's subject: its text and the device it is."""
    return Located(_name(i, bus), (gpu_device({"index": i if i >= 0 else None, "bus_id": bus}),))


def _pair_at(p: dict[str, Any]) -> Located:
    """A measured pair (source first) as a finding's subject: its text and the two GPUs."""
    return Located(_pair_name(p), (_pair(p),))


def _pair(p: dict[str, Any]) -> Device:
    return gpu_pair({"index": p.get("src"), "bus_id": p.get("src_bus_id")},
                    {"index": p.get("dst"), "bus_id": p.get("dst_bus_id")})


def _pair_name(p: dict[str, Any]) -> str:
    if not (p["src_bus_id"] or p["dst_bus_id"]):
        return f"GPU{p['src']}->GPU{p['dst']} (bus ids unknown)"
    return f"GPU{p['src']}->GPU{p['dst']} ({p['src_bus_id'] or '?'} -> {p['dst_bus_id'] or '?'})"


@dataclass
class _PairJudgement:
    pair: dict[str, Any]
    link: Link
    ceiling: float | None
    floor: float | None
    floor_source: str
    nv: int | None = None  # bonded links the judgement assumed (None: unknown)


def _nvlink_judgement(model: gpu_models.GpuModel,
                      link_nv: int | None) -> tuple[float | None, float | None, str, int | None]:
    """(ceiling, floor, where the floor comes from, links assumed) for an NVLink pair."""
    # models with a published floor sit on an NVSwitch fabric: every pair has all links
    nv = model.nvlink_links if link_nv is None and model.p2p_floor_gbps else link_nv
    if nv is None:
        # link count unknown (no nvlink/topology facts) on a mesh or bridge: judge against
        # one link, the least any NVLink pair has
        return (None, round(model.nvlink_link_gbps * NVLINK_MIN_RATIO, 1),
                f"{NVLINK_MIN_RATIO:.0%} of one {model.nvlink_link_gbps} GB/s link (link count unknown)", nv)
    if model.p2p_floor_gbps:
        return (round(nv * model.nvlink_link_gbps, 1),
                round(model.p2p_floor_gbps * min(1.0, nv / model.nvlink_links), 1),
                f"published floor for {model.key} NVLink P2P", nv)
    ceiling = round(nv * model.nvlink_link_gbps, 1)
    return ceiling, round(ceiling * NVLINK_MIN_RATIO, 1), f"{NVLINK_MIN_RATIO:.0%} of NV{nv} x {model.nvlink_link_gbps} GB/s", nv


def _pcie_judgement(gens: tuple[tuple[int | None, int | None], ...]) -> tuple[float | None, float | None, str]:
    """(ceiling, floor, where the floor comes from) for a PCIe pair whose ends run at `gens`."""
    rates = [gpu_models.pcie_gbps(g, w) for g, w in gens]
    if all(r is not None for r in rates):
        ceiling = min(r for r in rates if r is not None)
        return ceiling, round(ceiling * PCIE_MIN_RATIO, 1), f"{PCIE_MIN_RATIO:.0%} of PCIe Gen{gens[0][0]} x{gens[0][1]}"
    return None, None, ""


def _judge_pairs(facts: Facts, p2p: P2pFacts, host_pcie: _HostPcie,
                 p2p_min_gbps: float | None) -> list[_PairJudgement]:
    gpus = p2p.get("gpus") or []
    out = []
    links: _HostLinks | None = None
    # every NVLink pair of a host with the same model and link count is judged alike
    nvlink_memo: dict[tuple[str, int | None], tuple[float | None, float | None, str, int | None]] = {}
    # and every PCIe pair whose two ends run at the same (generation, width)s
    pcie_memo: dict[tuple[tuple[int | None, int | None], ...], tuple[float | None, float | None, str]] = {}
    for p in p2p.get("pairs") or []:
        a = p["src"]
        if links is None:
            links = _HostLinks(facts, p2p)
        link = links.link(p["src_bus_id"], p["dst_bus_id"])
        model = gpu_models.lookup(gpus[a].get("name")) if a < len(gpus) else None
        ceiling = floor = None
        nv = None
        source = ""
        if link.kind == "nvlink" and model is not None and model.nvlink_links:
            key = (model.key, link.nv)  # model keys are unique (tests/facts/test_normalize_speed.py)
            if key not in nvlink_memo:
                nvlink_memo[key] = _nvlink_judgement(model, link.nv)
            ceiling, floor, source, nv = nvlink_memo[key]
        elif link.kind == "pcie":
            gens = (host_pcie.get(p["src_bus_id"], model), host_pcie.get(p["dst_bus_id"], model))
            if gens not in pcie_memo:
                pcie_memo[gens] = _pcie_judgement(gens)
            ceiling, floor, source = pcie_memo[gens]
        if p2p_min_gbps is not None:
            floor = p2p_min_gbps
            source = "expectation p2p_min_gbps"
        out.append(_PairJudgement(p, link, ceiling, floor, source, nv))
    return out


def pair_floors(facts: Facts, p2p_min_gbps: float | None = None) -> dict[tuple[str, str], float]:
    """The floor `p2p.bandwidth.low` judges each measured GPU pair against, by (source bus id,
    destination bus id) in lower case; pairs with no floor (link or model unknown) are left out.
    The HTML report's heat map reads this, so its percentages are the check's."""
    p2p = facts.get("p2p")
    if not isinstance(p2p, dict):
        return {}
    out = {}
    for j in _judge_pairs(facts, p2p, _HostPcie(facts), p2p_min_gbps):
        if j.floor is not None:
            out[(str(j.pair["src_bus_id"]).lower(), str(j.pair["dst_bus_id"]).lower())] = j.floor
    return out


def check_p2p(view: HostView) -> Iterable[Finding]:
    p2p = view.measured("p2p")
    if not view.outcomes or p2p is None:  # a bandwidth figure is judged only from a run that says it ran
        return
    host = view.name
    gpus = p2p.get("gpus") or []
    host_pcie = _HostPcie(view.facts)
    judged = _judge_pairs(view.facts, p2p, host_pcie, view.expect.p2p_min_gbps)
    yield from _not_possible(view, judged, gpus)
    low: set[tuple[int, int]] = set()
    for j in judged:
        p, bw = j.pair, j.pair.get("ce_gbps")
        if not p["peer_enabled"] or bw is None:
            continue
        ratio = round(bw / j.ceiling, 3) if j.ceiling else None
        if j.floor is not None and bw < j.floor:
            low.add((p["src"], p["dst"]))
            yield fault(BANDWIDTH_LOW, host, _pair_at(p),
                        f"P2P copy {bw:.1f} GB/s is below the {j.floor:.1f} GB/s floor ({j.floor_source})",
                        expected=j.floor, actual=bw,
                        evidence=[f"link {j.link.level or j.link.kind} via {j.link.source}",
                                  f"ceiling {j.ceiling} GB/s, measured/ceiling {ratio}"],
                        hint="check `nvidia-smi nvlink -s` and -e (errors, down links), fabric manager state, "
                             "and rerun; a pair far below its siblings points at one link or switch port")
        staged = _staged_estimate(gpus, p["src"], p["dst"])
        if staged is not None and bw < staged:
            yield fault(rules.p2p.SLOWER_THAN_HOST.id, host, _pair_at(p),
                        f"P2P copy {bw:.1f} GB/s is slower than staging through host memory (~{staged:.1f} GB/s)",
                        expected=staged, actual=bw,
                        evidence=[f"d2h GPU{p['src']} {gpus[p['src']].get('d2h_gbps')} GB/s",
                                  f"h2d GPU{p['dst']} {gpus[p['dst']].get('h2d_gbps')} GB/s",
                                  f"link {j.link.level or j.link.kind} via {j.link.source}"],
                        hint="the peer path is degraded (a slow NVLink, ACS redirect or an IOMMU on the path); "
                             "NCCL would do better without P2P here")
    yield from _asymmetric(host, judged)
    yield from _outliers(host, judged, low)
    yield from _host_links(view, gpus, host_pcie)
    yield from _contention(view, p2p)
    yield from _mismatch(host, p2p)
    yield from _run_state(host, p2p, gpus)


def _staged_estimate(gpus: list[P2pGpu], a: int, b: int) -> float | None:
    try:
        d2h, h2d = gpus[a].get("d2h_gbps"), gpus[b].get("h2d_gbps")
    except IndexError:
        return None
    if d2h is None or h2d is None:
        return None
    return round(min(d2h, h2d) * STAGED_FACTOR, 1)


def _not_possible(view: HostView, judged: list[_PairJudgement], gpus: list[P2pGpu]) -> Iterable[Finding]:
    host = view.name
    dead: list[_PairJudgement] = []
    product: list[_PairJudgement] = []
    for j in judged:
        p = j.pair
        if p["peer_enabled"]:
            continue
        model = gpu_models.lookup(gpus[p["src"]].get("name")) if p["src"] < len(gpus) else None
        if (model is not None and not model.p2p_supported) or p.get("peer_error") == "CUDA_ERROR_TOO_MANY_PEERS":
            product.append(j)
        elif j.link.kind == "nvlink" or p.get("peer_error"):
            dead.append(j)
    if product:
        names = sorted({gpus[j.pair["src"]].get("name") or "?" for j in product})
        peers = any(j.pair.get("peer_error") == "CUDA_ERROR_TOO_MANY_PEERS" for j in product)
        why = ("the GPUs ran out of peer mappings (CUDA_ERROR_TOO_MANY_PEERS)" if peers
               else f"P2P is not supported by this product ({', '.join(names)})")
        yield limitation(rules.p2p.NOT_POSSIBLE.id, host, located(f"{len(product)} GPU pairs", (_pair(j.pair) for j in product)),
                         f"{why}: copies go through host memory",
                         actual="CUDA_ERROR_TOO_MANY_PEERS" if peers else "cuDeviceCanAccessPeer=0",
                         evidence=[_pair_name(j.pair) for j in product[:8]],
                         hint="platform limitation of consumer cards; plan for host-staged GPU-to-GPU traffic")
    if dead:
        blocker = _platform_blocks_p2p(view.facts)
        what = "links say P2P should work but CUDA peer access is unavailable"
        ev = [f"{_pair_name(j.pair)}: link {j.link.level or j.link.kind} via {j.link.source}, "
              f"can_access_peer={j.pair.get('can_access_peer')}, error={j.pair.get('peer_error')}" for j in dead[:8]]
        subject = (_pair_at(dead[0].pair) if len(dead) == 1 else
                   located(f"{len(dead)} GPU pairs", (_pair(j.pair) for j in dead)))
        if blocker:
            yield limitation(rules.p2p.NOT_POSSIBLE.id, host, subject, f"{what}; {blocker}", evidence=ev,
                             hint="expected on this platform; use bare metal or full GPUs for P2P")
        else:
            yield fault(rules.p2p.NOT_POSSIBLE.id, host, subject, what, expected="peer access on linked pairs",
                        actual="cuDeviceCanAccessPeer=0 or enabling failed", evidence=ev,
                        hint="peer access is switched off (pool policy, driver registry key, ACS/IOMMU or "
                             "fabric manager not running); check `nvidia-smi topo -p2p r` and fabric state")


def _asymmetric(host: str, judged: list[_PairJudgement]) -> Iterable[Finding]:
    enabled = {(j.pair["src"], j.pair["dst"]): j for j in judged if j.pair["peer_enabled"]}
    bw = {pair: j.pair.get("ce_gbps") for pair, j in enabled.items()}
    for (a, b), x in sorted(bw.items()):
        y = bw.get((b, a))
        if a > b or x is None or y is None or max(x, y) <= 0:
            continue
        if min(x, y) / max(x, y) < ASYMMETRY_RATIO:
            j = enabled[(a, b)]
            yield fault(rules.p2p.ASYMMETRIC.id, host,
                        Located(f"GPU{a}<->GPU{b} ({j.pair['src_bus_id']} <-> {j.pair['dst_bus_id']})", (_pair(j.pair),)),
                        f"P2P is asymmetric: {a}->{b} {x:.1f} GB/s, {b}->{a} {y:.1f} GB/s",
                        severity=Severity.WARN, expected=f">= {ASYMMETRY_RATIO:.0%} of the faster direction",
                        actual=round(min(x, y) / max(x, y), 3),
                        hint="one direction of the path is degraded (a lane or link trained down, errors)")


def _class_key(j: _PairJudgement) -> str | None:
    """Pairs that should perform alike; None when that cannot be told (NVLink count unknown)."""
    if j.link.kind == "nvlink":
        return f"NV{j.nv}" if j.nv else None
    if j.link.kind == "pcie":
        return f"PCIe {j.link.level or 'P2P'}"
    return None


def _outliers(host: str, judged: list[_PairJudgement], low: set[tuple[int, int]]) -> Iterable[Finding]:
    classes: dict[str, list[_PairJudgement]] = {}
    for j in judged:
        key = _class_key(j)
        if j.pair["peer_enabled"] and j.pair.get("ce_gbps") is not None and key is not None:
            classes.setdefault(key, []).append(j)
    for key, members in sorted(classes.items()):
        if len(members) < 3:
            continue
        med = statistics.median(j.pair["ce_gbps"] for j in members)
        for j in members:
            p = j.pair
            if (p["src"], p["dst"]) in low:
                continue  # already reported as low; one finding per cause
            if p["ce_gbps"] < med * OUTLIER_RATIO:
                yield fault(rules.p2p.OUTLIER.id, host, _pair_at(p),
                            f"P2P copy {p['ce_gbps']:.1f} GB/s is far below this host's other {key} pairs "
                            f"(median {med:.1f} GB/s)", severity=Severity.WARN,
                            expected=round(med * OUTLIER_RATIO, 1), actual=p["ce_gbps"],
                            evidence=[f"{len(members)} pairs of class {key}"],
                            hint="compare link error counters and states of this pair with the others")


def _host_links(view: HostView, gpus: list[P2pGpu], host_pcie: _HostPcie) -> Iterable[Finding]:
    for g in gpus:
        model = gpu_models.lookup(g.get("name"))
        gen, width = host_pcie.get(g["bus_id"], model)
        if view.expect.host_gpu_min_gbps is not None:
            floor, source = view.expect.host_gpu_min_gbps, "expectation host_gpu_min_gbps"
        elif gen and width and (gen, width) in HOST_FLOORS:
            floor, source = HOST_FLOORS[(gen, width)], f"AzHPC floor for PCIe Gen{gen} x{width}"
        elif gen and width and gpu_models.pcie_gbps(gen, width):
            rate = gpu_models.pcie_gbps(gen, width) or 0.0
            floor, source = round(rate * HOST_MIN_RATIO, 1), f"{HOST_MIN_RATIO:.0%} of PCIe Gen{gen} x{width}"
        else:
            continue
        for key, bw, label in (("h2d_gbps", g.get("h2d_gbps"), "host->GPU"), ("d2h_gbps", g.get("d2h_gbps"), "GPU->host")):
            if bw is not None and bw < floor:
                # the direction is part of the subject: the two directions are two findings
                # (drift, overrides and the report key findings by id, host and subject)
                gpu = _gpu_at(g["index"], g["bus_id"])
                yield fault(rules.p2p.HOST_BANDWIDTH_LOW.id, view.name, Located(f"{gpu.text} {label}", gpu.devices),
                            f"{label} pinned copy {bw:.1f} GB/s is below {floor:.1f} GB/s ({source})",
                            expected=floor, actual=bw, evidence=[f"p2p.gpus[{g['index']}].{key}"],
                            hint="check the GPU's PCIe link (gen/width downtrained, `lspci -vv` LnkSta), "
                                 "NUMA placement and IOMMU mode")


def shared_uplinks(facts: Facts, buses: list[str]) -> list[list[str]]:
    """Groups of the measured GPUs that share one uplink by design (facts["pcie"]["uplinks"])."""
    groups = []
    pcie = facts.get("pcie")
    for up in (pcie.get("uplinks") if pcie else None) or []:
        if isinstance(up, dict):
            members = [b for b in up.get("gpus") or [] if b in buses]
            if len(members) > 1:
                groups.append(members)
    return groups


def _contention(view: HostView, p2p: P2pFacts) -> Iterable[Finding]:
    a2h = p2p.get("all_to_host")
    if not isinstance(a2h, dict) or len(a2h.get("gpus") or []) < 2:
        return
    shared = shared_uplinks(view.facts, a2h["gpus"])
    for d in ("d2h", "h2d"):
        total, ref = a2h.get(f"{d}_total_gbps"), a2h.get(f"{d}_parallel_gbps")
        if total is None or not ref or total >= ref * CONTENTION_RATIO:
            continue
        subject = located(f"{len(a2h['gpus'])} GPUs to host ({d})",
                          (pci_device(DeviceKind.GPU, b) for b in a2h["gpus"]))
        message = (f"all GPUs at once reach {total:.1f} GB/s, {total / ref:.0%} of the {ref:.1f} GB/s "
                   f"they would without a shared bottleneck")
        evidence = [f"gpus {', '.join(a2h['gpus'])}"] + [f"shared uplink: {', '.join(g)}" for g in shared]
        if shared:
            # the PCIe tree shows GPUs behind common uplinks: the box is built that way
            yield limitation(rules.p2p.UPLINK_CONTENTION.id, view.name, subject,
                             message + "; GPUs share PCIe uplinks by design", expected=round(ref * CONTENTION_RATIO, 1),
                             actual=total, evidence=evidence,
                             hint="expected for this board; place data loading and NIC traffic with it in mind")
        else:
            yield fault(rules.p2p.UPLINK_CONTENTION.id, view.name, subject, message, severity=Severity.WARN,
                        expected=round(ref * CONTENTION_RATIO, 1), actual=total, evidence=evidence,
                        hint="GPUs share an oversubscribed PCIe uplink (switch or root port) or the host's "
                             "memory/IOMMU path; compare with the pcie section's uplink groups")


def _mismatch(host: str, p2p: P2pFacts) -> Iterable[Finding]:
    seen = set()
    for m in p2p.get("mismatches") or []:
        if m.get("src") is None:
            subject = located("all GPUs to/from host",
                              (pci_device(DeviceKind.GPU, b) for b in p2p.get("order") or []))
        elif m["src"] == m["dst"]:
            subject = _gpu_at(m["src"], m["src_bus_id"])
        else:
            subject = Located(f"GPU{m['src']}->GPU{m['dst']} ({m['src_bus_id']} -> {m['dst_bus_id']})", (_pair(m),))
        key = (subject.text, m.get("copy"))
        if key in seen:
            continue
        seen.add(key)
        yield fault(rules.p2p.DATA_MISMATCH.id, host, subject,
                    f"copied data differs from what was written ({shown(m.get('copy'), 'unnamed')} copy) although CUDA reported success",
                    expected="identical bytes", actual="pattern mismatch",
                    hint="silent corruption: check dmesg for IOMMU/DMAR faults and XIDs, ACS settings, and the "
                         "link's error counters; do not run jobs on this path")


def _run_state(host: str, p2p: P2pFacts, gpus: list[P2pGpu]) -> Iterable[Finding]:
    guard = p2p.get("guard") or {}
    for bus, nproc in sorted((guard.get("busy") or {}).items()):
        idx = (p2p.get("order") or []).index(bus) if bus in (p2p.get("order") or []) else -1
        if guard.get("forced"):
            msg = f"measured although {nproc} other process(es) ran on it: its figures may be low"
        else:
            msg = f"skipped: {nproc} other process(es) run on it"
        yield unknown(rules.p2p.GPU_BUSY.id, host, _gpu_at(idx, bus), msg, actual=nproc,
                      hint="rerun when the GPU is idle, or with force to measure anyway")
    if not guard.get("ran") and guard.get("reason"):
        yield unknown(rules.p2p.GUARD_UNAVAILABLE.id, host, "busy-GPU guard", str(guard["reason"]),
                      hint="install or expose libnvidia-ml.so.1 so busy GPUs are left alone")
    for g in gpus:
        if g.get("status") == "error":
            yield unknown(rules.p2p.GPU_ERROR.id, host, _gpu_at(g["index"], g["bus_id"]),
                          f"could not be measured: {shown(g.get('error'), 'no reason given')}", severity=Severity.WARN,
                          actual=g.get("error"),
                          hint="out of memory: another job holds the GPU memory; other errors: see the raw run")
    for e in p2p.get("errors") or []:
        if e.get("error") in STICKY:
            yield fault(rules.p2p.CUDA_ERROR.id, host, str(e.get("where")),
                        f"the GPU faulted during the measurement: {shown(e.get('message') or e.get('error'))}",
                        actual=e.get("error"), evidence=[str(e.get("where"))],
                        hint="check dmesg for XID errors; the measurement stopped there")
    if p2p.get("budget_exhausted"):
        left = p2p.get("not_reached") or []
        yield unknown(rules.p2p.BUDGET_EXHAUSTED.id, host, "p2p measurement",
                      f"time budget ran out: {len(left)} measurement(s) not reached", severity=Severity.WARN,
                      actual=len(left), evidence=left[:10],
                      hint="raise budget_s, lower size_mb/repeats, or restrict pairs (nvlink or a list)")


CHECKS = [check_p2p]

# The rules this module's checks raise, each declared in verdict/rules/<prefix>.py (JUnit lists them as cases).
FINDING_IDS: tuple[str, ...] = (
    rules.p2p.NOT_POSSIBLE.id,
    rules.p2p.BANDWIDTH_LOW.id,
    rules.p2p.SLOWER_THAN_HOST.id,
    rules.p2p.ASYMMETRIC.id,
    rules.p2p.OUTLIER.id,
    rules.p2p.UPLINK_CONTENTION.id,
    rules.p2p.DATA_MISMATCH.id,
    rules.p2p.HOST_BANDWIDTH_LOW.id,
    rules.p2p.CUDA_ERROR.id,
    rules.p2p.GPU_ERROR.id,
    rules.p2p.GPU_BUSY.id,
    rules.p2p.GUARD_UNAVAILABLE.id,
    rules.p2p.BUDGET_EXHAUSTED.id,
)
