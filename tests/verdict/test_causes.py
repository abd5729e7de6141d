"""One fault, one root (verdict/causes.py) and the health it gives a host (verdict/health.py)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from orchestrator.verdict import causes
from orchestrator.verdict.causes import Cause, Scope
from orchestrator.verdict.checks import CAUSES, FINDING_IDS
from orchestrator.verdict.classes import differs_only_in
from orchestrator.verdict.findings import (
    DeviceKind,
    Finding,
    FindingRef,
    Located,
    Severity,
    fault,
    limitation,
    pci_device,
)
from orchestrator.verdict.health import Health, decide, fault_severities


def test_every_declared_cause_names_ids_of_the_catalog_and_no_two_ids_cause_each_other() -> None:
    assert [(c.root, c.consequence) for c in CAUSES if c.root not in FINDING_IDS or c.consequence not in FINDING_IDS] \
        == []
    edges: dict[str, set[str]] = defaultdict(set)
    for c in CAUSES:
        if c.root != c.consequence:  # a self-cause groups repeats of one setting under the first
            edges[c.root].add(c.consequence)

    def reaches(a: str, b: str, seen: set[str]) -> bool:
        return any(n == b or (n not in seen and reaches(n, b, seen | {n})) for n in edges[a])

    loops = sorted({(a, b) for a in list(edges) for b in edges[a] if reaches(b, a, {b})})
    assert loops == [], loops


def _at(subject: str, bdf: str) -> Located:
    """A subject and the GPU its check names (its index where the subject gives one, as a check
    that read NVML would): the scopes read devices, never the text."""
    index = int(subject[3]) if subject.startswith("GPU") else None
    return Located(subject, (pci_device(DeviceKind.GPU, bdf, gpu=index),))


def _group(findings: list[Finding], table: list[Cause]) -> list[Finding]:
    return causes.group(findings, causes.by_consequence(table))


def test_a_chain_ends_at_one_root_and_hosts_never_meet() -> None:
    xid = fault("gpu.xid", "h1", _at("GPU1 (0000:2a:00.0)", "0000:2a:00.0"), "Xid 79")
    fell = fault("gpu.fallen_off_bus", "h1", _at("GPU1 (0000:2a:00.0)", "0000:2a:00.0"), "fell off")
    missing = fault("gpu.count.pci_vs_nvml", "h1", _at("0000:2a:00.0", "0000:2a:00.0"), "not in NVML")
    count = fault("gpu.count.mismatch", "h1", "GPUs", "7 of 8")
    other = fault("gpu.count.mismatch", "h2", "GPUs", "7 of 8")  # no root on its own host
    table = [Cause("gpu.xid", "gpu.fallen_off_bus", Scope.DEVICE),
             Cause("gpu.fallen_off_bus", "gpu.count.pci_vs_nvml", Scope.DEVICE),
             Cause("gpu.count.pci_vs_nvml", "gpu.count.mismatch")]
    out = {(f.host, f.id): f for f in _group([count, missing, fell, xid, other], table)}
    root = FindingRef("gpu.xid", "GPU1 (0000:2a:00.0)")
    assert [out[("h1", i)].caused_by for i in ("gpu.fallen_off_bus", "gpu.count.pci_vs_nvml", "gpu.count.mismatch")] \
        == [root] * 3
    assert out[("h1", "gpu.xid")].caused_by is None and len(out[("h1", "gpu.xid")].consequences) == 3
    assert out[("h2", "gpu.count.mismatch")].caused_by is None and out[("h2", "gpu.count.mismatch")].is_root


def test_scopes_device_and_subject_need_the_same_device_or_subject() -> None:
    xid = fault("gpu.xid", "h", _at("GPU1 (0000:2a:00.0)", "0000:2a:00.0"), "Xid 79")
    elsewhere = fault("gpu.fallen_off_bus", "h", _at("GPU4 (0000:9a:00.0)", "0000:9a:00.0"), "fell off")
    same = fault("gpu.fallen_off_bus", "h", _at("0000:2a:00.0", "0000:2a:00.0"), "fell off")
    out = _group([xid, elsewhere, same], [Cause("gpu.xid", "gpu.fallen_off_bus", Scope.DEVICE)])
    assert [f.caused_by for f in out] == [None, None, xid.ref]
    out = _group([xid, same], [Cause("gpu.xid", "gpu.fallen_off_bus", Scope.SUBJECT)])
    assert out[1].caused_by is None  # the same GPU, but another subject


def test_the_worst_root_then_the_first_declared_wins() -> None:
    warn_root = fault("a.b", "h", "s", "m", severity=Severity.WARN)
    fail_root = fault("c.d", "h", "s", "m")
    info_root = limitation("e.f", "h", "s", "m")
    child = fault("x.y", "h", "s", "m", severity=Severity.WARN)
    table = [Cause("e.f", "x.y"), Cause("a.b", "x.y"), Cause("c.d", "x.y")]
    assert _group([warn_root, fail_root, info_root, child], table)[3].caused_by == fail_root.ref
    assert _group([warn_root, info_root, child], table)[2].caused_by == warn_root.ref
    assert _group([info_root, child], table[:1])[1].caused_by == info_root.ref


def test_repeats_of_one_setting_group_under_the_first_and_a_declared_loop_still_has_a_root() -> None:
    ports = [fault("pcie.acs.enabled", "h", f"0000:{i:02x}:00.0", "ACS on") for i in range(4)]
    out = _group(ports, [Cause("pcie.acs.enabled", "pcie.acs.enabled")])
    assert [f.caused_by for f in out] == [None] + [ports[0].ref] * 3
    assert len(out[0].consequences) == 3
    a, b = fault("a.a", "h", "s", "m"), fault("b.b", "h", "s", "m")
    out = _group([a, b], [Cause("a.a", "b.b"), Cause("b.b", "a.a")])
    assert [f.caused_by for f in out] == [None, a.ref]


def test_an_outlier_follows_only_from_a_root_that_explains_every_difference() -> None:
    down = fault("nvlink.link.down", "h", _at("GPU2 (0000:3a:00.0)", "0000:3a:00.0"), "16 of 18")
    links_only = fault("topology.class.outlier", "h", "topology", "differs",
                       evidence=["fingerprint descriptor: nvlink_links_up", "fingerprint descriptor: gpu_pair_levels"])
    and_a_gpu = fault("topology.class.outlier", "h2", "topology", "differs",
                      evidence=["fingerprint descriptor: nvlink_links_up", "fingerprint descriptor: gpu_count"])
    down2 = fault("nvlink.link.down", "h2", _at("GPU2 (0000:3a:00.0)", "0000:3a:00.0"), "16 of 18")
    table = [Cause("nvlink.link.down", "topology.class.outlier",
                   when=differs_only_in("nvlink_links_up", "gpu_pair_levels"))]
    out = _group([down, links_only, down2, and_a_gpu], table)
    assert out[1].caused_by == down.ref and out[3].caused_by is None  # a GPU count the link cannot explain


@pytest.mark.parametrize("outcome, unfinished, severities, state", [
    ("unreachable", {}, [], Health.UNREACHABLE),
    ("ok", {}, [Severity.FAIL], Health.FAILED),
    ("interrupted", {"nvlink": "interrupted"}, [Severity.FAIL], Health.FAILED),  # a fault seen is a fault
    ("interrupted", {"nvlink": "interrupted"}, [Severity.WARN], Health.INCOMPLETE),
    ("timeout", {"p2p": "timeout (deadline 60 s)"}, [], Health.INCOMPLETE),
    ("ok", {}, [Severity.WARN, Severity.INFO], Health.DEGRADED),
    ("unsupported", {}, [Severity.INFO], Health.HEALTHY),
])
def test_health(outcome: str, unfinished: dict[str, str], severities: list[Severity], state: Health) -> None:
    findings = [Finding(f"a.b{i}", sev, fault("a.b", "h", "s", "m").kind, "h", f"s{i}", "m")
                for i, sev in enumerate(severities)]
    h = decide(outcome, "connection refused", unfinished, findings)
    assert h.state is state
    assert sum(h.faults.values()) == len(findings)
    if state is Health.INCOMPLETE:
        assert "judged on what finished" in h.reason and next(iter(unfinished)) in h.reason


def test_a_fault_counts_once_at_the_worst_severity_of_what_followed_from_it() -> None:
    root = fault("nvlink.link.down", "h", "GPU2", "down", severity=Severity.WARN)
    consequence = fault("p2p.bandwidth.low", "h", "GPU2->GPU3", "slow")
    grouped = _group([root, consequence], [Cause("nvlink.link.down", "p2p.bandwidth.low")])
    assert [(f.id, s) for f, s in fault_severities(grouped)] == [("nvlink.link.down", Severity.FAIL)]
    h = decide("ok", "", {}, grouped)
    assert h.state is Health.FAILED and dict(h.faults) == {"fail": 1, "warn": 0, "info": 0}
