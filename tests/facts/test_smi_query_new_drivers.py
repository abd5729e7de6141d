"""`nvidia-smi -q` and `-q -x` of 570-610+ drivers (issue 48 item 2): the renamed and added fields
of real outputs (tests/fixtures/evidence, provenance in SOURCES.md)."""

from __future__ import annotations

import pytest

from orchestrator.facts.textparse import import_files, parse_smi_query, parse_smi_xml
from tests.support.evidence import evidence


def test_570_reads_power_from_instantaneous_draw_and_the_new_fields() -> None:
    host = import_files([evidence("q_570_rtx5090_blackwell_addressing_hmm_simulator_01.txt")])
    assert not host.errors
    g = host.facts["gpus"]
    assert (g["driver_version"], g["cuda_driver_version"], g["count"]) == ("570.124.06", "12.8", 1)
    [x] = g["list"]
    assert (x["bus_id"], x["name"], x["power_w"], x["power_limit_w"], x["temperature_c"]) == (
        "0000:02:00.0", "NVIDIA GeForce RTX 5090", 23.78, 575.0, 25)
    assert (x["addressing_mode"], x["perf_state"], x["utilization_pct"], x["inforom_image"]) == (
        "hmm", "P8", 0, "G005.0000.98.01")
    assert (x["pcie"]["gen_current"], x["pcie"]["gen_max"], x["pcie"]["width_current"]) == (1, 5, 8)


def test_610_versions_come_from_kmd_and_umd_lines_never_the_deprecation_text() -> None:
    host = import_files([evidence("q_d_temperature_610_kmd_umd_deprecated_2gpu_01.txt")])
    g = host.facts["gpus"]
    assert (g["driver_version"], g["cuda_driver_version"], g["count"]) == ("610.57.04", "13.3", 2)
    assert [x["temperature_c"] for x in g["list"]] == [79, 29]
    assert "Deprecated" not in str(g)


@pytest.mark.parametrize(("head", "want"), [
    ("Driver Version : 610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]\n"
     "CUDA Version : 13.3 [Deprecated; will be removed in CUDA 14.0. Use CUDA UMD Version instead]\n",
     ("610.43.02", "13.3")),
    ("Driver Version : Deprecated, see \"KMD version\" instead\nKMD Version : 610.43.02\nCUDA UMD Version : 13.3\n",
     ("610.43.02", "13.3")),
    ("KMD Version : 616.10\nCUDA UMD Version : N/A\n", ("616.10", None)),
    ("Driver Version : 575.57.08\nCUDA Version : 12.9\n", ("575.57.08", "12.9")),
])
def test_every_banner_shape_of_the_q_header(head: str, want: tuple[str | None, str | None]) -> None:
    text = "==============NVSMI LOG==============\n" + head + "Attached GPUs : 0\n"
    q = parse_smi_query(text, "t")
    assert (q.driver_version, q.cuda_version) == want


@pytest.mark.parametrize(("tags", "want"), [
    ("<driver_version>580.105.08</driver_version>", ("580.105.08", None)),
    ("<driver_version>610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]</driver_version>"
     "<kmd_version>610.43.02</kmd_version><cuda_umd_version>13.3</cuda_umd_version>", ("610.43.02", "13.3")),
    ("<kmd_version>610.57.04</kmd_version><cuda_version>13.3 [Deprecated]</cuda_version>", ("610.57.04", "13.3")),
])
def test_xml_versions_of_580_and_610(tags: str, want: tuple[str | None, str | None]) -> None:
    q = parse_smi_xml(f"<nvidia_smi_log>{tags}<attached_gpus>0</attached_gpus></nvidia_smi_log>", "t")
    assert (q.driver_version, q.cuda_version) == want


def test_580_xml_of_a_vgpu_vm() -> None:
    host = import_files([evidence("qx_580_l40s_2q_vgpu_trimmed_01.txt")])
    g = host.facts["gpus"]
    assert (g["driver_version"], g["cuda_driver_version"], g["count"]) == ("580.105.08", None, 1)
    [x] = g["list"]
    assert (x["bus_id"], x["name"], x["memory_total_bytes"] >> 20, x["utilization_pct"]) == (
        "0000:00:07.0", "NVIDIA L40S-2Q", 2048, 7)
