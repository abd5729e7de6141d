"""The `sensor.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule

FAN_ZERO_WHILE_HOT = Rule(
    "sensor.fan.zero_while_hot",
    action=Action.RESEAT_INSPECT,
    because="every fan at 0 % while the GPU is hot",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="every fan of the GPU at 0 % while it is at 50 °C or more",
        todo="check the fan physically before the GPU throttles",
    ),
)

FAN_NOT_REPORTING = Rule(
    "sensor.fan.not_reporting",
    action=Action.RESEAT_INSPECT,
    because="an actively cooled board reports no fan speed",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="an actively cooled board (`has_fans` in the model table) reports no fans, a fan "
        "without speed, or fan speed N/A",
        todo="N/A is not 0: the fan controller does not answer; check the card",
    ),
)
