"""Real outputs of issue 30 other than kernel logs (tests/fixtures/evidence/SOURCES.md "Added for issue
30"): nccl-tests as mpirun prints it, `--query-gpu` CSV without index or bus-id columns, `topo -m`
cells, InfiniBand details, NVLink listings where every link is inactive, and the hardware of
2025-26.  Each test states what a careful reader of the output states."""

from __future__ import annotations

from typing import Any

from orchestrator.facts.textparse import detect_kind, import_files, import_texts, read_path
from tests.support.evidence import evidence


def _facts(name: str) -> tuple[dict[str, Any], list[str]]:
    host = import_files([evidence(name)])
    assert not host.errors, host.errors
    return host.facts, host.notes


# -- nccl-tests as mpirun prints it ----------------------------------------------------------------


def test_tag_output_of_a_two_node_run() -> None:
    name = "nccl_all_reduce_tag_output_2x8_a100_efa_awsefaeks_01.txt"
    assert detect_kind(read_path(evidence(name))) == "nccl_tests"
    facts, notes = _facts(name)
    n = facts["nccl"]
    assert (n["version"], n["ranks"], n["avg_busbw_gbps"], n["out_of_bounds"]) == ("2.9.9", 16, 11.2432, 0)
    assert n["hosts"] == ["nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1"] and n["gpu_count"] is None
    assert {r["op"] for r in n["results"]} == {"all_reduce"}  # sum, root -1, count = size / 4 bytes
    last = n["results"][-1]
    assert (last["size_bytes"], last["busbw_gbps"], last["in_place"]) == (4294967296, 43.72, True)
    assert last["wrong"] is None  # the old `error` column printed 5e-07, a deviation, not a count
    assert "gpus" not in facts  # 16 ranks on two hosts are not this host's GPUs
    assert any("tag-output prefixes removed" in x for x in notes)


def test_tag_output_with_another_rank_interleaved() -> None:
    facts, _ = _facts("nccl_tag_output_p5_48xlarge_8x_h100_nvls_awsdoeks_01.txt")
    n = facts["nccl"]
    assert [(r["size_bytes"], r["busbw_gbps"], r["in_place"]) for r in n["results"]] == [
        (2147483648, 468.60, False), (2147483648, 468.62, True)]
    assert n["avg_busbw_gbps"] == 114.556 and n["results"][0]["op"] == "all_reduce"
    facts, _ = _facts("nccl_tag_output_socket_elided_karpenter_awsdoeks_01.txt")
    n = facts["nccl"]
    assert len(n["results"]) == 62 and n["avg_busbw_gbps"] == 0.733914 and n["out_of_bounds"] == 0


def test_in_place_not_checked_is_unknown_and_the_op_stays_unknown_where_columns_cannot_tell() -> None:
    facts, _ = _facts("nccl_alltoall_8x_h20_3e_inplace_na_nccltests314_01.txt")
    n = facts["nccl"]
    assert n["gpu_count"] == 8 and len(n["results"]) == 6
    assert {r["op"] for r in n["results"]} == {None}  # all_gather and alltoall print alike; no binary named
    ip = [r for r in n["results"] if r["in_place"]]
    assert [(r["busbw_gbps"], r["wrong"]) for r in ip] == [(15.85, None), (31.58, None), (61.96, None)]


def test_rows_of_two_interleaved_runs_without_a_header() -> None:
    facts, notes = _facts("nccl_all_reduce_two_runs_interleaved_no_header_nccltests182_01.txt")
    n = facts["nccl"]
    assert [r["size_bytes"] for r in n["results"] if not r["in_place"]] == [8, 16, 32, 64, 128, 256, 8, 512, 16,
                                                                              1024]
    assert {r["op"] for r in n["results"]} == {"all_reduce"}
    assert any("several runs' rows interleave" in x for x in notes)


# -- --query-gpu CSV whose columns do not start with index or name ----------------------------------


def test_csv_without_index_or_bus_id_rows_are_gpus_in_order() -> None:
    name = "smi_csv_7x_b300_driver_name_compute_cap_xe9780_01.txt"
    assert detect_kind(read_path(evidence(name))) == "smi_query_csv"
    facts, _ = _facts(name)
    g = facts["gpus"]
    assert g["count"] == 7 and [x["index"] for x in g["list"]] == list(range(7))
    assert {(x["model"], x["compute_capability"]) for x in g["list"]} == {("B300-SXM", "10.3")}
    assert g["driver_version"] == "610.57.04"


def test_csv_with_the_index_column_last() -> None:
    name = "smi_csv_titan_v_rtx5880_index_last_triton8070_01.txt"
    assert detect_kind(read_path(evidence(name))) == "smi_query_csv"
    facts, _ = _facts(name)
    g = facts["gpus"]
    assert [(x["index"], x["name"], x["compute_capability"]) for x in g["list"]] == [
        (0, "NVIDIA TITAN V", "7.0"), (1, "NVIDIA RTX 5880 Ada Generation", "8.9")]
    assert g["count"] == 2 and g["driver_version"] == "570.86.15"


def test_a_one_column_query_is_read() -> None:
    text = "$ nvidia-smi --query-gpu=compute_cap --format=csv\ncompute_cap\n8.9\n"  # huggingface/candle#733
    [gpu] = import_texts([("cc.csv", text)]).facts["gpus"]["list"]
    assert (gpu["index"], gpu["compute_capability"], gpu["name"]) == (0, "8.9", None)


# -- topo -m cells ----------------------------------------------------------------------------------


def test_numa_affinity_printed_as_a_list_of_ranges_is_kept() -> None:
    facts, _ = _facts("topo_gb200_4gpu_8nic_all_sys_numa_list_01.txt")
    gpus = [d for d in facts["topology"]["devices"] if d["kind"] == "gpu"]
    assert [(d["cpu_affinity"], d["numa"], d["numa_nodes"], d["gpu_numa_id"]) for d in gpus] == [
        ("0-71", None, "0,3-9,11-17", 2), ("0-71", None, "0,3-9,11-17", 10),
        ("72-143", None, "1,19-25,27-33", 18), ("72-143", None, "1,19-25,27-33", 26)]


def test_cpu_affinity_printed_as_a_list() -> None:
    facts, _ = _facts("topo_7x_b300_sxm6_no_nic_cpu_list_xe9780_01.txt")
    gpus = [d for d in facts["topology"]["devices"] if d["kind"] == "gpu"]
    assert [(d["cpu_affinity"], d["numa"]) for d in gpus] == [("0,2,4,6,8,10", 0)] * 3 + [
        ("1,3,5,7,9,11", 1)] * 4
    assert facts["gpus"]["count"] == 7


def test_tab_separated_rows_padded_with_double_tabs() -> None:
    facts, _ = _facts("topo_1x_tesla_p4_tabs_numa_na_hami99_01.txt")
    [gpu] = [d for d in facts["topology"]["devices"] if d["kind"] == "gpu"]
    assert (gpu["cpu_affinity"], gpu["numa"], gpu["gpu_numa_id"]) == ("0-7", None, None)
    assert gpu["unknown"]["numa_affinity"] == gpu["unknown"]["gpu_numa_id"] == "N/A in the source"


def test_an_empty_cpu_affinity_cell_does_not_pull_the_numa_node_into_it() -> None:
    from orchestrator.facts.textparse import parse_topo_matrix

    # the tab layout of the HAMi-99 output with GPU0's CPU Affinity cell empty (a cpuset that excludes
    # its socket): the terminal columns put "0" under NUMA Affinity
    m = parse_topo_matrix("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
                          "GPU0\t X \tNV4\t\t\t0\t\tN/A\nGPU1\tNV4\t X \t8-15\t1\t\tN/A\n")
    assert [(g.cpu_affinity, g.numa_affinity) for g in m.gpus] == [(None, 0), ("8-15", 1)]
    spaced = parse_topo_matrix("        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
                               "GPU0     X      NV4                     0               N/A\n"
                               "GPU1    NV4      X      8-15            1               N/A\n")
    assert [(g.cpu_affinity, g.numa_affinity) for g in spaced.gpus] == [(None, 0), ("8-15", 1)]


# -- NVLink listings: all inactive, redacted UUIDs ----------------------------------------------------


def test_a_redacted_uuid_is_unknown_and_inactive_links_are_listed() -> None:
    facts, notes = _facts("nvlink_s_v100_two_links_inactive_redacted_uuid_azhpcdiag73_01.txt")
    [gpu] = facts["gpus"]["list"]
    assert (gpu["index"], gpu["uuid"], gpu["unknown"]["uuid"]) == (3, None, "redacted in the source")
    [nv] = facts["nvlink"]["gpus"]
    assert (nv["links_total"], nv["links_up"], nv["inactive"]) == (6, 4, [3, 5])
    assert any("elision" in x for x in notes)


def test_a_verdict_on_the_gpu_line_and_a_listing_of_inactive_links() -> None:
    # the two forms as drivers print them (github.com/NVIDIA/NVSentinel issue 1481 names the A100 PCIe
    # case: every link down without a bridge); the second GPU's verdict stands on its header line
    text = ("GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-xxxx)\n" + "".join(f"\t Link {k}: <inactive>\n" for k in range(12))
            + "GPU 1: Quadro RTX 5000 (UUID: GPU-...) NVML: Unable to retrieve Nvlink information as all links "
              "are inActive\n")
    facts = import_texts([("nvlink.txt", text)]).facts
    g0, g1 = facts["nvlink"]["gpus"]
    assert (g0["links_total"], g0["links_up"], g0["inactive"]) == (12, 0, list(range(12)))
    assert (g1["index"], g1["links_up"], g1["links_total"]) == (1, 0, None)
    assert "all links are inActive" in g1["unknown"]["links_total"]
    assert [(x["uuid"], x["unknown"].get("uuid")) for x in facts["gpus"]["list"]] == [
        (None, "redacted in the source"), (None, "redacted in the source")]


def test_gb200_and_b300_nvlink5_links() -> None:
    facts, _ = _facts("nvlink_s_gb200_53gbps_elided_k8stestinfra371_01.txt")
    g0, g1 = facts["nvlink"]["gpus"]
    assert (g0["links_total"], g0["links_up"], {lk["speed_gbps"] for lk in g0["links"]}) == (18, 18, {53.125})
    assert g1["links_total"] is None and "partial listing" in g1["unknown"]["links_total"]
    facts, _ = _facts("nvlink_s_7x_b300_sxm6_53gbps_xe9780_01.txt")
    assert [(g["links_up"], g["links_total"]) for g in facts["nvlink"]["gpus"]] == [(18, 18)] * 7
    assert {g["model"] for g in facts["gpus"]["list"]} == {"B300-SXM"} and facts["gpus"]["count_at_least"] == 7


# -- InfiniBand details ------------------------------------------------------------------------------


def test_port_and_system_image_guids_and_the_hca_products() -> None:
    facts, notes = _facts("ibstat_11ca_cx8_mt4131_cx7_port_guid_xe9780_01.txt")
    devs = {d["name"]: d for d in facts["nic"]["devices"]}
    assert len(devs) == 11
    assert sorted(n for n, d in devs.items() if d["model"] == "ConnectX-8") == [
        "mlx5_0", "mlx5_1", "mlx5_10", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    cx8, cx7 = devs["mlx5_0"], devs["mlx5_2"]
    assert (cx8["hca_type"], cx8["fw_ver"], cx8["node_guid"], cx8["sys_image_guid"]) == (
        "MT4131", "40.46.5500", "7425:5403:0035:3ded", "7425:5403:0035:3ded")
    assert [(p["state"], p["phys_state"], p["rate_gbps"], p["port_guid"]) for p in cx8["ports"]] == [
        ("DOWN", "Disabled", 10.0, "7425:5403:0035:3ded")]
    assert (cx7["model"], cx7["ports"][0]["state"], cx7["ports"][0]["rate_gbps"]) == ("ConnectX-7", "ACTIVE", 100.0)
    assert any("command line: dell@dell:~$ ibstat" in x for x in notes)
    # a BlueField-3's two functions: one system image GUID, a port GUID each
    facts, notes = _facts("ibstat_bf3_b3220_mt41692_logical_down_fusee_01.txt")
    a, b = facts["nic"]["devices"]
    assert (a["model"], b["model"], a["sys_image_guid"], b["sys_image_guid"]) == (
        "BlueField-3", "BlueField-3", "c470:bd03:00b8:638a", "c470:bd03:00b8:638a")
    assert (a["ports"][0]["port_guid"], b["ports"][0]["port_guid"]) == ("c470:bd03:00b8:638a", "c470:bd03:00b8:638b")
    assert (a["ports"][0]["state"], a["ports"][0]["phys_state"]) == ("DOWN", "LinkUp")  # logical down, light on
    assert any("line 18" in x and "---- mlx5_1 ----" in x for x in notes)  # the poster's separator, named


def test_ibv_devinfo_mtus_and_a_trimmed_listing() -> None:
    from tests.facts.test_textparse_common import FIXTURES

    host = import_files([FIXTURES / "health_ibv_devinfo_deepep.txt"])
    ports = {d["name"]: d["ports"][0] for d in host.facts["nic"]["devices"]}
    assert {n: (p["active_mtu"], p["max_mtu"]) for n, p in ports.items()} == {
        "mlx5_12": (1024, 4096), "mlx5_2": (4096, 4096)}
    # vendor_part_id 41692 without a transport line (a grep of ibv_devinfo -v): still ibv_devinfo,
    # and the port state printed without its `port:` line is named, not given to a port
    facts, notes = _facts("ibv_devinfo_v_bf3_mt41692_grep_fusee_01.txt")
    assert [(d["name"], d["model"], d["board_id"], d["ports"]) for d in facts["nic"]["devices"]] == [
        ("mlx5_0", "BlueField-3", "MT_0000000965", []), ("mlx5_1", "BlueField-3", "MT_0000000965", [])]
    assert sum("printed without its port line" in x for x in notes) == 4


def test_an_hca_ibstat_could_not_stat_is_an_error_of_that_hca() -> None:
    facts, _ = _facts("ibstat_a100_ibpanic_mlx5_stat_failed_gpud_01.txt")
    devs = {d["name"]: d for d in facts["nic"]["devices"]}
    assert len(devs) == 9 and devs["mlx5_8"]["ports"] == []
    assert devs["mlx5_8"]["error"] == "ibstat could not read it (stat failed: No such file or directory)"
    assert all("error" not in d for n, d in devs.items() if n != "mlx5_8")
    # the poster's `...` values are unknown, never a GUID; the elision line is named
    facts, notes = _facts("ibstat_partial_elided_ibpanic_mlx5_8_gpud752_01.txt")
    m7, m8 = facts["nic"]["devices"]
    assert (m7["hca_type"], m7["fw_ver"], m7["node_guid"], m7["ports"][0]["port_guid"]) == (None, None, None, None)
    assert (m7["ports"][0]["state"], m7["ports"][0]["rate_gbps"]) == ("ACTIVE", 200.0)
    assert "error" in m8 and any("elision" in x for x in notes)
    # an ibstat run that stopped at the Accelerated Networking function, then one HCA by name, unindented
    facts, notes = _facts("ibstat_unindented_ibpanic_an0_ndv4_azhpcdiag59_01.txt")
    an0, ib0 = facts["nic"]["devices"]
    assert (an0["name"], an0["ports"], ib0["name"], ib0["model"]) == ("mlx5_an0", [], "mlx5_ib0", "ConnectX-6 VF")
    assert [(p["state"], p["phys_state"], p["rate_gbps"], p["port_guid"]) for p in ib0["ports"]] == [
        ("INIT", "LinkUp", 200.0, "0015:5dff:fd34:072b")]
    assert [x.split(": ", 2)[-1] for x in notes] == ["command line: ~$ ibstat", "command line: ~$ ibstat mlx5_ib0"]


def test_the_unreadable_hca_is_a_finding_of_that_host() -> None:
    from orchestrator.verdict.checks.base import HostView
    from orchestrator.verdict.checks.nic import device_unreadable
    from orchestrator.verdict.expectations import Expectations

    facts, _ = _facts("ibstat_unindented_ibpanic_an0_ndv4_azhpcdiag59_01.txt")
    view = HostView(name="ndv4", facts=facts, outcomes={}, expect=Expectations.from_mapping({}))
    [f] = list(device_unreadable(view))
    assert (f.id, f.subject, f.severity.value) == ("nic.device.unreadable", "mlx5_an0 (PCI function unknown)", "warn")


def test_ibstatus_of_the_same_host_fills_what_ibstat_could_not_read() -> None:
    """gpud's captures of one A100 host: ibstat stopped at mlx5_8, ibstatus read it (an Ethernet
    port); ibstatus's default GIDs carry the port GUIDs ibstat printed."""
    from orchestrator.verdict.checks.base import HostView
    from orchestrator.verdict.checks.nic import device_unreadable
    from orchestrator.verdict.expectations import Expectations

    stat = _facts("ibstat_a100_ibpanic_mlx5_stat_failed_gpud_01.txt")[0]["nic"]["devices"]
    status = _facts("ibstatus_a100_9ports_gpud_01.txt")[0]["nic"]["devices"]
    assert [d["ports"][0]["port_guid"] for d in stat[:8]] == [d["ports"][0]["port_guid"] for d in status[:8]]
    assert status[8]["ports"][0]["port_guid"] is None  # `default gid: unknown`
    host = import_files([evidence("ibstat_a100_ibpanic_mlx5_stat_failed_gpud_01.txt"),
                         evidence("ibstatus_a100_9ports_gpud_01.txt")])
    m8 = host.facts["nic"]["devices"][8]
    assert (m8["name"], m8["ports"][0]["state"], m8["ports"][0]["link_layer"]) == ("mlx5_8", "ACTIVE", "Ethernet")
    view = HostView(name="a100", facts=host.facts, outcomes={}, expect=Expectations.from_mapping({}))
    assert list(device_unreadable(view)) == []  # read after all, by ibstatus


# -- the hardware of 2025-26 -------------------------------------------------------------------------


def test_two_rtx_5090_without_p2p_and_a_p2p_matrix_without_its_mode() -> None:
    facts, _ = _facts("topo_2x_rtx5090_phb_tabs_club3090_1229_01.txt")
    gpus = [d for d in facts["topology"]["devices"] if d["kind"] == "gpu"]
    assert [(d["cpu_affinity"], d["numa"]) for d in gpus] == [("0-63", 0), ("0-63", 0)]
    assert facts["topology"]["matrix"][0][1] == "PHB"
    for name in ("topo_p2p_rw_2x_rtx5090_gns_club3090_1229_01.txt",
                 "topo_p2p_rw_2x_rtx5090_gns_spaces_club3090_1130_01.txt"):
        host = import_files([evidence(name)])
        assert not host.errors and host.facts["gpus"]["p2p"] == {}  # r, w, n, a or p: the text does not say
        assert any("without its mode" in x for x in host.notes), name
        # with its command line above it the same cells are the read matrix
        text = "$ nvidia-smi topo -p2p r\n" + read_path(evidence(name))
        assert import_texts([(name, text)]).facts["gpus"]["p2p"] == {"read": [["X", "GNS"], ["GNS", "X"]]}


def test_a_plain_lspci_of_a_gb200_tray_says_nothing_of_drivers() -> None:
    from orchestrator.verdict.checks.base import HostView
    from orchestrator.verdict.checks.pcie import check_gpu_count
    from orchestrator.verdict.expectations import Expectations

    facts, _ = _facts("lspci_gb200_grace_cx7_bf3_gpud_01.txt")
    pcie = facts["pcie"]
    assert pcie["gpus"] == ["0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"]
    assert len(pcie["nics"]) == 9  # 4 ConnectX-7, 2x2 BlueField-3 functions, the I210
    assert pcie["gpu_counts"]["driver_loaded"] is None and "plain lspci" in pcie["gpu_counts"]["unknown"]
    view = HostView(name="gb200", facts=facts, outcomes={}, expect=Expectations.from_mapping({}))
    assert list(check_gpu_count(view)) == []  # unknown, not "the NVIDIA driver is not loaded"
