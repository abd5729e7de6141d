"""The `nvlink.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.verdict.causes import Cause, Scope
from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule, follows
from orchestrator.verdict.rules import gpu, host, nvswitch

NVSWITCH_COUNT = Rule(
    "nvlink.nvswitch.count",
    action=Action.RESEAT_INSPECT,
    because="NVSwitches seen differ from nvswitch_count",
    needs=Needs(any_of=("pcie", "nvlink"), expect=("nvswitch_count",)),
    host_wide=True,
    doc=Doc(
        severity="fail; info in a VM that shows none",
        kind="fault / platform_limitation",
        means="NVSwitches seen (PCI bus or NVLink remote ends, the larger) differ from "
        "`probe_expect.nvswitch_count`",
        todo="a missing switch leaves GPUs short of links; `nvidia-smi nvlink -s`, fabric manager, baseboard",
    ),
)

NVSWITCH_HIDDEN = Rule(
    "nvlink.nvswitch.hidden",
    action=Action.NONE,
    because="the platform hides the NVSwitches",
    needs=Needs(sections=("pcie", "nvlink")),
    host_wide=True,
    doc=Doc(
        severity="info",
        kind="platform_limitation",
        means="GPU NVLinks end on NVSwitches that are not on the host's PCI bus (the bus itself"
        " shows the GPUs); not raised for NVLink5 GPUs (B200/B300 boards, GB200 racks), "
        "whose NVSwitches are never PCI functions of the host",
        todo="the platform hides the fabric; its health cannot be checked from this host",
    ),
)

LINK_DOWN = Rule(
    "nvlink.link.down",
    action=Action.REBOOT,
    because="fewer active NVLinks than the model or expectation: retrain them by a reboot",
    needs=Needs(sections=("nvlink",), gpus=True),
    doc=Doc(
        severity="fail; info under MIG/vGPU or in a pass-through VM",
        kind="fault / platform_limitation",
        means="fewer active NVLinks than written (`nvlink_links_per_gpu`) or than the model has"
        " (SXM parts, `orchestrator/facts/gpu_models.py`), or links that exist but are "
        "inactive; bridge-optional PCIe cards with no active link: nothing, unless "
        "`nvlink_all_up: true` is written (then every link the GPU has must be active)",
        todo="`nvidia-smi nvlink -s -i N`, fabric manager, reseat/RMA the baseboard",
    ),
)

P2P_STATUS_MISMATCH = Rule(
    "nvlink.p2p_status_mismatch",
    action=Action.RESTART_SERVICE,
    because="NVLinks up but NVML P2P status not OK: the fabric manager",
    service="nvidia-fabricmanager",
    needs=Needs(sections=("nvlink", "gpus"), gpus=True),
    doc=Doc(
        severity="fail; info under MIG/vGPU",
        kind="fault / platform_limitation",
        means='NV# links up but NVML P2P status over NVLink is not OK: "links up but P2P dead"',
        todo="`nvidia-smi topo -p2p n`, driver P2P registry keys, fabric manager, IOMMU/ACS",
    ),
)

FABRIC_INCOMPLETE = Rule(
    "nvlink.fabric.incomplete",
    action=Action.RESTART_SERVICE,
    because="NVSwitch fabric registration incomplete or unhealthy",
    service="nvidia-fabricmanager",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="NVSwitch fabric registration not `completed`/SUCCESS, or health unhealthy/limited",
        todo="`systemctl status nvidia-fabricmanager` and its log",
    ),
)

FABRIC_MANAGER_VERSION = Rule(
    "nvlink.fabric_manager.version",
    action=Action.CONFIGURE,
    because="the fabric manager package is not the driver's version",
    needs=Needs(sections=("host",), any_of=("nvlink", "pcie")),
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="on an NVSwitch system the installed fabric manager package (dpkg) is not the driver's version",
        todo="install the fabric manager of the driver's exact version and restart it",
    ),
)

DOMAIN_INCONSISTENT = Rule(
    "nvlink.domain.inconsistent",
    action=Action.CONFIGURE,
    because="the GPU's NVLink clique/cluster differs from its domain's",
    needs=Needs(sections=("gpus",), gpus=True),
    host_wide_when="the fleet check: the host's clique differs from its domain's",
    doc=Doc(
        severity="warn",
        kind="fault",
        means="multi-node NVLink domain (non-zero fabric cluster UUID): a GPU of the host in "
        "another cluster/clique or with a zero UUID, or a host whose clique differs from "
        "most hosts of its domain (fleet check, 3+ hosts)",
        todo="check the fabric manager / NMX partition configuration and the GPU's NVLinks",
    ),
)

FABRIC_DEGRADED = Rule(
    "nvlink.fabric.degraded",
    action=Action.RESEAT_INSPECT,
    because="the GPU's fabric health mask reports a degraded route or configuration",
    needs=Needs(sections=("gpus",), gpus=True),
    held_back=True,
    doc=Doc(
        severity="fail (route unhealthy, incorrect configuration); warn (degraded bandwidth, route "
        "or access-timeout recovery)",
        kind="fault",
        means="a field of the GPU's fabric health mask (fabric info v2/v3) reports a problem, "
        "on single- and multi-node NVSwitch systems alike",
        todo="`nvidia-smi nvlink -s`, NVSwitch ports, fabric manager / NMX log, partition and "
        "chassis settings",
    ),
)


def causes() -> Iterator[Cause]:
    """Which findings of a host these rules' findings follow from (verdict/causes.py), each
    consequence's roots in the order they are preferred."""
    yield from follows(NVSWITCH_HIDDEN, (gpu.VIRTUALIZATION, host.VIRTUALIZED))
    yield from follows(LINK_DOWN, (gpu.LOST, gpu.FALLEN_OFF_BUS), scope=Scope.DEVICE)
    yield from follows(
        LINK_DOWN,
        (
            gpu.COUNT_PCI_VS_NVML,
            NVSWITCH_COUNT,
            FABRIC_MANAGER_VERSION,
            nvswitch.SXID,
            gpu.MIG_ENABLED,
            gpu.VIRTUALIZATION,
            gpu.DRIVER_UNRESPONSIVE,
        ),
    )
    yield from follows(P2P_STATUS_MISMATCH, (gpu.MIG_ENABLED, gpu.VIRTUALIZATION))
    yield from follows(FABRIC_INCOMPLETE, (FABRIC_MANAGER_VERSION, NVSWITCH_COUNT))
    yield from follows(FABRIC_DEGRADED, (FABRIC_INCOMPLETE, LINK_DOWN), scope=Scope.DEVICE)
    yield from follows(FABRIC_DEGRADED, (nvswitch.SXID, FABRIC_MANAGER_VERSION))
