#!/usr/bin/env python3
"""Fleet-scale benchmark: fleetprobe vs a plain OpenSSH fan-out, Ansible and pssh, side by side.

One sshd listens on 0.0.0.0:PORT of this machine; host i of the simulated fleet is the distinct
loopback address 127.0.x.y, so every host is a separate TCP peer.  Every tool ships the same
probe script (the `host` probe) and must reach N distinct addresses (the probe reports
$SSH_CONNECTION).  Runs are interleaved across tools and repeated; figures are medians with
min-max.  Results go to bench/RESULTS.md, regenerated, never typed.

    python bench/fleet_bench.py --sizes 10,100,500,1000 --repeats 3 --forks 32
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator import probes  # noqa: E402


@dataclass
class Measure:
    tool: str
    n: int
    wall_s: float
    cpu_s: float
    peak_mb: float
    reached: int
    ok: int
    note: str = ""


@dataclass
class Fleet:
    work: Path
    port: int
    user: str
    key: Path
    known_hosts: Path
    addresses: list[str]
    sshd: subprocess.Popen
    ssh_opts: list[str] = field(default_factory=list)


def address(i: int) -> str:
    return f"127.0.{i // 250}.{i % 250 + 1}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_fleet(n: int, work: Path) -> Fleet:
    work.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "user_key"):
        if not (work / name).exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / name)], check=True)
    user = os.environ.get("USER") or "root"
    if os.geteuid() == 0 and shutil.which("useradd"):
        # A separate login user, as the issue asks: nothing of root's environment leaks into the runs.
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", "fpbench"], capture_output=True)
        user = "fpbench"
    auth = work / "authorized_keys"
    auth.write_text((work / "user_key.pub").read_text())
    auth.chmod(0o644)
    work.chmod(0o755)
    port = free_port()
    cfg = work / "sshd_config"
    cfg.write_text(
        f"Port {port}\nListenAddress 0.0.0.0\nHostKey {work / 'host_key'}\nPidFile {work / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {auth}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "PermitRootLogin yes\nMaxStartups 2000:30:4000\nMaxSessions 1000\nLogLevel ERROR\n"
        "UseDNS no\nX11Forwarding no\nPrintMotd no\n"
    )
    with open(work / "sshd.log", "w") as log:
        sshd = subprocess.Popen([shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)], stderr=log)
    hostkey = (work / "host_key.pub").read_text().split()[:2]
    addrs = [address(i) for i in range(n)]
    kh = work / "known_hosts"
    kh.write_text("".join(f"[{a}]:{port} {hostkey[0]} {hostkey[1]}\n" for a in addrs))
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    opts = ["-i", str(work / "user_key"), "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={kh}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", str(port)]
    return Fleet(work, port, user, work / "user_key", kh, addrs, sshd, opts)


def tree_sampler(pid: int, stop: threading.Event, peak: list[int]) -> None:
    """Peak RSS of the whole process tree under pid (sum over live descendants), sampled."""
    while not stop.is_set():
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                rss[int(d)] = int(stat.rsplit(")", 1)[1].split()[21]) * resource.getpagesize()
                children.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                continue
        total, todo = 0, [pid]
        while todo:
            p = todo.pop()
            total += rss.get(p, 0)
            todo.extend(children.get(p, []))
        peak[0] = max(peak[0], total)
        stop.wait(0.05)


def measured(cmd: list[str] | str, shell: bool = False, env: dict | None = None, stdout=None) -> tuple[float, float, float, int]:
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, shell=shell, env=env, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop, peak = threading.Event(), [0]
    th = threading.Thread(target=tree_sampler, args=(proc.pid, stop, peak), daemon=True)
    th.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    stop.set()
    th.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_utime + ru.ru_stime, peak[0] / 2**20, proc.returncode


def reached_from_envelopes(texts: list[str]) -> tuple[int, int]:
    seen, ok = set(), 0
    for t in texts:
        for m in re.finditer(r'"ssh_connection": "([^"]+)"', t):
            seen.add(m.group(1).split()[2])
        ok += t.count('"status": "ok"')
    return len(seen), ok


def run_probe(fleet: Fleet, n: int, forks: int, script: Path, tmp: Path, audit: bool = False) -> Measure:
    inv = tmp / "inv.yml"
    hosts = "\n".join(f"    b{i:05d}: {{ansible_host: '{a}'}}" for i, a in enumerate(fleet.addresses[:n]))
    inv.write_text(f"all:\n  vars:\n    ansible_port: {fleet.port}\n    ansible_user: {fleet.user}\n"
                   f"    ansible_ssh_private_key_file: {fleet.key}\n  hosts:\n{hosts}\n")
    out = tmp / "probe-run"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, HOME=str(tmp / "home"))
    (tmp / "home" / ".ssh").mkdir(parents=True, exist_ok=True)
    shutil.copy(fleet.known_hosts, tmp / "home" / ".ssh" / "known_hosts")
    cmd = [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "-f", str(forks), "-o", str(out), "-q",
           "--format", "json"]
    cmd += [] if audit else ["--probe", "host"]
    with open(tmp / "probe.out", "w") as so:
        wall, cpu, peak, _ = measured(cmd, env=dict(env, PYTHONPATH=str(REPO)), stdout=so)
    texts = [p.read_text() for p in (out / "raw").glob("*/host.json")] if (out / "raw").is_dir() else []
    reached, ok = reached_from_envelopes(texts)
    return Measure("probe run" + (" (audit)" if audit else ""), n, wall, cpu, peak, reached, ok)


def run_openssh(fleet: Fleet, n: int, forks: int, script: Path, tmp: Path) -> Measure:
    outdir = tmp / "ssh-out"
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir()
    opts = " ".join(f"'{o}'" for o in fleet.ssh_opts)
    lst = tmp / "addrs"
    lst.write_text("\n".join(fleet.addresses[:n]) + "\n")
    cmd = (f"xargs -P {forks} -I{{}} sh -c \"ssh {opts} {fleet.user}@{{}} python3 - < {script} > {outdir}/{{}}.json 2>/dev/null\" "
           f"< {lst}")
    wall, cpu, peak, _ = measured(cmd, shell=True)
    reached, ok = reached_from_envelopes([p.read_text() for p in outdir.glob("*.json")])
    return Measure("openssh fan-out", n, wall, cpu, peak, reached, ok)


def run_pssh(fleet: Fleet, n: int, forks: int, script: Path, tmp: Path) -> Measure | None:
    exe = shutil.which("parallel-ssh") or shutil.which("pssh")
    if not exe:
        return None
    outdir = tmp / "pssh-out"
    shutil.rmtree(outdir, ignore_errors=True)
    lst = tmp / "pssh-hosts"
    lst.write_text("".join(f"{fleet.user}@{a}:{fleet.port}\n" for a in fleet.addresses[:n]))
    x = [a for o in fleet.ssh_opts if o not in ("-p", str(fleet.port)) for a in ("-x", o)]
    cmd = [exe, "-h", str(lst), "-p", str(forks), "-t", "60", "-o", str(outdir), "-I", *x, "python3", "-"]
    wall, cpu, peak, _ = measured(f"{' '.join(map(repr, cmd))} < {script}", shell=True)
    reached, ok = reached_from_envelopes([p.read_text() for p in outdir.glob("*")] if outdir.is_dir() else [])
    return Measure("pssh", n, wall, cpu, peak, reached, ok)


def run_ansible(fleet: Fleet, n: int, forks: int, script: Path, tmp: Path, module: str) -> Measure | None:
    ansible = os.environ.get("BENCH_ANSIBLE") or shutil.which("ansible")
    if not ansible:
        return None
    inv = tmp / "ansible-inv.ini"
    inv.write_text("[fleet]\n" + "".join(f"b{i:05d} ansible_host={a}\n" for i, a in enumerate(fleet.addresses[:n])))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_SSH_ARGS=" ".join(fleet.ssh_opts[2:-2]),
               ANSIBLE_PRIVATE_KEY_FILE=str(fleet.key), ANSIBLE_REMOTE_USER=fleet.user,
               ANSIBLE_REMOTE_PORT=str(fleet.port), ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3",
               ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"), ANSIBLE_NOCOLOR="1")
    if module == "script":
        args = ["-m", "script", "-a", f"{script} executable=python3"]
    else:
        args = ["-m", "raw", "-a", f"python3 -c \"$(printf %s {script.read_text().encode().hex()} | xxd -r -p)\""]
        if not shutil.which("xxd"):
            args = ["-m", "raw", "-a", f"python3 -c 'import sys,binascii;exec(binascii.unhexlify(\"{script.read_text().encode().hex()}\"))'"]
    out = tmp / f"ansible-{module}.json"
    with open(out, "w") as so:
        wall, cpu, peak, _ = measured([ansible, "fleet", "-i", str(inv), "-f", str(forks), *args], env=env, stdout=so)
    reached, ok = reached_from_envelopes([out.read_text().replace('\\"', '"')])
    return Measure(f"ansible -m {module}", n, wall, cpu, peak, reached, ok)


def summarize(rows: list[Measure]) -> str:
    by: dict[tuple[int, str], list[Measure]] = {}
    for r in rows:
        by.setdefault((r.n, r.tool), []).append(r)
    lines = ["| hosts | tool | wall s median (min–max) | × OpenSSH | controller CPU s | peak MB (process tree) | distinct hosts reached | ok envelopes |",
             "|---|---|---|---|---|---|---|---|"]
    for (n, tool), ms in sorted(by.items()):
        floor = by.get((n, "openssh fan-out"))
        walls = [m.wall_s for m in ms]
        med = statistics.median(walls)
        ratio = f"{med / statistics.median([m.wall_s for m in floor]):.2f}" if floor else "-"
        lines.append(f"| {n} | {tool} | {med:.2f} ({min(walls):.2f}–{max(walls):.2f}) | {ratio} | "
                     f"{statistics.median([m.cpu_s for m in ms]):.2f} | {max(m.peak_mb for m in ms):.0f} | "
                     f"{min(m.reached for m in ms)} | {min(m.ok for m in ms)} |")
    return "\n".join(lines)


def controller_only(sizes: list[int]) -> str:
    """Normalize, check and write fleet.json from recorded envelopes, without any transport."""
    from orchestrator.commands.run import judge
    from orchestrator.fleet import HostInput
    from orchestrator.transport.replay import DEMO_RECORDINGS

    recs = sorted(p for p in DEMO_RECORDINGS.iterdir() if p.is_dir()) if DEMO_RECORDINGS.is_dir() else []
    if not recs:
        return "(no demo recordings found: controller-only timing skipped)"
    templates = []
    for d in recs:
        data = {p.stem: json.loads(p.read_text())["data"] for p in d.glob("*.json")}
        probes_s = {p: {"outcome": "ok", "reason": "", "duration_s": 0.1, "probe_version": "1", "retried": 0} for p in data}
        templates.append((d.name, data, probes_s))
    lines = ["| hosts | normalize + check + write fleet.json, s | per 1,000 hosts, s | fleet.json MB | peak RSS MB |", "|---|---|---|---|---|"]
    for n in sizes:
        inputs = [HostInput(f"h{i:05d}-{templates[i % len(templates)][0]}", f"10.0.{i // 250}.{i % 250}", ["all"],
                            templates[i % len(templates)][2], templates[i % len(templates)][1]) for i in range(n)]
        t0 = time.monotonic()
        fleet = judge({"id": f"bench-{n}"}, inputs, {})
        with tempfile.TemporaryDirectory() as td:
            p = Path(td) / "fleet.json"
            p.write_text(json.dumps(fleet))
            size = p.stat().st_size / 2**20
        dt = time.monotonic() - t0
        lines.append(f"| {n} | {dt:.2f} | {dt / n * 1000:.2f} | {size:.1f} | {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} |")
    return "\n".join(lines)


def machine_description() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    mem = next((line.split()[1] for line in meminfo if line.startswith("MemTotal")), "0")
    ver = lambda c: (subprocess.run(c, capture_output=True, text=True).stdout or subprocess.run(c, capture_output=True, text=True).stderr).strip().splitlines()[:1]  # noqa: E731
    return (f"- CPU: {cpu}, {os.cpu_count()} cores; memory {int(mem) / 2**20:.1f} GiB; kernel {platform.release()}\n"
            f"- Python {platform.python_version()}; OpenSSH {ver(['ssh', '-V'])}; "
            f"ansible {ver([os.environ.get('BENCH_ANSIBLE') or 'ansible', '--version']) if (os.environ.get('BENCH_ANSIBLE') or shutil.which('ansible')) else 'absent'}; "
            f"pssh {'present' if shutil.which('parallel-ssh') else 'absent'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,100,500,1000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--forks", type=int, default=32)
    ap.add_argument("--tools", default="probe,openssh,pssh,ansible-script,ansible-raw")
    ap.add_argument("--ansible-max", type=int, default=500, help="largest N Ansible is run at (it is slow)")
    ap.add_argument("--controller-sizes", default="1000,10000")
    ap.add_argument("--out", default=str(REPO / "bench" / "RESULTS.md"))
    a = ap.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sizes = [int(x) for x in a.sizes.split(",")]
    tools = a.tools.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="fpbench-"))
    tmp.chmod(0o755)
    fleet = start_fleet(max(sizes), tmp / "fleet")
    script = tmp / "probe_host.py"
    script.write_bytes(probes.build_script("host", {}, 30.0))
    script.chmod(0o644)
    rows: list[Measure] = []
    try:
        for n in sizes:
            for rep in range(a.repeats):
                order = tools[rep % len(tools):] + tools[:rep % len(tools)]  # interleave, rotate the start
                for tool in order:
                    m: Measure | None = None
                    if tool == "probe":
                        m = run_probe(fleet, n, a.forks, script, tmp)
                    elif tool == "openssh":
                        m = run_openssh(fleet, n, a.forks, script, tmp)
                    elif tool == "pssh":
                        m = run_pssh(fleet, n, a.forks, script, tmp)
                    elif tool.startswith("ansible") and n <= a.ansible_max:
                        m = run_ansible(fleet, n, a.forks, script, tmp, tool.split("-", 1)[1])
                    if m:
                        rows.append(m)
                        print(f"n={n} rep={rep} {m.tool}: {m.wall_s:.2f}s cpu={m.cpu_s:.2f}s peak={m.peak_mb:.0f}MB "
                              f"reached={m.reached} ok={m.ok}", flush=True)
    finally:
        fleet.sshd.terminate()
    ctl = controller_only([int(x) for x in a.controller_sizes.split(",")])
    cmd = "python bench/fleet_bench.py " + " ".join(sys.argv[1:])
    text = (f"# Fleet benchmark results\n\nGenerated by `{cmd}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n"
            f"Do not edit by hand: rerun the command.\n\n## Machine\n\n{machine_description()}\n\n"
            f"## Fan-out (the `host` probe, forks={a.forks}, {a.repeats} interleaved repeats)\n\n{summarize(rows)}\n\n"
            f"## Controller alone (from recorded envelopes)\n\n{ctl}\n")
    Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
