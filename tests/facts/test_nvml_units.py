"""Pure parts: bus-id and cpulist helpers, gpus normalization, fixture expansion."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.facts.normalize import gpus as norm_gpus
from orchestrator.simulate import fake_nvml

ROOT = Path(__file__).resolve().parents[2]


def _probe_lib() -> dict:
    """The probe binding module's namespace (stdlib-only code, exec'd as the prelude would)."""
    ns: dict = {"Unsupported": RuntimeError}
    exec(compile((ROOT / "probes" / "_nvml.py").read_text(), "_nvml.py", "exec"), ns)
    return ns


@pytest.mark.parametrize("text,want", [
    ("00000000:18:00.0", "0000:18:00.0"), ("0000:2A:00.0", "0000:2a:00.0"), ("18:00.0", "0000:18:00.0"),
    ("00000001:C4:1F.3", "0001:c4:1f.3"), ("", None), ("garbage", None), ("\x01\x02", None)])
def test_bus_id_normalization_probe_and_controller_agree(text, want):
    lib = _probe_lib()
    assert lib["normalize_bus_id"](text) == want
    assert norm_gpus.bus_id(text) == want


def test_cpulist_from_mask_words():
    lib = _probe_lib()
    words = [(1 << 20) - 1 | (((1 << 20) - 1) << 40), 0]
    assert lib["cpulist"](words, 64) == "0-19,40-59"
    assert lib["cpulist"]([0b1011], 64) == "0-1,3"
    assert lib["cpulist"]([0, 1], 64) == "64"


def test_struct_layouts_match_the_reference():
    import ctypes
    lib = _probe_lib()
    assert ctypes.sizeof(lib["PciInfo"]) == 68
    assert lib["PciInfo"].busId.offset == 36
    assert ctypes.sizeof(lib["MemoryV2"]) == 40 and lib["MEMORY_V2_VERSION"] == 0x02000028
    assert ctypes.sizeof(lib["FabricInfoV3"]) == 40 and lib["FABRIC_V3_VERSION"] == 0x03000028
    assert ctypes.sizeof(lib["FabricInfoV1"]) == 28
    assert ctypes.sizeof(lib["FieldValue"]) == 40 and lib["FieldValue"].value.offset == 32


def test_normalize_keeps_reasons_and_never_guesses():
    raw = {"driver_version": "550.1", "count": 1, "unknown": {"nvml_version": "NO_PERMISSION"},
           "gpus": [{"index": 0, "bus_id": "00000000:18:00.0", "name": "NVIDIA H100 80GB HBM3",
                     "uuid": None, "fans": None, "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 8,
                                                          "width_max": 16, "gen_gpu_max": None,
                                                          "unknown": {"gen_gpu_max": "FUNCTION_NOT_FOUND"}},
                     "unknown": {"uuid": "NO_PERMISSION", "fans": "NOT_SUPPORTED", "mig": "NOT_SUPPORTED"},
                     "lost": False}],
           "levels": [["X"]], "p2p": {"read": [["X"]]}}
    out = norm_gpus.normalize(raw)
    g = out["list"][0]
    assert out["nvml_version"] is None and out["nvml_version_unknown"] == "NO_PERMISSION"
    assert g["bus_id"] == "0000:18:00.0" and g["model"] == "H100-SXM"
    assert g["uuid"] is None and g["uuid_unknown"] == "NO_PERMISSION"
    assert g["fans"] is None and g["fans_unknown"] == "NOT_SUPPORTED"
    assert g["mig"] is None and g["mig_unknown"] == "NOT_SUPPORTED"
    assert g["pcie"]["speed_current"] == "32.0 GT/s" and g["pcie"]["gen_gpu_max_unknown"] == "FUNCTION_NOT_FOUND"
    assert out["p2p"]["write"] == [[None]] and out["order"] == ["0000:18:00.0"]


def test_normalize_survives_garbage():
    out = norm_gpus.normalize({"gpus": ["x", {"index": 0, "pcie": None, "mig": "weird"}], "levels": "no"})
    assert len(out["list"]) == 1 and out["list"][0]["bus_id"] is None
    assert out["levels"] == [[None]]


def test_expand_machine_dgx1_link_budget_and_p2p():
    t = fake_nvml.expand_machine(fake_nvml.load_machine("dgx1-v100"))
    assert [len(x) for x in t["links"]] == [6] * 8
    assert t["p2p"][0][5][2] == fake_nvml.P2P["NS"] and t["p2p"][0][3][2] == fake_nvml.P2P["OK"]
    assert t["topo"][0][1] == fake_nvml.LEVELS["PIX"] and t["topo"][0][2] == fake_nvml.LEVELS["PHB"]


def test_fault_variants_inherit_and_override():
    t = fake_nvml.expand_machine(fake_nvml.load_machine("dgx-h100--gpu-missing-driver"))
    assert len(t["gpus"]) == 7 and "0000:ba:00.0" not in [g["bus_id"] for g in t["gpus"]]
    old = fake_nvml.expand_machine(fake_nvml.load_machine("dgx1-v100--old-driver"))
    assert old["driver_branch"] == 410


def test_unknown_fixture_and_bad_override_are_clear_errors():
    with pytest.raises(fake_nvml.FixtureError, match="no NVML fixture 'nope'; known: "):
        fake_nvml.load_machine("nope")
    spec = fake_nvml.load_machine("dgx-h100")
    spec["gpu_overrides"] = {"0000:99:00.0": {"lost": True}}
    with pytest.raises(fake_nvml.FixtureError, match=r"0000:99:00\.0"):
        fake_nvml.expand_machine(spec)


def test_seed_changes_identities_only():
    a = fake_nvml.expand_machine(fake_nvml.load_machine("dgx-a100"), seed="a")
    b = fake_nvml.expand_machine(fake_nvml.load_machine("dgx-a100"), seed="b")
    assert a["gpus"][0]["uuid"] != b["gpus"][0]["uuid"] and a["gpus"][0]["serial"] != b["gpus"][0]["serial"]
    assert a["topo"] == b["topo"] and a["links"] == b["links"]


def test_variant_without_nvml_file_is_its_base_with_own_identities():
    spec = fake_nvml.load_machine("dgx-a100--p2p-disabled")
    assert spec["machine"] == "dgx-a100--p2p-disabled"
    a = fake_nvml.expand_machine(spec)
    b = fake_nvml.expand_machine(fake_nvml.load_machine("dgx-a100"))
    assert a["links"] == b["links"] and a["gpus"][0]["uuid"] != b["gpus"][0]["uuid"]


def test_gen1x8_variant_matches_the_pcie_fault():
    t = fake_nvml.expand_machine(fake_nvml.load_machine("dgx-h100--gpu-gen1x8"))
    g = next(g for g in t["gpus"] if g["bus_id"] == "0000:3a:00.0")
    assert (g["gen_cur"], g["width_cur"], g["gen_max"], g["width_max"]) == (1, 8, 5, 16)
