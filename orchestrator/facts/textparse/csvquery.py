"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` -> the SmiQuery record `-q` fills,
so a CSV feeds the same facts (and the same checks) as `-q`.

With a header the columns are named by it (`pcie.link.gen.current`, `memory.total [MiB]`).  Without
one they are named by the command line when the paste keeps it (`--query-gpu=index,name,...`);
otherwise only columns whose values say what they are (a bus id, a `GPU-` UUID, a product name)
are read, and the rest is a note.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.facts.numbers import SIZE_BYTES, int_or_none
from orchestrator.facts.textparse.common import (
    Note,
    TextParseError,
    clean_lines,
    decode_input,
    is_redacted,
    norm_bus_id,
)
from orchestrator.facts.textparse.smi import (
    SmiGpu,
    SmiQuery,
    _bool,
    _dev_id,
    _float,
    _int,
    _pct,
    _temp,
    _virt,
)

_QUERY = re.compile(r"--query-gpu[= ]([\w.,]+)")
_HEADER_FIELD = re.compile(r"^[a-z_]+(?:\.[a-z_0-9]+)*(?:\s*\[[^\]]*\])?$", re.I)
_NUMBER_UNIT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(MiB|GiB|KiB|W|%|C|MHz)?\s*$")


def _mib(v: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*(MiB|GiB|KiB)?\s*", v)
    size = int_or_none(m.group(1), SIZE_BYTES) if m else None
    if m is None or size is None:
        return None
    unit = m.group(2) or "MiB"  # nounits: memory.* is in MiB
    return size * {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]


def _num(v: str) -> str:
    m = _NUMBER_UNIT.match(v)
    return m.group(1) if m else v


# query field -> (SmiGpu attribute, converter of the printed value)
FIELDS: dict[str, tuple[str, Any]] = {
    "name": ("name", str.strip), "gpu_name": ("name", str.strip),
    "uuid": ("uuid", str.strip), "gpu_uuid": ("uuid", str.strip),
    "serial": ("serial", str.strip), "gpu_serial": ("serial", str.strip),
    "pci.bus_id": ("bus_id", norm_bus_id), "gpu_bus_id": ("bus_id", norm_bus_id),
    "pci.device_id": ("pci_device_id", _dev_id),
    "vbios_version": ("vbios", str.strip),
    "inforom.img": ("inforom_image", str.strip), "inforom.image": ("inforom_image", str.strip),
    "persistence_mode": ("persistence_mode", _bool),
    "compute_mode": ("compute_mode", lambda v: v.strip().lower().replace(" ", "_")),
    "pcie.link.gen.current": ("pcie_gen_current", lambda v: _int(_num(v))),
    "pcie.link.gen.gpucurrent": ("pcie_gen_current", lambda v: _int(_num(v))),
    "pcie.link.gen.max": ("pcie_gen_max", lambda v: _int(_num(v))),
    "pcie.link.gen.gpumax": ("pcie_gen_gpu_max", lambda v: _int(_num(v))),
    "pcie.link.gen.hostmax": ("pcie_gen_host_max", lambda v: _int(_num(v))),
    "pcie.link.width.current": ("pcie_width_current", lambda v: _int(_num(v))),
    "pcie.link.width.max": ("pcie_width_max", lambda v: _int(_num(v))),
    "memory.total": ("memory_total_bytes", _mib), "memory.used": ("memory_used_bytes", _mib),
    "temperature.gpu": ("temperature_c", lambda v: _temp(_num(v))),
    "temperature.memory": ("memory_temperature_c", lambda v: _temp(_num(v))),
    "fan.speed": ("fan_speed_pct", lambda v: _pct(_num(v))),
    "power.draw": ("power_w", lambda v: _float(_num(v))),
    "power.limit": ("power_limit_w", lambda v: _float(_num(v))),
    "ecc.mode.current": ("ecc_current", _bool),
    "ecc.errors.uncorrected.volatile.total": ("ecc_volatile_uncorrected", lambda v: _int(_num(v))),
    "ecc.errors.uncorrected.aggregate.total": ("ecc_aggregate_uncorrected", lambda v: _int(_num(v))),
    "ecc.errors.corrected.aggregate.total": ("ecc_aggregate_corrected", lambda v: _int(_num(v))),
    "mig.mode.current": ("mig_current", _bool), "mig.mode.pending": ("mig_pending", _bool),
    "virtualization_mode": ("virtualization_mode", _virt),
    "retired_pages.pending": ("remapped_pending", _bool),
    "compute_cap": ("compute_capability", lambda v: v.strip() if re.fullmatch(r"\s*\d+\.\d+\s*", v) else None),
}
# Fields nvidia-smi --help-query-gpu lists that carry no GPU fact we keep: a header made of them (and
# of FIELDS) is still a --query-gpu header, whichever column comes first.
OTHER_FIELDS = frozenset((
    "index", "count", "driver_version", "timestamp", "pstate", "display_mode", "display_active", "accounting.mode",
    "accounting.buffer_size", "pci.domain", "pci.bus", "pci.device", "pci.sub_device_id", "memory.free",
    "memory.reserved", "utilization.gpu", "utilization.memory", "encoder.stats.sessioncount", "gom.current",
    "enforced.power.limit", "power.default_limit", "power.max_limit", "power.min_limit", "clocks.gr", "clocks.sm",
    "clocks.mem", "clocks.video", "clocks.max.gr", "clocks.max.sm", "clocks.max.mem", "vbios_version",
    "platform.chassis_serial_number", "platform.slot_number", "platform.tray_index", "platform.host_id",
    "platform.peer_type", "platform.module_id", "fabric.state", "fabric.status", "protected_memory.total",
))
KNOWN_FIELDS = frozenset(FIELDS) | OTHER_FIELDS
_NA = re.compile(r"^\s*(\[?N/A\]?|\[Not Supported\]|Not Supported|\[Unknown Error\]|\[Insufficient Permissions\])\s*$", re.I)


def _field(header: str) -> str:
    return re.sub(r"\s*\[[^\]]*\]\s*$", "", header.strip()).lower()


def is_header(line: str) -> bool:
    """A --query-gpu CSV header: query field names only (with their `[unit]`), one at least a known field."""
    cells = [c.strip() for c in line.strip().split(",")]
    return bool(cells) and all(_HEADER_FIELD.match(c) for c in cells) and any(_field(c) in KNOWN_FIELDS
                                                                               for c in cells)


def looks_like(text: str) -> bool:
    """A header followed by a row of as many values: the columns need not start with index or name."""
    lines = [x for x in text.splitlines() if x.strip()][:200]
    for a, b in zip(lines, lines[1:]):
        if is_header(a) and not is_header(b) and len(b.split(",")) == len(a.split(",")):
            return True
    return False


def _guess(value: str) -> str | None:
    """The query field a bare value can only be (a header-less paste without its command line)."""
    v = value.strip()
    if norm_bus_id(v) and ":" in v and "." in v:
        return "pci.bus_id"
    if re.fullmatch(r"GPU-[0-9a-fA-Fx-]{8,}", v):
        return "uuid"
    if re.match(r"(NVIDIA|Tesla|Quadro|GeForce)\b", v):
        return "name"
    return None


def parse_smi_csv(text: str | bytes, source: str = "<text>") -> SmiQuery:
    text = decode_input(text, source) if isinstance(text, bytes) else text
    lines, notes = clean_lines(text, source)
    fields: list[str] | None = None
    single = False
    rows: list[tuple[int, list[str]]] = []
    for i, line in enumerate(lines, start=1):
        s = line.strip()
        if not s:
            continue
        m = _QUERY.search(s)
        if m:
            fields = fields or [f.lower() for f in m.group(1).split(",") if f]
            single = single or bool(re.search(r"\s(-i|--id[= ])\s*\S", s))
            continue
        cells = [c.strip() for c in s.split(",")]
        if is_header(s):
            fields = [_field(c) for c in cells]
            continue
        if len(cells) >= 2 or (fields is not None and len(fields) == 1):  # a one-field query prints one value a row
            rows.append((i, cells))
            continue
        notes.append(Note(i, f"not a CSV row, ignored: {s[:80]!r}"))
    if not rows:
        raise TextParseError("no --query-gpu CSV row found", source, 1)
    width = max(len(c) for _, c in rows)
    if fields is None:
        guessed = [_guess(rows[0][1][k]) if k < len(rows[0][1]) else None for k in range(width)]
        notes.append(Note(None, "no CSV header and no --query-gpu command line: only columns whose values name "
                                f"themselves are read ({', '.join(g for g in guessed if g) or 'none'})"))
        fields = [g or f"column{k + 1}" for k, g in enumerate(guessed)]
    gpus: list[SmiGpu] = []
    count: int | None = None
    driver: str | None = None
    for line_no, cells in rows:
        if len(cells) != len(fields):
            notes.append(Note(line_no, f"{len(cells)} values for {len(fields)} columns: row skipped"))
            continue
        g = SmiGpu()
        for f, raw in zip(fields, cells):
            if f == "count":
                count = _int(raw)
                continue
            if f == "index":
                g.index = _int(raw)
                continue
            if f == "driver_version" and raw and not _NA.match(raw):
                driver = driver or raw
                continue
            spec = FIELDS.get(f)
            if spec is None:
                continue
            attr, conv = spec
            if _NA.match(raw) or not raw:
                g.unknown[attr] = f"{raw or 'empty'} in the source"
                continue
            if is_redacted(raw):
                g.unknown[attr] = "redacted in the source"
                continue
            value = conv(raw)
            if value is None:
                g.unknown[attr] = f"{raw!r} not understood"
                continue
            setattr(g, attr, value)
        for attr in {a for a, _ in FIELDS.values()}:
            if getattr(g, attr) is None and attr not in g.unknown:
                g.unknown[attr] = "not queried (add it to --query-gpu)"
        gpus.append(g)
    if not gpus:
        raise TextParseError("no --query-gpu CSV row matches its header", source, rows[0][0])
    attached = count if count is not None else (None if single else len(gpus))
    if single:
        notes.append(Note(None, "the command line names one GPU (-i): the host's GPU count is not known"))
    if "index" not in fields:
        # nvidia-smi prints one row per GPU in index order: without an index column the row is the index
        for pos, g in enumerate(gpus):
            g.index = pos
    return SmiQuery(driver, None, attached, gpus, False, notes, source)
