"""The default `nvidia-smi` screen (issue 48 item 1): every era's real screens (tests/fixtures/evidence,
`smi_screen_*`, provenance in SOURCES.md) and a hand-built hostile set.  Before issue 48 every one of
these was refused as "not a recognised nvidia-smi or lspci output"."""

from __future__ import annotations

import re
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from orchestrator.facts.textparse import (
    TextParseError,
    detect_kind,
    import_files,
    import_texts,
    parse_text,
    read_path,
)
from orchestrator.facts.textparse.smi_screen import parse_smi_screen
from tests.support.evidence import EVIDENCE, evidence

SCREENS = sorted(p.name for p in EVIDENCE.glob("smi_screen_*.txt"))


def _gpus(name: str) -> dict[str, Any]:
    host = import_files([evidence(name)])
    assert not host.errors, host.errors
    return host.facts["gpus"]


def test_at_least_25_real_screens_across_the_eras() -> None:
    eras = {re.match(r"smi_screen_(\d+)", n).group(1)[:1] for n in SCREENS if re.match(r"smi_screen_\d", n)}  # type: ignore[union-attr]
    assert len(SCREENS) >= 25 and {"3", "4", "5", "6"} <= eras


@pytest.mark.parametrize("name", SCREENS)
def test_every_real_screen_is_recognised_and_read(name: str) -> None:
    text = read_path(evidence(name))
    assert detect_kind(text) == "smi_screen"
    g = _gpus(name)
    assert g["list"] and all(x["bus_id"] for x in g["list"])
    assert (g["count"] is None) == ("count_at_least" in g)
    # the screen's rows fill the same record -q fills: one shape, not a third model
    assert all({"persistence_mode", "memory_total_bytes", "power_limit_w", "perf_state", "ecc", "mig"} <= set(x)
               for x in g["list"])


# (file, driver, cuda, count or None, at least, {index: (bus id, power W, cap W, used MiB, total MiB, util %)})
STATED = [
    ("smi_screen_384_183_8x_v100_sxm2_01.txt", "384.183", "9.0", 8, None,
     {0: ("0000:06:00.0", 41.0, 300.0, 10, 32502, 0), 7: ("0000:8a:00.0", 42.0, 300.0, 10, 32502, 0)}),
    ("smi_screen_384_1x_k80_aws_readme_01.txt", "384.90", None, 1, None,
     {0: ("0000:00:1e.0", 68.0, 149.0, 0, 11439, 94)}),
    ("smi_screen_418_mx110_power_na_01.txt", "418.39", "10.1", 1, None,
     {0: ("0000:01:00.0", None, None, 666, 2004, 4)}),
    ("smi_screen_470_a100_pcie_mig_manager_cuda_na_01.txt", "470.82.01", None, 1, None,
     {0: ("0000:61:00.0", 44.0, 250.0, 0, 40536, 0)}),
    ("smi_screen_535_h100_hbm3_01.txt", "535.104.12", "12.2", 1, None,
     {0: ("0000:53:00.0", 69.0, 700.0, 2, 81559, 0)}),
    ("smi_screen_580_l4_notebook_indented_01.txt", "580.105.08", "13.0", 1, None,
     {0: ("0000:31:00.0", 28.0, 72.0, 11610, 23034, 0)}),
    ("smi_screen_610_kmd_tesla_t4_gce_01.txt", "610.43.02", "13.3", 1, None,
     {0: ("0000:00:07.0", 11.0, 70.0, 0, 15360, 0)}),
    ("smi_screen_610_kmd_umd_2x_rtx3090_cut_01.txt", "610.43.02", "13.3", None, 2,
     {0: ("0000:17:00.0", 188.0, 350.0, 23074, 24576, 0), 1: ("0000:65:00.0", 25.0, None, None, None, None)}),
    ("smi_screen_515_a100_domain_0001_no_mig_devices_01.txt", "515.86.01", "11.7", 1, None,
     {0: ("0001:00:00.0", 75.0, 300.0, 0, 81920, None)}),
    ("smi_screen_460_t4_domain_2c74_azure_edge_01.txt", None, None, 1, None,
     {0: ("2c74:00:00.0", 69.0, 70.0, 221, 15109, 100)}),
]


@pytest.mark.parametrize(("name", "driver", "cuda", "count", "at_least", "rows"), STATED)
def test_a_screen_states_its_versions_count_and_rows(name: str, driver: str | None, cuda: str | None,
                                                     count: int | None, at_least: int | None,
                                                     rows: dict[int, tuple[Any, ...]]) -> None:
    g = _gpus(name)
    assert (g["driver_version"], g["cuda_driver_version"], g["count"], g.get("count_at_least")) == (
        driver, cuda, count, at_least)
    by = {x["index"]: x for x in g["list"]}
    for i, (bus, power, cap, used, total, util) in rows.items():
        x = by[i]
        mib = [None if v is None else v >> 20 for v in (x["memory_used_bytes"], x["memory_total_bytes"])]
        assert (x["bus_id"], x["power_w"], x["power_limit_w"], *mib, x["utilization_pct"]) == (
            bus, power, cap, used, total, util)


def test_wsl_and_windows_screens() -> None:
    # WSL: the Linux nvidia-smi's own version in the banner, the Windows driver's as Driver Version
    g = _gpus("smi_screen_545_wsl_rtx4060_laptop_driver_546_01.txt")
    assert (g["driver_version"], g["cuda_driver_version"], g["count"]) == ("546.12", "12.3", 1)
    # Windows prints TCC/WDDM where Linux prints Persistence-M: the driver model, never "persistence off"
    [x] = _gpus("smi_screen_546_windows_wddm_gtx1660ti_from_wsl_01.txt")["list"]
    assert x["persistence_mode"] is None and x["unknown"]["persistence_mode"] == "WDDM in the source"
    assert (x["power_w"], x["memory_used_bytes"] >> 20) == (24.0, 1513)


def test_mig_devices_box_fills_the_gpus_mig_instances() -> None:
    x = _gpus("smi_screen_535_a100_pcie_mig_2_devices_01.txt")["list"][0]
    assert x["mig"]["current"] is True and x["ecc"]["mode_current"] is True  # the ECC cell reads `On` under MIG
    assert [(m["index"], m["gpu_instance_id"], m["memory_total_bytes"] >> 20) for m in x["mig"]["instances"]] == [
        (0, 7, 4864), (1, 8, 4864)]
    assert _gpus("smi_screen_515_a100_domain_0001_no_mig_devices_01.txt")["list"][0]["mig"]["instances"] == []


def test_processes_box_rows_every_era() -> None:
    procs = _gpus("smi_screen_550_gtx1650_c_plus_g_process_01.txt")["processes"]
    assert [(p["gpu"], p["pid"], p["type"], p["name"], p["memory_used_bytes"] >> 20) for p in procs] == [
        (0, 1591, "G", "/usr/lib/xorg/Xorg", 4), (0, 10941, "C+G", "/usr/lib/virtualbox/VirtualBoxVM", 64)]
    assert len(_gpus("smi_screen_535_gtx1070_five_processes_01.txt")["processes"]) == 5
    old = "|    0      4242      C   python                                      1234MiB |\n"
    wsl = "|    0   N/A  N/A        33      G   /Xwayland                                 N/A      |\n"
    q = parse_smi_screen(_screen(1, era="old") + _PROC_HEAD + old + wsl, "t")
    assert [(p.gpu, p.pid, p.type, p.memory_used_bytes) for p in q.processes] == [
        (0, 4242, "C", 1234 << 20), (0, 33, "G", None)]  # WSL prints N/A memory: unknown


def test_a_gpu_whose_handle_could_not_be_determined_is_counted_lost_with_its_bus_id() -> None:
    g = _gpus("smi_screen_610_unable_handle_gpu1_rtx_pro_6000_01.txt")
    lost = [x for x in g["list"] if x.get("lost")]
    assert [(x["index"], x["bus_id"]) for x in lost] == [(1, "0000:34:00.0")]
    assert g["count_at_least"] == 2  # the paste ends inside GPU 0's box


@pytest.mark.parametrize(("line", "index", "bus"), [
    ("Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error", 1, "0000:34:00.0"),
    ("Unable to determine the device handle for GPU0000:CB:00.0: Unknown Error", None, "0000:cb:00.0"),
    ("Unable to determine the device handle for GPU 0: Unknown Error", 0, None),
    ("Unable to determine the device handle for GPU1: 00000008:01:00.0: GPU is lost", 1, "0008:01:00.0"),
])
def test_unable_to_determine_the_device_handle_variants(line: str, index: int | None, bus: str | None) -> None:
    q = parse_smi_screen(line + "\n" + _screen(1), "t")
    assert q.attached_gpus == 2
    [lost] = [g for g in q.gpus if g.lost]
    # its index when the screen's rows do not already use it (GPU 0 is the screen's own row here)
    assert (lost.bus_id, lost.index) == (bus, index if index else None)


def test_no_devices_were_found_is_a_host_with_no_gpu() -> None:
    host = import_texts([("s.txt", "No devices were found\n")])
    assert not host.errors and host.facts["gpus"]["count"] == 0


# -- the hand-built hostile set ------------------------------------------------------------------------

_BANNERS = {
    "old": "| NVIDIA-SMI 418.67       Driver Version: 418.67       CUDA Version: 10.1     |",
    "new": "| NVIDIA-SMI 580.65.06              Driver Version: 580.65.06      CUDA Version: 13.0     |",
    "kmd": "| NVIDIA-SMI 610.43.02              KMD Version: 610.43.02     CUDA UMD Version: 13.3     |",
}
_PROC_HEAD = ("+-----------------------------------------------------------------------------+\n"
              "| Processes:                                                       GPU Memory |\n"
              "|  GPU       PID   Type   Process name                             Usage      |\n"
              "|=============================================================================|\n")


def _row(i: int, name: str = "NVIDIA H100 80GB HBM3", bus: str | None = None, ecc: str = "0",
         cells: tuple[str, ...] = ("N/A", "34C", "P0", "69W", "700W", "2MiB", "81559MiB", "0%", "Default")) -> str:
    fan, temp, perf, pw, cap, used, total, util, mode = cells
    bus = bus or f"00000000:{i + 16:02X}:00.0"
    return (f"|   {i}  {name:<28}  On  |   {bus} Off | {ecc:>20} |\n"
            f"| {fan:<4} {temp:>4}   {perf}   {pw:>14} / {cap:>5} | {used:>10} / {total:>9} | {util:>5}  {mode:>10} |\n"
            "|                                         |                        |             Disabled |\n"
            "+-----------------------------------------+------------------------+----------------------+\n")


def _screen(n: int, era: str = "new", **kw: Any) -> str:
    head = (f"{_BANNERS[era]}\n"
            "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
            "|=========================================+========================+======================|\n")
    return head + "".join(_row(i, **kw) for i in range(n))


@pytest.mark.parametrize("era", sorted(_BANNERS))
def test_banners_of_every_era(era: str) -> None:
    q = parse_smi_screen(_screen(2, era=era), "t")
    want = {"old": ("418.67", "10.1"), "new": ("580.65.06", "13.0"), "kmd": ("610.43.02", "13.3")}[era]
    assert (q.driver_version, q.cuda_version, q.attached_gpus) == (*want, 2)


@pytest.mark.parametrize("name", ["A|B|C", "GPU +---+ x", "|||", "NVIDIA ═╪═ │box│", "name | 00000000:99:00.0 On |"])
def test_box_characters_in_a_gpu_name_never_shift_the_row(name: str) -> None:
    q = parse_smi_screen(_screen(1, name=name), "t")
    [g] = q.gpus
    assert (g.bus_id, g.power_limit_w, g.memory_total_bytes) == ("0000:10:00.0", 700.0, 81559 << 20)


def test_a_200_gpu_table_is_read_whole_and_fast() -> None:
    text = _screen(200)
    t0 = time.monotonic()
    host = import_texts([("big.txt", text)])
    assert time.monotonic() - t0 < 10
    g = host.facts["gpus"]
    assert g["count"] == 200 and len({x["bus_id"] for x in g["list"]}) == 200


@pytest.mark.parametrize("colour", ["\x1b[1m{}\x1b[0m", "[1m{}[m", "\x1b[4m\x1b[32m{}\x1b[0m"])
def test_ansi_colour_codes_are_removed(colour: str) -> None:
    text = "\n".join(colour.format(line) for line in _screen(2).splitlines())
    q = parse_smi_screen(text, "t")
    assert [g.bus_id for g in q.gpus] == ["0000:10:00.0", "0000:11:00.0"] and q.driver_version == "580.65.06"


@pytest.mark.parametrize("width", [60, 80, 85])
def test_rewrapped_by_a_terminal_narrower_than_the_table(width: int) -> None:
    whole = _screen(3)
    wrapped = "\n".join(part for line in whole.splitlines()
                        for part in [line[i:i + width] for i in range(0, len(line), width)])
    a, b = parse_smi_screen(whole, "t"), parse_smi_screen(wrapped, "t")
    fields = ("index", "bus_id", "power_w", "power_limit_w", "memory_used_bytes", "memory_total_bytes", "compute_mode")
    assert [[getattr(g, f) for f in fields] for g in b.gpus] == [[getattr(g, f) for f in fields] for g in a.gpus]
    assert b.attached_gpus == 3


def test_cut_anywhere_inside_the_table_is_a_lower_bound_or_a_clear_refusal() -> None:
    text = _screen(3)
    start = text.index("|   0 ")
    for cut in range(start, len(text) - 1, 7):
        try:
            q = parse_smi_screen(text[:cut], "t")
        except TextParseError as e:
            assert "nvidia-smi -q" in str(e) and "half-readable" in str(e)
            continue
        # a cut on a box's closing line reads as a host of the GPUs before it (nothing tells them
        # apart); anywhere else the GPUs read are a lower bound
        closed = text[:cut].count("\n+") - text[:start].count("\n+")
        assert (q.attached_gpus, q.at_least) in ((None, len(q.gpus)), (closed, None)), cut


@pytest.mark.parametrize("text", [
    _BANNERS["new"] + "\n",
    _BANNERS["kmd"] + "\n| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n",
    "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n|=====|\n|   0  Tesla",
])
def test_a_half_readable_screen_names_the_command_to_paste_instead(text: str) -> None:
    assert detect_kind(text) == "smi_screen"
    with pytest.raises(TextParseError, match=r"half-readable.*nvidia-smi -q.*nvidia-smi -L"):
        parse_text(text, "t")


@pytest.mark.parametrize("cells", [
    ("ERR!", "ERR!", "ERR!", "ERR!", "ERR!", "ERR!", "ERR!", "ERR!", "ERR!"),
    ("[N/A]", "[N/A]", "[N/A]", "[N/A]", "[N/A]", "[N/A]", "[N/A]", "[N/A]", "[N/A]"),
    ("N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A"),
    ("Unknown", "Error", "?", "??W", "x", "MiB", "-", "%", "E. Process"),
])
def test_err_and_na_cells_are_unknown_with_their_reason(cells: tuple[str, ...]) -> None:
    host = import_texts([("s.txt", _screen(1, cells=cells, ecc=cells[0]))])
    assert not host.errors
    [x] = host.facts["gpus"]["list"]
    assert x["power_w"] is None and x["memory_total_bytes"] is None and x["temperature_c"] is None
    assert x["unknown"]["power_w"] and x["unknown"]["temperature_c"]
    assert "None" not in str(x["unknown"].values())


@pytest.mark.parametrize("bus", ["00000008:01:00.0", "00000019:01:00.0", "0000000F:01:00.0"])
def test_pci_domains_of_gb200_trays(bus: str) -> None:
    [g] = parse_smi_screen(_screen(1, bus=bus), "t").gpus
    assert g.bus_id == bus[4:].lower()


def test_a_50_mb_file_is_refused_with_one_message_in_bounded_memory(tmp_path: Path) -> None:
    big = tmp_path / "screen.txt"
    with open(big, "w") as fh:
        for _ in range(50 * 1024 // 4):  # 50 MiB of table rows, written 4 KiB at a time
            fh.write((_row(0) * 12)[:4096])
    tracemalloc.start()
    host = import_files([big])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(host.errors) == 1 and "bytes, over the" in host.errors[0] and not host.facts
    assert peak < 16 * 1024 * 1024  # files/bounded.py refuses it by its size, never reading it whole


def test_what_the_screen_cannot_give_is_said_once() -> None:
    host = import_files([evidence("smi_screen_384_183_8x_v100_sxm2_01.txt")])
    said = [n for n in host.notes if "does not print UUIDs" in n]
    assert len(said) == 1 and "nvidia-smi -q" in said[0]


def test_a_cut_name_is_a_model_only_when_one_model_has_that_start() -> None:
    models = {x["model"] for x in _gpus("smi_screen_384_183_8x_v100_sxm2_01.txt")["list"]}
    assert models == {"V100-SXM"}
    # "NVIDIA GeForce RTX 4090 ..." is a 4090 *and more* (a Laptop GPU): not the desktop board
    assert _gpus("smi_screen_610_kmd_rtx4090_laptop_01.txt")["list"][0]["model"] is None


@pytest.mark.parametrize("order", [1, -1])
def test_a_screen_beside_q_never_replaces_the_q_record(order: int) -> None:
    files = [evidence("q_570_rtx5090_blackwell_addressing_hmm_simulator_01.txt"),
             evidence("smi_screen_580_rtx5070ti_prompt_01.txt")][::order]
    host = import_files(files)
    [x] = host.facts["gpus"]["list"]
    assert x["uuid"] == "GPU-ea2294a3-4d61-1757-8aed-f91723f16ad2" and x["name"] == "NVIDIA GeForce RTX 5090"


@pytest.mark.parametrize("times", [2, 3])
def test_a_screen_pasted_more_than_once_keeps_each_gpu_once(times: int) -> None:
    q = parse_smi_screen(_screen(2) * times, "t")
    assert [g.index for g in q.gpus] == [0, 1] and q.attached_gpus == 2
    assert sum("has a second row" in n.text for n in q.notes) == 2 * (times - 1)
