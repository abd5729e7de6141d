"""Machine outputs read back by the tools that consume them: prometheus-client's parser,
junitparser, Ansible's inventory shape, csv/json/yaml readers."""

from __future__ import annotations

import csv
import io
import json
import re
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.present.outputs import write_atomic
from orchestrator.present.outputs.ansible_inventory import (
    group_name,
    render_inventory,
    render_static_inventory,
    write_inventory,
)
from orchestrator.present.outputs.junit import render_junit, write_junit
from orchestrator.present.outputs.prometheus import escape_label, render_prometheus, write_prometheus
from orchestrator.present.outputs.tabular import render_findings, render_hosts, render_rows
from orchestrator.verdict.result import FleetResult
from tests.support.ansible import ANSIBLE_INVENTORY, SKIP_REASON, ansible_list
from tests.support.hostile_strings import ansible_yaml
from tests.support.judged import judged
from tests.verdict.test_diff import finding, fleet, host

EVIL = 'odd"host\\name\nx'


@pytest.fixture
def run() -> FleetResult:
    a = host("gpu01", links_down=((0, 1),), p2p=250.5)
    a["probes"]["host"]["duration_s"] = 0.25
    b = host("gpu02", cls="B")
    b["probes"]["nvlink"] = {"outcome": "timeout", "reason": "deadline 10s"}
    b["probes"]["pcie"] = {"outcome": "unsupported", "reason": "no sysfs"}
    del b["facts"]["pcie"]  # an unsupported probe leaves no section
    c = host("gpu03", outcome="unreachable")
    d = host(EVIL)
    f = fleet("20261130T021500Z-abc123", [a, b, c, d], [
        finding("nvlink.link.down", "gpu01", "GPU0 link 1"),
        finding("nvlink.link.down", "gpu01", "GPU2 link 1"),
        {**finding("sensor.fan.zero_rpm", "gpu02", "GPU1"), "severity": "warn", "message": "0 RPM at 58 C"},
        {**finding("pcie.link.downgraded", EVIL, "=cmd|' /C calc'!A0"), "severity": "info", "message": "bell\x07"},
    ])
    f["run"].update(started="2026-11-30T02:15:00+00:00", finished="2026-11-30T02:16:40+00:00")
    return judged(f)


def _metrics(text: str) -> dict[str, list]:
    return {fam.name: fam.samples for fam in text_string_to_metric_families(text)}


def test_prometheus_parses_back_with_expected_values(run: FleetResult, tmp_path: Path):
    text = render_prometheus(run)
    m = _metrics(text)

    def value(name: str, **labels: str) -> float:
        hits = [s.value for s in m[name] if all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(hits) == 1, (name, labels, hits)
        return hits[0]

    assert value("fleetprobe_gpu_count", host="gpu01") == 4
    assert value("fleetprobe_nvlink_links_up", host="gpu01") == 7  # 8 links, one down
    # base units, as the Prometheus naming conventions ask (this was fleetprobe_p2p_min_gbps)
    assert value("fleetprobe_p2p_min_bandwidth_bytes_per_second", host="gpu01") == 250.5e9
    assert not [s for s in m["fleetprobe_p2p_min_bandwidth_bytes_per_second"]
                if s.labels["host"] != "gpu01"]  # not measured: absent
    assert value("fleetprobe_findings", host="gpu01", severity="fail") == 2
    assert value("fleetprobe_findings", host="gpu01", severity="warn") == 0
    assert value("fleetprobe_findings", host="gpu02", severity="warn") == 1
    assert value("fleetprobe_probe_outcome", host="gpu02", probe="nvlink", outcome="timeout") == 1
    assert value("fleetprobe_probe_outcome", host="gpu02", probe="nvml", outcome="ok") == 1
    assert value("fleetprobe_probe_outcome", host="gpu03", probe="host", outcome="unreachable") == 1
    assert value("fleetprobe_host_reachable", host="gpu03") == 0
    assert value("fleetprobe_host_reachable", host="gpu01") == 1
    assert not [s for s in m["fleetprobe_gpu_count"] if s.labels["host"] == "gpu03"]
    assert value("fleetprobe_run_timestamp_seconds", host="gpu02") == 1796005000.0
    # the odd host name survives the round trip through escaping
    assert value("fleetprobe_findings", host=EVIL, severity="info") == 1
    assert value("fleetprobe_gpu_count", host=EVIL) == 4
    # HELP and TYPE once per family, every family a gauge
    for name in m:
        assert text.count(f"# TYPE {name} gauge\n") == 1 and text.count(f"# HELP {name} ") == 1
    assert text.endswith("\n") and "\n\n" not in text


def test_prometheus_label_escaping():
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_prometheus_write_is_atomic_and_world_readable(run: FleetResult, tmp_path: Path):
    target = tmp_path / "textfile" / "fleetprobe.prom"
    write_prometheus(run, target)
    first = target.read_text()
    assert _metrics(first)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # node_exporter runs as another user
    one = judged({**run.to_document(), "hosts": run.hosts.records[:1]})
    write_prometheus(one, target)
    assert target.read_text() != first
    assert sorted(p.name for p in target.parent.iterdir()) == ["fleetprobe.prom"]  # no temp files left


def test_atomic_write_failure_keeps_old_file_and_no_temp(tmp_path: Path):
    target = tmp_path / "out.txt"
    target.write_text("old")

    with pytest.raises(TypeError):
        write_atomic(target, 42)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_junit_structure_by_junitparser(run: FleetResult, tmp_path: Path):
    junitparser = pytest.importorskip("junitparser")
    path = write_junit(run, tmp_path / "fleet.xml", check_ids=["gpu.count.missing"])
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = {s.name: s for s in xml}
    assert list(suites) == ["gpu01", "gpu02", "gpu03", EVIL]

    def cases(suite):
        return {c.name: c for c in suite}

    g1 = cases(suites["gpu01"])
    # one case per probe plus one per check id known to the run
    assert set(g1) == {"probe.host", "probe.pcie", "probe.nvml", "probe.nvlink", "probe.p2p", "gpu.count.missing",
                       "nvlink.link.down", "pcie.link.downgraded", "sensor.fan.zero_rpm"}
    failure = g1["nvlink.link.down"].result
    assert len(failure) == 1 and isinstance(failure[0], junitparser.Failure)
    assert failure[0].message == "GPU0 link 1: nvlink.link.down on GPU0 link 1 (+1 more)"
    assert "GPU2 link 1" in failure[0].text
    assert g1["gpu.count.missing"].is_passed and g1["probe.host"].time == 0.25

    g2 = cases(suites["gpu02"])
    assert isinstance(g2["probe.nvlink"].result[0], junitparser.Error)
    assert g2["probe.nvlink"].result[0].message == "timeout: deadline 10s"
    assert isinstance(g2["probe.pcie"].result[0], junitparser.Skipped)
    assert g2["sensor.fan.zero_rpm"].is_passed  # a warning does not fail CI ...
    assert "0 RPM at 58 C" in (g2["sensor.fan.zero_rpm"].system_out or "")  # ... but is shown

    g3 = cases(suites["gpu03"])
    assert list(g3) == ["host.reachable"]
    assert isinstance(g3["host.reachable"].result[0], junitparser.Error)
    assert "connection refused" in g3["host.reachable"].result[0].message

    # gpu02's nvlink timed out and its pcie probe was unsupported: their checks judged nothing there
    for check, probe in (("nvlink.link.down", "nvlink timeout"), ("pcie.link.downgraded", "no PCIe tree")):
        [skip] = g2[check].result
        assert isinstance(skip, junitparser.Skipped) and skip.message.startswith(f"not judged: {probe}")

    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (
        sum(s.tests for s in xml), 1, 2, 3)


def test_junit_warn_can_fail_and_control_chars_are_made_xml_safe(run: FleetResult):
    text = render_junit(run, fail_on=("fail", "warn"))
    root = ET.fromstring(text)  # a BEL from a host must not make the file unparseable
    assert root.tag == "testsuites" and root.get("failures") == "2"
    fan = root.find("./testsuite[@name='gpu02']/testcase[@name='sensor.fan.zero_rpm']/failure")
    assert fan is not None and fan.get("type") == "warn"
    assert "\x07" not in text
    for suite in root:
        assert int(suite.get("tests", "0")) == len(suite.findall("testcase"))


def test_ansible_inventory_groups_and_hostvars(run: FleetResult, tmp_path: Path):
    inv = render_inventory(run)
    assert inv["finding_nvlink_link_down"] == {"hosts": ["gpu01"]}
    # EVIL (a quote, a backslash, a newline) is no name Ansible reads as one host: in no group (issue 45)
    assert "finding_pcie_link_downgraded" not in inv and EVIL not in inv["all"]["hosts"]
    assert inv["class_a"]["hosts"] == ["gpu01", "gpu03"]
    assert inv["class_b"]["hosts"] == ["gpu02"]
    assert inv["severity_fail"]["hosts"] == ["gpu01"]
    assert inv["outcome_unreachable"]["hosts"] == ["gpu03"]
    hv = inv["_meta"]["hostvars"]
    assert hv["gpu01"]["fleetprobe_findings"] == ["nvlink.link.down"]
    assert hv["gpu01"]["fleetprobe_gpu_count"] == 4 and hv["gpu03"]["fleetprobe_gpu_count"] is None
    assert set(inv["all"]["children"]) == {k for k in inv if k not in ("all", "_meta")}
    valid = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
    assert all(valid.match(g) for g in inv["all"]["children"])
    static = render_static_inventory(run)
    assert static["all"]["children"]["finding_nvlink_link_down"] == {"hosts": {"gpu01": None}}
    write_inventory(run, tmp_path / "inv.json", shape="script-json")
    assert json.loads((tmp_path / "inv.json").read_text()) == inv
    write_inventory(run, tmp_path / "inv.yml")  # what --ansible-inventory writes: the YAML inventory
    assert ansible_yaml((tmp_path / "inv.yml").read_text()) == static
    assert "# not an Ansible host name, left out: 'odd\"host\\\\name\\nx': not one literal host name" in \
        (tmp_path / "inv.yml").read_text()


def test_group_names_are_sanitized_and_distinct_ids_stay_apart():
    assert group_name("class", "DGX H100/8x-NV18") == "class_dgx_h100_8x_nv18"
    assert group_name("", "9lives") == "_9lives"
    f = fleet("r", [host("a"), host("b")], [finding("a.b_c", "a", "s"), finding("a_b.c", "b", "s")])
    inv = render_inventory(judged(f))
    assert inv["finding_a_b_c"]["hosts"] == ["a"] and inv["finding_a_b_c_2"]["hosts"] == ["b"]




@pytest.mark.skipif(not ANSIBLE_INVENTORY, reason=SKIP_REASON)
def test_ansible_reads_both_shapes(run: FleetResult, tmp_path: Path):
    script = tmp_path / "inv.py"
    data = tmp_path / "inv.json"
    write_inventory(run, data, shape="script-json")
    script.write_text(f"#!/bin/sh\ncat '{data}'\n")
    script.chmod(0o755)
    static = tmp_path / "static.json"
    write_inventory(run, static, shape="static-json")
    written = tmp_path / "fleetprobe.yml"
    write_inventory(run, written)
    for source in (script, static, written):
        got = ansible_list(source)
        assert got["finding_nvlink_link_down"]["hosts"] == ["gpu01"], source
        assert got["_meta"]["hostvars"]["gpu01"]["fleetprobe_findings"] == ["nvlink.link.down"]


def test_tabular_formats_round_trip(run: FleetResult):
    rows = list(csv.DictReader(io.StringIO(render_hosts(run, "csv"))))
    assert [r["host"] for r in rows] == ["gpu01", "gpu02", "gpu03", EVIL]
    assert rows[0]["gpus"] == "4" and rows[0]["fail"] == "2" and rows[0]["p2p_min_gbps"] == "250.5"
    assert json.loads(rows[1]["probes"])["nvlink"] == "timeout"
    assert rows[2]["gpus"] == "" and rows[2]["outcome"] == "unreachable"
    frows = list(csv.DictReader(io.StringIO(render_findings(run, "csv"))))
    assert frows[3]["subject"] == "'=cmd|' /C calc'!A0"  # a spreadsheet must not run it
    js = json.loads(render_findings(run, "json"))
    assert js[3]["subject"] == "=cmd|' /C calc'!A0" and len(js) == 4  # JSON keeps the value as is
    ys = yaml.safe_load(render_hosts(run, "yaml"))
    assert ys[1]["host"] == "gpu02" and ys[1]["warn"] == 1 and ys[0]["nvlink_up"] == 7
    assert render_rows([], "csv", ["a", "b"]) == "a,b\n"
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        render_rows([], "xml")


def test_write_outputs_writes_all_and_reports_each_failure(run: FleetResult, tmp_path: Path):
    from orchestrator.present.outputs.emit import OutputError, write_outputs

    paths = write_outputs(run, prometheus=tmp_path / "p.prom", junit=tmp_path / "j.xml",
                          ansible_inventory=tmp_path / "i.json")
    assert [p.name for p in paths] == ["p.prom", "j.xml", "i.json"]
    assert _metrics((tmp_path / "p.prom").read_text())
    assert ET.parse(tmp_path / "j.xml").getroot().tag == "testsuites"
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError) as e:
        write_outputs(run, prometheus=blocker / "p.prom", junit=tmp_path / "j2.xml")
    assert str(e.value).startswith(f"could not write --prometheus {blocker / 'p.prom'}: ")
    assert (tmp_path / "j2.xml").is_file()  # the other output was still written
