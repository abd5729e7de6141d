"""perftest outputs (ib_write_bw, ib_write_lat, ib_send_bw, ib_send_lat, ib_read_bw ...) -> runs.

One parser for both roads: the fabric probe returns what the tools printed on the host and the
normalizer (facts/normalize/fabric.py) reads it here, and `probe import` reads a pasted output the
same way.  Pure functions.

What perftest prints: a banner with the test's title (`RDMA_Write BW Test`, `... Bidirectional BW
Test`, `... Latency Test`), `Key : value` settings two to a line, the local and remote QP
addresses (LID, QPN, GID), then a table: bandwidth as `#bytes #iterations BW peak[UNIT] BW
average[UNIT] MsgRate[Mpps]` (UNIT: Gb/sec with --report_gbits, else MB/sec, MiB/sec in newer
versions, both 2^20 bytes), latency as `#bytes #iterations t_min ... 99% percentile[usec] 99.9%
percentile[usec]` (`-D` runs print only t_avg and t_stdev).  Lines such as `Conflicting CPU
frequency values detected` land inside the table and are skipped.  A log may hold several runs
(a server's and a client's, one after the other): each title starts a run.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.model import FabricMeasure, PerftestAddress
from orchestrator.facts.numbers import (
    COUNT,
    LATENCY_US,
    NET_GBITS,
    SIZE_BYTES,
    Bound,
    float_or_none,
    int_or_none,
    read_float,
    read_int,
)
from orchestrator.facts.textparse.common import Note, TextParseError, decode_input, text_lines

# title -> (tool, kind); the Bidirectional variants set `bidirectional`
_TITLES = (
    (re.compile(r"^RDMA_Write (Bidirectional )?BW Test$"), "ib_write_bw", "bw"),
    (re.compile(r"^RDMA_Write Latency Test$"), "ib_write_lat", "lat"),
    (re.compile(r"^Send (Bidirectional )?BW Test$"), "ib_send_bw", "bw"),
    (re.compile(r"^Send Latency Test$"), "ib_send_lat", "lat"),
    (re.compile(r"^RDMA_Read (Bidirectional )?BW Test$"), "ib_read_bw", "bw"),
    (re.compile(r"^RDMA_Read Latency Test$"), "ib_read_lat", "lat"),
    (re.compile(r"^Atomic (?:FETCH_AND_ADD|CMP_AND_SWAP) (Bidirectional )?BW Test$"), "ib_atomic_bw", "bw"),
)
_SETTING = re.compile(r"([A-Za-z][A-Za-z0-9 .*/()_-]*?)\s*:\s*(\S[^\t]*?)\s*(?=\t|\s{2,}[A-Za-z]|$)")
_ADDRESS = re.compile(r"^(local|remote) address:\s*LID\s+(0x[0-9a-fA-F]+|\d+)\s+QPN\s+(0x[0-9a-fA-F]+)")
_GID = re.compile(r"^GID:\s*([0-9a-fA-F:]+)$")
_BW_HEAD = re.compile(r"^#bytes\s+#iterations\s+BW peak\[([^\]]+)\]\s+BW average\[([^\]]+)\]")
_LAT_HEAD = re.compile(r"^#bytes\s+#iterations\s+(t_\w+\[usec\].*)$")
# what the tools print when a run fails; the first that matches names the failure
ERRORS = (
    ("connect", re.compile(r"Couldn't connect to|Unable to open file descriptor for socket connection|"
                           r"Unable to init the socket connection|Failed to establish connection|Couldn't get rdma_cm", re.I)),
    ("gdr", re.compile(r"Couldn't allocate MR|ibv_reg_mr failed|failed to register|cuMemAlloc|"
                       r"Couldn't allocate CUDA|CUDA (?:is not|not) supported|use_cuda|dmabuf", re.I)),
    ("device", re.compile(r"No IB devices found|IB device \S+ not found|Couldn't get context for|"
                          r"Unable to find the Infiniband/RoCE device|Failed to open device", re.I)),
    ("resources", re.compile(r"Couldn't create IB resources|Failed to (?:create|modify) QP|Couldn't create QP", re.I)),
    ("bind", re.compile(r"Couldn't bind|Address already in use|Couldn't listen", re.I)),
)
_NOISE = re.compile(r"^(?:Conflicting CPU frequency values detected|WARNING:|Disabling dynamic polling|"
                    r"Requested SQ size might be too big|Current TX depth is|\*+$|\* Waiting for client|"
                    r"Waiting for client rdma_cm|Please run the same command|-+$)")
LID = Bound("LID", 0, 0xFFFF, "", "an InfiniBand LID is 16 bits")
MIB_BITS = 1048576 * 8 / 1e9  # perftest's MB/sec and MiB/sec are 2^20 bytes: Gb/s per unit


def _unit_factor(unit: str) -> float | None:
    """Gb/s per unit of a bandwidth column; None for a unit perftest does not print."""
    u = unit.strip().lower().replace("sec", "s")
    if u in ("gb/s",):
        return 1.0
    if u in ("mb/s", "mib/s"):
        return MIB_BITS
    if u in ("gib/s",):
        return 1073741824 * 8 / 1e9
    return None


def _figure(tok: str, factor: float, bound: Bound) -> tuple[float | None, str | None]:
    """A column's figure in Gb/s (or usec, factor 1), refused past `bound` (read_float's reasons)."""
    value, why = read_float(tok, Bound(bound.name, bound.lo / factor, bound.hi / factor, "", bound.why))
    return (value * factor, None) if value is not None else (None, why)


@dataclass
class PerftestRun:
    """One run of one tool: its settings, addresses and table (sizes ascending as printed)."""

    tool: str  # ib_write_bw ...
    kind: str  # "bw" | "lat"
    title: str
    bidirectional: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    local: dict[str, Any] = field(default_factory=dict)  # lid, qpn, gid
    remote: dict[str, Any] = field(default_factory=dict)
    unit: str | None = None  # the bandwidth unit as printed
    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # failure lines, as printed
    error_kind: str | None = None  # first of ERRORS that matched
    first_line: int = 0
    cut: str | None = None  # why the table ends early (a row short of its cells): the rest is unknown

    @property
    def device(self) -> str | None:
        return self.settings.get("Device")

    @property
    def link_type(self) -> str | None:
        """`IB` or `Ethernet` (RoCE) as the banner's `Link type` says; None where it is not printed."""
        return {"ib": "IB", "ethernet": "Ethernet"}.get(self.settings.get("Link type", "").strip().lower())

    def result(self) -> dict[str, Any] | None:
        """The figure a run stands for: a bandwidth run's largest message (the line rate), a
        latency run's smallest (what operators quote, 2 bytes by default)."""
        if not self.rows or (self.cut is not None and self.kind == "bw"):
            return None  # a cut bandwidth table lost its largest messages: no figure, never a smaller one's
        return max(self.rows, key=lambda r: r["size"]) if self.kind == "bw" else min(self.rows, key=lambda r: r["size"])


    def why_no_figure(self) -> str:
        """What a run without a figure says, failure lines first; '' when it has one."""
        if self.result() is not None:
            return ""
        if self.errors:
            return self.errors[0]
        if self.cut is not None:
            return f"{self.cut}: the largest message's figure is unknown; paste the whole {self.tool} output"
        return f"no result row (the output ends before its table): paste the whole {self.tool} output"


@dataclass
class PerftestLog:
    runs: list[PerftestRun]
    errors: list[str]  # failure lines outside any run (a client that never connected prints no title)
    error_kind: str | None
    notes: list[Note]
    source: str = "<text>"


def _error_kind(line: str) -> str | None:
    return next((kind for kind, rx in ERRORS if rx.search(line)), None)


def _settings(line: str, into: dict[str, str]) -> None:
    for m in _SETTING.finditer(line):
        key = m.group(1).strip()
        if key and key not in into:
            into[key] = m.group(2).strip()


def _lid(tok: str) -> int | None:
    """perftest prints LIDs with %#04x: `0x40`, or `0000` for LID 0 (RoCE): hex either way, 16 bits."""
    return int_or_none(tok, LID, base=16)


def _size_iters(toks: list[str]) -> tuple[tuple[int, int] | None, str | None]:
    """The `#bytes #iterations` cells of a table row: (None, None) for a line that is no row."""
    if len(toks) < 2 or not toks[0].lstrip("-").isdigit():
        return None, None
    size, why = read_int(toks[0], SIZE_BYTES)
    iters, why_iters = read_int(toks[1], COUNT)
    if size is None or iters is None:
        return None, f"#bytes: {why}" if size is None else f"#iterations: {why_iters}"
    return (size, iters), None


CUT = "row cut short"  # a row with fewer cells than its header: the paste ends (or was cut) there


def _numeric(toks: list[str]) -> bool:
    return bool(toks) and all(re.fullmatch(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", t) for t in toks)


def unwrap(lines: list[str]) -> list[str]:
    """Rows a narrow terminal (or a mail client) wrapped, joined again: a line of figures alone
    whose first is no integer (`0.072574  4.535869`) continues the table row above it.  The
    continuation line is left blank, so every line keeps its number."""
    out = list(lines)
    last = None  # index of the last table row
    for i, line in enumerate(out):
        toks = line.split()
        if not toks:
            continue
        if last is not None and _numeric(toks) and not toks[0].lstrip("-").isdigit():
            out[last], out[i] = out[last] + " " + line.strip(), ""
            continue
        last = i if _numeric(toks) and len(toks) >= 2 and toks[0].isdigit() and toks[1].isdigit() else None
    return out


def _bw_row(toks: list[str], factor: float, width: int = 4) -> tuple[dict[str, Any] | None, str | None]:
    """(row, None), (None, why it is refused), or (None, None) for a line that is no row.
    `width`: the header's columns (5 with MsgRate): a row short of them has a cell missing, and
    its figures would be read from the wrong columns."""
    head, why = _size_iters(toks)
    if head is None:
        return None, why
    if len(toks) < width:
        return None, f"{CUT}: {width - len(toks)} of the header's {width} cells missing"
    avg, why = _figure(toks[3], factor, NET_GBITS)
    if avg is None:
        return None, f"BW average: {why}"
    peak = _figure(toks[2], factor, NET_GBITS)[0]  # a peak is shown only: a bad one is unknown
    rate = float_or_none(toks[4], COUNT) if len(toks) > 4 else None
    return {"size": head[0], "iters": head[1],
            "bw_peak_gbps": round(peak, 3) if peak is not None and peak > 0 else None,
            "bw_avg_gbps": round(avg, 3), "msg_rate_mpps": rate}, None


_LAT_KEYS = {"t_min": "t_min_us", "t_max": "t_max_us", "t_typical": "t_typical_us", "t_avg": "t_avg_us",
             "t_stdev": "t_stdev_us", "99%": "t_p99_us", "99.9%": "t_p999_us"}


def _lat_columns(rest: str) -> list[str]:
    """The latency header's value columns, in order: t_min[usec] ... `99% percentile[usec]`."""
    out = []
    for tok in re.findall(r"(t_\w+|99\.9%|99%)(?:\s+percentile)?\[usec\]", rest):
        out.append(_LAT_KEYS.get(tok, tok))
    return out


def _lat_row(toks: list[str], cols: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(row, None), (None, why it is refused), or (None, None) for a line that is no row."""
    head, why = _size_iters(toks)
    if head is None:
        return None, why
    if len(toks) < 2 + len(cols):
        return None, f"{CUT}: {2 + len(cols) - len(toks)} of the header's {2 + len(cols)} cells missing"
    row: dict[str, Any] = {"size": head[0], "iters": head[1]}
    for col, tok in zip(cols, toks[2:2 + len(cols)]):
        row[col], why = _figure(tok, 1.0, LATENCY_US)
        if row[col] is None:
            return None, f"{col}: {why}"
    return row, None


def parse_perftest(text: str | bytes, source: str = "<text>") -> PerftestLog:
    """Every run in a perftest output; failures recorded, not raised.  TextParseError only for
    input that is no text at all."""
    text = decode_input(text, source) if isinstance(text, bytes) else text
    lines = unwrap(text_lines(text, None))
    runs: list[PerftestRun] = []
    loose: list[str] = []
    notes: list[Note] = []
    run: PerftestRun | None = None
    factor: float | None = None
    bw_width = 4
    lat_cols: list[str] = []
    gid_for: dict[str, Any] | None = None
    for i, raw in enumerate(lines, start=1):
        s = raw.strip()
        if not s:
            continue
        title = next(((rx, tool, kind) for rx, tool, kind in _TITLES if rx.match(s)), None)
        if title is not None:
            rx, tool, kind = title
            m = rx.match(s)
            run = PerftestRun(tool, kind, s, bidirectional=bool(m and m.groups() and m.group(1)), first_line=i)
            runs.append(run)
            factor, lat_cols, gid_for = None, [], None
            continue
        kind_err = _error_kind(s)
        if kind_err is not None and not s.startswith("#"):
            target = run.errors if run is not None else loose
            target.append(s[:300])
            if run is not None and run.error_kind is None:
                run.error_kind = kind_err
            continue
        if _NOISE.match(s):
            continue
        if run is None:
            notes.append(Note(i, f"before any perftest banner, ignored: {s[:80]!r}"))
            continue
        m = _ADDRESS.match(s)
        if m:
            side = run.local if m.group(1) == "local" else run.remote
            side.update(lid=_lid(m.group(2)), qpn=m.group(3).lower())
            gid_for = side
            continue
        m = _GID.match(s)
        if m and gid_for is not None:
            gid_for["gid"] = m.group(1)
            continue
        m = _BW_HEAD.match(s)
        if m:
            run.unit = m.group(2)
            factor = _unit_factor(m.group(2))
            bw_width = len(re.findall(r"#bytes|#iterations|BW peak|BW average|MsgRate", s))
            if factor is None:
                notes.append(Note(i, f"bandwidth unit {m.group(2)!r} not understood: the rows are left out"))
            continue
        m = _LAT_HEAD.match(s)
        if m:
            lat_cols = _lat_columns(m.group(1))
            continue
        toks = s.split()
        row, why = (_bw_row(toks, factor, bw_width) if factor is not None and run.kind == "bw"
                    else _lat_row(toks, lat_cols) if lat_cols and run.kind == "lat" else (None, None))
        if row is not None:
            run.rows.append(row)
            continue
        if why is not None:  # a row with a number no tool prints: that row only is left out
            notes.append(Note(i, f"row left out: {why}"))
            if why.startswith(CUT) and run.cut is None:
                run.cut = f"the table is cut at line {i} ({why})"
            continue
        if ":" in s and not run.rows:
            _settings(raw, run.settings)
            continue
        notes.append(Note(i, f"not a perftest line, ignored: {s[:80]!r}"))
    kinds = [r.error_kind for r in runs if r.error_kind] + [k for k in (_error_kind(x) for x in loose) if k]
    return PerftestLog(runs, loose, kinds[0] if kinds else None, notes, source)


def looks_like(text: str) -> bool:
    """Whether a text is a perftest output (for `probe import`'s kind detection)."""
    head = text[:200000]
    return any(re.search(rx.pattern.replace("^", r"^\s*").replace("$", r"\s*$"), head, re.M) for rx, _, _ in _TITLES) \
        and bool(re.search(r"^\s*#bytes\s+#iterations", head, re.M))


def runs_or_error(text: str | bytes, source: str = "<text>") -> PerftestLog:
    """parse_perftest, refusing a text with no perftest run and no failure line in it."""
    log = parse_perftest(text, source)
    if not log.runs and not log.errors:
        raise TextParseError("no perftest run (no `... BW Test` / `... Latency Test` banner) found", source, 1)
    return log


def address(side: dict[str, Any]) -> PerftestAddress | None:
    """One end's `... address:` line (and the GID line after it) as a record; None when not printed."""
    if not side:
        return None
    return {"lid": side.get("lid"), "qpn": side.get("qpn"), "gid": side.get("gid")}


def gid_text(gid: str) -> str:
    """perftest prints a GID as 16 decimal bytes (`00:...:255:255:10:110:16:103`): shown as the
    IPv6 address it is (`::ffff:10.110.16.103`, the RoCE v2 port's IPv4 address); any other
    spelling as printed."""
    parts = gid.split(":")
    if len(parts) != 16 or not all(p.isdigit() and int(p) <= 255 for p in parts):
        return gid
    ip = ipaddress.IPv6Address(bytes(int(p) for p in parts))
    return f"::ffff:{ip.ipv4_mapped}" if ip.ipv4_mapped is not None else ip.compressed


def peer_name(run: PerftestRun) -> str:
    """How a text names the peer: its GID on RoCE, where every LID is 0 and only the GID tells
    ports apart (`LID 0x0` would make every RoCE peer the same one), else its LID; `?` if neither."""
    lid, gid = run.remote.get("lid"), run.remote.get("gid")
    if gid and (lid in (0, None) or run.link_type == "Ethernet"):
        return f"GID {gid_text(gid)}"
    return f"LID {lid:#x}" if isinstance(lid, int) else "?"


def _latency(row: dict[str, Any]) -> dict[str, float | None]:
    return {key: row.get(key) for key in _LAT_KEYS.values()}


def fill_figures(out: FabricMeasure, run: PerftestRun) -> None:
    """Write what a run says into its measurement: the figure it stands for (value, p99_us, size)
    and the whole run as printed (peak, message rate, every latency column, every size row, the
    link type, the peer's address, the unit).  One writer for the probe's and the import's road."""
    result = run.result()
    out["link_type"], out["remote"], out["unit"] = run.link_type, address(run.remote), run.unit
    out["rows"] = [dict(r) for r in run.rows]
    out["peak_gbps"] = out["msg_rate_mpps"] = out["latency"] = None
    if result is None:
        return
    out["size"] = result.get("size")
    if run.kind == "bw":
        out["value"] = result.get("bw_avg_gbps")
        out["peak_gbps"], out["msg_rate_mpps"] = result.get("bw_peak_gbps"), result.get("msg_rate_mpps")
    else:  # `-D` runs print t_avg alone
        out["value"] = result.get("t_typical_us", result.get("t_avg_us"))
        out["p99_us"] = result.get("t_p99_us")
        out["latency"] = _latency(result)
