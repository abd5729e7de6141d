"""The registry of checks.  Each area module exports CHECKS (per host) and maybe FLEET_CHECKS."""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.verdict.checks import gpu, host, p2p, pcie
from orchestrator.verdict.checks.base import FleetCheck, HostCheck, HostView
from orchestrator.verdict.findings import Finding

_AREAS = [host, gpu, pcie, p2p]

HOST_CHECKS: list[HostCheck] = [c for area in _AREAS for c in getattr(area, "CHECKS", [])]
FLEET_CHECKS: list[FleetCheck] = [c for area in _AREAS for c in getattr(area, "FLEET_CHECKS", [])]


# The facts sections FLEET_CHECKS read (duplicate hostnames/serials: host; GPU UUIDs/serials:
# gpus).  A fleet judged in worker processes hands the parent only these sections of each host, so
# a fleet check reading another section must add it here (tests/verdict/test_fleet_parallel.py compares).
FLEET_CHECK_SECTIONS: tuple[str, ...] = ("host", "gpus")


def run_host_checks(view: HostView) -> list[Finding]:
    findings: list[Finding] = []
    for check in HOST_CHECKS:
        findings.extend(check(view))
    return findings


def run_fleet_checks(views: list[HostView]) -> list[Finding]:
    findings: list[Finding] = []
    for fleet_check in FLEET_CHECKS:
        findings.extend(fleet_check(views))
    return findings


def run_checks(views: Iterable[HostView]) -> list[Finding]:
    views = list(views)
    findings = [f for v in views for f in run_host_checks(v)]
    return findings + run_fleet_checks(views)


# Every finding id fleetprobe can raise (documented in docs/findings.md); JUnit lists them as cases.
FINDING_IDS: tuple[str, ...] = (
    "host.board.mismatch", "host.virtualized", "host.driver.missing", "host.driver.version",
    "identity.serial.needs_root", "identity.hostname.duplicate", "identity.system_serial.duplicate",
    "topology.class.outlier", "probe.data.malformed",
    "gpu.lost", "gpu.count.mismatch", "gpu.count.pci_vs_nvml", "gpu.model.mismatch", "nvlink.link.down",
    "nvlink.p2p_status_mismatch", "gpu.mig.enabled", "gpu.virtualization", "sensor.fan.zero_while_hot",
    "sensor.fan.not_reporting", "gpu.row_remap.pending", "gpu.row_remap.failure", "nvlink.fabric.incomplete",
    "identity.uuid.duplicate", "identity.gpu_serial.duplicate",
    "pcie.link.downgraded", "pcie.nic.shared_switch", "pcie.acs.enabled", "gpu.count.pci_vs_driver",
    "pcie.config.needs_root", "pcie.gpu_nic.affinity",
    "p2p.not_possible", "p2p.bandwidth.low", "p2p.slower_than_host", "p2p.asymmetric", "p2p.outlier",
    "p2p.uplink.contention", "p2p.data.mismatch", "p2p.host_bandwidth.low", "p2p.cuda.error", "p2p.gpu.error",
    "p2p.gpu.busy", "p2p.guard.unavailable", "p2p.budget.exhausted",
    "probe.raw_mode", "nvlink.nvswitch.count", "nvlink.nvswitch.hidden", "pcie.nic.count", "p2p.status.disabled",
)
