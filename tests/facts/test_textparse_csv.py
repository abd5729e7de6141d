"""`nvidia-smi --query-gpu ... --format=csv` with and without header and units.

The figures are those of the published 2x RTX 3090 report in tests/fixtures/evidence
(lspci_vvv_grep_lnk_2x_rtx3090_gen1_x8_downgraded_01.txt: both GPUs at Gen1 x8 of Gen4 x16),
written the way nvidia-smi prints them in each CSV variant; no CSV of that machine was published.
"""

from __future__ import annotations

from orchestrator.facts.textparse import detect_kind, import_texts
from orchestrator.facts.textparse.csvquery import parse_smi_csv

CMD = ("$ nvidia-smi --query-gpu=index,name,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
       "pcie.link.width.current,pcie.link.width.max,memory.total,fan.speed --format=csv")
HEADER = ("index, name, pci.bus_id, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, "
          "pcie.link.width.max, memory.total [MiB], fan.speed [%]")
ROWS_UNITS = ["0, NVIDIA GeForce RTX 3090, 00000000:01:00.0, 1, 4, 8, 16, 24576 MiB, 30 %",
              "1, NVIDIA GeForce RTX 3090, 00000000:03:00.0, 1, 4, 8, 16, 24576 MiB, [N/A]"]
ROWS_NOUNITS = [r.replace(" MiB", "").replace(" %", "") for r in ROWS_UNITS]


def check(text: str, full: bool = True) -> dict:
    assert detect_kind(text) == "smi_query_csv", text
    host = import_texts([("q.csv", text)])
    gpus = host.facts["gpus"]
    assert gpus["count"] == 2
    a, b = gpus["list"]
    assert (a["name"], a["bus_id"], b["bus_id"]) == ("NVIDIA GeForce RTX 3090", "0000:01:00.0", "0000:03:00.0")
    assert a["model"] == "RTX-3090"
    if full:
        assert a["pcie"]["gen_current"] == 1 and a["pcie"]["gen_max"] == 4 and a["pcie"]["width_current"] == 8
        assert a["memory_total_bytes"] == 24576 * 1024**2
        assert a["fans"] == [{"index": 0, "speed_pct": 30}] and b["fans"] is None
    return gpus


def test_header_with_units():
    check("\n".join([HEADER, *ROWS_UNITS]) + "\n")


def test_header_nounits_and_prompt():
    check("\n".join([CMD + ",nounits", HEADER.replace(" [MiB]", "").replace(" [%]", ""), *ROWS_NOUNITS]) + "\n")


def test_noheader_with_the_command_line():
    check("\n".join([CMD + ",noheader", *ROWS_UNITS]) + "\n")


def test_noheader_without_command_reads_only_self_naming_columns():
    gpus = check("\n".join(ROWS_NOUNITS) + "\n", full=False)
    assert gpus["list"][0]["pcie"] is None or gpus["list"][0]["pcie"]["gen_current"] is None


def test_one_gpu_with_i_is_not_the_count():
    q = parse_smi_csv(CMD.replace("--format", "-i 1 --format") + ",noheader\n" + ROWS_UNITS[1] + "\n", "q")
    assert q.attached_gpus is None and q.gpus[0].index == 1
    host = import_texts([("q.csv", CMD.replace("--format", "-i 1 --format") + ",noheader\n" + ROWS_UNITS[1] + "\n")])
    assert host.facts["gpus"]["count"] is None and [g["index"] for g in host.facts["gpus"]["list"]] == [1]


def test_odd_lines_and_redactions():
    rows = [ROWS_UNITS[0].replace("00000000:01:00.0", "xxxxxxxx:xx:xx.x"), "<<< the slow one", ROWS_UNITS[1]]
    host = import_texts([("q.csv", "\n".join([HEADER, *rows]) + "\n")])
    a = host.facts["gpus"]["list"][0]
    assert a["bus_id"] is None and a["unknown"]["bus_id"] == "redacted in the source"
    assert any("not a CSV row" in n for n in host.notes)


def test_firmware_columns_reach_the_record_the_nvml_probe_writes():
    # the H100 values of the published `-q` excerpt in tests/fixtures/evidence, as --query-gpu prints them
    text = ("name, pci.bus_id, vbios_version, inforom.img\n"
            "NVIDIA H100 80GB HBM3, 00000000:18:00.0, 96.00.74.00.01, G520.0200.00.05\n")
    [g] = import_texts([("q.csv", text)]).facts["gpus"]["list"]
    assert (g["vbios"], g["inforom_image"]) == ("96.00.74.00.01", "G520.0200.00.05")
