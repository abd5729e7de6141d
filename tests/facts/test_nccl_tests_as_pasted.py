"""nccl-tests as people paste them (issue 48, item 4): a `Using devices` list trimmed to its last
rank lines is "at least N ranks" and no GPU list; `#wrong` printed by %g in e-notation is read; a
table whose first rows are size 0 keeps them; the op is taken from the binary name with a suffix
(`all_gather_perf_mpi`).  The variants are built from the real outputs in tests/fixtures/evidence
(provenance in its SOURCES.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.facts.textparse.bench import parse_nccl_tests
from orchestrator.facts.textparse.importer import import_texts
from tests.support.fleet import Cli

EVIDENCE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "evidence"
# real outputs with a `# Using devices` list: (file, ranks listed)
LISTED = [("nccl_alltoall_8x_h20_3e_inplace_na_nccltests314_01.txt", 8),
          ("nccl_all_reduce_2x8_h100_a3mega_01.txt", 16),
          ("nccl_broadcast_2x_v100_pcie_tcp_cut_01.txt", 2)]
_RANK = re.compile(r"^#?\s*Rank\s+\d+")


def _text(name: str) -> str:
    return (EVIDENCE / name).read_text()


def _trim(text: str, keep: int) -> str:
    """The output with only the last `keep` rank lines of its device list left."""
    lines = text.splitlines()
    ranks = [i for i, x in enumerate(lines) if _RANK.match(x.strip())]
    drop = set(ranks[:-keep])
    return "\n".join(x for i, x in enumerate(lines) if i not in drop) + "\n"


def _facts(text: str, name: str = "paste.txt") -> dict[str, Any]:
    host = import_texts([(name, text)], None)
    assert host.errors == [], host.errors
    return dict(host.facts)


@pytest.mark.parametrize(("name", "ranks"), LISTED)
def test_the_whole_list_gives_its_ranks(name: str, ranks: int) -> None:
    run = parse_nccl_tests(_text(name))
    assert run.complete and run.ranks == ranks and run.ranks_at_least is None


@pytest.mark.parametrize(("name", "ranks", "keep"), [(n, r, k) for n, r in LISTED for k in (1, 2) if k < r])
def test_a_list_trimmed_to_its_last_ranks_is_at_least_n_and_no_gpu_list(name: str, ranks: int, keep: int) -> None:
    """Before: read as `keep` ranks, and a one-host paste as a host whose only GPU is index N-1."""
    text = _trim(_text(name), keep)
    run = parse_nccl_tests(text)
    assert (run.ranks, run.ranks_at_least, run.complete) == (None, ranks, False)
    assert any(f"at least {ranks} ranks" in n.text for n in run.notes)
    facts = _facts(text, name)
    assert "gpus" not in facts
    sec = facts["nccl"]
    assert sec["ranks"] is None and sec["ranks_at_least"] == ranks and sec["gpu_count"] is None
    assert f"at least {ranks} ranks" in sec["gpu_count_unknown"] and "None" not in sec["gpu_count_unknown"]


def test_a_list_missing_its_middle_is_at_least_its_highest_rank() -> None:
    lines = _text(LISTED[0][0]).splitlines()
    text = "\n".join(x for x in lines if not re.match(r"^#\s*Rank\s+[2-5]\s", x)) + "\n"
    run = parse_nccl_tests(text)
    assert (run.ranks, run.ranks_at_least) == (None, 8)


# %g prints a count of six digits or more in e-notation; whole counts below that as themselves
WRONG = [("1.04858e+06", 1048580), ("2.09715e+06", 2097150), ("1e+06", 1000000), ("3.35544e+07", 33554400),
         ("12", 12), ("0", 0)]


@pytest.mark.parametrize(("cell", "count"), WRONG)
def test_wrong_in_e_notation_is_a_count(cell: str, count: int) -> None:
    """Before: any #wrong that was not a plain integer (or zero) was read as unknown."""
    text = _text("nccl_all_reduce_2x8_h100_a3mega_01.txt")
    lines = text.splitlines()
    i = next(k for k, x in enumerate(lines) if x.split()[:1] == ["1048576"])
    toks = lines[i].split()
    assert toks[8] == "0"  # size count type redop root time algbw busbw #wrong
    toks[8] = cell
    lines[i] = "  ".join(toks)
    run = parse_nccl_tests("\n".join(lines) + "\n")
    [row] = [r for r in run.results if r["size_bytes"] == 1048576 and not r["in_place"]]
    assert row["wrong"] == count
    if count:
        assert _facts("\n".join(lines) + "\n")["nccl"]["results"]
        assert not any("wrong" in n.text for n in run.notes)


@pytest.mark.parametrize("cell", ["5e-07", "2e-06", "0e+00"])
def test_the_old_error_column_stays_a_deviation(cell: str) -> None:
    text = ("#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
            f"     1048576        262144     float     sum    98.10   10.69   16.03  {cell}    97.32   10.77   16.16  {cell}\n")
    [out, inp] = parse_nccl_tests(text).results
    assert out["wrong"] == inp["wrong"] == (0 if float(cell) == 0 else None)


ZERO_ROWS = [
    "           0             0     float    none      -1     0.07    0.00    0.00      0     0.06    0.00    0.00    N/A",
    "           0             0     float    none      -1     0.00    -nan    -nan      0     0.00    -nan    -nan    N/A",
    "           0             0     float    none      -1     0.00     inf     inf      0     0.00     inf     inf    N/A",
]


@pytest.mark.parametrize("first", ZERO_ROWS)
@pytest.mark.parametrize("second", ZERO_ROWS)
def test_an_alltoall_table_starting_with_two_size_0_rows_keeps_both(first: str, second: str) -> None:
    """alltoall's smallest sizes round down to no element per rank: two rows of size 0 (0/0 printed
    as `-nan` or `inf` by some builds).  Before: a `-nan` row was refused and lost."""
    lines = _text("nccl_alltoall_8x_h20_3e_inplace_na_nccltests314_01.txt").splitlines()
    i = next(k for k, x in enumerate(lines) if x.split()[:1] == ["1048576"])
    run = parse_nccl_tests("\n".join([*lines[:i], first, second, *lines[i:]]) + "\n")
    sizes = [r["size_bytes"] for r in run.results if not r["in_place"]]
    assert sizes[:3] == [0, 0, 1048576]
    assert all(r["busbw_gbps"] in (0.0, None) for r in run.results if r["size_bytes"] == 0)
    assert not any("left out" in n.text for n in run.notes)


def test_a_nan_in_a_measured_row_still_costs_that_row() -> None:
    lines = _text("nccl_alltoall_8x_h20_3e_inplace_na_nccltests314_01.txt").splitlines()
    i = next(k for k, x in enumerate(lines) if x.split()[:1] == ["1048576"])
    lines[i] = lines[i].replace("18.04", "-nan")
    run = parse_nccl_tests("\n".join(lines) + "\n")
    assert 1048576 not in [r["size_bytes"] for r in run.results]
    assert any("left out" in n.text for n in run.notes)


@pytest.mark.parametrize(("command", "op"), [
    ("./build/all_gather_perf_mpi -b 8 -e 16G -f 2 -g 1 -n 50", "all_gather"),
    ("/usr/local/bin/alltoall_perf_mpi --nthreads 1 --ngpus 1 --minbytes 128", "alltoall"),
    ("srun --mpi=pmix /opt/nccl-tests/build/reduce_scatter_perf_mpi -b 1M -e 1G", "reduce_scatter"),
    ("mpirun -np 8 ./all_gather_perf -b 1M -e 1G", "all_gather"),
    ("$ ./build/alltoall_perf_mpi_cuda12 -b 1M", "alltoall"),
])
def test_the_op_is_taken_from_the_binary_name(command: str, op: str) -> None:
    """The alltoall columns alone cannot tell all_gather from alltoall; the command line can.
    Before: a binary built with NAME_SUFFIX (`_perf_mpi`) named no op."""
    text = _text("nccl_alltoall_8x_h20_3e_inplace_na_nccltests314_01.txt")
    assert parse_nccl_tests(text).op is None
    assert parse_nccl_tests(command + "\n" + text).op == op
    assert {r["op"] for r in _facts(command + "\n" + text)["nccl"]["results"]} == {op}


def test_probe_import_of_a_trimmed_paste_states_no_gpus(tmp_path: Path) -> None:
    path = tmp_path / "trimmed.txt"
    path.write_text(_trim(_text(LISTED[0][0]), 1))
    res = Cli.create(tmp_path).run("import", str(path), "--results", str(tmp_path / "runs"), "--format", "json")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and '"gpus": {' not in res.stdout
    assert "at least 8 ranks" in res.stdout


def _wrapped(text: str, at: int) -> str:
    """A terminal too narrow for the table: every result row continues on the next line after `at` cells."""
    out: list[str] = []
    for x in text.splitlines():
        toks = x.split()
        if toks[:1] and toks[0].isdigit() and len(toks) >= 11:
            out += ["  ".join(toks[:at]), "    " + "  ".join(toks[at:])]
        else:
            out.append(x)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(("name", "ranks"), LISTED)
@pytest.mark.parametrize("at", [5, 7, 9])
def test_a_rewrapped_table_reads_as_the_original(name: str, ranks: int, at: int) -> None:
    """Before: every wrapped row was 'not an nccl-tests line' and the import had no result at all."""
    text = _text(name)
    whole, wrapped = parse_nccl_tests(text), parse_nccl_tests(_wrapped(text, at))
    assert wrapped.results == whole.results and wrapped.ranks == whole.ranks == ranks


@pytest.mark.parametrize(("name", "ranks"), LISTED[:2])  # the third has one row: nothing would be left
def test_a_table_cut_inside_its_last_row_keeps_the_rows_before(name: str, ranks: int) -> None:
    lines = _text(name).splitlines()
    last = max(i for i, x in enumerate(lines) if x.split()[:1] and x.split()[0].isdigit() and len(x.split()) >= 11)
    cut = "\n".join([*lines[:last], "  ".join(lines[last].split()[:6])]) + "\n"
    whole, run = parse_nccl_tests(_text(name)), parse_nccl_tests(cut)
    assert run.results == [r for r in whole.results if r["size_bytes"] != whole.results[-1]["size_bytes"]]
    assert any("not an nccl-tests line" in n.text for n in run.notes)


def test_a_table_cut_before_its_only_row_is_one_clear_error() -> None:
    lines = _text(LISTED[2][0]).splitlines()
    host = import_texts([("cut.txt", "\n".join([*lines[:-1], "  ".join(lines[-1].split()[:6])]) + "\n")], "nccl_tests")
    assert len(host.errors) == 1 and "no nccl-tests result row" in host.errors[0] and "Traceback" not in host.errors[0]


@pytest.mark.parametrize(("col", "cell", "key", "value"), [
    (5, "2.032e+02", "time_us", 203.2), (6, "5.16e+00", "algbw_gbps", 5.16), (7, "9.68e+00", "busbw_gbps", 9.68),
    (9, "2.072e+02", "time_us", 207.2),
])
def test_e_notation_reads_in_every_figure_column(col: int, cell: str, key: str, value: float) -> None:
    lines = _text("nccl_all_reduce_2x8_h100_a3mega_01.txt").splitlines()
    i = next(k for k, x in enumerate(lines) if x.split()[:1] == ["1048576"])
    toks = lines[i].split()
    toks[col] = cell
    lines[i] = "  ".join(toks)
    rows = [r for r in parse_nccl_tests("\n".join(lines) + "\n").results if r["size_bytes"] == 1048576]
    assert rows[col >= 9][key] == value
