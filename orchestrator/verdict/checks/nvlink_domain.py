"""Multi-node NVLink domains (NVL72-class): the fabric cluster UUID and clique id of each GPU, on one
host and across the fleet.  Pure.

Only hosts whose GPUs report a non-zero cluster UUID are in a multi-node domain; single-node
NVSwitch systems are left alone.  Within a host every registered GPU must be in the same domain and
clique; across hosts of one domain, a host whose clique differs from what most of the domain's
hosts report is named.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

from orchestrator.facts.model import Facts, GpuRecord
from orchestrator.facts.shown import shown
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import FleetReads, HostView
from orchestrator.verdict.findings import Finding, Located, Severity, fault, gpu_device
from orchestrator.verdict.rule import Unjudged

_ZERO = "0" * 32


def _gpu_list(facts: Facts) -> list[GpuRecord]:
    gpus = facts.get("gpus")
    return (gpus.get("list") if gpus else None) or []


def _fabric_gpus(view: HostView) -> list[tuple[GpuRecord, dict[str, Any]]]:
    if view.measured("gpus") is None:
        return []
    out = []
    for g in _gpu_list(view.facts):
        fab = g.get("fabric")
        if isinstance(fab, dict) and fab.get("state") == "completed" and isinstance(fab.get("cluster_uuid"), str):
            out.append((g, fab))
    return out


def _domain(view: HostView) -> tuple[str, Any] | None:
    """(cluster UUID, clique id) most of the host's registered GPUs report, if they are in a
    multi-node domain."""
    pairs = [(f["cluster_uuid"], f.get("clique_id")) for _, f in _fabric_gpus(view) if f["cluster_uuid"] != _ZERO]
    return Counter(pairs).most_common(1)[0][0] if pairs else None


def _subject(g: Any) -> Located:
    """The GPU as a finding's subject: the text a person reads and the device it is."""
    return Located(f"GPU{shown(g.get('index'))} ({shown(g.get('bus_id'), 'bus id unknown')})", (gpu_device(g),))


def host_domain(view: HostView) -> Iterator[Finding]:
    dom = _domain(view)
    if dom is None:
        return
    odd = [(g, f) for g, f in _fabric_gpus(view) if (f["cluster_uuid"], f.get("clique_id")) != dom]
    for g, f in odd:
        what = ("a zero cluster UUID" if f["cluster_uuid"] == _ZERO else
                f"clique {shown(f.get('clique_id'))}" if f["cluster_uuid"] == dom[0] else f"cluster {f['cluster_uuid'][:8]}…")
        yield fault(rules.nvlink.DOMAIN_INCONSISTENT.id, view.name, _subject(g),
                    f"GPU reports {what} where the host's other GPUs are in cluster {dom[0][:8]}… clique {shown(dom[1])}",
                    severity=Severity.WARN, expected={"cluster_uuid": dom[0], "clique_id": dom[1]},
                    actual={"cluster_uuid": f["cluster_uuid"], "clique_id": f.get("clique_id")},
                    evidence=["gpus.list.fabric.cluster_uuid", "gpus.list.fabric.clique_id"],
                    hint="the GPU registered with another NVLink partition or none: check the fabric manager / "
                         "NMX partition configuration and the GPU's NVLinks")


# What fleet_domains reads (checks/__init__.fleet_facts).
FLEET_READS: FleetReads = {"gpus": {"list": {"index": None,
                                              "fabric": {"state": None, "cluster_uuid": None, "clique_id": None}}}}


def fleet_domains(views: list[HostView]) -> Iterator[Finding]:
    by_cluster: dict[str, list[tuple[HostView, Any]]] = defaultdict(list)
    for v in views:
        dom = _domain(v)
        if dom is not None:
            by_cluster[dom[0]].append((v, dom[1]))
    for cluster, members in sorted(by_cluster.items()):
        if len(members) < 3:
            continue
        norm, count = Counter(c for _, c in members).most_common(1)[0]
        if count * 2 <= len(members):
            continue
        for v, clique in members:
            if clique != norm:
                yield fault(rules.nvlink.DOMAIN_INCONSISTENT.id, v.name, "NVLink domain",
                            f"the host's GPUs are in clique {shown(clique)} of cluster {cluster[:8]}… where {count} of its "
                            f"{len(members)} hosts are in clique {shown(norm)}", severity=Severity.WARN,
                            expected=norm, actual=clique, evidence=["gpus.list.fabric.clique_id",
                                                                    f"{len(members)} hosts of the domain"],
                            hint="the host joined another partition of the NVLink domain than its rack peers")


# Fabric health mask fields (facts gpus.list.fabric.health, fabric info v2/v3) that say something
# is wrong, with the severity and what it means.  "false" / "none" / "not_supported" are not judged.
_HEALTH_FAULTS: dict[str, tuple[Severity, str]] = {
    "degraded_bw": (Severity.WARN, "the GPU's NVLink bandwidth is degraded"),
    "route_recovery": (Severity.WARN, "the fabric is recovering a route"),
    "route_unhealthy": (Severity.FAIL, "a route of the fabric is unhealthy"),
    "access_timeout_recovery": (Severity.WARN, "the fabric is recovering from an access timeout"),
}


def fabric_health_faults(fab: dict[str, Any]) -> dict[str, str]:
    """The fields of the decoded health mask that report a problem (field -> value)."""
    raw = fab.get("health")
    health: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out = {k: str(v) for k, v in health.items() if k in _HEALTH_FAULTS and v == "true"}
    conf = health.get("incorrect_configuration")
    if isinstance(conf, str) and conf not in ("none", "not_supported"):
        out["incorrect_configuration"] = conf
    return out


def fabric_degraded(view: HostView) -> Iterator[Finding]:
    """Partial health of a GPU's NVLink fabric registration, from the health mask of fabric info
    v2/v3 (single- and multi-node NVSwitch systems alike)."""
    for g, fab in _fabric_gpus(view):
        bad = fabric_health_faults(fab)
        if not bad:
            continue
        sev = Severity.FAIL if "route_unhealthy" in bad or "incorrect_configuration" in bad else Severity.WARN
        what = [_HEALTH_FAULTS[k][1] for k in bad if k in _HEALTH_FAULTS]
        if "incorrect_configuration" in bad:
            what.append("the fabric configuration is wrong (" + bad["incorrect_configuration"].replace("_", " ") + ")")
        yield fault(rules.nvlink.FABRIC_DEGRADED.id, view.name, _subject(g),
                    "; ".join(what) + f" (fabric health mask 0x{int(fab.get('health_mask') or 0):x}, "
                    f"summary {shown(fab.get('health_summary'))})", severity=sev,
                    expected="no health flag set", actual=bad, evidence=["gpus.list.fabric.health_mask"],
                    hint="check the GPU's NVLinks and NVSwitch ports (nvidia-smi nvlink -s) and the fabric manager / "
                         "NMX log; an incorrect configuration needs the partition or chassis settings fixed")


def _fabric_unjudged(facts: Facts) -> dict[str, str]:
    for g in _gpu_list(facts):
        fab = g.get("fabric") if isinstance(g, dict) else None
        if isinstance(fab, dict) and isinstance(fab.get("health"), dict) and any(
                v != "not_supported" for v in fab["health"].values()):
            return {}
    return {rules.nvlink.FABRIC_DEGRADED.id: "no GPU reports a fabric health mask (no NVSwitch fabric, or fabric info v1 / "
                                      "a driver whose mask has no fields)"}


CHECKS = [host_domain, fabric_degraded]
FLEET_CHECKS = [fleet_domains]

FINDING_IDS: tuple[str, ...] = (rules.nvlink.DOMAIN_INCONSISTENT.id, rules.nvlink.FABRIC_DEGRADED.id)


# The rules whose judgement the facts may hold back (their declaration says `held_back`):
# _fabric_unjudged shares its steps with the checks, so the check and its coverage cannot disagree.
HELD_BACK: dict[str, Unjudged] = {fid: _fabric_unjudged for fid in (rules.nvlink.FABRIC_DEGRADED.id,)}
