"""The bounds of the roads in (docs/reliability.md "Roads in"), measured: wall time and the
controller's peak RSS for each hostile input, through the real CLI; beside it the peer where
there is one (`ansible-inventory --list` for the same inventories).

    .venv/bin/python bench/roads_bench.py            # prints a markdown table
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.api.collected import MAX_DOCUMENT  # noqa: E402
from orchestrator.inventory.external import ansible_inventory_binary  # noqa: E402

# the CLI in-process, its own peak RSS (VmHWM) written where the bench reads it
_WRAPPER = """
import sys
sys.path.insert(0, {root!r})
from orchestrator.cli.main import main
try:
    code = main(sys.argv[1:])
finally:
    peak = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    open({out!r}, "w").write(peak)
sys.exit(code)
"""


def probe(work: Path, *args: str, timeout: float = 600) -> tuple[int, float, int, str]:
    """(exit status, seconds, peak RSS in MiB, last line of stderr) of `probe ARGS`."""
    out = work / "rss"
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _WRAPPER.format(root=str(ROOT), out=str(out)), *args],
                          capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    rss = int(out.read_text()) // 1024 if out.exists() else -1
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    return proc.returncode, wall, rss, last


def peer(cmd: list[str], timeout: float = 600) -> tuple[int, float, int]:
    """(exit status, seconds, peak RSS in MiB) of another program, its children included."""
    t0 = time.monotonic()
    proc = subprocess.run(["/usr/bin/env", "time", "-f", "%M", *cmd], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    try:
        rss = int(proc.stderr.strip().splitlines()[-1]) // 1024
    except (IndexError, ValueError):
        rss = -1
    return proc.returncode, wall, rss


def case_40k_hosts_under_all(work: Path) -> list[str]:
    inv = work / "big.yml"
    inv.write_text("all:\n  hosts:\n" + "".join(f"    n{i:05d}:\n" for i in range(40_000)))
    rows = []
    code, wall, rss, _ = probe(work, "hosts", "-i", str(inv))
    rows.append(f"| 40,000 hosts directly under `all` | `probe hosts` | {code} | {wall:.1f} s | {rss} MiB |")
    binary = ansible_inventory_binary()
    if binary:
        pcode, pwall, prss = peer([binary, "-i", str(inv), "--list"])
        rows.append(f"| (peer) same inventory | `ansible-inventory --list` | {pcode} | {pwall:.1f} s | {prss} MiB |")
    return rows


def case_limit_file(work: Path) -> list[str]:
    inv = work / "inv.yml"
    inv.write_text("all:\n  hosts:\n    gpu01:\n")
    big = work / "limit.txt"
    with open(big, "wb") as f:
        f.write(b"gpu01\n" * ((64 << 20) // 6))
    loop = work / "self.txt"
    loop.write_text(f"gpu01\n@{loop}\n")
    rows = []
    for what, path in (("64 MiB", big), ("naming itself", loop)):
        code, wall, rss, _ = probe(work, "hosts", "-i", str(inv), "--limit", f"@{path}")
        rows.append(f"| `--limit @file` {what} | refused | {code} | {wall:.1f} s | {rss} MiB |")
    return rows


def case_link_loop(work: Path) -> list[str]:
    inv = work / "invdir"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    gpu01:\n")
    (inv / "group_vars" / "loop").symlink_to(inv / "group_vars", target_is_directory=True)
    (inv / "up").symlink_to(inv, target_is_directory=True)
    code, wall, rss, _ = probe(work, "hosts", "-i", str(inv))
    return [f"| inventory directory with link loops | loaded, loops named | {code} | {wall:.1f} s | {rss} MiB |"]


def case_bundle_documents(work: Path) -> list[str]:
    rows = []
    for size in (100 << 20, 300 << 20):
        docs = work / f"docs{size}"
        docs.mkdir()
        with open(docs / "gpu01.json", "wb") as f:
            f.truncate(size)
        code, wall, rss, _ = probe(work, "import", str(docs), "--results", str(work / "r"), "-q")
        rows.append(f"| bundle document of {size >> 20} MiB | refused unread (cap {MAX_DOCUMENT >> 20} MiB) "
                    f"| {code} | {wall:.1f} s | {rss} MiB |")
    docs = work / "values"
    docs.mkdir()
    (docs / "gpu01.json").write_text('{"fleetprobe_bundle": 1, "x": [' + ",".join(["[]"] * 5_000_000) + "]}")
    code, wall, rss, _ = probe(work, "import", str(docs), "--results", str(work / "r"), "-q")
    rows.append(f"| bundle document of 5 million empty lists (15 MB) | refused before parsing | {code} | {wall:.1f} s "
                f"| {rss} MiB |")
    return rows


def case_fifo(work: Path) -> list[str]:
    fifo = work / "topo.txt"
    os.mkfifo(fifo)
    code, wall, rss, _ = probe(work, "import", str(fifo), "--results", str(work / "r"), timeout=60)
    return [f"| FIFO given as evidence | refused, not read | {code} | {wall:.1f} s | {rss} MiB |"]


def case_nvbandwidth_300(work: Path) -> list[str]:
    n = 300
    rows = ["nvbandwidth Version: v0.10.0", "", "Running device_to_device_memcpy_read_ce.",
            "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", "   " + "".join(f"{j:>10}" for j in range(n))]
    rows += [f"{i:>3}" + "".join(f"{'N/A' if i == j else f'{300 + (i * 7 + j) % 90:.2f}':>10}" for j in range(n))
             for i in range(n)]
    path = work / "gpu01.txt"
    path.write_text("\n".join([*rows, "", "SUM device_to_device_memcpy_read_ce 1.0", ""]))
    code, wall, rss, _ = probe(work, "import", str(path), "--results", str(work / "r"), "-q")
    return [f"| nvbandwidth text naming 300 GPUs ({path.stat().st_size >> 10} KiB) | cut to 64 GPUs, judged "
            f"| {code} | {wall:.1f} s | {rss} MiB |"]


def case_silent_ssh(work: Path) -> list[str]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1024)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(srv.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
    inv = work / "silent.yml"
    inv.write_text("all:\n  hosts:\n" + "".join(
        f"    s{i:03d}:\n      ansible_host: 127.0.0.1\n      ansible_port: {srv.getsockname()[1]}\n" for i in range(200)))
    code, wall, rss, _ = probe(work, "run", "-i", str(inv), "-t", "5", "--connect-timeout", "5", "--forks", "200",
                               "--host-key-policy", "accept-new", "--results", str(work / "r"), "-q")
    srv.close()
    return [f"| 200 SSH ports that accept and never speak, `-t 5 --connect-timeout 5 --forks 200` "
            f"| each host unreachable within its deadline | {code} | {wall:.1f} s | {rss} MiB |"]


CASES: list[Callable[[Path], list[str]]] = [case_40k_hosts_under_all, case_limit_file, case_link_loop,
                                            case_bundle_documents, case_fifo, case_nvbandwidth_300, case_silent_ssh]


def main() -> None:
    print(f"roads bench on {os.cpu_count()} CPUs, Python {sys.version.split()[0]}\n")
    print("| input | what happens | exit | wall | peak RSS |\n|---|---|---|---|---|")
    chosen = [c for c in CASES if not sys.argv[1:] or any(a in c.__name__ for a in sys.argv[1:])]
    for case in chosen:
        with tempfile.TemporaryDirectory(prefix="roads-bench-") as tmp:
            for row in case(Path(tmp)):
                print(row, flush=True)


if __name__ == "__main__":
    main()
