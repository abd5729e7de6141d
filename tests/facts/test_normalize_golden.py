"""Golden files {probe data -> facts section} for every normalizer and the topology merge.

Cases: each demo recording (orchestrator/demo/recordings/<host>/<probe>.json through its
normalizer, and the host's topology merge) -> tests/facts/golden/demo/<host>.txt; each simulated
machine of orchestrator/simulate at config-space sizes 4096/256/64, read by the real pcie probe
and normalized -> tests/facts/golden/pcie/<machine>-cfg<size>.txt.

One line per top-level key of a section (`pcie.config_access "full"`), and one per record of a
list of records (`pcie.devices[3] 0000:18:00.0 ...`), so a diff names the key or record that
changed.  A value of up to 120 characters of compact JSON is written out; a longer one as
`#<sha256, 12 hex> <length>` to keep the files small.  On a mismatch the test prints the actual
value of every changed line.

After a deliberate change, regenerate and review the diff by hand:

    FLEETPROBE_REGEN_GOLDEN=1 python -m pytest -q tests/facts/test_normalize_golden.py
    git diff tests/facts/golden/
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.facts import normalize
from tests.support.normalize_corpus import recorded_data, session_corpus
from tests.support.skips import not_here

GOLDEN = Path(__file__).resolve().parent / "golden"
REGEN = os.environ.get("FLEETPROBE_REGEN_GOLDEN") == "1"
INLINE = 120  # longest value written out rather than digested
IDENTITY = ("bdf", "bus_id", "upstream", "id", "name", "host_bridge", "src_bus_id", "a", "link", "port", "index")


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def _cell(value: Any) -> str:
    text = _compact(value)
    if len(text) <= INLINE:
        return text
    return f"#{hashlib.sha256(text.encode()).hexdigest()[:12]} {len(text)}"


def _identity(record: dict[str, Any]) -> str:
    key = next((k for k in IDENTITY if isinstance(record.get(k), (str, int))), None)
    if key is None:
        return ""
    extra = f"->{record['dst_bus_id']}" if key == "src_bus_id" else f"-{record['b']}" if key == "a" else ""
    return f"{record[key]}{extra} "


def golden_lines(sections: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """(lines, line -> the value behind it) for the sections of one case, in a stable order."""
    lines: list[str] = []
    values: dict[str, Any] = {}

    def put(path: str, value: Any, label: str = "") -> None:
        line = f"{path} {label}{_cell(value)}"
        lines.append(line)
        values[line] = value

    for section in sorted(sections):
        out = sections[section]
        if not isinstance(out, dict):
            put(section, out)
            continue
        for key in sorted(out):
            value = out[key]
            if isinstance(value, list) and value and all(isinstance(x, dict) for x in value) \
                    and len(_compact(value)) > INLINE:
                for i, rec in enumerate(value):
                    put(f"{section}.{key}[{i}]", rec, _identity(rec))
            else:
                put(f"{section}.{key}", value)
    return lines, values


def _demo_sections(data: dict[str, Any]) -> dict[str, Any]:
    sections = {}
    for probe in sorted(data):
        section, fn = normalize.NORMALIZERS[probe]
        sections[section] = fn(data[probe])
    facts, errors = normalize.normalize_host(data)
    assert errors == []
    sections["topology"] = facts["topology"]
    assert all(facts[s] == sections[s] for s in sections)  # normalize_host runs the same normalizers
    return sections


DEMO = recorded_data()


def _mismatch(path: Path, sections: dict[str, Any]) -> str | None:
    """None when `sections` match the golden file (or it was regenerated), else what changed."""
    actual, values = golden_lines(sections)
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(actual) + "\n")
        return None
    expected = path.read_text().splitlines() if path.is_file() else []
    if actual == expected:
        return None
    diff = list(difflib.unified_diff(expected, actual, f"{path.name} (golden)", f"{path.name} (this run)",
                                     lineterm="", n=1))
    old = set(expected)
    shown = [f"{line.split(' ', 1)[0]} = {_compact(values[line])[:1500]}" for line in actual if line not in old][:10]
    return (f"{path.relative_to(GOLDEN.parents[2])} changed; if intended, regenerate with FLEETPROBE_REGEN_GOLDEN=1 "
            "and review:\n" + "\n".join(diff[:200]) + "\nactual values of changed lines:\n" + "\n".join(shown))


def _check(failures: list[str | None]) -> None:
    if REGEN:
        not_here(f"FLEETPROBE_REGEN_GOLDEN=1: regenerated {GOLDEN}; review `git diff {GOLDEN}`")
    found = [f for f in failures if f]
    assert not found, "\n\n".join(found)


@pytest.mark.parametrize("host", [h for h, _ in DEMO])
def test_demo_recording_normalizes_to_its_golden_facts(host: str) -> None:
    data = dict(DEMO)[host]
    _check([_mismatch(GOLDEN / "demo" / f"{host}.txt", _demo_sections(data))])


def test_simulated_pcie_corpus_normalizes_to_its_golden_facts() -> None:
    corpus = session_corpus()
    assert len(corpus) >= 45  # 15 machines x 3 config-space sizes
    names = {f"{name}.txt" for name, _ in corpus}
    failures = [_mismatch(GOLDEN / "pcie" / f"{name}.txt", {"pcie": normalize.pcie.normalize(data)})
                for name, data in corpus]
    _check(failures)
    stale = sorted(p.name for p in (GOLDEN / "pcie").glob("*.txt") if p.name not in names)
    assert stale == [], f"golden files of machines no longer simulated: {stale}"


def test_every_demo_golden_has_its_recording() -> None:
    stale = sorted(p.stem for p in (GOLDEN / "demo").glob("*.txt") if p.stem not in dict(DEMO))
    assert stale == []


def test_golden_lines_name_the_record_and_digest_long_values() -> None:
    lines, values = golden_lines({"pcie": {"config_access": "full",
                                           "devices": [{"bdf": "0000:18:00.0", "x": "y" * 200}, {"kind": "gpu"}],
                                           "gpus": ["0000:18:00.0"]}})
    assert lines[0] == 'pcie.config_access "full"'
    assert lines[1].startswith("pcie.devices[0] 0000:18:00.0 #") and lines[1].endswith(" 229")
    assert lines[2] == 'pcie.devices[1] {"kind":"gpu"}'
    assert lines[3] == 'pcie.gpus ["0000:18:00.0"]'
    assert values[lines[2]] == {"kind": "gpu"}
