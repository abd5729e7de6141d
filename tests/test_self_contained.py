"""No test reads outside the repository: a fresh clone alone must pass its own test command.

A scan of every test source for the ways tests used to reach beside the clone: the sibling
`shared/` folder, the shared-folder environment variable, absolute paths into the workspace, and
`Path(__file__)` chains (`.parents[k]`, `.parent.parent...`, `ROOT.parent`) that climb above the
repository root.  Published outputs the tests need are copied into tests/fixtures/evidence/.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

# Strings that always point outside: the sibling folder, its variable, the workspace itself.
FORBIDDEN = [
    (re.compile(r"\.\./shared\b|[\"']shared[\"']\s*/|/\s*[\"']shared[\"']"), "the sibling shared/ folder"),
    (re.compile(r"FLEETPROBE_" + "SHARED"), "the workspace's shared-folder variable"),
    (re.compile(r"[\"']/work/"), "an absolute path into the workspace"),
    (re.compile(r"\b(?:ROOT|REPO|REPO_ROOT|HERE)\.parent\b"), "the folder above the repository root"),
]
PARENTS_INDEX = re.compile(r"__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")
PARENT_CHAIN = re.compile(r"__file__\)(?:\.resolve\(\))?((?:\.parent)+)\b")


def _sources() -> list[Path]:
    me = Path(__file__).resolve()
    return [p for p in sorted(TESTS.rglob("*.py")) if p.resolve() != me]


def violations(path: Path, text: str) -> list[str]:
    """Lines of `text` (the source at `path`, inside the repository) that reach outside it."""
    depth = len(path.relative_to(REPO).parts)  # tests/x/y.py: parents[2] (or 3 x .parent) is the root
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        where = f"{path.relative_to(REPO)}:{n}"
        out += [f"{where}: {why}: {line.strip()}" for rx, why in FORBIDDEN if rx.search(line)]
        out += [f"{where}: parents[{k}] climbs above the repository root: {line.strip()}"
                for k in map(int, PARENTS_INDEX.findall(line)) if k >= depth]
        out += [f"{where}: {chain.count('.parent')} x .parent climbs above the repository root: {line.strip()}"
                for chain in PARENT_CHAIN.findall(line) if chain.count(".parent") > depth]
    return out


def test_no_test_reads_outside_the_repository() -> None:
    found = [v for p in _sources() for v in violations(p, p.read_text())]
    assert found == [], "tests must read only the repository (copy the data into tests/fixtures/):\n" + "\n".join(found)


def test_the_scan_catches_each_way_out() -> None:
    here = TESTS / "facts" / "test_x.py"
    bad = [
        'EVIDENCE = REPO.parent / "shared" / "evidence"',
        'p = Path(os.environ.get("FLEETPROBE_' + 'SHARED", "x"))',  # spelled in two: this file must not match
        'open("/work/shared/PRODUCT.md")',
        'x = "..' + '/shared/evidence/a.txt"',
        'Path(__file__).resolve().parents[3] / "data"',
        "Path(__file__).parent.parent.parent.parent / 'data'",
    ]
    for line in bad:
        assert violations(here, line), line
    good = [
        "REPO = Path(__file__).resolve().parents[2]",
        "ROOT = Path(__file__).resolve().parent.parent.parent",
        'data["hostname"] = "../../../../etc/x"',
        "EVIDENCE = REPO / 'tests' / 'fixtures' / 'evidence'",
    ]
    for line in good:
        assert not violations(here, line), line


def test_the_evidence_copies_carry_their_provenance() -> None:
    ev = TESTS / "fixtures" / "evidence"
    sources = (ev / "SOURCES.md").read_text()
    outputs = sorted(p.name for p in ev.glob("*.txt"))
    assert len(outputs) >= 19
    assert [name for name in outputs if name not in sources] == []
