"""The bundled demo fleet produces exactly the reviewed findings and classes.

Golden files: tests/golden/demo_findings.txt (`host id severity kind subject`, and `<- root-id
root-subject` for a finding that follows from another, sorted), tests/golden/demo_classes.txt
(`class members... | outliers...`) and tests/golden/demo_health.txt (`host health faults
fail/warn/info`).  Lines starting with `#` are the reviewer's notes and are ignored by the comparison.

After a deliberate change, regenerate and review the diff by hand:

    FLEETPROBE_REGEN_GOLDEN=1 python -m pytest -q tests/verdict/test_verdict_golden.py
    git diff tests/golden/

Regeneration keeps each note above the line it annotates (when that line still exists) and the
header notes; notes of lines that disappeared are dropped, so read the diff.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.skips import not_here
from tests.verdict.test_verdict_demo import demo_fleet

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
REGEN = os.environ.get("FLEETPROBE_REGEN_GOLDEN") == "1"


def finding_lines(fleet: dict[str, Any]) -> list[str]:
    def root(f: dict[str, Any]) -> str:
        return f" <- {f['caused_by']['id']} {f['caused_by']['subject']}" if f.get("caused_by") else ""

    return sorted(f"{f['host']} {f['id']} {f['severity']} {f['kind']} {f['subject']}{root(f)}" for f in fleet["findings"])


def health_lines(fleet: dict[str, Any]) -> list[str]:
    out = []
    for h in fleet["hosts"]:
        faults = h["health"]["faults"]
        out.append(f"{h['name']} {h['health']['state']} {faults['fail']}/{faults['warn']}/{faults['info']}")
    return out


def class_lines(fleet: dict[str, Any]) -> list[str]:
    out = []
    for c in sorted(fleet["classes"], key=lambda c: c["name"]):
        outliers = " ".join(o["host"] for o in c["outliers"]) or "-"
        out.append(f"{c['name']} {' '.join(c['members'])} | outliers: {outliers}")
    return out


def _parse(text: str) -> tuple[list[str], list[tuple[list[str], str]], list[str]]:
    """(header notes, [(notes above, line)], trailing notes)."""
    header: list[str] = []
    entries: list[tuple[list[str], str]] = []
    pending: list[str] = []
    seen_blank_after_header = False
    for raw in text.splitlines():
        if raw.startswith("#") or not raw.strip():
            if not entries and not seen_blank_after_header:
                if not raw.strip():
                    seen_blank_after_header = True
                    continue
                header.append(raw)
            elif raw.strip():
                pending.append(raw)
            continue
        entries.append((pending, raw))
        pending = []
    return header, entries, pending


def _render(header: list[str], entries: list[tuple[list[str], str]], trailing: list[str]) -> str:
    out = [*header, ""] if header else []
    for notes, line in entries:
        out.extend(notes)
        out.append(line)
    out.extend(trailing)
    return "\n".join(out) + "\n"


def _compare(name: str, actual: list[str]) -> None:
    path = GOLDEN / name
    old = path.read_text() if path.is_file() else ""
    header, entries, trailing = _parse(old)
    expected = [line for _, line in entries]
    if REGEN:
        notes = {line: n for n, line in entries}
        path.write_text(_render(header, [(notes.get(line, []), line) for line in actual], trailing))
        not_here(f"FLEETPROBE_REGEN_GOLDEN=1: regenerated {path}; review `git diff {path}`")
    if actual != expected:
        diff = "\n".join(difflib.unified_diff(expected, actual, f"{name} (golden)", f"{name} (this run)", lineterm=""))
        pytest.fail(f"the demo fleet's {name} changed; if intended, regenerate with FLEETPROBE_REGEN_GOLDEN=1 "
                    f"and review:\n{diff}")


def test_demo_findings_match_the_reviewed_golden_file() -> None:
    _compare("demo_findings.txt", finding_lines(demo_fleet()[1]))


def test_demo_health_matches_the_reviewed_golden_file() -> None:
    _compare("demo_health.txt", health_lines(demo_fleet()[1]))


def test_demo_classes_match_the_reviewed_golden_file() -> None:
    _compare("demo_classes.txt", class_lines(demo_fleet()[1]))


def test_golden_notes_survive_regeneration() -> None:
    text = "# header\n\n# why a\nh1 x.y fail fault s\n# why b\nh2 x.z info unknown t u\n# tail\n"
    header, entries, trailing = _parse(text)
    assert header == ["# header"] and trailing == ["# tail"]
    assert entries == [(["# why a"], "h1 x.y fail fault s"), (["# why b"], "h2 x.z info unknown t u")]
    assert _render(header, entries, trailing) == text
