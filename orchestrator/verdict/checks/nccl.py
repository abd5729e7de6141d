"""Judge NCCL all_reduce bus bandwidth, transport, data and settings (pure).

Inputs: facts["nccl"] (normalize/nccl.py: the nccl probe, or nccl-tests output imported as text)
and, when those ran, facts["p2p"] (the host-staging rate and the pairs, for the cross-check),
facts["nvlink"] / facts["topology"] (is this an NVLink box) and facts["gpus"] (MIG, virtualized).
Floors: facts/gpu_models.py (NCCL_ALLREDUCE_FLOORS_GBPS per model and GPU count; PCIe boxes from
the host's own staging rate; other boxes against their peers, check_nccl_peers).  The figure judged is the bus bandwidth of the largest all_reduce
message, as the health checks that publish the floors judge it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.facts import gpu_models
from orchestrator.facts.model import Facts, NcclFacts
from orchestrator.facts.normalize.nccl import NETWORK_ONLY_PREFIXES
from orchestrator.facts.shown import shown
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import FleetReads, HostView
from orchestrator.verdict.checks.p2p import STAGED_FACTOR, pair_floors
from orchestrator.verdict.findings import Finding, Severity, fault, limitation, unknown
from orchestrator.verdict.rule import Unjudged

BUSBW_LOW = rules.nccl.BUSBW_LOW.id
SLOWER_THAN_PCIE = rules.nccl.SLOWER_THAN_PCIE.id
TRANSPORT_UNEXPECTED = rules.nccl.TRANSPORT_UNEXPECTED.id
ENV_OVERRIDE = rules.nccl.ENV_OVERRIDE.id
DATA_WRONG = rules.nccl.DATA_WRONG.id
ERROR = rules.nccl.ERROR.id
OFF_NVLINK = ("SHM", "NET")
PEERS_MIN = 3  # hosts of one GPU model and count before their median is a floor
PEER_RATIO = 0.7  # a host below this share of its peers' median is low  # transports that mean NCCL is not using the GPUs' own links
SUBJECT = "NCCL all_reduce"
# The peer comparison's subject: nccl.busbw.low is raised by the host check (a published or
# host-staging floor) and by the fleet check (peers), and `probe merge` judges only the latter again.
PEERS_SUBJECT = "NCCL all_reduce vs peers"


def _nccl(view: HostView) -> NcclFacts | None:
    nccl = view.facts.get("nccl")
    if not isinstance(nccl, dict):
        return None
    if nccl.get("source") == "probe" and not view.ran("nccl"):
        return None
    return nccl


def _largest(nccl: NcclFacts) -> tuple[float, int] | None:
    """(bus bandwidth, size in bytes) of the largest out-of-place all_reduce with a bus bandwidth."""
    rows = [(r["size_bytes"], bw) for r in nccl.get("results") or [] if isinstance(r, dict) and r.get("op") == "all_reduce"
            and not r.get("in_place") and isinstance(bw := r.get("busbw_gbps"), (int, float))]
    best = max(rows, key=lambda row: row[0]) if rows else None
    return (float(best[1]), int(best[0])) if best else None


def _nvlink_box(facts: Facts, model: gpu_models.GpuModel | None) -> bool | None:
    """True when the GPUs have NVLink between them (links up per NVML, NV# in topo, or an SXM
    model), False for a PCIe box, None when nothing says."""
    nvl = facts.get("nvlink")
    up = nvl.get("links_up_total") if isinstance(nvl, dict) else None
    if isinstance(up, int) and up > 0:
        return True
    topo = facts.get("topology")
    cells = [c for row in (topo.get("matrix") if topo else None) or [] for c in row or [] if isinstance(c, str)]
    if any(c.startswith("NV") for c in cells):
        return True
    p2p = facts.get("p2p")
    nv = p2p.get("nvml_nvlink") if isinstance(p2p, dict) else None
    if isinstance(nv, list) and any(v is True for row in nv if isinstance(row, list) for v in row):
        return True
    if model is not None:
        return bool(model.nvlink_links) and not model.nvlink_bridge
    if cells or isinstance(nvl.get("links_up_total") if nvl else None, int):
        return False
    return None


def staging_rate(facts: Facts) -> tuple[float | None, str]:
    """What one copy staged through host memory moves on this host (GB/s) and where it comes from:
    the p2p probe's staged pairs when P2P was off, else half the slower host link (p2p STAGED_FACTOR)."""
    p2p = facts.get("p2p")
    if not isinstance(p2p, dict):
        return None, "p2p did not run"
    staged = [p["ce_gbps"] for p in p2p.get("pairs") or [] if isinstance(p, dict) and p.get("staged")
              and isinstance(p.get("ce_gbps"), (int, float))]
    if staged:
        return round(statistics.median(staged), 1), f"median of {len(staged)} GPU pairs staged through host memory (p2p)"
    h2d = [x for g in p2p.get("gpus") or [] if isinstance(x := g.get("h2d_gbps"), (int, float))]
    d2h = [x for g in p2p.get("gpus") or [] if isinstance(x := g.get("d2h_gbps"), (int, float))]
    if h2d and d2h:
        rate = round(min(statistics.median(h2d), statistics.median(d2h)) * STAGED_FACTOR, 1)
        return rate, f"{STAGED_FACTOR:g} x the slower host link (p2p h2d/d2h medians)"
    return None, "p2p measured no host copy"


def _p2p_says(facts: Facts) -> str:
    """The cross-check: what the p2p pairs say about the links NCCL runs on."""
    p2p = facts.get("p2p")
    if not isinstance(p2p, dict) or not p2p.get("pairs"):
        return "p2p did not measure the GPU pairs: run it to tell the links from NCCL's configuration"
    pairs = [p for p in p2p["pairs"] if isinstance(p, dict)]
    off = [p for p in pairs if not p.get("peer_enabled")]
    if off:
        return f"p2p: peer access is off on {len(off)} of {len(pairs)} GPU pairs (copies staged through host memory)"
    floors = pair_floors(facts)
    low = [p for p in pairs if isinstance(p.get("ce_gbps"), (int, float))
           and p["ce_gbps"] < floors.get((str(p["src_bus_id"]).lower(), str(p["dst_bus_id"]).lower()), 0.0)]
    if low:
        return f"p2p: {len(low)} of {len(pairs)} GPU pairs copy below their floor: the links themselves are slow"
    ce = [p["ce_gbps"] for p in pairs if isinstance(p.get("ce_gbps"), (int, float))]
    tail = f" (slowest pair {min(ce):.0f} GB/s)" if ce else ""
    return (f"p2p: every pair has peer access and copies at its floor{tail}: the links are fine, which points at "
            "NCCL's configuration (settings, plugins) or the fabric manager, not the links")


def _platform(facts: Facts, nccl: NcclFacts) -> str | None:
    if nccl.get("limitation") and "MIG" in str(nccl["limitation"]):
        return str(nccl["limitation"])
    if nccl.get("virtualization_mode") in (1, 2):  # what the nccl probe's own NVML query saw
        return "GPUs are virtualized (vGPU or pass-through): whether P2P reaches the guest is the hypervisor's choice"
    gpus = facts.get("gpus")
    if gpus and gpus.get("mig_enabled_any"):
        return "MIG is enabled: NCCL cannot use P2P between MIG instances"
    if gpus and gpus.get("virtualized"):
        return "GPUs are virtualized (vGPU or pass-through): whether P2P reaches the guest is the hypervisor's choice"
    host = facts.get("host")
    virt = host.get("virtualization") if host else None
    if virt and virt.get("virtualized"):
        return "the host is a virtual machine: whether P2P reaches the guest is the hypervisor's choice"
    return None


@dataclass(frozen=True)
class _Plan:
    """What the all_reduce figures of one host allow: the ids its facts cannot judge (with why) and
    the figures the judging steps read.  One home for the order of those steps, so check_nccl and
    coverage (NEEDS' `unjudged`) can never disagree about what was judged."""

    why_not: dict[str, str]
    n: int = 0
    busbw: float = 0.0
    size: int = 0
    model: gpu_models.GpuModel | None = None
    nvlink: bool | None = None
    off: tuple[str, ...] = ()
    stage: float | None = None
    stage_src: str = ""
    floor: float | None = None
    floor_src: str = ""


_MEASURED = (TRANSPORT_UNEXPECTED, SLOWER_THAN_PCIE, BUSBW_LOW)


def _plan(facts: Facts, nccl: NcclFacts) -> _Plan:
    why: dict[str, str] = {}
    if not any(isinstance(r, dict) and isinstance(r.get("wrong"), int) for r in nccl.get("results") or []):
        why[DATA_WRONG] = "no result was verified"
    if nccl.get("limitation"):
        return _Plan({**why, **dict.fromkeys(_MEASURED, f"not measured: {nccl['limitation']}")})
    n = nccl.get("gpu_count")
    best = _largest(nccl)
    if not isinstance(n, int) or n < 2:
        return _Plan({**why, **dict.fromkeys(_MEASURED, "fewer than 2 GPUs: nothing moves between GPUs "
                                                        "(bus bandwidth is 0 by definition)")})
    if best is None:
        return _Plan({**why, **dict.fromkeys(_MEASURED, "no out-of-place all_reduce was measured")})
    key = nccl.get("gpu_model")
    model = next((m for m in gpu_models.MODELS if m.key == key), None)  # the normalizer wrote a model key
    if model is None:
        model = _model_from_gpus(facts)
    nvlink = _nvlink_box(facts, model)
    transport = nccl.get("transport")
    transports = set(nccl.get("transports") or ([transport] if transport else []))
    off = tuple(sorted(transports & set(OFF_NVLINK)))
    plan = _Plan(why, n=n, busbw=best[0], size=best[1], model=model,
                 nvlink=nvlink, off=off)
    if nvlink is None:
        why.update(dict.fromkeys(_MEASURED, "nothing says whether the GPUs have NVLink between them"))
        return plan
    if nvlink and off:
        # the transport is the cause: a low figure on SHM/NET says nothing more
        why.update(dict.fromkeys((SLOWER_THAN_PCIE, BUSBW_LOW),
                                 f"NCCL ran over {'/'.join(off)}: judged as {TRANSPORT_UNEXPECTED}"))
        return plan
    stage, stage_src = staging_rate(facts)
    plan = replace(plan, stage=stage, stage_src=stage_src)
    if not nvlink:
        why[SLOWER_THAN_PCIE] = "not an NVLink box"
    elif stage is None:
        why[SLOWER_THAN_PCIE] = f"no host-staging rate to compare with ({stage_src})"
    elif plan.busbw <= stage:
        why[BUSBW_LOW] = f"{SLOWER_THAN_PCIE} holds (the stronger statement of the same low figure)"
        return plan
    floor, floor_src = _floor(model, n, nvlink, stage, stage_src)
    if floor is None and not _peer_candidate(nccl, n, plan.size):
        why[BUSBW_LOW] = (f"no floor for {n}x {model.key if model else 'this GPU model'}"
                          + (f" and no host-staging rate ({stage_src})" if not nvlink else ""))
    return replace(plan, floor=floor, floor_src=floor_src)


def unjudged(facts: Facts) -> dict[str, str]:
    """The nccl ids this host's facts cannot judge, and why (coverage: never "passed")."""
    nccl = facts.get("nccl")
    return _plan(facts, nccl).why_not if isinstance(nccl, dict) else {}


def check_nccl(view: HostView) -> Iterable[Finding]:
    nccl = _nccl(view)
    if nccl is None:
        return
    host, facts = view.name, view.facts
    yield from _errors(host, nccl)
    yield from _wrong(host, nccl)
    yield from _settings(host, nccl)
    plan = _plan(facts, nccl)
    if nccl.get("limitation"):
        platform = _platform(facts, nccl)
        if platform:
            yield limitation(ERROR, host, SUBJECT, f"not measured: {platform}",
                             evidence=[f"probe: {nccl['limitation']}"])
        return
    if TRANSPORT_UNEXPECTED in plan.why_not:
        return
    busbw, size, n = plan.busbw, plan.size, plan.n
    cross = _p2p_says(facts)
    evidence = [f"busbw {busbw:.1f} GB/s at {size} bytes over {n} GPUs",
                f"transport {nccl.get('transport') or '?'}, channels {nccl.get('channels') or '?'}", cross]
    if plan.nvlink and plan.off:
        off = plan.off
        platform = _platform(facts, nccl)
        why = ("NCCL_P2P_DISABLE is set and was kept for the test" if nccl.get("env_kept")
               and nccl.get("env_overrides", {}).get("NCCL_P2P_DISABLE") not in (None, "", "0") else cross)
        msg = (f"NCCL moved all_reduce over {'/'.join(off)} on an NVLink box ({busbw:.1f} GB/s bus bandwidth): "
               f"P2P is off; {why}")
        if platform:
            yield limitation(TRANSPORT_UNEXPECTED, host, SUBJECT, f"{msg} ({platform})", expected="P2P or NVLS",
                             actual="/".join(off), evidence=evidence)
        else:
            yield fault(TRANSPORT_UNEXPECTED, host, SUBJECT, msg, expected="P2P or NVLS", actual="/".join(off),
                        evidence=evidence,
                        hint="check `nvidia-smi topo -p2p r`, IOMMU/ACS settings and NCCL_P2P_* settings; "
                             "then rerun the p2p and nccl probes")
        return
    stage, stage_src = plan.stage, plan.stage_src
    if plan.nvlink and stage is not None and busbw <= stage:
        yield fault(SLOWER_THAN_PCIE, host, SUBJECT,
                    f"all_reduce bus bandwidth {busbw:.1f} GB/s on an NVLink box is no faster than staging "
                    f"through host memory ({stage:.1f} GB/s, {stage_src}); {cross}",
                    expected=f"> {stage}", actual=busbw, evidence=evidence,
                    hint="check nvidia-fabricmanager, `nvidia-smi nvlink -s`, NCCL settings and plugins")
        return  # slower than PCIe is the stronger statement of the same low figure
    busy = nccl.get("busy_gpus") or []
    if busy:
        yield unknown(BUSBW_LOW, host, SUBJECT,
                      f"not judged against a floor: measured over {n} GPUs, {len(busy)} were busy with other "
                      f"processes and left out ({', '.join(busy)})", actual=busbw, evidence=evidence,
                      hint="rerun when the GPUs are idle (or with force: true, figures may then be low)")
        return
    floor, floor_src = plan.floor, plan.floor_src
    if floor is None:
        return  # judged against its peers (check_nccl_peers), or not judged (plan.why_not)
    if size < gpu_models.NCCL_FLOOR_MIN_BYTES and floor_src.startswith("published"):
        yield unknown(BUSBW_LOW, host, SUBJECT,
                      f"not judged against the {floor:.0f} GB/s floor: the largest message was {size} bytes, "
                      f"the floor holds from {gpu_models.NCCL_FLOOR_MIN_BYTES} bytes (max_bytes)",
                      expected=floor, actual=busbw, evidence=evidence)
        return
    if busbw < floor:
        yield fault(BUSBW_LOW, host, SUBJECT,
                    f"all_reduce bus bandwidth {busbw:.1f} GB/s is below the {floor:.1f} GB/s floor ({floor_src}); "
                    f"{cross}", expected=floor, actual=busbw, evidence=evidence,
                    hint="compare with the p2p probe's pairs; then NCCL settings, plugins, fabric manager")


def _model_from_gpus(facts: Facts) -> gpu_models.GpuModel | None:
    gpus = facts.get("gpus")
    for g in (gpus.get("list") if gpus else None) or []:
        if isinstance(g, dict) and g.get("name"):
            return gpu_models.lookup(g["name"])
    return None


def _floor(model: gpu_models.GpuModel | None, n: int, nvlink: bool | None, stage: float | None,
           stage_src: str) -> tuple[float | None, str]:
    published = gpu_models.nccl_allreduce_floor(model.key if model else None, n)
    if published is not None and nvlink:
        return published, f"published floor for {n}x {model.key if model else '?'} (AzHPC health checks)"
    if nvlink is False and stage is not None:
        floor = round(stage * gpu_models.NCCL_PCIE_STAGED_RATIO, 1)
        return floor, f"{gpu_models.NCCL_PCIE_STAGED_RATIO:.0%} of the host-staging rate {stage:.1f} GB/s ({stage_src})"
    return None, ""


def _errors(host: str, nccl: NcclFacts) -> Iterable[Finding]:
    for e in nccl.get("errors") or []:
        yield fault(ERROR, host, SUBJECT, f"{shown(e.get('where'), 'NCCL')}: {shown(e.get('message'), 'no message')}",
                    actual=e.get("error"),
                    evidence=[f"library {nccl.get('library') or '?'}, NCCL {nccl.get('version') or '?'}"],
                    hint="rerun with the host's NCCL log (NCCL_DEBUG=INFO); check /dev/shm size, driver and fabric manager")
    hang = nccl.get("hang")
    if isinstance(hang, dict):
        yield fault(ERROR, host, SUBJECT,
                    f"{hang.get('op')} of {hang.get('size_bytes')} bytes did not finish within {hang.get('after_s')} s "
                    "(hang): the communicators were aborted", actual="hang",
                    evidence=[f"library {nccl.get('library') or '?'}, NCCL {nccl.get('version') or '?'}"],
                    hint="a collective that never finishes points at a broken NVLink/NVSwitch path or fabric manager: "
                         "check `nvidia-smi nvlink -e` and nvidia-fabricmanager")


def _wrong(host: str, nccl: NcclFacts) -> Iterable[Finding]:
    bad = [(r["size_bytes"], w) for r in nccl.get("results") or [] if isinstance(w := r.get("wrong"), int) and w > 0]
    if bad:
        sizes = ", ".join(f"{size} B: {w}" for size, w in bad[:6])
        yield fault(DATA_WRONG, host, SUBJECT,
                    f"all_reduce results differ from the expected sum ({len(bad)} of "
                    f"{len(nccl.get('results') or [])} sizes; wrong elements per size: {sizes})",
                    expected=0, actual=sum(w for _, w in bad),
                    hint="silent data corruption: take the host out of service; check NVLink/PCIe error counters")


def _settings(host: str, nccl: NcclFacts) -> Iterable[Finding]:
    env = {k: v for k, v in (nccl.get("env_overrides") or {}).items()
           if not str(k).startswith(NETWORK_ONLY_PREFIXES)}  # a multi-node job's settings: not stale
    if not env:
        return
    text = ", ".join(f"{k}={shown(v, '(empty)')}" for k, v in sorted(env.items()))
    how = ("the figures were measured under them" if nccl.get("env_kept")
           else "the test ran without them, so the figures are NCCL's own; jobs on this host get them")
    yield fault(ENV_OVERRIDE, host, "NCCL settings",
                f"the host sets NCCL settings that change NCCL's behaviour ({text}): {how}",
                severity=Severity.WARN, actual=env,
                hint="remove stale settings from the environment, /etc/nccl.conf and ~/.nccl.conf "
                     "(NCCL_P2P_DISABLE=1 alone halves or worse an NVLink box's all_reduce)")


def _peer_candidate(nccl: NcclFacts, n: int, size: int) -> bool:
    """Judged against its peers, not a published floor: a known model key without a published
    floor for this GPU count, and a message large enough to compare."""
    key = nccl.get("gpu_model")
    return (isinstance(key, str) and gpu_models.nccl_allreduce_floor(key, n) is None
            and size >= gpu_models.NCCL_FLOOR_MIN_BYTES)


def _peer_groups(views: list[HostView]) -> dict[tuple[str, int], list[tuple[str, float, int]]]:
    groups: dict[tuple[str, int], list[tuple[str, float, int]]] = {}
    for view in views:
        nccl = _nccl(view)
        if nccl is None or nccl.get("limitation"):
            continue
        n, key, best = nccl.get("gpu_count"), nccl.get("gpu_model"), _largest(nccl)
        if not isinstance(n, int) or n < 2 or not isinstance(key, str) or best is None:
            continue
        busbw, size = best
        if not _peer_candidate(nccl, n, size):
            continue  # judged against the published floor by check_nccl, or too small a message
        groups.setdefault((key, n), []).append((view.name, busbw, size))
    return groups


def peers_not_judged(views: list[HostView]) -> dict[str, str]:
    """host -> why check_nccl_peers could not judge it (too few peers): the fleet-level not-judged
    entries of nccl.busbw.low (judge.py), so a host without a floor or peers never reads as passed.
    A host judged by check_nccl itself (published or staging floor) is not a candidate."""
    out: dict[str, str] = {}
    own = {v.name for v in views if v.facts.get(OWN_FLOOR)}
    for (key, n), members in _peer_groups(views).items():
        if len(members) < PEERS_MIN:
            for host, _, _ in members:
                if host not in own:
                        out[host] = (f"no published floor for {n}x {key} and {len(members)} such host(s) in this run: "
                                 f"comparing with peers needs at least {PEERS_MIN}")
    return out


OWN_FLOOR = "nccl_judged_alone"  # the key fleet_facts adds: the fleet views lack p2p/nvlink/topology


def fleet_facts(facts: Facts) -> dict[str, Any]:
    """For the fleet-wide steps (checks/__init__.fleet_facts): whether check_nccl judged
    nccl.busbw.low on its own (a published or host-staging floor) or held it back, which needs
    the sections the fleet views do not carry."""
    nccl = facts.get("nccl")
    if not isinstance(nccl, dict):
        return {}
    plan = _plan(facts, nccl)
    return {OWN_FLOOR: True} if plan.floor is not None or BUSBW_LOW in plan.why_not else {}


def check_nccl_peers(views: list[HostView]) -> Iterable[Finding]:
    """Boxes without a published floor (PCIe boxes, unlisted GPU counts) against their peers: the
    hosts with the same GPU model and count.  Reads facts["nccl"] only (FLEET_READS)."""
    for (key, n), members in sorted(_peer_groups(views).items()):
        if len(members) < PEERS_MIN:
            continue
        median = statistics.median(bw for _, bw, _ in members)
        floor = round(median * PEER_RATIO, 1)
        for host, bw, size in members:
            if bw < floor:
                yield fault(BUSBW_LOW, host, PEERS_SUBJECT,
                            f"all_reduce bus bandwidth {bw:.1f} GB/s is below {PEER_RATIO:.0%} of the median "
                            f"{median:.1f} GB/s of the {len(members)} hosts with {n}x {key} (its peers)",
                            expected=floor, actual=bw,
                            evidence=[f"busbw {bw:.1f} GB/s at {size} bytes",
                                      f"peers: {', '.join(sorted(h for h, _, _ in members if h != host)[:8])}"],
                            hint="compare the host's p2p pairs and PCIe links with a peer's")


CHECKS = [check_nccl]
FLEET_CHECKS = [check_nccl_peers]
FLEET_FACTS = fleet_facts
FLEET_READS: FleetReads = {"nccl": None}

# The rules this module's checks raise, each declared in verdict/rules/<prefix>.py (JUnit lists them as cases).
FINDING_IDS: tuple[str, ...] = (
    BUSBW_LOW,
    SLOWER_THAN_PCIE,
    TRANSPORT_UNEXPECTED,
    ENV_OVERRIDE,
    DATA_WRONG,
    ERROR,
)




# The rules whose judgement the facts may hold back (their declaration says `held_back`):
# unjudged shares its steps with the checks, so the check and its coverage cannot disagree.
HELD_BACK: dict[str, Unjudged] = {fid: unjudged for fid in FINDING_IDS}
