"""The `nccl.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.verdict.causes import Cause
from orchestrator.verdict.findings import Action, Finding
from orchestrator.verdict.rule import Doc, Needs, Rule, follows
from orchestrator.verdict.rules import gpu, nvlink, p2p, pcie


def _nccl_error(f: Finding) -> Action | None:
    """nccl.error: a collective that hung leaves the GPUs wedged; another error is a setting."""
    return Action.REBOOT if f.actual == "hang" else None


BUSBW_LOW = Rule(
    "nccl.busbw.low",
    action=Action.RESEAT_INSPECT,
    because="all_reduce bus bandwidth below its floor",
    needs=Needs(sections=("nccl",), gpus=True),
    held_back=True,
    host_wide=True,
    fleet_subject="NCCL all_reduce vs peers",
    doc=Doc(
        severity="fail; info (unknown) when the largest message was under 256 MiB or busy GPUs were left out",
        kind="fault; unknown",
        means="all_reduce bus bandwidth below the floor of the GPU model and link class",
        todo="compare with the p2p pairs; NCCL settings, plugins, fabric manager; rerun",
    ),
)

SLOWER_THAN_PCIE = Rule(
    "nccl.slower_than_pcie",
    action=Action.RESTART_SERVICE,
    because="NVLink all_reduce no faster than host staging: the fabric manager",
    service="nvidia-fabricmanager",
    needs=Needs(sections=("nccl", "p2p"), gpus=True),
    held_back=True,
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="an NVLink box whose all_reduce is no faster than one copy staged through host "
        "memory (replaces `nccl.busbw.low`)",
        todo="nvidia-fabricmanager, `nvidia-smi nvlink -s`, NCCL settings",
    ),
)

TRANSPORT_UNEXPECTED = Rule(
    "nccl.transport.unexpected",
    action=Action.CONFIGURE,
    because="NCCL chose SHM/NET on an NVLink box",
    needs=Needs(sections=("nccl",), gpus=True),
    held_back=True,
    host_wide=True,
    doc=Doc(
        severity="fail; info under MIG/vGPU/VM",
        kind="fault; platform_limitation",
        means="NCCL chose SHM or NET on an NVLink/NVSwitch box: P2P is off (replaces the bandwidth findings)",
        todo="`nvidia-smi topo -p2p r`, IOMMU/ACS, NCCL_P2P_* settings",
    ),
)

ENV_OVERRIDE = Rule(
    "nccl.env.override",
    action=Action.CONFIGURE,
    because="NCCL settings in the host's environment or conf files",
    needs=Needs(sections=("nccl",), gpus=True),
    held_back=True,
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the host's environment, `/etc/nccl.conf` or `~/.nccl.conf` sets NCCL variables "
        "(a stale `NCCL_P2P_DISABLE=1`); measured without them unless `keep_env`; the "
        "network-only `NCCL_SOCKET_*` and `NCCL_IB_*` (multi-node job settings) do not "
        "count",
        todo="remove stale settings; rerun with `keep_env: true` to measure the site's settings",
    ),
)

DATA_WRONG = Rule(
    "nccl.data.wrong",
    action=Action.RESEAT_INSPECT,
    because="all_reduce results differ from the expected sum",
    needs=Needs(sections=("nccl",), gpus=True),
    held_back=True,
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="all_reduce results differ from the expected sum (`#wrong` elements per size)",
        todo="silent corruption: take the host out of service, check link error counters",
    ),
)

ERROR = Rule(
    "nccl.error",
    action=Action.CONFIGURE,
    because="an NCCL call failed (a hung collective: reboot)",
    refine=_nccl_error,
    needs=Needs(sections=("nccl",), gpus=True),
    held_back=True,
    host_wide=True,
    doc=Doc(
        severity="fail; info (platform_limitation) when MIG keeps NCCL from running",
        kind="fault; platform_limitation",
        means="an NCCL call failed (result code and NCCL's last error), or a collective hung and was aborted",
        todo="NCCL_DEBUG=INFO log, /dev/shm size, driver, fabric manager",
    ),
)


def causes() -> Iterator[Cause]:
    """Which findings of a host these rules' findings follow from (verdict/causes.py), each
    consequence's roots in the order they are preferred."""
    yield from follows(
        BUSBW_LOW,
        (
            TRANSPORT_UNEXPECTED,
            ENV_OVERRIDE,
            pcie.ACS_ENABLED,
            p2p.STATUS_DISABLED,
            nvlink.LINK_DOWN,
            nvlink.FABRIC_INCOMPLETE,
            gpu.LOST,
            gpu.COUNT_PCI_VS_NVML,
        ),
    )
    yield from follows(
        SLOWER_THAN_PCIE,
        (
            TRANSPORT_UNEXPECTED,
            ENV_OVERRIDE,
            pcie.ACS_ENABLED,
            p2p.STATUS_DISABLED,
            nvlink.LINK_DOWN,
            nvlink.FABRIC_INCOMPLETE,
            gpu.LOST,
            gpu.COUNT_PCI_VS_NVML,
            BUSBW_LOW,
        ),
    )
    yield from follows(
        TRANSPORT_UNEXPECTED,
        (ENV_OVERRIDE, p2p.STATUS_DISABLED, pcie.ACS_ENABLED, gpu.MIG_ENABLED, gpu.VIRTUALIZATION),
    )
    yield from follows(ERROR, (gpu.DRIVER_UNRESPONSIVE,))
