"""Every fleet.json `probe run` writes validates against orchestrator/schema/fleet.schema.json:
the demo fleet, a run with an unreachable host, and a run where probes sent garbage."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from orchestrator.verdict.result import SCHEMA_VERSION
from tests.verdict.test_verdict_demo import RECORDINGS, demo_fleet, run_cli

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "orchestrator" / "schema" / "fleet.schema.json"


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _errors(doc: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in _validator().iter_errors(doc)]


def test_schema_version_is_the_one_written() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    from orchestrator.store import members

    # the document's in memory and in a schema-1 file, and schema 3's (the same, as gzip members)
    assert schema["properties"]["schema_version"] == {"enum": [SCHEMA_VERSION, members.SCHEMA_VERSION]}
    for section in ("gpus", "nvlink", "pcie", "topology"):
        entry = schema["$defs"]["host"]["properties"]["facts"]["properties"][section]
        # Probe facts are held to their documented shape; facts read from text to the text shape.
        ref = entry["else"]["$ref"]
        assert schema["$defs"][ref.rsplit("/", 1)[1]]["required"], section
        assert entry["then"] == {"$ref": "#/$defs/text_section"}, section


def test_facts_read_from_text_validate_and_probe_shapes_stay_strict() -> None:
    from orchestrator.engine.results import HostInput
    from orchestrator.facts.textparse import import_files
    from orchestrator.verdict.expectations import Expectations
    from orchestrator.verdict.judge import build_fleet
    from tests.support.evidence import EVIDENCE
    from tests.support.judged import document, meta

    files = sorted(EVIDENCE.glob("topo_*.txt")) + sorted(EVIDENCE.glob("lspci_*.txt")) + sorted(EVIDENCE.glob("nvlink_*.txt"))
    assert len(files) >= 13
    for f in files:
        h = import_files([f])
        ok = {"outcome": "ok", "reason": "", "duration_s": 0.0, "probe_version": "text", "retried": 0}
        fleet = document(build_fleet(meta(), [HostInput("x", "(imported)", [], {p: ok for p in h.outcomes}, {},
                                                        facts=h.facts)], lambda _: Expectations()))
        assert _errors(fleet) == [], f.name
        # The same section claimed as probe output (no origin mark) must meet the strict shape.
        for section in fleet["hosts"][0]["facts"].values():
            section.pop("origin", None)
        if any(k in fleet["hosts"][0]["facts"] for k in ("pcie", "nvlink", "gpus")):
            assert _errors(fleet), f.name


def test_demo_fleet_validates() -> None:
    _, fleet = demo_fleet()
    assert _errors(fleet) == []
    assert all(set(h["facts"]) >= {"host", "pcie", "gpus", "nvlink", "topology"} for h in fleet["hosts"])


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any]]:
    """One good host, one whose recordings are missing (unreachable), one whose probes send garbage."""
    base = tmp_path_factory.mktemp("broken")
    junk = base / "junk"
    shutil.copytree(RECORDINGS / "dgx-h100-01", junk)
    (junk / "nvml.json").write_bytes(b"Traceback (most recent call last):\n\x00\x1b[31mnot json")
    for probe, data in (("pcie", {"devices": [{"bdf": 7}, "x"], "nvidia": 3}),
                        ("host", {"dmi": "not a mapping"}),
                        ("nvlink", {"gpus": [{"links": "x", "bus_id": "ZZ"}]})):
        env = json.loads((junk / f"{probe}.json").read_text())
        env["data"] = data
        (junk / f"{probe}.json").write_text(json.dumps(env))
    inv = base / "inv.yml"
    inv.write_text("all:\n  vars: {ansible_connection: replay}\n  hosts:\n"
                   "    good: {probe_replay: dgx-h100-01}\n"
                   f"    gone: {{probe_replay: {base / 'nowhere'}}}\n"
                   f"    junk: {{probe_replay: {junk}}}\n")
    rc, fleet, err = run_cli(["-i", str(inv)], base / "run")
    assert fleet is not None, err
    return rc, fleet


def test_run_with_unreachable_and_garbage_hosts_validates(broken_run: tuple[int, dict[str, Any]]) -> None:
    rc, fleet = broken_run
    hosts = {h["name"]: h for h in fleet["hosts"]}
    assert hosts["gone"]["outcome"] == "unreachable" and hosts["gone"]["facts"] == {}
    assert hosts["junk"]["probes"]["nvml"]["outcome"] == "invalid_output"
    assert hosts["junk"]["normalize_errors"]  # the host section could not be normalized
    assert "probe.data.malformed" in {f["id"] for f in fleet["findings"] if f["host"] == "junk"}
    assert rc == 4  # exitcodes: a host unreachable / invalid output, no fail finding
    assert _errors(fleet) == []


def test_the_schema_rejects_what_the_contract_forbids() -> None:
    _, fleet = demo_fleet()
    cases = []
    doc = copy.deepcopy(fleet)
    doc["schema_version"] = 2
    cases.append(doc)
    doc = copy.deepcopy(fleet)
    del doc["hosts"][0]["facts"]["gpus"]["order"]
    cases.append(doc)
    doc = copy.deepcopy(fleet)
    doc["hosts"][0]["facts"]["pcie"]["gpus"][0] = "0000:1A:00.0"  # bus ids are lower case
    cases.append(doc)
    doc = copy.deepcopy(fleet)
    doc["hosts"][0]["facts"]["topology"]["matrix"][0][1] = "NVLINK"
    cases.append(doc)
    doc = copy.deepcopy(fleet)
    doc["findings"][0]["severity"] = "critical"
    cases.append(doc)
    doc = copy.deepcopy(fleet)
    del doc["hosts"][0]["facts"]["nvlink"]["nv"]
    cases.append(doc)
    for i, bad in enumerate(cases):
        assert _errors(bad), f"case {i} should not validate"


SCHEMA2_PATH = SCHEMA_PATH.with_name("fleet-2.schema.json")
V1_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs_v1" / "20261201T134403Z-916ca5822"
V2_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs_v2" / "20261207T090123Z-39971c393"


def _validator2() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA2_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_files_validate_against_the_schema_of_their_version(tmp_path: Path) -> None:
    from orchestrator.store import members
    from orchestrator.store.compact import SCHEMA_VERSION as SCHEMA_2
    from orchestrator.store.compact import read_plain

    rc, _fleet, err = run_cli(["-p", "premigration", "-l", "dgx-h100-01,dgx-h100-05,dgx-a100-03,rtx4090-01,vm-a100-01"],
                              tmp_path / "run")
    assert rc in (1, 5), err
    # schema 3 (issue 51, written today): schema 1's document, as gzip members
    three = members.loads((tmp_path / "run" / "fleet.json").read_bytes())
    assert three["schema_version"] == members.SCHEMA_VERSION == 3 and len(three["hosts"]) == 5
    assert _errors(three) == []
    assert _errors(read_plain(tmp_path / "run" / "fleet.json")) == []  # as read: the schema-1 shape
    # schema 2, as a7b062f wrote it (tests/fixtures/runs_v2)
    raw = json.loads((V2_RUN / "fleet.json").read_text())
    assert raw["schema_version"] == SCHEMA_2 == 2 and len(raw["hosts"]) == 3
    v2 = _validator2()
    assert [e.message for e in v2.iter_errors(raw)] == []
    assert _errors(read_plain(V2_RUN / "fleet.json")) == []  # decoded: the schema-1 shape
    assert list(v2.iter_errors(three)) and _errors(raw)
    # a schema-1 file (written before schema 2) validates against schema 1, and not against 2
    old = json.loads((V1_RUN / "fleet.json").read_text())
    assert old["schema_version"] == 1 and _errors(old) == []
    assert list(v2.iter_errors(old))
    bad = []
    for mutate in (lambda d: d["hosts"][0]["facts"]["pcie"]["devices"].__setitem__("@table", "75"),
                   lambda d: d["hosts"][0]["facts"]["gpus"].__setitem__("@x", 1),
                   lambda d: d["hosts"][0]["facts"]["pcie"]["devices"]["kind"].__setitem__("i", "0-1"),
                   lambda d: d["hosts"][0].__setitem__("outcome", "fine")):
        doc = copy.deepcopy(raw)
        mutate(doc)
        bad.append(list(v2.iter_errors(doc)))
    assert all(bad), [len(b) for b in bad]
