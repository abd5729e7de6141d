"""The judged fleet as one typed value (verdict/result.py): what a stored fleet.json of any age reads
back as, and the run metadata it carries (store/runmeta.py)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.store.history import load_fleet
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict.health import Health
from orchestrator.verdict.result import FleetResult, JudgedHost

V1_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs_v1" / "20261201T134403Z-916ca5822"


def test_a_run_stored_before_health_and_roots_reads_with_both_decided_as_now() -> None:
    fleet = FleetResult.from_document(load_fleet(V1_RUN))
    assert fleet.problems == []
    health = {h.name: h.health.state for h in fleet.hosts}
    # every probe of that run was unsupported (an answer) and the faults are what they are
    assert health == {"dgx-h100-01": Health.HEALTHY, "dgx-h100-05": Health.FAILED, "dgx-a100-03": Health.FAILED}
    assert fleet.health_counts == {"failed": 2, "unreachable": 0, "incomplete": 0, "degraded": 0, "healthy": 1}
    # A run stored before findings named their devices (issue 46) has none, and fleetprobe reads no
    # device out of subject text: its same-device causes (causes.Scope.DEVICE) join nothing, so the
    # GPU the driver lacks is a fault of its own beside the GPU NVML lacks.  Host and same-subject
    # causes group as before.
    assert dict(fleet.summary.faults) == {"fail": 3, "warn": 0, "info": 0} and fleet.summary.findings["fail"] == 11
    [acs] = fleet.faults_of("dgx-a100-03")
    assert acs.root.id == "pcie.acs.enabled" and len(acs.consequences) == 7
    driver, gpu = sorted(fleet.faults_of("dgx-h100-05"), key=lambda f: f.root.id)
    assert gpu.root.id == "gpu.count.pci_vs_nvml" and driver.root.id == "gpu.count.pci_vs_driver"
    assert sorted(f.id for f in gpu.consequences) == ["gpu.count.mismatch"] and driver.consequences == ()
    assert all(f.devices == () and f.because for f in fleet.findings)  # actions: re-derived from the ids
    # the file form carries them: written again, it reads back the same
    doc = fleet.to_document()
    again = FleetResult.from_document({**doc, "hosts": [dict(r) for r in doc["hosts"]]})
    assert [f.to_dict() for f in again.findings] == [f.to_dict() for f in fleet.findings]


def test_a_damaged_document_loses_only_what_is_damaged_and_says_so() -> None:
    doc = json.loads(json.dumps(load_fleet(V1_RUN), default=list))
    doc["hosts"] = [dict(h) for h in load_fleet(V1_RUN)["hosts"]]
    doc["findings"][0] = {"id": "gpu.count.mismatch", "severity": "catastrophic"}
    doc["findings"][1]["kind"] = "bad"
    doc["findings"].append("not a finding")
    doc["findings"].append({"id": "x.y", "host": 3, "subject": "s", "message": "m", "severity": "fail",
                            "kind": "fault"})
    doc["hosts"][0]["probes"] = "nope"
    doc["hosts"][1]["health"] = {"state": "splendid"}
    doc["summary"] = "no summary"
    fleet = FleetResult.from_document(doc)
    assert len(fleet.problems) == 4 and len(fleet.findings) == 11 - 2
    assert [h.name for h in fleet.hosts] == ["dgx-h100-01", "dgx-h100-05", "dgx-a100-03"]
    assert fleet.hosts[0].probes == {} and fleet.hosts[1].health.state is Health.FAILED  # decided again
    assert sum(fleet.health_counts.values()) == 3


def test_run_meta_round_trips_and_reads_a_damaged_run_json_tolerantly() -> None:
    meta = RunMeta(id="r1", state="interrupted", started="2026-12-01T00:00:00+00:00", user="ops",
                   inventory=["fleet.yml"], playbook="/x/playbooks/audit.yml", probes=["host"],
                   stopped={"finished": 3, "cut": 1, "never": 2}, extra={"future_key": 1})
    assert RunMeta.from_dict(json.loads(json.dumps(meta.to_dict()))) == meta
    assert meta.playbook_name == "audit" and meta.interrupted
    assert meta.header()["stopped"] == {"finished": 3, "cut": 1, "never": 2} and "plan" not in meta.header()
    bad = RunMeta.from_dict({"id": 5, "state": "exploded", "inventory": "fleet.yml", "probes": [1, "x", None],
                             "stopped": {"finished": "3", "cut": 1}, "plan": []})
    assert (bad.id, bad.state, bad.inventory, bad.probes, bad.stopped, bad.plan) == \
        ("", "running", [], ["x"], {"cut": 1}, None)
    # names only: a null among them is no source named "None" (a merge would go looking for it)
    odd = RunMeta.from_dict({"inventory": [None, 1, "fleet.yml"], "hosts_order": ["a", None, {"b": 1}]})
    assert (odd.inventory, odd.hosts_order) == (["fleet.yml"], ["a"])


def test_a_host_record_of_odd_types_reads_as_a_host() -> None:
    h = JudgedHost.from_record({"name": "n", "groups": "g", "probes": {"host": {"outcome": "ok", "duration_s": "1"},
                                                                         "pcie": "x"},
                                "facts": [], "outcome": None, "class": 5, "connection": ["x"]})
    assert (h.groups, list(h.probes), h.facts, h.topology_class, h.connection) == ((), ["host"], {}, None, {})
    assert h.probes["host"].duration_s is None and h.health.state in Health
