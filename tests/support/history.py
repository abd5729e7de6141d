"""A huge or hostile previous run: a stored run whose fleet.json holds far more findings than any
fleet makes (issue 45: 600,000 findings, 117 MiB, made the next 3-host run take 22.7 s and 962 MiB).

The findings are written into the stored text itself, after the host records, and the index beside
fleet.json is kept valid (its size and mtime), as a run that really judged them would have it: the
readers then take the road they take for every stored run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from orchestrator.store import members
from orchestrator.store.fleet_file import DIGESTS_NAME, INDEX_NAME, LAYOUTS_NAME

_IDS = ("pcie.link.downgraded", "gpu.ecc.sram_threshold", "nvlink.link.down", "p2p.bandwidth.low", "kmsg.xid")


def _finding_texts(count: int, hosts: Sequence[str]) -> Iterator[str]:
    for i in range(count):
        yield json.dumps({"id": _IDS[i % len(_IDS)], "severity": "fail" if i % 3 else "warn", "kind": "fault",
                          "host": hosts[i % len(hosts)], "subject": f"GPU{i % 8} (0000:{i % 256:02x}:00.0) {i}",
                          "message": "x8 Gen5, expected x16 Gen5", "expected": "x16", "actual": "x8",
                          "evidence": ["lspci -vv"], "hint": "reseat it"},
                         separators=(",", ":"))


def swell_findings(run_dir: Path, count: int, hosts: Sequence[str]) -> int:
    """Put `count` findings into `run_dir`'s fleet.json (naming `hosts` in turn); the size of its
    document after (decompressed: schema 3 is gzip members, store/members.py)."""
    fleet = run_dir / "fleet.json"
    text = fleet.read_bytes()
    index = json.loads((run_dir / INDEX_NAME).read_text())
    tmp = fleet.with_name("fleet.json.swell")
    packer: members.Packer | None = None
    if members.is_members(text):  # schema 3: the rest's member, decompressed, swollen, compressed again
        rest = index["rest"][1]
        kept, text, start, packer = text[:rest], members.unpack(text[rest:]), 0, members.Packer()
    else:
        kept, start = b"", max(offset + length for _name, offset, length in index["hosts"])

    def put(data: bytes) -> bytes:
        return data if packer is None else packer.add(data)
    at = text.index(b'"findings":[', start) + len(b'"findings":[')
    empty = text[at:at + 1] == b"]"
    with open(tmp, "wb") as out:
        out.write(kept + put(text[:at]))
        for i, finding in enumerate(_finding_texts(count, hosts)):
            out.write(put((("," if i else "") + finding).encode()))
        out.write(put(text[at:] if empty else b"," + text[at:]) + (b"" if packer is None else packer.end()))
    os.replace(tmp, fleet)
    st = fleet.stat()
    for name in (INDEX_NAME, LAYOUTS_NAME, DIGESTS_NAME):  # the files beside it name the file they belong to
        side = run_dir / name
        if side.is_file():
            doc = json.loads(side.read_text())
            doc.update(size=st.st_size, mtime_ns=st.st_mtime_ns)
            side.write_text(json.dumps(doc))
    return st.st_size if packer is None else len(members.unpack(fleet.read_bytes()))
