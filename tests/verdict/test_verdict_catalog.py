"""docs/findings.md, FINDING_IDS and the checks agree: every id a check can raise is registered and
documented, every id the demo fleet raises is registered, and every test the §3 table cites exists."""

from __future__ import annotations

import re

from orchestrator.verdict import rules
from orchestrator.verdict.checks import FINDING_IDS
from tests.verdict.test_verdict_demo import ROOT, demo_fleet

DOC = ROOT / "docs" / "findings.md"
PRODUCT_TABLE = ROOT / "tests" / "fixtures" / "product" / "failures_table.md"
# Ids raised by checks added on the `verdict` branch that orchestrator/verdict/checks/__init__.py (owned by
# the integrator) does not list yet.  Once they are added there, empty this set (the last test
# below fails until then, so it cannot go stale).
AWAITING_REGISTRATION: set[str] = set()

# A rule named where a finding is raised: by its declaration (verdict/rules/<prefix>.py), never by
# its id as a string (tests/verdict/test_rules.py).
_RULE_REF = re.compile(r"\brules\.([a-z0-9_]+)\.([A-Z][A-Z0-9_]*)\.id\b")


def _doc_rows() -> dict[str, str]:
    """id -> its catalog row (the tables before the action classes, tests/verdict/test_actions.py)."""
    catalog = DOC.read_text().split("## The failures", 1)[0].split("## Action classes", 1)[0]
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z0-9_.]+)` \|.*$", catalog, re.MULTILINE)}


def _raised_in_source() -> set[str]:
    ids: set[str] = set()
    sources = [*sorted((ROOT / "orchestrator" / "verdict" / "checks").glob("*.py")),
               ROOT / "orchestrator" / "verdict" / "classes.py", ROOT / "orchestrator" / "verdict" / "judge.py",
               ROOT / "orchestrator" / "verdict" / "baseline.py", ROOT / "orchestrator" / "verdict" / "offenders.py"]
    for path in sources:
        for module, name in _RULE_REF.findall(path.read_text()):
            ids.add(getattr(getattr(rules, module), name).id)
    return ids


def test_every_registered_id_has_a_catalog_row_with_severity_kind_meaning_and_action() -> None:
    rows = _doc_rows()
    missing = sorted(set(FINDING_IDS) - set(rows))
    assert missing == []
    for fid, row in rows.items():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        assert len(cells) == 5 and all(cells), f"{fid}: id | severity | kind | meaning | what to do"
        assert re.search(r"\b(fail|warn|info)\b", cells[1]), fid
        assert re.search(r"\b(fault|platform_limitation|unknown)\b", cells[2]), fid


def test_every_id_a_check_can_raise_is_registered_and_documented() -> None:
    raised = _raised_in_source()
    assert {"gpu.lost", "identity.uuid.duplicate", "identity.system_serial.duplicate",
            "topology.class.outlier", "probe.data.malformed"} <= raised  # the scan sees every style of call
    assert sorted(raised - set(FINDING_IDS) - AWAITING_REGISTRATION) == []
    assert sorted(raised - set(_doc_rows())) == []


def test_every_id_the_demo_fleet_raises_is_registered() -> None:
    _, fleet = demo_fleet()
    raised = {f["id"] for f in fleet["findings"]}
    assert sorted(raised - set(FINDING_IDS) - AWAITING_REGISTRATION) == []


def test_the_catalog_documents_no_id_nobody_raises() -> None:
    assert sorted(set(_doc_rows()) - _raised_in_source()) == []


def test_every_test_the_product_table_cites_exists() -> None:
    table = DOC.read_text().split("## The failures", 1)[1]
    cited = re.findall(r"(tests/(?:[a-z0-9_]+/)*[a-z0-9_]+\.py)::([a-z0-9_]+)", table)
    assert len(cited) >= 15
    for file, name in cited:
        path = ROOT / file
        assert path.is_file(), file
        assert re.search(rf"^def {name}\(", path.read_text(), re.MULTILINE), f"{file}::{name}"
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| what")]
    assert len(rows) == 15  # the 11 rows of PRODUCT.md §3 and the 4 peers' checks below it


def test_ids_awaiting_registration_are_not_registered_yet() -> None:
    # When this fails, the integrator has added them to FINDING_IDS: empty AWAITING_REGISTRATION.
    assert sorted(AWAITING_REGISTRATION & set(FINDING_IDS)) == []


def test_the_product_table_rows_match_product_md() -> None:
    # the brief's section 3, copied into the repository (tests read nothing outside it)
    section = PRODUCT_TABLE.read_text().split("## 3.", 1)[1]
    theirs = [line.split("|")[1].strip() for line in section.splitlines()
              if line.startswith("| ") and not line.startswith("| what")]
    ours = DOC.read_text().split("## The failures", 1)[1]
    assert len(theirs) == 11
    for what in theirs:
        key = re.sub(r"[`\"]", "", what)[:30]
        assert key in re.sub(r"[`\"]", "", ours), what
