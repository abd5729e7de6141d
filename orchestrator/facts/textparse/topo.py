"""`nvidia-smi topo -m`, `topo -p2p r|w|n|a|p` and `topo -c` text -> dataclasses.

Written for the format as nvidia-smi prints it across driver generations, and for what happens to
it on the way to us: tabs expanded to spaces, leading whitespace lost, ANSI underline remnants in
the header, columns run together, trailing empty cells, poster annotations, old legends (`SOC`,
"PCIe switch"), old NIC columns named after the RDMA device (`mlx5_N`, in any order).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.numbers import INDEX, int_or_none
from orchestrator.facts.textparse.common import (
    CPULIST,
    Note,
    TextParseError,
    clean_lines,
    decode_input,
    is_redacted,
)
from orchestrator.facts.textsafe import is_digits

LEVEL_TOKEN = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC")
_LEVEL_RUN = re.compile(r"(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)+")
_LEVEL_PREFIX = re.compile(r"^((?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)+)(\d.*)$")
# When the affinity value is wider than its column, nvidia-smi overwrites the last letter(s) of
# the level before it: `PH0-115` is `PHB` + `0-115`, `NOD0-63` is `NODE` + `0-63`.
_CUT_LEVEL = re.compile(r"^(PH|PI|PX|SY|NO|NOD|SO)(\d[\d,\-]*|N/A)$")
_CUT_FULL = {"PH": "PHB", "PI": "PIX", "PX": "PXB", "SY": "SYS", "NO": "NODE", "NOD": "NODE", "SO": "SOC"}
P2P_TOKEN = re.compile(r"X|OK|CNS|GNS|TNS|NS|DR|U")
_P2P_RUN = re.compile(r"(?:X|OK|CNS|GNS|TNS|NS|DR|U)+")

# Column labels that name devices.  Non-GPU names are RDMA/NIC device names (mlx5_0, mlx5_bond_0,
# hfi1_0, irdma0, bnxt_re0): lower case and ending in a digit, which keeps prose out.
_DEVICE_LABEL = re.compile(r"GPU\d+|NIC\d+|[a-z][a-z0-9]*(?:_[a-z0-9]*)*\d")
_SPLIT_RUN = re.compile(r"(?<=\S)(?=GPU\d|NIC\d|mlx\d+_)")
_AFFINITY_HEADERS = (
    ("gpu_numa_id", re.compile(r"GPU\s*NUMA\s*ID", re.I)),
    ("cpu_affinity", re.compile(r"CPU\s*Affinity", re.I)),
    ("numa_affinity", re.compile(r"NUMA\s*Affinity", re.I)),
)
_AFFINITY_FIT = {
    "cpu_affinity": re.compile(rf"{CPULIST.pattern}|N/A"),
    "numa_affinity": re.compile(r"\d+|N/A"),
    "gpu_numa_id": re.compile(r"\d+|N/A"),
}
# Where the position says which column a value is in, a NUMA affinity may be a range or a list
# (a GPU near several nodes); guessing by content alone, a range is taken for CPU affinity.
_AFFINITY_FIT_BY_POSITION = dict(_AFFINITY_FIT, numa_affinity=re.compile(rf"{CPULIST.pattern}|N/A"))
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_LEGEND_ENTRY = re.compile(r"^\s*(X|SYS|SOC|NODE|PHB|PXB|PIX|NV#|OK|CNS|GNS|TNS|NS|DR|U)\s*=\s*(.+?)\s*$")


@dataclass
class TopoDevice:
    label: str  # column label as printed: GPU0, NIC3, mlx5_2
    kind: str  # gpu | nic
    index: int  # position among devices of its kind, in column order
    name: str | None = None  # NIC legend name (mlx5_10) or the old-style column label itself
    cpu_affinity: str | None = None
    numa_affinity: int | None = None
    numa_nodes: str | None = None  # the printed range/list when the affinity spans several nodes
    gpu_numa_id: int | None = None
    unknown: dict[str, str] = field(default_factory=dict)  # field -> why it is null

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "kind": self.kind,
            "index": self.index,
            "name": self.name,
            "cpu_affinity": self.cpu_affinity,
            "numa_affinity": self.numa_affinity,
            "numa_nodes": self.numa_nodes,
            "gpu_numa_id": self.gpu_numa_id,
            "unknown": dict(self.unknown),
        }


@dataclass
class TopoMatrix:
    devices: list[TopoDevice]
    matrix: list[list[str | None]]  # rows/cols in devices order; X, NV#, PIX, PXB, PHB, NODE, SYS, None
    columns: list[str]  # affinity columns the header has: cpu_affinity, numa_affinity, gpu_numa_id
    legend: dict[str, str] = field(default_factory=dict)
    legend_style: str | None = None  # "bridge" (current wording) | "switch" (old) | None: no legend
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"

    @property
    def gpus(self) -> list[TopoDevice]:
        return [d for d in self.devices if d.kind == "gpu"]

    @property
    def nics(self) -> list[TopoDevice]:
        return [d for d in self.devices if d.kind == "nic"]

    def _pos(self, label: str) -> int:
        for i, d in enumerate(self.devices):
            if d.label == label or (d.kind == "nic" and d.name == label):
                return i
        raise KeyError(label)

    def level(self, a: str, b: str) -> str | None:
        return self.matrix[self._pos(a)][self._pos(b)]

    def pairs(self, level: str | None = None, kinds: tuple[str, str] = ("gpu", "gpu")) -> list[tuple[str, str]]:
        """Unordered pairs (first kind, second kind) whose level equals `level` (any level if None)."""
        out = []
        for i, a in enumerate(self.devices):
            for j, b in enumerate(self.devices):
                if i == j or (a.kind, b.kind) != kinds:
                    continue
                if kinds[0] == kinds[1] and j < i:
                    continue
                if level is None or self.matrix[i][j] == level:
                    out.append((a.label, b.label))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "topo_matrix",
            "source": self.source,
            "devices": [d.to_dict() for d in self.devices],
            "matrix": [list(r) for r in self.matrix],
            "columns": list(self.columns),
            "legend": dict(self.legend),
            "legend_style": self.legend_style,
            "notes": [n.to_dict() for n in self.notes],
        }


@dataclass
class P2PMatrix:
    mode: str | None  # r | w | n | a | p as given on the command line, None when the text does not say
    labels: list[str]
    matrix: list[list[str | None]]  # X, OK, CNS, GNS, TNS, NS, DR, U, or None
    legend: dict[str, str] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "topo_p2p",
            "source": self.source,
            "mode": self.mode,
            "labels": list(self.labels),
            "matrix": [list(r) for r in self.matrix],
            "legend": dict(self.legend),
            "notes": [n.to_dict() for n in self.notes],
        }


@dataclass
class CpuAffinity:
    nearest: dict[int, list[int]]  # CPU number -> GPU indices nvidia-smi lists for it
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "topo_cpu",
            "source": self.source,
            "nearest": {str(k): list(v) for k, v in self.nearest.items()},
            "notes": [n.to_dict() for n in self.notes],
        }


# ---------------------------------------------------------------------------------------------
# the matrix reader shared by -m and -p2p


@dataclass
class _Header:
    line_no: int
    labels: list[str]
    affinity: list[str]  # affinity column keys in header order
    affinity_pos: list[int] = field(default_factory=list)  # where each affinity header starts


@dataclass
class _Row:
    line_no: int
    label: str
    cells: list[str | None]
    tail: list[str]  # non-empty tokens after the matrix cells
    tail_pos: list[int]  # the column each tail token starts at (space-aligned copies), or [] (tabs)


def _header_tokens(line: str) -> tuple[list[str], list[str], list[int]] | None:
    """Device labels, affinity columns and where each affinity header starts, or None when the
    line is not a header."""
    found: list[tuple[int, str]] = []
    rest = line.expandtabs(8)  # positions as a terminal shows them: rows are measured the same way
    for key, rx in _AFFINITY_HEADERS:
        m = rx.search(rest)
        if m:
            found.append((m.start(), key))
            rest = rest[: m.start()] + " " * (m.end() - m.start()) + rest[m.end() :]
    labels: list[str] = []
    for tok in rest.split():
        labels.extend(_SPLIT_RUN.split(tok))
    if not labels or not all(_DEVICE_LABEL.fullmatch(t) for t in labels):
        return None
    if not any(t.startswith("GPU") for t in labels):
        return None
    return labels, [k for _, k in sorted(found)], [pos for pos, _ in sorted(found)]


def _row_tokens(line: str) -> list[str]:
    """Cells of a row after its label; tab cells keep their empties, space-separated ones cannot."""
    if "\t" in line:
        out: list[str] = []
        for i, cell in enumerate(line.split("\t")):
            parts = cell.split()
            if i == 0:
                parts = parts[1:]  # the row label
            out.extend(parts if parts else ([""] if i > 0 else []))
        return out
    return line.split()[1:]


def _tail_positions(line: str, tail: list[str]) -> list[int]:
    """Start column of each tail token as a terminal shows the row (tabs to 8 columns, as in the
    header): an empty CPU Affinity cell leaves the NUMA value under its own header."""
    if not tail:
        return []
    line = line.expandtabs(8)
    out: list[int] = []
    end = len(line)
    for tok in reversed(tail):
        at = line.rfind(tok, 0, end)
        if at < 0:
            return []
        out.append(at)
        end = at
    return list(reversed(out))


def _split_cells(tokens: list[str], run: re.Pattern[str], single: re.Pattern[str]) -> list[str]:
    """Undo columns run together: 'NV1NV2' -> 'NV1', 'NV2'; 'PIX0-19' -> 'PIX', '0-19'."""
    out: list[str] = []
    for t in tokens:
        if not t or single.fullmatch(t):
            out.append(t)
            continue
        if run.fullmatch(t):
            out.extend(single.findall(t))
            continue
        cut = _CUT_LEVEL.match(t) if run is _LEVEL_RUN else None
        if cut and (CPULIST.fullmatch(cut.group(2)) or cut.group(2) == "N/A"):
            out.extend([_CUT_FULL[cut.group(1)], cut.group(2)])
            continue
        m = _LEVEL_PREFIX.match(t) if run is _LEVEL_RUN else None
        if m and (CPULIST.fullmatch(m.group(2)) or m.group(2) == "N/A"):
            out.extend(single.findall(m.group(1)))
            out.append(m.group(2))
            continue
        out.append(t)
    return out


def _read_matrix(
    lines: list[str], source: str, single: re.Pattern[str], run: re.Pattern[str], what: str
) -> tuple[_Header, list[_Row], int, list[Note]]:
    notes: list[Note] = []
    header = _find_header(lines, source, what)
    start = header.line_no
    labels = header.labels
    n = len(labels)
    label_set = set(labels)
    seen: set[str] = set()
    rows: list[_Row] = []
    end = start
    for i in range(start, len(lines)):
        line = lines[i]
        end = i + 1
        stripped = line.strip()
        if not stripped:
            # A blank (or an elision the cleaner blanked) inside the matrix: go on when a row follows.
            if rows:
                nxt = next((x.strip() for x in lines[i + 1:] if x.strip()), "")
                nxt_label = _SPLIT_RUN.split(nxt.split()[0])[0] if nxt else ""
                if nxt_label not in label_set or nxt_label in seen:
                    break
            continue
        if stripped.lower().startswith("legend"):
            break
        first = _SPLIT_RUN.split(stripped.split()[0])[0]
        if first not in label_set or len(rows) >= n:
            notes.append(Note(i + 1, f"not part of the matrix, ignored: {stripped[:80]!r}"))
            continue
        if first in seen:
            notes.append(Note(i + 1, f"row {first} appears twice: the first one is kept, this line is skipped"))
            continue
        seen.add(first)
        if stripped.split()[0] != first:  # the label ran into the first cell
            line = line.replace(first, first + " ", 1)
        tokens = _split_cells(_row_tokens(line), run, single)
        cells: list[str | None] = []
        k = 0
        while len(cells) < n and k < len(tokens):
            tok = tokens[k]
            k += 1
            if tok == "":
                if len(cells) == 0:
                    continue  # leading empty cell from a doubled tab
                cells.append(None)
                notes.append(Note(i + 1, f"row {first}: empty cell in column {labels[len(cells) - 1]}"))
            elif single.fullmatch(tok):
                cells.append(tok)
            elif CPULIST.fullmatch(tok) or tok == "N/A":
                break  # affinity columns started early: the row is short
            elif is_redacted(tok) or re.fullmatch(r"\?+|-+", tok):
                cells.append(None)
                notes.append(Note(i + 1, f"row {first}: column {labels[len(cells) - 1]} blanked out ({tok!r}): unknown"))
            else:
                cells.append(None)
                notes.append(Note(i + 1, f"row {first}: unknown value {tok!r} in column {labels[len(cells) - 1]}"))
        if len(cells) < n:
            notes.append(Note(i + 1, f"row {first} has {len(cells)} of {n} matrix cells (truncated line?): "
                                     "the missing cells are unknown"))
            cells += [None] * (n - len(cells))
        tail = [t for t in tokens[k:] if t != ""]
        rows.append(_Row(i + 1, first, cells, tail, _tail_positions(line, tail)))
    if not rows:
        raise TextParseError(f"no {what} rows under the header (truncated?)", source, header.line_no)
    if len(rows) != n:
        missing = [x for x in labels if x not in seen]
        last = rows[-1].line_no if rows else header.line_no
        notes.append(Note(last, f"matrix has {n} columns but {len(rows)} rows (missing {', '.join(missing)}: an "
                                "excerpt or truncated paste); their rows are unknown"))
        for x in missing:
            rows.append(_Row(last, x, [("X" if y == x else None) for y in labels], [], []))
    by_label = {r.label: r for r in rows}
    return header, _fill_from_mirrors([by_label[x] for x in labels]), end, notes


def _find_header(lines: list[str], source: str, what: str) -> _Header:
    """The matrix's column-label line (its line_no is 1-based, so rows start at lines[line_no])."""
    for i, line in enumerate(lines):
        parsed = _header_tokens(line)
        if parsed:
            header = _Header(i + 1, parsed[0], parsed[1], parsed[2])
            labels = header.labels
            dup = sorted({x for x in labels if labels.count(x) > 1}) if len(set(labels)) != len(labels) else []
            if dup:
                raise TextParseError(f"column label(s) {', '.join(dup)} appear twice in the header", source,
                                     header.line_no)
            return header
    raise TextParseError(f"no {what} header (a line of GPU0 GPU1 ... column labels) found", source, 1)


def _fill_from_mirrors(ordered: list[_Row]) -> list[_Row]:
    """The path between two devices is one path: a cell lost to a cut row is its mirror cell."""
    cut = {r.label for r in ordered if any(c is None for c in r.cells)}
    for i, r in enumerate(ordered):
        if r.label not in cut:
            continue
        for j, c in enumerate(r.cells):
            if c is None and ordered[j].cells[i] is not None:
                r.cells[j] = ordered[j].cells[i]
    return ordered


def _check_shape(labels: list[str], rows: list[_Row], notes: list[Note]) -> None:
    """The diagonal is X and the matrix symmetric; a cell that breaks this is reported, not fixed."""
    for i, r in enumerate(rows):
        if r.cells[i] not in ("X", None):
            notes.append(Note(r.line_no, f"diagonal cell {r.label}/{r.label} is {r.cells[i]!r}, expected X"))
        for j in range(i + 1, len(rows)):
            a, b = r.cells[j], rows[j].cells[i]
            if a != b and a is not None and b is not None:
                notes.append(Note(r.line_no, f"{r.label}/{labels[j]} is {a} but {labels[j]}/{r.label} is {b}"))


def _legend(lines: Iterable[tuple[int, str]]) -> tuple[dict[str, str], dict[str, str]]:
    legend: dict[str, str] = {}
    nic_names: dict[str, str] = {}
    in_nic = False
    for _, line in lines:
        s = line.strip()
        if s.lower().startswith("nic legend"):
            in_nic = True
            continue
        m = _NIC_LEGEND.match(line)
        if m and (in_nic or not legend):
            nic_names[m.group(1)] = m.group(2)
            continue
        m = _LEGEND_ENTRY.match(line)
        if m:
            legend[m.group(1)] = m.group(2)
    return legend, nic_names


def _assign_by_column(tail: list[str], pos: list[int], columns: list[str], header_pos: list[int]) -> dict[str, str] | None:
    """Space-aligned copy with empty cells: each value belongs to the affinity header it starts
    nearest to.  None unless that gives every value its own column and each value fits it."""
    if not pos or len(pos) != len(tail) or len(header_pos) != len(columns):
        return None
    out: dict[str, str] = {}
    for tok, at in zip(tail, pos):
        near = sorted(range(len(columns)), key=lambda c: abs(header_pos[c] - at))
        col = near[0]
        if len(near) > 1 and abs(header_pos[near[1]] - at) == abs(header_pos[col] - at):
            return None  # midway between two headers: the position decides nothing
        if columns[col] in out or not _AFFINITY_FIT_BY_POSITION[columns[col]].fullmatch(tok):
            return None
        out[columns[col]] = tok
    return out


def _assign_tail(tail: list[str], columns: list[str], pos: list[int] | None = None,
                 header_pos: list[int] | None = None) -> tuple[dict[str, str], str | None]:
    """Give the non-empty tail tokens to affinity columns, by position when the count matches and by
    content when cells are empty, then by the header's column positions; an ambiguous fit assigns
    nothing (and says so)."""
    if not tail or not columns:
        return {}, None
    if len(tail) >= len(columns):
        head = tail[: len(columns)]
        if all(_AFFINITY_FIT_BY_POSITION[c].fullmatch(t) for c, t in zip(columns, head)):
            return dict(zip(columns, head)), (f"extra text ignored: {' '.join(tail[len(columns):])!r}"
                                              if len(tail) > len(columns) else None)
        return {}, f"affinity cells {' '.join(tail)!r} do not fit columns {', '.join(columns)}"
    fits: list[dict[str, str]] = []

    def walk(ti: int, ci: int, acc: dict[str, str]) -> None:
        if ti == len(tail):
            fits.append(dict(acc))
            return
        for c in range(ci, len(columns)):
            if _AFFINITY_FIT[columns[c]].fullmatch(tail[ti]):
                acc[columns[c]] = tail[ti]
                walk(ti + 1, c + 1, acc)
                del acc[columns[c]]

    walk(0, 0, {})
    by_col = _assign_by_column(tail, pos or [], columns, header_pos or [])
    if len(fits) == 1 and by_col not in (None, fits[0]):
        # `0-3` alone reads as a CPU list by content, but stands under NUMA Affinity (a GPU near
        # several nodes, the CPU cell empty): content and position disagree, so neither is told
        return {}, (f"cannot tell which affinity column {' '.join(tail)!r} belongs to (it reads as "
                    f"{', '.join(fits[0])} but stands under {', '.join(by_col or {})})")
    if len(fits) == 1:
        return fits[0], None
    if by_col is not None:
        return by_col, None
    return {}, f"cannot tell which affinity column {' '.join(tail)!r} belongs to (cells are empty)"


def parse_topo_matrix(text: str | bytes, source: str = "<text>") -> TopoMatrix:
    """Parse `nvidia-smi topo -m` output.  Raises TextParseError when there is no readable matrix."""
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    lines, pre = clean_lines(text, source)
    header, rows, end, notes = _read_matrix(lines, source, LEVEL_TOKEN, _LEVEL_RUN, "topology matrix")
    notes[:0] = pre
    if any(c == "SOC" for r in rows for c in r.cells):
        notes.append(Note(None, "old legend: SOC (CPU socket interconnect) read as SYS"))
    for r in rows:
        r.cells = ["SYS" if c == "SOC" else c for c in r.cells]
    _check_shape(header.labels, rows, notes)
    legend, nic_names = _legend((i + 1, lines[i]) for i in range(end - 1, len(lines)))
    style = None
    if legend.get("PIX"):
        style = "switch" if "switch" in legend["PIX"].lower() else "bridge"
    devices: list[TopoDevice] = []
    counts = {"gpu": 0, "nic": 0}
    for r in rows:
        kind = "gpu" if re.fullmatch(r"GPU\d+", r.label) else "nic"
        dev = TopoDevice(r.label, kind, counts[kind])
        counts[kind] += 1
        if kind == "nic":
            if re.fullmatch(r"NIC\d+", r.label):
                dev.name = nic_names.get(r.label)
                if dev.name is not None and is_redacted(dev.name):
                    dev.name = None
                    dev.unknown["name"] = "redacted in the source"
                elif dev.name is None:
                    dev.unknown["name"] = "no NIC Legend entry for " + r.label
            else:
                dev.name = r.label
        values, problem = _assign_tail(r.tail, header.affinity, r.tail_pos, header.affinity_pos)
        if problem:
            notes.append(Note(r.line_no, f"row {r.label}: {problem}"))
        for col in header.affinity:
            v = values.get(col)
            if v is None:
                if kind == "gpu" or r.tail:
                    dev.unknown[col] = "unreadable in the source" if problem else "empty in the source"
                else:
                    dev.unknown[col] = "nvidia-smi prints no affinity for NICs"
            elif v == "N/A":
                dev.unknown[col] = "N/A in the source"
            elif col == "cpu_affinity":
                dev.cpu_affinity = v
            elif col == "numa_affinity":
                if is_digits(v):
                    dev.numa_affinity = int_or_none(v, INDEX)
                    if dev.numa_affinity is None:
                        dev.unknown[col] = f"{v[:20]!r}... is no NUMA node"
                else:
                    # A GPU close to several NUMA nodes (Grace, some AMD boards): no single node.
                    dev.numa_nodes = v
                    dev.unknown[col] = f"spans NUMA nodes {v}"
            else:
                dev.gpu_numa_id = int_or_none(v, INDEX)
                if dev.gpu_numa_id is None:
                    dev.unknown[col] = f"{v[:20]!r}... is no NUMA node"
        for col in ("cpu_affinity", "numa_affinity", "gpu_numa_id"):
            if col not in header.affinity:
                dev.unknown[col] = "column not printed by this nvidia-smi"
        devices.append(dev)
    return TopoMatrix(devices, [list(r.cells) for r in rows], header.affinity, legend, style, notes, source)


def parse_topo_p2p(text: str | bytes, source: str = "<text>", mode: str | None = None) -> P2PMatrix:
    """Parse `nvidia-smi topo -p2p r|w|n|a|p`.  The mode is not printed; give it or keep a prompt line."""
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    lines, pre = clean_lines(text, source)
    if mode is None:
        for line in lines:
            m = re.search(r"topo\s+(?:-p2p|--p2pstatus)\s*([rwnap])\b", line)
            if m:
                mode = m.group(1)
                break
    header, rows, end, notes = _read_matrix(lines, source, P2P_TOKEN, _P2P_RUN, "P2P status matrix")
    notes[:0] = pre
    for r in rows:
        if r.tail:
            notes.append(Note(r.line_no, f"row {r.label}: extra text ignored: {' '.join(r.tail)!r}"))
    _check_shape(header.labels, rows, notes)
    legend, _ = _legend((i + 1, lines[i]) for i in range(end - 1, len(lines)))
    if mode is None:
        # the same cells mean read, write, NVLink, atomics or PCIe P2P: no guess, a note instead
        notes.append(Note(header.line_no, "P2P status matrix without its mode (no `topo -p2p r|w|n|a|p` line): "
                                          "kept out of the facts (keep the command line above the matrix to place it)"))
    return P2PMatrix(mode, header.labels, [list(r.cells) for r in rows], legend, notes, source)


_CPU_HEAD = re.compile(r"The GPUs that have an affinity with CPU\s+(\d+)\s+are\s*:?\s*(.*)$", re.I)


def parse_topo_cpu(text: str | bytes, source: str = "<text>") -> CpuAffinity:
    """Parse one or more `nvidia-smi topo -c N` outputs: CPU -> nearest GPU indices."""
    text = decode_input(text, source) if isinstance(text, bytes) else text
    lines, notes = clean_lines(text, source)
    nearest: dict[int, list[int]] = {}
    i = 0
    while i < len(lines):
        m = _CPU_HEAD.search(lines[i])
        if not m:
            if lines[i].strip():
                notes.append(Note(i + 1, f"not part of a topo -c answer, ignored: {lines[i].strip()[:80]!r}"))
            i += 1
            continue
        cpu = int_or_none(m.group(1), INDEX)
        if cpu is None:
            notes.append(Note(i + 1, f"CPU {m.group(1)[:20]!r}... is no CPU number: skipped"))
            i += 1
            continue
        rest = m.group(2).strip()
        j = i + 1
        if not rest:
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j >= len(lines):
                notes.append(Note(i + 1, f"the GPU list for CPU {cpu} is missing (truncated?): skipped"))
                break
            rest = lines[j].strip()
            j += 1
        if not re.fullmatch(r"\d+(?:\s*,\s*\d+)*,?", rest):
            notes.append(Note(j, f"GPU list for CPU {cpu} is not a list of indices, skipped: {rest[:60]!r}"))
            i = j
            continue
        if cpu in nearest:
            notes.append(Note(i + 1, f"CPU {cpu} answered twice; the later answer is kept"))
        listed = [int_or_none(x, INDEX) for x in re.findall(r"\d+", rest)]
        if None in listed:
            notes.append(Note(j, f"GPU list for CPU {cpu} holds a number no GPU index has: skipped"))
        else:
            nearest[cpu] = [g for g in listed if g is not None]
        i = j
    if not nearest:
        raise TextParseError("no 'The GPUs that have an affinity with CPU N are:' line found", source, 1)
    return CpuAffinity(nearest, notes, source)
