"""Import text evidence of one host: recognise each file, parse it, merge into facts sections.

Used by `probe import FILE...` (files on disk) and by raw mode (stdout of the standard commands
run over SSH on a host without a usable Python).  I/O is limited to reading the given files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.facts import registry
from orchestrator.facts.conform import conform_facts
from orchestrator.facts.textparse.bench import parse_nccl_tests, parse_nvbandwidth, parse_p2p_bwlat
from orchestrator.facts.textparse.common import HalfReadable, TextParseError, decode_input, read_path
from orchestrator.facts.textparse.csvquery import parse_smi_csv
from orchestrator.facts.textparse.detect import PARSED_KINDS, detect_kind
from orchestrator.facts.textparse.facts import Parsed, all_notes, to_facts
from orchestrator.facts.textparse.ibstat import parse_ib
from orchestrator.facts.textparse.kernel_log import parse_kernel_log
from orchestrator.facts.textparse.lspci import parse_lspci_tree, parse_lspci_verbose
from orchestrator.facts.textparse.nvlink import parse_nvlink
from orchestrator.facts.textparse.perftest import runs_or_error
from orchestrator.facts.textparse.smi import SmiQuery, parse_smi_list, parse_smi_query, parse_smi_xml
from orchestrator.facts.textparse.smi_screen import parse_smi_screen
from orchestrator.facts.textparse.topo import parse_topo_cpu, parse_topo_matrix, parse_topo_p2p
from orchestrator.files.bounded import is_regular

PARSERS: dict[str, Callable[[str, str], Any]] = {
    "topo_matrix": parse_topo_matrix,
    "topo_p2p": parse_topo_p2p,
    "topo_cpu": parse_topo_cpu,
    "nvlink_status": parse_nvlink,
    "nvlink_caps": parse_nvlink,
    "smi_list": parse_smi_list,
    "smi_query": parse_smi_query,
    "smi_query_xml": parse_smi_xml,
    "smi_query_csv": parse_smi_csv,
    "smi_screen": parse_smi_screen,  # the default `nvidia-smi` screen, every era
    "lspci_tree": parse_lspci_tree,
    "lspci_verbose": parse_lspci_verbose,
    "kernel_log": parse_kernel_log,
    "ibstat": parse_ib,  # ibstat, ibstatus and ibv_devinfo
    "p2p_bandwidth_latency": parse_p2p_bwlat,
    "nvbandwidth": parse_nvbandwidth,
    "nccl_tests": parse_nccl_tests,
    "perftest": runs_or_error,  # ib_write_bw, ib_write_lat, ib_send_bw ... (client or server side)
}

# Raw mode: what to run on a host without Python, by kind.  Each is optional on the host; the
# caller runs them with a timeout and passes None for a command that failed or is missing.
RAW_COMMANDS: dict[str, str] = {
    "topo_matrix": "nvidia-smi topo -m",
    "smi_query_xml": "nvidia-smi -q -x",
    "nvlink_status": "nvidia-smi nvlink -s",
    "lspci_tree": "lspci -tvnn",
    "lspci_verbose": "lspci -vvvnn",
}



@dataclass
class ImportedFile:
    source: str
    kind: str
    ok: bool
    error: str | None = None  # one line: "file:line: why"
    paste: str | None = None  # a half-readable file: the command whose whole output to paste instead

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "paste" or v is not None}


@dataclass
class ImportedHost:
    facts: dict[str, dict[str, Any]]
    files: list[ImportedFile]
    notes: list[str] = field(default_factory=list)  # what could not be read, with file and line
    errors: list[str] = field(default_factory=list)  # files that could not be imported at all

    @property
    def half_readable(self) -> list[ImportedFile]:
        """The files of a known kind that were cut before they stated a fact (HalfReadable)."""
        return [f for f in self.files if f.paste is not None]

    @property
    def outcomes(self) -> dict[str, str]:
        """Probe outcomes as a live run would record them: ok for each probe a section stands in for."""
        return dict.fromkeys(registry.probes_standing_for(self.facts), "ok")

    def to_dict(self) -> dict[str, Any]:
        return {"facts": self.facts, "files": [f.to_dict() for f in self.files], "notes": list(self.notes),
                "errors": list(self.errors), "outcomes": self.outcomes}


def parse_text(text: str, source: str, kind: str | None = None) -> tuple[str, Any]:
    """(kind, parsed object).  Raises TextParseError for unknown/unsupported kinds and bad input."""
    if kind is not None and kind not in PARSERS:
        raise TextParseError(f"unknown kind {kind!r}; known: {', '.join(PARSED_KINDS)}", source)
    k = kind or detect_kind(text)
    if k not in PARSERS:
        raise TextParseError("not a recognised nvidia-smi or lspci output, benchmark, kernel log or ibstat text (give --kind to force one of: "
                             f"{', '.join(PARSED_KINDS)})", source, 1)
    return k, PARSERS[k](text, source)


def _merge(p: Parsed, obj: Any, host_notes: list[str]) -> None:
    if isinstance(obj, SmiQuery) and obj.screen and p.query is not None and not p.query.screen:
        # the default screen says less than -q about the same GPUs: it never replaces it
        host_notes.append(f"{obj.source}: the default nvidia-smi screen beside {p.query.source}: the -q record is kept")
        return
    existing = {
        "TopoMatrix": p.topo, "SmiList": p.smi_list, "SmiQuery": p.query, "LspciTree": p.tree,
        "LspciVerbose": p.verbose,
    }.get(type(obj).__name__)
    if existing is not None:
        host_notes.append(f"{obj.source}: a second {type(obj).__name__} for this host; it replaces "
                          f"{existing.source}")
    p.add(obj)


def _refused(source: str, kind: str | None, e: TextParseError) -> ImportedFile:
    return ImportedFile(source, kind or "unknown", False, str(e), e.paste if isinstance(e, HalfReadable) else None)


def _parse_all(items: list[tuple[str, str | bytes, str | None]]) -> tuple[Parsed, list[ImportedFile], list[str], list[str]]:
    """[(source, data, kind or None to sniff)] -> (merged parse, one record per file, errors, notes).
    The one loop of `probe import` and raw mode, so a refused file (a half-readable one with the
    command to paste) is recorded the same way by both."""
    p = Parsed()
    files: list[ImportedFile] = []
    errors: list[str] = []
    notes: list[str] = []
    for source, data, kind in items:
        try:
            text = decode_input(data, source)
            k, obj = parse_text(text, source, kind)
        except TextParseError as e:
            files.append(_refused(source, kind, e))
            errors.append(str(e))
            continue
        _merge(p, obj, notes)
        files.append(ImportedFile(source, k, True))
    return p, files, errors, notes


def import_texts(items: list[tuple[str, str | bytes]], kind: str | None = None) -> ImportedHost:
    """[(source name, text or bytes)] of one host -> ImportedHost.  Bad files become errors, not
    exceptions, so one broken paste does not lose the others."""
    p, files, errors, notes = _parse_all([(source, data, kind) for source, data in items])
    # what the parsers made is held to the declared types like stored facts are: a parser that
    # let a wrong shape through costs its section, never a check's crash
    facts, malformed = conform_facts(to_facts(p))
    errors.extend(malformed)
    notes.extend(str(n) for n in all_notes(p))
    for sec in facts.values():
        notes.extend(f"merge: {x}" for x in sec.get("notes", []) if isinstance(x, str) and "disagree" in x)
    return ImportedHost(facts, files, notes, errors)


def import_files(paths: list[Path], kind: str | None = None) -> ImportedHost:
    """Files of one host (any mix of supported outputs) -> merged facts.  At most 8 MiB read per file."""
    items: list[tuple[str, str | bytes]] = []
    pre_errors: list[ImportedFile] = []
    for path in paths:
        try:
            items.append((str(path), read_path(path)))
        except TextParseError as e:
            pre_errors.append(ImportedFile(str(path), kind or "unknown", False, str(e)))
    host = import_texts(items, kind)
    host.files = pre_errors + host.files
    host.errors = [f.error for f in pre_errors if f.error] + host.errors
    return host


def facts_from_raw_outputs(outputs: dict[str, bytes | None]) -> dict[str, Any]:
    """Raw mode: {kind: stdout bytes, or None when the command was missing, failed or timed out} -> a dict with
    `facts` (sections), `outcomes` (probe -> ok), `files`, `notes`, `errors`, `missing` (kinds
    whose command gave nothing) and `mode: "raw"`.  The kind is taken from the key, not sniffed."""
    items: list[tuple[str, str | bytes]] = []
    missing: list[str] = []
    empty: list[str] = []
    kinds: dict[str, str] = {}
    for k, raw in outputs.items():
        if k not in PARSERS:
            raise ValueError(f"unknown raw output kind {k!r}; known: {', '.join(PARSED_KINDS)}")
        src = RAW_COMMANDS.get(k, k)
        if raw is None:
            missing.append(k)
            continue
        if not raw.strip():
            # The command ran and printed nothing: `nvlink -s` does that on GPUs without NVLink.
            empty.append(f"{src}: ran but printed nothing")
            continue
        items.append((src, raw))
        kinds[src] = k
    p, files, errors, notes = _parse_all([(src, data, kinds[src]) for src, data in items])
    facts = to_facts(p)
    notes.extend(str(n) for n in all_notes(p))
    host = ImportedHost(facts, files, empty + notes, errors)
    out = host.to_dict()
    out["mode"] = "raw"
    # a command's output cut before it stated a fact: named apart, with the command to run whole
    out["half_readable"] = [f.to_dict() for f in host.half_readable]
    out["missing"] = [f"{RAW_COMMANDS.get(k, k)}: no output (command missing, failed or timed out)" for k in missing]
    return out


def blank_file(path: Path) -> bool:
    """A regular file with nothing but whitespace in it: a stream that captured nothing (`job.err`
    of a clean run), never evidence.  Only small files are opened; others are evidence."""
    try:
        if not is_regular(path) or path.stat().st_size > _BLANK_MAX:
            return False
        with open(path, "rb") as fh:
            return not fh.read(_BLANK_MAX).strip()
    except OSError:
        return False  # the reader refuses it with its reason beside the host's other files


_BLANK_MAX = 4096


def import_fleet(root: Path, kind: str | None = None, skipped: list[str] | None = None) -> dict[str, ImportedHost]:
    """`probe import --fleet DIR`: each subdirectory is a host (its files are that host's
    evidence); loose files are grouped by the part of their name before the first dot
    (`gpu07.topo.txt`, `gpu07.q.xml` -> host `gpu07`).  Hidden entries are skipped, and so are
    blank files (an empty `slurm-42.err` is no host): each named in `skipped`."""
    groups: dict[str, list[Path]] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError as e:
        raise TextParseError(f"cannot list fleet directory: {e.strerror or e}", str(root)) from None
    for entry in entries:
        if entry.name.startswith("."):
            continue
        # anything but a directory is taken as evidence: a FIFO or device is then refused by the
        # reader with its reason beside the host's other files, never skipped unsaid
        if entry.is_dir():
            files = sorted(p for p in entry.iterdir() if not p.is_dir() and not p.name.startswith("."))
            name = entry.name
        else:
            files, name = [entry], entry.name.split(".", 1)[0]
        for f in files:
            if blank_file(f):
                if skipped is not None:
                    skipped.append(f"{f}: empty (nothing was captured in it): not evidence, skipped")
            else:
                groups.setdefault(name, []).append(f)
    return {name: import_files(paths, kind) for name, paths in groups.items()}


def summary_lines(host: ImportedHost) -> list[str]:
    """One line per file (kind or error) and per note, control characters removed, for the CLI."""
    from orchestrator.facts.textparse.common import strip_ansi

    def clean(s: str) -> str:
        return "".join(ch if ch.isprintable() else "?" for ch in strip_ansi(s))

    out = [clean(f"{f.source}: {f.kind}" if f.ok else f"{f.error}") for f in host.files]
    out += [clean(f"note: {n}") for n in host.notes]
    return out
