#!/usr/bin/env python3
"""Build orchestrator/facts/security_floor.json from NVIDIA's security bulletins.

NVIDIA publishes every bulletin in Markdown at https://github.com/NVIDIA/product-security (one
folder per bulletin: <year>/<id>/<id>.md).  This reads a checkout of it and keeps what the
`software.security.*` checks judge (verdict/checks/software.py, facts/security.py):

* GPU Display Driver bulletins: per Linux driver branch (the "Linux(R535)" rows of the data-center,
  RTX and GeForce products; vGPU guest and manager rows are left out) the updated version, and
  the CVE ids those rows address;
* ConnectX / BlueField bulletins: per firmware train (the middle number of 28.39.1002) the first
  fixed build, per adapter family.

    git clone https://github.com/NVIDIA/product-security /tmp/product-security
    python3 tools/security_floor.py /tmp/product-security > orchestrator/facts/security_floor.json

The file names its sources (each bulletin's Markdown and its nvidia.com page) and its date (the
newest bulletin it holds), which the report shows, so an old floor is visible.  Standard library
only; run it when NVIDIA publishes a bulletin, review the diff, commit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = "https://github.com/NVIDIA/product-security"
PAGE = "https://nvidia.custhelp.com/app/answers/detail/a_id/{id}"
FORMAT = "fleetprobe-security-floor/1"

_TITLE = re.compile(r"^#+\s*Security Bulletin:\s*(?P<title>.+?)\s*$", re.MULTILINE)
_UPDATED = re.compile(r"^Updated (\d{4}-\d{2}-\d{2})", re.MULTILINE)
_ROW = re.compile(r"^\|\s*(CVE-\d{4}-\d+)\s*\|(.*)$", re.MULTILINE)
_LINUX_BRANCH = re.compile(r"^Linux\(R(\d{3})\)$")
_DRIVER = re.compile(r"^(\d{3})\.\d+(?:\.\d+)?$")
# "All versions prior to xx.39.3560", "prior to 46.1006", "prior to 12.28.2302"
_FW_PRIOR = re.compile(r"prior to (?:(?:xx|\d+)\.)?(\d+)\.(\d+)\b")
_DRIVER_SKIP = ("guest", "virtual gpu manager", "vgpu", "cloud gaming")


def _cells(rest: str) -> list[str]:
    return [c.strip() for c in rest.strip().strip("|").split("|")]


def _head(text: str) -> tuple[str, str]:
    title = _TITLE.search(text)
    updated = _UPDATED.search(text)
    return (title.group("title") if title else "", updated.group(1) if updated else "")


def driver_bulletin(bid: str, text: str, source: str) -> dict[str, Any] | None:
    """A GPU Display Driver bulletin: the fixed version per Linux branch and the CVEs of those rows;
    None when it has no Linux branch row (a Windows-only bulletin)."""
    title, date = _head(text)
    fixed: dict[str, str] = {}
    cves: set[str] = set()
    for cve, rest in _ROW.findall(text):
        cells = _cells(rest)
        if len(cells) < 4:
            continue
        product, platform, updated = cells[0], cells[1], cells[3]
        if any(s in product.lower() for s in _DRIVER_SKIP):
            continue
        m = _LINUX_BRANCH.match(platform)
        version = updated.split("(")[0].strip()
        if not m or not _DRIVER.match(version) or _DRIVER.match(version).group(1) != m.group(1):  # type: ignore[union-attr]
            continue  # a typo'd row (another branch's version) says nothing reliable
        branch = f"R{m.group(1)}"
        if branch not in fixed or _key(version) > _key(fixed[branch]):
            fixed[branch] = version
        cves.add(cve)
    if not fixed:
        return None
    return {"id": bid, "title": title, "date": date, "url": PAGE.format(id=bid), "source": source,
            "fixed": dict(sorted(fixed.items(), key=lambda kv: -int(kv[0][1:]))), "cves": sorted(cves)}


# Adapter families by name as the bulletins spell them (typos included); the firmware major of each
# is in facts/security.py (FW_FAMILIES: NVIDIA's firmware release notes).
_FAMILY_NAMES = {
    "connectx-4": "ConnectX-4", "connectx4": "ConnectX-4", "connectx-4 lx": "ConnectX-4 Lx", "connectx4 lx": "ConnectX-4 Lx",
    "connectx 5": "ConnectX-5", "connectx-5": "ConnectX-5", "connectx 6": "ConnectX-6", "connectx-6": "ConnectX-6",
    "connectx 6 dx": "ConnectX-6 Dx", "connectx-6 dx": "ConnectX-6 Dx", "connectx-6 de": "ConnectX-6 Dx",
    "connectx 6 lx": "ConnectX-6 Lx", "connectx-6 lx": "ConnectX-6 Lx", "connectx 7": "ConnectX-7",
    "connectx-7": "ConnectX-7", "connectx-8": "ConnectX-8", "bluefield 2": "BlueField-2", "bluefield-2": "BlueField-2",
    "bluefield 3": "BlueField-3", "bluefield-3": "BlueField-3", "bludfield-3": "BlueField-3",
}


def _families(product: str, platform: str) -> list[str]:
    names = []
    listed = platform if platform and platform.upper() != "N/A" and not platform.startswith("N/A") else ""
    for part in (listed or product).split(","):
        name = re.sub(r"\(.*?\)|\*", "", part).strip().lower()
        if name in _FAMILY_NAMES:
            names.append(_FAMILY_NAMES[name])
    return sorted(set(names))


def nic_bulletin(bid: str, text: str, source: str) -> dict[str, Any] | None:
    """A ConnectX / BlueField bulletin: per row, the adapter families, the firmware train and the
    first fixed build; None when no row is adapter firmware (a BMC or virtio-net bulletin)."""
    title, date = _head(text)
    rows: dict[tuple[tuple[str, ...], int], int] = {}
    cves: set[str] = set()
    for cve, rest in _ROW.findall(text):
        cells = _cells(rest)
        if len(cells) < 4 or "virtio" in cells[0].lower() or "bmc" in cells[0].lower():
            continue
        m = _FW_PRIOR.search(cells[2])
        families = _families(cells[0], cells[1])
        if not m or not families:
            continue
        train, build = int(m.group(1)), int(m.group(2))
        key = (tuple(families), train)
        rows[key] = max(rows.get(key, 0), build)
        cves.add(cve)
    if not rows:
        return None
    return {"id": bid, "title": title, "date": date, "url": PAGE.format(id=bid), "source": source,
            "fixed": [{"families": list(fams), "train": train, "build": build}
                      for (fams, train), build in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0]))],
            "cves": sorted(cves)}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _bulletins(checkout: Path) -> list[tuple[str, str, str]]:
    """(id, markdown, source url) of every bulletin in the checkout, oldest id first."""
    out = []
    for path in sorted(checkout.glob("20[0-9][0-9]/*/*.md")):
        if path.stem != path.parent.name:
            continue
        rel = path.relative_to(checkout).as_posix()
        out.append((path.stem, path.read_text(encoding="utf-8", errors="replace"), f"{REPO}/blob/main/{rel}"))
    return out


def build(checkout: Path) -> dict[str, Any]:
    driver, nic = [], []
    for bid, text, source in _bulletins(checkout):
        title = _head(text)[0].lower()
        if "display driver" in title:
            b = driver_bulletin(bid, text, source)
            if b:
                driver.append(b)
        elif "connectx" in title or "bluefield" in title:
            b = nic_bulletin(bid, text, source)
            if b:
                nic.append(b)
    driver.sort(key=lambda b: (b["date"], b["id"]))
    nic.sort(key=lambda b: (b["date"], b["id"]))
    try:
        commit = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%H %cs"], capture_output=True,
                                text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        commit = ["unknown", ""]
    dates = [b["date"] for b in driver + nic if b["date"]]
    return {
        "format": FORMAT,
        "date": max(dates) if dates else "",
        "made": f"tools/security_floor.py from {REPO} at {commit[0][:12]} ({commit[1] if len(commit) > 1 else ''})",
        "sources": [REPO, "https://www.nvidia.com/en-us/security/"],
        "driver": driver,
        "nic_firmware": nic,
        "notes": [
            "Driver rows: the Linux(R<branch>) rows of the GPU Display Driver bulletins for Tesla, RTX/Quadro and "
            "GeForce; vGPU guest drivers and managers follow their own vGPU releases and are not judged.",
            "Firmware rows: the first fixed build per firmware train (the middle number of 28.39.1002) of each "
            "ConnectX / BlueField bulletin; BMC and virtio-net rows are left out.",
            "CUDA: NVIDIA's CUDA Toolkit bulletins concern the toolkit's tools (cuobjdump, nvdisasm, ...), which no "
            "probe reads; the CUDA driver is the display driver judged above, so no CUDA minimum is kept.",
        ],
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not Path(argv[1]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    json.dump(build(Path(argv[1])), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
