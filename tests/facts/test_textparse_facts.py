"""Parsed text -> the facts sections live probes feed; the values the checks read come out right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.facts.textparse import import_files, import_texts, read_path
from tests.facts.test_textparse_common import FIXTURES
from tests.support.evidence import evidence


def imp(*names: str):
    paths = [evidence(n) if not (FIXTURES / n).exists() else FIXTURES / n for n in names]
    host = import_files(paths)
    assert host.errors == []
    json.dumps(host.facts)  # JSON-able like a live run's facts
    return host


def marks(section: dict) -> None:
    assert section["origin"] == "text" and section["source_files"]
    assert section["confidence"] in ("low", "normal")
    if section["confidence"] == "low":
        assert section["low_confidence_fields"]


def test_six_visible_gpus_count_and_topology():
    h = imp("topo_h100_6gpu_visible_2nic_01.txt")
    g, topo, nvl = h.facts["gpus"], h.facts["topology"], h.facts["nvlink"]
    assert g["count"] == 6 and g["count_sources"] == {"nvidia-smi topo -m": 6}
    assert g["order"] == [None] * 6 and "bus_id" in g["low_confidence_fields"]
    assert [d["cpu_affinity"] for d in g["list"]] == ["0-47,96-143"] * 3 + ["48-95,144-191"] * 3
    assert all(x["unknown"]["serial"].startswith("not in the imported text") for x in g["list"])
    # absent from the text is not a sensor answer: no NVML-style reason that a check would judge
    assert all(x["fans"] is None and x["fans_unknown"] is None and "fans" in x["unknown"] for x in g["list"])
    assert [d["name"] for d in topo["devices"]] == [f"GPU{k}" for k in range(6)] + ["NIC0", "NIC1"]
    assert topo["devices"][6]["label"] == "mlx5_0" and topo["matrix"][6][7] == "PIX"
    assert topo["source"][0][0] == "self" and topo["source"][0][1] == "text"
    assert nvl["nv"][0][5] == 18 and nvl["nv"][0][0] is None and nvl["pairs"] is None
    assert "gpus_unknown" in nvl
    # NV# hides the PCIe level: the NVML-style level matrix says unknown rather than guessing
    assert g["levels"][0][1] is None and g["levels"][0][0] == "X"
    assert h.outcomes == {"nvml": "ok", "nvlink": "ok"}
    for s in h.facts.values():
        marks(s)


def test_nvlink_inactive_facts():
    h = imp("nvlink_s_3x_rtx_a6000_inactive_01.txt")
    gpus = h.facts["nvlink"]["gpus"]
    assert [(x["index"], x["links_up"], x["links_total"]) for x in gpus] == [(0, 4, 4), (1, 4, 4), (2, 0, None)]
    assert gpus[2]["inactive"] is None and "all_inactive" not in gpus[2]  # null + reason, no key of its own
    assert "all links are inActive" in gpus[2]["unknown"]["links_total"]
    assert gpus[0]["links"][0]["state"] == "up" and gpus[0]["links"][0]["speed_gbps"] == 14.062
    assert gpus[0]["links"][0]["remote_bus_id"] is None and "remote_bus_id" in gpus[0]["links"][0]["unknown"]
    assert h.facts["gpus"]["list"][2]["uuid"] == "GPU-02c05ee3-bdb5-aac7-f9e8-a4c8f3f725b3"
    assert h.facts["gpus"]["list"][0]["model"] == "RTX-A6000"


def test_inactive_link_indices():
    h = imp("nvlink_s_no_header_two_inactive.txt")
    g = h.facts["nvlink"]["gpus"][0]
    assert (g["links_total"], g["links_up"], g["inactive"]) == (4, 2, [1, 3])
    assert g["index"] is None
    assert h.facts["gpus"]["list"] == []  # no index: no GPU record is invented


def test_nvlink_status_and_caps_merge():
    h = imp("nvlink_s_i0_h100_sxm_18links_01.txt", "nvlink_c_i0_h100_sxm_18links_01.txt")
    g = h.facts["nvlink"]["gpus"][0]
    assert (g["links_total"], g["links_up"], g["inactive"]) == (18, 18, [])
    assert all(lk["p2p_supported"] is True and lk["sysmem_access"] is True for lk in g["links"])
    assert h.facts["nvlink"]["links_up_total"] == 18


def test_nvlink_caps_only_claims_no_link_state():
    h = imp("nvlink_c_i0_h100_sxm_18links_01.txt")
    g = h.facts["nvlink"]["gpus"][0]
    assert (g["links_total"], g["links_up"], g["inactive"]) == (None, None, None) and len(g["links"]) == 18
    assert "18 links listed" in g["unknown"]["links_total"]
    assert all(lk["state"] is None and lk["p2p_supported"] is True for lk in g["links"])


def test_lspci_downgraded_facts():
    h = imp("lspci_vvv_grep_lnk_2x_rtx3090_gen1_x8_downgraded_01.txt")
    p = h.facts["pcie"]
    assert [(d["bdf"], d["gen_current"], d["gen_max"], d["width_current"], d["width_max"]) for d in p["downgraded"]] == [
        ("0000:01:00.0", 1, 4, 8, 16), ("0000:03:00.0", 1, 4, 8, 16)]
    assert p["downgraded"][0]["speed_current"] == "2.5 GT/s" and p["downgraded"][0]["speed_max"] == "16.0 GT/s"
    # grep of `lspci -s`: the listing is partial, so no device list or count is claimed
    assert p["gpus"] is None and p["gpu_counts"]["pci"] is None and "partial" in p["gpus_unknown"]
    assert h.outcomes == {"pcie": "ok"}


def test_lspci_vvvnn_switch_acs_uplink():
    h = imp("lspci_vvvnn_switch_gpu_nic_acs.txt")
    p = h.facts["pcie"]
    assert p["gpus"] == ["0000:c3:00.0"] and p["nics"] == ["0000:c4:00.0"] and p["gpu_counts"]["pci"] == 1
    assert p["gpu_counts"]["driver_loaded"] is True and p["gpu_counts"]["passthrough"] == []
    by = {d["bdf"]: d for d in p["devices"]}
    gpu = by["0000:c3:00.0"]
    assert gpu["chain"] == ["0000:c0:01.0", "0000:c1:00.0", "0000:c2:00.0"] and gpu["parent"] == "0000:c2:00.0"
    assert gpu["switch"] == "0000:c1:00.0" and gpu["port_type"] == "endpoint" and gpu["kind"] == "gpu"
    assert gpu["vendor"] == "0x10de" and gpu["class"] == "0x0302" and gpu["numa"] == 1
    assert gpu["link"]["width_current"] == 8 and gpu["link"]["width_max"] == 16
    # the device's link is the normalizer's record; the downgrade is judged once, in p["downgraded"]
    assert any(e["bdf"] == "0000:c3:00.0" for e in p["downgraded"])
    assert p["switches"] == [{"upstream": "0000:c1:00.0", "parent": "0000:c0:01.0", "vendor": "0x1000",
                              "device": "0xc030", "family": "Broadcom PEX", "levels": 1, "nested": [],
                              "downstream": ["0000:c2:00.0", "0000:c2:01.0"]}]
    assert p["acs"] == [{"port": "0000:c2:00.0", "port_role": "downstream_port", "enabled": ["RR", "CR"],
                         "gpus": ["0000:c3:00.0"], "peers": ["0000:c4:00.0"]}]
    assert by["0000:c4:00.0"]["switch"] == "0000:c1:00.0"
    assert {d["bdf"] for d in p["downgraded"]} == {"0000:c1:00.0", "0000:c3:00.0"}
    assert by["0000:c0:01.0"]["acs"]["redirect"] is False


def test_lspci_tree_only_reads_kinds_from_the_names():
    h = imp("lspci_tvnn_two_roots_switch_emptyslot.txt")
    p = h.facts["pcie"]
    assert p["gpus"] == ["0000:01:00.0", "0000:c3:00.0"] and p["nics"] == ["0000:c4:00.0"] and p["nvme"] == []
    # every root lspci drew, in the live normalizer's order (by host bridge), not the order drawn
    assert [r["host_bridge"] for r in p["tree"]] == ["pci0000:00", "pci0000:c0", "pci0000:ff"]
    by = {d["bdf"]: d for d in p["devices"]}
    assert by["0000:c3:00.0"]["vendor"] == "0x10de" and by["0000:c3:00.0"]["kind"] == "gpu"
    assert by["0000:c3:00.0"]["kind_source"] == "name" and by["0000:c3:00.0"]["class"] is None
    # an empty slot below the switch: a downstream port by its place in the tree (the rule the live
    # normalizer applies without root), the port type itself unread
    assert (by["0000:c2:02.0"]["kind"], by["0000:c2:02.0"]["role"]) == ("switch_port", "downstream_port")
    assert by["0000:c2:02.0"]["port_type"] is None and by["0000:c1:00.0"]["role"] == "upstream_port"


def test_lspci_tree_without_nvidia_says_none_and_without_names_unknown():
    text = read_path(FIXTURES / "lspci_tv_desktop_2x3090.txt").replace(
        "NVIDIA Corporation GA102 [GeForce RTX 3090]", "Advanced Micro Devices, Inc. [AMD/ATI] Navi 31 [Radeon RX 7900 XTX]")
    p = import_texts([("amd.txt", text)]).facts["pcie"]
    assert p["gpus"] == [] and "gpus_unknown" not in p  # no NVIDIA GPU: an answer, not "unknown"
    assert sorted(d["bdf"] for d in p["devices"] if d["kind"] == "other_gpu") == ["0000:01:00.0", "0000:03:00.0"]
    bare = "\n".join(line.split("  ")[0] for line in text.splitlines()) + "\n"  # lspci -t: no names
    p = import_texts([("t.txt", bare)]).facts["pcie"]
    assert p["gpus"] is None and "lspci -t without -v" in p["gpus_unknown"]


def test_dgx_station_list_mig_and_display():
    h = imp("L_dgx_station_a100_80gb_mig_7x1g10gb_display_gpu_01.txt")
    g = h.facts["gpus"]
    assert g["count"] == 4 and [x["index"] for x in g["list"] if x["display"]] == [2]
    gpu0 = g["list"][0]
    assert gpu0["mig"]["current"] is True and len(gpu0["mig"]["instances"]) == 7
    assert gpu0["mig"]["instances"][6]["name"] == "MIG 1g.10gb"
    assert g["list"][1]["mig"] is None and "mig" in g["list"][1]["unknown"]  # no MIG listed says nothing
    assert g["mig_enabled_any"] is True


def test_xml_gpu_facts():
    h = imp("smi_qx_2x_a100_mig_passthrough.xml")
    g = h.facts["gpus"]
    a, b = g["list"]
    assert g["order"] == ["0000:07:00.0", "0000:0f:00.0"] and g["count"] == 2
    assert g["driver_version"] == "550.90.07" and g["cuda_driver_version"] == "12.4"
    assert b["pcie"] == {"gen_current": 1, "gen_max": 4, "gen_gpu_max": None, "width_current": 8, "width_max": 16,
                         "speed_current": "2.5 GT/s", "speed_max": "16.0 GT/s", "gen_gpu_max_unknown": "not printed",
                         "gen_host_max": None, "gen_host_max_unknown": "not printed"}
    assert a["remapped_rows"] == {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}
    assert b["fans"] == [{"index": 0, "speed_pct": 0}] and b["temperature_c"] == 58
    assert a["fans"] is None and a["fans_unknown"] == "NOT_SUPPORTED" and a["unknown"]["fans"] == "N/A in the source"
    assert a["fabric"] is None and a["unknown"]["fabric"] == "N/A in the source"
    assert g["mig_enabled_any"] is True and g["virtualized"] is True
    assert a["model"] == "A100-SXM"


def test_merge_by_uuid_across_files():
    xml = read_path(FIXTURES / "smi_qx_2x_a100_mig_passthrough.xml")
    listing = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-66666666-7777-8888-9999-000000000000)\n"
               "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n")
    h = import_texts([("L.txt", listing), ("q.xml", xml)])
    got = [(x["index"], x["bus_id"]) for x in h.facts["gpus"]["list"]]
    # -L says the 0f:00.0 board is GPU 0: the UUID, not the -q order, decides
    assert got == [(0, "0000:0f:00.0"), (1, "0000:07:00.0")]


def test_topo_p2p_feeds_gpu_p2p_matrix():
    h = imp("topo_p2p_r_4gpu_one_cns.txt")
    assert h.facts["gpus"]["p2p"]["read"][0][3] == "CNS"


def test_raw_outputs_contract():
    from orchestrator.facts.textparse import RAW_COMMANDS, facts_from_raw_outputs

    assert RAW_COMMANDS == {"topo_matrix": "nvidia-smi topo -m", "smi_query_xml": "nvidia-smi -q -x",
                            "nvlink_status": "nvidia-smi nvlink -s", "lspci_tree": "lspci -tvnn",
                            "lspci_verbose": "lspci -vvvnn"}
    out = facts_from_raw_outputs({"smi_query_xml": read_path(FIXTURES / "smi_qx_2x_a100_mig_passthrough.xml").encode(),
                                  "topo_matrix": None, "lspci_verbose": b"\x00\x01junk"})
    assert out["mode"] == "raw" and list(out["facts"]) == ["gpus"]
    assert out["missing"] == ["nvidia-smi topo -m: no output (command missing, failed or timed out)"]
    assert out["errors"] == ["lspci -vvvnn:1: binary data (NUL byte), not command output"]
    with pytest.raises(ValueError, match="unknown raw output kind"):
        facts_from_raw_outputs({"bogus": b""})


def test_same_checks_run_on_imported_text():
    """Where the checks exist (after integration), imported text yields the live-run findings."""
    checks = pytest.importorskip("orchestrator.verdict.checks.gpu")
    from orchestrator.verdict.checks.base import HostView
    from orchestrator.verdict.expectations import Expectations

    h = imp("topo_h100_6gpu_visible_2nic_01.txt")
    view = HostView("h100-6", h.facts, h.outcomes, Expectations(gpu_count=8))
    ids = [f.id for f in checks.check_count(view)]
    assert "gpu.count.mismatch" in ids
    h2 = imp("nvlink_s_no_header_two_inactive.txt")
    view2 = HostView("links", h2.facts, h2.outcomes, Expectations(nvlink_links_per_gpu=4))
    assert "nvlink.link.down" in [f.id for f in checks.check_nvlink_links(view2)]


def test_import_reports_per_file_results(tmp_path: Path):
    bad = tmp_path / "bad.txt"
    bad.write_text("nothing useful\n")
    h = import_files([FIXTURES / "topo_legacy_soc_4gpu_mlx4.txt", bad, tmp_path / "absent.txt"])
    assert [f.ok for f in h.files] == [False, True, False]
    assert any(e.startswith(f"{tmp_path / 'absent.txt'}: no such text output file") for e in h.errors)
    assert any(e.startswith(f"{bad}:1: not a recognised") for e in h.errors)
    assert h.facts["topology"]["legend_style"] == "switch"


def test_import_fleet_directory_and_host_records(tmp_path: Path):
    import os
    import subprocess
    import sys

    from orchestrator.facts.textparse import import_fleet, summary_lines

    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu01" / "topo.txt").write_bytes((FIXTURES / "h200_real_topo_m.txt").read_bytes())
    (tmp_path / "gpu01" / "q.xml").write_bytes((FIXTURES / "h200_real_q_x.xml").read_bytes())
    (tmp_path / "gpu02.nvlink.txt").write_bytes((FIXTURES / "nvlink_s_no_header_two_inactive.txt").read_bytes())
    (tmp_path / "gpu03.junk").write_bytes(b"\x00\x01\x02")
    (tmp_path / ".hidden").write_text("x")
    hosts = import_fleet(tmp_path)
    assert sorted(hosts) == ["gpu01", "gpu02", "gpu03"]
    # The host records `probe import --fleet` stores for show/diff/report.
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "orchestrator", "import", "--fleet", str(tmp_path), "--results",
                          str(tmp_path.parent / "runs"), "--format", "json"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(root)), timeout=120)
    records = {h["name"]: h for h in json.loads(out.stdout)["hosts"]}
    r1, r3 = records["gpu01"], records["gpu03"]
    assert r1["outcome"] == "ok" and r1["probes"]["nvml"]["probe_version"] == "text"
    assert r1["facts"]["gpus"]["list"][0]["bus_id"] == "0000:00:06.0"
    assert r3["outcome"] == "invalid_output" and "gpu03.junk (unreadable)" in r3["reason"] and r3["facts"] == {}
    # the file's own reason is said once, in the import's file list (stderr beside a machine format)
    assert out.stderr.count("binary data") == 1 and "binary data" not in out.stdout
    lines = summary_lines(hosts["gpu01"])
    assert any(line.endswith(": topo_matrix") for line in lines)
    assert all(line.isprintable() for line in lines)


def test_same_pcie_checks_run_on_imported_lspci_text():
    """Where the PCIe checks exist (after integration): a `(downgraded)` LnkSta and ACS redirect
    above a GPU give the live-run findings, and a GPU bound to nvidia is not 'driver missing'."""
    checks = pytest.importorskip("orchestrator.verdict.checks.pcie")
    from orchestrator.verdict.checks.base import HostView
    from orchestrator.verdict.expectations import Expectations

    def ids(*names: str) -> list[str]:
        h = imp(*names)
        view = HostView("h", h.facts, h.outcomes, Expectations())
        return [f.id for chk in checks.CHECKS for f in chk(view)]

    assert ids("lspci_vvv_grep_lnk_2x_rtx3090_gen1_x8_downgraded_01.txt").count("pcie.link.downgraded") == 2
    found = ids("lspci_vvvnn_switch_gpu_nic_acs.txt")
    assert "pcie.acs.enabled" in found and "pcie.link.downgraded" in found
    assert "gpu.count.pci_vs_driver" not in found
