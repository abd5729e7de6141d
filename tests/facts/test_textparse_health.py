"""Kernel-log and InfiniBand tool text -> facts["kmsg"] / facts["nic"] (facts/textparse/kernel_log.py,
ibstat.py): every timestamp style, grep excerpts, and published ibstat / ibv_devinfo outputs
(tests/fixtures/text/SOURCES_health.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.facts.textparse import detect_kind
from orchestrator.facts.textparse.importer import import_files, import_texts
from orchestrator.facts.textparse.kernel_log import line_of

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "text"
MSG = "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."


@pytest.mark.parametrize(("line", "t", "when"), [
    (f"[73412.220317] {MSG}", 73412.220317, None),
    (f"<3>[73412.220317] {MSG}", 73412.220317, None),
    (f"[Fri Aug 30 11:43:09 2024] {MSG}", None, "2024-08-30T11:43:09"),
    (f"May 18 19:02:39 gpu-7 kernel: {MSG}", None, "--05-18T19:02:39"),
    (f"May  8 19:02:39 gpu-7 kernel: [73412.220317] {MSG}", 73412.220317, "--05-08T19:02:39"),
    (f"2026-02-14T05:03:41+0000 gpu-7 kernel: {MSG}", None, "2026-02-14T05:03:41+00:00"),
    (f"/var/log/kern.log:May 18 19:02:39 gpu-7 kernel: {MSG}", None, "--05-18T19:02:39"),
    (f"1234:[73412.220317] {MSG}", 73412.220317, None),
])
def test_every_timestamp_style_gives_the_message(line: str, t: float | None, when: str | None) -> None:
    kind, got = line_of(line)
    assert kind == "kernel" and got is not None
    assert (got.msg, got.stamp.t, got.stamp.when) == (MSG, t, when)


def test_a_non_kernel_syslog_line_is_not_a_kernel_line() -> None:
    assert line_of("Feb 14 05:03:41 gpu-1 systemd[1]: Starting systemd-remount-fs.service...") == ("other", None)


@pytest.mark.parametrize(("name", "kind"), [
    ("health_dmesg_ctime_gpud46.txt", "kernel_log"), ("health_dmesg_xid13_burst_vllm5901.txt", "kernel_log"),
    ("health_journalctl_k_mixed.txt", "kernel_log"), ("health_ibstat_mooncake1999.txt", "ibstat"),
    ("health_ibv_devinfo_deepep.txt", "ibstat")])
def test_detected(name: str, kind: str) -> None:
    assert detect_kind((FIX / name).read_text()) == kind


def test_dmesg_import_yields_its_events() -> None:
    host = import_files([FIX / "health_dmesg_ctime_gpud46.txt", FIX / "health_dmesg_xid13_burst_vllm5901.txt"])
    assert not host.errors
    km = host.facts["kmsg"]
    assert km["origin"] == "text" and km["readable"] is True and km["boot_id"] is None
    kinds = [(e["kind"], e.get("code"), e.get("bus_id")) for e in km["events"]]
    assert kinds.count(("xid", 13, "0000:cb:00.0")) == 3 and kinds.count(("xid", 13, "0000:43:00.0")) == 6
    assert ("xid", 109, "0000:cb:00.0") in kinds and ("peermem", None, None) in kinds
    assert host.outcomes["kmsg"] == "ok"


def test_journalctl_import_skips_other_units_and_keeps_kernel_events() -> None:
    host = import_files([FIX / "health_journalctl_k_mixed.txt"])
    events = host.facts["kmsg"]["events"]
    assert sorted(e["kind"] for e in events) == ["fallen_off_bus", "xid"]
    assert any("lines of other programs (journal) skipped (line 1)" in n for n in host.notes)


def test_ibstat_import_gives_ports_and_firmware() -> None:
    host = import_files([FIX / "health_ibstat_mooncake1999.txt"])
    nic = host.facts["nic"]
    devs = {d["name"]: d for d in nic["devices"]}
    assert set(devs) == {"mlx5_0", "mlx5_1", "mlx5_10"}
    p = devs["mlx5_0"]["ports"][0]
    assert (p["state"], p["phys_state"], p["rate_gbps"], p["link_layer"]) == ("ACTIVE", "LinkUp", 200.0, "Ethernet")
    assert devs["mlx5_0"]["fw_ver"] == "28.39.1002" and devs["mlx5_0"]["hca_type"] == "MT4129"
    assert devs["mlx5_0"]["node_guid"] == "58a2:e103:00da:e626" and devs["mlx5_0"]["bus_id"] is None
    down = devs["mlx5_10"]["ports"][0]
    assert (down["state"], down["phys_state"], down["rate_gbps"]) == ("DOWN", "Disabled", None)
    assert nic["origin"] == "text" and "devices.bus_id" in nic["low_confidence_fields"]


def test_ibv_devinfo_and_ibstat_of_one_host_merge() -> None:
    devinfo = (FIX / "health_ibv_devinfo_deepep.txt").read_text()
    rate = "CA 'mlx5_2'\n\tCA type: MT4129\n\tFirmware version: 28.42.1000\n\tPort 1:\n\t\tState: Active\n" \
           "\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: Ethernet\n"
    host = import_texts([("devinfo.txt", devinfo), ("ibstat.txt", rate)])
    devs = {d["name"]: d for d in host.facts["nic"]["devices"]}
    assert devs["mlx5_2"]["board_id"] == "MT_0000000838" and devs["mlx5_2"]["ports"][0]["rate_gbps"] == 400.0
    assert devs["mlx5_12"]["ports"][0]["state"] == "DOWN" and devs["mlx5_12"]["hca_type"] == "MT4125"


def test_ibstatus_form() -> None:
    # The layout of rdma-core's ibstatus script (one block per port, sysfs texts as they are).
    text = ("Infiniband device 'mlx5_3' port 1 status:\n\tdefault gid:\t fe80:0000:0000:0000:a088:c203:0030:9a0d\n"
            "\tbase lid:\t 0x12\n\tsm lid:\t\t 0x1\n\tstate:\t\t 1: DOWN\n\tphys state:\t 3: Disabled\n"
            "\trate:\t\t 400 Gb/sec (4X NDR)\n\tlink_layer:\t InfiniBand\n")
    assert detect_kind(text) == "ibstat"
    [dev] = import_texts([("ibstatus.txt", text)]).facts["nic"]["devices"]
    p = dev["ports"][0]
    assert (p["state"], p["phys_state"], p["rate_gbps"]) == ("DOWN", "Disabled", 400.0)
