"""What to do about each finding: one action class per finding id, and the facts that justify it.

Operators want the action, not only the diagnosis (OCI's GPU scanner: software fix / reboot /
reboot-then-repair; Nebius: node problem -> re-check -> hardware problem).  `ACTIONS` is the one
table: every id of the catalog (verdict/checks/__init__.py FINDING_IDS) has exactly one row,
tests/verdict/test_actions.py holds the two together.  A row may refine its class from the
finding itself where the id spans several remedies (an Xid's own action, NVML's recovery action).

The classes escalate in the order declared.  `probe remediate` (verdict/remedy.py) turns the
disruptive ones into an Ansible playbook a person may approve; fleetprobe never runs it.

Pure: a finding in, its action out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.facts import xid as xids
from orchestrator.verdict.findings import Action, Finding

__all__ = ["ACTIONS", "HOST_WIDE", "Action", "Rule", "action_of", "decide"]


@dataclass(frozen=True)
class Rule:
    action: Action
    because: str  # the facts that justify the action, as an operator reads them
    service: str | None = None  # RESTART_SERVICE: the systemd unit
    refine: Callable[[Finding], Action | None] | None = None  # the finding's own facts, where they decide


def _xid_action(f: Finding) -> Action | None:
    """gpu.xid: the action NVIDIA's Xid catalog gives the code (facts/xid.py)."""
    m = re.match(r"Xid (\d+)", f.message)
    info = xids.XIDS.get(int(m.group(1))) if m else None
    if info is None:
        return None
    return {"application": Action.NONE, "reset": Action.RESET_GPU, "reboot": Action.REBOOT,
            "inspect_hardware": Action.RESEAT_INSPECT}.get(info.action)


def _recovery_action(f: Finding) -> Action | None:
    """gpu.reset_required: NVML's recovery action asks for a node reboot or a GPU reset."""
    return Action.REBOOT if f.actual == "NODE_REBOOT" else None


def _nccl_error(f: Finding) -> Action | None:
    """nccl.error: a collective that hung leaves the GPUs wedged; another error is a setting."""
    return Action.REBOOT if f.actual == "hang" else None


_FM = "nvidia-fabricmanager"
C, N, R, S, B, H, X = (Action.CONFIGURE, Action.NONE, Action.RESET_GPU, Action.RESTART_SERVICE, Action.REBOOT,
                       Action.RESEAT_INSPECT, Action.RMA)

ACTIONS: dict[str, Rule] = {
    # host and identity
    "host.board.mismatch": Rule(X, "DMI board vendor/model differ from the order: another product was delivered"),
    "host.virtualized": Rule(N, "a hypervisor: the topology is what it exposes"),
    "host.driver.missing": Rule(C, "GPUs on the bus, no /proc/driver/nvidia: the driver is not installed or loaded"),
    "host.driver.version": Rule(C, "the loaded driver is outside the written driver_min/driver_max"),
    "host.kernel_log.unreadable": Rule(C, "no kernel-log source was readable by the probe user"),
    "host.segfault.gpu_library": Rule(C, "processes crashed inside libnccl/libcuda: user-space and driver versions"),
    "identity.serial.needs_root": Rule(N, "serials are root-only: run with become to record them"),
    "identity.hostname.duplicate": Rule(C, "two inventory hosts report one hostname"),
    "identity.name.claimed": Rule(N, "a document spoke for a host it cannot be shown to be: nothing of it is "
                                     "judged, so there is nothing to do on any host under that name"),
    "identity.system_serial.duplicate": Rule(H, "two hosts report one DMI serial: a cloned or forged identity"),
    "identity.uuid.duplicate": Rule(H, "one GPU UUID on two GPUs: ask which physical GPU this is"),
    "identity.gpu_serial.duplicate": Rule(H, "one GPU serial twice in the fleet"),
    "probe.raw_mode": Rule(C, "no usable python3 on the host: facts came from text"),
    "probe.data.malformed": Rule(N, "a probe's data could not be read: the probe version, not the host"),
    "topology.class.outlier": Rule(H, "the host's shape differs from its class's majority"),
    # GPUs
    "gpu.lost": Rule(B, "NVML answers GPU_IS_LOST"),
    "gpu.count.mismatch": Rule(H, "fewer or more GPUs than gpu_count"),
    "gpu.count.pci_vs_nvml": Rule(H, "a GPU on the PCI bus that NVML does not list"),
    "gpu.count.pci_vs_driver": Rule(H, "a GPU on the PCI bus missing from /proc/driver/nvidia and /dev"),
    "gpu.count.partial_fabric": Rule(H, "a GPU count no NVSwitch board of this NV# has"),
    "gpu.model.mismatch": Rule(X, "the NVML name is not the ordered model"),
    "gpu.mig.enabled": Rule(C, "MIG mode is on"),
    "gpu.virtualization": Rule(N, "vGPU or pass-through: what the hypervisor exposes"),
    "gpu.row_remap.pending": Rule(R, "remapped rows pending: applied at the next GPU reset"),
    "gpu.row_remap.failure": Rule(X, "a row remap failed: uncorrectable memory not repaired"),
    "gpu.xid": Rule(B, "an Xid in this boot; the class is the Xid catalog's action for its code", refine=_xid_action),
    "gpu.fallen_off_bus": Rule(B, "the kernel log says the GPU fell off the bus"),
    "gpu.gdr.peermem_error": Rule(C, "nvidia-peermem errors: the module against the driver and RDMA stack"),
    "gpu.gdr.unavailable": Rule(C, "no peer-memory module and no DMA-BUF path for GPUDirect RDMA"),
    "gpu.nvml.version_mismatch": Rule(B, "NVML and the kernel module are different driver versions"),
    "gpu.ecc.uncorrectable": Rule(R, "uncorrectable ECC errors: drain, reset, check remapping"),
    "gpu.ecc.sram_threshold": Rule(H, "100+ correctable SRAM errors over the GPU's life"),
    "gpu.reset_required": Rule(R, "NVML's recovery action or a RESET_REQUIRED answer (NODE_REBOOT: reboot)",
                               refine=_recovery_action),
    "gpu.clocks.slowdown": Rule(H, "HW slowdown / thermal / power brake clock event reasons"),
    "gpu.clocks.violation": Rule(H, "thermal/reliability/board-limit violation time"),
    "gpu.thermal.margin_low": Rule(H, "5 C or less from the slowdown threshold"),
    "gpu.power.limit_low": Rule(C, "the power limit is below the board's default"),
    "gpu.persistence.disabled": Rule(S, "persistence mode off: nvidia-persistenced keeps it on",
                                     service="nvidia-persistenced"),
    "gpu.vbios.mixed": Rule(C, "GPUs of one model run different VBIOS versions"),
    "gpu.nvlink.errors": Rule(H, "NVLink error counters grew since the previous run of the boot"),
    "gpu.driver.unresponsive": Rule(B, "an NVML/CUDA call did not return: the driver is wedged"),
    "gpu.driver.process_stuck": Rule(B, "a process sleeps uninterruptibly in the driver: it cannot be killed"),
    "sensor.fan.zero_while_hot": Rule(H, "every fan at 0 % while the GPU is hot"),
    "sensor.fan.not_reporting": Rule(H, "an actively cooled board reports no fan speed"),
    # NVLink and NVSwitch
    "nvlink.link.down": Rule(B, "fewer active NVLinks than the model or expectation: retrain them by a reboot"),
    "nvlink.p2p_status_mismatch": Rule(S, "NVLinks up but NVML P2P status not OK: the fabric manager",
                                       service=_FM),
    "nvlink.fabric.incomplete": Rule(S, "NVSwitch fabric registration incomplete or unhealthy", service=_FM),
    "nvlink.fabric.degraded": Rule(H, "the GPU's fabric health mask reports a degraded route or configuration"),
    "nvlink.fabric_manager.version": Rule(C, "the fabric manager package is not the driver's version"),
    "nvlink.domain.inconsistent": Rule(C, "the GPU's NVLink clique/cluster differs from its domain's"),
    "nvlink.nvswitch.count": Rule(H, "NVSwitches seen differ from nvswitch_count"),
    "nvlink.nvswitch.hidden": Rule(N, "the platform hides the NVSwitches"),
    "nvswitch.sxid": Rule(B, "an NVSwitch SXid in this boot"),
    # PCIe
    "pcie.link.downgraded": Rule(H, "a link trained below its maximum or the written generation/width"),
    "pcie.nic.shared_switch": Rule(H, "a NIC shares a GPU's switch uplink not by design: move it"),
    "pcie.gpu_nic.affinity": Rule(H, "a GPU without a NIC at the written level"),
    "pcie.nic.count": Rule(H, "NICs on the bus differ from nic_count"),
    "pcie.acs.enabled": Rule(C, "ACS redirect on switch ports between GPUs/NICs"),
    "pcie.config.needs_root": Rule(N, "config space readable by root only"),
    "pcie.aer": Rule(H, "AER errors in this boot"),
    "pcie.aer.counters": Rule(H, "AER counters on a GPU's or NIC's upstream links"),
    "pcie.replays": Rule(H, "the GPU's PCIe replay counter grew"),
    # measured bandwidth
    "p2p.status.disabled": Rule(C, "NVML P2P status not OK between GPUs"),
    "p2p.not_possible": Rule(C, "CUDA peer access unavailable where the links allow it"),
    "p2p.bandwidth.low": Rule(H, "a GPU pair copies below its link's floor"),
    "p2p.slower_than_host": Rule(H, "a pair slower than staging through host memory"),
    "p2p.asymmetric": Rule(H, "one direction under 75 % of the other"),
    "p2p.outlier": Rule(H, "a pair under 70 % of its host's pairs of the same link"),
    "p2p.uplink.contention": Rule(H, "all GPUs to the host at once under 60 % of their sum"),
    "p2p.data.mismatch": Rule(H, "copied bytes differ although CUDA reported success"),
    "p2p.host_bandwidth.low": Rule(H, "host<->GPU copies below the host-link floor"),
    "p2p.cuda.error": Rule(R, "a sticky CUDA error left the GPU unusable"),
    "p2p.gpu.error": Rule(N, "a GPU could not be measured (out of memory, unavailable): rerun"),
    "p2p.gpu.busy": Rule(N, "other processes used the GPU: rerun when idle"),
    "p2p.guard.unavailable": Rule(N, "no NVML to tell busy GPUs"),
    "p2p.budget.exhausted": Rule(N, "the probe's time budget ran out"),
    "nccl.busbw.low": Rule(H, "all_reduce bus bandwidth below its floor"),
    "nccl.slower_than_pcie": Rule(S, "NVLink all_reduce no faster than host staging: the fabric manager", service=_FM),
    "nccl.transport.unexpected": Rule(C, "NCCL chose SHM/NET on an NVLink box"),
    "nccl.env.override": Rule(C, "NCCL settings in the host's environment or conf files"),
    "nccl.data.wrong": Rule(H, "all_reduce results differ from the expected sum"),
    "nccl.error": Rule(C, "an NCCL call failed (a hung collective: reboot)", refine=_nccl_error),
    # NICs
    "nic.kernel_event": Rule(H, "an mlx5 event in this boot (slot power, temperature, health)"),
    "nic.port.down": Rule(H, "an InfiniBand/RoCE port is not active"),
    "nic.port.rate_low": Rule(H, "a port runs below its expected or its peers' rate"),
    "nic.port.errors": Rule(H, "link error counters grew"),
    "nic.firmware.outlier": Rule(C, "HCA firmware differs from its peers'"),
    "nic.device.unreadable": Rule(H, "ibstat could not read an HCA: its ports are unknown"),
    # the fabric qualification (fleet-wide: a pair measurement needs both its hosts)
    "fabric.host.slow": Rule(H, "slow with its peers on every rail: what its HCAs share (PCIe root, BIOS, NUMA, memory)"),
    "fabric.hca.slow": Rule(H, "one HCA slow with peers that are fast with others: its cable, transceiver or switch port"),
    "fabric.path.slow": Rule(N, "two ports slow only together: the route between them, not either host"),
    "fabric.rail.slow": Rule(N, "a rail slow for most of its pairs: its switches or routing, not the hosts"),
    "fabric.slow.unlocalised": Rule(N, "slow pairs the rounds could not pin on a host: more rounds"),
    "fabric.gdr.missing": Rule(C, "GPU memory could not be registered for RDMA: the peer-memory module or DMA-BUF"),
    "fabric.step.failed": Rule(N, "the host's fabric processes gave no figure: rerun, check the rail addresses"),
    "fabric.nccl.slow": Rule(H, "a multi-host all_reduce below the ports' line rate, bisected to this host"),
    "fabric.nccl.data_wrong": Rule(H, "a multi-host collective returned wrong elements"),
    "fabric.nccl.transport": Rule(C, "NCCL moved data between hosts over sockets though HCAs are there"),
    "fabric.answer.refused": Rule(N, "the host answered outside its plan: its answers were dropped, nothing to fix on its peers"),
    # software and the security floor
    "software.version.outlier": Rule(C, "driver/CUDA/kernel/BIOS/VBIOS differ from the host's peers"),
    "software.security.driver": Rule(C, "the driver lacks the fixes of an NVIDIA security bulletin"),
    "software.security.branch": Rule(C, "the driver's branch gets no more security fixes"),
    "software.security.firmware": Rule(C, "the adapter firmware lacks the fixes of an NVIDIA bulletin"),
    # fleet baselines
    "baseline.bandwidth.low": Rule(H, "a measured bandwidth beyond its class's spread"),
    "baseline.clocks.low": Rule(H, "SM clock under load below its class's"),
    "baseline.power.outlier": Rule(H, "power under load unlike its class's"),
    "baseline.temperature.high": Rule(H, "hotter than its siblings"),
    "baseline.errors.high": Rule(H, "corrected-error rate above its class's"),
    # history
    "host.repeat_offender": Rule(X, "the same fault came back or flapped over recent runs: the fix does not hold"),
}


# Rules about the whole host: their findings name no device (`devices` is empty), by design.
# tests/verdict/test_finding_devices.py holds every judged finding to it: a finding of any other id
# names its devices, one of these names none (HOST_WIDE_AT_TIMES: both, as the finding says).
HOST_WIDE: frozenset[str] = frozenset({
    # the host, its platform, its identity and its software
    "host.board.mismatch", "host.virtualized", "host.driver.missing", "host.driver.version",
    "host.kernel_log.unreadable", "host.segfault.gpu_library", "identity.serial.needs_root",
    # a document or answer that speaks beyond its host: about the sender, never a device of it
    "identity.name.claimed", "fabric.answer.refused",
    "probe.raw_mode", "probe.data.malformed", "topology.class.outlier", "host.repeat_offender",
    "software.version.outlier", "software.security.driver", "software.security.branch",
    # counts and settings of the host as a whole (a count names no one missing device)
    "gpu.count.mismatch", "gpu.count.partial_fabric", "gpu.gdr.peermem_error", "gpu.gdr.unavailable",
    "gpu.nvml.version_mismatch", "gpu.driver.process_stuck", "nvlink.fabric_manager.version",
    "nvlink.nvswitch.count", "nvlink.nvswitch.hidden", "pcie.nic.count", "pcie.config.needs_root",
    "p2p.status.disabled", "p2p.guard.unavailable", "p2p.budget.exhausted",
    # the probe's error names its GPU only in text ("gpu 3 setup"): no device is claimed from it
    "p2p.cuda.error",
    # collectives of all the host's GPUs, and the fabric qualification's host-level verdicts
    "nccl.busbw.low", "nccl.slower_than_pcie", "nccl.transport.unexpected", "nccl.env.override",
    "nccl.data.wrong", "nccl.error", "fabric.host.slow", "fabric.gdr.missing", "fabric.step.failed",
    "fabric.nccl.slow", "fabric.nccl.data_wrong", "fabric.nccl.transport",
})
# Rules whose finding names devices where it is about some, and none where it is about the host.
HOST_WIDE_AT_TIMES: dict[str, str] = {
    "gpu.driver.unresponsive": "the watchdog names the driver, not one GPU",
    "nvlink.domain.inconsistent": "the fleet check: the host's clique differs from its domain's",
    "pcie.gpu_nic.affinity": "the placement on a C2C host is not known from a matrix",
    "pcie.aer": "the kernel event names no bus id",
    "nvswitch.sxid": "the kernel event names no bus id",
    "gpu.xid": "the kernel event names no bus id",
    "gpu.fallen_off_bus": "the kernel event names no bus id",
    **{fid: "a host-level measure (the median of its GPUs, a collective)" for fid in (
        "baseline.bandwidth.low", "baseline.clocks.low", "baseline.power.outlier", "baseline.temperature.high",
        "baseline.errors.high")},
}
UNKNOWN_ID = "an id this fleetprobe does not know"


def decide(f: Finding) -> tuple[Action, str]:
    """The finding's action class and the reason its rule gives: decided once, when the finding is
    made (verdict/findings.py Finding.__post_init__); every reader takes the finding's own."""
    rule = ACTIONS.get(f.id)
    return action_of(f), (rule.because if rule is not None else UNKNOWN_ID)


def action_of(f: Finding) -> Action:
    """The finding's action class (the table's, refined by the finding where its row says so);
    an id the table lacks (a stored run of a newer fleetprobe) is to be looked at."""
    rule = ACTIONS.get(f.id)
    if rule is None:
        return Action.RESEAT_INSPECT
    refined = rule.refine(f) if rule.refine is not None else None
    return refined or rule.action
