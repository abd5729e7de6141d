"""Mutated copies of real outputs: what posters add (annotations, comments, elisions, redactions)
and what nvidia-smi's own layout does (fused cells, empty cells in space-aligned copies, NUMA
ranges, headers without indentation, ANSI colour).  One odd line is skipped with a note naming
it; the rest of the file is still read."""

from __future__ import annotations

from orchestrator.facts.textparse import (
    import_texts,
    parse_nvlink,
    parse_smi_list,
    parse_smi_query,
    parse_topo_matrix,
    read_path,
)
from tests.support.evidence import evidence

H100 = "topo_h100_sxm_8gpu_8nic_pix_01.txt"
A6000 = "topo_3x_rtx_a6000_nvlink_bridge_01.txt"


def lines_of(name: str) -> list[str]:
    return read_path(evidence(name)).split("\n")


def notes(obj) -> list[str]:
    return [str(n) for n in obj.notes]


def test_annotated_row_comment_and_elision_keep_the_matrix():
    lines = lines_of(H100)
    lines[1] += "   <<< this GPU was slow"
    lines.insert(3, "# the poster's comment")
    lines.insert(6, "...")
    m = parse_topo_matrix("\n".join(lines), "a.txt")
    got = notes(m)
    assert "line 2: annotation removed: '<<< this GPU was slow'" in got
    assert "line 4: comment line skipped: \"# the poster's comment\"" in got
    assert any(n.startswith("line 7: elision skipped") for n in got)
    assert len(m.gpus) == 8 and m.gpus[0].cpu_affinity == "0-47,96-143" and m.gpus[0].numa_affinity == 0
    assert m.level("GPU0", "NIC0") == "PIX" and m.level("GPU7", "NIC7") == "PIX"


def test_elided_rows_are_unknown_and_the_rest_is_read():
    lines = lines_of(H100)
    del lines[4:7]  # GPU3..GPU5 rows left out by the poster
    lines.insert(4, "....")
    m = parse_topo_matrix("\n".join(lines), "e.txt")
    assert any("missing GPU3, GPU4, GPU5" in n for n in notes(m))
    assert m.level("GPU3", "GPU0") == "NV18"  # from GPU0's row
    assert m.gpus[3].cpu_affinity is None and m.gpus[6].cpu_affinity == "48-95,144-191"


def test_fused_cell_level_and_affinity():
    """`PH0-115`: the affinity overwrote the B of PHB (nvidia-smi on wide cpulists)."""
    text = ("        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
            "GPU0     X      SYS     PH0-115        0               N/A\n"
            "GPU1    SYS      X      NOD0-115       0               N/A\n"
            "NIC0    PHB     NODE     X\n")
    m = parse_topo_matrix(text, "f.txt")
    assert m.level("GPU0", "NIC0") == "PHB" and m.level("GPU1", "NIC0") == "NODE"
    assert [g.cpu_affinity for g in m.gpus] == ["0-115", "0-115"]
    assert [g.numa_affinity for g in m.gpus] == [0, 0]


def test_space_aligned_empty_cpu_affinity_resolved_by_column():
    """Spaces instead of tabs: `0  N/A` under NUMA Affinity / GPU NUMA ID with an empty CPU
    Affinity cell; only the header's column positions tell which is which."""
    text = ("        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
            "GPU0     X      NV4                     0               N/A\n"
            "GPU1    NV4      X      0-31            0               N/A\n")
    m = parse_topo_matrix(text, "s.txt")
    g0, g1 = m.gpus
    assert g0.cpu_affinity is None and g0.numa_affinity == 0 and "gpu_numa_id" in g0.unknown
    assert g0.unknown["cpu_affinity"] == "empty in the source"
    assert (g1.cpu_affinity, g1.numa_affinity) == ("0-31", 0)


def test_numa_affinity_range_and_list():
    text = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tNV18\t0-71\t0-1\tN/A\n"
            "GPU1\tNV18\t X \t0-71\t0,2\tN/A\n")
    m = parse_topo_matrix(text, "n.txt")
    assert [g.numa_nodes for g in m.gpus] == ["0-1", "0,2"]
    assert all(g.numa_affinity is None and g.unknown["numa_affinity"].startswith("spans NUMA nodes") for g in m.gpus)


def test_header_without_leading_whitespace_and_ansi_colour():
    lines = lines_of(A6000)
    lines[0] = "\x1b[4m" + lines[0].lstrip("\t") + "\x1b[0m"
    lines[1] = "\x1b[1m" + lines[1]
    m = parse_topo_matrix("\n".join(lines), "h.txt")
    assert [g.label for g in m.gpus] == ["GPU0", "GPU1", "GPU2"]
    assert m.level("GPU0", "GPU1") == "NV4" and [g.cpu_affinity for g in m.gpus] == ["0-31,64-95"] * 3


def test_redacted_cells_and_uuids_are_unknown():
    lines = lines_of(A6000)
    lines[1] = lines[1].replace("NODE", "xxxx", 1)
    m = parse_topo_matrix("\n".join(lines), "r.txt")
    assert m.level("GPU0", "GPU2") == "NODE"  # the mirror cell in GPU2's row
    assert any("blanked out ('xxxx')" in n for n in notes(m))
    lst = parse_smi_list("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)\n"
                         "GPU 1: NVIDIA H100 80GB HBM3 (UUID: <redacted>)\n", "l.txt")
    assert [g.uuid for g in lst.gpus] == [None, None]
    nv = parse_nvlink("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-xxxx)\n\t Link 0: 26.562 GB/s\n", "n.txt")
    assert nv.gpus[0].uuid is None
    q = parse_smi_query(read_path(evidence("q_excerpt_gpu0_of_8_h100_sxm_hgx_01.txt"))
                        .replace("Serial Number", "Serial Number                         : xxxxxxxxxxxx\n    Old Serial"), "q")
    assert q.gpus[0].serial is None and q.gpus[0].unknown["serial"] == "redacted in the source"


def test_two_redacted_pastes_are_not_one_gpu():
    """Two hosts whose pastes both redact the UUID: no identity, so nothing to call a duplicate."""
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)\n"
    a = import_texts([("a.L.txt", text)])
    b = import_texts([("b.L.txt", text)])
    for h in (a, b):
        g = h.facts["gpus"]["list"][0]
        assert g["uuid"] is None and g["unknown"]["uuid"] == "redacted in the source"


def test_odd_lines_in_nvlink_and_L_are_skipped():
    text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)   <-- the one we rent\n"
            "\t Link 0: 26.562 GB/s\n"
            "\t ...\n"
            "\t Link 17: 26.562 GB/s\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2\n")
    nv = parse_nvlink(text, "n.txt")
    assert [lk.link for lk in nv.gpus[0].links] == [0, 17] and nv.gpus[0].uuid == "GPU-1"
    assert any(n.startswith("line 1: annotation removed") for n in notes(nv))
    assert any(n.startswith("line 3: elision skipped") for n in notes(nv))


def test_real_truncated_and_unindented_topo_pastes():
    a = parse_topo_matrix(read_path(evidence("topo_8x_h100_9nic_numa_0_3_cut_01.txt")), "a")
    assert len(a.gpus) == 8 and len(a.nics) == 9
    pairs = {(x.label, y.label): a.level(x.label, y.label) for x in a.gpus for y in a.gpus if x != y}
    # GPU6's row is cut after its X and GPU7's row is missing: only that pair is in neither row
    assert pairs.pop(("GPU6", "GPU7")) is None and pairs.pop(("GPU7", "GPU6")) is None
    assert set(pairs.values()) == {"NV18"}
    assert [g.numa_affinity for g in a.gpus][:6] == [0, 0, 0, 1, 2, 2] and a.gpus[7].cpu_affinity is None
    assert a.level("GPU3", "NIC4") == "PIX" and a.level("NIC4", "GPU3") == "PIX"
    b = parse_topo_matrix(read_path(evidence("topo_8x_nv12_18nic_header_col0_cut_01.txt")), "b")
    assert len(b.gpus) == 8 and len(b.nics) == 18
    pairs = {(int(x.label[3:]), int(y.label[3:])): b.level(x.label, y.label) for x in b.gpus for y in b.gpus if x.index < y.index}
    # rows GPU5..7 are not in the copy: the pairs among them are in no row
    assert {k for k, v in pairs.items() if v is None} == {(5, 6), (5, 7), (6, 7)}
    assert {v for v in pairs.values() if v} == {"NV12"}
    assert (b.gpus[0].cpu_affinity, b.gpus[0].numa_affinity) == ("48-63,176-191", 3)
    assert b.level("GPU0", "NIC5") == "PXB" and b.level("GPU2", "NIC1") == "PXB"


def test_elided_or_gapped_nvlink_listing_claims_no_absent_links():
    lines = lines_of("nvlink_s_i0_h100_sxm_18links_01.txt")
    first = next(i for i, x in enumerate(lines) if "Link 5:" in x)
    elided = [*lines[:first], "         ...", *lines[first + 8:]]
    g = import_texts([("e", "\n".join(elided))]).facts["nvlink"]["gpus"][0]
    assert g["links_total"] is None and g["links_up"] == 10 and "partial listing" in g["unknown"]["links_total"]
    gapped = lines[:first] + lines[first + 8:]  # the same cut without a marker: link numbers jump 4 -> 13
    g = import_texts([("g", "\n".join(gapped))]).facts["nvlink"]["gpus"][0]
    assert g["links_total"] is None
    whole = import_texts([("w", "\n".join(lines))]).facts["nvlink"]["gpus"][0]
    assert (whole["links_total"], whole["links_up"]) == (18, 18)


def test_q_excerpt_without_banner_is_a_lower_bound():
    text = read_path(evidence("q_excerpt_gpu0_of_8_h100_sxm_hgx_01.txt"))
    block = text[text.index("GPU 00000000:18:00.0"):]
    from orchestrator.facts.textparse import detect_kind

    assert detect_kind(block) == "smi_query"
    g = import_texts([("q", block)]).facts["gpus"]
    assert g["count"] is None and g["count_at_least"] == 1  # no "Attached GPUs": part of the host
    assert g["list"][0]["bus_id"] == "0000:18:00.0" and g["list"][0]["model"] == "H100-SXM"


def test_redacted_nic_legend_name_is_unknown():
    text = read_path(evidence(H100)).replace("NIC0: mlx5_0", "NIC0: xxxxxx")
    m = parse_topo_matrix(text, "r")
    assert m.nics[0].name is None and m.nics[0].unknown["name"] == "redacted in the source"
    assert m.nics[1].name == "mlx5_1"


def test_elided_L_listing_is_a_lower_bound():
    lines = [f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d}-1111-2222-3333-444444444444)" for i in range(8)]
    g = import_texts([("l", "\n".join([*lines[:2], "...", *lines[6:]]))]).facts["gpus"]
    assert g["count"] is None and g["count_at_least"] == 8 and len(g["list"]) == 4
    assert import_texts([("l", "\n".join(lines))]).facts["gpus"]["count"] == 8
    gap = import_texts([("l", "\n".join([lines[0], lines[3]]))]).facts["gpus"]  # a -L pasted in part
    assert gap["count"] is None and gap["count_at_least"] == 4
