"""The default `nvidia-smi` screen (no arguments) -> the SmiQuery record `-q` fills.

The boxed table changed across drivers (79 columns up to 525, 89 from 530, 91 from 580, a MIG
column and box from 450, `KMD Version` / `CUDA UMD Version` in the banner from 610), so it is
read by what its cells hold, not by column positions: a GPU's first row is the one with a PCI
bus id, the next row its fan/temp/perf/power, memory and utilisation, a third (450+) its MIG mode.
Rows a terminal narrower than the table wrapped are joined back; box characters inside a GPU
name cannot split it, since the row is matched around its bus id.  What the screen never prints
(UUIDs, serials, topology, PCIe links) is said once, in a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator.facts.numbers import INDEX, int_or_none
from orchestrator.facts.textparse.common import (
    HalfReadable,
    Note,
    TextParseError,
    decode_input,
    norm_bus_id,
    text_lines,
)
from orchestrator.facts.textparse.smi import (
    MigDevice,
    ScreenProcess,
    SmiGpu,
    SmiQuery,
    _float,
    _int,
    _mib,
    _pct,
    _temp,
)

BANNER = re.compile(r"NVIDIA-SMI\s+(\S+)\s+(?:Driver|KMD)\s+Version:\s*(\S+)"
                    r"(?:\s+CUDA(?:\s+UMD)?\s+Version:\s*([^\s|]+))?")
_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_STATE = r"On|Off|N/A|\[N/A\]|ERR!|WDDM|TCC|MCDM"
# `|   0  NVIDIA H100 80GB HBM3   On  |   00000000:53:00.0 Off |    0 |`: the name is whatever
# stands between the index and the persistence cell, `|` included (a hostile name cannot shift it)
_ROW1 = re.compile(rf"^\|\s*(\d+)\s+(.*?)\s+({_STATE})\s*\|\s*({_BUS})(?:\s+({_STATE}))?\s*(?:\|\s*([^|]*?)\s*(?:\||$))?")
_MIG_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+|N/A)\s+(\d+|N/A)\s+(\d+)\s*\|\s*(\d+\s*\S*)\s*/\s*(\d+\s*\S*?)\s*(?:\||$)")
_PROC_ROW = re.compile(r"^\|\s*(\d+)\s+(?:(N/A|\d+)\s+(N/A|\d+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M)\s+(.*?)\s+(\d+\s*MiB|N/A)\s*\|?$")
# "for GPU1: 0000:34:00.0: Unknown Error", "for GPU0000:CB:00.0: Unknown Error" (older), "for GPU 0: ..."
_MISSING = re.compile(rf"Unable to determine the device handle for GPU\s*(?:(?P<bus0>{_BUS})|(?P<idx>\d+))?\s*:?\s*"
                      rf"(?P<bus>{_BUS})?\s*:?\s*(?P<why>.*)$", re.I)
_NO_DEVICES = re.compile(r"^\s*No devices were found\s*$", re.M)
_COMPUTE = {"default": "default", "e. process": "exclusive_process", "e. thread": "exclusive_thread",
            "prohibited": "prohibited"}
NOT_ON_SCREEN = ("the default nvidia-smi screen does not print UUIDs, serials, VBIOS, PCIe links or topology: "
                 "import `nvidia-smi -q` (or -q -x) for those")
PASTE = "`nvidia-smi -q` (or at least `nvidia-smi -L`)"
PASTE_INSTEAD = f"paste {PASTE} instead"


def looks_like(head: str) -> bool:
    """The screen's banner, its column header, or nvidia-smi's own 'No devices were found'."""
    # a paste cut above the header still has a GPU row (index, name | bus id) and a MiB / MiB cell
    row = re.search(rf"^\s*(?:#|//|>)?\s*\|\s*\d+\s+.*\|\s*{_BUS}\s+(?:{_STATE})\s*\|", head, re.M)
    return bool(BANNER.search(head) or re.search(r"Persistence-M\s*\|\s*Bus-Id", head)
                or (row and re.search(r"\d+MiB\s*/\s*\d+MiB", head))
                or _NO_DEVICES.search(head) or _MISSING.search(head))


def _unquote(line: str) -> str:
    """A table line as a poster pasted it: markdown indentation, `#`/`>` comment prefixes removed."""
    s = line.strip()
    m = re.match(r"^(?:#|//|>)\s?(?=[|+])", s)
    return s[m.end():] if m else s


def _joined(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, table line) with rows a narrow terminal wrapped joined back (at most 3
    continuations, so a cut file cannot glue unrelated lines into one)."""
    out: list[tuple[int, str]] = []
    header = next((_unquote(x) for x in lines if "Persistence-M" in x), "| GPU | Bus-Id | ECC |")
    bars = header.count("|") if header.startswith("|") and header.rstrip().endswith("|") else 4
    i = 0
    while i < len(lines):
        s = _unquote(lines[i])
        start = i
        if s.startswith(("|", "+")):
            extra = 0
            while extra < 3 and i + 1 < len(lines) and _continues(s, lines[i + 1], bars):
                i += 1
                extra += 1
                s += lines[i]
        out.append((start + 1, s))
        i += 1
    return out


def _continues(cur: str, nxt: str, bars: int) -> bool:
    """Whether `nxt` is the rest of a table line a terminal wrapped: it does not start a table line,
    or (the wrap fell on or just before a `|`) both halves make one row of the header's `bars` `|`
    and no wider than the widest table (a poster's cut-off columns never add up so)."""
    if not nxt.strip() or BANNER.search(nxt):
        return False
    adds_up = (cur.startswith("|") and len(cur) >= 40 and len(cur) + len(nxt.strip()) <= 100
               and cur.count("|") + nxt.count("|") == bars and nxt.rstrip().endswith("|"))
    if not _unquote(nxt).startswith(("|", "+")):
        return not cur.endswith(("|", "+")) or adds_up
    return adds_up


@dataclass
class _State:
    gpus: list[SmiGpu]
    notes: list[Note]
    section: str = "gpu"  # gpu | mig | proc
    current: SmiGpu | None = None
    row: int = 0  # rows of the current GPU read so far
    cut: list[SmiGpu] = field(default_factory=list)  # GPUs with a row that does not reach its closing `|`


def _cell_state(v: str | None) -> bool | None:
    return {"on": True, "off": False}.get((v or "").strip().lower())


def _why(v: str | None) -> str:
    v = (v or "").strip()
    return f"{v} in the source" if v else "not printed (row cut)"


def _row1(st: _State, lineno: int, m: re.Match[str]) -> None:
    idx = int_or_none(m.group(1), INDEX)
    if idx is None:
        st.notes.append(Note(lineno, f"GPU row with no index a host has ({m.group(1)[:20]}...), skipped"))
        st.current = None
        return
    if any(x.index == idx for x in st.gpus):  # a paste repeated (two screens, `watch` output)
        st.notes.append(Note(lineno, f"GPU {idx} has a second row: the first is kept, this one skipped"))
        st.current = None
        return
    g = SmiGpu(bus_id=norm_bus_id(m.group(4)), name=m.group(2).strip() or None, index=idx)
    g.persistence_mode = _cell_state(m.group(3))
    if g.persistence_mode is None:
        g.unknown["persistence_mode"] = _why(m.group(3))
    _ecc(g, m.group(6))
    if g.name and g.name.endswith("..."):
        g.unknown["name"] = "cut by nvidia-smi to fit its column (the full name is in nvidia-smi -q or -L)"
    st.gpus.append(g)
    st.current, st.row = g, 1


def _ecc(g: SmiGpu, cell: str | None) -> None:
    """Volatile Uncorr. ECC: a count (ECC on), Off, On (MIG mode shows no count), N/A, ERR!."""
    v = (cell or "").strip()
    count = _int(v) if re.fullmatch(r"\d+", v) else None
    if count is not None:
        g.ecc_current, g.ecc_volatile_uncorrected = True, count
        return
    g.ecc_current = _cell_state(v)
    if g.ecc_current is None:
        g.unknown["ecc_current"] = _why(v)
    g.unknown["ecc_volatile_uncorrected"] = _why(v) if g.ecc_current is None else f"{v} printed instead of a count"


def _cells(line: str) -> list[str]:
    parts = [c.strip() for c in line.strip().split("|")]
    return parts[1:-1] if line.rstrip().endswith("|") else parts[1:]


def _row2(g: SmiGpu, cells: list[str]) -> None:
    toks = (cells[0] if cells else "").split()
    fan, temp, perf = [*toks, "", "", ""][:3]
    g.fan_speed_pct = _pct(fan) if fan.endswith("%") else None
    if g.fan_speed_pct is None:
        g.unknown["fan_speed_pct"] = _why(fan)
    g.temperature_c = _temp(temp) if temp.endswith("C") else None
    if g.temperature_c is None:
        g.unknown["temperature_c"] = _why(temp)
    g.perf_state = perf if re.fullmatch(r"P\d{1,2}", perf) else None
    if g.perf_state is None:
        g.unknown["perf_state"] = _why(perf)
    power = " ".join(toks[3:]).split("/")
    for attr, raw in (("power_w", power[0]), ("power_limit_w", power[1] if len(power) > 1 else "")):
        value = _float(raw) if raw.strip().endswith("W") else None
        setattr(g, attr, value)
        if value is None:
            g.unknown[attr] = _why(raw)
    mem = (cells[1] if len(cells) > 1 else "").split("/")
    for attr, raw in (("memory_used_bytes", mem[0]), ("memory_total_bytes", mem[1] if len(mem) > 1 else "")):
        value = _mib(raw)
        setattr(g, attr, value)
        if value is None:
            g.unknown[attr] = _why(raw)
    util = (cells[2] if len(cells) > 2 else "").split(None, 1)
    g.utilization_pct = _pct(util[0]) if util and util[0].endswith("%") else None
    if g.utilization_pct is None:
        g.unknown["utilization_pct"] = _why(util[0] if util else "")
    mode = util[1].strip().lower() if len(util) > 1 else ""
    g.compute_mode = _COMPUTE.get(mode)
    if g.compute_mode is None:
        g.unknown["compute_mode"] = _why(util[1] if len(util) > 1 else "")


def _row3(g: SmiGpu, cells: list[str]) -> None:
    """MIG M.: Enabled / Disabled, a trailing `*` when a change waits for a reset."""
    raw = cells[2] if len(cells) > 2 else ""
    v = raw.rstrip("*").strip()
    g.mig_current = {"enabled": True, "disabled": False}.get(v.lower())
    if g.mig_current is None:
        g.unknown["mig_current"] = _why(raw)
    g.mig_pending = (not g.mig_current) if raw.endswith("*") and g.mig_current is not None else g.mig_current
    if g.mig_pending is None:
        g.unknown["mig_pending"] = _why(raw)


def _mig(st: _State, lineno: int, m: re.Match[str]) -> None:
    gpu = next((g for g in st.gpus if g.index == int_or_none(m.group(1), INDEX)), None)
    if gpu is None:
        st.notes.append(Note(lineno, f"MIG device of GPU {m.group(1)[:8]}, which has no row on this screen: skipped"))
        return
    gpu.mig_devices.append(MigDevice(int(m.group(4)), None, None, _int(m.group(2)), _int(m.group(3)),
                                     _mib(m.group(6))))


def _process(st: _State, lineno: int, m: re.Match[str], procs: list[ScreenProcess]) -> None:
    gpu, pid = int_or_none(m.group(1), INDEX), _int(m.group(4))
    if gpu is None or pid is None:
        st.notes.append(Note(lineno, "process row with no GPU index or PID a host has, skipped"))
        return
    procs.append(ScreenProcess(gpu, pid, m.group(5), m.group(6).strip(), _mib(m.group(7).replace(" ", ""))))


def _line(st: _State, lineno: int, s: str, procs: list[ScreenProcess]) -> None:
    if re.match(r"^\|\s*MIG devices:", s):
        st.section, st.current = "mig", None
    elif re.match(r"^\|\s*Processes:", s):
        st.section, st.current = "proc", None
    elif s.startswith("+") or s.startswith("|="):
        st.current = None if s.startswith("+") else st.current
    elif st.section == "mig" and (m := _MIG_ROW.match(s)):
        _mig(st, lineno, m)
    elif st.section == "proc" and (m := _PROC_ROW.match(s)):
        _process(st, lineno, m, procs)
    elif st.section == "gpu" and (m := _ROW1.match(s)):
        _row1(st, lineno, m)
        _unclosed(st, s)
    elif st.section == "gpu" and st.current is not None and s.startswith("|"):
        st.row += 1
        (_row2 if st.row == 2 else _row3)(st.current, _cells(s))
        _unclosed(st, s)
        if st.row >= 3:
            st.current = None


def _unclosed(st: _State, s: str) -> None:
    if st.current is not None and not s.endswith("|") and st.current not in st.cut:
        st.cut.append(st.current)


def _banner(text_lines_: list[str]) -> tuple[str | None, str | None, bool]:
    for line in text_lines_:
        m = BANNER.search(line)
        if m:
            cuda = m.group(3)
            return m.group(2), (None if cuda is None or cuda.upper() == "N/A" else cuda), True
    return None, None, False


def _missing(lines: list[str], notes: list[Note]) -> list[tuple[int | None, str | None]]:
    out: list[tuple[int | None, str | None]] = []
    for i, line in enumerate(lines, start=1):
        m = _MISSING.search(line)
        if m:
            idx = int_or_none(m["idx"], INDEX) if m["idx"] else None
            bus = norm_bus_id(m["bus0"] or m["bus"])
            out.append((idx, bus))
            notes.append(Note(i, f"nvidia-smi could not reach GPU{'' if idx is None else idx} "
                                 f"{bus or '(bus id not printed)'}: {m['why'].strip()[:60] or 'no reason'}"
                                 " - counted as a GPU the host has and cannot use"))
    return out


def parse_smi_screen(text: str | bytes, source: str = "<text>") -> SmiQuery:
    """The default screen -> SmiQuery (screen=True): one SmiGpu per GPU row; a GPU nvidia-smi could
    not reach ('Unable to determine the device handle') is a lost GPU with its bus id."""
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    lines = text_lines(text, source)
    notes: list[Note] = []
    joined = _joined(lines)
    driver, cuda, has_banner = _banner([s for _, s in joined])
    st = _State([], notes)
    procs: list[ScreenProcess] = []
    for lineno, s in joined:
        _line(st, lineno, s, procs)
    missing = _missing(lines, notes)
    none_found = bool(_NO_DEVICES.search(text))
    if not st.gpus and not missing and not none_found:
        why = ("its banner is there but no GPU row could be read (cut or wrapped past reading)" if has_banner
               else "no GPU row with a bus id could be read")
        raise HalfReadable(f"the default nvidia-smi screen, half-readable: {why}", PASTE, source, 1)
    return _query(st, driver, cuda, missing, procs, none_found, source)


def _query(st: _State, driver: str | None, cuda: str | None, missing: list[tuple[int | None, str | None]],
           procs: list[ScreenProcess], none_found: bool, source: str) -> SmiQuery:
    gpus, notes = st.gpus, st.notes
    taken = {g.index for g in gpus}
    for idx, bus in missing:
        free = idx if idx is not None and idx not in taken else None
        g = SmiGpu(bus_id=bus, index=free, lost=True)
        g.unknown["lost"] = "nvidia-smi: Unable to determine the device handle for this GPU"
        gpus.append(g)
    listed = sorted(g.index for g in gpus if g.index is not None)
    # a row cut short, or the last GPU's box never closed (the paste ends inside it)
    cut = st.cut + [g for g in st.gpus if g not in st.cut and any(v.startswith("not printed (row cut)")
                                                                  for v in g.unknown.values())]
    if st.current is not None and st.current not in cut:
        cut.append(st.current)
    partial = listed != list(range(len(listed))) or bool(cut)
    at_least = (listed[-1] + 1 if listed else None) if partial else None
    if partial:
        notes.append(Note(None, f"the screen is cut (GPU rows {', '.join(map(str, listed))}"
                                f"{' incomplete' if cut else ''}): the host has at least {at_least} GPU(s); "
                                f"for the whole host {PASTE_INSTEAD}"))
    if none_found and not gpus:
        notes.append(Note(None, "nvidia-smi printed 'No devices were found': the driver sees no GPU"))
    notes.append(Note(None, NOT_ON_SCREEN))
    count = None if partial else len(gpus)
    q = SmiQuery(driver, cuda, count, gpus, False, notes, source)
    q.screen, q.processes, q.at_least = True, procs, at_least
    return q
