"""Every finding carries what to do (`action`, `because`) and on which devices (`devices`), set
where it is made (issue 46, items 2 and 3): in the demo's fleet.json, findings.json, `--format json`,
JUnit (read by junitparser) and Prometheus (read by prometheus-client) under the shipped
playbooks; `probe remediate` and the root/consequence grouping read the devices, never the
subject, which stays the human text."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import junitparser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.store.compact import read_plain
from orchestrator.verdict import causes
from orchestrator.verdict.actions import ACTIONS, HOST_WIDE, HOST_WIDE_AT_TIMES, Action
from orchestrator.verdict.checks import CAUSES, FINDING_IDS
from orchestrator.verdict.findings import (
    Device,
    DeviceKind,
    Finding,
    Kind,
    Located,
    Severity,
    fault,
    gpu_device,
    gpu_pair,
)
from orchestrator.verdict.remedy import host_plan

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ("audit", "premigration", "fabric")


def _demo(playbook: str, out: str) -> tuple[int, dict[str, Any], list[Any], str]:
    """One `probe run -p playbook` of the bundled demo with JUnit and Prometheus beside it:
    (rc, the `--format json` document, findings.json, the run directory)."""
    d = Path(out)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-p", playbook, "--format", "json",
                        "-o", str(d / "run"), "--junit", str(d / "fleet.xml"), "--prometheus", str(d / "fleet.prom")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert "Traceback" not in r.stderr and r.returncode not in (2, 70), r.stderr[-2000:]
    return r.returncode, json.loads(r.stdout), json.loads((d / "run" / "findings.json").read_text()), str(d)


@pytest.fixture(scope="module", params=PLAYBOOKS)
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[dict[str, Any], list[Any], Path]:
    _, doc, findings, out = _demo(request.param, str(tmp_path_factory.mktemp(request.param)))
    return doc, findings, Path(out)


def _devices_ok(f: dict[str, Any]) -> str | None:
    """Why this finding's action or devices are wrong, or None."""
    if f.get("action") not in {a.value for a in Action} or not str(f.get("because") or "").strip():
        return f"{f['id']}: action {f.get('action')!r} because {f.get('because')!r}"
    devices = f.get("devices")
    if not isinstance(devices, list) or any(Device.from_dict(d) is None for d in devices):
        return f"{f['id']}: devices {devices!r}"
    if f["id"] in HOST_WIDE and devices:
        return f"{f['id']} is host-wide but names {devices}"
    if not devices and f["id"] not in HOST_WIDE and f["id"] not in HOST_WIDE_AT_TIMES:
        return f"{f['id']} ({f['subject']}) names no device and its rule is not host-wide"
    return None


def test_every_demo_finding_has_an_action_and_its_devices(demo: tuple[dict[str, Any], list[Any], Path]) -> None:
    doc, findings, out = demo
    assert doc["findings"], "the demo raises findings under every shipped playbook"
    assert [p for p in map(_devices_ok, doc["findings"]) if p] == []
    fleet = read_plain(out / "run" / "fleet.json")
    # the published schema holds the new fields to their shape (they are optional there: a run
    # stored before them still validates), and every finding written has them
    schema = json.loads((ROOT / "orchestrator" / "schema" / "fleet.schema.json").read_text())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:160]}"
              for e in jsonschema.Draft202012Validator(schema).iter_errors(fleet)]
    assert errors == []
    assert all({"action", "because", "devices"} <= set(f) for f in fleet["findings"])
    device_schema = {"$defs": schema["$defs"], "$ref": "#/$defs/device"}
    assert not list(jsonschema.Draft202012Validator(device_schema).iter_errors(
        {"kind": "gpu_pair", "gpu": 1, "bus_id": "0000:2a:00.0", "peer_gpu": 2, "peer_bus_id": "0000:3a:00.0"}))
    for bad in ({"kind": "toaster"}, {"gpu": 1}, {"kind": "gpu", "gpu": "1"}, {"kind": "gpu", "colour": "red"}):
        assert list(jsonschema.Draft202012Validator(device_schema).iter_errors(bad)), bad
    # fleet.json, findings.json and --format json carry the same fields for the same findings
    for stored in (fleet["findings"], findings):
        assert [(f["id"], f["subject"], f["action"], f["because"], f["devices"]) for f in stored] == \
            [(f["id"], f["subject"], f["action"], f["because"], f["devices"]) for f in doc["findings"]]
    # the action is the rule's own: decided once where the finding is made
    assert all(f["because"] == ACTIONS[f["id"]].because for f in doc["findings"])


def test_junit_and_prometheus_carry_action_and_devices(demo: tuple[dict[str, Any], list[Any], Path]) -> None:
    doc, _, out = demo
    xml = junitparser.JUnitXml.fromfile(str(out / "fleet.xml"))
    from_junit, fabric_cases = [], []
    for suite in xml:
        for case in suite:
            props = case._elem.find("properties")  # pytest's record_property form, under the case
            if props is None:
                continue
            values = [(p.get("name"), p.get("value")) for p in props.findall("property")]
            if suite.name == "fabric":  # the fabric's faults, once each (docs/fabric.md)
                assert [k for k, _ in values] == ["hosts", "action", "because", "devices"]
                fields = dict(values)
                fabric_cases.append((case.name, tuple(json.loads(fields["hosts"] or "")), fields["action"],
                                     fields["because"], json.loads(fields["devices"] or "")))
                continue
            for i in range(0, len(values), 4):
                (k1, subject), (k2, action), (k3, because), (k4, devices) = values[i:i + 4]
                assert (k1, k2, k3, k4) == ("subject", "action", "because", "devices")
                from_junit.append((suite.name, case.name, subject, action, because, json.loads(devices or "")))
    # a fabric fault is the fabric's: on its hosts' cases it is no property, in the fabric suite one case
    fabric = {(h, ff["id"]) for ff in doc.get("fabric_findings", []) for h in ff["hosts"]}
    assert sorted(from_junit) == sorted((f["host"], f["id"], f["subject"], f["action"], f["because"], f["devices"])
                                        for f in doc["findings"] if (f["host"], f["id"]) not in fabric)
    assert sorted(fabric_cases) == sorted((f"{ff['id']} {ff['subject']}", tuple(ff["hosts"]), ff["action"],
                                           ff["because"], ff["devices"]) for ff in doc.get("fabric_findings", []))
    assert all(ff["devices"] for ff in doc.get("fabric_findings", []))  # a rail, its ports: named, typed
    series = {fam.name: fam.samples for fam in text_string_to_metric_families((out / "fleet.prom").read_text())}
    found = series["fleetprobe_finding"]
    hosts_own = [f for f in doc["findings"] if (f["host"], f["id"]) not in fabric]
    assert sum(s.value for s in found) == len(hosts_own)
    fabric_series = series.get("fleetprobe_fabric_fault", [])
    assert sorted((s.labels["id"], s.labels["subject"], s.labels["action"], s.value) for s in fabric_series) == \
        sorted((ff["id"], ff["subject"], ff["action"], len(ff["hosts"])) for ff in doc.get("fabric_findings", []))
    by_key = {(s.labels["host"], s.labels["id"], s.labels["subject"]): s.labels for s in found}
    for f in hosts_own:
        labels = by_key[(f["host"], f["id"], f["subject"])]
        assert labels["action"] == f["action"]
        assert labels["bus_id"].split(",") == list(dict.fromkeys(d["bus_id"] for d in f["devices"] if "bus_id" in d)) \
            or (labels["bus_id"] == "" and not any("bus_id" in d for d in f["devices"]))
        assert labels["device_kind"] == ",".join(dict.fromkeys(d["kind"] for d in f["devices"]))


def test_host_wide_rules_are_rules_of_the_catalog_and_say_why() -> None:
    assert sorted(set(HOST_WIDE) - set(FINDING_IDS)) == []
    assert sorted(set(HOST_WIDE_AT_TIMES) - set(FINDING_IDS)) == []
    assert set(HOST_WIDE).isdisjoint(HOST_WIDE_AT_TIMES)
    assert all(why.strip() for why in HOST_WIDE_AT_TIMES.values())


# ---------------------------------------------------------------------------------- no subject parsing

# Reading a device back out of a subject: a regex call, or a split, over something named subject.
_PARSES_SUBJECT = re.compile(
    r"(?:\bre\.(?:match|search|findall|finditer|fullmatch|split|sub)|\.(?:findall|finditer|match|search|fullmatch))"
    r"\([^\n]*\bsubject\b"
    r"|\bsubject\b[^\n=]*\.(?:split|rsplit|partition|rpartition)\(")


def _subject_parsers(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _PARSES_SUBJECT.search(line.split("#", 1)[0]):
                out.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return out


def test_no_code_reads_a_device_back_out_of_a_subject() -> None:
    assert _subject_parsers(ROOT / "orchestrator") == []


@pytest.mark.parametrize("line", [
    "    return frozenset(_BDF.findall(subject.lower()))",  # verdict/causes.py before issue 46
    "            for bdf in _BDF.findall(s.finding.subject.lower()):",  # verdict/remedy.py before it
    "    m = re.search(r'GPU(\\d+)', f.subject)",
    "    index = finding.subject.split()[0]",
    "    gpu, _, bus = root.subject.partition(' (')",
])
def test_the_subject_parser_census_catches_each_form(line: str, tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(f"def f(subject, s, f, finding, root):\n{line}\n")
    assert len(_subject_parsers(pkg)) == 1


# ---------------------------------------------------------------------------------- reworded subjects

def _findings(subject: Any) -> list[Finding]:
    """One host's findings as checks make them; `subject(i, text)` gives the i-th finding's subject text."""
    g3 = {"index": 3, "bus_id": "0000:5d:00.0", "uuid": "GPU-3"}
    g4 = {"index": 4, "bus_id": "0000:9a:00.0", "uuid": "GPU-4"}
    xid = fault("gpu.xid", "h", Located(subject(0, "GPU3 (0000:5d:00.0)"), (gpu_device(g3),)),
                "Xid 79, GPU has fallen off the bus")
    fell = fault("gpu.fallen_off_bus", "h", Located(subject(1, "GPU3 (0000:5d:00.0)"), (gpu_device(g3),)), "fell off")
    remap = fault("gpu.row_remap.pending", "h", Located(subject(2, "GPU4 (0000:9a:00.0)"), (gpu_device(g4),)),
                  "rows pending")
    ecc = fault("gpu.ecc.uncorrectable", "h", Located(subject(3, "GPU4 (0000:9a:00.0)"), (gpu_device(g4),)), "DBE")
    slow = fault("p2p.bandwidth.low", "h", Located(subject(4, "GPU3->GPU4 (0000:5d:00.0 -> 0000:9a:00.0)"),
                                                   (gpu_pair(g3, g4),)), "slow")
    link = fault("nvlink.link.down", "h", Located(subject(5, "GPU4 (0000:9a:00.0)"), (gpu_device(g4),)), "down",
                 severity=Severity.WARN)
    return [xid, fell, remap, ecc, slow, link]


@pytest.mark.parametrize("reword", [
    lambda i, text: f"finding {i}",  # no bus id at all
    lambda i, text: text.upper().replace(":", "-"),  # the bus ids written otherwise
    lambda i, text: "GPU0 (0000:18:00.0)",  # every subject names one other GPU
    lambda i, text: "",  # no subject
])
def test_a_reworded_subject_changes_neither_remediation_nor_the_roots(reword: Any) -> None:
    table = causes.by_consequence(CAUSES)
    before = causes.group(_findings(lambda i, text: text), table)
    after = causes.group(_findings(reword), table)
    roots = [(f.id, f.caused_by.id if f.caused_by else None, len(f.consequences)) for f in before]
    assert roots == [(f.id, f.caused_by.id if f.caused_by else None, len(f.consequences)) for f in after]
    # the Xid is the root of the fall, the NVLink link down of nothing; the pair follows the link
    assert ("gpu.fallen_off_bus", "gpu.xid", 0) in roots and ("p2p.bandwidth.low", "nvlink.link.down", 0) in roots
    plan_before, plan_after = host_plan("h", before), host_plan("h", after)
    assert plan_before is not None and plan_after is not None
    assert plan_after.gpus_to_reset() == plan_before.gpus_to_reset() == ["0000:9a:00.0"]
    assert [(s.finding.id, s.action, s.because) for s in plan_after.steps] == \
        [(s.finding.id, s.action, s.because) for s in plan_before.steps]


def test_a_reset_names_every_gpu_its_devices_name_and_nothing_from_text() -> None:
    pair = fault("p2p.cuda.error", "h", Located("GPU1->GPU2 (0000:2a:00.0 -> 0000:3a:00.0)", (
        gpu_pair({"index": 1, "bus_id": "0000:2a:00.0"}, {"index": 2, "bus_id": "0000:3A:00.0"}),)), "sticky")
    text_only = fault("gpu.row_remap.pending", "h", "GPU5 (0000:ab:00.0)", "rows pending")  # no device: a person
    nic = fault("gpu.reset_required", "h", Located("mlx5_0", (Device(DeviceKind.NIC, bus_id="0000:19:00.0"),)), "x")
    plan = host_plan("h", [pair, text_only, nic])
    assert plan is not None and [s.action for s in plan.steps] == [Action.RESET_GPU] * 3
    assert plan.gpus_to_reset() == ["0000:2a:00.0", "0000:3a:00.0"]


# ---------------------------------------------------------------------------------- stored findings

def test_a_finding_of_an_older_run_reads_with_its_ids_action_and_no_devices() -> None:
    old = {"id": "gpu.lost", "severity": "fail", "kind": "fault", "host": "h", "subject": "GPU1 (0000:2a:00.0)",
           "message": "lost", "evidence": [], "hint": ""}
    f = Finding.from_dict(old)
    assert (f.action, f.because, f.devices) == (Action.REBOOT, ACTIONS["gpu.lost"].because, ())
    # a stored action is the finding's own (a later table does not rewrite a stored run) ...
    kept = Finding.from_dict({**old, "action": "rma", "because": "as decided then",
                              "devices": [{"kind": "gpu", "gpu": 1, "bus_id": "0000:2a:00.0"}]})
    assert (kept.action, kept.because, kept.devices) == (Action.RMA, "as decided then",
                                                         (Device(DeviceKind.GPU, gpu=1, bus_id="0000:2a:00.0"),))
    assert Finding.from_dict(kept.to_dict()) == kept


@pytest.mark.parametrize("stored", [
    {"action": "explode", "because": "x"}, {"action": None, "because": "x"}, {"action": "rma", "because": ""},
    {"action": "rma", "because": 7}, {"action": ["rma"], "because": "x"},
])
def test_a_damaged_stored_action_is_given_its_ids(stored: dict[str, Any]) -> None:
    f = Finding.from_dict({"id": "gpu.lost", "severity": "fail", "kind": "fault", "host": "h", "subject": "s",
                           "message": "m", **stored})
    assert (f.action, f.because) == (Action.REBOOT, ACTIONS["gpu.lost"].because)


@pytest.mark.parametrize("devices", [
    "GPU1", 7, {"kind": "gpu"}, [None, "gpu", 3], [{"kind": "toaster", "gpu": 1}], [{"gpu": 1}],
    [{"kind": "gpu", "gpu": "one", "bus_id": 5, "port": True}],
    # a bus id is handed to `nvidia-smi -r` in the remediation playbook: only a PCI address is kept
    [{"kind": "gpu", "bus_id": "{{ lookup('pipe', 'reboot') }}"}], [{"kind": "gpu", "bus_id": "0000:5d:00.0; reboot"}],
    [{"kind": "gpu_pair", "bus_id": "0000:5d:00.0\n- hosts: all", "peer_bus_id": "../../0000:3a:00.0"}],
    [{"kind": "gpu", "bus_id": ""}], [{"kind": "gpu", "bus_id": "GPU-5d"}],
])
def test_damaged_stored_devices_lose_only_what_is_damaged(devices: Any) -> None:
    f = Finding.from_dict({"id": "gpu.lost", "severity": "fail", "kind": "fault", "host": "h", "subject": "s",
                           "message": "m", "devices": devices})
    assert all(isinstance(d, Device) for d in f.devices)
    assert all(d.gpu is None and d.bus_id is None and d.peer_bus_id is None and d.port is None for d in f.devices)
    plan = host_plan("h", [replace(f, id="gpu.row_remap.pending", action=Action.RESET_GPU)])
    assert plan is not None and plan.gpus_to_reset() == []  # a person resets what no address names


def test_an_unknown_id_is_to_be_looked_at() -> None:
    f = Finding("gpu.some_future_check", Severity.FAIL, Kind.FAULT, "h", "s", "m")
    assert f.action is Action.RESEAT_INSPECT and f.because == "an id this fleetprobe does not know"
    assert replace(f, subject="t").action is Action.RESEAT_INSPECT
