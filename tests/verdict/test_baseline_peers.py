"""Fleet baselines judge a host against its hardware peers (issue 47 item 5): the hosts of the same
GPU model, GPU count, board and virtualization (verdict/classes.py:hardware_key), not of the same
topology class, faults included.  A host with one NVLink down is a class of one and still compared
with its peers for every other figure; a peer group never mixes models, counts or boards; a few
faulty peers do not move the group's median; with --baseline-file, "too few peers" names the file."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.results import HostInput
from orchestrator.verdict import baseline
from orchestrator.verdict import classes as fingerprint
from tests.verdict.test_baseline import RECORDINGS, _baseline, _fleet, _host, baseline_file
from tests.verdict.test_verdict_demo import recorded_facts, run_cli

NOMINAL = "8xH100-SXM-NV18-8NIC-PIX"  # the demo's DGX H100 class: what its hardware looks like unharmed


# ----------------------------------------------------------------------------- what is hardware


def _h100() -> dict[str, Any]:
    desc = fingerprint.descriptor(recorded_facts("dgx-h100-12"))
    assert desc is not None and desc["gpu_model"] and desc["gpu_count"] == 8 and desc["board"]
    return desc


# A fault or a setting changes these (each the shape of a real demo fault); the host keeps its peers.
FAULT_STATES = [
    ("nvlink down", {"nvlink_links_up": [16] + [18] * 7, "gpu_pair_levels": {"NV16": 7, "NV18": 21}}),
    ("pcie downgraded", {"gpu_pcie": ["Gen1x8"] + ["Gen5x16"] * 7}),
    ("nic moved", {"gpu_nearest_nic": ["PIX"] * 7 + ["SYS"]}),
    ("nic missing", {"nic_count": 7}),
    ("nvswitch missing", {"nvswitch_count": 3}),
    ("mig on", {"mig": True}),
    ("gpu without links", {"nvlink_links_up": [0] + [18] * 7}),
]
# What the host was bought as: another value is other hardware, never a peer.
HARDWARE = [
    ("another model", {"gpu_model": "H100-PCIE"}),
    ("another count", {"gpu_count": 7}),
    ("a lower bound", {"gpu_count": "8+"}),
    ("another board", {"board": "X13DEG-OAD"}),
    ("no board read", {"board": None}),
    ("a VM", {"virtualized": True}),
]


@pytest.mark.parametrize("what,change", FAULT_STATES, ids=[w for w, _ in FAULT_STATES])
def test_a_fault_state_keeps_the_hosts_hardware_peers(what: str, change: dict[str, Any]) -> None:
    desc = _h100()
    faulty = {**desc, **change}
    assert fingerprint.digest(faulty) != fingerprint.digest(desc)  # another topology class ...
    assert fingerprint.hardware_key(faulty) == fingerprint.hardware_key(desc)  # ... the same peers


@pytest.mark.parametrize("what,change", HARDWARE, ids=[w for w, _ in HARDWARE])
def test_other_hardware_is_never_a_peer(what: str, change: dict[str, Any]) -> None:
    desc = _h100()
    assert fingerprint.hardware_key({**desc, **change}) != fingerprint.hardware_key(desc)


def test_gpus_of_unknown_model_are_peers_only_of_their_own_shape() -> None:
    """Eight GPUs of no known model may be eight of anything: their class alone, not every 8-GPU host."""
    unknown = {**_h100(), "gpu_model": None}
    other = {**unknown, "gpu_pcie": ["Gen4x16"] * 8}
    assert fingerprint.hardware_key(unknown) == fingerprint.digest(unknown)
    assert fingerprint.hardware_key(other) != fingerprint.hardware_key(unknown)
    assert fingerprint.hardware_key(None) is None


def test_a_peer_group_is_named_by_the_class_most_of_its_hosts_have() -> None:
    assert fingerprint.nominal_class([NOMINAL] * 5 + ["8xH100-SXM-NV16/NV18-8NIC-PIX", None]) == NOMINAL
    assert fingerprint.nominal_class(["b", "a"]) == "a"  # among equals: the first by name, every run alike
    assert fingerprint.nominal_class([None]) is None


# ----------------------------------------------------------------------------- judged against the peers


def _recorded_host(name: str, slow_gpu: int | None = None, factor: float = 1.0) -> HostInput:
    """A demo host exactly as recorded (its probes and faults), one GPU's host copies `factor`."""
    data = {}
    for path in sorted((RECORDINGS / name).glob("*.json")):
        env = json.loads(path.read_text())
        if env["status"] == "ok":
            data[env["probe"]] = env["data"]
    data = copy.deepcopy(data)
    for g in data["p2p"]["gpus"]:
        if g["index"] == slow_gpu:
            for key in ("h2d_gbps", "d2h_gbps"):
                g[key] = round(g[key] * factor, 2)
    probes = {p: {"outcome": "ok", "reason": ""} for p in data}
    return HostInput(name=name, address=name, groups=["gpu"], probes=probes, data=data)


@pytest.mark.parametrize("factor", [0.9, 0.85, 0.7])
def test_a_host_with_one_nvlink_down_is_judged_against_its_hardware_peers(factor: float) -> None:
    """dgx-h100-04 as recorded (GPU2 with 16 of 18 NVLinks: a class of one) among nine DGX H100s:
    its GPU5 planted slow on the host links is found against the other hosts' GPUs; on the code
    before issue 47 it was "too few peers (1 host(s) of class ...NV16/NV18...)"."""
    rng = random.Random(17)
    odd = _recorded_host("dgx-h100-04", slow_gpu=5, factor=factor)
    fleet = _fleet([_host(f"gpu{i:02d}", rng) for i in range(9)] + [odd])
    four = next(h for h in fleet.hosts if h.name == "dgx-h100-04")
    assert four.topology_class != NOMINAL  # its own class ...
    found = [f for f in _baseline(fleet) if f.host == "dgx-h100-04"]
    assert {f.subject for f in found} >= {"GPU5 (0000:ab:00.0) host->GPU copy", "GPU5 (0000:ab:00.0) GPU->host copy"}
    assert all(f"GPUs of class {NOMINAL}" in f.message for f in found)  # ... judged as its hardware
    assert "dgx-h100-04" not in fleet.not_judged[baseline.BANDWIDTH_LOW]
    assert not [f for f in _baseline(fleet) if f.host != "dgx-h100-04"]  # its peers are not blamed


@pytest.mark.parametrize("slow", [1, 2, 3])  # holds before issue 47 too: the median is robust
def test_faulty_peers_do_not_move_the_groups_median(slow: int) -> None:
    """Up to three of ten same-hardware hosts at half speed: each is found, no healthy one is."""
    rng = random.Random(23)
    hosts = [_host(f"gpu{i:02d}", rng) for i in range(10 - slow)] + [_host(f"bad{i}", rng, 0.5) for i in range(slow)]
    found = _baseline(_fleet(hosts))
    assert {f.host for f in found} == {f"bad{i}" for i in range(slow)}


def _figures(bus_ids: list[str], h2d: float) -> baseline.Measures:
    return baseline.Measures(baseline.Measure("h2d_gbps", "", bus, h2d) for bus in bus_ids)


@pytest.mark.parametrize("what,change", HARDWARE, ids=[w for w, _ in HARDWARE])
def test_a_peer_group_never_mixes_hardware(what: str, change: dict[str, Any]) -> None:
    """Nine DGX H100s and one host of other hardware 30 % slower: that host is not compared with
    them (too few peers, said so), and they are not compared with it."""
    desc = _h100()
    other = {**desc, **change}
    buses = [f"0000:{0x18 + i:02x}:00.0" for i in range(8)]
    hosts = [baseline.Judged(f"gpu{i}", fingerprint.digest(desc), NOMINAL, _figures(buses, 55.0 + i * 0.1),
                             fingerprint.hardware_key(desc)) for i in range(9)]
    hosts.append(baseline.Judged("odd", fingerprint.digest(other), "odd-class", _figures(buses, 38.0),
                                 fingerprint.hardware_key(other)))
    found, not_judged = baseline.judge(hosts)
    assert found == []
    why = not_judged[baseline.BANDWIDTH_LOW]["odd"]
    assert why.startswith("too few peers") and "1 host(s) of class odd-class in this run" in why
    assert not {h for h in not_judged[baseline.BANDWIDTH_LOW] if h != "odd"}


# ----------------------------------------------------------------------------- the bundled demo


def test_the_demos_faulty_dgx_h100s_are_baselined_against_their_hardware_peers(tmp_path: Path) -> None:
    """`probe run -p premigration` on the demo: dgx-h100-04 (NVLink down) and dgx-h100-06 (a link
    at Gen1 x8) are judged for every figure against the DGX H100s; no healthy peer is blamed."""
    _rc, fleet, err = run_cli(["-l", "demo", "-p", "premigration"], tmp_path / "run")
    assert fleet is not None, err
    for fid in (baseline.BANDWIDTH_LOW, baseline.ERRORS_HIGH):
        assert {"dgx-h100-04", "dgx-h100-06"}.isdisjoint(fleet["not_judged"][fid]), fleet["not_judged"][fid]
    six = [f for f in fleet["findings"] if f["host"] == "dgx-h100-06" and f["id"] == baseline.BANDWIDTH_LOW]
    assert {f["subject"] for f in six} == {"GPU2 (0000:3a:00.0) host->GPU copy", "GPU2 (0000:3a:00.0) GPU->host copy"}
    assert all(f"GPUs of class {NOMINAL}" in f["message"] for f in six)
    blamed = {f["host"] for f in fleet["findings"] if f["id"].startswith("baseline.")}
    # the planted ones (dgx-h100-22 hot, -25 slow, -26 hot and slow, rtx4090-02's fan) and -06's slow link;
    # since every demo host records NCCL (issue 49), the hosts whose planted P2P or NCCL fault slows
    # their all_reduce too, each figure a consequence of that host's own root, never a fault alone
    slowed = {"dgx-a100-05", "dgx-h100-10", "dgx-h100-13", "dgx-h100-14"}
    assert blamed == {"dgx-h100-06", "dgx-h100-22", "dgx-h100-25", "dgx-h100-26", "rtx4090-02"} | slowed
    assert all(f["caused_by"] for f in fleet["findings"] if f["id"].startswith("baseline.") and f["host"] in slowed)
    # the peers still never mix boards: the three rented H100s on another board stay among themselves
    assert "3 host(s) of class 8xH100-SXM-NV18-8NIC-PIX@X13DEG-OAD" in fleet["not_judged"][baseline.BANDWIDTH_LOW][
        "rent-h100-01"]
    # a host whose GPUs NVML partly lost (3 of 8 listed) is judged among 3-GPU hosts or not at all, and says
    # why in terms of its own GPUs: temperatures are compared with its siblings alone
    assert fleet["not_judged"][baseline.TEMPERATURE_HIGH]["dgx-h100-27"].startswith(
        "too few GPUs of this host measured the same figures (3)")


def test_with_a_baseline_file_too_few_peers_names_the_file_and_its_peer_count(tmp_path: Path) -> None:
    """A baseline of three DGX H100s (min_hosts is 4) judges nobody, and says it is the file's three;
    a host whose hardware the file does not hold says that, and counts its peers in this run."""
    base, _ = baseline_file(tmp_path, "dgx-h100-01,dgx-h100-02,dgx-h100-03")
    _rc, judged, err = run_cli(["-l", "dgx-h100-25,dgx-h100-04,rtx4090-01", "-p", "premigration",
                                "--baseline-file", str(base)], tmp_path / "judged")
    assert judged is not None, err
    why = judged["not_judged"][baseline.BANDWIDTH_LOW]
    for host in ("dgx-h100-25", "dgx-h100-04"):  # -04: its own class, the file's hardware
        assert why[host].startswith(f"too few peers measured the same figures (the baseline file {base} (from run ")
        assert f"holds 3 host(s) of class {NOMINAL}" in why[host] and "in this run" not in why[host]
    assert f"the baseline file {base} (from run " in why["rtx4090-01"]
    assert "holds no host of this hardware" in why["rtx4090-01"] and "1 host(s) of class 8xRTX-4090" in why["rtx4090-01"]
    # the gray GPU of dgx-h100-25 is not judged against three hosts: no finding
    assert not [f for f in judged["findings"] if f["id"] == baseline.BANDWIDTH_LOW]
