"""Benchmark outputs -> dataclasses: p2pBandwidthLatencyTest (CUDA samples), nvbandwidth (text and
`--json`) and nccl-tests (`*_perf` text, with `#` headers or without, NCCL INFO lines and mpirun
noise mixed in; `-J` JSON).

Pure functions.  Every line that is not part of a table the parser knows is skipped with a note;
a table cut short keeps the cells it has (the rest are unknown).
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.normalize.budget import MAX_GPUS
from orchestrator.facts.numbers import (
    COUNT,
    GPU_GBYTES,
    INDEX,
    LATENCY_US,
    SIZE_BYTES,
    Bound,
    float_or_none,
    int_or_none,
    loads_numbers_as_found,
    read_float,
    read_int,
    value_float,
    value_int,
)
from orchestrator.facts.textparse.common import (
    Note,
    TextParseError,
    decode_input,
    lines_within,
    long_line_notes,
    norm_bus_id,
    untag,
)
from orchestrator.facts.textsafe import is_digits

_NA = ("N/A", "-")  # a cell the tool left unmeasured: unknown, no reason to note


def _num(tok: str, bound: Bound = GPU_GBYTES) -> float | None:
    return float_or_none(tok, bound)


def _gpu(tok: str) -> int:
    """A GPU index; one past any host's GPUs (so refused by the caller) when it is no index."""
    index = int_or_none(tok, INDEX)
    return MAX_GPUS if index is None else index


def _bound_of(key: str) -> Bound:
    """The range of a matrix's cells by the matrix's name (facts key or nvbandwidth unit)."""
    if "latency" in key or key in ("ns", "us"):
        return LATENCY_US
    return GPU_GBYTES if "gbps" in key or key == "GB/s" else COUNT


# ---------------------------------------------------------------------------------------------
# p2pBandwidthLatencyTest


@dataclass
class BenchDevice:
    index: int
    name: str | None
    bus_id: str | None


@dataclass
class BwLatency:
    devices: list[BenchDevice]
    can_access: dict[tuple[int, int], bool]
    matrices: dict[str, list[list[float | None]]]  # key (see _P2P_TITLES) -> n x n, row = source
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"


_DEVICE = re.compile(r"^\s*Device:\s*(\d+),\s*(.+?),\s*pciBusID:\s*([0-9a-fA-F]+),\s*pciDeviceID:\s*([0-9a-fA-F]+),"
                     r"\s*pciDomainID:\s*([0-9a-fA-F]+)")
_ACCESS = re.compile(r"^\s*Device=(\d+)\s+(CAN|CANNOT)\s+Access\s+Peer\s+Device=(\d+)", re.I)
# Title of each matrix -> facts key.  The CPU latency block has no title of its own: it follows
# the GPU block of the same title (`   CPU     0      1 ...`).
_P2P_TITLES = (
    (re.compile(r"Unidirectional P2P=Disabled Bandwidth", re.I), "ce_p2p_off_gbps"),
    (re.compile(r"Unidirectional P2P=Enabled Bandwidth", re.I), "ce_gbps"),
    (re.compile(r"Bidirectional P2P=Disabled Bandwidth", re.I), "bidir_p2p_off_gbps"),
    (re.compile(r"Bidirectional P2P=Enabled Bandwidth", re.I), "bidir_gbps"),
    (re.compile(r"P2P=Disabled Latency", re.I), "latency_p2p_off_us"),
    (re.compile(r"P2P=Enabled Latency", re.I), "latency_us"),
    (re.compile(r"P2P Connectivity Matrix", re.I), "connectivity"),
)


def _read_square(lines: list[str], start: int, n_hint: int | None, notes: list[Note], what: str,
                 skip: frozenset[int] = frozenset()) -> tuple[list[list[float | None]], int, int | None]:
    """Read `D\\D 0 1 ...` / `GPU 0 1 ...` / `0 1 ...` header plus rows from lines[start].
    Returns (matrix, next line index, column count).  `skip`: indexes of lines too long to read
    (blank now), passed over inside the table rather than ending it."""
    i = start
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines):
        return [], i, None
    head = lines[i].split()
    if head and not is_digits(head[0]):
        head = head[1:]
    if not head or not all(is_digits(t) for t in head):
        return [], i, None
    cols = [_gpu(t) for t in head]
    if max(cols) >= MAX_GPUS:  # a claim no host makes (a glitch or a forgery) must not size the matrix
        notes.append(Note(i + 1, f"{what}: GPU index {max(cols)} is beyond the {MAX_GPUS} a host can have: "
                                 "the table is ignored"))
        return [], i + 1, None
    n = len(cols)
    rows: dict[int, list[float | None]] = {}
    i += 1
    while i < len(lines):
        if i in skip:
            i += 1
            continue
        toks = lines[i].split()
        if not toks or not is_digits(toks[0]):
            break
        r = _gpu(toks[0])
        if r >= MAX_GPUS:
            notes.append(Note(i + 1, f"{what}: row {r} is beyond the {MAX_GPUS} GPUs a host can have: ignored"))
            i += 1
            continue
        vals: list[float | None] = []
        for t in toks[1:1 + n]:
            v, why = read_float(t, _bound_of(what))
            if v is None and t.upper() not in _NA:
                notes.append(Note(i + 1, f"{what}: value {t[:40]!r} left unknown: {why}"))
            vals.append(v)
        if len(vals) < n:
            notes.append(Note(i + 1, f"{what}: row {r} has {len(vals)} of {n} values (truncated?)"))
            vals += [None] * (n - len(vals))
        rows[r] = vals
        i += 1
    size = max([n, *(r + 1 for r in rows)]) if n_hint is None else max(n, min(n_hint, MAX_GPUS))
    matrix: list[list[float | None]] = [[None] * size for _ in range(size)]
    for r, vals in rows.items():
        for c, v in zip(cols, vals):
            if r < size and c < size:
                matrix[r][c] = v
    return matrix, i, n


def parse_p2p_bwlat(text: str | bytes, source: str = "<text>") -> BwLatency:
    text = decode_input(text, source) if isinstance(text, bytes) else text
    lines, long = lines_within(text)  # a long line costs only itself
    notes: list[Note] = long_line_notes(long)
    skip = frozenset(n - 1 for n in long)
    devices: dict[int, BenchDevice] = {}
    access: dict[tuple[int, int], bool] = {}
    matrices: dict[str, list[list[float | None]]] = {}
    i = 0
    last_key: str | None = None
    while i < len(lines):
        line = lines[i]
        m = _DEVICE.match(line)
        if m and _gpu(m.group(1)) >= MAX_GPUS:
            notes.append(Note(i + 1, f"device {m.group(1)} is beyond the {MAX_GPUS} GPUs a host can have: ignored"))
            i += 1
            continue
        if m:
            bus = norm_bus_id(f"{int(m.group(5), 16):04x}:{m.group(3)}:{m.group(4)}.0")
            devices[int(m.group(1))] = BenchDevice(int(m.group(1)), m.group(2).strip(), bus)
            i += 1
            continue
        m = _ACCESS.match(line)
        a, b = (int_or_none(m.group(1), INDEX), int_or_none(m.group(3), INDEX)) if m else (None, None)
        if m and a is not None and b is not None:
            access[(a, b)] = m.group(2).upper() == "CAN"
            i += 1
            continue
        key = next((k for rx, k in _P2P_TITLES if rx.search(line)), None)
        header = i + 1  # the matrix header follows its title line
        if key is None and last_key and line.split()[:1] == ["CPU"]:
            key = last_key.replace("latency", "latency_cpu")
            header = i  # the CPU line is itself the matrix header (no title line)
        if key is not None:
            mat, nxt, _ = _read_square(lines, header, len(devices) or None, notes, key, skip)
            if mat:
                matrices[key] = mat
                last_key = key if key.startswith("latency") else None
                i = nxt
                continue
        if line.strip() and not re.match(r"^\s*(\[P2P|\*\*\*NOTE|NOTE:|So you can|Performance can|\[|\d+\s*$)", line):
            notes.append(Note(i + 1, f"not part of a p2pBandwidthLatencyTest table, ignored: {line.strip()[:80]!r}"))
        i += 1
    if not devices and not matrices:
        raise TextParseError("no 'Device: N, NAME, pciBusID' line and no bandwidth matrix found", source, 1)
    n = max([*(d + 1 for d in devices), *(len(m) for m in matrices.values())])
    devs = [devices.get(k) or BenchDevice(k, None, None) for k in range(n)]
    return BwLatency(devs, access, matrices, notes, source)


# ---------------------------------------------------------------------------------------------
# nvbandwidth


@dataclass
class NvBandwidth:
    version: str | None
    driver_version: str | None
    cuda_version: str | None
    # testcase -> one entry per run: (description, rows); a row is a list of cells (None: N/A)
    testcases: dict[str, list[tuple[str, list[list[float | None]]]]]
    devices: dict[int, BenchDevice] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"


_NVB_DEVICE = re.compile(r"^\s*Device\s+(\d+)\s*:\s*(.+?)\s*(?:\(([0-9a-fA-F:.]+)\))?\s*$")


def parse_nvbandwidth(text: str | bytes, source: str = "<text>") -> NvBandwidth:
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if text.lstrip().startswith("{"):
        return _nvbandwidth_json(text, source)
    lines, long = lines_within(text)  # a long line costs only itself
    notes: list[Note] = long_line_notes(long)
    skip = frozenset(n - 1 for n in long)
    version = driver = cuda = None
    cases: dict[str, list[tuple[str, list[list[float | None]]]]] = {}
    devices: dict[int, BenchDevice] = {}
    current: str | None = None
    named: set[str] = set()  # testcases whose table of the current run was read
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        m = re.match(r"nvbandwidth Version:\s*(\S+)", s)
        if m:
            version = m.group(1)
        m = re.match(r"Driver Version:\s*(\S+)", s)
        if m:
            driver = m.group(1)
        m = re.match(r"CUDA Runtime Version:\s*(\S+)", s)
        if m:
            cuda = m.group(1)
        m = _NVB_DEVICE.match(s)
        if m and _gpu(m.group(1)) >= MAX_GPUS:
            m = None  # beyond any host's GPUs: a glitch or a forgery, never a size for the tables
        if m and not s.startswith("Device to"):
            bus = m.group(3)
            # nvbandwidth prints "(00000000:99:00)": domain, bus, device; the function is 0
            devices[int(m.group(1))] = BenchDevice(int(m.group(1)), m.group(2),
                                                    norm_bus_id(bus if "." in bus else bus + ".0") if bus else None)
        m = re.match(r"Running\s+(\w+)\.?", s)
        if m:
            current = m.group(1)
            named.discard(current)  # a repeated run of the same testcase
            i += 1
            continue
        if re.search(r"\((GB/s|ns|us)\)\s*$", s) and (current is None or current in named):
            # the "Running <testcase>." line was left out of the paste: the SUM line names the table
            later = next((re.match(r"SUM\s+(\w+)", x.strip()) for x in lines[i + 1:i + 40]
                          if x.strip().startswith("SUM ")), None)
            if later is not None:
                current = later.group(1)
                notes.append(Note(i + 1, f"table without its 'Running' line: named {current} from its SUM line"))
        if current and current not in named and re.search(r"\((GB/s|ns|us)\)\s*$", s):
            rows: list[list[float | None]] = []
            j = i + 1
            cols = lines[j].split() if j < len(lines) else []
            if cols and all(is_digits(c) for c in cols):
                j += 1
                while j < len(lines):
                    if j in skip:
                        j += 1
                        continue
                    toks = lines[j].split()
                    if not toks or not is_digits(toks[0]):
                        break
                    row = [_num(t, _bound_of(s.rsplit("(", 1)[-1].rstrip(")"))) for t in toks[1:]]
                    rows.append(row)
                    j += 1
                cases.setdefault(current, []).append((s, _within_budget(rows, notes, current, i + 1)))
                named.add(current)
                i = j
                continue
        if s and not re.match(r"^(#+|SUM |COEFFICIENT_OF_VARIATION |NOTE:|Performance can|Built from|CUDA |"
                              r"nvbandwidth|Driver Version|Device \d+|Waived|Running)", s):
            notes.append(Note(i + 1, f"not part of an nvbandwidth table, ignored: {s[:80]!r}"))
        i += 1
    if not cases and not devices:
        raise TextParseError("no nvbandwidth testcase table ('Running <testcase>.' and a matrix) found", source, 1)
    if not cases:
        notes.append(Note(None, "no testcase finished (no result table): only the device list is read"))
    return NvBandwidth(version, driver, cuda, cases, devices, notes, source)


def _nvbandwidth_json(text: str, source: str) -> NvBandwidth:
    try:
        doc = loads_numbers_as_found(text)
    except json.JSONDecodeError as e:
        raise TextParseError(f"not valid JSON ({e.msg}; truncated?)", source, e.lineno) from None
    top = doc.get("nvbandwidth", doc) if isinstance(doc, dict) else {}
    if not isinstance(top, dict):
        raise TextParseError("nvbandwidth JSON of another shape (no object of testcases)", source, 1)
    notes: list[Note] = []
    cases: dict[str, list[tuple[str, list[list[float | None]]]]] = {}
    for tc in top.get("testcases") or []:
        if not isinstance(tc, dict) or not tc.get("name"):
            continue
        if str(tc.get("status", "Passed")).lower() not in ("passed", "pass"):
            notes.append(Note(None, f"testcase {tc.get('name')}: status {tc.get('status')!r}, not read"))
            continue
        matrix = tc.get("bandwidth_matrix") or tc.get("latency_matrix") or []
        bound = GPU_GBYTES if tc.get("bandwidth_matrix") else LATENCY_US
        rows = [[value_float(c, bound)[0] for c in r] for r in matrix if isinstance(r, list)] \
            if isinstance(matrix, list) else []
        rows = _within_budget(rows, notes, str(tc["name"]), None)
        cases.setdefault(str(tc["name"]), []).append((str(tc.get("bandwidth_description") or
                                                          tc.get("latency_description") or ""), rows))
    if not cases:
        raise TextParseError("nvbandwidth JSON without a passed testcase", source, 1)
    return NvBandwidth(top.get("version"), top.get("Driver Version") or top.get("driver_version"),
                       top.get("CUDA Runtime Version"), cases, {}, notes, source)


def _within_budget(rows: list[list[float | None]], notes: list[Note], what: str, line: int | None
                   ) -> list[list[float | None]]:
    """A GPU x GPU table cut to the GPUs a host can have, as the live probe's data is
    (facts/normalize/budget.py): a table naming 300 GPUs is a glitch or a forgery, and every
    check of the pairs would pay for it squared."""
    widest = max([len(rows), *map(len, rows)])
    if widest <= MAX_GPUS:
        return rows
    notes.append(Note(line, f"{what}: a table of {widest} GPUs, beyond the {MAX_GPUS} a host can have: "
                            f"only the first {MAX_GPUS} are read"))
    return [r[:MAX_GPUS] for r in rows[:MAX_GPUS]]


def nvbandwidth_median(runs: list[tuple[str, list[list[float | None]]]]) -> tuple[str, list[list[float | None]]]:
    """Repeated runs of one testcase -> one matrix: the median of each cell over the runs that have it."""
    desc = runs[0][0]
    height = max(len(r) for _, r in runs)
    width = max((len(row) for _, r in runs for row in r), default=0)
    out: list[list[float | None]] = []
    for a in range(height):
        row: list[float | None] = []
        for b in range(width):
            vals = [r[a][b] for _, r in runs if a < len(r) and b < len(r[a]) and r[a][b] is not None]
            row.append(round(statistics.median([v for v in vals if v is not None]), 2) if vals else None)
        out.append(row)
    return desc, out


# ---------------------------------------------------------------------------------------------
# nccl-tests


@dataclass
class NcclRun:
    op: str | None  # all_reduce, all_gather, ... (from the command line or the binary name)
    version: str | None
    ranks: int | None  # devices listed under "Using devices"
    hosts: list[str]
    devices: list[dict[str, Any]]  # rank, host, device, bus_id, name
    results: list[dict[str, Any]]
    avg_busbw_gbps: float | None
    out_of_bounds: int | None  # "# Out of bounds values : N OK|FAILED"
    transports: Counter[str] = field(default_factory=Counter)
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"
    # the rank lines do not run 0..N-1 (a poster kept the last rank's line alone): at least this
    # many ranks, `ranks` None, and the devices listed are not all of any host's GPUs
    ranks_at_least: int | None = None
    # the NCCL INFO lines as printed, for the nccl normalizer's log reader (transport, channels)
    info_lines: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether the `Using devices` list names every rank (and so every GPU of a one-host run)."""
        return self.ranks_at_least is None


NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv",
            "scatter", "gather", "hypercube")
_OP = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv|scatter|gather|"
                 r"hypercube)_perf(?:\b|_)")  # all_gather_perf, all_gather_perf_mpi (make NAME_SUFFIX=_mpi)
_RANK = re.compile(r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[(?:0x)?([0-9a-fA-F:]+)\]\s+(.+?)\s*$")
_NCCL_VERSION = re.compile(r"NCCL version\s+(\d+\.\d+\.\d+)")
_TRANSPORT = re.compile(r"\bvia\s+(P2P/[\w/]+|NET/[\w/]+|SHM(?:/[\w/]+)?|NVLS|CollNet\w*)")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)")
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)")
_INFO = re.compile(r"\bNCCL (?:INFO|WARN)\b")
_DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
           "int", "bf16", "fp8_e4m3", "fp8_e5m2", "f8e4m3", "f8e5m2")


def _header_columns(s: str) -> list[str] | None:
    """`size count type redop root time algbw busbw #wrong time ...` -> column names, the second
    group prefixed `ip_` (in-place); None when the line is not the column header."""
    toks = s.lstrip("#").split()
    if toks[:3] != ["size", "count", "type"]:
        return None
    out: list[str] = []
    seen_time = 0
    for t in toks:
        if t == "time":
            seen_time += 1
        name = {"#wrong": "wrong"}.get(t, t)  # `error` (nccl-tests 1.x) is a deviation, not a count
        out.append(("ip_" if seen_time >= 2 else "") + name)
    return out


def _wrong(tok: str, deviation: bool = False) -> tuple[int | None, str | None]:
    """#wrong, a count of wrong elements nccl-tests prints with %g (`1.04858e+06` past 999999:
    six digits, so the count is read to that precision), or the old `error` column (`deviation`),
    the largest deviation printed as `5e-07` (within tolerance or not, "Out of bounds values"
    says): zero is none wrong, any other deviation counts nothing; N/A: not checked (-c 0).
    Without a header a fraction is read as a deviation, a whole figure as a count."""
    if tok.upper() in _NA:
        return None, None
    if re.fullmatch(r"-?\d+", tok):
        return read_int(tok, COUNT)
    v, why = read_float(tok, COUNT)
    if v is None or v == 0:
        return (0 if v == 0 else None), why
    return (int(v), None) if not deviation and v >= 1 and v == int(v) else (None, None)


def _layout(toks: list[str], cols: list[str] | None) -> list[str] | None:
    """The columns of a data row: the header's, or (no header seen, or it does not fit) the
    layouts nccl-tests has printed.  13 cells: redop and root; 12: redop (older) or root (rooted
    ops: broadcast, reduce); 11: neither (2.x)."""
    if cols is not None and len(cols) == len(toks):
        return cols
    tail = ["time", "algbw", "busbw", "wrong", "ip_time", "ip_algbw", "ip_busbw", "ip_wrong"]
    if len(toks) == 13:
        return ["size", "count", "type", "redop", "root", *tail]
    if len(toks) == 12:
        return ["size", "count", "type", "root" if re.fullmatch(r"-?\d+", toks[3]) else "redop", *tail]
    return ["size", "count", "type", *tail] if len(toks) == 11 else None


# a data row's figures: column -> range; a cell out of its range (or no number) costs the row
_ROW_FIGURES = (("time", LATENCY_US), ("algbw", GPU_GBYTES), ("busbw", GPU_GBYTES))


_NAN = re.compile(r"[-+]?(?:nan|inf)", re.I)


def _placement(row: dict[str, str], pre: str) -> tuple[dict[str, Any] | None, str | None]:
    """The figures of one placement (out-of-place "", in-place "ip_") of a row, or why not.
    A size-0 row (alltoall's smallest sizes round down to no element per rank) divides 0 by a
    time of 0 and prints `-nan` or `inf`: unknown, the row kept."""
    out: dict[str, Any] = {}
    empty = row.get("size") == "0"
    for col, bound in _ROW_FIGURES:
        tok = row.get(pre + col, "N/A")
        unknown = tok.upper() in _NA or (empty and bool(_NAN.fullmatch(tok)))
        out[col], why = (None, None) if unknown else read_float(tok, bound)
        if why is not None:
            return None, f"{pre}{col}: {why}"
    cell = next((c for c in (pre + "wrong", pre + "error") if c in row), None)
    wrong, why = _wrong(row[cell], deviation=cell.endswith("error")) if cell else (None, None)
    if why is not None:
        return None, f"{pre}wrong: {why}"
    return {"time_us": out["time"], "algbw_gbps": out["algbw"], "busbw_gbps": out["busbw"], "wrong": wrong}, None


def _result_rows(toks: list[str], cols: list[str] | None) -> tuple[list[dict[str, Any]] | None, str | None]:
    """One data row -> out-of-place and in-place records; (None, None) when it is not a data row,
    (None, why) when it is one with a number no nccl-tests prints (the row alone is left out)."""
    if len(toks) < 5 or not toks[0].lstrip("-").isdigit() or not toks[1].lstrip("-").isdigit() \
            or toks[2] not in _DTYPES:
        return None, None
    layout = _layout(toks, cols)
    if layout is None:
        return None, None
    row = dict(zip(layout, toks))
    size, why_size = read_int(row["size"], SIZE_BYTES)
    count, why_count = read_int(row["count"], COUNT)
    if size is None or count is None:
        return None, f"size: {why_size}" if size is None else f"count: {why_count}"
    root = read_int(row["root"], INDEX)[0] if "root" in row else None  # -1: no root (unrooted op)
    out = []
    for in_place, pre in ((False, ""), (True, "ip_")):
        if pre + "busbw" not in row:
            continue
        if in_place and all(row.get(pre + k, "N/A").upper() in _NA for k in ("time", "algbw", "busbw")):
            continue  # `N/A`: the op has no in-place form (alltoall, sendrecv): nothing was measured
        figures, why = _placement(row, pre)
        if figures is None:
            return None, why
        out.append({"size_bytes": size, "count": count, "dtype": row["type"], "redop": row.get("redop"),
                    "root": root, **figures, "in_place": in_place})
    return out, None


def parse_nccl_tests(text: str | bytes, source: str = "<text>") -> NcclRun:
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if text.lstrip().startswith(("{", "[")) and untag(text.lstrip())[0] is None:
        return _nccl_json(text, source)
    within, long = lines_within(text)  # a long line costs only itself
    tagged = [untag(x) for x in within]
    lines = unwrap_rows([x for _, x in tagged])
    # mpirun --tag-output: every rank's lines interleave; the results are those of the rank that printed them
    result_ranks = sorted({r for (r, x) in tagged if r is not None and _result_rows(x.lstrip("#").split(), None)[0]})
    notes: list[Note] = long_line_notes(long)
    op = version = None
    devices: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    avg = oob = None
    cols: list[str] | None = None
    transports: Counter[str] = Counter()
    info: list[str] = []
    skipped_info = 0
    for i, line in enumerate(lines, start=1):
        s = line.strip()
        if not s:
            continue
        m = _OP.search(s)
        if m and op is None:
            op = m.group(1)
        m = _NCCL_VERSION.search(s)
        if m:
            version = m.group(1)
            if s.startswith("NCCL version"):
                continue  # the version line rank 0 prints before the table
        if _INFO.search(s):
            t = _TRANSPORT.search(s)
            if t:
                transports[t.group(1)] += 1
            info.append(s)
            skipped_info += 1
            continue
        m = _RANK.match(s)
        if m:
            _rank_line(m, i, devices, notes)
            continue
        header = _header_columns(s)
        if header is not None:
            cols = header
            continue
        m = _AVG.match(s)
        if m:
            avg = _num(m.group(1), GPU_GBYTES)
            continue
        m = _OOB.match(s)
        if m:
            oob = int_or_none(m.group(1), COUNT)
            continue
        rows, why = _result_rows(s.lstrip("#").split(), cols)
        if why is not None:
            notes.append(Note(i, f"result row left out: {why}"))
            continue
        if rows is not None:
            rank = tagged[i - 1][0]
            if len(result_ranks) > 1 and rank != result_ranks[0]:
                notes.append(Note(i, f"result row of rank {rank} skipped: rank {result_ranks[0]}'s rows are read"))
                continue
            results.extend(rows)
            continue
        if not s.startswith("#"):
            notes.append(Note(i, f"not an nccl-tests line, ignored: {s[:80]!r}"))
    if skipped_info:
        notes.append(Note(None, f"{skipped_info} NCCL INFO/WARN line(s) skipped (transport read from them)"))
    if not results:
        raise TextParseError("no nccl-tests result row (size count type redop ... busbw) found", source, 1)
    if result_ranks:
        ranks = sorted({r for r, _ in tagged if r is not None})
        notes.append(Note(None, f"mpirun --tag-output prefixes removed (ranks {', '.join(map(str, ranks))})"))
    run = NcclRun(op, version, None, [], devices, results, avg, oob, transports, notes, source, info_lines=info)
    _finish(run)
    return run


_FIGURE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|N/A|[-+]?(?:nan|inf)", re.I)


def unwrap_rows(lines: list[str]) -> list[str]:
    """Result rows a narrow terminal wrapped, joined again: a row start (`size count type ...`)
    short of the 11 cells every nccl-tests layout has, followed by a line of figures alone that
    completes it to 11-13 cells.  The continuation is left blank, so line numbers hold."""
    out = list(lines)
    for i in range(len(out) - 1):
        toks = out[i].lstrip("#").split()
        if len(toks) >= 11 or len(toks) < 3 or not (toks[0].isdigit() and toks[1].isdigit() and toks[2] in _DTYPES):
            continue
        j = next((k for k in range(i + 1, len(out)) if out[k].strip()), None)
        if j is None:
            break
        more = out[j].split()
        if all(_FIGURE.fullmatch(t) for t in more) and 11 <= len(toks) + len(more) <= 13:
            out[i], out[j] = out[i] + " " + out[j].strip(), ""
    return out


def _rank_line(m: re.Match[str], i: int, devices: list[dict[str, Any]], notes: list[Note]) -> None:
    """One `Rank N ... on HOST device D [BUS] NAME` line into the device list."""
    bus = m.group(4)
    bus_id = norm_bus_id(bus + ".0") if bus.count(":") else None
    dev = {"rank": int_or_none(m.group(1), INDEX), "host": m.group(2), "device": int_or_none(m.group(3), INDEX),
           "bus_id": bus_id, "name": m.group(5)}
    if dev["rank"] is None or dev["device"] is None:
        notes.append(Note(i, f"rank line left out: rank or device {m.group(1)[:20]!r}/{m.group(3)[:20]!r} is no index"))
    elif dev not in devices:  # a header printed by several ranks lists the same devices again
        devices.append(dev)


def _finish(run: NcclRun) -> None:
    """What the whole table and device list say once read: hosts, ranks (or a lower bound where
    the list was trimmed), the op where the columns decide it, rows out of order."""
    run.hosts = list(dict.fromkeys(d["host"] for d in run.devices))
    run.ranks_at_least = listed_ranks_at_least(run.devices)
    run.ranks = len(run.devices) or None if run.ranks_at_least is None else None
    if run.ranks_at_least is not None:
        run.notes.append(Note(None, f"the rank lines stop short of ranks 0..{run.ranks_at_least - 1} (trimmed?): at "
                                    f"least {run.ranks_at_least} ranks; which GPUs ran is unknown (paste the whole "
                                    "`# Using devices` list)"))
    if run.op is None:
        run.op = op_from_columns(run.results, len(run.devices) or None)
    sizes = [r["size_bytes"] for r in run.results if not r["in_place"]]
    if any(b < a for a, b in zip(sizes, sizes[1:])):
        run.notes.append(Note(None, "sizes repeat out of order: several runs' rows interleave (nccl-tests built "
                                    "without MPI and started once per GPU?); every row is kept"))
    for row in run.results:
        row.pop("root", None)  # read for the op only: facts.nccl results are the probe's records


def listed_ranks_at_least(devices: list[dict[str, Any]]) -> int | None:
    """None when the rank lines name ranks 0..N-1 each (or none at all); else the ranks there
    must at least be (the highest listed + 1): a list cut to its last lines, or to one."""
    ranks = {d["rank"] for d in devices}
    if not ranks or ranks == set(range(len(ranks))):
        return None
    return max(ranks) + 1


# Bytes per element of nccl-tests' type names, to read what the size and count columns say of the op.
_TYPE_BYTES = {"int8": 1, "uint8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2,
               "bfloat16": 2, "bf16": 2, "int32": 4, "uint32": 4, "int": 4, "float": 4, "int64": 8, "uint64": 8,
               "double": 8}


def op_from_columns(results: list[dict[str, Any]], ranks: int | None) -> str | None:
    """The op where the columns alone decide it (nccl-tests prints `count` as size / element size
    for all_reduce and reduce, size / element size / ranks for reduce_scatter; a root of 0 or more
    only for the rooted broadcast and reduce); None where two ops print alike (all_gather, alltoall)."""
    rows = [r for r in results if r.get("size_bytes") and r.get("count") and r.get("dtype") in _TYPE_BYTES]
    if not rows:
        return None
    r = max(rows, key=lambda x: x["size_bytes"])
    per = r["count"] * _TYPE_BYTES[r["dtype"]]
    reduces = r.get("redop") not in (None, "none")
    root = r.get("root")
    if root is not None and root >= 0:
        return "reduce" if reduces else "broadcast"
    if reduces and per == r["size_bytes"]:
        return "all_reduce"
    if reduces and ranks and ranks > 1 and per * ranks == r["size_bytes"]:
        return "reduce_scatter"
    return None


def _nccl_json(text: str, source: str) -> NcclRun:
    """nccl-tests `-J FILE`: the same figures as the table, as records.  Keys are read by their
    spelling in lower case without `_` (busBw, bus_bw, busbw ...), so minor format revisions read."""
    try:
        doc = loads_numbers_as_found(text)
    except json.JSONDecodeError as e:
        raise TextParseError(f"not valid JSON ({e.msg}; truncated?)", source, e.lineno) from None

    def norm(d: dict[str, Any]) -> dict[str, Any]:
        return {re.sub(r"[_\- ]", "", str(k)).lower(): v for k, v in d.items()}

    top = norm(doc) if isinstance(doc, dict) else {}
    records = doc if isinstance(doc, list) else (top.get("results") or top.get("tests") or [])
    results: list[dict[str, Any]] = []
    notes: list[Note] = []
    op = top.get("collective") or top.get("op") or top.get("name")
    for rec in records if isinstance(records, list) else []:
        if not isinstance(rec, dict):
            continue
        r = norm(rec)
        op = op or r.get("collective") or r.get("op") or r.get("name")
        placements = []
        for place, in_place in (("outofplace", False), ("inplace", True)):
            sub = r.get(place)
            if isinstance(sub, dict):
                placements.append((norm(sub), in_place))
        if not placements:
            placements = [(r, bool(r.get("inplace")) if not isinstance(r.get("inplace"), dict) else False)]
        for p, in_place in placements:
            record, why = _json_result(r, p, in_place)
            if record is not None:
                results.append(record)
            elif why is not None:
                notes.append(Note(None, f"a result record left out: {why}"))
    if not results:
        raise TextParseError("nccl-tests JSON without result records (size, algbw, busbw)", source, 1)
    avg = _float_or_none(top.get("avgbusbandwidth") or top.get("avgbusbw"))
    op_name = str(op).replace("_perf", "") if op else None
    return NcclRun(op_name, top.get("ncclversion") or top.get("version"), _int_or_none(top.get("nranks")), [], [],
                   results, avg, _int_or_none(top.get("outofbounds")), Counter(), notes, source)


def _json_result(r: dict[str, Any], p: dict[str, Any], in_place: bool) -> tuple[dict[str, Any] | None, str | None]:
    """One `-J` record's placement -> a result, or why it is left out (a size, count or figure out
    of its range); (None, None) for a record without a size."""
    size_raw = r.get("size") or r.get("sizebytes") or r.get("bytes")
    if size_raw is None:
        return None, None
    size, why = value_int(size_raw, SIZE_BYTES)
    if size is None:
        return None, f"size: {why}"
    figures: dict[str, float | None] = {}
    for name, raw, bound in (("time_us", p.get("time") or p.get("timeus"), LATENCY_US),
                             ("algbw_gbps", p.get("algbw"), GPU_GBYTES), ("busbw_gbps", p.get("busbw"), GPU_GBYTES)):
        figures[name], why = value_float(raw, bound) if raw is not None else (None, None)
        if why is not None:
            return None, f"{name}: {why}"
    return {"size_bytes": size, "count": _int_or_none(r.get("count")),
            "dtype": r.get("type") or r.get("dtype") or r.get("datatype"),
            "redop": r.get("redop") or r.get("op") if r.get("redop") else r.get("redop"),
            **figures, "in_place": in_place, "wrong": _int_or_none(p.get("wrong", p.get("nwrong", p.get("errors"))))}, None


def _int_or_none(v: Any) -> int | None:
    return value_int(v, COUNT)[0] if v is not None else None


def _float_or_none(v: Any) -> float | None:
    return value_float(v, GPU_GBYTES)[0] if v is not None else None
