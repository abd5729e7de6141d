"""`probe run -p fabric` on the bundled demo (issue 47 item 1): the rail slow between every pair
(rail 6) and the path slow between two ports (dgx-h100-01 <-> dgx-h100-20) are the fabric's.  No
host is failed, drained or remedied for them; each is shown once, naming the hosts it touches, in
the terminal, fleet.json, JUnit, Prometheus and the report; the hosts the localisation points at
(dgx-h100-03 slow on every rail, dgx-h100-19's slow HCA) still fail, they alone.

The run is the real one over the demo's recorded fabric answers (tests/fabric/test_fabric_demo.py).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tests.support.fleet import Cli

H100 = [f"dgx-h100-{i:02d}" for i in range(1, 25)]
# what the demo's fabric run fails, each for a fault of its own (none for rail 6 or the path)
FAILED = {"dgx-h100-03": "fabric.host.slow", "dgx-h100-18": "nic.port.down", "dgx-h100-19": "nic.port.rate_low",
          "dgx1-v100-02": "host.driver.version", "rent-h100-01": "software.security.driver"}
RAIL = "rail 6 is slow everywhere"


def test_the_demo_rail_and_path_faults_are_the_fabrics(tmp_path: Path) -> None:
    cli = Cli.create(tmp_path)
    out = {k: tmp_path / k for k in ("drain", "junit.xml", "fleet.prom", "plan.yml", "report.html")}
    proc, fleet = cli.run_json("run", "-p", "fabric", "--slurm-drain", str(out["drain"]), "--max-drain", "50",
                               "--junit", str(out["junit.xml"]), "--prometheus", str(out["fleet.prom"]), timeout=300)
    assert proc.returncode == 5, proc.stderr  # fail findings (the fabric's among them), one host unreachable
    by_name = {h["name"]: h for h in fleet["hosts"]}
    failed = {n for n, h in by_name.items() if h["health"]["state"] == "failed"}
    assert failed == set(FAILED)
    degraded = {n for n, h in by_name.items() if h["health"]["state"] == "degraded"}
    assert not degraded & set(H100) - {"dgx-h100-27"}
    assert fleet["summary"]["health"]["failed"] == len(FAILED)
    assert fleet["summary"]["fabric"] == {"fail": 2, "warn": 0, "info": 0}
    # fleet.json: each fabric fault once, with the hosts it touches
    fabric = {(f["id"], f["subject"]): f["hosts"] for f in fleet["fabric_findings"]}
    assert fabric == {("fabric.rail.slow", "rail 6 (mlx5_6)"): H100,
                      ("fabric.path.slow", "dgx-h100-01:mlx5_2 <-> dgx-h100-20:mlx5_2 (rail 2)"):
                          ["dgx-h100-01", "dgx-h100-20"]}
    # the drain list: the failed hosts alone, none for the rail or the path
    drain = out["drain"].read_text()
    drained = {line.split("NodeName=")[1].split()[0] for line in drain.splitlines() if line.startswith("unless_foreign_reason scontrol update ")}
    assert drained == set(FAILED) and "fabric.rail.slow" not in drain and "fabric.path.slow" not in drain
    # JUnit: one failing case for each fabric fault, in the fabric's suite; no host suite fails for them
    junit = ET.parse(out["junit.xml"]).getroot()
    failing = {(s.get("name"), tc.get("name")) for s in junit.findall("testsuite") for tc in s.findall("testcase")
               if tc.find("failure") is not None}
    assert {c for c in failing if "rail.slow" in str(c[1]) or "path.slow" in str(c[1])} == {
        ("fabric", "fabric.rail.slow rail 6 (mlx5_6)"),
        ("fabric", "fabric.path.slow dgx-h100-01:mlx5_2 <-> dgx-h100-20:mlx5_2 (rail 2)")}
    assert {s for s, _ in failing} == {*FAILED, "fabric"}
    # Prometheus: a fabric series, not a host's
    prom = out["fleet.prom"].read_text().splitlines()
    assert [line for line in prom if "fabric.rail.slow" in line] == [
        'fleetprobe_fabric_fault{id="fabric.rail.slow",severity="fail",kind="fault",subject="rail 6 (mlx5_6)",'
        'action="none"} 24']
    assert 'fleetprobe_host_health{host="dgx-h100-02",health="healthy"} 1' in prom
    # the terminal: a section of its own, each fault once, RECAP counts the fabric beside the hosts
    text = cli.run("show", "-v")  # the full report: its hosts named five by five
    assert text.returncode == 0, text.stderr
    assert text.stdout.count(RAIL) == 1 and "Fabric faults (2)" in text.stdout
    assert "24 host(s): dgx-h100-01, dgx-h100-02, dgx-h100-03, dgx-h100-04, dgx-h100-05 (+19 more)" in text.stdout
    assert "FAILED dgx-h100-02" not in text.stdout
    recap = next(line for line in text.stdout.splitlines() if line.startswith("RECAP"))
    assert f"failed={len(FAILED)} " in recap and "| fabric=2 |" in recap
    # the remediation plan names no host for them; the report shows each once
    plan = cli.run("remediate", "-o", str(out["plan.yml"]), "--max-drain", "50", "--results", str(cli.results))
    assert plan.returncode == 0, plan.stderr
    assert "dgx-h100-02" not in out["plan.yml"].read_text()
    report = cli.run("report", "-o", str(out["report.html"]))
    assert report.returncode == 0, report.stderr
    html = out["report.html"].read_text()
    assert html.count(RAIL) == 1 and 'id="fabric-table"' in html
