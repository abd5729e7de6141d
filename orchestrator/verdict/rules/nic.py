"""The `nic.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.verdict.causes import Cause, Scope
from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule, follows

KERNEL_EVENT = Rule(
    "nic.kernel_event",
    action=Action.RESEAT_INSPECT,
    because="an mlx5 event in this boot (slot power, temperature, health)",
    needs=Needs(sections=("kmsg",)),
    doc=Doc(
        severity='warn; fail for "health compromised"',
        kind="fault",
        means="an mlx5 event in this boot: insufficient slot power (the NIC is throttled), "
        "module high temperature, transmit queue timeout, device health compromised",
        todo="the hint names the check: slot power budget, airflow, firmware/link, reset or replace",
    ),
)

PORT_DOWN = Rule(
    "nic.port.down",
    action=Action.RESEAT_INSPECT,
    because="an InfiniBand/RoCE port is not active",
    needs=Needs(sections=("nic",)),
    doc=Doc(
        severity="fail with `nic_ports_up: true`; warn against peers",
        kind="fault",
        means="an InfiniBand/RoCE port is not ACTIVE / LinkUp",
        todo="check cable and switch port; Polling: no partner, INIT: no subnet manager",
    ),
)

PORT_RATE_LOW = Rule(
    "nic.port.rate_low",
    action=Action.RESEAT_INSPECT,
    because="a port runs below its expected or its peers' rate",
    needs=Needs(sections=("nic",)),
    doc=Doc(
        severity="fail below `nic_rate_gbps`; warn below the peers' rate",
        kind="fault",
        means="an active port runs below the expected (or the peers') rate",
        todo="check cable/transceiver and the switch port configuration",
    ),
)

PORT_ERRORS = Rule(
    "nic.port.errors",
    action=Action.RESEAT_INSPECT,
    because="link error counters grew",
    needs=Needs(sections=("nic",)),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="link error counters grew since the previous run of the same boot, or a counter "
        "where any count is a fault (local link integrity, buffer overrun) is non-zero",
        todo="check or replace the cable/transceiver",
    ),
)

FIRMWARE_OUTLIER = Rule(
    "nic.firmware.outlier",
    action=Action.CONFIGURE,
    because="HCA firmware differs from its peers'",
    needs=Needs(sections=("nic",)),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="an HCA's firmware differs from what most HCAs of the same board id in the fleet "
        "run (fleet check, 3+ HCAs)",
        todo="update the HCA firmware to the fleet's version",
    ),
)

DEVICE_UNREADABLE = Rule(
    "nic.device.unreadable",
    action=Action.RESEAT_INSPECT,
    because="ibstat could not read an HCA: its ports are unknown",
    needs=Needs(sections=("nic",)),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the text import says an HCA could not be read (ibstat: `ibpanic: ... stat of IB "
        "device 'mlx5_8' failed`): its ports are unknown, and an older ibstat stops there",
        todo="run `ibstat <hca>` per device or `ibstatus`; an Ethernet-only (Accelerated "
        "Networking) function makes old ibstat stop; else check `dmesg` for mlx5",
    ),
)


def causes() -> Iterator[Cause]:
    """Which findings of a host these rules' findings follow from (verdict/causes.py), each
    consequence's roots in the order they are preferred."""
    yield from follows(KERNEL_EVENT, (PORT_DOWN,), scope=Scope.DEVICE)
