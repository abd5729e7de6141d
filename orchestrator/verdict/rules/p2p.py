"""The `p2p.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.verdict.causes import Cause, Scope
from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule, follows
from orchestrator.verdict.rules import gpu, host, nvlink, pcie

STATUS_DISABLED = Rule(
    "p2p.status.disabled",
    action=Action.CONFIGURE,
    because="NVML P2P status not OK between GPUs",
    needs=Needs(sections=("gpus",), gpus=True),
    host_wide=True,
    doc=Doc(
        severity="warn on P2P-capable bare metal; info for GeForce cards, VMs and MIG",
        kind="fault / platform_limitation",
        means="NVML P2P read status is not OK (NS, DR, CNS, GNS, U) between GPU pairs, both "
        "directions; TNS (across the CPU interconnect, by design) is not counted",
        todo="`nvidia-smi topo -p2p r`; ACS/IOMMU, driver registry keys, BIOS; ask a provider for P2P",
    ),
)

NOT_POSSIBLE = Rule(
    "p2p.not_possible",
    action=Action.CONFIGURE,
    because="CUDA peer access unavailable where the links allow it",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="fail; info (platform_limitation)",
        kind="fault or platform_limitation",
        means="links (NV#, NVML NVLink status) say P2P should work, CUDA peer access is "
        "unavailable or enabling failed; or: product without P2P (GeForce), or MIG / "
        "virtualized GPUs",
        todo="check `nvidia-smi topo -p2p r`, fabric manager, pool policy, ACS/IOMMU; expected;"
        " plan for host-staged traffic",
    ),
)

BANDWIDTH_LOW = Rule(
    "p2p.bandwidth.low",
    action=Action.RESEAT_INSPECT,
    because="a GPU pair copies below its link's floor",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="peer copy below the floor",
        todo="`nvidia-smi nvlink -s/-e`, fabric state, rerun",
    ),
)

SLOWER_THAN_HOST = Rule(
    "p2p.slower_than_host",
    action=Action.RESEAT_INSPECT,
    because="a pair slower than staging through host memory",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="peer copy slower than staging through host memory (½ × min(d2h src, h2d dst))",
        todo="degraded peer path (slow NVLink, ACS redirect, IOMMU)",
    ),
)

ASYMMETRIC = Rule(
    "p2p.asymmetric",
    action=Action.RESEAT_INSPECT,
    because="one direction under 75 % of the other",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="one direction < 75% of the other",
        todo="a lane/link trained down or erroring one way",
    ),
)

OUTLIER = Rule(
    "p2p.outlier",
    action=Action.RESEAT_INSPECT,
    because="a pair under 70 % of its host's pairs of the same link",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="pair < 70% of the median of the host's own pairs of the same link class (not already low)",
        todo="compare that pair's link counters",
    ),
)

UPLINK_CONTENTION = Rule(
    "p2p.uplink.contention",
    action=Action.RESEAT_INSPECT,
    because="all GPUs to the host at once under 60 % of their sum",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="warn; info (platform_limitation)",
        kind="fault or platform_limitation",
        means="all GPUs to host at once < 60% of n × slowest single GPU; or: same, and the PCIe"
        " tree shows GPUs sharing uplinks by design",
        todo="oversubscribed uplink; see pcie uplink groups; expected for the board",
    ),
)

DATA_MISMATCH = Rule(
    "p2p.data.mismatch",
    action=Action.RESEAT_INSPECT,
    because="copied bytes differ although CUDA reported success",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="copied bytes differ although CUDA reported success",
        todo="dmesg IOMMU/DMAR, XIDs, ACS; do not use the path",
    ),
)

HOST_BANDWIDTH_LOW = Rule(
    "p2p.host_bandwidth.low",
    action=Action.RESEAT_INSPECT,
    because="host<->GPU copies below the host-link floor",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="h2d or d2h below the host floor",
        todo="PCIe downtraining, NUMA, IOMMU",
    ),
)

CUDA_ERROR = Rule(
    "p2p.cuda.error",
    action=Action.RESET_GPU,
    because="a sticky CUDA error left the GPU unusable",
    needs=Needs(sections=("p2p",), gpus=True),
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="a sticky CUDA error (launch failure, illegal address) stopped the measurement",
        todo="dmesg XIDs",
    ),
)

GPU_ERROR = Rule(
    "p2p.gpu.error",
    action=Action.NONE,
    because="a GPU could not be measured (out of memory, unavailable): rerun",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="a GPU could not be measured (OOM, device unavailable)",
        todo="free its memory / check the GPU, rerun",
    ),
)

GPU_BUSY = Rule(
    "p2p.gpu.busy",
    action=Action.NONE,
    because="other processes used the GPU: rerun when idle",
    needs=Needs(sections=("p2p",), gpus=True),
    doc=Doc(
        severity="info",
        kind="unknown",
        means="a GPU had other compute processes: skipped (or measured with `force`, figures may be low)",
        todo="rerun when idle",
    ),
)

GUARD_UNAVAILABLE = Rule(
    "p2p.guard.unavailable",
    action=Action.NONE,
    because="no NVML to tell busy GPUs",
    needs=Needs(sections=("p2p",), gpus=True),
    host_wide=True,
    doc=Doc(
        severity="info",
        kind="unknown",
        means="NVML missing: busy GPUs could not be detected",
        todo="expose libnvidia-ml",
    ),
)

BUDGET_EXHAUSTED = Rule(
    "p2p.budget.exhausted",
    action=Action.NONE,
    because="the probe's time budget ran out",
    needs=Needs(sections=("p2p",), gpus=True),
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="the time budget ran out; `evidence` lists what was not reached",
        todo="raise `budget_s`, fewer pairs, smaller size",
    ),
)


def causes() -> Iterator[Cause]:
    """Which findings of a host these rules' findings follow from (verdict/causes.py), each
    consequence's roots in the order they are preferred."""
    yield from follows(STATUS_DISABLED, (gpu.MIG_ENABLED, gpu.VIRTUALIZATION, host.VIRTUALIZED))
    yield from follows(NOT_POSSIBLE, (STATUS_DISABLED, gpu.MIG_ENABLED, gpu.VIRTUALIZATION, pcie.ACS_ENABLED))
    yield from follows(
        BANDWIDTH_LOW,
        (pcie.ACS_ENABLED, STATUS_DISABLED, nvlink.FABRIC_INCOMPLETE, nvlink.FABRIC_MANAGER_VERSION),
    )
    yield from follows(
        BANDWIDTH_LOW, (nvlink.LINK_DOWN, pcie.LINK_DOWNGRADED, gpu.CLOCKS_SLOWDOWN), scope=Scope.DEVICE
    )
    yield from follows(
        SLOWER_THAN_HOST,
        (pcie.ACS_ENABLED, STATUS_DISABLED, nvlink.FABRIC_INCOMPLETE, nvlink.FABRIC_MANAGER_VERSION),
    )
    yield from follows(
        SLOWER_THAN_HOST,
        (nvlink.LINK_DOWN, pcie.LINK_DOWNGRADED, gpu.CLOCKS_SLOWDOWN, BANDWIDTH_LOW),
        scope=Scope.DEVICE,
    )
    yield from follows(
        ASYMMETRIC,
        (pcie.ACS_ENABLED, STATUS_DISABLED, nvlink.FABRIC_INCOMPLETE, nvlink.FABRIC_MANAGER_VERSION),
    )
    yield from follows(
        ASYMMETRIC,
        (nvlink.LINK_DOWN, pcie.LINK_DOWNGRADED, gpu.CLOCKS_SLOWDOWN, BANDWIDTH_LOW),
        scope=Scope.DEVICE,
    )
    yield from follows(
        OUTLIER, (pcie.ACS_ENABLED, STATUS_DISABLED, nvlink.FABRIC_INCOMPLETE, nvlink.FABRIC_MANAGER_VERSION)
    )
    yield from follows(
        OUTLIER,
        (nvlink.LINK_DOWN, pcie.LINK_DOWNGRADED, gpu.CLOCKS_SLOWDOWN, BANDWIDTH_LOW),
        scope=Scope.DEVICE,
    )
    yield from follows(HOST_BANDWIDTH_LOW, (pcie.LINK_DOWNGRADED,), scope=Scope.DEVICE)
    yield from follows(CUDA_ERROR, (host.DRIVER_MISSING,))
    yield from follows(GPU_ERROR, (gpu.LOST, gpu.FALLEN_OFF_BUS, gpu.XID), scope=Scope.DEVICE)
    yield from follows(GPU_ERROR, (gpu.DRIVER_UNRESPONSIVE,))
