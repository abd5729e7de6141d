"""README.md's exit-code table is the ExitStatus enum, as `probe --help` prints it."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.cli.exitcodes import MEANING, TABLE, ExitStatus, for_fleet
from orchestrator.verdict.result import FleetResult

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_exit_code_table_equals_the_enum() -> None:
    section = README.read_text().split("Exit codes (also in `probe --help`):", 1)[1]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", section.split("\n\n", 2)[1], re.MULTILINE)
    assert [(int(code), text) for code, text in rows] == [(int(s), MEANING[s]) for s in MEANING]
    assert set(MEANING) == set(ExitStatus)


def test_help_table_is_generated_from_the_enum() -> None:
    lines = TABLE.splitlines()
    assert lines[0] == "exit codes:" and len(lines) == len(ExitStatus) + 1
    assert "  75   another run holds the results-directory lock" in TABLE


def test_fleet_status_combines_fail_findings_and_host_problems() -> None:
    def fleet(fail: int, **outcomes: int) -> FleetResult:
        findings = [{"id": "a.b", "severity": "fail", "kind": "fault", "host": "h", "subject": f"s{i}",
                     "message": "m", "evidence": [], "hint": ""} for i in range(fail)]
        return FleetResult.from_document({"summary": {"outcomes": outcomes}, "findings": findings})

    assert for_fleet(fleet(0, ok=3, skipped=1, unsupported=2)) is ExitStatus.OK
    assert for_fleet(fleet(2, ok=3)) is ExitStatus.FINDINGS_FAIL
    assert for_fleet(fleet(0, ok=3, timeout=1)) is ExitStatus.HOSTS_FAILED
    assert for_fleet(fleet(1, unreachable=1)) is ExitStatus.FINDINGS_FAIL_AND_HOSTS_FAILED


def test_every_command_help_renders() -> None:
    """`probe COMMAND --help` formats every option's help: a bare % in a help text (argparse
    expands %-formats there) broke `probe run --help` once."""
    import argparse

    from orchestrator.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"run", "baseline", "remediate", "rejudge", "import", "merge"} <= set(sub.choices)
    for name, command in sub.choices.items():
        assert command.format_help().startswith(f"usage: probe {name}"), name
    assert "exit codes:" in parser.format_help()
