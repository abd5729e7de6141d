"""The `probe.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule

RAW_MODE = Rule(
    "probe.raw_mode",
    action=Action.CONFIGURE,
    because="no usable python3 on the host: facts came from text",
    needs=Needs(),
    host_wide=True,
    doc=Doc(
        severity="info",
        kind="unknown",
        means="the host had no usable Python 3 (or `probe_mode: raw`): facts come from "
        "`nvidia-smi`/`lspci` text parsed on the controller, with less detail",
        todo="install python3 3.6+ or set `ansible_python_interpreter` for the full probes",
    ),
)

DATA_MALFORMED = Rule(
    "probe.data.malformed",
    action=Action.NONE,
    because="a probe's data could not be read: the probe version, not the host",
    needs=Needs(),
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="a probe answered `ok` but its data could not be normalized",
        todo="check the probe version on the host; the other sections are still judged",
    ),
)
