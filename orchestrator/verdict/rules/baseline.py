"""The `baseline.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.verdict.causes import Cause
from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule, follows
from orchestrator.verdict.rules import gpu, nccl, nvlink, p2p, pcie, sensor

BANDWIDTH_LOW = Rule(
    "baseline.bandwidth.low",
    action=Action.RESEAT_INSPECT,
    because="a measured bandwidth beyond its class's spread",
    needs=Needs(any_of=("p2p", "nccl"), gpus=True),
    held_back=True,
    host_wide_when="a host-level measure (the median of its GPUs, a collective)",
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="a P2P pair kind, host<->GPU, device-local or NCCL figure of a host or GPU below "
        "its class's median beyond the threshold",
        todo="compare the slow part's links, error counters and clocks with a peer's; reseat or inspect it",
    ),
)

CLOCKS_LOW = Rule(
    "baseline.clocks.low",
    action=Action.RESEAT_INSPECT,
    because="SM clock under load below its class's",
    needs=Needs(sections=("p2p",), gpus=True),
    held_back=True,
    host_wide_when="a host-level measure (the median of its GPUs, a collective)",
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the SM clock under the p2p probe's load of a GPU below its siblings', or of a "
        "host below its class's",
        todo="check cooling, power delivery and clock event reasons",
    ),
)

POWER_OUTLIER = Rule(
    "baseline.power.outlier",
    action=Action.RESEAT_INSPECT,
    because="power under load unlike its class's",
    needs=Needs(sections=("p2p",), gpus=True),
    held_back=True,
    host_wide_when="a host-level measure (the median of its GPUs, a collective)",
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the power draw under the p2p probe's load of a GPU outside its siblings' band, "
        "or of a host outside its class's",
        todo="check the power limit, cooling, throttling",
    ),
)

TEMPERATURE_HIGH = Rule(
    "baseline.temperature.high",
    action=Action.RESEAT_INSPECT,
    because="hotter than its siblings",
    needs=Needs(any_of=("gpus", "p2p"), gpus=True),
    held_back=True,
    host_wide_when="a host-level measure (the median of its GPUs, a collective)",
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the GPU is hotter than its siblings on the same host (under the p2p probe's load"
        " when read, else idle)",
        todo="check its fan, heatsink, airflow",
    ),
)

ERRORS_HIGH = Rule(
    "baseline.errors.high",
    action=Action.RESEAT_INSPECT,
    because="corrected-error rate above its class's",
    needs=Needs(sections=("gpus", "host"), gpus=True),
    held_back=True,
    host_wide_when="a host-level measure (the median of its GPUs, a collective)",
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the GPU's corrected ECC errors or PCIe replays per day of uptime above its class's",
        todo="watch the trend, run `dcgmi diag -r 3`, plan a replacement",
    ),
)


def causes() -> Iterator[Cause]:
    """Which findings of a host these rules' findings follow from (verdict/causes.py), each
    consequence's roots in the order they are preferred."""
    yield from follows(
        BANDWIDTH_LOW,
        (
            p2p.BANDWIDTH_LOW,
            p2p.HOST_BANDWIDTH_LOW,
            p2p.SLOWER_THAN_HOST,
            p2p.OUTLIER,
            p2p.ASYMMETRIC,
            p2p.UPLINK_CONTENTION,
            p2p.STATUS_DISABLED,
            p2p.NOT_POSSIBLE,
            nccl.BUSBW_LOW,
            nccl.SLOWER_THAN_PCIE,
            nccl.TRANSPORT_UNEXPECTED,
            nccl.ENV_OVERRIDE,
            pcie.LINK_DOWNGRADED,
            pcie.ACS_ENABLED,
            nvlink.LINK_DOWN,
            nvlink.FABRIC_INCOMPLETE,
            nvlink.FABRIC_DEGRADED,
            gpu.CLOCKS_SLOWDOWN,
            gpu.POWER_LIMIT_LOW,
            gpu.LOST,
            gpu.COUNT_PCI_VS_NVML,
        ),
    )
    yield from follows(
        CLOCKS_LOW,
        (
            gpu.CLOCKS_SLOWDOWN,
            gpu.CLOCKS_VIOLATION,
            gpu.THERMAL_MARGIN_LOW,
            gpu.POWER_LIMIT_LOW,
            TEMPERATURE_HIGH,
        ),
    )
    yield from follows(
        POWER_OUTLIER,
        (
            gpu.CLOCKS_SLOWDOWN,
            gpu.CLOCKS_VIOLATION,
            gpu.THERMAL_MARGIN_LOW,
            gpu.POWER_LIMIT_LOW,
            TEMPERATURE_HIGH,
        ),
    )
    yield from follows(
        TEMPERATURE_HIGH,
        (
            sensor.FAN_ZERO_WHILE_HOT,
            sensor.FAN_NOT_REPORTING,
            gpu.THERMAL_MARGIN_LOW,
            gpu.CLOCKS_SLOWDOWN,
            gpu.CLOCKS_VIOLATION,
        ),
    )
    yield from follows(
        ERRORS_HIGH,
        (
            gpu.ECC_UNCORRECTABLE,
            gpu.ECC_SRAM_THRESHOLD,
            gpu.ROW_REMAP_PENDING,
            pcie.REPLAYS,
            pcie.AER_COUNTERS,
            pcie.AER,
        ),
    )
