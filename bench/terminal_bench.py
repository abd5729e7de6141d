"""How many lines the default terminal report takes on a big fleet with a few faults (issue 49).

    python bench/terminal_bench.py [--hosts 10000] [--faults 10] [--columns 120] [--work DIR]

Runs the bundled demo once (`probe run -q -o WORK/demo`), makes a stored run of --hosts hosts
from its judged records with --faults of its unhealthy DGX H100 hosts planted among healthy
copies (tests/support/planted_fleet.py says how and why), then renders it as an operator sees it:
`probe show RUN` on a real pseudo-terminal of --columns columns (util-linux `script`), and prints
the line count, the seconds it took and, with --print, the output.  Not a test: the seconds depend
on the machine; the line count does not (tests/present/test_answer_first.py asserts it at 2,000
hosts).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.store.compact import read_plain  # noqa: E402
from orchestrator.store.fleet_file import write_fleet  # noqa: E402
from tests.support.planted_fleet import planted_fleet  # noqa: E402


def demo_run(work: Path) -> Path:
    out = work / "demo"
    if not (out / "fleet.json").is_file():
        subprocess.run([sys.executable, "-m", "orchestrator", "run", "-q", "-o", str(out)], cwd=ROOT,
                       check=False, capture_output=True)
    return out


def planted_run(demo: Path, work: Path, hosts: int, faults: int) -> Path:
    run = work / f"planted-{hosts}-{faults}"
    run.mkdir(parents=True, exist_ok=True)
    shutil.copy(demo / "run.json", run / "run.json")
    write_fleet(run / "fleet.json", planted_fleet(read_plain(demo / "fleet.json"), hosts, faults))
    return run


def on_a_tty(argv: list[str], columns: int) -> str:
    """What `argv` prints on a pseudo-terminal of `columns` columns, stdout and stderr as one."""
    inner = f"stty cols {columns} rows 50; {shlex.join(argv)}"
    done = subprocess.run(["script", "-qec", inner, "/dev/null"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    return done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--faults", type=int, default=10)
    ap.add_argument("--columns", type=int, default=120)
    ap.add_argument("--work", type=Path, default=None, help="keep the demo run and the big run here")
    ap.add_argument("--print", action="store_true", help="print the rendered output too")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="terminal-bench-"))
    run = planted_run(demo_run(work), work, args.hosts, args.faults)
    start = time.perf_counter()
    text = on_a_tty([sys.executable, "-m", "orchestrator", "show", str(run)], args.columns)
    seconds = time.perf_counter() - start
    if args.print:
        print(text)
    print(f"{args.hosts} hosts, {args.faults} planted faults, {args.columns} columns: "
          f"{len(text.splitlines())} lines in {seconds:.1f} s (probe show on a pty)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
