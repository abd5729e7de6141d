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
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import controller_bench as cb  # noqa: E402

from orchestrator.files.jsontext import loads_strict  # noqa: E402
from orchestrator.store import compact  # noqa: E402
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--msgspec", help="a directory msgspec is installed in (pip install --target DIR msgspec)")
    args = ap.parse_args()
    if args.msgspec:
        sys.path.insert(0, args.msgspec)
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
