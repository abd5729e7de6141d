"""`nvidia-smi nvlink -s` (status) and `nvlink -c` (capabilities) text -> dataclasses.

Both print a `GPU n: NAME (UUID: ...)` line per GPU (posters often crop it when they ran `-i 0`),
then one indented line per link, or per link and capability.  A GPU whose links are all down
gets NVML's "all links are inActive" message instead of link lines: its link count is then not
knowable from the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.numbers import GPU_GBYTES, INDEX, float_or_none, int_or_none
from orchestrator.facts.textparse.common import Note, TextParseError, clean_lines, decode_input, is_redacted

# Some drivers print their verdict on the GPU line itself: `GPU 1: ... (UUID: ...) NVML: Unable to
# retrieve Nvlink information as all links are inActive`.
GPU_LINE = re.compile(r"^\s*GPU\s+(\d+)\s*:\s*(.*?)\s*\(UUID:\s*([^)]*?)\s*\)\s*(.*?)\s*$")
_STATUS = re.compile(r"^\s*Link\s+(\d+)\s*:\s*(.*?)\s*$", re.I)
_CAP = re.compile(r"^\s*Link\s+(\d+)\s*,\s*(.+?)\s*:\s*(\S+)\s*$", re.I)
_SPEED = re.compile(r"^(\d+(?:\.\d+)?)\s*GB/s$", re.I)
_INACTIVE = re.compile(r"^<?\s*(?:inactive|not\s+active|disabled|down|off)\s*>?$", re.I)
_ALL_INACTIVE = re.compile(r"all links are in\s*active", re.I)
# nvidia-smi's capability wording -> the keys facts["nvlink"] uses (same as the nvlink probe).
CAP_KEYS = {
    "p2p is supported": "p2p_supported",
    "access to system memory supported": "sysmem_access",
    "p2p atomics supported": "p2p_atomics",
    "system memory atomics supported": "sysmem_atomics",
    "sli is supported": "sli_supported",
    "link is supported": "link_supported",
}


@dataclass
class NvlinkLink:
    link: int
    active: bool | None = None  # None: only capabilities were read (-c)
    speed_gbps: float | None = None  # per direction, as printed
    caps: dict[str, bool] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"link": self.link, "active": self.active, "speed_gbps": self.speed_gbps, "caps": dict(self.caps)}


@dataclass
class NvlinkGpu:
    index: int | None  # None: the `GPU n:` header was not in the text
    name: str | None = None
    uuid: str | None = None
    uuid_redacted: bool = False  # the poster blanked the UUID out (`...`, `GPU-xxxx`): unknown, never an identity
    links: list[NvlinkLink] = field(default_factory=list)
    all_inactive: bool = False  # NVML's "all links are inActive" message (link count unknown then)
    partial: bool = False  # the poster elided or cut some of this GPU's link lines
    message: str | None = None  # any NVML message printed for this GPU
    _by_link: dict[int, NvlinkLink] = field(default_factory=dict, repr=False, compare=False)

    def link(self, n: int) -> NvlinkLink:
        lk = self._by_link.get(n)
        if lk is None:
            lk = self._by_link[n] = NvlinkLink(n)
            self.links.append(lk)
        return lk

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "links": [lk.to_dict() for lk in sorted(self.links, key=lambda x: x.link)],
            "all_inactive": self.all_inactive,
            "message": self.message,
        }


@dataclass
class NvlinkReport:
    gpus: list[NvlinkGpu]
    has_status: bool  # link states/speeds were read (-s)
    has_caps: bool  # capabilities were read (-c)
    notes: list[Note] = field(default_factory=list)
    source: str = "<text>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "nvlink",
            "source": self.source,
            "has_status": self.has_status,
            "has_caps": self.has_caps,
            "gpus": [g.to_dict() for g in self.gpus],
            "notes": [n.to_dict() for n in self.notes],
        }


@dataclass
class _Reader:
    """parse_nvlink's state line by line: the GPUs met so far and the one whose links follow."""

    notes: list[Note]
    gpus: list[NvlinkGpu] = field(default_factory=list)
    by_key: dict[tuple[int, str], NvlinkGpu] = field(default_factory=dict)  # (index, uuid): -s and -c of one GPU merge
    cur: NvlinkGpu | None = None
    has_status: bool = False
    has_caps: bool = False
    seen_status: set[tuple[int, int]] = field(default_factory=set)

    def current(self, line_no: int) -> NvlinkGpu:
        """The GPU a link line belongs to; an unplaced one where no `GPU n:` line came first."""
        if self.cur is None:
            self.cur = NvlinkGpu(None)
            self.gpus.append(self.cur)
            self.notes.append(Note(line_no, "no 'GPU n:' line before the links: GPU index, name and UUID unknown"))
        return self.cur

    def line(self, i: int, line: str) -> None:
        m = GPU_LINE.match(line)
        if m:
            self.gpu_line(i, m)
        elif _ALL_INACTIVE.search(line):
            g = self.current(i)
            g.all_inactive = True
            g.message = line.strip()
            self.has_status = True
        elif m := _CAP.match(line):
            self.cap_line(i, m)
        elif m := _STATUS.match(line):
            self.status_line(i, m)
        elif line.strip().startswith("NVML:") and self.cur is not None:
            self.cur.message = line.strip()
            self.notes.append(Note(i, f"NVML message: {line.strip()[:100]}"))
        else:
            self.notes.append(Note(i, f"not an nvlink line, ignored: {line.strip()[:80]!r}"))

    def gpu_line(self, i: int, m: re.Match[str]) -> None:
        uuid = m.group(3) or None
        if is_redacted(uuid):
            self.notes.append(Note(i, f"GPU {m.group(1)}: UUID redacted in the source: unknown"))
            uuid = None
        index = int_or_none(m.group(1), INDEX)
        if index is None:
            self.notes.append(Note(i, f"GPU {m.group(1)[:20]!r}... is no GPU index: its block is read as unplaced"))
            return
        gkey = (index, uuid or "")
        cur = self.by_key.get(gkey)
        if cur is None:
            cur = self.by_key[gkey] = NvlinkGpu(gkey[0], m.group(2) or None, uuid)
            self.gpus.append(cur)
        self.cur = cur
        cur.uuid_redacted = cur.uuid_redacted or (uuid is None and bool(m.group(3)))
        verdict = m.group(4)
        if verdict:
            cur.message = verdict
            if _ALL_INACTIVE.search(verdict):
                cur.all_inactive = True
                self.has_status = True

    def cap_line(self, i: int, m: re.Match[str]) -> None:
        key = CAP_KEYS.get(m.group(2).lower(), re.sub(r"\W+", "_", m.group(2).lower()).strip("_"))
        val = m.group(3).lower()
        if val not in ("true", "false"):
            self.notes.append(Note(i, f"capability {m.group(2)!r} has value {m.group(3)!r}, not true/false"))
            return
        link = int_or_none(m.group(1), INDEX)
        if link is None:
            self.notes.append(Note(i, f"link {m.group(1)[:20]!r}... is no link number: line skipped"))
            return
        self.current(i).link(link).caps[key] = val == "true"
        self.has_caps = True

    def status_line(self, i: int, m: re.Match[str]) -> None:
        n, value = int_or_none(m.group(1), INDEX), m.group(2)
        if n is None:
            self.notes.append(Note(i, f"link {m.group(1)[:20]!r}... is no link number: line skipped"))
            return
        g = self.current(i)
        lk = g.link(n)
        sm = _SPEED.match(value)
        if sm:
            lk.active, lk.speed_gbps = True, float_or_none(sm.group(1), GPU_GBYTES)
        elif _INACTIVE.match(value):
            lk.active = False
        elif not value:
            self.notes.append(Note(i, f"link {n} line has no value (truncated?): its state is unknown"))
        else:
            self.notes.append(Note(i, f"link {n}: state {value!r} not understood; left unknown"))
        seen = (id(g), n)
        if seen in self.seen_status:
            self.notes.append(Note(i, f"link {n} listed twice for the same GPU; the later line is kept"))
        self.seen_status.add(seen)
        self.has_status = True


def parse_nvlink(text: str | bytes, source: str = "<text>") -> NvlinkReport:
    """Parse `nvlink -s`, `nvlink -c`, or both concatenated.  Raises TextParseError when no GPU or
    link line is found, or a link line is cut off."""
    text = decode_input(text, source) if isinstance(text, bytes) else text
    if not text.strip():
        raise TextParseError("empty input (no text at all)", source, 1)
    lines, notes = clean_lines(text, source)
    reader = _Reader(notes)
    elided = {n.line for n in notes if n.line is not None and n.text.startswith("elision")}
    for i, line in enumerate(lines, start=1):
        if i in elided and reader.cur is not None:
            reader.cur.partial = True  # lines of this GPU's block were left out
        if line.strip():
            reader.line(i, line)
    if not reader.gpus:
        raise TextParseError("no 'GPU n:' or 'Link n:' lines found: not nvidia-smi nvlink output", source, 1)
    for g in reader.gpus:
        _check_listing(g, notes)
    return NvlinkReport(reader.gpus, reader.has_status, reader.has_caps, notes, source)


def _check_listing(g: NvlinkGpu, notes: list[Note]) -> None:
    """Mark a GPU whose link numbers have gaps partial, and one whose listed links are all
    inactive all-inactive."""
    listed = sorted(lk.link for lk in g.links)
    # nvidia-smi lists every link a GPU has, 0..N-1 (inactive ones too): a gap means a cut paste
    if listed and listed != list(range(listed[-1] + 1)):
        g.partial = True
        notes.append(Note(None, f"GPU {g.index}: links {listed[0]}..{listed[-1]} listed with gaps: "
                                "the listing is partial, its link count unknown"))
    states = [lk.active for lk in g.links]
    if states and not g.partial and all(a is False for a in states):
        g.all_inactive = True  # every link listed `<inactive>`: the same verdict as NVML's one-line message
