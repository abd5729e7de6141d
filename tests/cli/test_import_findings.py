"""Imports are judged by the same checks as live runs: counts on a switch fabric, ECC and row
remaps from -q, P2P floors and dead peer access from p2pBandwidthLatencyTest, identities that a
redaction hides, the lspci downgrade message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from tests.support.evidence import EVIDENCE

P2P = EVIDENCE / "p2p_8x_h100_sxm_hgx_01.txt"
TOPO8 = EVIDENCE / "topo_h100_sxm_8gpu_8nic_pix_01.txt"
Q = EVIDENCE / "q_excerpt_gpu0_of_8_h100_sxm_hgx_01.txt"


def imported(capsys: pytest.CaptureFixture[str], tmp: Path, *args: str) -> dict:
    main(["import", *args, "--results", str(tmp / "runs"), "--format", "json"])
    return json.loads(capsys.readouterr().out)


def ids(fleet: dict) -> list[tuple[str, str, str]]:
    return sorted((f["id"], f["severity"], f["subject"]) for f in fleet["findings"])


def write(tmp: Path, name: str, text: str) -> str:
    p = tmp / name
    p.write_text(text)
    return str(p)


def test_six_nv18_gpus_are_a_count_question(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    six = str(EVIDENCE / "topo_h100_6gpu_visible_2nic_01.txt")
    fleet = imported(capsys, tmp_path, six)
    assert ids(fleet) == [("gpu.count.partial_fabric", "warn", "GPUs")]
    [f] = fleet["findings"]
    assert f["actual"] == 6 and f["expected"] == [2, 4, 8] and f["kind"] == "unknown"
    # with the ordered count written, the count check judges instead
    fleet = imported(capsys, tmp_path, six, "--expect", "gpu_count=8")
    assert [x[0] for x in ids(fleet)] == ["gpu.count.mismatch"]
    assert ids(imported(capsys, tmp_path, str(TOPO8))) == []  # 8 x NV18: a whole board


def test_ecc_and_row_remap_from_q(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = Q.read_text()
    volatile, aggregate = text.index("        Volatile"), text.index("        Aggregate")
    bad = (text[:volatile] + text[volatile:aggregate].replace("DRAM Uncorrectable            : 0",
                                                                "DRAM Uncorrectable            : 3")
           + text[aggregate:]).replace("Remapping Failure Occurred        : No", "Remapping Failure Occurred        : Yes")
    fleet = imported(capsys, tmp_path, write(tmp_path, "gpu07.q.txt", bad))
    got = ids(fleet)
    assert ("gpu.ecc.uncorrectable", "fail", "GPU0 (0000:18:00.0)") in got
    assert ("gpu.row_remap.failure", "fail", "GPU0 (0000:18:00.0)") in got
    assert ids(imported(capsys, tmp_path, str(Q))) == []  # the published excerpt is healthy


def test_p2p_benchmark_with_topology_is_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # healthy: ~365-393 GB/s against the 335 GB/s published H100 NVLink floor
    assert ids(imported(capsys, tmp_path, str(P2P), str(TOPO8), "--host", "h")) == []
    text = P2P.read_text()
    slow = text.replace("     2 376.67 393.28 2887.50", "     2 376.67 120.00 2887.50")
    fleet = imported(capsys, tmp_path, write(tmp_path, "p2p.txt", slow), str(TOPO8), "--host", "h")
    low = [f for f in fleet["findings"] if f["id"] == "p2p.bandwidth.low"]
    assert [f["subject"] for f in low] == ["GPU2->GPU1 (0000:4c:00.0 -> 0000:3b:00.0)"]
    assert low[0]["actual"] == 120.0 and low[0]["expected"] == 335.0
    dead = text.replace("Device=0 CAN Access Peer Device=1", "Device=0 CANNOT Access Peer Device=1")
    fleet = imported(capsys, tmp_path, write(tmp_path, "p2p-dead.txt", dead), str(TOPO8), "--host", "h")
    assert ("p2p.not_possible", "fail") in {(f["id"], f["severity"]) for f in fleet["findings"]}


def test_benchmarks_alone_never_invalid_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("p2p_8x_h100_sxm_hgx_01.txt", "nvbandwidth_8x_h100_sxm_multi_run_01.txt",
                 "nccl_all_reduce_2x8_h100_a3mega_01.txt"):
        fleet = imported(capsys, tmp_path, str(EVIDENCE / name))
        assert fleet["hosts"][0]["outcome"] == "ok", name
    assert "nccl" in fleet["hosts"][0]["facts"]


def test_two_redacted_pastes_raise_no_duplicate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)\n"
    fleet_dir = tmp_path / "fleet"
    for h in ("a", "b"):
        (fleet_dir / h).mkdir(parents=True)
        (fleet_dir / h / "L.txt").write_text(line)
    fleet = imported(capsys, tmp_path, "--fleet", str(fleet_dir))
    assert not [f for f in fleet["findings"] if f["id"].startswith("identity.")]
    real = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6f2a41b8-1c1e-4c2b-9d3e-0a1b2c3d4e5f)\n"
    for h in ("a", "b"):
        (fleet_dir / h / "L.txt").write_text(real)
    fleet = imported(capsys, tmp_path, "--fleet", str(fleet_dir))
    dup = [f for f in fleet["findings"] if f["id"].startswith("identity.")]
    assert dup and {f["id"] for f in dup} == {"identity.uuid.duplicate"}  # a real shared UUID still is one


def test_lspci_downgrade_claims_only_what_the_text_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = imported(capsys, tmp_path, str(EVIDENCE / "lspci_vvv_grep_lnk_2x_rtx3090_gen1_x8_downgraded_01.txt"))
    msgs = [f["message"] for f in fleet["findings"] if f["id"] == "pcie.link.downgraded"]
    assert msgs == ["PCI device 0000:01:00.0 link trained at Gen1 x8 (2.5 GT/s), the device supports Gen4 x16",
                    "PCI device 0000:03:00.0 link trained at Gen1 x8 (2.5 GT/s), the device supports Gen4 x16"]


def test_rtx3090_gen1_x8_from_query_gpu_is_downgraded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.facts.test_textparse_csv import HEADER, ROWS_UNITS

    fleet = imported(capsys, tmp_path, write(tmp_path, "ws.csv", "\n".join([HEADER, *ROWS_UNITS]) + "\n"))
    assert ids(fleet) == [("pcie.link.downgraded", "warn", "GPU0 (0000:01:00.0)"),
                          ("pcie.link.downgraded", "warn", "GPU1 (0000:03:00.0)")]
    assert "the GPU and its slot allow Gen4 x16" in fleet["findings"][0]["message"]


def test_six_gpu_nv18_box_is_an_outlier_among_eight_gpu_peers(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """topo -m only (no model names): the NV18 hosts are one family; the 6-GPU one is its outlier."""
    fleet_dir = tmp_path / "fleet"
    for h, src in (("a", TOPO8), ("b", TOPO8), ("c", TOPO8), ("six", EVIDENCE / "topo_h100_6gpu_visible_2nic_01.txt")):
        (fleet_dir / h).mkdir(parents=True)
        (fleet_dir / h / "topo.txt").write_text(src.read_text())
    fleet = imported(capsys, tmp_path, "--fleet", str(fleet_dir))
    outl = [f for f in fleet["findings"] if f["id"] == "topology.class.outlier"]
    assert [f["host"] for f in outl] == ["six"] and "3 of 4" in outl[0]["message"]
    assert outl[0]["expected"] == "8x?-NV18-8NIC-PIX"


def test_nv_links_with_p2p_status_not_ok_from_topo_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """topo -m (NV4 between GPU0 and GPU1) and topo -p2p n saying NS for that pair: the same
    nvlink.p2p_status_mismatch a live run raises."""
    topo = EVIDENCE / "topo_3x_rtx_a6000_nvlink_bridge_01.txt"
    p2p_n = ("$ nvidia-smi topo -p2p n\n \tGPU0\tGPU1\tGPU2\n GPU0\tX\tNS\tNS\n GPU1\tNS\tX\tNS\n GPU2\tNS\tNS\tX\n\n"
             "Legend:\n\n  X    = Self\n  OK   = Status Ok\n  NS   = Not supported\n")
    fleet = imported(capsys, tmp_path, str(topo), write(tmp_path, "p2p-n.txt", p2p_n), "--host", "ws")
    got = [(f["id"], f["subject"]) for f in fleet["findings"] if f["id"] == "nvlink.p2p_status_mismatch"]
    assert got == [("nvlink.p2p_status_mismatch", "GPU0<->GPU1 (bus id unknown / bus id unknown)")]
    assert ids(imported(capsys, tmp_path, str(topo), "--host", "ws2")) == []


def test_a_screen_gpu_without_a_handle_is_lost_in_nvidia_smis_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the default screen's "Unable to determine the device handle for GPU1": no NVML answered
    screen = str(EVIDENCE / "smi_screen_610_unable_handle_gpu1_rtx_pro_6000_01.txt")
    fleet = imported(capsys, tmp_path, screen)
    [lost] = [f for f in fleet["findings"] if f["id"] == "gpu.lost"]
    assert "0000:34:00.0" in lost["subject"]
    assert "NVML" not in lost["message"] and "cannot reach it" in lost["message"]
    assert lost["actual"] == "lost"
