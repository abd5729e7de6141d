"""`--ctrf FILE` and `--node-verdicts DIR` read back by their consumers' validators (issue 50).

CTRF is validated against the CTRF project's own schema and must hold JUnit's cases, status for
status; a case the check could not judge is `skipped`, never `passed`.  The node verdicts are
validated against the NodeVerdict schema as transcribed from NVIDIA Health Validation's page
(tests/fixtures/schemas/PROVENANCE.md: a transcription, not NVIDIA's file); a host that was not
judged whole is UNKNOWN, never PASS, and hostile host names stay inside DIR, one file each.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from orchestrator.present.outputs.ctrf import build_ctrf, render_ctrf
from orchestrator.present.outputs.emit import write_outputs
from orchestrator.present.outputs.junit import render_junit
from orchestrator.present.outputs.node_verdicts import SEVERITY, write_node_verdicts
from orchestrator.verdict.action_map import ACTION_MAP
from orchestrator.verdict.findings import Action
from orchestrator.verdict.result import FleetResult
from tests.present.test_outputs import EVIL
from tests.present.test_outputs import run as run  # the fixture: fail, warn, info, unreachable, timeout
from tests.support.judged import judged
from tests.verdict.test_diff import finding, fleet, host

SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "schemas"


def _validator(name: str) -> jsonschema.Draft7Validator:
    schema = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def _junit_cases(fleet_: FleetResult) -> dict[tuple[str, str], str]:
    root = ET.fromstring(render_junit(fleet_))
    out = {}
    for suite in root.findall("testsuite"):
        for case in suite.findall("testcase"):
            tag = next((t for t in ("failure", "error", "skipped") if case.find(t) is not None), "passed")
            out[(suite.get("name"), case.get("name"))] = tag
    return out


def test_ctrf_validates_and_holds_junits_cases_status_for_status(run: FleetResult, tmp_path: Path):
    doc = json.loads(render_ctrf(run))
    _validator("ctrf.schema.json").validate(doc)
    tests = doc["results"]["tests"]
    ctrf = {(t["suite"][0], t["name"]): (t["status"], t["rawStatus"]) for t in tests}
    assert len(ctrf) == len(tests)  # one test per case, none twice
    want = {"failure": ("failed", "failure"), "error": ("failed", "error"), "skipped": ("skipped", "skipped"),
            "passed": ("passed", "passed")}
    assert ctrf == {k: want[v] for k, v in _junit_cases(run).items()}
    summary = doc["results"]["summary"]
    assert summary["tests"] == len(tests) and summary["failed"] >= 3  # gpu01's link, gpu02's timeout, gpu03
    assert summary["stop"] - summary["start"] == 100_000  # 02:15:00 -> 02:16:40


def test_what_was_not_judged_is_skipped_never_passed(run: FleetResult):
    tests = build_ctrf(run)["results"]["tests"]
    not_judged = [t for t in tests if t.get("message", "").startswith("not judged:")]
    assert not_judged, "the timed-out nvlink probe leaves checks not judged"
    assert {t["status"] for t in not_judged} == {"skipped"}
    unreachable = [t for t in tests if t["suite"] == ["gpu03"]]
    assert [(t["name"], t["status"]) for t in unreachable] == [("host.reachable", "failed")]
    assert not [t for t in tests if t["status"] == "passed" and "not judged" in t.get("message", "")]


def test_a_warning_passes_with_its_text_and_a_finding_carries_its_action(run: FleetResult):
    tests = {(t["suite"][0], t["name"]): t for t in build_ctrf(run)["results"]["tests"]}
    fan = tests[("gpu02", "sensor.fan.zero_rpm")]
    assert fan["status"] == "passed" and any("0 RPM" in line for line in fan["stdout"])
    link = tests[("gpu01", "nvlink.link.down")]
    actions = link["labels"]["action"]  # two findings: the list of their actions, in order
    assert link["status"] == "failed" and isinstance(actions, list) and len(actions) == 2
    assert {Action(a) for a in actions} == {f.action for f in run.findings_of("gpu01") if f.id == "nvlink.link.down"}
    assert tests[(EVIL, "pcie.link.downgraded")]["labels"]["host"] == EVIL


def _verdicts(directory: Path) -> dict[str, dict]:
    docs = [json.loads(p.read_text()) for p in sorted(directory.iterdir())]
    return {d["node"]: d for d in docs}


def test_node_verdicts_validate_and_map_health_to_severity(run: FleetResult, tmp_path: Path):
    write_outputs(run, node_verdicts=tmp_path / "nv", ctrf=tmp_path / "r.ctrf.json")
    assert (tmp_path / "r.ctrf.json").is_file()
    verdicts = _verdicts(tmp_path / "nv")
    validator = _validator("node-verdict.schema.json")
    for doc in verdicts.values():
        validator.validate(doc)
    assert set(verdicts) == {h.name for h in run.hosts}
    for h in run.hosts:
        assert verdicts[h.name]["overall_severity"] == SEVERITY[h.health.state], h.name
    assert verdicts["gpu01"]["overall_severity"] == "CRITICAL"
    assert verdicts["gpu03"]["overall_severity"] == "UNKNOWN"
    esc = verdicts["gpu01"]["escalation"]
    assert esc["step"] == ACTION_MAP[Action(esc["fleetprobe_action"])]["health_validation"].name
    nvlink = [c for c in verdicts["gpu01"]["affected_components"] if c["category"] == "nvlink"]
    assert nvlink and nvlink[0]["max_severity"] == "CRITICAL" and "nvlink.link.down" in nvlink[0]["check_ids"]


@pytest.mark.parametrize("state", ["unreachable", "incomplete"])
def test_a_host_not_judged_whole_is_unknown_never_pass(state: str, tmp_path: Path):
    h = host("n1", outcome="unreachable") if state == "unreachable" else host("n1")
    if state == "incomplete":
        h["probes"]["nvlink"] = {"outcome": "timeout", "reason": "deadline 10s"}
    f = judged(fleet("r", [h], []))
    assert f.hosts[0].health.state.value == state
    write_node_verdicts(f, tmp_path)
    (doc,) = _verdicts(tmp_path).values()
    assert doc["overall_severity"] == "UNKNOWN" and doc["escalation"] is None


NAMES = ["../up", "a/b", ".hidden", "..", "x\ny", "gpu\u202e01", "a" * 300]


def test_hostile_host_names_stay_inside_dir_one_file_each(tmp_path: Path):
    f = judged(fleet("r", [host(n) for n in NAMES], [finding("nvlink.link.down", NAMES[0], "GPU0 link 1")]))
    out = tmp_path / "nv"
    write_node_verdicts(f, out)
    files = list(out.iterdir())
    assert len(files) == len(NAMES) and not list(tmp_path.glob("*.json")) and not (tmp_path / "up.json").exists()
    assert all(p.parent == out and p.suffix == ".json" for p in files)
    verdicts = _verdicts(out)
    assert set(verdicts) == set(NAMES)  # each file names its host exactly, however odd
    assert verdicts["../up"]["overall_severity"] == "CRITICAL"
