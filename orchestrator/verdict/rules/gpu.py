"""The `gpu.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from orchestrator.facts import xid as xids
from orchestrator.verdict.causes import Cause, Scope
from orchestrator.verdict.findings import Action, Finding
from orchestrator.verdict.rule import Doc, Needs, Rule, follows
from orchestrator.verdict.rules import host, nvlink, sensor


def _xid_action(f: Finding) -> Action | None:
    """gpu.xid: the action NVIDIA's Xid catalog gives the code (facts/xid.py)."""
    m = re.match(r"Xid (\d+)", f.message)
    info = xids.XIDS.get(int(m.group(1))) if m else None
    if info is None:
        return None
    return {
        "application": Action.NONE,
        "reset": Action.RESET_GPU,
        "reboot": Action.REBOOT,
        "inspect_hardware": Action.RESEAT_INSPECT,
    }.get(info.action)


def _recovery_action(f: Finding) -> Action | None:
    """gpu.reset_required: NVML's recovery action asks for a node reboot or a GPU reset."""
    return Action.REBOOT if f.actual == "NODE_REBOOT" else None


LOST = Rule(
    "gpu.lost",
    action=Action.REBOOT,
    because="NVML answers GPU_IS_LOST",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="NVML answers GPU_IS_LOST for the GPU",
        todo="`dmesg` for Xid 79; reset/reboot; reseat or RMA if it recurs",
    ),
)

COUNT_MISMATCH = Rule(
    "gpu.count.mismatch",
    action=Action.RESEAT_INSPECT,
    because="fewer or more GPUs than gpu_count",
    needs=Needs(any_of=("gpus", "pcie"), expect=("gpu_count",)),
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="GPU count (NVML, else the PCI bus) differs from `probe_expect.gpu_count`; "
        "without a written count, nothing (the cross-checks below and the class outlier "
        "still fire)",
        todo="compare with the order; `gpu.count.pci_vs_nvml` names the bus id",
    ),
)

COUNT_PCI_VS_NVML = Rule(
    "gpu.count.pci_vs_nvml",
    action=Action.RESEAT_INSPECT,
    because="a GPU on the PCI bus that NVML does not list",
    needs=Needs(sections=("gpus", "pcie")),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="bus ids on the PCI bus but not in NVML (or the reverse), with the /proc and /dev counts",
        todo="the driver did not attach the GPU: `dmesg \\| grep NVRM`, excluded GPUs, power, seating",
    ),
)

MODEL_MISMATCH = Rule(
    "gpu.model.mismatch",
    action=Action.RMA,
    because="the NVML name is not the ordered model",
    needs=Needs(sections=("gpus",), expect=("gpu_model",), gpus=True),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="the NVML name does not contain `probe_expect.gpu_model`",
        todo="not the ordered model",
    ),
)

MIG_ENABLED = Rule(
    "gpu.mig.enabled",
    action=Action.CONFIGURE,
    because="MIG mode is on",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="info; warn with `mig: false`",
        kind="platform_limitation",
        means="MIG is on (or pending) on the GPU: no NVLink or P2P between instances",
        todo="disable MIG (`nvidia-smi -i N -mig 0`, reset) if whole GPUs are needed",
    ),
)

VIRTUALIZATION = Rule(
    "gpu.virtualization",
    action=Action.NONE,
    because="vGPU or pass-through: what the hypervisor exposes",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="info; warn with `virtualization: none`",
        kind="platform_limitation",
        means="NVML virtualization mode pass-through / vGPU / host vGPU",
        todo="topology and NVLink are what the hypervisor exposes",
    ),
)

ROW_REMAP_PENDING = Rule(
    "gpu.row_remap.pending",
    action=Action.RESET_GPU,
    because="remapped rows pending: applied at the next GPU reset",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="remapped rows pending: the GPU needs a reset",
        todo="drain and reset the GPU (`nvidia-smi -r -i N`) or reboot",
    ),
)

ROW_REMAP_FAILURE = Rule(
    "gpu.row_remap.failure",
    action=Action.RMA,
    because="a row remap failed: uncorrectable memory not repaired",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="a row remapping failed: uncorrectable memory error not repaired",
        todo="RMA",
    ),
)

COUNT_PARTIAL_FABRIC = Rule(
    "gpu.count.partial_fabric",
    action=Action.RESEAT_INSPECT,
    because="a GPU count no NVSwitch board of this NV# has",
    needs=Needs(sections=("topology",), gpus=True),
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="no written `gpu_count`, and every GPU pair is at one NV# of a switch fabric "
        "(NV18: boards of 2, 4 or 8; NV12: 2 or 8; NV6: 4 or 16) but the host has another"
        " count (6 NV18 GPUs): GPUs missing or withheld",
        todo="write the ordered count (`probe_expect: {gpu_count: 8}`) for a pass/fail; on bare"
        " metal look for the missing GPUs (`lspci`, `dmesg \\| grep -i nvrm`)",
    ),
)

COUNT_PCI_VS_DRIVER = Rule(
    "gpu.count.pci_vs_driver",
    action=Action.RESEAT_INSPECT,
    because="a GPU on the PCI bus missing from /proc/driver/nvidia and /dev",
    needs=Needs(sections=("pcie",), gpus=True),
    doc=Doc(
        severity="fail (platform_limitation for GPUs only missing from a container's /dev)",
        kind="fault",
        means="a GPU on the PCI bus is missing from `/proc/driver/nvidia/gpus` and/or "
        "`/dev/nvidia<minor>`; one host-level finding when the driver is not loaded at "
        "all; vfio-bound GPUs are pass-through, not counted",
        todo="dmesg for NVRM/Xid, power and seating",
    ),
)

XID = Rule(
    "gpu.xid",
    action=Action.REBOOT,
    because="an Xid in this boot; the class is the Xid catalog's action for its code",
    refine=_xid_action,
    needs=Needs(sections=("kmsg",)),
    host_wide_when="the kernel event names no bus id",
    doc=Doc(
        severity="fail (reset / reboot / inspect hardware); warn for a burst of application Xids "
        "(5+ on one GPU) or a code the table lacks; info for one application Xid",
        kind="fault",
        means="an NVRM Xid in this boot, per GPU and code, with the table's meaning and action;"
        " ignorable codes (45, nonfatal NVLink5, 121) raise nothing",
        todo="the hint names the action: restart the job, `nvidia-smi -r`, reboot, or take the "
        "GPU out of service",
    ),
)

FALLEN_OFF_BUS = Rule(
    "gpu.fallen_off_bus",
    action=Action.REBOOT,
    because="the kernel log says the GPU fell off the bus",
    needs=Needs(sections=("kmsg",)),
    host_wide_when="the kernel event names no bus id",
    doc=Doc(
        severity="fail",
        kind="fault",
        means="the kernel log says the GPU fell off the PCIe bus",
        todo="reboot; check power, seating, cooling, slot",
    ),
)

GDR_PEERMEM_ERROR = Rule(
    "gpu.gdr.peermem_error",
    action=Action.CONFIGURE,
    because="nvidia-peermem errors: the module against the driver and RDMA stack",
    needs=Needs(sections=("kmsg",)),
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the kernel log of this boot has `nvidia-peermem` ERROR lines (GPUDirect RDMA "
        "registrations failed)",
        todo="check nvidia_peermem against the loaded driver and the RDMA stack; reload it "
        "after a driver upgrade, or use DMA-BUF",
    ),
)

GDR_UNAVAILABLE = Rule(
    "gpu.gdr.unavailable",
    action=Action.CONFIGURE,
    because="no peer-memory module and no DMA-BUF path for GPUDirect RDMA",
    needs=Needs(sections=("nic",), switched_on=("gdr",), gpus=True),
    host_wide=True,
    doc=Doc(
        severity="fail (kernel < 5.12, or a GPU that reports no DMA-BUF support); warn otherwise",
        kind="fault; unknown when only DMA-BUF could serve and its support was not read",
        means="with `gdr: true` on a host with GPUs and RDMA devices: no GPU peer-memory module"
        " (nvidia_peermem / nv_peer_mem) is loaded and DMA-BUF "
        "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED per GPU, read by the p2p probe, and a "
        "5.12+ kernel) cannot stand in",
        todo="`modprobe nvidia_peermem`; check NCCL's DMA-BUF line",
    ),
)

NVML_VERSION_MISMATCH = Rule(
    "gpu.nvml.version_mismatch",
    action=Action.REBOOT,
    because="NVML and the kernel module are different driver versions",
    needs=Needs(sections=("gpus",)),
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="`nvmlInit` answered LIB_RM_VERSION_MISMATCH: the loaded kernel module and "
        "libnvidia-ml are different driver versions, so NVML and CUDA refuse to start",
        todo="reboot, or reload the nvidia modules after a driver upgrade",
    ),
)

ECC_UNCORRECTABLE = Rule(
    "gpu.ecc.uncorrectable",
    action=Action.RESET_GPU,
    because="uncorrectable ECC errors: drain, reset, check remapping",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="fail (volatile: since the driver loaded), warn (lifetime only)",
        kind="fault",
        means="uncorrectable ECC errors, with the DRAM / SRAM split where NVML gives it (any "
        "count is a fault)",
        todo="drain the GPU, check remapping/retirement and reset it; repeated: RMA",
    ),
)

ECC_SRAM_THRESHOLD = Rule(
    "gpu.ecc.sram_threshold",
    action=Action.RESEAT_INSPECT,
    because="100+ correctable SRAM errors over the GPU's life",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="100 or more correctable SRAM ECC errors over the GPU's life (fleetprobe's threshold)",
        todo="watch the rate, run diagnostics (`dcgmi diag -r 3`)",
    ),
)

ECC_DISABLED = Rule(
    "gpu.ecc.disabled",
    action=Action.CONFIGURE,
    because="ECC is off, or set to go off at the next reset: memory errors are neither corrected nor counted",
    needs=Needs(sections=("gpus",), gpus=True),
    held_back=True,  # a GPU without ECC, or a board that ships with it off: nothing to judge
    doc=Doc(
        severity="warn",
        kind="fault",
        means="NVML (or `nvidia-smi -q`) reports the GPU's ECC mode off, or a pending mode that differs "
        "from the current one (the change applies at the next GPU reset); GPUs without ECC report no mode, "
        "and boards that ship with ECC off (GeForce, RTX workstation: `facts/gpu_models.py`) are not judged",
        todo="`nvidia-smi -i N -e 1`, then reset the GPU (or reboot); find who turned it off",
    ),
)

RESET_REQUIRED = Rule(
    "gpu.reset_required",
    action=Action.RESET_GPU,
    because="NVML's recovery action or a RESET_REQUIRED answer (NODE_REBOOT: reboot)",
    refine=_recovery_action,
    needs=Needs(sections=("gpus",), gpus=True),
    held_back=True,
    doc=Doc(
        severity="fail (recovery action GPU_RESET / NODE_REBOOT, or a RESET_REQUIRED answer); warn "
        "(DRAIN_AND_RESET, DRAIN_P2P, retired pages pending)",
        kind="fault",
        means="NVML's GPU recovery action field (R570+) asks for a reset or reboot, an NVML "
        "reading answers RESET_REQUIRED, or retired memory pages wait for a GPU reset "
        "(dynamic page retirement pending, before Ampere; Ampere and newer: "
        "`gpu.row_remap.pending`); not judged where neither the recovery action nor the "
        "retirement status is readable",
        todo="drain and reset the GPU (`nvidia-smi -r`) or reboot, as the action says",
    ),
)

CLOCKS_SLOWDOWN = Rule(
    "gpu.clocks.slowdown",
    action=Action.RESEAT_INSPECT,
    because="HW slowdown / thermal / power brake clock event reasons",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="fail for HW thermal slowdown (the GPU reached the temperature at which the hardware "
        "halves its clocks: a cooling fault); warn for HW slowdown or the power brake alone",
        kind="fault",
        means="the clock event reasons include HW slowdown, HW thermal or HW power brake (idle,"
        " application clocks, SW power cap, sync boost are not judged)",
        todo="check cooling, power supply and the power brake signal",
    ),
)

POWER_LIMIT_LOW = Rule(
    "gpu.power.limit_low",
    action=Action.CONFIGURE,
    because="the power limit is below the board's default",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the GPU's power limit (or the enforced one) is below 95 % of the board's default limit",
        todo="restore the default limit (`nvidia-smi -pl`), or ask why the platform enforces less",
    ),
)

NVLINK_ERRORS = Rule(
    "gpu.nvlink.errors",
    action=Action.RESEAT_INSPECT,
    because="NVLink error counters grew since the previous run of the boot",
    needs=Needs(sections=("nvlink",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="NVLink replay / recovery / CRC counters grew since the previous run of the same boot",
        todo="check the link, connector or NVSwitch port",
    ),
)

CLOCKS_VIOLATION = Rule(
    "gpu.clocks.violation",
    action=Action.RESEAT_INSPECT,
    because="thermal/reliability/board-limit violation time",
    needs=Needs(sections=("gpus",), gpus=True),
    held_back=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="NVML violation time (`nvmlDeviceGetViolationStatus`) of the thermal, reliability"
        " or board-limit policy is 1 % or more of the wall time since the previous run of"
        " the boot (else since the boot: kmsg's boot time); the power policy (SW power "
        "cap) is not judged",
        todo="check cooling and power delivery; `nvidia-smi -q -d PERFORMANCE`",
    ),
)

THERMAL_MARGIN_LOW = Rule(
    "gpu.thermal.margin_low",
    action=Action.RESEAT_INSPECT,
    because="5 C or less from the slowdown threshold",
    needs=Needs(sections=("gpus",), gpus=True),
    held_back=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the GPU is 5 °C or less from its slowdown threshold "
        "(`nvmlDeviceGetMarginTemperature`, else the slowdown threshold minus the "
        "temperature)",
        todo="check inlet temperature, airflow, fans, heatsink",
    ),
)

PERSISTENCE_DISABLED = Rule(
    "gpu.persistence.disabled",
    action=Action.RESTART_SERVICE,
    because="persistence mode off: nvidia-persistenced keeps it on",
    service="nvidia-persistenced",
    needs=Needs(sections=("gpus",), gpus=True),
    held_back=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="persistence mode is off on GPUs of the host (one finding per host naming them)",
        todo="run nvidia-persistenced or `nvidia-smi -pm 1` at boot",
    ),
)

VBIOS_MIXED = Rule(
    "gpu.vbios.mixed",
    action=Action.CONFIGURE,
    because="GPUs of one model run different VBIOS versions",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="GPUs of one model on one host run different VBIOS versions",
        todo="flash the fleet's VBIOS, or ask the vendor why one board differs",
    ),
)

DRIVER_UNRESPONSIVE = Rule(
    "gpu.driver.unresponsive",
    action=Action.REBOOT,
    because="an NVML/CUDA call did not return: the driver is wedged",
    needs=Needs(any_of=("gpus", "nvlink", "p2p", "nccl")),
    host_wide_when="the watchdog names the driver, not one GPU",
    doc=Doc(
        severity="fail",
        kind="fault",
        means="an NVML or CUDA call (named, with the GPU) did not return within its share of "
        "the probe's deadline; what the probe would have read after it is missing (the "
        "GPUs NVML no longer lists follow from it)",
        todo="look for stuck processes and Xids; reset the GPU if nothing holds it, else drain and reboot",
    ),
)

DRIVER_PROCESS_STUCK = Rule(
    "gpu.driver.process_stuck",
    action=Action.REBOOT,
    because="a process sleeps uninterruptibly in the driver: it cannot be killed",
    needs=Needs(sections=("host",)),
    held_back=True,
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="processes in uninterruptible sleep (state D) hold /dev/nvidia* in two readings: "
        "pid, command, wait channel, devices (not judged without root when other users' "
        "processes exist)",
        todo="a process stuck in the kernel cannot be killed and blocks a GPU reset: drain and reboot",
    ),
)


def causes() -> Iterator[Cause]:
    """Which findings of a host these rules' findings follow from (verdict/causes.py), each
    consequence's roots in the order they are preferred."""
    yield from follows(LOST, (FALLEN_OFF_BUS, XID), scope=Scope.DEVICE)
    yield from follows(
        COUNT_MISMATCH,
        (
            COUNT_PCI_VS_NVML,
            COUNT_PCI_VS_DRIVER,
            LOST,
            FALLEN_OFF_BUS,
            host.DRIVER_MISSING,
            DRIVER_UNRESPONSIVE,
        ),
    )
    yield from follows(COUNT_PCI_VS_NVML, (host.DRIVER_MISSING,))
    yield from follows(COUNT_PCI_VS_NVML, (FALLEN_OFF_BUS, XID), scope=Scope.DEVICE)
    yield from follows(COUNT_PCI_VS_NVML, (DRIVER_UNRESPONSIVE,))
    yield from follows(VIRTUALIZATION, (host.VIRTUALIZED,))
    yield from follows(ROW_REMAP_PENDING, (ROW_REMAP_FAILURE, ECC_UNCORRECTABLE), scope=Scope.SUBJECT)
    yield from follows(COUNT_PARTIAL_FABRIC, (DRIVER_UNRESPONSIVE,))
    yield from follows(COUNT_PCI_VS_DRIVER, (COUNT_PCI_VS_NVML, FALLEN_OFF_BUS, XID), scope=Scope.DEVICE)
    yield from follows(COUNT_PCI_VS_DRIVER, (host.DRIVER_MISSING,))
    yield from follows(FALLEN_OFF_BUS, (XID,), scope=Scope.DEVICE)
    yield from follows(GDR_UNAVAILABLE, (GDR_PEERMEM_ERROR,))
    yield from follows(ECC_UNCORRECTABLE, (ROW_REMAP_FAILURE,), scope=Scope.SUBJECT)
    yield from follows(
        RESET_REQUIRED, (ROW_REMAP_FAILURE, ROW_REMAP_PENDING, ECC_UNCORRECTABLE), scope=Scope.SUBJECT
    )
    yield from follows(RESET_REQUIRED, (LOST, FALLEN_OFF_BUS, XID), scope=Scope.DEVICE)
    yield from follows(
        CLOCKS_SLOWDOWN, (sensor.FAN_ZERO_WHILE_HOT, THERMAL_MARGIN_LOW, POWER_LIMIT_LOW), scope=Scope.SUBJECT
    )
    yield from follows(NVLINK_ERRORS, (nvlink.LINK_DOWN,), scope=Scope.DEVICE)
    yield from follows(
        CLOCKS_VIOLATION,
        (POWER_LIMIT_LOW, CLOCKS_SLOWDOWN, sensor.FAN_ZERO_WHILE_HOT, THERMAL_MARGIN_LOW),
        scope=Scope.SUBJECT,
    )
    yield from follows(
        THERMAL_MARGIN_LOW, (sensor.FAN_ZERO_WHILE_HOT, sensor.FAN_NOT_REPORTING), scope=Scope.SUBJECT
    )
    yield from follows(DRIVER_UNRESPONSIVE, (DRIVER_UNRESPONSIVE,), scope=Scope.SUBJECT)
    yield from follows(DRIVER_PROCESS_STUCK, (DRIVER_UNRESPONSIVE,))
