"""Kernel logs as they are published (issue 30, tests/fixtures/evidence/SOURCES.md "Added for issue 30"):
every shape people paste (raw /dev/kmsg records, dmesg --time-format iso and --decode, dmesg -T / -H,
journalctl short formats with host names and other programs, bare grep'd NVRM lines, trimmed
excerpts), the time each event printed, and events counted as NVIDIA and the kernel print them."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from orchestrator.facts.textparse import detect_kind, import_files, read_path
from tests.support.evidence import evidence


def _kmsg(name: str) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    host = import_files([evidence(name)])
    assert not host.errors, host.errors
    km = host.facts["kmsg"]
    assert km["readable"] is True and km["origin"] == "text"
    return km, km["events"], host.notes


def _count(events: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter((e["kind"], e.get("code"), e.get("bus_id")) for e in events)


@pytest.mark.parametrize("name", [
    "kmsg_raw_nvswitch_open_no_event_gpud_01.txt", "kmsg_raw_peermem_gpud_01.txt",
    "dmesg_decode_iso_xid13_xid43_gpud_01.txt", "dmesg_decode_iso_segfault_libnccl_gpud_01.txt",
    "dmesg_iso_xid48_63_94_peermem_gpud_01.txt", "journalctl_short_iso_host_peermem_gpud_01.txt",
    "dmesg_ctime_xid119_gsp_rpc_dump_gpud_01.txt", "dmesg_fallen_off_bus_multiline_no_xid_nvsentinel155_01.txt",
    "dmesg_sxid_22013_data_severity_nvtrust124_01.txt", "journal_trimmed_kernel_xid45_after_149_145_ogkm1150_01.txt",
    "journal_trimmed_xid145_137_redacted_bus_nccl2241_01.txt", "nvrm_bare_xid144_149_nvlink5_gpud1160_01.txt",
    "nvrm_bare_xid149_145_94_gb200_gpud1174_01.txt", "journal_aer_corrected_cyrillic_month_gsconnect1052_01.txt",
    "syslog_aer_correctable_message_received_popos3363_01.txt", "dmesg_aer_multiple_corrected_id_rpi64_01.txt",
    "dmesg_aer_multiple_port_and_nvme_popos751_01.txt", "dmesg_ctime_host_mlx5_slot_power_gpud348_01.txt",
    "dmesg_grep_numbered_mlx5_slot_power_not_advertised_gpuop2511_01.txt",
    "dmesg_reltime_lockdep_mlx5_vfio_no_minute_line_kvm_list_01.txt",
    "dmesg_all_time_formats_raw_ctime_reltime_iso_utillinux2648_01.txt",
])
def test_every_published_shape_is_a_kernel_log(name: str) -> None:
    assert detect_kind(read_path(evidence(name))) == "kernel_log"


def test_raw_kmsg_records_without_an_event_are_a_valid_empty_log() -> None:
    km, events, _ = _kmsg("kmsg_raw_nvswitch_open_no_event_gpud_01.txt")
    assert events == [] and km["lines_scanned"] == 47  # records 3964..4010


def test_raw_kmsg_records_keep_seconds_since_boot() -> None:
    _, events, _ = _kmsg("kmsg_raw_peermem_gpud_01.txt")
    assert [e["kind"] for e in events] == ["peermem"] * 7  # the record "test" is no event
    assert events[0]["t"] == 227.996636 and events[-1]["t"] == 227.996662 and "when" not in events[0]


def test_dmesg_decode_iso_gives_wall_clock_and_every_xid() -> None:
    _, events, _ = _kmsg("dmesg_decode_iso_xid13_xid43_gpud_01.txt")
    assert _count(events) == {("xid", 13, "0000:38:00.0"): 16, ("xid", 43, "0000:38:00.0"): 1}
    first, last = events[0], events[-1]
    assert first["when"] == "2025-01-21T04:41:44.283302+00:00" and first["wall"] == 1737434504.283302
    assert (last["code"], last["pid"], last["process"]) == (43, 2924364, "pt_main_thread")


def test_dmesg_decode_iso_segfaults_in_libnccl() -> None:
    _, events, _ = _kmsg("dmesg_decode_iso_segfault_libnccl_gpud_01.txt")
    assert [(e["kind"], e["library"], e["pid"]) for e in events] == [("segfault", "libnccl.so.2", 2536443)] * 2
    assert [e["when"] for e in events] == ["2025-01-21T04:41:44.285060+00:00", "2025-01-21T04:42:44.285060+00:00"]


def test_dmesg_time_format_iso() -> None:
    _, events, _ = _kmsg("dmesg_iso_xid48_63_94_peermem_gpud_01.txt")
    c = _count(events)
    assert c[("xid", 48, "0000:19:00.0")] == 1 and c[("xid", 63, "0000:19:00.0")] == 1
    assert c[("xid", 94, "0000:19:00.0")] == 9 and c[("peermem", None, None)] == 30
    dbe = next(e for e in events if e.get("code") == 48)
    assert dbe["when"] == "2024-11-15T12:02:03.470068+00:00" and dbe["action"] == "reset"


def test_journalctl_short_iso_with_host_names() -> None:
    _, events, _ = _kmsg("journalctl_short_iso_host_peermem_gpud_01.txt")
    assert [e["kind"] for e in events] == ["peermem"] * 14
    assert events[0]["when"] == "2025-01-17T17:39:30+00:00" and events[0]["wall"] == 1737135570.0


def test_dmesg_ctime_keeps_the_printed_time_without_inventing_a_zone() -> None:
    _, events, _ = _kmsg("dmesg_ctime_xid119_gsp_rpc_dump_gpud_01.txt")
    assert _count(events) == {("xid", 119, "0000:9b:00.0"): 5}  # the RPC history and call trace are no events
    assert [e["when"] for e in events] == ["2025-02-23T16:24:18", "2025-02-23T16:24:24", "2025-02-23T16:24:30",
                                           "2025-02-23T16:27:12", "2025-02-23T16:30:13"]
    assert all(e["wall"] is None for e in events)  # dmesg -T prints no zone


def test_multiline_fallen_off_the_bus_without_an_xid() -> None:
    _, events, _ = _kmsg("dmesg_fallen_off_bus_multiline_no_xid_nvsentinel155_01.txt")
    assert [(e["kind"], e["bus_id"], e["t"]) for e in events] == [("fallen_off_bus", "0000:b3:00.0", 1843.308145)]


def test_sxid_counted_by_its_error_line_with_the_link() -> None:
    _, events, _ = _kmsg("dmesg_sxid_22013_data_severity_nvtrust124_01.txt")
    assert [(e["code"], e["device"], e["bus_id"], e["severity"], e["link"]) for e in events] == [
        (22013, "nvidia-nvswitch3", "0000:04:00.0", "nonfatal", link) for link in (44, 45, 46)]


def test_sxid_register_lines_alone_still_say_an_error_happened() -> None:
    from orchestrator.facts.textparse import import_texts

    line = ("kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, "
            "Data {0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100, "
            "0x00000000, 0x00000000}\n")  # github.com/leptonai/gpud pull request #338
    [ev] = import_texts([("sxid.txt", line)]).facts["kmsg"]["events"]
    assert (ev["kind"], ev["code"], ev["bus_id"], ev["severity"]) == ("sxid", 12028, "0000:84:00.0", None)
    assert ev["when"] == "2025-01-25T10:34:54.859532+00:00"


def test_trimmed_journal_excerpt_without_times() -> None:
    _, events, _ = _kmsg("journal_trimmed_kernel_xid45_after_149_145_ogkm1150_01.txt")
    assert len(events) == 7 and {e["code"] for e in events} == {45}
    assert {e["bus_id"] for e in events} == {"0000:dc:00.0", "0000:ed:00.0", "0000:ba:00.0", "0000:97:00.0"}
    assert all(e["t"] is None and "when" not in e and e["action"] == "ignore" for e in events)


def test_a_redacted_bus_id_is_unknown_and_the_link_is_kept() -> None:
    _, events, _ = _kmsg("journal_trimmed_xid145_137_redacted_bus_nccl2241_01.txt")
    assert [(e["code"], e["bus_id"]) for e in events] == [(145, None), (137, None)]
    assert events[0]["bus_id_unknown"] == "printed as '...'" and events[0]["link"] == 11
    assert events[0]["severity"] == "nonfatal" and events[0]["action"] == "ignore"


def test_bare_nvrm_lines_of_nvlink5_xids() -> None:
    _, events, notes = _kmsg("nvrm_bare_xid144_149_nvlink5_gpud1160_01.txt")
    assert [(e["code"], e["severity"], e["link"]) for e in events] == [(144, "nonfatal", 0), (149, "fatal", 0),
                                                                        (149, "fatal", 0)]
    assert any("quote mark" in n for n in notes)
    _, events, _ = _kmsg("nvrm_bare_xid149_145_94_gb200_gpud1174_01.txt")
    assert [(e["code"], e["bus_id"], e.get("link")) for e in events] == [
        (149, "0019:01:00.0", -1), (149, "0000:00:00.0", 0), (145, "0018:01:00.0", 13), (94, "0000:9b:00.0", None)]


def test_aer_report_is_its_error_received_line_with_the_details() -> None:
    _, events, _ = _kmsg("journal_aer_corrected_cyrillic_month_gsconnect1052_01.txt")
    assert [(e["bus_id"], e["port"], e["severity"], e["error_type"]) for e in events] == [
        ("0000:00:1c.5", "0000:00:1c.5", "Corrected", "Physical Layer")] * 3
    assert events[0]["when"] == "--02-12T00:48:02"  # a Russian locale's month, no year printed
    _, events, _ = _kmsg("syslog_aer_correctable_message_received_popos3363_01.txt")
    assert [(e["bus_id"], e["severity"], e["error_type"], e["t"]) for e in events] == [
        ("0000:00:03.1", "Corrected", "Data Link Layer", 68183.61579),
        ("0000:00:03.1", "Corrected", "Data Link Layer", 68183.637883)]


def test_aer_multiple_and_reports_whose_report_line_was_cut() -> None:
    _, events, _ = _kmsg("dmesg_aer_multiple_corrected_id_rpi64_01.txt")
    assert [e["t"] for e in events] == [3.499123, 3.499148, 3.499207, 3.499269]  # the first block lost its line
    _, events, _ = _kmsg("dmesg_aer_multiple_port_and_nvme_popos751_01.txt")
    # the second report names 0000:03:00.0 and both the port and the NVMe printed details: one report
    assert [(e["bus_id"], e["driver"]) for e in events] == [("0000:00:1d.0", "pcieport"), ("0000:03:00.0", "nvme")]


def test_mlx5_one_line_events_belong_to_their_nic() -> None:
    _, events, _ = _kmsg("dmesg_ctime_host_mlx5_slot_power_gpud348_01.txt")
    assert [(e["kind"], e["subtype"], e["bus_id"], e["when"]) for e in events] == [
        ("mlx5", "slot_power", "0000:5c:00.0", "2024-12-01T14:54:40")]
    km, events, _ = _kmsg("dmesg_grep_numbered_mlx5_slot_power_not_advertised_gpuop2511_01.txt")
    assert events == [] and km["lines_scanned"] == 8  # "capability was not advertised" is no power fault


def test_relative_times_without_a_minute_line_are_unknown_and_named() -> None:
    km, events, notes = _kmsg("dmesg_reltime_lockdep_mlx5_vfio_no_minute_line_kvm_list_01.txt")
    assert events == [] and km["lines_scanned"] == 18
    assert any("relative times with no minute line above them" in n and "lines 1-6" in n for n in notes)
    assert any("not kernel-log lines, skipped (lines 7, 11)" in n for n in notes)  # wrapped by the mail client


def test_relative_times_under_a_minute_line_are_known_to_the_minute() -> None:
    from orchestrator.facts.textparse.kernel_log import parse_kernel_log

    log = parse_kernel_log("[Nov15 12:02] NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"
                           "[  +0.000844] NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.\n", "h.txt")
    assert [x["when"] for x in log.lines] == ["--11-15T12:02", "--11-15T12:02"] and not log.notes


def test_every_time_format_of_dmesg_at_once() -> None:
    from orchestrator.facts.textparse.kernel_log import parse_kernel_log

    name = "dmesg_all_time_formats_raw_ctime_reltime_iso_utillinux2648_01.txt"
    log = parse_kernel_log(read_path(evidence(name)), name)
    assert {x["t"] for x in log.lines} == {17159596.699613}
    assert [x["when"] for x in log.lines] == [None, None, "2023-12-22T12:26:24", "2023-12-22T12:26:24",
                                              "2023-12-22T12:26:24.559615-08:00", "2023-12-22T12:26:24.559613-08:00"]
    assert log.lines[4]["wall"] == 1703276784.559615
    assert {x["msg"] for x in log.lines} == {"device vethab20cf5 entered promiscuous mode"}
