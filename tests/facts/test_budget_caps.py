"""The per-host budget (facts/normalize/budget.py) on the lists inside each element of a list: a
PCI device's network ports, RDMA ports and path entries.  Cut only where an element holds more
than the cap, the rest handed on as they are (the same objects), one note per rule."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.facts.normalize.budget import MAX_GPUS, MAX_PORTS, bound


def _device(i: int, ports: int = 2) -> dict[str, Any]:
    return {"bdf": f"0000:{i:02x}:00.0", "netdevs": [f"eth{k}" for k in range(ports)],
            "rdma": ["mlx5_0"], "path": ["pci0000:00", f"0000:{i:02x}:00.0"]}


def test_devices_within_the_caps_are_handed_on_untouched() -> None:
    data = {"devices": [_device(i) for i in range(40)], "nvidia": {"gpus": []}}
    out, notes = bound("pcie", data)
    assert notes == [] and out is data and out["devices"] is data["devices"]


def test_one_device_past_a_cap_is_cut_and_noted_and_the_others_stay_the_same_objects() -> None:
    devices = [_device(i) for i in range(40)]
    devices[17] = {**_device(17, ports=MAX_PORTS + 5), "path": ["p"] * (MAX_PORTS + 1)}
    data = {"devices": devices}
    out, notes = bound("pcie", data)
    assert len(out["devices"][17]["netdevs"]) == MAX_PORTS and len(out["devices"][17]["path"]) == MAX_PORTS
    assert all(out["devices"][i] is devices[i] for i in range(40) if i != 17)
    assert len(devices[17]["netdevs"]) == MAX_PORTS + 5  # the input is not changed
    assert notes == [f"pcie: {MAX_PORTS + 5} network ports of a device reported, more than the {MAX_PORTS} a host "
                     f"is judged on; judged on the first {MAX_PORTS}",
                     f"pcie: {MAX_PORTS + 1} path entries of a device reported, more than the {MAX_PORTS} a host "
                     f"is judged on; judged on the first {MAX_PORTS}"]


def test_elements_of_another_shape_are_passed_over() -> None:
    devices: list[Any] = ["not a device", None, {"netdevs": "eth0"}, {"netdevs": ["e"] * (MAX_PORTS + 1)}]
    out, notes = bound("pcie", {"devices": devices})
    assert out["devices"][:3] == devices[:3] and len(out["devices"][3]["netdevs"]) == MAX_PORTS and len(notes) == 1


def _function(i: int, kind: str) -> dict[str, Any]:
    """A PCI function of one kind by its ids: an NVIDIA 3D controller, a Mellanox NIC, a bridge."""
    vendor, cls = {"gpu": ("0x10de", "0x030200"), "nic": ("0x15b3", "0x020000"), "bridge": ("0x1000", "0x060400")}[kind]
    return {"bdf": f"0000:{i >> 3:02x}:{i & 7:02x}.0", "vendor": vendor, "class": cls}


@pytest.mark.parametrize(("gpus", "others", "cut"), [
    (MAX_GPUS, 0, False),  # as many devices as the smaller cap: told without classifying each
    (MAX_GPUS - 1, 1, False),
    (MAX_GPUS, 30, False),  # more devices than the cap, no more GPUs than it
    (MAX_GPUS + 1, 0, True),
    (MAX_GPUS + 1, 30, True),
    (3, MAX_GPUS * 2, False),
])
def test_gpu_functions_are_cut_at_their_cap_whatever_else_is_on_the_bus(gpus: int, others: int, cut: bool) -> None:
    devices = [_function(i, "gpu") for i in range(gpus)]
    devices += [_function(gpus + i, "bridge" if i % 2 else "nic") for i in range(others)]
    data = {"devices": devices}
    out, notes = bound("pcie", data)
    if cut:
        assert notes == [f"pcie: {gpus} GPU functions reported, more than the {MAX_GPUS} a host is judged on; "
                         f"judged on the first {MAX_GPUS}"]
        assert len(out["devices"]) == len(devices) - (gpus - MAX_GPUS)
    else:
        assert notes == [] and out is data
