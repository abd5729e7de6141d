"""Real outputs captured on the project's lent H200 machine (driver 580.159.04, a pass-through VM)
next to what nvidia-ml-py said on the same machine in the same minute:
name NVIDIA H200, UUID GPU-ef8d2cd4-..., VBIOS 96.00.A5.00.1A, serial 1653824018361, bus id
00000000:00:06.0, PCIe gen 5/5 x16/x16, MIG [0, 0], virtualization mode 1 (PASSTHROUGH), 37 C,
NVLink state NOT_SUPPORTED (and `nvidia-smi nvlink -s/-c` printed nothing)."""

from __future__ import annotations

from orchestrator.facts.textparse import (
    detect_kind,
    import_files,
    parse_topo_matrix,
    parse_topo_p2p,
    read_path,
)
from tests.facts.test_textparse_common import FIXTURES

NVML = {"name": "NVIDIA H200", "uuid": "GPU-ef8d2cd4-1391-9b4f-cd87-3551626b6341", "vbios": "96.00.A5.00.1A",
        "inforom_image": "G520.0282.02.02",
        "serial": "1653824018361", "bus_id": "0000:00:06.0", "virtualization_mode": "passthrough",
        "temperature_c": 37}


def f(name: str):
    return FIXTURES / f"h200_real_{name}"


def test_every_capture_is_recognised():
    kinds = {"topo_m.txt": "topo_matrix", "topo_p2p_r.txt": "topo_p2p", "topo_c_0.txt": "topo_cpu",
             "L.txt": "smi_list", "q.txt": "smi_query", "q_x.xml": "smi_query_xml"}
    for name, kind in kinds.items():
        assert detect_kind(read_path(f(name))) == kind, name


def test_real_escape_bytes_in_single_gpu_topo():
    text = read_path(f("topo_m.txt"))
    assert "\x1b[4m" in text
    m = parse_topo_matrix(text)
    assert [d.label for d in m.devices] == ["GPU0"] and m.matrix == [["X"]]
    g = m.gpus[0]
    assert (g.cpu_affinity, g.numa_affinity, g.gpu_numa_id) == ("0-15", 0, None)
    assert m.notes == []
    p = parse_topo_p2p(read_path(f("topo_p2p_r.txt")))
    assert p.labels == ["GPU0"] and p.matrix == [["X"]] and p.legend["OK"] == "Status Ok"


def test_text_and_xml_agree_with_nvml():
    for src in ("q.txt", "q_x.xml"):
        g = import_files([f(src)]).facts["gpus"]
        gpu = g["list"][0]
        assert g["count"] == 1 and g["driver_version"] == "580.159.04"
        for key, want in NVML.items():
            assert gpu[key] == want, (src, key)
        assert gpu["pcie"]["gen_current"] == gpu["pcie"]["gen_max"] == 5
        assert gpu["pcie"]["width_current"] == gpu["pcie"]["width_max"] == 16
        assert gpu["mig"]["current"] is False and gpu["mig"]["pending"] is False
        assert gpu["fans"] is None and gpu["fans_unknown"] == "NOT_SUPPORTED"
    a = import_files([f("q.txt")]).facts["gpus"]["list"][0]
    b = import_files([f("q_x.xml")]).facts["gpus"]["list"][0]
    # the two captures were a second apart: only the live power reading may differ
    assert {k for k in a if a[k] != b[k]} <= {"power_w"}


def test_merged_host_view():
    h = import_files([f("topo_m.txt"), f("q_x.xml"), f("L.txt"), f("topo_c_0.txt"), f("topo_p2p_r.txt")])
    assert h.errors == []
    g = h.facts["gpus"]["list"][0]
    assert g["bus_id"] == "0000:00:06.0" and g["cpu_affinity"] == "0-15"
    assert h.facts["topology"]["devices"][0]["bus_id"] == "0000:00:06.0"
    assert h.facts["topology"]["nearest_gpus_by_cpu"] == {"0": [0]}
    assert h.facts["gpus"]["virtualized"] is True
    assert "nvlink" not in h.facts  # no NV# and no nvlink text: nothing claimed about NVLink
