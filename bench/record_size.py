#!/usr/bin/env python3
"""Bytes per host record in fleet.json, schema 1 against schema 2 (store/compact.py), for each
shipped playbook over the demo fleet's DGX H100 hosts, and what the codec costs per host.

    python bench/record_size.py                 # markdown table on stdout
    python bench/record_size.py --json out.json # and the figures as JSON

bench/fleet_bench.py (which writes bench/RESULTS.md) can call `main([])`: it returns the markdown
(and prints it); `measure()` returns the figures.  Each playbook is one `probe run` of the demo
(replayed recordings, no transport): a few seconds each.  Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.store.atomic import encode_json  # noqa: E402
from orchestrator.store.compact import decode_host, encode, encode_fleet, host_text  # noqa: E402

PLAYBOOKS = ("audit", "premigration", "quick")
TARGETS = {"audit": 30_000, "premigration": 40_000}  # issue 22, bytes per DGX H100 host
HOSTS = "dgx-h100-"


def demo_fleet(book: str) -> dict[str, Any]:
    """The demo fleet judged by `book`, as `probe run` holds it in memory (the schema-1 shape)."""
    with tempfile.TemporaryDirectory() as td:
        proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-p", book, "-o", str(Path(td) / "run"),
                               "--format", "json"], cwd=REPO, capture_output=True, text=True, timeout=600)
        if not proc.stdout.startswith("{"):
            raise RuntimeError(f"probe run -p {book} printed no fleet (exit {proc.returncode}): {proc.stderr[-500:]}")
        fleet: dict[str, Any] = json.loads(proc.stdout)
        return fleet


def _best_ms(fn: Any, arg: Any, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def _parts(rec: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(schema 1, schema 2) bytes of each facts section and each other key of one record."""
    out = {}
    for k, v in rec.items():
        items = [(f"facts.{s}", x) for s, x in v.items()] if k == "facts" else [(k, v)]
        for name, x in items:
            out[name] = (len(encode_json(x)), len(encode_json(encode(x))))
    return out


def measure(repeats: int = 5) -> dict[str, Any]:
    results: dict[str, Any] = {"hosts": HOSTS + "*", "playbooks": {}}
    for book in PLAYBOOKS:
        fleet = demo_fleet(book)
        recs = [h for h in fleet["hosts"] if h["name"].startswith(HOSTS)]
        v1 = [len(encode_json(h)) for h in recs]
        texts = [host_text(h) for h in recs]
        v2 = [len(t) for t in texts]
        findings = [f for f in fleet["findings"] if f["host"].startswith(HOSTS)]
        enc_ms = [_best_ms(host_text, h, repeats) for h in recs]
        dec_ms = [_best_ms(lambda t: decode_host(json.loads(t)), t, repeats) for t in texts]
        dumps_ms = [_best_ms(encode_json, h, repeats) for h in recs]
        loads_ms = [_best_ms(json.loads, encode_json(h), repeats) for h in recs]
        assert all(decode_host(json.loads(t)) == json.loads(encode_json(h)) for t, h in zip(texts, recs))
        whole_v1 = len(encode_json(fleet))
        whole_v2 = len(encode_json(encode_fleet(fleet)))
        results["playbooks"][book] = {
            "hosts": len(recs),
            "fleet_json_bytes": {"v1": whole_v1, "v2": whole_v2, "hosts": len(fleet["hosts"])},
            "v1_bytes": {"mean": round(statistics.mean(v1)), "max": max(v1)},
            "v2_bytes": {"mean": round(statistics.mean(v2)), "max": max(v2)},
            "target_bytes": TARGETS.get(book),
            # the fleet's findings of these hosts (fleet.json holds them beside the records)
            "findings_per_host_bytes": {"v1": round(len(encode_json(findings)) / len(recs)),
                                        "v2": round(len(encode_json(encode(findings))) / len(recs))},
            "ms_per_host": {"encode_v2": round(statistics.mean(enc_ms), 2), "decode_v2": round(statistics.mean(dec_ms), 2),
                            "dumps_v1": round(statistics.mean(dumps_ms), 2), "loads_v1": round(statistics.mean(loads_ms), 2)},
            "parts_" + recs[0]["name"]: _parts(recs[0]),
        }
    return results


def markdown(r: dict[str, Any]) -> str:
    lines = [f"fleet.json bytes per host record, demo `{r['hosts']}` hosts (schema 1: the records as "
             "they are; schema 2: store/compact.py). Encode/decode: mean per host, best of 5.", "",
             "| playbook | hosts | schema 1, mean (max) | schema 2, mean (max) | target | findings per host, 1 → 2 | "
             "encode / decode ms (schema 2) | json dumps / loads ms (schema 1) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for book, p in r["playbooks"].items():
        target = f"≤ {p['target_bytes']:,}" if p["target_bytes"] else "–"
        ms = p["ms_per_host"]
        lines.append(f"| {book} | {p['hosts']} | {p['v1_bytes']['mean']:,} ({p['v1_bytes']['max']:,}) | "
                     f"{p['v2_bytes']['mean']:,} ({p['v2_bytes']['max']:,}) | {target} | "
                     f"{p['findings_per_host_bytes']['v1']:,} → {p['findings_per_host_bytes']['v2']:,} | "
                     f"{ms['encode_v2']} / {ms['decode_v2']} | {ms['dumps_v1']} / {ms['loads_v1']} |")
    lines += ["", "Whole fleet.json of the demo (every host, findings and all): "
              + ", ".join(f"{b} {p['fleet_json_bytes']['v1'] / 1e6:.2f} MB → {p['fleet_json_bytes']['v2'] / 1e6:.2f} MB"
                          for b, p in r["playbooks"].items())
              + f" ({next(iter(r['playbooks'].values()))['fleet_json_bytes']['hosts']} hosts)."]
    book = "premigration"
    key = next(k for k in r["playbooks"][book] if k.startswith("parts_"))
    lines += ["", f"Where the bytes go ({book}, {key[6:]}): schema 1 → schema 2", "",
              "| part | schema 1 | schema 2 |", "|---|---:|---:|"]
    for name, (a, b) in sorted(r["playbooks"][book][key].items(), key=lambda kv: -kv[1][0]):
        lines.append(f"| {name} | {a:,} | {b:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    r = measure(args.repeats)
    if args.json:
        args.json.write_text(json.dumps(r, indent=1) + "\n")
    md = markdown(r)
    print(md, end="")
    return md


if __name__ == "__main__":
    main()
