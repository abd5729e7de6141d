"""`probe merge` and `probe import` at fleet scale: this checkout against an earlier commit, in one run.

    python bench/stream_bench.py import [--documents 10000] [--baseline REV]
    python bench/stream_bench.py merge  [--shards 10] [--hosts-per-shard 1000] [--replayed] [--baseline REV]

import: one bundle document per host, made from the demo recordings exactly as the bundle runner
prints it (the audit playbook's six probes, each answer a recorded envelope: a DGX H100, A100,
DGX-1, workstations ... in turn), every host with identities of its own (hostname, DMI serials,
GPU UUIDs and serials, as bench/controller_bench.py's copies), then `probe import` of the directory.
merge: `probe import` of each shard's documents, then `probe merge` of the N runs; --replayed:
the parts are `probe run --shard K/N` over hosts replayed from the recordings as they are, so a
recording's identities repeat over the fleet and the duplicate findings grow with it (the figures
of docs/scale.md before this bench).

The inputs are made once, with this checkout, in --work (kept between invocations: 10 x 1,000
hosts take several minutes).  Then each command runs under GNU time with this checkout and, with
--baseline, with a `git worktree` of REV (PYTHONPATH points at it), alternately, --repeats times:
wall, CPU (user+sys of the process and the workers it forks) and the peak of the summed PSS of its
process tree (sampled at 20 Hz).  Both must end with the same findings (findings.json, compared as
sets of (id, host, subject, severity)), else the row says so.  Not a test: figures depend on the
machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.controller_bench import _with_identity as with_identity  # noqa: E402
from bench.controller_bench import communicate_sampled  # noqa: E402
from orchestrator.simulate.record import demo_hosts  # noqa: E402

AUDIT = ["host", "pcie", "nvml", "nvlink", "kmsg", "nic"]  # playbooks/audit.yml


@dataclass
class Timed:
    code: str
    wall_s: float
    cpu_s: float
    rss_mib: float
    rc: int
    findings: frozenset[tuple[str, str, str, str]]


def inventory(path: Path, n: int) -> list[str]:
    names = list(demo_hosts())
    hosts = [(f"r{i:05d}-{names[i % len(names)]}", names[i % len(names)]) for i in range(n)]
    lines = ["all:", "  hosts:"]
    for name, src in hosts:
        lines += [f"    {name}:", "      ansible_connection: replay", f"      probe_replay: {json.dumps(src)}"]
    path.write_text("\n".join(lines) + "\n")
    return [h for h, _ in hosts]


def env_for(code: Path, home: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(code), "HOME": str(home)}


def timed(code: Path, label: str, args: list[str], home: Path, results: Path) -> Timed:
    shutil.rmtree(results, ignore_errors=True)
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        child = subprocess.Popen(["/usr/bin/time", "-o", tf.name, "-f", "%e %U %S %M", sys.executable, "-m",
                                  "orchestrator", *args, "--results", str(results), "-q"],
                                 env=env_for(code, home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 cwd=home)  # `python -m` puts the working directory before PYTHONPATH
        _out, err, peak_kib = communicate_sampled(child)
        wall, user, sys_, _rss = tf.read().split()[-4:]
    runs = [d for d in results.iterdir() if (d / "findings.json").is_file()] if results.is_dir() else []
    found: frozenset[tuple[str, str, str, str]] = frozenset()
    if runs:
        found = frozenset((f["id"], f["host"], f["subject"], f["severity"])
                          for f in json.loads((runs[0] / "findings.json").read_text()))
    elif child.returncode not in (0, 1, 5):
        print(err[-2000:], file=sys.stderr)
    shutil.rmtree(results, ignore_errors=True)
    return Timed(label, float(wall), float(user) + float(sys_), peak_kib / 1024, child.returncode, found)


def make_parts(work: Path, shards: int, per_shard: int, replayed: bool, maker: tuple[str, Path] | None = None
               ) -> list[str]:
    """The parts to merge: `probe run --shard K/N` of replayed hosts (every recording's identities
    repeated over the fleet: each of its GPUs is reported by a host in ~1 of 46 and the duplicate
    findings grow with the fleet), or `probe import` of each shard's bundle documents (every host
    with its own identities, as a real fleet).  `maker`: (rev, tree) whose code writes the parts,
    so that an older baseline, which cannot read a newer stored form, merges the same files."""
    by = f"-by-{maker[0]}" if maker else ""
    tail = ("" if replayed else "-own") + by
    for made in sorted(work.glob(f"parts-*x{per_shard}{tail}")):
        # shard k of any count holds the same hosts ((k-1)*per_shard on): a larger set's first parts serve
        count = made.name[len("parts-"):].split("x")[0]
        if (made / "done").is_file() and count.isdigit() and int(count) >= shards and not replayed:
            return [str(made / f"s{k}") for k in range(1, shards + 1)]
    parts = work / f"parts-{shards}x{per_shard}{tail}"
    done = parts / "done"
    names = [str(parts / f"s{k}") for k in range(1, shards + 1)]
    if done.is_file():
        return names
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    if replayed:
        inv = parts / "inventory.yml"
        inventory(inv, shards * per_shard)
    else:
        docs = make_documents(work, shards * per_shard)
    for k, out in enumerate(names, start=1):
        print(f"making shard {k}/{shards} ...", file=sys.stderr)
        if replayed:
            cmd = ["run", "-i", str(inv), "--shard", f"{k}/{shards}", "-o", out, "-q"]
        else:
            mine = parts / f"docs{k}"
            mine.mkdir()
            for i in range((k - 1) * per_shard, k * per_shard):
                os.link(docs / f"r{i:05d}.json", mine / f"r{i:05d}.json")
            cmd = ["import", str(mine), "--results", str(parts / f"results{k}"), "-q"]
        subprocess.run([sys.executable, "-m", "orchestrator", *cmd], env=env_for(maker[1] if maker else ROOT, work),
                       capture_output=True, check=False, cwd=work)
        if not replayed:
            (made,) = [d for d in (parts / f"results{k}").iterdir() if (d / "fleet.json").is_file()]
            made.rename(out)
        if not (Path(out) / "fleet.json").is_file():
            raise SystemExit(f"shard {k} was not made")
    done.write_text("")
    return names


def make_documents(work: Path, n: int) -> Path:
    """One bundle document per host, from the demo recordings, each host with identities of its own
    (hostname, DMI serials, GPU UUIDs and serials: bench/controller_bench.py's copies)."""
    docs = work / f"documents-{n}-own"
    if (docs / ".done").is_file():
        return docs
    shutil.rmtree(docs, ignore_errors=True)
    docs.mkdir(parents=True)
    names = list(demo_hosts())
    recorded = ROOT / "orchestrator" / "demo" / "recordings"
    envelopes: dict[str, dict[str, dict[str, object]]] = {}
    for src in names:
        envelopes[src] = {}
        for p in AUDIT:
            f = recorded / src / f"{p}.json"
            envelopes[src][p] = json.loads(f.read_text()) if f.is_file() else {
                "envelope_version": 1, "probe": p, "probe_version": "replay", "status": "unsupported", "data": {},
                "warnings": [], "duration_s": 0, "errors": ["no recording of this probe for this host"]}
    calls = [{"name": p, "args": {}, "timeout_s": 60.0} for p in AUDIT]
    for i in range(n):
        src = names[i % len(names)]
        data = with_identity({p: e["data"] for p, e in envelopes[src].items()}, i)
        probes = []
        for p in AUDIT:
            out = json.dumps({**envelopes[src][p], "data": data[p]})
            probes.append({"probe": p, "state": "ran", "exit": 0, "timed_out": False, "out_trunc": False,
                           "err_trunc": False, "duration_s": 0.05, "out": len(out.encode()), "err": 0,
                           "stdout": {"text": out}, "stderr": {"text": ""}})
        doc = {"fleetprobe_bundle": 1, "identity": {"hostname": f"r{i:05d}-{src}"}, "for_host": None,
               "plan": {"playbook": "audit", "probes": [], "expect": [], "timeout": 60.0}, "calls": calls,
               "probes": probes, "duration_s": 0.3}
        (docs / f"r{i:05d}.json").write_text(json.dumps(doc))
    (docs / ".done").write_text("")
    return docs


def baseline_tree(work: Path, rev: str) -> Path:
    tree = work / f"baseline-{rev}"
    if not (tree / "orchestrator").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), rev], check=True,
                       capture_output=True)
    return tree


def controller_rows(code: Path, label: str, hosts: int) -> list[str]:
    """bench/controller_bench.py's row for `hosts` with `code`'s orchestrator (this checkout's
    script, run from `code`: an earlier commit's own script may predate the typed fleet result)."""
    script = code / "bench" / "controller_bench_now.py"
    shutil.copyfile(ROOT / "bench" / "controller_bench.py", script)
    try:
        out = subprocess.run([sys.executable, str(script), "--hosts", str(hosts)], capture_output=True, text=True,
                             check=False, cwd=code).stdout
    finally:
        script.unlink()
    lines = [line for line in out.splitlines() if line.startswith("|")]
    return [lines[0].replace("| hosts |", "| code | hosts |"), lines[1] + "---|"] + [f"| {label} {row}" for row in lines[2:]]


def write_section(path: Path, key: str, text: str) -> None:
    """Put `text` in RESULTS.md's streaming section, in place of its last `key` block."""
    heading = "## Merge, import and the controller at fleet scale (`bench/stream_bench.py`)"
    begin, end = f"<!-- stream_bench:{key} -->", f"<!-- /stream_bench:{key} -->"
    doc = path.read_text() if path.is_file() else ""
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    elif heading in doc:
        at = doc.index(heading) + len(heading)
        nxt = doc.find("\n## ", at)
        at = len(doc) if nxt < 0 else nxt
        doc = doc[:at].rstrip("\n") + "\n\n" + block + "\n" + doc[at:]
    else:
        doc = doc.rstrip("\n") + f"\n\n{heading}\n\nEach block: this checkout and an earlier commit, one after the " \
            "other in one invocation, on the same machine; regenerated by the command it names.\n\n" + block + "\n"
    path.write_text(doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["merge", "import", "controller"])
    ap.add_argument("--shards", type=int, default=10)
    ap.add_argument("--hosts-per-shard", type=int, default=1000)
    ap.add_argument("--documents", type=int, default=10000)
    ap.add_argument("--hosts", type=int, default=10000, help="controller: hosts judged (bench/controller_bench.py)")
    ap.add_argument("--replayed", action="store_true",
                    help="merge: parts of replayed hosts, whose identities repeat over the fleet (default: parts "
                         "imported from documents of hosts with identities of their own)")
    ap.add_argument("--baseline", metavar="REV", action="append", default=[],
                    help="also run this commit's code, alternately (repeatable: each, in the order given)")
    ap.add_argument("--parts-by", metavar="REV",
                    help="merge: the parts are written by this commit's code, so a baseline that predates the "
                         "stored form of this checkout reads the same files (and parts made for an earlier "
                         "comparison are merged again)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "fleetprobe-stream-bench")
    ap.add_argument("--results-md", type=Path, metavar="FILE",
                    help="also write the table into FILE's streaming section (bench/RESULTS.md)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    home = args.work / "home"
    home.mkdir(exist_ok=True)
    codes = [("this checkout", ROOT)]
    codes[:0] = [(f"baseline {rev}", baseline_tree(args.work, rev)) for rev in args.baseline]
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
               f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    command = "python bench/stream_bench.py " + " ".join(sys.argv[1:])
    if args.what == "controller":
        lines = [f"Controller alone, {args.hosts:,} hosts (bench/controller_bench.py: normalize, check, write "
                 f"fleet.json; hosts cloned from the demo recordings with identities of their own); {machine}.  "
                 f"`{command}`", ""]
        for _ in range(args.repeats):
            for label, code in codes:
                rows = controller_rows(code, label, args.hosts)
                lines += rows if len(lines) == 2 else rows[2:]
        text = "\n".join(lines)
        print(text)
        if args.results_md:
            write_section(args.results_md, "controller", text)
        return 0
    if args.what == "merge":
        maker = None
        if args.parts_by:
            maker = (args.parts_by, baseline_tree(args.work, args.parts_by))
        cmd = ["merge", *make_parts(args.work, args.shards, args.hosts_per_shard, args.replayed, maker)]
        size = f"{args.shards} shards x {args.hosts_per_shard:,} hosts" + (" (replayed)" if args.replayed else "")
    else:
        cmd = ["import", str(make_documents(args.work, args.documents))]
        size = f"{args.documents:,} bundle documents (hosts with identities of their own)"
    rows: list[Timed] = []
    for _ in range(args.repeats):
        for label, code in codes:
            rows.append(timed(code, label, cmd, home, args.work / "results"))
    lines = [f"`probe {args.what}` of {size}; {machine}.  `{command}`", "",
             "| code | wall s | CPU s | peak MiB (process tree PSS) | exit | findings |", "|---|---:|---:|---:|---:|---|"]
    want = rows[-1].findings
    for t in rows:
        same = "same as this checkout" if t.findings == want else f"DIFFER ({len(t.findings)} vs {len(want)})"
        lines.append(f"| {t.code} | {t.wall_s:.1f} | {t.cpu_s:.1f} | {t.rss_mib:,.0f} | {t.rc} | "
                     f"{len(t.findings):,} {same} |")
    text = "\n".join(lines)
    print(text)
    if args.results_md:
        key = args.what + ("-replayed" if args.replayed else "")
        if args.what == "merge" and (args.shards, args.hosts_per_shard) != (10, 1000):
            key += f"-{args.shards}x{args.hosts_per_shard}"  # beside the 10 x 1,000 block, not over it
        write_section(args.results_md, key, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
