"""Real perftest outputs and multi-node nccl-tests outputs import as facts (fixtures with provenance in
tests/fixtures/fabric/SOURCES.md and tests/fixtures/evidence/SOURCES.md), through the same parser the
fabric probe's outputs go through on the controller."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.facts.normalize.fabric import measurement
from orchestrator.facts.textparse.detect import detect_kind
from orchestrator.facts.textparse.importer import import_files, import_texts
from orchestrator.facts.textparse.perftest import MIB_BITS, parse_perftest
from tests.support.fleet import Cli

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "fabric"
EVIDENCE = ROOT / "tests" / "fixtures" / "evidence"


def test_every_fixture_has_its_provenance() -> None:
    sources = (FIX / "SOURCES.md").read_text()
    for f in FIX.glob("*.txt"):
        assert f"| {f.name} |" in sources, f.name


def test_ib_write_bw_loopback_both_sides() -> None:
    log = parse_perftest((FIX / "ib_write_bw_8m_loopback_superbench_01.txt").read_text())
    assert [(r.tool, r.kind, r.device, r.unit) for r in log.runs] == [("ib_write_bw", "bw", "ib0", "MB/sec")] * 2
    for run in log.runs:
        assert run.settings["Link type"] == "IB" and run.local["lid"] == 0xD06 == run.remote["lid"]
        r = run.result()
        assert r is not None and (r["size"], r["iters"]) == (8388608, 20000)
        assert r["bw_avg_gbps"] == round(24056.72 * MIB_BITS, 3) == 201.802
    assert log.errors == [] and log.notes == []


def test_ib_write_bw_all_sizes_between_two_nodes() -> None:
    text = (FIX / "ib_write_bw_a_hdr_cx6_2node_client_01.txt").read_text()
    assert detect_kind(text) == "perftest"
    [run] = parse_perftest(text).runs
    assert len(run.rows) == 23 and run.rows[0]["size"] == 2 and run.remote == {"lid": 0x6E, "qpn": "0x0561"}
    assert run.result() == {"size": 8388608, "iters": 5000, "bw_peak_gbps": round(23326.82 * MIB_BITS, 3),
                            "bw_avg_gbps": 195.603, "msg_rate_mpps": 0.002915}


def test_ib_write_lat_all_sizes_between_two_nodes() -> None:
    [run] = parse_perftest((FIX / "ib_write_lat_a_hdr_cx6_2node_client_01.txt").read_text()).runs
    assert run.kind == "lat" and len(run.rows) == 23
    assert run.result() == {"size": 2, "iters": 1000, "t_min_us": 1.79, "t_max_us": 5.41, "t_typical_us": 1.87,
                            "t_avg_us": 1.88, "t_stdev_us": 0.18, "t_p99_us": 2.03, "t_p999_us": 5.41}


@pytest.mark.parametrize(("name", "test", "value"), [
    ("ib_write_bw_8m_loopback_superbench_01.txt", "ib_write_bw", 201.802),
    ("ib_write_bw_a_hdr_cx6_2node_client_01.txt", "ib_write_bw", 195.603),
    ("ib_write_lat_a_hdr_cx6_2node_client_01.txt", "ib_write_lat", 1.87),
])
def test_perftest_outputs_import_as_fabric_facts(name: str, test: str, value: float) -> None:
    host = import_files([FIX / name])
    assert host.errors == [] and host.outcomes == {"fabric": "ok"}
    fab = host.facts["fabric"]
    assert fab["source"] == "text" and fab["origin"] == "text" and fab["source_files"] == [str(FIX / name)]
    ms = fab["measurements"]
    assert {m["test"] for m in ms} == {test} and ms[0]["value"] == value and ms[0]["peer"].startswith("LID 0x")


def test_multi_node_nccl_tests_outputs_import_as_a_fabric_group() -> None:
    a3 = import_files([EVIDENCE / "nccl_all_reduce_2x8_h100_a3mega_01.txt"]).facts["fabric"]["nccl"]
    assert [(g["members"], g["ranks"], g["busbw_gbps"], g["wrong"]) for g in a3] == [
        (["ztan-mig-235z", "ztan-mig-gq73"], 16, 338.82, 0)]
    assert len(a3[0]["results"]) == 62
    tcp = import_files([EVIDENCE / "nccl_broadcast_2x_v100_pcie_tcp_cut_01.txt"]).facts["fabric"]["nccl"]
    assert tcp[0]["members"] == ["v100-gpu-1", "v100-gpu-5"] and tcp[0]["busbw_gbps"] is None  # a broadcast
    # one host's nccl-tests output is no fabric measurement
    single = import_files([EVIDENCE / "nccl_all_reduce_2x_rtx2080ti_nvlink_bridge_cut_01.txt"])
    assert "fabric" not in single.facts


def test_a_failed_run_imports_as_a_measurement_without_a_figure() -> None:
    host = import_texts([("client.txt", "Couldn't connect to 10.0.0.9:18515\nUnable to open file descriptor for "
                                        "socket connection Unable to init the socket connection\n")], "perftest")
    [m] = host.facts["fabric"]["measurements"]
    assert m["value"] is None and m["error_kind"] == "connect" and m["error"].startswith("Couldn't connect")
    with pytest.raises(ValueError):
        parse_perftest(b"\x00\x01binary")
    assert import_texts([("x.txt", "hello\n")], "perftest").errors


def test_the_probe_s_record_is_parsed_and_its_peer_checked() -> None:
    text = (FIX / "ib_write_bw_a_hdr_cx6_2node_client_01.txt").read_text()
    rec = {"round": 2, "rail": 0, "hca": "mlx5_0", "peer": "node-1", "peer_hca": "mlx5_0", "role": "client",
           "test": "ib_write_bw", "stdout": text, "stderr": "", "exit": 0, "use_cuda": None, "peer_lid": 0x6E}
    m = measurement(rec)
    assert m is not None and m["value"] == 195.603 and m["error"] is None and m["size"] == 8388608
    stale = measurement({**rec, "peer_lid": 0x41})
    assert stale is not None and stale["value"] is None and stale["error_kind"] == "wrong_peer"
    timeout = measurement({**rec, "stdout": "", "timed_out": True, "exit": None})
    assert timeout is not None and timeout["error_kind"] == "timeout"
    assert measurement({**rec, "error": "ib_write_bw not installed on this host"})["error_kind"] == "missing"  # type: ignore[index]


def test_probe_import_reads_a_perftest_output(tmp_path: Path) -> None:
    cli = Cli.create(tmp_path)
    path = FIX / "ib_write_bw_a_hdr_cx6_2node_client_01.txt"
    res = cli.run("import", str(path), "--results", str(tmp_path / "runs"), "--format", "json")
    assert res.returncode == 0, res.stderr
    [host] = json.loads(res.stdout)["hosts"]
    assert host["probes"]["fabric"]["outcome"] == "ok"
    assert [m["value"] for m in host["facts"]["fabric"]["measurements"]] == [195.603]
    shown = cli.run("import", str(path), "--results", str(tmp_path / "runs"), "--show", "fabric",
                    "-v")  # what was not judged, by reason: the full report
    assert "== ib_write_bw_a_hdr_cx6_2node_client_01: fabric" in shown.stdout and "195.6" in shown.stdout, shown.stdout
    # one output of one pair localises nothing: never "passed"
    assert "fabric.host.slow" in shown.stdout or "fabric.* (" in shown.stdout
