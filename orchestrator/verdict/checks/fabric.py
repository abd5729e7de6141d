"""Fabric qualification findings: the bad host, HCA, path and rail, GPUDirect RDMA, multi-host NCCL.

Every finding here is fleet-wide (a pair measurement needs both its hosts): the localisation runs
over the `fabric` facts of every host that took part (verdict/fabric_locate.py, pure), with the
thresholds the run's plan stored, so `probe rejudge` and `probe merge` decide the same way.  A
rail fault is raised on every host of the rail and a path fault on both its ends, since jobs on
each of those hosts meet it; each names the pairs that decided it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.facts.model import FabricFacts, FabricHca, FabricNcclGroup, Facts
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import FleetReads, HostView
from orchestrator.verdict.fabric_locate import (
    Fault,
    RingVerdict,
    Thresholds,
    all_faults,
    downtrained,
    failed_hosts,
    floor_min_bytes,
    link_text,
    nccl_floor,
    ring_explained,
    ring_slow,
    ring_verdicts,
)
from orchestrator.verdict.findings import (
    Device,
    DeviceKind,
    Finding,
    Located,
    Severity,
    fault,
    pci_device,
    unknown,
)
from orchestrator.verdict.rule import Unjudged

HOST_SLOW = rules.fabric.HOST_SLOW.id
HCA_SLOW = rules.fabric.HCA_SLOW.id
PATH_SLOW = rules.fabric.PATH_SLOW.id
RAIL_SLOW = rules.fabric.RAIL_SLOW.id
UNLOCALISED = rules.fabric.SLOW_UNLOCALISED.id
GDR_MISSING = rules.fabric.GDR_MISSING.id
STEP_FAILED = rules.fabric.STEP_FAILED.id
NCCL_SLOW = rules.fabric.NCCL_SLOW.id
NCCL_WRONG = rules.fabric.NCCL_DATA_WRONG.id
NCCL_TRANSPORT = rules.fabric.NCCL_TRANSPORT.id
ANSWER_REFUSED = rules.fabric.ANSWER_REFUSED.id
ANSWER_DISTRUSTED = rules.fabric.ANSWER_DISTRUSTED.id
# judged from pair figures: nothing to judge where the host measured no pair
PAIRWISE = (HOST_SLOW, HCA_SLOW, PATH_SLOW, RAIL_SLOW, UNLOCALISED, ANSWER_DISTRUSTED)
NCCL_IDS = (NCCL_SLOW, NCCL_WRONG, NCCL_TRANSPORT)


# A host whose fabric step timed out, failed, was cut off or sent answers the plan refused is
# judged on what it finished (its health says incomplete); one that never took part is not read.
_NOT_TAKEN = (None, "skipped", "unsupported", "unreachable")


def _fabric(view: HostView) -> FabricFacts | None:
    f = view.facts.get("fabric")
    if not isinstance(f, dict) or (view.outcomes and view.outcomes.get("fabric") in _NOT_TAKEN):
        return None
    return f


def _taking_part(views: list[HostView]) -> dict[str, FabricFacts]:
    return {v.name: f for v in views if (f := _fabric(v)) is not None and not f.get("skipped")}


def _spec(facts: Mapping[str, FabricFacts]) -> dict[str, Any]:
    for f in facts.values():
        plan = f.get("plan")
        if plan and plan.get("spec"):
            return dict(plan["spec"])
    return {}


def _hca(facts: Mapping[str, FabricFacts], host: str, name: str) -> FabricHca | None:
    f = facts.get(host)
    return next((h for h in f["hcas"] if h["hca"] == name), None) if f else None


def _port(facts: Mapping[str, FabricFacts], host: str, name: str) -> str:
    h = _hca(facts, host, name)
    if h is None:
        return f"{host}:{name}"
    return f"{host}:{name} (LID {h.get('lid') or '?'}, port GUID {h.get('port_guid') or '?'})"


def _rate_text(facts: Mapping[str, FabricFacts], host: str, found: FabricHca | None, rail: int | None) -> str:
    """"its port is active at 100 Gb/s where the rail's others run 400 Gb/s; " when that explains it."""
    mine = found["rate_gbps"] if found else None
    others = [r for h, f in facts.items() if h != host for x in f["hcas"]
              if x["rail"] == rail and (r := x["rate_gbps"]) is not None]
    if mine is None or not others:
        return ""
    usual = max(set(others), key=others.count)
    return f"its port is active at {found['rate'] if found else mine} where the rail's other ports run {usual:g} Gb/s; " \
        if mine < usual else ""


def _numbers(f: Fault) -> str:
    if f.measured is None:
        return ""
    if f.unit == "Gb/s":
        return f"{f.measured:.1f} Gb/s against a floor of {f.expected:.1f} Gb/s" if f.expected is not None \
            else f"{f.measured:.1f} Gb/s"
    return f"{f.measured:.2f} us against a ceiling of {f.expected:.2f} us" if f.expected is not None \
        else f"{f.measured:.2f} us"


def _finding(f: Fault, facts: Mapping[str, FabricFacts]) -> Iterable[Finding]:
    nums = _numbers(f)
    if f.kind == "host":
        host = f.hosts[0]
        links = [f"{n}: {link_text(h['pcie'] if (h := _hca(facts, host, n)) else None)}" for n in f.hcas]
        yield fault(HOST_SLOW, host, f"host (all {len(f.hcas)} rails: {', '.join(f.hcas)})",
                    f"slow with its peers on every rail ({nums}), while those peers are fast with others: the host "
                    "itself, not one HCA", expected=f.expected, actual=f.measured, evidence=f.evidence + links,
                    hint="look at what the HCAs share: the PCIe root complex and its settings, CPU frequency and "
                         "NUMA placement, memory bandwidth, IOMMU; compare `lspci -vv` and BIOS settings with a good host")
    elif f.kind == "hca":
        host, name = f.hosts[0], f.hcas[0]
        found = _hca(facts, host, name)
        link = found["pcie"] if found else None
        why = (f"its {link_text(link)} is downtrained" if downtrained(link) else f"its {link_text(link)} is at full speed")
        bus = (found["bus_id"] if found else None) or "PCI function unknown"
        rate = (found["rate"] if found else None) or "rate ?"
        hca = pci_device(DeviceKind.NIC, found["bus_id"] if found else None, nic=name, rail=f.rail)
        yield fault(HCA_SLOW, host, Located(f"{name} (rail {f.rail}, {bus})", (hca,)),
                    f"{name} is {f.detail} ({nums}); the peers are fast with others: this HCA, cable or switch port; "
                    f"{_rate_text(facts, host, found, f.rail)}{why}", expected=f.expected, actual=f.measured,
                    evidence=[*f.evidence, f"{name}: {rate}, {link_text(link)}"],
                    hint="reseat or replace the cable or transceiver, check the switch port's counters; a downtrained "
                         "PCIe link needs the card reseated; `mlxlink -d` shows the physical layer")
    elif f.kind == "path":
        a, b = f.hosts
        ports = f"{_port(facts, a, f.hcas[0])} and {_port(facts, b, f.hcas[1])}"
        for me, other, mine, theirs in ((a, b, f.hcas[0], f.hcas[1]), (b, a, f.hcas[1], f.hcas[0])):
            ends = (Device(DeviceKind.NIC, nic=mine, rail=f.rail), Device(DeviceKind.PEER_HOST, nic=theirs, host=other))
            yield fault(PATH_SLOW, me, Located(f"{mine} <-> {other}:{theirs} (rail {f.rail})", ends),
                        f"{me}:{mine} and {other}:{theirs} are slow only together ({nums}); each is fast with its other "
                        f"peers: the path between them, ports {ports}; the switch between them was not read "
                        "(no iblinkinfo/ibnetdiscover output)", expected=f.expected, actual=f.measured,
                        evidence=f.evidence,
                        hint="trace the route between the two LIDs (`ibtracert`): a bad inter-switch link or cable, "
                             "or a routing fault; the switches' port counters name the link")
    elif f.kind == "rail":
        name = f.hcas[0] if len(f.hcas) == 1 else "/".join(f.hcas)
        for host in f.hosts:
            yield fault(RAIL_SLOW, host, Located(f"rail {f.rail} ({name})", (Device(DeviceKind.RAIL, rail=f.rail),)),
                        f"rail {f.rail} is slow everywhere ({f.detail}; {nums}): the rail's switches or their "
                        f"configuration, not the hosts on it", expected=f.expected, actual=f.measured, evidence=f.evidence,
                        hint="check the rail's leaf and spine switches (port counters, firmware, adaptive routing, "
                             "the subnet manager's routing) before touching any host")
    elif f.kind == "gdr":
        host = f.hosts[0]
        yield fault(GDR_MISSING, host, f"GPUDirect RDMA ({', '.join(f.hcas) or 'every HCA'})",
                    f"GPUDirect RDMA is expected ({f.detail}) but traffic went through host memory",
                    expected="GPU memory registered by the HCA (GDR)", actual="host memory",
                    evidence=f.evidence,
                    hint="check that nvidia_peermem matches the loaded driver (`dmesg | grep peermem`), the IOMMU "
                         "(passthrough or off), ACS on the PCIe switches, and NCCL_NET_GDR_LEVEL")
    elif f.kind == "failed":
        host = f.hosts[0]
        yield unknown(STEP_FAILED, host, "fabric steps",
                      f"the host's fabric measurements failed: {f.detail}", severity=Severity.WARN,
                      evidence=f.evidence,
                      hint="check that perftest runs by hand on this host and its peers, and that the rail "
                           "addresses are reachable between hosts")


# ------------------------------------------------------------------------------- NCCL groups


def _bisect_culprits(root: FabricNcclGroup, groups: dict[str, FabricNcclGroup], slow: set[str]) -> list[str]:
    """Hosts the bisection pinned down: in a slow group of two whose other member is in a fast group."""
    rail = root["rail"]
    mine = [g for g in groups.values() if g["kind"] == "bisect" and g["rail"] == rail
            and set(g["members"]) <= set(root["members"])]
    fast_hosts = {h for g in mine if g["group"] not in slow and g["busbw_gbps"] is not None for h in g["members"]}
    out = set()
    for g in mine:
        if g["group"] in slow and len(g["members"]) <= 2:
            for h in g["members"]:
                others = set(g["members"]) - {h}
                if others and others <= fast_hosts and h not in fast_hosts:
                    out.add(h)
    return sorted(out)


def _wrong_findings(name: str, v: RingVerdict) -> Iterable[Finding]:
    """Data corruption a majority of the members saw is the communicator's (every member); one a
    minority claims is theirs alone: their own rank's receive path, or a record that is wrong."""
    g = v.group
    members = g["members"]
    if g["wrong"]:
        for h in members:
            yield fault(NCCL_WRONG, h, f"NCCL {name} ({len(members)} hosts)",
                        f"multi-host all_reduce/all_gather results differ from the expected values "
                        f"({g['wrong']} wrong elements) in the communicator over {', '.join(members)}",
                        expected=0, actual=g["wrong"], evidence=[v.evidence()],
                        hint="silent data corruption between hosts: test the hosts' HCAs and GPUs pairwise")
    for h in v.lone_wrong:
        yield fault(NCCL_WRONG, h, f"NCCL {name} (this rank)",
                    f"only this member's record reports wrong elements in the communicator over "
                    f"{', '.join(members)}; the other members verified their data: this host's own rank (its "
                    "HCA, GPU or memory) or its record is wrong, not the communicator",
                    expected=0, actual="wrong elements on this rank alone", evidence=[v.evidence()],
                    hint="run the host's NCCL and perftest steps again with a known-good peer; compare its record "
                         "with the others' in raw/<host>/fabric.json")


def nccl_findings(facts: Mapping[str, FabricFacts], faults: list[Fault]) -> Iterable[Finding]:
    verdicts = ring_verdicts(facts, _spec(facts))
    groups = {name: v.group for name, v in verdicts.items()}
    floors = {name: nccl_floor(g, facts) for name, g in groups.items()}
    min_bytes = floor_min_bytes(_spec(facts))
    slow = {n for n, g in groups.items() if ring_slow(g, facts, min_bytes)}
    for name, g in sorted(groups.items()):
        members = g["members"]
        yield from _wrong_findings(name, verdicts[name])
        if g["transport"] and g["transport"].startswith("NET/Socket") and any(
                (f := facts.get(h)) and f["hcas"] for h in members):
            for h in members:
                yield fault(NCCL_TRANSPORT, h, f"NCCL {name}",
                            f"NCCL moved data between hosts over sockets ({g['transport']}) though InfiniBand HCAs "
                            "are there", expected="NET/IB", actual=g["transport"],
                            hint="check NCCL_IB_DISABLE, NCCL_IB_HCA, libibverbs and the rdma-core packages in the "
                                 "environment jobs get")
    # slow rings no pairwise fault explains: bisected to hosts where the bisection could
    culprits: dict[str, list[str]] = {}
    unexplained = []
    for name, g in sorted(groups.items()):
        if g["kind"] not in ("rail", "all") or name not in slow or ring_explained(g, faults):
            continue
        unexplained.append(name)
        for h in _bisect_culprits(g, groups, slow) if g["kind"] == "rail" else []:
            culprits.setdefault(h, []).append(name)
    for h, rings in sorted(culprits.items()):
        gs = [groups[n] for n in rings]
        measured = min(g["busbw_gbps"] or 0.0 for g in gs)
        floor = min(floors[n] or 0.0 for n in rings)
        deciding = [f"{n}: {gg['busbw_gbps']:.1f} GB/s over {', '.join(gg['members'])}" for n, gg in sorted(groups.items())
                    if gg["kind"] == "bisect" and h in gg["members"] and gg["busbw_gbps"] is not None][:10]
        where = "every rail's ring" if len(rings) > 1 and len(rings) == len({g["rail"] for g in groups.values()
                                                                              if g["kind"] == "rail"}) else ", ".join(rings)
        yield fault(NCCL_SLOW, h, f"host (NCCL {', '.join(rings)})",
                    f"the rail-aligned all_reduce is slow ({measured:.1f} GB/s bus bandwidth against a floor of "
                    f"{floor:.1f} GB/s) and bisecting {where} names this host", expected=floor, actual=measured,
                    evidence=[f"{n}: {groups[n]['busbw_gbps']:.1f} GB/s over {len(groups[n]['members'])} hosts, "
                              f"transport {groups[n]['transport'] or '?'}" for n in rings] + deciding,
                    hint="perftest was not there to localise it further: its HCAs, cables, PCIe links; run the "
                         "pairwise steps (install perftest) for the exact port")
    for name in unexplained:
        g = groups[name]
        if set(g["members"]) & set(culprits):
            continue  # the bisection's host explains this ring too
        nums = f"{g['busbw_gbps']:.1f} GB/s bus bandwidth against a floor of {floors[name]:.1f} GB/s"
        for h in g["members"]:
            yield unknown(NCCL_SLOW, h, f"NCCL {name}",
                          f"the all_reduce over {len(g['members'])} hosts is slow ({nums}) and no single host or "
                          "pair explains it", severity=Severity.WARN, expected=floors[name], actual=g["busbw_gbps"],
                          hint="run the pairwise perftest steps (install perftest) to localise it")


# ------------------------------------------------------------------------------- the check


def refused_findings(facts: Mapping[str, FabricFacts]) -> Iterable[Finding]:
    """What each host answered outside its plan (a round, peer, role or test it was not given, a
    result twice, an address that is none, an NCCL record longer than the plan): dropped before
    judging, named on the host that sent it, never on the peers it named."""
    nccl_refused: dict[str, list[str]] = {}
    for v in ring_verdicts(facts, _spec(facts)).values():
        for h, why in v.refused.items():
            nccl_refused.setdefault(h, []).append(why)
    for host, f in sorted(facts.items()):
        lines = [*(f.get("refused") or []), *nccl_refused.get(host, [])]
        if lines:
            yield unknown(ANSWER_REFUSED, host, "fabric answers",
                          f"fabric answers the plan did not ask of this host were dropped before judging (its "
                          f"peers are judged without them): {lines[0]}", severity=Severity.WARN, evidence=lines[:10],
                          hint="a host answering outside its plan is broken or hostile: compare its probes/fabric.py "
                               "with the controller's, check what runs on it, and look at raw/<host>/fabric.json")


def distrusted_findings(distrusted: Mapping[str, list[str]]) -> Iterable[Finding]:
    """A host whose own figures cannot be right: named alone, its peers judged without its word."""
    for host, lines in sorted(distrusted.items()):
        yield unknown(ANSWER_DISTRUSTED, host, "fabric figures",
                      f"{len(lines)} pair figure(s) this host printed were not taken (its peers are judged "
                      f"without them): {lines[0]}", severity=Severity.WARN, evidence=lines[:10],
                      hint="a host printing figures no port gives, or that its peers' ends of the same transfers "
                           "contradict, is broken or hostile: check its perftest build and what runs on it, and "
                           "raw/<host>/fabric.json")


def check_fabric(views: list[HostView]) -> Iterable[Finding]:
    facts = _taking_part(views)
    yield from refused_findings(facts)
    if len(facts) < 2:
        return
    loc, faults = all_faults(facts, Thresholds.of(_spec(facts)))
    yield from distrusted_findings(loc.distrusted)
    for f in faults:
        yield from _finding(f, facts)
    for f in failed_hosts(facts):
        yield from _finding(f, facts)
    blamed = {h for f in loc.faults for h in f.hosts}
    for rail, hosts in sorted(loc.suspects.items()):
        for h in hosts:
            if h in blamed:
                continue
            bad = [s for s in loc.samples if s.rail == rail and s.bad and h in s.pair]
            yield unknown(UNLOCALISED, h, Located(f"rail {rail}", (Device(DeviceKind.RAIL, rail=rail),)),
                          f"slow pair measurements on rail {rail} that the rounds could not pin on this host, its "
                          "peer or the path", severity=Severity.WARN, evidence=[s.describe() for s in bad[:6]],
                          hint="raise fabric.extra_rounds or fabric.rounds so the host meets more peers")
    yield from nccl_findings(facts, faults)


def unjudged(facts: Facts) -> dict[str, str]:
    """The fabric ids this host's facts cannot judge, and why (coverage: never "passed")."""
    f = facts.get("fabric")
    if not isinstance(f, dict):
        return {}
    if f.get("skipped"):
        return dict.fromkeys(FINDING_IDS, f"not part of the qualification: {f['skipped']}")
    out: dict[str, str] = {}
    perftest = f.get("perftest") or {}
    measured = [m for m in f.get("measurements") or [] if m.get("error_kind") != "missing"]
    if f.get("source") == "text":
        out.update(dict.fromkeys((*PAIRWISE, STEP_FAILED), "imported text: localising needs a qualification's pairs "
                                                           "over several hosts (probe run -p fabric)"))
    elif not measured:
        missing = perftest.get("missing") or []
        why = (f"perftest not installed ({', '.join(missing)} not found)" if missing
               else "no pairwise perftest measurement")
        out.update(dict.fromkeys(PAIRWISE, why))
    gdr = f.get("gdr")
    if not gdr or gdr.get("expected") is not True:
        out[GDR_MISSING] = f"GPUDirect RDMA not expected here: {gdr.get('why') if gdr else 'not read'}"
    elif not any(m.get("use_cuda") is not None or m.get("gdr_error") for m in f.get("measurements") or []) and \
            not any(g.get("transport") for g in f.get("nccl") or []):
        out[GDR_MISSING] = "no step used GPU memory (perftest without CUDA, no NCCL communicator)"
    if not f.get("nccl"):
        out.update(dict.fromkeys(NCCL_IDS, "no multi-host NCCL communicator ran on this host"))
    elif not any(g.get("results") for g in f["nccl"]):
        # a communicator that never ran a collective (its bootstrap failed: a forged or stale rank-0
        # id, a member that never joined) measured nothing: not a pass
        why = next((g["error"] for g in f["nccl"] if g.get("error")), None) or "no result"
        out.update(dict.fromkeys(NCCL_IDS, f"no NCCL collective ran on this host ({why[:200]})"))
    return out


FLEET_CHECKS = [check_fabric]
FLEET_READS: FleetReads = {"fabric": None}

FINDING_IDS: tuple[str, ...] = (HOST_SLOW, HCA_SLOW, PATH_SLOW, RAIL_SLOW, UNLOCALISED, GDR_MISSING, STEP_FAILED,
                                NCCL_SLOW, NCCL_WRONG, NCCL_TRANSPORT, ANSWER_REFUSED, ANSWER_DISTRUSTED)



# The rules whose judgement the facts may hold back (their declaration says `held_back`):
# unjudged shares its steps with the checks, so the check and its coverage cannot disagree.
HELD_BACK: dict[str, Unjudged] = {fid: unjudged for fid in FINDING_IDS}
