"""The fixture builder writes trees that look like a real host's sysfs/proc/dev to the probe."""

from __future__ import annotations

import ast
import os
import struct
from pathlib import Path

import pytest

from orchestrator.simulate import FixtureError, build_machine, list_machines, load_description

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def h100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_machine("dgx-h100", tmp_path_factory.mktemp("b") / "dgx-h100")


def test_bus_links_are_relative_and_resolve_to_the_upstream_chain(h100: Path) -> None:
    link = h100 / "sys/bus/pci/devices/0000:18:00.0"
    assert link.is_symlink() and not os.readlink(link).startswith("/")
    real = Path(os.path.realpath(link))
    assert real.relative_to(h100 / "sys/devices").parts == (
        "pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0")
    assert os.path.basename(os.readlink(real / "driver")) == "nvidia"
    assert (real / "driver").resolve() == (h100 / "sys/bus/pci/drivers/nvidia").resolve()
    assert (real / "iommu_group").resolve().parent == (h100 / "sys/kernel/iommu_groups").resolve()


def test_attributes_in_kernel_format(h100: Path) -> None:
    d = h100 / "sys/bus/pci/devices/0000:18:00.0"
    assert (d / "vendor").read_text() == "0x10de\n" and (d / "device").read_text() == "0x2330\n"
    assert (d / "class").read_text() == "0x030200\n"
    assert (d / "current_link_speed").read_text() == "32.0 GT/s PCIe\n"
    assert (d / "max_link_width").read_text() == "16\n" and (d / "numa_node").read_text() == "0\n"
    empty = h100 / "sys/bus/pci/devices/0000:39:02.0"
    assert (empty / "current_link_width").read_text() == "0\n"
    nvs = h100 / "sys/bus/pci/devices/0000:05:00.0"
    assert (nvs / "class").read_text() == "0x068000\n"


def test_config_space_bytes(h100: Path) -> None:
    cfg = (h100 / "sys/bus/pci/devices/0000:17:00.0/config").read_bytes()
    assert len(cfg) == 4096
    vendor, device = struct.unpack_from("<HH", cfg, 0)
    assert (vendor, device) == (0x1000, 0xC030) and cfg[0x0E] & 0x7F == 1 and cfg[0x19] == 0x18
    # walk the capability list to the PCIe capability: a downstream port, Gen5 x16 cap and status
    ptr = cfg[0x34]
    while cfg[ptr] != 0x10:
        ptr = cfg[ptr + 1]
    flags, = struct.unpack_from("<H", cfg, ptr + 2)
    lnkcap, = struct.unpack_from("<I", cfg, ptr + 0x0C)
    lnksta, = struct.unpack_from("<H", cfg, ptr + 0x12)
    assert (flags >> 4) & 0xF == 6
    assert (lnkcap & 0xF, (lnkcap >> 4) & 0x3F) == (5, 16) and (lnksta & 0xF, (lnksta >> 4) & 0x3F) == (5, 16)
    hdr, cap, ctl = struct.unpack_from("<IHH", cfg, 0x148)
    assert hdr & 0xFFFF == 0x0D and cap & 0x04 and ctl == 0  # ACS capable of RR, not enabled


def test_proc_and_dev(h100: Path) -> None:
    info = (h100 / "proc/driver/nvidia/gpus/0000:db:00.0/information").read_text()
    assert "Bus Location: \t 0000:db:00.0" in info and "Device Minor: \t 7" in info
    assert "NVIDIA H100 80GB HBM3" in info and "GPU UUID: \t GPU-" in info
    assert sorted(p.name for p in (h100 / "dev").iterdir() if p.name[6:].isdigit()) == [f"nvidia{i}" for i in range(8)]
    assert len(list((h100 / "dev").glob("nvidia-nvswitch*"))) == 4
    names = {p.name: os.path.basename(os.path.realpath(p / "device")) for p in (h100 / "sys/class/infiniband").iterdir()}
    assert names["mlx5_0"] == "0000:19:00.0" and names["mlx5_7"] == "0000:dc:00.0"


def test_variants_inherit_and_change(tmp_path: Path) -> None:
    nonroot = build_machine("dgx-h100--nonroot", tmp_path / "nr")
    assert len((nonroot / "sys/bus/pci/devices/0000:18:00.0/config").read_bytes()) == 64
    missing = build_machine("dgx-h100--gpu-missing-driver", tmp_path / "md")
    assert not (missing / "proc/driver/nvidia/gpus/0000:ba:00.0").exists()
    assert not (missing / "sys/bus/pci/devices/0000:ba:00.0/driver").exists()
    assert len(list((missing / "proc/driver/nvidia/gpus").iterdir())) == 7
    moved = build_machine("ws-4xa6000--nic-shared-switch", tmp_path / "mv")
    assert not (moved / "sys/bus/pci/devices/0000:66:00.0").exists()
    chain = Path(os.path.realpath(moved / "sys/bus/pci/devices/0000:b4:00.0")).relative_to(moved / "sys/devices").parts
    assert chain == ("pci0000:b0", "0000:b0:02.0", "0000:b1:00.0", "0000:b2:01.0", "0000:b4:00.0")
    vm = build_machine("vm-2xa100", tmp_path / "vm")
    assert len((vm / "sys/bus/pci/devices/0000:00:05.0/config").read_bytes()) == 256
    assert not (vm / "sys/kernel/iommu_groups").exists()
    assert (vm / "sys/bus/pci/devices/0000:00:05.0/numa_node").read_text() == "-1\n"


def test_faults_of_other_layers_build_their_base_machine(tmp_path: Path) -> None:
    desc = load_description("dgx-h100--links-down")  # an NVML-layer fault: same PCIe bus as dgx-h100
    assert desc["name"] == "dgx-h100--links-down" and desc["levels"] == load_description("dgx-h100")["levels"]
    root = build_machine("dgx-h100--links-down", tmp_path / "ld")
    assert (root / "proc/sys/kernel/hostname").read_text() == "dgx-h100--links-down\n"
    assert "dgx-h100--links-down" not in list_machines()
    with pytest.raises(FixtureError, match="unknown fixture machine"):
        load_description("nosuch--links-down")
    old = build_machine("dgx1-v100--old-driver", tmp_path / "od")
    assert " 410.129 " in (old / "proc/driver/nvidia/version").read_text()
    unloaded = build_machine("dgx-h100--driver-not-loaded", tmp_path / "nl")
    assert not (unloaded / "proc/driver/nvidia").exists()
    assert not (unloaded / "sys/bus/pci/devices/0000:18:00.0/driver").exists()


def test_every_description_builds_and_declares_its_expectations(tmp_path: Path) -> None:
    for name in list_machines():
        desc = load_description(name)
        assert "levels" in desc and "findings" in desc, name
        assert desc["description"], name
        build_machine(name, tmp_path / name)


def test_bad_descriptions_get_one_clear_message(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match=r"unknown fixture machine 'nope'; known: .*dgx-h100"):
        load_description("nope")
    with pytest.raises(FixtureError, match="unknown type 'gpu9000'"):
        build_machine({"roots": [{"bus": "pci0000:00", "devices": [{"bdf": "0000:00:01.0", "type": "gpu9000"}]}]},
                      tmp_path / "t")
    with pytest.raises(FixtureError, match=r"no device 0000:ee:00\.0"):
        load_description({"base": "dgx-h100", "patch": [{"bdf": "0000:ee:00.0", "set": {}}]})
    with pytest.raises(FixtureError, match="is not a bus id"):
        build_machine({"roots": [{"bus": "pci0000:00", "devices": [{"bdf": "0000:100:01.0", "type": "intel-rp5"}]}]},
                      tmp_path / "u")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(FixtureError, match="not empty"):
        build_machine("dgx-h100", tmp_path / "full")


def test_probe_source_stays_python36_compatible() -> None:
    source = (REPO / "probes" / "pcie.py").read_text()
    ast.parse(source, feature_version=(3, 6))
    assert "import yaml" not in source and "from orchestrator" not in source
