"""The nvml and nvlink probes, run as `python3 -` subprocesses against the compiled fake NVML."""

from __future__ import annotations

import ctypes
import subprocess

import pytest

from orchestrator.engine.envelope import parse_envelope
from orchestrator.engine.payload import build_script
from orchestrator.simulate.fake_nvml import expand_machine, load_machine, machine_names
from tests.engine.test_nvml_helpers import PY, fake_lib, needs_gcc, run_probe
from tests.support.machines import nvml_gpu_bus_ids

pytestmark = needs_gcc

# A machine whose NVML calls hang answers without those GPUs, and says so: tests/engine/test_driver_wedged.py
ALL = [m for m in machine_names() if m != "dgx-h100--driver-not-loaded"
       and not any(g["hangs"] for g in expand_machine(load_machine(m))["gpus"])]
NAMES = {"dgx-h100": "NVIDIA H100 80GB HBM3", "dgx-a100": "NVIDIA A100-SXM4-80GB",
         "dgx1-v100": "Tesla V100-SXM2-32GB", "consumer-8x4090": "NVIDIA GeForce RTX 4090",
         "ws-4xa6000": "NVIDIA RTX A6000", "vm-2xa100": "NVIDIA A100 80GB PCIe",
         "lenovo-8xh100-cx7": "NVIDIA H100 80GB HBM3", "vm-1xh200": "NVIDIA H200"}
LINKS = {"dgx-h100": 18, "lenovo-8xh100-cx7": 18, "dgx-a100": 12, "dgx1-v100": 6, "ws-4xa6000": 4,
         "consumer-8x4090": 0, "vm-2xa100": 0, "vm-1xh200": 0}


def test_all_required_fixtures_exist():
    required = set(NAMES) | {
        "dgx-h100--links-down", "dgx-a100--gpu-lost", "dgx-h100--gpu-missing-driver", "dgx1-v100--old-driver",
        "consumer-8x4090--fan-zero", "dgx-a100--row-remap-pending", "dgx-h100--fabric-incomplete"}
    assert required <= set(ALL)


@pytest.mark.parametrize("machine", ALL)
@pytest.mark.parametrize("probe", ["nvml", "nvlink"])
def test_probe_runs_ok_on_every_fixture(probe, machine):
    env, _ = run_probe(probe, machine)
    assert env["status"] == "ok", env["errors"]
    assert env["errors"] == []
    want = nvml_gpu_bus_ids(machine)
    assert want and (machine != "dgx-h100--gpu-missing-driver" or "0000:ba:00.0" not in want)
    assert [g["bus_id"] for g in env["data"]["gpus"]] == want
    assert env["data"]["count"] == len(want)


@pytest.mark.parametrize("machine", list(NAMES))
def test_nvml_identity_and_fields(machine):
    data = run_probe("nvml", machine)[0]["data"]
    gpus = data["gpus"]
    assert {g["name"] for g in gpus} == {NAMES[machine]}
    uuids = [g["uuid"] for g in gpus]
    assert len(set(uuids)) == len(uuids) and all(u.startswith("GPU-") for u in uuids)
    spec = expand_machine(load_machine(machine))
    for g, s in zip(gpus, spec["gpus"]):
        assert g["uuid"] == s["uuid"]
        assert g["memory_total_bytes"] == s["mem_total"]
        assert g["pcie"]["gen_max"] == s["gen_max"] and g["pcie"]["width_current"] == s["width_cur"]
        assert g["temperature_c"] == s["temp"]
    assert data["driver_version"] == spec["driver_version"]
    n = len(gpus)
    assert len(data["levels"]) == n and all(data["levels"][i][i] == "X" for i in range(n))


def test_sxm_has_no_fans_and_consumer_fans_report():
    h100 = run_probe("nvml", "dgx-h100")[0]["data"]["gpus"][0]
    assert h100["fans"] is None and h100["unknown"]["fans"] == "NOT_SUPPORTED"
    rtx = run_probe("nvml", "consumer-8x4090")[0]["data"]["gpus"][0]
    assert rtx["fans"] == [{"index": 0, "speed_pct": 30}, {"index": 1, "speed_pct": 30}]
    assert rtx["serial"] is None and rtx["unknown"]["serial"] == "NOT_SUPPORTED"
    # R580 on a real H200 answered nvmlDeviceGetNumFans with SUCCESS/0: an empty list, no reason
    h200 = run_probe("nvml", "vm-1xh200")[0]["data"]["gpus"][0]
    assert h200["fans"] == [] and "fans" not in h200["unknown"]


def test_consumer_p2p_not_supported_and_no_nvlink():
    data = run_probe("nvml", "consumer-8x4090")[0]["data"]
    assert data["p2p"]["read"][0][1] == "NS" and data["p2p"]["nvlink"][3][5] == "NS"
    nvl = run_probe("nvlink", "consumer-8x4090")[0]["data"]
    assert all(g["links"] == [] and g["unknown"]["links"] == "NOT_SUPPORTED" for g in nvl["gpus"])


def test_fabric_info_versions():
    dgx = run_probe("nvml", "dgx-h100")[0]["data"]["gpus"][0]["fabric"]
    assert dgx["state"] == "completed" and dgx["health_summary"] is None  # driver 550: v2 struct only
    h200 = run_probe("nvml", "vm-1xh200")[0]["data"]["gpus"][0]
    assert h200["fabric"]["state"] == "not_supported" and h200["fabric"]["status"] == "SUCCESS"
    # Hopper: no NUMA node outside C2C platforms, and no dynamic page retirement (rows are remapped)
    assert h200["virtualization_mode"] == "passthrough" and h200["unknown"] == {
        "numa_node": "NOT_SUPPORTED", "retired_pages_pending": "NOT_SUPPORTED"}


def test_fabric_v3_struct_accepted_only_by_r580():
    class FabricV3(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_int),
                    ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint),
                    ("healthSummary", ctypes.c_ubyte)]
    for machine, want in (("dgx-h100", 25), ("vm-1xh200", 0)):  # 25 = ARGUMENT_VERSION_MISMATCH
        lib = ctypes.CDLL(str(fake_lib(machine)))
        assert lib.nvmlInit_v2() == 0
        h = ctypes.c_void_p()
        assert lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(0), ctypes.byref(h)) == 0
        info = FabricV3(version=ctypes.sizeof(FabricV3) | (3 << 24))
        assert lib.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info)) == want, machine
        assert lib.nvmlShutdown() == 0


def test_mig_instances_and_passthrough():
    gpus = run_probe("nvml", "vm-2xa100")[0]["data"]["gpus"]
    assert gpus[0]["mig"]["current"] is True and len(gpus[0]["mig"]["instances"]) == 2
    assert all(i["uuid"].startswith("MIG-") for i in gpus[0]["mig"]["instances"])
    assert gpus[0]["remapped_rows"] is None and gpus[0]["unknown"]["remapped_rows"] == "NOT_SUPPORTED"
    assert gpus[1]["mig"] == {"current": False, "pending": False, "instances": []}
    assert {g["virtualization_mode"] for g in gpus} == {"passthrough"}


def test_old_driver_falls_back_and_marks_fields_unknown():
    data = run_probe("nvml", "dgx1-v100--old-driver")[0]["data"]
    assert "nvmlDeviceGetPciInfo_v3" in data["missing_symbols"]
    g = data["gpus"][0]
    assert g["bus_id"] == "0000:06:00.0"  # from the legacy nvmlDeviceGetPciInfo_v2 layout
    for field in ("mig", "remapped_rows", "architecture", "fabric"):
        assert g[field] is None and g["unknown"][field] == "FUNCTION_NOT_FOUND"
    assert g["compute_capability"] == "7.0"
    nvl = run_probe("nvlink", "dgx1-v100--old-driver")[0]["data"]
    link = nvl["gpus"][0]["links"][0]
    assert nvl["gpus"][0]["link_count_source"] == "scan"  # field 91 unknown to R410
    assert link["remote_bus_id"] == "0000:07:00.0"  # legacy RemotePciInfo (v1)
    assert link["remote_type"] is None and link["unknown"]["remote_type"] == "FUNCTION_NOT_FOUND"


def test_old_driver_library_really_lacks_the_symbols():
    lib = ctypes.CDLL(str(fake_lib("dgx1-v100--old-driver")))
    assert not hasattr(lib, "nvmlDeviceGetPciInfo_v3")
    assert not hasattr(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2")
    assert hasattr(lib, "nvmlDeviceGetPciInfo_v2") and hasattr(lib, "nvmlInit_v2")
    new = ctypes.CDLL(str(fake_lib("dgx-h100")))
    assert hasattr(new, "nvmlDeviceGetPciInfo_v3") and hasattr(new, "nvmlDeviceGetGpuFabricInfoV")


def test_lost_gpu_fails_alone():
    data = run_probe("nvml", "dgx-a100--gpu-lost")[0]["data"]
    lost = data["gpus"][5]
    assert lost["lost"] is True and lost["bus_id"] == "0000:90:00.0"
    assert lost["name"] is None and lost["unknown"]["name"] == "GPU_IS_LOST"
    assert data["gpus"][4]["name"] == "NVIDIA A100-SXM4-80GB" and data["gpus"][4]["lost"] is False
    assert data["levels"][0][5] is None and data["levels"][0][4] == "SYS" and data["levels"][0][1] == "PXB"
    assert data["unknown"]["pairs"]["0-5"].endswith("GPU_IS_LOST")


def test_nvlink_links_enumerated_to_the_real_count():
    for machine, n in LINKS.items():
        for g in run_probe("nvlink", machine)[0]["data"]["gpus"]:
            assert g["link_count"] == n, machine
            assert len(g["links"]) == n
    h = run_probe("nvlink", "dgx-h100")[0]["data"]["gpus"][0]["links"]
    assert {lk["version"] for lk in h} == {"4.0"}
    assert {lk["remote_type"] for lk in h} == {"nvswitch"}
    assert [lk["remote_bus_id"] for lk in h].count("0000:05:00.0") == 5


def test_links_down_fixture_reports_two_inactive_links():
    gpus = run_probe("nvlink", "dgx-h100--links-down")[0]["data"]["gpus"]
    down = {g["bus_id"]: [lk["link"] for lk in g["links"] if lk["state"] == "down"] for g in gpus}
    assert down.pop("0000:3a:00.0") == [6, 13]
    assert all(v == [] for v in down.values())


@pytest.mark.parametrize("probe", ["nvml", "nvlink"])
def test_library_without_driver_is_unsupported_with_the_reason(probe):
    env, _ = run_probe(probe, "dgx-h100--driver-not-loaded")
    assert env["status"] == "unsupported"
    assert env["errors"] == ["nvmlInit failed: DRIVER_NOT_LOADED"]


@pytest.mark.parametrize("probe", ["nvml", "nvlink"])
def test_no_library_is_unsupported(probe, tmp_path):
    script = build_script(probe, {"lib": str(tmp_path / "libnvidia-ml.so.1")})
    proc = subprocess.run([PY, "-"], input=script, capture_output=True, timeout=30)
    env = parse_envelope(proc.stdout, probe)
    assert env.status == "unsupported"
    assert "cannot load" in env.errors[0]


def test_probe_timing_on_8_gpu_fixture(capsys):
    """Reported, not asserted (tests never assert on wall time)."""
    rows = []
    for probe in ("nvml", "nvlink"):
        for machine in ("dgx-h100", "dgx-a100"):
            env, wall = run_probe(probe, machine)
            rows.append(f"{probe:6s} {machine:10s} probe {env['duration_s'] * 1000:7.1f} ms  process {wall * 1000:7.1f} ms")
    with capsys.disabled():
        print("\n" + "\n".join(rows))
    assert len(rows) == 4
