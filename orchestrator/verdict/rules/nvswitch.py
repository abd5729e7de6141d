"""The `nvswitch.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule

SXID = Rule(
    "nvswitch.sxid",
    action=Action.REBOOT,
    because="an NVSwitch SXid in this boot",
    needs=Needs(sections=("kmsg",)),
    host_wide_when="the kernel event names no bus id",
    doc=Doc(
        severity="fail (fatal), warn (non-fatal)",
        kind="fault",
        means="an NVSwitch SXid in this boot, per switch and code",
        todo="fatal: reset GPUs and switches or reboot, read the fabric manager log; non-fatal:"
        " watch the rate",
    ),
)
