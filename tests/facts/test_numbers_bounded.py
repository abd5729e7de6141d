"""Numbers are bounded at the parser (issue 45 item 4; docs/reliability.md "Trust boundary").

Every parser of host text, and every envelope figure a check compares, reads its numbers through
facts/numbers.py: a number of 5,000 digits, 1e400, NaN, Infinity, a negative or absurd figure,
`12abc`, an empty cell, a 1 MiB line or a 1 MiB number costs only its own row (or field), never
the file, the host or the run, and never becomes a measurement.  Each class is tried on a real
output (tests/fixtures/evidence, tests/fixtures/fabric) at one row, with the rows around it
checked to survive."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.facts import numbers
from orchestrator.facts.normalize import normalize_host
from orchestrator.facts.normalize.budget import bound
from orchestrator.facts.normalize.nic import rate_gbps
from orchestrator.facts.numbers import GPU_GBYTES, NET_GBITS, read_float, read_int
from orchestrator.facts.textparse import TextParseError, import_texts, parse_text
from orchestrator.facts.textparse.common import MAX_LINE

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "tests" / "fixtures" / "evidence"
FABRIC = ROOT / "tests" / "fixtures" / "fabric"

MIB = 1 << 20
# The hostile number classes: each put where one row's figure stands.
HOSTILE = {
    "5000 digits": "9" * 5000,
    "1e400": "1e400",
    "nan": "nan",
    "NaN": "NaN",
    "inf": "inf",
    "-inf": "-inf",
    "negative": "-5",
    "1e30": "1e30",
    "12abc": "12abc",
    "empty": "",
    "1 MiB number": "9" * MIB,
}
LONG_LINE = "x" * MIB  # inserted above the row instead: it must cost only itself


@dataclass(frozen=True)
class Case:
    """A real output, the row to spoil (a regex of its line, the token's column) and what the parse keeps."""

    fixture: Path | str  # a real output, or (no fixture has the field) a text written here
    kind: str
    row: str
    column: int
    figures: Callable[[Any], list[float]]  # every figure the parse keeps as a measurement
    ceiling: float
    per_row: int = 1  # figures one row holds (nccl-tests: out-of-place and in-place)
    floor: float = 0
    # A table output (nvidia-smi, ibstat) refuses a file with a line past MAX_LINE as a whole, with
    # one message naming the line (tests/facts/test_textparse_malformed.py holds that); logs skip it.
    table: bool = False


SMI_CSV = ("index, name, power.draw [W], temperature.gpu\n" +
           "".join(f"{i}, NVIDIA H100 80GB HBM3, 70.50 W, {35 + i}\n" for i in range(4)))


def _perftest(log: Any) -> list[float]:
    return [r["bw_avg_gbps"] for run in log.runs for r in run.rows]


def _nccl(run: Any) -> list[float]:
    return [r["busbw_gbps"] for r in run.results if r["busbw_gbps"] is not None]


def _nccl_sizes(run: Any) -> list[float]:
    return [r["size_bytes"] for r in run.results]


def _matrix_cells(rows: list[list[float | None]]) -> list[float]:
    return [v for row in rows for v in row if v is not None]


def _nvbandwidth(nvb: Any) -> list[float]:
    return [v for runs in nvb.testcases.values() for _, rows in runs for v in _matrix_cells(rows)]


def _p2p(bw: Any) -> list[float]:
    return [v for key, m in bw.matrices.items() if "gbps" in key for v in _matrix_cells(m)]


def _nvlink(rep: Any) -> list[float]:
    return [lk.speed_gbps for g in rep.gpus for lk in g.links if lk.speed_gbps is not None]


def _ibstat(rep: Any) -> list[float]:
    rates = [rate_gbps(p["rate"]) for d in rep.devices for p in d["ports"]]  # as the nic facts read it
    return [r for r in rates if r is not None]


def _smi_csv(q: Any) -> list[float]:
    return [g.temperature_c for g in q.gpus if g.temperature_c is not None]


CASES = {
    "perftest bw": Case(FABRIC / "ib_write_bw_a_hdr_cx6_2node_client_01.txt", "perftest", r"^\s*65536\s+5000\s", 3,
                        _perftest, NET_GBITS.hi),
    "perftest #bytes": Case(FABRIC / "ib_write_bw_a_hdr_cx6_2node_client_01.txt", "perftest", r"^\s*65536\s+5000\s", 0,
                            _perftest, NET_GBITS.hi),
    "nccl-tests busbw": Case(EVIDENCE / "nccl_all_reduce_2x8_h100_a3mega_01.txt", "nccl_tests",
                             r"^\s*1048576\s+262144\s+float", 7, _nccl, GPU_GBYTES.hi, 2),
    "nccl-tests size": Case(EVIDENCE / "nccl_all_reduce_2x8_h100_a3mega_01.txt", "nccl_tests",
                            r"^\s*1048576\s+262144\s+float", 0, _nccl_sizes, numbers.SIZE_BYTES.hi, 2),
    "nvbandwidth": Case(EVIDENCE / "nvbandwidth_8x_h100_sxm_multi_run_01.txt", "nvbandwidth", r"^ 1\s+\d", 3,
                        _nvbandwidth, max(GPU_GBYTES.hi, numbers.LATENCY_US.hi), 8),
    "p2pBandwidthLatencyTest": Case(EVIDENCE / "p2p_8x_h100_sxm_hgx_01.txt", "p2p_bandwidth_latency", r"^\s+1\s+\d", 3,
                                    _p2p, GPU_GBYTES.hi, 8),
    "nvlink -s": Case(EVIDENCE / "nvlink_s_v100_sxm2_8gpu_vastai_01.txt", "nvlink_status", r"Link 1: ", 2,
                      _nvlink, GPU_GBYTES.hi, table=True),
    "ibstat rate": Case(EVIDENCE / "ibstat_h20_cx6lx_mt4127_roce_down_arthurchiao_01.txt", "ibstat", r"Rate: 40", 1,
                        _ibstat, NET_GBITS.hi, table=True),
    "smi csv temperature": Case(SMI_CSV, "smi_query_csv", r"^1, ", -1, _smi_csv, numbers.TEMPERATURE_C.hi,
                                floor=numbers.TEMPERATURE_C.lo, table=True),
}


def _spoil(text: str, case: Case, token: str | None) -> tuple[str, int]:
    """`text` with the case's row's token replaced (token None: a 1 MiB line put above the row)."""
    lines = text.split("\n")
    i = next(n for n, line in enumerate(lines) if re.search(case.row, line))
    if token is None:
        return "\n".join([*lines[:i], LONG_LINE, *lines[i:]]), i
    a, b = [m.span() for m in re.finditer(r"\S+", lines[i])][case.column]
    lines[i] = lines[i][:a] + token + lines[i][b:]
    return "\n".join(lines), i


def _sane(values: list[float], case: Case) -> None:
    for v in values:
        assert isinstance(v, (int, float)) and math.isfinite(v) and case.floor <= v <= case.ceiling, v


@pytest.mark.parametrize("hostile", [*HOSTILE, "1 MiB line"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_number_costs_only_its_row(name: str, hostile: str) -> None:
    case = CASES[name]
    text = case.fixture if isinstance(case.fixture, str) else case.fixture.read_text()
    source = "smi.csv" if isinstance(case.fixture, str) else case.fixture.name
    _, good = parse_text(text, source, case.kind)
    before = case.figures(good)
    assert before, "the fixture's figures are read"
    spoiled, _ = _spoil(text, case, HOSTILE.get(hostile))
    if case.table and len(max(spoiled.split("\n"), key=len)) > MAX_LINE:
        with pytest.raises(TextParseError, match=r":\d+: line is \d+ characters long"):
            parse_text(spoiled, source, case.kind)
        return
    _, got = parse_text(spoiled, source, case.kind)  # no exception, no refused file
    after = case.figures(got)
    _sane(after, case)
    if hostile == "negative" and case.floor <= -5:
        assert float(HOSTILE[hostile]) in after  # a real reading (-5 C) of the field is kept
        return
    if hostile == "1 MiB line":
        assert after == before, "a long line cost more than itself"
    else:
        # the spoiled row is gone or its figure unknown; every other row is kept as it was
        assert 0 <= len(before) - len(after) <= case.per_row and set(after) <= set(before), (len(before), len(after))


def test_an_xid_after_a_one_mib_line_is_still_read() -> None:
    name = "dmesg_iso_xid48_63_94_peermem_gpud_01.txt"
    text = (EVIDENCE / name).read_text()
    codes = [e["code"] for e in import_texts([(name, text)], "kernel_log").facts["kmsg"]["events"] if e["kind"] == "xid"]
    assert 48 in codes
    lines = text.split("\n")
    at = next(i for i, x in enumerate(lines) if "Xid" in x)
    for long in ("x" * MIB, "9" * MIB, "NVRM: Xid (PCI:0000:19:00): " + "9" * MIB):
        spoiled = "\n".join([*lines[:at], long, *lines[at:]])
        host = import_texts([(name, spoiled)], "kernel_log")
        assert not host.errors, host.errors
        got = [e["code"] for e in host.facts["kmsg"]["events"] if e["kind"] == "xid"]
        assert got == codes
        assert any("over 16384 characters" in n for n in host.notes), host.notes


@pytest.mark.parametrize("code", ["9" * 5000, "99999999999999999999999", "1e400", "nan", "-5", "12abc"])
def test_a_hostile_xid_code_costs_only_its_line(code: str) -> None:
    name = "dmesg_iso_xid48_63_94_peermem_gpud_01.txt"
    text = (EVIDENCE / name).read_text()
    spoiled = text.replace("): 48, ", f"): {code}, ", 1)
    host = import_texts([(name, spoiled)], "kernel_log")
    assert not host.errors, host.errors
    codes = [e["code"] for e in host.facts["kmsg"]["events"] if e["kind"] == "xid"]
    assert 63 in codes and 94 in codes and all(isinstance(c, int) and 0 <= c < 1 << 22 for c in codes)


# ------------------------------------------------------------------------------ the readers


@pytest.mark.parametrize("text", [*HOSTILE.values(), "Infinity", "0x10", "²", "1_000", " 12 ", "+7", "1e5"])
def test_read_int_never_raises_and_bounds(text: str) -> None:
    value, why = read_int(text)
    if value is None:
        assert why and "None" not in why
    else:
        assert why is None and 0 <= value <= numbers.COUNT.hi and text.strip().isdigit()


@pytest.mark.parametrize("text", [*HOSTILE.values(), "Infinity", "1e308", "25000", "0x10", "1_000", "12.5.1"])
def test_read_float_refuses_what_is_no_finite_figure_in_range(text: str) -> None:
    value, why = read_float(text, GPU_GBYTES)
    assert value is None and why and "None" not in why


def test_read_float_takes_the_figures_tools_print() -> None:
    for text, want in (("23317.65", 23317.65), ("5e-07", 5e-07), ("0", 0.0), (" 195.603 ", 195.603), ("1.2E+03", 1200.0)):
        assert read_float(text, numbers.LATENCY_US) == (want, None)


# ------------------------------------------------------------------------------ envelopes


_BAD_FIGURES = [-5, -1e-9, 1e17, 25000.0, -1]


@pytest.mark.parametrize("bad", _BAD_FIGURES)
def test_an_envelope_s_negative_or_absurd_bandwidth_is_no_measurement(bad: float) -> None:
    good = {"op": "all_reduce", "size_bytes": 1 << 30, "count": 1 << 28, "dtype": "float", "redop": "sum",
            "time_us": 5000.0, "algbw_gbps": 200.0, "busbw_gbps": 350.0, "in_place": False, "wrong": 0}
    data = {"results": [good, {**good, "size_bytes": 1 << 29, "busbw_gbps": bad}]}
    facts, errors = normalize_host({"nccl": data})
    busbw = [r["busbw_gbps"] for r in facts["nccl"]["results"]]
    assert busbw == [350.0, None]  # the good record is kept, the bad figure unknown
    assert any("busbw_gbps refused" in e for e in errors), errors


@pytest.mark.parametrize("probe,data,path", [
    ("p2p", {"pairs": [{"src": 0, "dst": 1, "ce_gbps": -3.0}, {"src": 1, "dst": 0, "ce_gbps": 300.0}]}, "pairs.*.ce_gbps"),
    ("nvml", {"gpus": [{"temperature_c": 5000}, {"temperature_c": 40}]}, "gpus.*.temperature_c"),
    ("nic", {"net": [{"name": "eth0", "speed": -50}]}, "net.*.speed"),
    ("nic", {"infiniband": [{"name": "mlx5_0", "ports": [{"port": 1, "counters": {"symbol_error": -7}}]}]},
     "infiniband.*.ports.*.counters.*"),
    ("fabric", {"discover": {"hcas": [{"hca": "mlx5_0", "rate_gbps": 1e15}]}}, "discover.hcas.*.rate_gbps"),
])
def test_every_figure_of_an_envelope_is_checked_before_normalizing(probe: str, data: dict[str, Any], path: str) -> None:
    out, notes = bound(probe, data)
    assert len(notes) == 1 and path in notes[0] and "refused" in notes[0], notes
    assert out != data


def test_a_fabric_perftest_stdout_with_hostile_numbers_is_one_failed_measurement() -> None:
    from orchestrator.facts.normalize.fabric import measurement

    text = (FABRIC / "ib_write_bw_a_hdr_cx6_2node_client_01.txt").read_text()
    rec = {"test": "ib_write_bw", "round": 0, "rail": 0, "hca": "mlx5_0", "peer": "b", "role": "client"}
    for token in ("9" * 5000, "nan", "-5", "1e400"):
        # every row spoiled: no figure, one measurement refused as impossible (its sender is named:
        # fabric.answer.distrusted, issue 47); never an exception or a NaN
        spoiled = re.sub(r"(?m)^(\s*\d+\s+\d+\s+\S+\s+)\S+", lambda m, t=token: m.group(1) + t, text)
        got = measurement({**rec, "stdout": spoiled, "exit": 0})
        assert got is not None and got["value"] is None and got["error_kind"] == "impossible", got
        assert got["error"] and got["error"].startswith("row left out") and "\n" not in got["error"], got


@pytest.mark.parametrize("huge", [10**25, 10**400, -(10**400)])
def test_an_envelope_integer_of_hundreds_of_digits_is_refused_not_formatted(huge: int) -> None:
    # strict JSON reads integers of up to 4,300 digits: no float form, so a message must not convert one
    good = {"op": "all_reduce", "size_bytes": 1 << 30, "busbw_gbps": 350.0}
    facts, errors = normalize_host({"nccl": {"results": [good, {**good, "size_bytes": huge, "busbw_gbps": huge}]}})
    assert [r["size_bytes"] for r in facts["nccl"]["results"]] == [1 << 30]
    assert any("digits" in e and "size_bytes refused" in e for e in errors), errors
