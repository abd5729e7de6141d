#!/usr/bin/env python3
"""History benchmark: `probe diff`, `probe show` and `probe report` of stored N-host runs.

Two runs of the same fleet (the demo recordings repeated with identities of their own, as
bench/controller_bench.py makes them) are judged the way `probe run` judges them (worker
processes, the spool, fleet.json with its index and digests files); the second differs from the
first on `--changed` hosts (another board in GPU0's slot).  Then each command's work runs in a
fresh interpreter on the stored files, so its CPU time and peak RSS are its own:

* diff: `verdict.drift.diff_fleets` of the two stored fleets (what `probe diff A B` computes),
  checked to name exactly the changed hosts;
* show: the terminal report of one run (`probe show`: hosts table, classes, findings);
* report: the HTML report of the second run with drift against the first (`probe report`).

    python bench/history_bench.py --hosts 10000            # builds the runs in a temp dir
    python bench/history_bench.py --hosts 10000 --keep /var/tmp/hist10k   # reuse the runs next time

`section(hosts)` returns the markdown section (for bench/fleet_bench.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def _build(root: Path, n: int, changed: list[int]) -> dict[str, Any]:
    """One stored run of n hosts under root (fleet.json, its index and digests)."""
    from controller_bench import make_inputs

    from orchestrator.store.fleet_file import write_fleet
    from orchestrator.store.runmeta import RunMeta
    from orchestrator.verdict.judge import build_fleet

    inputs, expect = make_inputs(n, held=False)
    for i in changed:
        load = inputs[i].load_data

        def patched(load: Any = load, i: int = i) -> dict[str, Any]:
            data = dict(load())
            if isinstance(data.get("nvml"), dict) and data["nvml"].get("gpus"):
                nvml = dict(data["nvml"])
                gpus = [dict(g) for g in nvml["gpus"]]
                gpus[0]["uuid"] = f"GPU-00000000-0000-0000-0000-{i:012d}"
                nvml["gpus"] = gpus
                data["nvml"] = nvml
            return data
        inputs[i].load_data = patched
    root.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.monotonic(), time.process_time()
    fleet = build_fleet(RunMeta(id=root.name), inputs, lambda h: expect[h.name], lambda h: {}, spool=root)
    write_fleet(root / "fleet.json", fleet.to_document())
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    changed_hosts = sorted(inputs[i].name for i in changed)
    return {"seconds": time.monotonic() - t0, "cpu_s": time.process_time() - c0 + kids.ru_utime + kids.ru_stime,
            "changed": changed_hosts}


def _one(what: str, a: Path, b: Path) -> dict[str, Any]:
    """One command's work on the stored runs, in this (fresh) process."""
    from orchestrator.cli.history import stored_fleet  # as `probe show/diff/report` open a stored run
    from orchestrator.verdict.drift import diff_fleets

    t0, c0 = time.monotonic(), time.process_time()
    out: dict[str, Any] = {}
    if what == "diff":
        d = diff_fleets(stored_fleet(a), stored_fleet(b))
        out["hosts_changed"] = sorted({c.host for c in d.changes})
        out["compared"] = d.compared
    elif what == "show":
        os.environ["COLUMNS"] = "120"
        from orchestrator.cli.run import render_fleet_text

        out["chars"] = len(render_fleet_text(stored_fleet(b)))
    elif what == "report":
        from orchestrator.present.report import write_report

        new = stored_fleet(b)
        page = write_report(new, b / "report.html", drift=diff_fleets(stored_fleet(a), new))
        out["chars"] = page.stat().st_size
    out.update(seconds=time.monotonic() - t0, cpu_s=time.process_time() - c0, peak_rss_mb=_peak_rss_mb())
    return out


def _peak_rss_mb() -> float:
    """This process's peak RSS since its exec (VmHWM).  Not ru_maxrss: Linux carries that over
    execve from the forked parent, which here built two 10,000-host fleets."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def section(n: int = 10000, changed: int = 5, keep: Path | None = None, timeout: float = 900) -> str:
    """The markdown section: build (or reuse) two n-host runs, then diff/show/report each in a
    fresh process."""
    tmp = None
    if keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="history-bench-")
        keep = Path(tmp.name)
    try:
        a, b = keep / f"run-a-{n}", keep / f"run-b-{n}"
        meta = keep / f"changed-{n}.json"
        if not (a / "fleet.json").is_file() or not (b / "fleet.json").is_file() or not meta.is_file():
            step = max(1, n // changed)
            picks = [min(n - 1, 3 + i * step) for i in range(changed)]
            # each run built in a fresh interpreter, as `probe run` judges: a caller running a
            # thread (fleet_bench's servers) would judge in one process and write no digests
            for run, changes in ((a, []), (b, picks)):
                built = subprocess.run([sys.executable, __file__, "--build", str(run), str(n), json.dumps(changes)],
                                       capture_output=True, text=True, timeout=timeout)
                if built.returncode != 0:
                    raise RuntimeError(f"building {run.name} failed: {built.stderr.strip()[-300:]}")
            meta.write_text(built.stdout.strip().splitlines()[-1])
        expected = json.loads(meta.read_text())
        size_mb = (b / "fleet.json").stat().st_size / 1e6
        lines = [f"Two stored runs of {n:,} hosts ({size_mb:,.0f} MB fleet.json each), the second with another "
                 f"GPU0 board on {len(expected)} hosts; each command in a fresh interpreter.", "",
                 "| command | wall s | CPU s | peak RSS MB | result |", "|---|---:|---:|---:|---|"]
        for what in ("diff", "show", "report"):
            r = subprocess.run([sys.executable, __file__, "--one", what, str(a), str(b)], capture_output=True,
                               text=True, timeout=timeout)
            if r.returncode != 0:
                lines.append(f"| {what} | failed: {(r.stderr.strip().splitlines() or ['?'])[-1][:120]} | – | – | – |")
                continue
            d = json.loads(r.stdout.strip().splitlines()[-1])
            if what == "diff":
                ok = d["hosts_changed"] == expected
                result = (f"{len(d['hosts_changed'])} hosts changed of {d['compared']:,} compared"
                          + ("" if ok else f" (EXPECTED {len(expected)}: {expected})"))
            else:
                result = f"{d['chars'] / 1e6:.1f} MB of {'text' if what == 'show' else 'HTML'}"
            lines.append(f"| {what} | {d['seconds']:.2f} | {d['cpu_s']:.2f} | {d['peak_rss_mb']:.0f} | {result} |")
        return "\n".join(lines)
    finally:
        if tmp is not None:
            tmp.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=10000)
    ap.add_argument("--changed", type=int, default=5, help="hosts that differ between the two runs")
    ap.add_argument("--keep", type=Path, help="build the runs here once and reuse them")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # child mode: what, run a, run b
    ap.add_argument("--build", nargs=3, help=argparse.SUPPRESS)  # child mode: run, hosts, changed (JSON)
    args = ap.parse_args()
    if args.build:
        run, hosts, changes = args.build
        Path(run).mkdir(parents=True, exist_ok=True)
        print(json.dumps(_build(Path(run), int(hosts), json.loads(changes))["changed"]))
        return 0
    if args.one:
        what, a, b = args.one
        print(json.dumps(_one(what, Path(a), Path(b))))
        return 0
    print(section(args.hosts, args.changed, args.keep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
