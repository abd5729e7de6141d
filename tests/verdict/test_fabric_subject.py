"""Faults of the fabric are the fabric's (issue 47 item 1): a rail, a path between two ports, a
slow pair or ring no host explains counts in no host's health, RECAP failed count, drain list or
remediation plan; it is shown once, naming the hosts it touches.  A host is blamed only where the
localisation points at it (its HCA, the host itself, a ring bisected to it).

The findings are made as verdict/checks/fabric.py makes them (its finding constructors and
Located subjects), and judged by the same functions a run uses (health.decide through
FleetResult.from_document, the drain plan, the remediation plan, JUnit, Prometheus, -q).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest

from orchestrator.cli.exitcodes import ExitStatus, for_fleet
from orchestrator.present.outputs.ansible_inventory import render_inventory
from orchestrator.present.outputs.junit import build_junit
from orchestrator.present.outputs.prometheus import render_prometheus
from orchestrator.present.outputs.slurm_drain import render_drain
from orchestrator.present.terminal.hosts import recap
from orchestrator.present.terminal.quiet import quiet_text
from orchestrator.verdict import offenders, remedy, rules
from orchestrator.verdict.fabric_faults import fabric_faults, is_fabric
from orchestrator.verdict.findings import Device, DeviceKind, Finding, Located, Severity, fault, unknown
from orchestrator.verdict.health import Health, decide
from orchestrator.verdict.result import FleetResult

HOSTS = [f"node{i:02d}" for i in range(1, 31)]


def _rail(host: str, rail: int = 6) -> Finding:
    return fault(rules.fabric.RAIL_SLOW.id, host, Located(f"rail {rail} (mlx5_{rail})", (Device(DeviceKind.RAIL, rail=rail),)),
                 f"rail {rail} is slow everywhere: the rail's switches or their configuration, not the hosts on it")


def _path(a: str, b: str) -> list[Finding]:
    out = []
    for me, other in ((a, b), (b, a)):
        ends = (Device(DeviceKind.NIC, nic="mlx5_2", rail=2), Device(DeviceKind.PEER_HOST, nic="mlx5_2", host=other))
        out.append(fault(rules.fabric.PATH_SLOW.id, me, Located(f"mlx5_2 <-> {other}:mlx5_2 (rail 2)", ends),
                         f"{me}:mlx5_2 and {other}:mlx5_2 are slow only together"))
    return out


def _unlocalised(host: str) -> Finding:
    return unknown(rules.fabric.SLOW_UNLOCALISED.id, host, Located("rail 3", (Device(DeviceKind.RAIL, rail=3),)),
                   "slow pairs on rail 3 the rounds could not pin on a host", severity=Severity.WARN)


def _ring_unexplained(host: str) -> Finding:
    return unknown(rules.fabric.NCCL_SLOW.id, host, "NCCL rail0", "the all_reduce over 30 hosts is slow and no "
                   "single host or pair explains it", severity=Severity.WARN)


# Every fault the localisation did not pin on a host: (what it raises on the hosts it touches)
FABRIC_CLASSES: dict[str, Callable[[list[str]], list[Finding]]] = {
    "rail slow on every host": lambda hs: [_rail(h) for h in hs],
    "path slow between two ports": lambda hs: _path(hs[0], hs[1]),
    "pairs no round could pin": lambda hs: [_unlocalised(h) for h in hs],
    "ring slow with no host or pair to blame": lambda hs: [_ring_unexplained(h) for h in hs],
    "two rails and a path at once": lambda hs: [_rail(h, 6) for h in hs] + [_rail(h, 7) for h in hs]
    + _path(hs[4], hs[9]),
}


def _hca(host: str) -> Finding:
    hca = Device(DeviceKind.NIC, bus_id="0000:ac:00.0", nic="mlx5_5", rail=5)
    return fault(rules.fabric.HCA_SLOW.id, host, Located("mlx5_5 (rail 5, 0000:ac:00.0)", (hca,)),
                 "mlx5_5 is slow with 23 of 23 peers on rail 5; the peers are fast with others")


def _host_slow(host: str) -> Finding:
    return fault(rules.fabric.HOST_SLOW.id, host, "host (all 8 rails)", "slow with its peers on every rail")


def _ring_bisected(host: str) -> Finding:
    return fault(rules.fabric.NCCL_SLOW.id, host, "host (NCCL rail0)", "bisecting rail0 names this host")


# Faults the localisation pins on one host: they stay that host's
HOST_CLASSES: dict[str, Callable[[str], Finding]] = {
    "one HCA slow with fast peers": _hca,
    "the host slow on every rail": _host_slow,
    "a ring bisected to the host": _ring_bisected,
}


def _doc(findings: list[Finding]) -> dict[str, object]:
    """A fleet.json of HOSTS (all answered ok) holding `findings`, health decided on reading."""
    hosts = [{"name": h, "address": h, "groups": [], "outcome": "ok", "reason": "",
              "probes": {"fabric": {"outcome": "ok"}}, "facts": {}} for h in HOSTS]
    return {"schema_version": 1, "run": {"id": "r1"}, "hosts": hosts, "classes": [],
            "findings": [f.to_dict() for f in findings], "silenced": []}


def _fleet(findings: list[Finding]) -> FleetResult:
    return FleetResult.from_document(_doc(findings))


@pytest.mark.parametrize("case", sorted(FABRIC_CLASSES))
def test_a_fabric_fault_fails_no_host(case: str) -> None:
    findings = FABRIC_CLASSES[case](HOSTS)
    assert all(is_fabric(f) for f in findings)
    for h in {f.host for f in findings}:
        mine = [f for f in findings if f.host == h]
        assert decide("ok", "", {}, mine).state is Health.HEALTHY, (case, h)
    fleet = _fleet(findings)
    assert fleet.health_counts["failed"] == fleet.health_counts["degraded"] == 0
    assert fleet.faults() == [] and all(fleet.faults_of(h) == [] for h in HOSTS)
    # not drained, not in a remediation plan, not red in JUnit's or Prometheus' host series
    drain = remedy.drain_plan(fleet, max_share=1.0)
    assert drain.hosts == () and "scontrol" not in render_drain(fleet, drain)
    assert remedy.plan(fleet, max_share=1.0).hosts == ()
    junit = build_junit(fleet)
    host_failures = [tc for s in junit.findall("testsuite") if s.get("name") != "fabric"
                     for tc in s.findall("testcase") if tc.find("failure") is not None]
    assert host_failures == []
    prom = render_prometheus(fleet)
    assert not [line for line in prom.splitlines() if line.startswith("fleetprobe_finding{")]
    assert 'fleetprobe_host_health{host="node01",health="healthy"} 1' in prom


@pytest.mark.parametrize("case", sorted(FABRIC_CLASSES))
def test_a_fabric_fault_is_shown_once_naming_its_hosts(case: str) -> None:
    findings = FABRIC_CLASSES[case](HOSTS)
    fleet = _fleet(findings)
    faults = fleet.fabric_faults
    # one per rule and place, whatever the number of hosts that raised it
    assert len(faults) == len({(f.id, f.subject) for f in faults}) == len({(f.id, tuple(sorted(
        d.rail or 0 for d in f.devices))) for f in findings}), [(f.id, f.subject) for f in faults]
    assert sum(len(f.hosts) for f in faults) == len({(f.id, f.host, f.subject) for f in findings})
    doc = fleet.to_document()
    assert doc["fabric_findings"] == [f.to_dict() for f in faults]
    assert fleet.summary.fabric_total == len(faults)
    assert f"| fabric={len(faults)} |" in recap(fleet)
    junit = build_junit(fleet)
    suite = junit.find("testsuite[@name='fabric']")
    assert suite is not None and len(suite.findall("testcase")) == len(faults)
    prom = [line for line in render_prometheus(fleet).splitlines() if line.startswith("fleetprobe_fabric_fault{")]
    assert len(prom) == len(faults)
    # -q is not silent about a fabric alone at fault, and says it once
    quiet = quiet_text(fleet)
    assert quiet and quiet.count(faults[0].message) == 1


def test_a_path_is_one_fault_from_both_ends() -> None:
    faults = fabric_faults(_path("node07", "node03"))
    assert [(f.subject, f.hosts) for f in faults] == [
        ("node03:mlx5_2 <-> node07:mlx5_2 (rail 2)", ("node03", "node07"))]


def test_a_rail_names_its_hosts_counted_past_a_few() -> None:
    (rail,) = fabric_faults([_rail(h) for h in reversed(HOSTS)])
    assert rail.hosts == tuple(HOSTS)
    assert rail.hosts_text() == "30 host(s): node01, node02, node03, node04, node05 (+25 more)"


@pytest.mark.parametrize("case", sorted(HOST_CLASSES))
def test_a_fault_pinned_on_a_host_fails_exactly_that_host(case: str) -> None:
    culprit = "node19"
    findings = [HOST_CLASSES[case](culprit), *(_rail(h) for h in HOSTS)]
    fleet = _fleet(findings)
    assert not is_fabric(findings[0])
    failed = [h.name for h in fleet.hosts if h.health.state is Health.FAILED]
    assert failed == [culprit]
    drain = remedy.drain_plan(fleet, max_share=1.0)
    assert [hp.host for hp in drain.hosts] == [culprit]
    assert [s.finding.id for s in drain.hosts[0].steps] == [findings[0].id]
    junit = build_junit(fleet)
    failing = {(s.get("name"), tc.get("name")) for s in junit.findall("testsuite") for tc in s.findall("testcase")
               if tc.find("failure") is not None}
    assert failing == {(culprit, findings[0].id), ("fabric", f"{rules.fabric.RAIL_SLOW.id} rail 6 (mlx5_6)")}


def test_a_fail_fault_of_the_fabric_alone_fails_the_run() -> None:
    # exit 1, as any fail finding: the run found something wrong, though no host is to blame
    assert for_fleet(_fleet([_rail(h) for h in HOSTS])) is ExitStatus.FINDINGS_FAIL
    # a warn (a fault not localised) exits 0, as any warn, and -q still prints it
    fleet = _fleet([_unlocalised(h) for h in HOSTS])
    assert for_fleet(fleet) is ExitStatus.OK and "fabric.slow.unlocalised" in quiet_text(fleet)


def test_a_fabric_finding_is_told_by_its_rule_alone() -> None:
    declared = {r.id for r in rules.ALL if r.fabric}
    assert declared == {rules.fabric.RAIL_SLOW.id, rules.fabric.PATH_SLOW.id, rules.fabric.SLOW_UNLOCALISED.id}
    assert is_fabric(_ring_unexplained("n1")) and not is_fabric(_ring_bisected("n1"))
    assert not any(is_fabric(make("n1")) for make in HOST_CLASSES.values())


def test_the_junit_fabric_case_says_the_hosts() -> None:
    fleet = _fleet([_rail(h) for h in HOSTS])
    suite = build_junit(fleet).find("testsuite[@name='fabric']")
    assert suite is not None
    (case,) = suite.findall("testcase")
    failure = case.find("failure")
    assert failure is not None and "30 host(s): node01" in (failure.get("message") or "")
    assert ET.tostring(case).count(b"rail 6 is slow everywhere") == 2  # the message and the text, once each


@pytest.mark.parametrize("case", sorted(FABRIC_CLASSES))
def test_a_fabric_fault_makes_no_repeat_offender_nor_an_ansible_group_to_act_on(case: str) -> None:
    findings = FABRIC_CLASSES[case](HOSTS)
    # a rail slow night after night is not every host's recurring fault
    assert offenders.run_of("r1", HOSTS, findings).findings == {}
    groups = json.dumps(render_inventory(_fleet(findings)))
    assert "fabric_" not in groups and "severity_" not in groups
