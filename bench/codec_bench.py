#!/usr/bin/env python3
"""The controller's record codec side by side with msgspec, on the same judged records.

    python bench/codec_bench.py [--hosts 300] [--msgspec PATH]

Judges N DGX-class bench hosts (bench/controller_bench.py's inputs: the demo recordings with
identities of their own) as a worker does, then times, per host record, on the CPU clock:

* writing: the stored text today (schema 2: compact.encode_host, then json's C encoder), the
  schema-2 encoding alone with its column memo cleared before every record (what it costs without
  the repetition between hosts) and kept (as a worker runs), json's text of the plain record, and
  msgspec's text of the plain record and of the schema-2 encoding;
* reading: json.loads and msgspec's decode of the stored text, compact.decode of the result, and
  the envelope reader (files/jsontext.loads_strict) against both on the demo envelopes.

msgspec is not a dependency: give --msgspec a directory it is installed in
(`pip install --target DIR msgspec`), or have it importable.  Without it only the standard
library rows are printed.

    python bench/codec_bench.py --forms 10000 [--msgspec DIR]

compares the stored forms of issue 51 instead, one record at a time over N demo-derived hosts
(bench/controller_bench.py's inputs, every demo machine in turn, judged as a worker judges them):
today's schema 2, and the schema-1 record's JSON text (json, msgspec, orjson) stored as it is or
compressed per record (zlib level 1 as a gzip member, zstd level 1 and 3 as a zstd frame; a file
of such members decompresses to the concatenation of their texts, so `zcat`/`zstdcat` give one
JSON document and an index of members keeps lazy reads).  Per form: bytes a host, write CPU (text
and compression) and read CPU (decompression, parse, decoding) a host, whether the record reads
back equal (types included), and whether `jq` reads a file of 200 such members through
zcat/zstdcat.  msgspec, orjson and zstandard come from --msgspec DIR or the environment; a form
whose library is missing is left out.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import controller_bench as cb  # noqa: E402

from orchestrator.files.jsontext import loads_strict  # noqa: E402
from orchestrator.store import compact, members  # noqa: E402
from orchestrator.store.fleet_file import stored_record  # noqa: E402
from orchestrator.verdict.judge import host_judge  # noqa: E402


def judged_records(n: int) -> list[dict[str, Any]]:
    inputs, expect = cb.make_inputs(n * 3, held=False)
    dgx = [h for h in inputs if h.name.startswith(("dgx", "lenovo-h100", "rent-h100"))][:n]
    judge = host_judge(lambda h: expect[h.name], lambda host: {})
    out = []
    for h in dgx:
        rec, _ = judge(h)
        del rec["fingerprint"], rec["class"]
        out.append(rec)
    return out


def per_item_us(fn: Callable[[Any], Any], items: list[Any], repeat: int = 3) -> float:
    """Best of `repeat` passes, microseconds of CPU per item."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        c0 = time.process_time()
        for x in items:
            fn(x)
        best = min(best, time.process_time() - c0)
        gc.enable()
    return best / len(items) * 1e6


def cold_encode(rec: dict[str, Any]) -> Any:
    compact._COLUMNS.clear()
    return compact.encode_host(rec)


@dataclass(frozen=True)
class Form:
    """One stored form of a host record: its bytes from the record, the record from its bytes, and
    the command that gives a file of such members to jq."""

    name: str
    write: Callable[[dict[str, Any]], bytes]
    read: Callable[[bytes], Any]
    cat: str  # cat, zcat or zstdcat


def gzip_member(data: bytes) -> bytes:
    """One gzip member at zlib level 1: a file of members is one stream to zcat (RFC 1952 2.2)."""
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def gunzip(data: bytes) -> bytes:
    return zlib.decompress(data, 31)


def stored_forms(libs: dict[str, Any]) -> list[Form]:
    plain = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
    forms = [
        Form("schema 2 (read, written until issue 51): compact encode + json", lambda r: compact.host_text(r).encode(),
             lambda b: compact.decode_host(json.loads(b)), "cat"),
        Form("schema 1: json", lambda r: plain(r).encode(), json.loads, "cat"),
        Form("schema 1: json + zlib 1 (gzip member)", lambda r: gzip_member(plain(r).encode()),
             lambda b: json.loads(gunzip(b)), "zcat"),
    ]
    # schema 3 as fleetprobe writes and reads it (issue 51): store/fleet_file.stored_record's text
    # (store/members.py: msgspec where installed) in a gzip member; read as spool.SpooledRecords does
    forms += [
        Form("schema 3 (written): fleet_file.stored_record + gzip member", lambda r: stored_record(r).members(),
             lambda b: json.loads(members.unpack(b)), "zcat"),
        Form("schema 3, the stdlib writer (no msgspec)", lambda r: members.pack(members.text(r, fast=False)),
             lambda b: json.loads(members.unpack(b)), "zcat"),
    ]
    ms, oj, zs = libs.get("msgspec"), libs.get("orjson"), libs.get("zstandard")
    if ms is not None:
        enc, dec = ms.json.Encoder(), ms.json.Decoder()
        forms.append(Form("schema 1: msgspec + zlib 1 (gzip member)", lambda r: gzip_member(enc.encode(r)),
                          lambda b: dec.decode(gunzip(b)), "zcat"))
    if zs is not None:
        unz = zs.ZstdDecompressor().decompress
        z1, z3 = zs.ZstdCompressor(level=1).compress, zs.ZstdCompressor(level=3).compress
        forms += [Form("schema 1: json + zstd 1 (frame)", lambda r: z1(plain(r).encode()),
                       lambda b: json.loads(unz(b)), "zstdcat"),
                  Form("schema 2 + zstd 1 (frame)", lambda r: z1(compact.host_text(r).encode()),
                       lambda b: compact.decode_host(json.loads(unz(b))), "zstdcat")]
        if ms is not None:
            forms += [Form("schema 1: msgspec + zstd 1 (frame)", lambda r: z1(enc.encode(r)),
                           lambda b: dec.decode(unz(b)), "zstdcat"),
                      Form("schema 1: msgspec + zstd 3 (frame)", lambda r: z3(enc.encode(r)),
                           lambda b: dec.decode(unz(b)), "zstdcat")]
        if oj is not None:
            forms.append(Form("schema 1: orjson + zstd 1 (frame)", lambda r: z1(oj.dumps(r)),
                              lambda b: oj.loads(unz(b)), "zstdcat"))
    return forms


def demo_records(n: int) -> Iterator[dict[str, Any]]:
    """N demo-derived host records judged one at a time (every demo machine in turn, identities of
    their own), none held."""
    inputs, expect = cb.make_inputs(n, held=False)
    judge = host_judge(lambda h: expect[h.name], lambda host: {})
    for h in inputs:
        rec, _ = judge(h)
        del rec["fingerprint"], rec["class"]
        yield rec


def jq_reads(form: Form, stored: list[bytes], tmp: Path) -> str:
    """Does `cat|zcat|zstdcat FILE | jq` read a file of these members as one fleet document?"""
    wrap = {"cat": lambda b: b, "zcat": gzip_member}.get(form.cat)
    if wrap is None:
        import zstandard
        wrap = zstandard.ZstdCompressor(level=1).compress
    path = tmp / "fleet"
    body = [wrap(b'{"schema_version":1,"hosts":[')]
    body += [(wrap(b",") if i else b"") + m for i, m in enumerate(stored)] + [wrap(b"]}")]
    path.write_bytes(b"".join(body))
    cmd = f"{form.cat} < {path} | jq -e '[.hosts[].facts.host.hostname // .hosts[].name] | length'"
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return f"no ({out.stderr.strip()[:60]})"
    plain_facts = form.name.startswith(("schema 1", "schema 3"))
    return f"yes ({form.cat})" if plain_facts else f"parses ({form.cat}); values in schema-2 forms"


def compare_forms(n: int, libs: dict[str, Any]) -> None:
    forms = stored_forms(libs)
    plain = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
    size = dict.fromkeys((f.name for f in forms), 0)
    wcpu, rcpu = dict.fromkeys(size, 0.0), dict.fromkeys(size, 0.0)
    unequal = dict.fromkeys(size, 0)
    sample: dict[str, list[bytes]] = {f.name: [] for f in forms}
    clock = time.process_time
    gc.disable()
    for i, rec in enumerate(demo_records(n)):
        want = plain(rec)
        for f in forms:
            c0 = clock()
            b = f.write(rec)
            c1 = clock()
            back = f.read(b)
            c2 = clock()
            wcpu[f.name] += c1 - c0
            rcpu[f.name] += c2 - c1
            size[f.name] += len(b)
            unequal[f.name] += plain(back) != want
            if i < 200:
                sample[f.name].append(b)
        if i % 500 == 499:
            gc.collect()
    gc.enable()
    with tempfile.TemporaryDirectory() as tmp:
        jq = {f.name: jq_reads(f, sample[f.name], Path(tmp)) for f in forms}
    print(f"{n} demo-derived host records, one at a time; Python {sys.version.split()[0]}; "
          + ", ".join(f"{k} {v.__version__}" for k, v in libs.items() if v is not None))
    print()
    print("| stored form | KiB a host | write µs CPU a host | read µs CPU a host | read back unequal | jq |")
    print("|---|---:|---:|---:|---:|---|")
    for f in forms:
        print(f"| {f.name} | {size[f.name] / n / 1024:.1f} | {wcpu[f.name] / n * 1e6:,.0f} | "
              f"{rcpu[f.name] / n * 1e6:,.0f} | {unequal[f.name]} | {jq[f.name]} |")


def optional_libs() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("msgspec", "orjson", "zstandard"):
        try:
            out[name] = importlib.import_module(name)
        except ImportError:
            out[name] = None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--msgspec", help="a directory msgspec is installed in (pip install --target DIR msgspec)")
    ap.add_argument("--forms", type=int, metavar="N", help="compare the stored forms over N demo-derived records")
    args = ap.parse_args()
    if args.msgspec:
        sys.path.insert(0, args.msgspec)
    if args.forms:
        compare_forms(args.forms, optional_libs())
        return
    try:
        import msgspec
    except ImportError:
        msgspec = None

    recs = judged_records(args.hosts)
    stored = [compact.encode_host(r) for r in recs]
    texts = [compact.stored_text(s) for s in stored]
    plain = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
    envelopes = [p.read_text() for p in sorted((REPO / "orchestrator" / "demo" / "recordings").glob("*/*.json"))]
    rows: list[tuple[str, float, str]] = [
        ("write: stored text today (schema 2 encode + json text)", per_item_us(compact.host_text, recs),
         f"{sum(map(len, texts)) / len(texts) / 1024:.1f} KiB"),
        ("write: schema-2 encoding, column memo cleared each record", per_item_us(cold_encode, recs), ""),
        ("write: schema-2 encoding, column memo kept", per_item_us(compact.encode_host, recs), ""),
        ("write: json text of the schema-2 encoding", per_item_us(compact.stored_text, stored), ""),
        ("write: json text of the plain record", per_item_us(plain, recs),
         f"{sum(len(plain(r)) for r in recs) / len(recs) / 1024:.1f} KiB"),
        ("read: json.loads of the stored text", per_item_us(json.loads, texts), ""),
        ("read: compact.decode of the parsed text", per_item_us(compact.decode, [json.loads(t) for t in texts]), ""),
        ("read: envelope, loads_strict (NaN and range refused)", per_item_us(loads_strict, envelopes), ""),
        ("read: envelope, json.loads", per_item_us(json.loads, envelopes), ""),
    ]
    if msgspec is not None:
        enc, dec = msgspec.json.Encoder(), msgspec.json.Decoder()
        rows += [
            (f"write: msgspec {msgspec.__version__} text of the plain record", per_item_us(enc.encode, recs), ""),
            ("write: msgspec text of the schema-2 encoding", per_item_us(enc.encode, stored), ""),
            ("read: msgspec decode of the stored text", per_item_us(dec.decode, texts), ""),
            ("read: envelope, msgspec decode", per_item_us(dec.decode, envelopes), ""),
        ]
    print(f"{len(recs)} DGX-class records, {len(envelopes)} demo envelopes; Python {sys.version.split()[0]}; "
          f"{'msgspec ' + msgspec.__version__ if msgspec else 'msgspec not importable'}")
    print()
    print("| step | µs CPU per record | size |")
    print("|---|---:|---:|")
    for name, us, size in rows:
        print(f"| {name} | {us:,.0f} | {size} |")


if __name__ == "__main__":
    main()
