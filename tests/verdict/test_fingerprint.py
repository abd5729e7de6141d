"""Topology fingerprints, class names and outliers over facts normalized from the demo recordings."""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.verdict import classes as fingerprint
from tests.verdict.test_verdict_demo import recorded_facts


def _relabel(facts: dict[str, Any], shift: int = 1, tag: str = "x") -> dict[str, Any]:
    """The same machine with other serials, UUIDs and PCI bus numbers (every bus moved by `shift`)."""
    text = json.dumps(facts)
    text = re.sub(r"\b([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])\b",
                  lambda m: f"{m.group(1)}:{(int(m.group(2), 16) + shift) % 256:02x}:{m.group(3)}.{m.group(4)}", text)
    text = re.sub(r'"(serial|system_serial|board_serial)": "([^"]*)"', lambda m: f'"{m.group(1)}": "{tag}{m.group(2)}"', text)
    text = re.sub(r"GPU-[0-9a-f]{8}", f"GPU-{tag * 8}", text)
    return json.loads(text)


def _records(**hosts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": n.replace("_", "-"), "facts": f} for n, f in hosts.items()]


def _classify(recs: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[Any], dict[str, str]]:
    classes, findings = fingerprint.classify(recs)
    return {c["name"]: c for c in classes}, findings, {r["name"]: r["class"] for r in recs}


def test_identical_machines_share_one_class_whatever_their_identities() -> None:
    base = recorded_facts("dgx-h100-01")
    other = _relabel(base, shift=3, tag="9")
    assert json.dumps(other) != json.dumps(base)  # really other bus ids, serials and UUIDs
    assert other["gpus"]["order"][0] != base["gpus"]["order"][0]
    recs = _records(a=base, b=recorded_facts("dgx-h100-02"), c=other)
    classes, findings, _ = _classify(recs)
    assert list(classes) == ["8xH100-SXM-NV18-8NIC-PIX"]
    assert classes["8xH100-SXM-NV18-8NIC-PIX"]["members"] == ["a", "b", "c"]
    assert len({r["fingerprint"] for r in recs}) == 1
    assert findings == []


def test_class_names_are_readable_for_every_demo_shape() -> None:
    names = {host: fingerprint.class_name(fingerprint.descriptor(recorded_facts(host)) or {}) for host in (
        "dgx-h100-01", "dgx-a100-01", "dgx1-v100-01", "ws-a6000-01", "rtx4090-01", "vm-a100-01", "dgx-h100-04",
        "dgx-a100-06")}
    assert names == {
        "dgx-h100-01": "8xH100-SXM-NV18-8NIC-PIX",
        "dgx-a100-01": "8xA100-SXM-NV12-10NIC-PXB",
        "dgx1-v100-01": "8xV100-SXM-NV1/NV2-4NIC-PIX",  # hybrid cube mesh: NV1 and NV2 pairs, the rest SYS
        "ws-a6000-01": "4xRTX-A6000-NV4-pairs-1NIC",  # two bridged pairs
        "rtx4090-01": "8xRTX-4090-SYS-2NIC",
        "vm-a100-01": "2xA100-PCIE-PHB-1NIC-PHB-MIG-VM",
        "dgx-h100-04": "8xH100-SXM-NV16/NV18-8NIC-PIX",  # one GPU with two links down
        "dgx-a100-06": "8xA100-SXM-NV12-partial-10NIC-PXB",  # a lost GPU has no NVLink at all
    }


def test_outlier_is_named_with_its_differences() -> None:
    recs = _records(h1=recorded_facts("dgx-h100-01"), h2=recorded_facts("dgx-h100-02"),
                    h3=recorded_facts("dgx-h100-03"), h4=recorded_facts("dgx-h100-04"))
    classes, findings, of = _classify(recs)
    major = classes["8xH100-SXM-NV18-8NIC-PIX"]
    assert major["members"] == ["h1", "h2", "h3"]
    [out] = major["outliers"]
    assert out["host"] == "h4" and out["class"] == "8xH100-SXM-NV16/NV18-8NIC-PIX"
    assert "nvlink_links_up: 7×18, 1×16 (class usual: 8×18)" in out["differences"]
    assert "gpu_pair_levels: NV16: 7, NV18: 21 (class usual: NV18: 28)" in out["differences"]
    [f] = findings
    assert (f.id, f.host, f.severity.value, f.kind.value) == ("topology.class.outlier", "h4", "warn", "fault")
    assert f.expected == "8xH100-SXM-NV18-8NIC-PIX" and f.actual == of["h4"]


def test_two_hosts_have_no_outlier() -> None:
    _, findings, of = _classify(_records(h1=recorded_facts("dgx-h100-01"), h4=recorded_facts("dgx-h100-04")))
    assert findings == [] and of["h1"] != of["h4"]


def test_a_tie_has_no_outlier() -> None:
    bad = recorded_facts("dgx-h100-04")
    recs = _records(h1=recorded_facts("dgx-h100-01"), h2=recorded_facts("dgx-h100-02"),
                    h4=bad, h5=_relabel(bad, shift=5, tag="7"))
    classes, findings, _ = _classify(recs)
    assert findings == [] and all(not c["outliers"] for c in classes.values())
    assert len(classes) == 2


def test_another_board_of_the_same_shape_is_its_own_class_not_an_outlier() -> None:
    recs = _records(h1=recorded_facts("dgx-h100-01"), h2=recorded_facts("dgx-h100-02"),
                    h3=recorded_facts("dgx-h100-03"), lenovo=recorded_facts("lenovo-h100-01"))
    _, findings, of = _classify(recs)
    assert findings == []
    assert of["lenovo"] == "8xH100-SXM-NV18-8NIC-PIX@SB27B09955"


def test_same_name_other_shape_is_told_apart_by_what_differs() -> None:
    recs = _records(h1=recorded_facts("dgx-h100-01"), h2=recorded_facts("dgx-h100-02"),
                    h6=recorded_facts("dgx-h100-06"))
    _, findings, of = _classify(recs)
    assert of["h6"] == "8xH100-SXM-NV18-8NIC-PIX+Gen1x8"
    assert [f.host for f in findings] == ["h6"]


def test_classes_do_not_depend_on_host_order() -> None:
    hosts = ["dgx-h100-01", "dgx-h100-04", "dgx-a100-01", "dgx-h100-02", "ws-a6000-01", "dgx-h100-03"]
    facts = {h: recorded_facts(h) for h in hosts}
    a, fa = fingerprint.classify([{"name": h, "facts": facts[h]} for h in hosts])
    b, fb = fingerprint.classify([{"name": h, "facts": facts[h]} for h in reversed(hosts)])
    assert [(c["name"], c["fingerprint"], sorted(c["members"])) for c in a] == \
        [(c["name"], c["fingerprint"], sorted(c["members"])) for c in b]
    assert sorted(f.host for f in fa) == sorted(f.host for f in fb) == ["dgx-h100-04"]


def test_a_gpu_less_host_is_classed_by_board_and_a_host_without_facts_is_not_classed() -> None:
    host_only = {"host": recorded_facts("dgx-h100-01")["host"]}
    recs = [{"name": "cpu", "facts": host_only}, {"name": "dead", "facts": {}}]
    classes, findings = fingerprint.classify(recs)
    assert [c["name"] for c in classes] == ["cpu-only-DGXH100"] and findings == []
    assert recs[1]["class"] is None and recs[1]["fingerprint"] is None
