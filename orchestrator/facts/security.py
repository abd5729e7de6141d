"""The security floor: the oldest NVIDIA driver of each branch, and the oldest ConnectX / BlueField
firmware of each train, that carries the fixes of NVIDIA's security bulletins.

The data is `security_floor.json` beside this module, made by tools/security_floor.py from the
bulletins NVIDIA publishes at github.com/NVIDIA/product-security (each bulletin in it names its
Markdown source and its nvidia.com page); `probe run --security-floor FILE` judges against a newer
file of the same format.  The file's date (its newest bulletin) travels with every finding and is
shown by the report, so an old floor is visible.

Pure but for `load`, which reads one file (cached): version strings in, verdicts out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date as Date
from functools import lru_cache
from pathlib import Path
from typing import Any

from orchestrator.facts.shown import json_shown
from orchestrator.files.bounded import UnreadableInput
from orchestrator.files.jsontext import read_json_file

FORMAT = "fleetprobe-security-floor/1"
SHIPPED = Path(__file__).resolve().with_name("security_floor.json")
# A floor file is read whole: the shipped one is 14 KB; NVIDIA's whole bulletin history fits in far less.
FILE_LIMIT = 4 << 20
# Dates a bulletin may carry: NVIDIA's product security bulletins start in the 2000s; a date past
# this century is a typo or a forgery, and it would be printed in every finding.
DATE_MIN, DATE_MAX = Date(2000, 1, 1), Date(2099, 12, 31)
# A driver version as NVIDIA numbers them: branch, then one or two numbers (535.183.01, 390.157).
DRIVER_VERSION = re.compile(r"([0-9]{3})\.[0-9]{1,4}(?:\.[0-9]{1,4})?")  # ASCII: \d takes any script's digits
FW_NUMBER_MAX = 99_999  # a firmware train or build (28.39.1002): NVIDIA's have at most 4 digits
TEXT_MAX = 1_000  # characters of a bulletin's id, title, url or source: printed in findings

# Firmware major number -> adapter family: NVIDIA names each family's firmware by its first number
# (mlxup 4.24 release notes, "Supported Adapters Cards and Firmware Versions": 12.28 ConnectX-4,
# 14.32 ConnectX-4 Lx, 16.35 ConnectX-5, 20.37 ConnectX-6, 22.37 ConnectX-6 Dx/DE, 24.37 BlueField-2,
# 26.37 ConnectX-6 Lx, 28.37 ConnectX-7, 32.37 BlueField-3; MFT 4.34: 40.47 ConnectX-8; MFT 4.25.1:
# 18.33 BlueField).
FW_FAMILIES: dict[int, str] = {12: "ConnectX-4", 14: "ConnectX-4 Lx", 16: "ConnectX-5", 18: "BlueField",
                               20: "ConnectX-6", 22: "ConnectX-6 Dx", 24: "BlueField-2", 26: "ConnectX-6 Lx",
                               28: "ConnectX-7", 32: "BlueField-3", 40: "ConnectX-8"}
FW_FAMILY_NAMES = frozenset(FW_FAMILIES.values())


class FloorError(ValueError):
    """A security floor file that cannot be used; the message names the file and what is wrong."""


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


@dataclass(frozen=True)
class Bulletin:
    id: str
    title: str
    date: str  # YYYY-MM-DD: the bulletin's last update
    url: str  # its nvidia.com page
    source: str  # its Markdown in github.com/NVIDIA/product-security
    cves: tuple[str, ...]

    def label(self) -> str:
        return f"bulletin {self.id} ({self.date})"


@dataclass(frozen=True)
class DriverBulletin(Bulletin):
    fixed: Mapping[str, str] = field(default_factory=dict)  # "R535" -> "535.309.01"


@dataclass(frozen=True)
class FirmwareFix:
    families: tuple[str, ...]
    train: int  # the middle number of 28.39.1002
    build: int  # the first fixed build on that train


@dataclass(frozen=True)
class FirmwareBulletin(Bulletin):
    fixed: tuple[FirmwareFix, ...] = ()


@dataclass(frozen=True)
class DriverVerdict:
    """What the floor says of one driver version."""

    version: str
    branch: str  # "R535"; "" when the version does not parse
    missing: tuple[DriverBulletin, ...] = ()  # bulletins whose fix it lacks, newest first
    floor: str | None = None  # the branch's newest fixed version
    last_listed: DriverBulletin | None = None  # the newest bulletin naming the branch
    unlisted: bool = False  # the newest driver bulletin does not name the branch: no fixes any more
    newer_than_file: bool = False  # a branch newer than every branch the file knows: cannot judge
    listed_now: tuple[str, ...] = ()  # the branches the newest driver bulletin names

    @property
    def below(self) -> bool:
        return bool(self.missing)


@dataclass(frozen=True)
class FirmwareVerdict:
    fw_ver: str
    family: str
    train: int
    build: int
    missing: tuple[tuple[FirmwareBulletin, str], ...] = ()  # (bulletin, what it asks for), newest first


@dataclass(frozen=True)
class SecurityFloor:
    date: str
    made: str
    file: str  # "shipped" or the path it was read from
    driver: tuple[DriverBulletin, ...]
    firmware: tuple[FirmwareBulletin, ...]

    def describe(self) -> str:
        """One line for findings and the report: which file, of which date."""
        where = "shipped security floor" if self.file == "shipped" else f"security floor {self.file}"
        return f"{where} of {self.date}"

    # ------------------------------------------------------------------ the driver

    def judge_driver(self, version: str) -> DriverVerdict:
        m = re.match(r"^\s*(\d{3})\.\d+", version or "")
        if not m:
            return DriverVerdict(version, "")
        branch = f"R{m.group(1)}"
        have = version_key(version)
        listing = [b for b in self.driver if branch in b.fixed]
        newest = max(self.driver, key=lambda b: (b.date, b.id)) if self.driver else None
        listed_now = tuple(newest.fixed) if newest else ()
        known = [int(r[1:]) for b in self.driver for r in b.fixed]
        if not listing:
            return DriverVerdict(version, branch, listed_now=listed_now,
                                 newer_than_file=not known or int(m.group(1)) > max(known),
                                 unlisted=bool(known) and int(m.group(1)) <= max(known))
        missing = tuple(sorted((b for b in listing if have < version_key(b.fixed[branch])),
                               key=lambda b: (b.date, b.id), reverse=True))
        last = max(listing, key=lambda b: (b.date, b.id))
        floor = max((b.fixed[branch] for b in listing), key=version_key)
        return DriverVerdict(version, branch, missing, floor, last, unlisted=newest is not None and branch not in newest.fixed,
                             listed_now=listed_now)

    # ------------------------------------------------------------------ adapter firmware

    def judge_firmware(self, fw_ver: str) -> FirmwareVerdict | None:
        """None when the version is not of an adapter the bulletins cover (or does not parse)."""
        m = re.match(r"^\s*(\d+)\.(\d+)\.(\d+)", fw_ver or "")
        if not m:
            return None
        major, train, build = (int(x) for x in m.groups())
        family = FW_FAMILIES.get(major)
        if family is None:
            return None
        missing: list[tuple[FirmwareBulletin, str]] = []
        covered = False
        for b in sorted(self.firmware, key=lambda b: (b.date, b.id), reverse=True):
            rows = [f for f in b.fixed if family in f.families]
            if not rows:
                continue
            covered = True
            same = [f for f in rows if f.train == train]
            fixes = ", ".join(f"{major}.{f.train}.{f.build}" for f in sorted(rows, key=lambda f: f.train))
            if same:
                need = max(f.build for f in same)
                if build < need:
                    missing.append((b, f"{major}.{train}.{need} or newer"))
            elif train < max(f.train for f in rows):
                missing.append((b, f"a fixed train ({fixes})"))
        if not covered:
            return None
        return FirmwareVerdict(fw_ver, family, train, build, tuple(missing))


def _str(d: Mapping[str, Any], key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise FloorError(f"{where}: {key} must be a string")
    if len(v) > TEXT_MAX or not v.isprintable():
        raise FloorError(f"{where}: {key} must be one line of at most {TEXT_MAX} printable characters")
    return v


def floor_date(v: Any, where: str) -> str:
    """A YYYY-MM-DD that is a real calendar date between DATE_MIN and DATE_MAX; FloorError naming `where`."""
    try:
        day = Date.fromisoformat(v) if isinstance(v, str) and re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", v) else None
    except ValueError:  # 2024-02-30, 9999-99-99
        day = None
    if day is None or not DATE_MIN <= day <= DATE_MAX:
        raise FloorError(f"{where}: {_shown(v)} is not a date YYYY-MM-DD between {DATE_MIN} and {DATE_MAX}")
    return str(v)


def _fixed_drivers(fixed: Any, where: str) -> dict[str, str]:
    """A driver bulletin's fixed versions: branch (R535) -> a version of that branch (535.309.01)."""
    if not isinstance(fixed, dict) or not fixed:
        raise FloorError(f"{where}: fixed must map branches (R535) to versions of that branch (535.309.01)")
    for branch, version in fixed.items():
        m = DRIVER_VERSION.fullmatch(version) if isinstance(version, str) else None
        if not (re.fullmatch(r"R[0-9]{3}", branch) and m and m.group(1) == branch[1:]):
            raise FloorError(f"{where}: fixed must map branches (R535) to versions of that branch: {branch[:20]!r}: "
                             f"{_shown(version)} is not one (the branch's three digits, then one or two numbers of at most "
                             "4 digits: 535.309.01)")
    return dict(fixed)


def _bulletin(d: Any, where: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise FloorError(f"{where}: a bulletin must be an object")
    out: dict[str, Any] = {k: _str(d, k, where) for k in ("id", "title", "url", "source")}
    out["date"] = floor_date(d.get("date"), f"{where}: bulletin {out['id']}: date")
    cves = d.get("cves")
    if not isinstance(cves, list) or not all(isinstance(c, str) and c.startswith("CVE-") and len(c) <= 40
                                             and c.isprintable() for c in cves):
        raise FloorError(f"{where}: bulletin {out['id']}: cves must be a list of CVE ids")
    out["cves"] = tuple(cves)
    return out


def parse(doc: Any, file: str = "shipped") -> SecurityFloor:
    """A floor document (security_floor.json's shape) -> SecurityFloor; FloorError naming what is wrong."""
    where = "the shipped security floor" if file == "shipped" else file
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FloorError(f"{where}: not a security floor file (its format must be {FORMAT!r}; "
                         "make one with tools/security_floor.py)")
    drivers = []
    for i, d in enumerate(_list(doc.get("driver"), where, "driver")):
        bulletin = _bulletin(d, f"{where}: driver[{i}]")
        fixed = _fixed_drivers(d.get("fixed"), f"{where}: driver bulletin {bulletin['id']}")
        drivers.append(DriverBulletin(**bulletin, fixed=fixed))
    firmware = []
    for i, d in enumerate(_list(doc.get("nic_firmware"), where, "nic_firmware")):
        bulletin = _bulletin(d, f"{where}: nic_firmware[{i}]")
        at = f"{where}: nic_firmware bulletin {bulletin['id']}"
        rows = [_firmware_fix(r, at) for r in _list(d.get("fixed"), at, "fixed")]
        firmware.append(FirmwareBulletin(**bulletin, fixed=tuple(rows)))
    date = floor_date(doc.get("date"), f"{where}: date (the newest bulletin it holds)")
    made = doc.get("made")
    if made is not None and (not isinstance(made, str) or len(made) > TEXT_MAX or not made.isprintable()):
        raise FloorError(f"{where}: made must be one line of text (when the file was made)")
    return SecurityFloor(date, made or "", file, tuple(drivers), tuple(firmware))


def _firmware_fix(r: dict[str, Any], where: str) -> FirmwareFix:
    fams, train, build = r.get("families"), r.get("train"), r.get("build")
    if not (isinstance(fams, list) and fams and all(isinstance(x, str) and x in FW_FAMILY_NAMES for x in fams)):
        raise FloorError(f"{where}: each fix needs families, of {', '.join(sorted(FW_FAMILY_NAMES))}")
    numbers: list[int] = []
    for name, v in (("train", train), ("build", build)):
        if not isinstance(v, int) or not _count(v):
            raise FloorError(f"{where}: {name} {_shown(v)} is not a whole number from 0 to {FW_NUMBER_MAX}")
        numbers.append(v)
    return FirmwareFix(tuple(fams), numbers[0], numbers[1])


def _shown(v: Any) -> str:
    """A value as the file writes it (null, "12"), an integer of hundreds of digits by its size."""
    if isinstance(v, int) and v.bit_length() > 1000:
        return "an integer of more than 300 digits"
    return json_shown(v, 40)


def _count(v: Any) -> bool:
    # compared, never converted: a 4,000-digit integer is not a firmware number
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= FW_NUMBER_MAX


def _list(v: Any, where: str, what: str) -> Iterable[dict[str, Any]]:
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise FloorError(f"{where}: {what} must be a list of objects")
    return v


@lru_cache(maxsize=8)
def load(path: str | None = None) -> SecurityFloor:
    """The shipped floor (path None) or the file at `path`; FloorError when it cannot be used."""
    file = Path(path) if path else SHIPPED
    try:  # a FIFO, a device or a file of gigabytes is refused, never waited on or read whole
        doc = read_json_file(file, FILE_LIMIT, "security floor file")
    except UnreadableInput as e:
        raise FloorError(f"cannot read the security floor {e}") from None
    except ValueError as e:
        raise FloorError(f"{file}: {e}") from None
    return parse(doc, "shipped" if path is None else str(path))
