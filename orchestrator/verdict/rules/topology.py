"""The `topology.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule

CLASS_OUTLIER = Rule(
    "topology.class.outlier",
    action=Action.RESEAT_INSPECT,
    because="the host's shape differs from its class's majority",
    needs=Needs(any_of=("gpus", "host")),
    host_wide=True,
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the host's topology fingerprint differs from the majority of hosts with the same"
        " GPU model and board (3 or more hosts, strict majority; for text imports without"
        " GPU names, the same NVLink generation `NV#` stands in for the model); the "
        "differences are spelled out",
        todo="compare with its peers: a missing GPU, a down link, a moved NIC or a downtrained "
        "slot changes the shape",
    ),
)
