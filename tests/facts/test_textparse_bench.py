"""Benchmark outputs (p2pBandwidthLatencyTest, nvbandwidth, nccl-tests) -> facts["p2p"] and
facts["nccl"]: every matrix and testcase, repeated runs, JSON, and the noise real pastes carry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.facts.textparse import TextParseError, detect_kind, import_texts, read_path
from orchestrator.facts.textparse.bench import parse_nccl_tests, parse_nvbandwidth, parse_p2p_bwlat
from tests.support.evidence import evidence

P2P = "p2p_8x_h100_sxm_hgx_01.txt"
NVB = "nvbandwidth_8x_h100_sxm_multi_run_01.txt"
NCCL = "nccl_all_reduce_2x8_h100_a3mega_01.txt"


def text(name: str) -> str:
    return read_path(evidence(name))


def test_p2p_bandwidth_latency_every_matrix():
    b = parse_p2p_bwlat(text(P2P), P2P)
    assert [d.bus_id for d in b.devices][:2] == ["0000:19:00.0", "0000:3b:00.0"]
    assert all(d.name == "NVIDIA H100 80GB HBM3" for d in b.devices)
    assert len(b.can_access) == 56 and all(b.can_access.values())
    assert set(b.matrices) == {"connectivity", "ce_p2p_off_gbps", "ce_gbps", "bidir_p2p_off_gbps", "bidir_gbps",
                               "latency_p2p_off_us", "latency_cpu_p2p_off_us", "latency_us", "latency_cpu_us"}
    assert b.matrices["ce_gbps"][0][1] == 365.30 and b.matrices["ce_p2p_off_gbps"][0][1] == 37.53
    assert b.matrices["bidir_gbps"][1][0] == 774.45 and b.matrices["latency_cpu_us"][7][7] == 2.09
    assert b.notes == []


def test_p2p_facts_shape_and_gpus():
    host = import_texts([(P2P, text(P2P))])
    p2p, gpus = host.facts["p2p"], host.facts["gpus"]
    assert p2p["source"] == "p2pBandwidthLatencyTest" and p2p["origin"] == "text"
    assert p2p["summary"]["pairs_measured"] == 56 and p2p["summary"]["min_gbps"] == 365.30
    pair = next(p for p in p2p["pairs"] if (p["src"], p["dst"]) == (2, 1))
    assert pair["ce_gbps"] == 393.28 and pair["peer_enabled"] is True and pair["staged"] is False
    assert pair["bidir_gbps"] == 773.47 and pair["latency_us"] == 2.75 and pair["verified"] is None
    assert p2p["gpus"][0]["local_ce_gbps"] == 2862.54 and p2p["gpus"][0]["model"] == "H100-SXM"
    assert p2p["gpus"][0]["h2d_gbps"] is None and "h2d_gbps" in p2p["gpus"][0]["unknown"]
    assert p2p["guard"]["ran"] is None and p2p["guard"]["ran_unknown"]
    assert gpus["count"] == 8 and gpus["list"][4]["bus_id"] == "0000:9b:00.0"


def test_cannot_access_peer_is_staged():
    t = text(P2P).replace("Device=0 CAN Access Peer Device=1", "Device=0 CANNOT Access Peer Device=1")
    pair = next(p for p in import_texts([(P2P, t)]).facts["p2p"]["pairs"] if (p["src"], p["dst"]) == (0, 1))
    assert (pair["can_access_peer"], pair["peer_enabled"], pair["staged"]) == (False, False, True)


def test_nvbandwidth_every_testcase_and_runs():
    n = parse_nvbandwidth(text(NVB), NVB)
    assert n.version == "v0.10.0" and n.driver_version == "595.71.05"
    assert set(n.testcases) == {"device_to_device_latency_sm", "device_to_device_memcpy_read_ce",
                                "device_to_device_memcpy_write_ce", "device_to_host_memcpy_ce",
                                "host_to_device_memcpy_ce"}
    p2p = import_texts([(NVB, text(NVB))]).facts["p2p"]
    # write CE: "GPU(row) <- GPU(column)": the column is the source
    assert p2p["matrices"]["ce_gbps"][1][0] == 397.44 and p2p["matrices"]["ce_gbps"][0][1] == 397.50
    assert p2p["matrices"]["latency_us"][0][1] == 0.826
    assert [g["d2h_gbps"] for g in p2p["gpus"]][:2] == [55.2, 55.2] and p2p["gpus"][7]["h2d_gbps"] == 55.33
    assert all(g["bus_id"] is None and g["unknown"]["bus_id"] for g in p2p["gpus"])
    assert "nvbandwidth.device_to_device_memcpy_read_ce" in p2p["matrices"]


def test_nvbandwidth_repeated_runs_take_the_median():
    t = text(NVB)
    slower = t.replace("395.08", "300.00")
    p2p = import_texts([("a", t), ("b", slower), ("c", t)]).facts["p2p"]
    assert p2p["params"]["runs"]["device_to_device_memcpy_read_ce"] == 3
    assert p2p["matrices"]["nvbandwidth.device_to_device_memcpy_read_ce"][0][1] == 395.08


def test_nvbandwidth_json():
    doc = {"nvbandwidth": {"version": "v0.7", "Driver Version": "550.54.15", "testcases": [
        {"name": "host_to_device_memcpy_ce", "status": "Passed",
         "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
         "bandwidth_matrix": [["55.37", "55.36"]], "sum": 110.73},
        {"name": "device_to_device_memcpy_write_ce", "status": "Passed",
         "bandwidth_description": "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
         "bandwidth_matrix": [["N/A", "397.44"], ["397.50", "N/A"]]},
        {"name": "device_to_device_memcpy_read_sm", "status": "Waived"}]}}
    t = json.dumps(doc, indent=1)
    assert detect_kind(t) == "nvbandwidth"
    host = import_texts([("nvb.json", t)])
    p2p = host.facts["p2p"]
    assert p2p["matrices"]["ce_gbps"] == [[None, 397.5], [397.44, None]]
    assert [g["h2d_gbps"] for g in p2p["gpus"]] == [55.37, 55.36]
    assert any("Waived" in n for n in host.notes)


def test_nccl_tests_text():
    r = parse_nccl_tests(text(NCCL), NCCL)
    assert r.op == "all_reduce" and r.ranks == 16 and r.hosts == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert len(r.results) == 62 and r.avg_busbw_gbps == 70.742 and r.out_of_bounds == 0
    last = [x for x in r.results if x["size_bytes"] == 8589934592]
    assert [(x["in_place"], x["busbw_gbps"], x["time_us"], x["wrong"]) for x in last] == [
        (False, 338.82, 47535.0, 0), (True, 337.35, 47743.0, 0)]
    nccl = import_texts([(NCCL, text(NCCL))]).facts["nccl"]
    assert nccl["source"] == "nccl-tests" and nccl["gpu_count"] is None
    assert nccl["gpu_count_unknown"].startswith("16 ranks on 2 hosts (8, 8 per host)")
    assert nccl["results"][0]["op"] == "all_reduce" and nccl["version"] is None and nccl["version_unknown"]


def _single_host_variant() -> str:
    """The real run cut to one host's 8 ranks, with NCCL INFO lines, mpirun warnings and the `#`
    prefixes of an older nccl-tests (no root column, `error` instead of `#wrong`)."""
    lines = [x for x in text(NCCL).splitlines() if "ztan-mig-gq73" not in x]
    out = ["Warning: Permanently added '[10.0.0.2]:2222' (ED25519) to the list of known hosts.",
           "node:1234:1234 [0] NCCL INFO NCCL version 2.18.5+cuda12.2"]
    for x in lines:
        if x.startswith("#       size"):
            x = "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error"
        elif x[:1] == " " and "float" in x:
            toks = x.split()
            x = "  ".join(toks[:4] + toks[5:])
        out.append(x.lstrip("#") if x.startswith("#  Rank") else x)
        if x.startswith("# Using devices"):
            out.append("node:1234:1240 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read")
            out.append("node:1234:1240 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/IPC/read")
            out.append("[node:01234] 7 more processes have sent help message help-mpi-btl-openib.txt")
    return "\n".join(out) + "\n"


def test_nccl_tests_noise_and_old_columns():
    t = _single_host_variant()
    assert detect_kind(t) == "nccl_tests"
    host = import_texts([("nccl.txt", t)])
    nccl = host.facts["nccl"]
    # the INFO lines are read by the nccl normalizer's log reader: the transport as the live probe names it
    assert nccl["gpu_count"] == 8 and nccl["version"] == "2.18.5" and nccl["transport"] == "P2P"
    assert nccl["transports"] == ["P2P"] and nccl["gpus"][7] == "0000:8c:00.0" and nccl["gpu_model"] == "H100-SXM"
    big = [x for x in nccl["results"] if x["size_bytes"] == 8589934592]
    assert [x["busbw_gbps"] for x in big] == [338.82, 337.35]
    assert host.facts["gpus"]["count"] == 8 and host.facts["gpus"]["list"][7]["bus_id"] == "0000:8c:00.0"
    assert any("Permanently added" in n for n in host.notes) and any("NCCL INFO" in n for n in host.notes)


def test_nccl_tests_json():
    recs = [{"size": 1048576, "count": 262144, "type": "float", "redop": "sum", "root": -1,
             "out_of_place": {"time": 20.1, "algBw": 52.2, "busBw": 91.3, "nWrong": 0},
             "in_place": {"time": 19.9, "algBw": 52.6, "busBw": 92.1, "nWrong": 0}}]
    t = json.dumps({"collective": "all_reduce_perf", "nranks": 8, "results": recs, "avg_bus_bandwidth": 91.7})
    assert detect_kind(t) == "nccl_tests"
    nccl = import_texts([("nccl.json", t)]).facts["nccl"]
    assert [(x["op"], x["in_place"], x["busbw_gbps"], x["wrong"]) for x in nccl["results"]] == [
        ("all_reduce", False, 91.3, 0), ("all_reduce", True, 92.1, 0)]
    assert nccl["avg_busbw_gbps"] == 91.7 and nccl["gpu_count"] == 8


def test_truncated_benchmarks_keep_what_they_have():
    t = text(P2P)
    cut = t[: t.index("Bidirectional P2P=Enabled")] + "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 2946.72 739"
    b = parse_p2p_bwlat(cut, "cut")
    assert "ce_gbps" in b.matrices and b.matrices["bidir_gbps"][0][:2] == [2946.72, 739.0]
    with pytest.raises(TextParseError, match="no nccl-tests result row"):
        parse_nccl_tests("# nThread 1 nGpus 8\n# Using devices\n", "n")


def test_real_nvbandwidth_pastes_elided_cut_and_failed():
    el = import_texts([("e", text("nvbandwidth_6x_rtx_a6000_read_ce_elided_01.txt"))])
    m = el.facts["p2p"]["matrices"]["nvbandwidth.device_to_device_memcpy_read_ce"]
    assert len(m) == 6 and m[0][1] == 26.34 and m[5][4] == 26.35 and m[2][2] is None
    assert el.facts["p2p"]["matrices"]["ce_gbps"][0][3] == 21.95  # read CE: row -> column, no transpose
    assert any("named device_to_device_memcpy_read_ce from its SUM line" in n for n in el.notes)
    cut = import_texts([("c", text("nvbandwidth_8x_rtx4090_v02_cut_01.txt"))]).facts
    assert cut["gpus"]["count"] == 8 and cut["gpus"]["list"][0]["model"] == "RTX-4090"
    assert [g["h2d_gbps"] for g in cut["p2p"]["gpus"]][:3] == [25.5, 24.26, 23.9]
    assert cut["p2p"]["matrices"]["nvbandwidth.host_to_device_bidirectional_memcpy_ce"][0][:2] == [11.24, 14.42]
    failed = import_texts([("f", text("nvbandwidth_8x_a100_sxm4_assert_no_table_01.txt"))])
    assert "p2p" not in failed.facts  # nothing was measured: no section, never "passed"
    assert [g["bus_id"] for g in failed.facts["gpus"]["list"]][:2] == ["0000:34:00.0", "0000:35:00.0"]


def test_real_nccl_pastes_old_layouts():
    b = parse_nccl_tests(text("nccl_broadcast_2x_v100_pcie_tcp_cut_01.txt"))
    assert b.op == "broadcast" and b.version == "2.9.6" and b.hosts == ["v100-gpu-1", "v100-gpu-5"]
    assert [(r["size_bytes"], r["busbw_gbps"], r["wrong"], r["redop"]) for r in b.results] == [
        (8, 0.0, None, None), (8, 0.0, None, None)]
    old = parse_nccl_tests(text("nccl_all_reduce_2x_rtx2080ti_nvlink_bridge_cut_01.txt"))
    assert old.avg_busbw_gbps == 6.6 and old.out_of_bounds == 0 and old.op is None
    last = [r for r in old.results if r["size_bytes"] == 134217728]
    assert [(r["in_place"], r["busbw_gbps"], r["wrong"]) for r in last] == [(False, 20.34, 0), (True, 21.86, 0)]


def test_a_cpu_line_that_opens_no_table_is_read_once(tmp_path: Path) -> None:
    """A `CPU ...` line after a latency table that starts no readable matrix (a byte flip, a cut)
    is one note: the parser once stepped back onto it for ever, holding gigabytes of notes."""
    text = ("Device: 0, NVIDIA H100 80GB HBM3, pciBusID: 18, pciDeviceID: 0, pciDomainID:0\n"
            "P2P=Disabled Latency Matrix (us)\n   GPU     0\n     0   2.10\n\n   CPU     0\nCPU x\n")
    src = tmp_path / "bwlat.txt"
    src.write_text(text)
    code = ("import sys; from orchestrator.facts.textparse.bench import parse_p2p_bwlat; "
            "r = parse_p2p_bwlat(open(sys.argv[1]).read()); print(len(r.notes), sorted(r.matrices))")
    proc = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    notes, keys = proc.stdout.split(" ", 1)
    assert int(notes) <= 2 and "latency" in keys
