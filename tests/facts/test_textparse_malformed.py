"""Malformed input: one line naming file and line, never a traceback."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from orchestrator.facts.textparse import (
    MAX_BYTES,
    TextParseError,
    detect_kind,
    import_files,
    parse_lspci_tree,
    parse_nvlink,
    parse_smi_list,
    parse_smi_query,
    parse_smi_xml,
    parse_text,
    parse_topo_cpu,
    parse_topo_matrix,
    read_path,
)
from tests.facts.test_textparse_common import FIXTURES
from tests.support.evidence import EVIDENCE, evidence

H100 = "topo_h100_sxm_8gpu_8nic_pix_01.txt"


def one_line(e: TextParseError, name: str) -> str:
    s = str(e)
    assert "\n" not in s and s.startswith(name)
    return s


def test_empty_file(tmp_path: Path):
    f = tmp_path / "empty.txt"
    f.write_bytes(b"")
    host = import_files([f])
    assert host.facts == {} and len(host.errors) == 1
    assert host.errors[0] == f"{f}:1: empty input (no text at all)"


def test_binary_junk_with_and_without_nul(tmp_path: Path):
    rng = random.Random(7)
    a = tmp_path / "core.bin"
    a.write_bytes(b"GPU0\n" + bytes(rng.randrange(256) for _ in range(4000)))
    b = tmp_path / "latin.bin"
    b.write_bytes(bytes(rng.randrange(0x80, 0x100) for _ in range(4000)))
    host = import_files([a, b])
    assert len(host.errors) == 2
    assert all("binary data" in e for e in host.errors)
    assert host.errors[0].startswith(f"{a}:")


def test_huge_file_is_capped(tmp_path: Path):
    f = tmp_path / "huge.txt"
    with f.open("wb") as fh:
        fh.write(b"\tGPU0\tGPU1\n" + b"GPU0\t X \tNV4\n" * ((MAX_BYTES // 13) + 100))
    with pytest.raises(TextParseError) as ei:
        read_path(f)
    assert f"over the {MAX_BYTES:,} a text output file may have" in one_line(ei.value, str(f))


def _notes(obj) -> list[str]:
    return [str(n) for n in obj.notes]


def test_truncated_row_is_read_and_names_the_line():
    """A paste cut mid-row keeps every cell it has; the rest are unknown, the line is named."""
    lines = read_path(evidence(H100)).split("\n")
    cut = "\n".join(lines[:6]) + "\n" + lines[6][:30]
    m = parse_topo_matrix(cut, "cut.txt")
    assert "line 7: row GPU5 has 3 of 16 matrix cells (truncated line?): the missing cells are unknown" in _notes(m)
    assert m.level("GPU5", "GPU0") == "NV18" and m.level("GPU5", "GPU4") == "NV18"  # GPU4 row: mirror
    assert m.level("GPU0", "GPU1") == "NV18"  # rows before the cut are whole


def test_missing_rows_are_unknown_not_a_rejection():
    lines = read_path(evidence(H100)).split("\n")
    m = parse_topo_matrix("\n".join(lines[:10]), "short.txt")
    assert any(n.startswith("line 10: matrix has 16 columns but 9 rows (missing NIC1, NIC2") for n in _notes(m))
    assert len(m.gpus) == 8 and m.level("GPU0", "NIC0") == "PIX"
    assert m.level("NIC3", "GPU3") == "PIX"  # read from GPU3's row; NIC3's own row is missing
    assert m.level("NIC3", "NIC4") is None  # neither row is in the text


def test_row_with_fewer_cells_than_columns():
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\tPIX\nGPU1\tPIX\t X \nGPU2\tPIX\tPIX\t X \n"
    m = parse_topo_matrix(text, "m.txt")
    assert "line 3: row GPU1 has 2 of 3 matrix cells (truncated line?): the missing cells are unknown" in _notes(m)
    assert m.level("GPU1", "GPU2") == "PIX"  # the mirror cell: one path between two devices


def test_duplicate_row_is_skipped_duplicate_header_refused():
    m = parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU0\t X \tPIX\nGPU1\tPIX\t X\n", "d.txt")
    assert "line 3: row GPU0 appears twice: the first one is kept, this line is skipped" in _notes(m)
    assert m.level("GPU0", "GPU1") == "PIX"
    with pytest.raises(TextParseError, match=r"^d\.txt:1: column label\(s\) GPU0 appear twice"):
        parse_topo_matrix("\tGPU0\tGPU0\nGPU0\t X \tPIX\n", "d.txt")


def test_no_matrix_at_all():
    with pytest.raises(TextParseError, match=r"^x:1: no topology matrix header"):
        parse_topo_matrix("hello world\n", "x")


def test_truncated_nvlink_and_topo_c_and_L_keep_the_rest():
    n = parse_nvlink("GPU 0: X (UUID: GPU-1)\n\t Link 0: 25 GB/s\n\t Link 1:\n", "n")
    assert "line 3: link 1 line has no value (truncated?): its state is unknown" in _notes(n)
    assert n.gpus[0].links[0].active is True and n.gpus[0].links[1].active is None
    c = parse_topo_cpu("The GPUs that have an affinity with CPU 0 are:\n0,1\n"
                       "The GPUs that have an affinity with CPU 48 are:\n", "c")
    assert c.nearest == {0: [0, 1]}
    assert "line 3: the GPU list for CPU 48 is missing (truncated?): skipped" in _notes(c)
    lst = parse_smi_list("GPU 0: NVIDIA A100 (UUID: GPU-1)\nGPU 1: NVIDIA A100 (UUID: GPU-2\n", "l")
    assert [g.index for g in lst.gpus] == [0]
    assert any(x.startswith("line 2: GPU/MIG line not understood (truncated?), skipped") for x in _notes(lst))


def test_truncated_query_block():
    q = parse_smi_query("Driver Version : 1\n\nGPU 00000000:18:00.0\n", "q")
    assert [g.bus_id for g in q.gpus] == ["0000:18:00.0"]
    assert "line 3: GPU block 00000000:18:00.0 has no fields (truncated?): only its bus id is known" in _notes(q)


def test_xml_entity_and_doctype_refused_and_truncation():
    bomb = '<?xml version="1.0"?>\n<!DOCTYPE x [<!ENTITY a "aaaa">]>\n<nvidia_smi_log>&a;</nvidia_smi_log>\n'
    with pytest.raises(TextParseError, match=r"^b\.xml:2: XML with a DOCTYPE/ENTITY declaration is refused"):
        parse_smi_xml(bomb, "b.xml")
    text = read_path(FIXTURES / "smi_qx_2x_a100_mig_passthrough.xml")
    with pytest.raises(TextParseError, match=r"^t\.xml:\d+: not well-formed XML"):
        parse_smi_xml(text[: len(text) // 2], "t.xml")
    with pytest.raises(TextParseError, match="not <nvidia_smi_log>"):
        parse_smi_xml("<other/>", "o.xml")


def test_lspci_tree_garbage_placement():
    with pytest.raises(TextParseError, match=r"^t:1: no devices found"):
        parse_lspci_tree("+-- nothing here [x]\n", "t")


def test_unrecognised_and_forced_wrong_kind():
    with pytest.raises(TextParseError, match=r"^u:1: not a recognised nvidia-smi or lspci output"):
        parse_text("just some words\n", "u")
    with pytest.raises(TextParseError, match=r"^u: unknown kind 'nope'"):
        parse_text("x", "u", "nope")
    with pytest.raises(TextParseError, match=r"^u:1: no 'GPU n: NAME"):
        parse_text("just some words\n", "u", "smi_list")


def _all_inputs() -> list[Path]:
    files = sorted(FIXTURES.glob("*"))
    files += sorted(EVIDENCE.glob("*.txt"))
    return files


def test_truncations_and_byte_flips_never_raise_anything_else():
    """Cut every input at many points and flip bytes: the parser for the detected kind either
    returns a result or raises TextParseError."""
    rng = random.Random(1234)
    tried = 0
    for f in _all_inputs():
        data = f.read_bytes()
        kind = detect_kind(data.decode("utf-8", "replace"))  # benchmarks too: they are parsed now
        variants = [data[: rng.randrange(1, len(data))] for _ in range(12)]
        for _ in range(6):
            b = bytearray(data)
            for _ in range(5):
                b[rng.randrange(len(b))] = rng.choice(b"\t \n-|+X0:.[]")
            variants.append(bytes(b))
        for v in variants:
            tried += 1
            try:
                parse_text(v.decode("utf-8", "replace"), f.name, kind)
            except TextParseError as e:
                assert "\n" not in str(e) and str(e).startswith(f.name)
    assert tried > 100


@pytest.mark.parametrize("text", [
    "a" + " " * 300_000 + "b",  # was quadratic in the -q key/value split
    "\tGPU0\tmlx5_" + "1" * 300_000 + "x",  # long device-label candidate in a header
    "GPU 00000000:18:00.0\n    " + "a " * 150_000,
])
def test_pathological_long_lines_are_refused_not_slow(text):
    from orchestrator.facts.textparse import PARSED_KINDS

    detect_kind(text)
    for kind in PARSED_KINDS:
        with pytest.raises(TextParseError) as ei:
            parse_text(text, "long.txt", kind)
        assert str(ei.value).startswith("long.txt")
    with pytest.raises(TextParseError, match=r"^long\.txt:\d+: line is \d+ characters long"):
        parse_topo_matrix(text, "long.txt")
