#!/usr/bin/env python3
"""Fleet-scale benchmark: fleetprobe vs a plain OpenSSH fan-out, Ansible and pssh, side by side.

One sshd listens on 0.0.0.0:PORT of this machine; host i of the simulated fleet is the distinct
loopback address 127.0.x.y, so every host is a separate TCP peer.  Every tool ships the same
probe script (the `host` probe) and must reach N distinct addresses (the probe reports
$SSH_CONNECTION).  Runs are interleaved across tools and repeated; figures are medians with
min-max.  Results go to bench/RESULTS.md, regenerated, never typed.

    sh bench/setup.sh            # parallel-ssh and ansible-core (in /tmp/ansible-venv); as root
    BENCH_ANSIBLE=/tmp/ansible-venv/bin/ansible python bench/fleet_bench.py --sizes 10,100,500,1000

Run as root it creates the login user `fpbench`.  Not part of the test suite.  The audit
playbook against fixture roots is not benchmarked yet: only the `host` probe.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import resource
import shlex
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

from orchestrator import atomic, probes  # noqa: E402


@dataclass
class Measure:
    tool: str
    n: int
    forks: int
    wall_s: float
    cpu_s: float
    peak_mb: float  # summed PSS
    reached: int
    ok: int
    peak_rss_mb: float = 0.0  # summed RSS (counts shared pages once per process)


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


BENCH_USER = "fpbench"
# The key exchange every OpenSSH-based tool is given: the one Paramiko negotiates with this sshd.
# OpenSSH 9.2's default, sntrup761x25519 (post-quantum), costs ~70 ms of client CPU per login
# here, which would measure the choice of key exchange rather than the tools; the
# `openssh-defaultkex` tool shows that cost separately.
KEX = "curve25519-sha256"


def address(i: int) -> str:
    """Host i of the fleet: a loopback address of its own, so every host is a separate TCP peer."""
    return f"127.0.{i // 250}.{i % 250 + 1}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_user() -> str:
    """The login user: `fpbench` (plain /bin/sh, empty home, no rc files) when we are root.

    Root's own login here runs slow rc files (pyenv shims); a bare user makes the server side
    of every login cheap and identical for every tool.
    """
    if os.geteuid() != 0:
        return os.environ.get("USER") or "root"
    try:
        import pwd

        pwd.getpwnam(BENCH_USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--skel", "/dev/null", "--shell", "/bin/sh", BENCH_USER],
                       check=True, capture_output=True)
    # useradd leaves the password field "!" (locked), and sshd without PAM refuses key logins to
    # locked accounts; "*" means "no password" without the lock.
    subprocess.run(["usermod", "-p", "*", BENCH_USER], check=True, capture_output=True)
    return BENCH_USER


def start_fleet(n: int, work: Path) -> Fleet:
    work.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "user_key"):
        if not (work / name).exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / name)], check=True)
    user = bench_user()
    auth = work / "authorized_keys"
    auth.write_text((work / "user_key.pub").read_text())
    auth.chmod(0o644)
    work.chmod(0o755)
    port = free_port()
    cfg = work / "sshd_config"
    # 0.0.0.0 so that every 127.0.x.y reaches the one sshd; AllowUsers ...@127.0.0.0/8 refuses any
    # login that does not come from this machine's loopback (eth0 peers get no further than the
    # banner).  MaxStartups: the default 10:30:100 drops connections past 10 unauthenticated ones,
    # which a fan-out of 32-100 forks exceeds on purpose.
    cfg.write_text(
        f"Port {port}\nListenAddress 0.0.0.0\nHostKey {work / 'host_key'}\nPidFile {work / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {auth}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        f"AllowUsers {user}@127.0.0.0/8\n"
        "MaxStartups 4000:100:4000\nMaxSessions 100\nMaxAuthTries 6\nLoginGraceTime 120\nLogLevel ERROR\n"
        "UseDNS no\nX11Forwarding no\nPrintMotd no\nPrintLastLog no\nPermitUserEnvironment no\n"
        "Subsystem sftp internal-sftp\n"
    )
    sshd_bin = shutil.which("sshd") or "/usr/sbin/sshd"
    check = subprocess.run([sshd_bin, "-t", "-f", str(cfg)], capture_output=True, text=True)
    if check.returncode != 0:
        raise SystemExit(f"sshd rejects the bench config: {check.stderr.strip()}")
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory sshd insists on
    with open(work / "sshd.log", "w") as log:
        sshd = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(cfg)], stderr=log)
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
    # What every OpenSSH-based tool gets: this key alone, these known hosts, no ~/.ssh/config.
    opts = ["-F", "/dev/null", "-i", str(work / "user_key"), "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={kh}", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=10", "-o", f"KexAlgorithms={KEX}"]
    return Fleet(work, port, user, work / "user_key", kh, addrs, sshd, opts)


def _proc_table() -> tuple[dict[int, list[int]], dict[int, int]]:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = resource.getpagesize()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        rss[int(d)] = int(fields[21]) * page
        children.setdefault(int(fields[1]), []).append(int(d))
    return children, rss


def descendants(root: int, exclude: set[int], children: dict[int, list[int]]) -> list[int]:
    out, todo = [], [c for c in children.get(root, []) if c not in exclude]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(c for c in children.get(p, []) if c not in exclude)
    return out


def _pss(pid: int) -> int:
    """Proportional set size: shared pages (forked workers, libraries) split among their users, so
    a tree of 32 forked processes is not counted as 32 full copies."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_sampler(exclude: set[int], stop: threading.Event, peak: list[int]) -> None:
    """Peak summed PSS (peak[0]) and RSS (peak[1]) of every process below this one except the sshd.

    This process is a child subreaper, so what a tool leaves running in the background (Ansible's
    ControlPersist ssh masters) stays in the tree and is counted too.
    """
    me = os.getpid()
    while not stop.is_set():
        children, rss = _proc_table()
        tree = descendants(me, exclude, children)
        peak[0] = max(peak[0], sum(_pss(p) for p in tree))
        peak[1] = max(peak[1], sum(rss.get(p, 0) for p in tree))
        stop.wait(0.05)


def become_subreaper() -> None:
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def measured(cmd: list[str] | str, fleet: Fleet, shell: bool = False, env: dict | None = None,
             stdout=None, stderr=None) -> tuple[float, float, float, float]:
    """Wall time until the tool exits; CPU of the tool and everything it started (reaped
    background helpers included); peak RSS of that whole tree."""
    exclude = {fleet.sshd.pid}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    stop, peak = threading.Event(), [0, 0]
    th = threading.Thread(target=tree_sampler, args=(exclude, stop, peak), daemon=True)
    th.start()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, shell=shell, env=env, stdout=stdout or subprocess.DEVNULL,
                            stderr=stderr or subprocess.DEVNULL)
    _, status = os.waitpid(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    # background leftovers (ssh ControlPersist masters) were reparented to us: end and reap them
    children, _ = _proc_table()
    left = descendants(os.getpid(), exclude, children)
    for p in left:
        try:
            os.kill(p, 15)
        except OSError:
            pass
    for p in left:
        try:
            os.waitpid(p, 0)
        except ChildProcessError:
            pass
    stop.set()
    th.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, peak[0] / 2**20, peak[1] / 2**20


def _envelopes_in(text: str) -> list[dict]:
    """Every JSON object in `text` that looks like a probe envelope (one per file normally)."""
    out: list[dict] = []
    dec = json.JSONDecoder()
    i = text.find("{")
    while i >= 0:
        try:
            obj, end = dec.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict) and "envelope_version" in obj:
            out.append(obj)
        elif isinstance(obj, dict) and isinstance(obj.get("stdout"), str):
            out.extend(_envelopes_in(obj["stdout"]))  # a tool's result record carrying the output
        i = text.find("{", end)
    return out


def reached_from_envelopes(envs: list[dict], port: int) -> tuple[int, int]:
    """(distinct server addresses the probe ran behind, envelopes with status ok)."""
    seen, ok = set(), 0
    for env in envs:
        conn = str((env.get("data") or {}).get("ssh_connection") or "").split()
        if len(conn) == 4 and conn[3] == str(port):
            seen.add(conn[2])
        ok += env.get("status") == "ok"
    return len(seen), ok


def envelopes_from_files(paths) -> list[dict]:
    envs: list[dict] = []
    for p in paths:
        envs.extend(_envelopes_in(p.read_text(errors="replace")))
    return envs


def run_probe(fleet: Fleet, n: int, forks: int, script: Path, tmp: Path, audit: bool = False) -> Measure:
    inv = tmp / "inv.yml"
    hosts = "\n".join(f"    b{i:05d}: {{ansible_host: '{a}'}}" for i, a in enumerate(fleet.addresses[:n]))
    inv.write_text(f"all:\n  vars:\n    ansible_port: {fleet.port}\n    ansible_user: {fleet.user}\n"
                   f"    ansible_ssh_private_key_file: {fleet.key}\n  hosts:\n{hosts}\n")
    results = tmp / "probe-results"
    shutil.rmtree(results, ignore_errors=True)
    out = results / "run"
    cmd = [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "-f", str(forks), "-o", str(out), "-q",
           "--format", "json", "--known-hosts", str(fleet.known_hosts), "--ssh-config", "/dev/null"]
    cmd += [] if audit else ["--probe", "host"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("SSH_AUTH_SOCK", None)  # the same for every tool: the key file, no agent
    with open(tmp / "probe.out", "w") as so, open(tmp / "probe.err", "w") as se:
        wall, cpu, peak, rss = measured(cmd, fleet, env=env, stdout=so, stderr=se)
    envs = envelopes_from_files((out / "raw").glob("*/host.json")) if (out / "raw").is_dir() else []
    reached, ok = reached_from_envelopes(envs, fleet.port)
    return Measure("probe run" + (" (audit)" if audit else ""), n, forks, wall, cpu, peak, reached, ok, rss)


def plain_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SSH_AUTH_SOCK", None)
    return env


def run_openssh(fleet: Fleet, n: int, forks: int, script: Path, tmp: Path, default_kex: bool = False) -> Measure:
    outdir = tmp / "ssh-out"
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir()
    lst = tmp / "addrs"
    lst.write_text("\n".join(fleet.addresses[:n]) + "\n")
    opts = fleet.ssh_opts[:-2] if default_kex else fleet.ssh_opts
    ssh = shlex.join(["ssh", *opts, "-p", str(fleet.port), "-l", fleet.user])
    # xargs hands each address to one `ssh ... python3 -` fed the probe: N background ssh processes,
    # `forks` at a time.  sh -c only sets up the redirections.
    inner = f'{ssh} "$1" python3 - < {shlex.quote(str(script))} > {shlex.quote(str(outdir))}/"$1".json 2>/dev/null'
    cmd = f"xargs -P {forks} -n 1 sh -c {shlex.quote(inner)} sh < {shlex.quote(str(lst))}"
    wall, cpu, peak, rss = measured(cmd, fleet, shell=True, env=plain_env())
    reached, ok = reached_from_envelopes(envelopes_from_files(outdir.glob("*.json")), fleet.port)
    return Measure("openssh fan-out" + (" (default kex)" if default_kex else ""), n, forks, wall, cpu, peak, reached, ok, rss)


def pssh_exe() -> str | None:
    return shutil.which("parallel-ssh") or shutil.which("pssh")


def run_pssh(fleet: Fleet, n: int, forks: int, script: Path, tmp: Path) -> Measure | None:
    exe = pssh_exe()
    if not exe:
        return None
    outdir = tmp / "pssh-out"
    shutil.rmtree(outdir, ignore_errors=True)
    lst = tmp / "pssh-hosts"
    lst.write_text("".join(f"{fleet.user}@{a}:{fleet.port}\n" for a in fleet.addresses[:n]))
    cmd = [exe, "-h", str(lst), "-p", str(forks), "-t", "120", "-o", str(outdir), "-I",
           "-x", shlex.join(fleet.ssh_opts), "python3", "-"]
    wall, cpu, peak, rss = measured(f"{shlex.join(cmd)} < {shlex.quote(str(script))}", fleet, shell=True,
                                  env=plain_env())
    envs = envelopes_from_files(outdir.glob("*")) if outdir.is_dir() else []
    reached, ok = reached_from_envelopes(envs, fleet.port)
    return Measure("pssh", n, forks, wall, cpu, peak, reached, ok, rss)


def ansible_exe() -> str | None:
    return os.environ.get("BENCH_ANSIBLE") or shutil.which("ansible")


def run_ansible(fleet: Fleet, n: int, forks: int, script: Path, tmp: Path, module: str) -> Measure | None:
    ansible = ansible_exe()
    if not ansible:
        return None
    inv = tmp / "ansible-inv.ini"
    inv.write_text("[fleet]\n" + "".join(f"b{i:05d} ansible_host={a}\n" for i, a in enumerate(fleet.addresses[:n])))
    cp = tmp / "cp"
    cp.mkdir(exist_ok=True)
    (tmp / "ansible-home" / ".ansible").mkdir(parents=True, exist_ok=True)
    cfg = tmp / "ansible.cfg"  # an empty config: no ansible.cfg of this machine or user applies
    cfg.write_text("[defaults]\n")
    # Ansible's own default ssh_args (compression, a ControlPersist master per host, which its
    # script module reuses for mkdir/put/run/cleanup) plus the options every tool gets.
    ssh_args = "-C -o ControlMaster=auto -o ControlPersist=60s " + shlex.join(
        [o for o in fleet.ssh_opts if o not in ("-i", str(fleet.key))])
    env = dict(plain_env(), ANSIBLE_STDOUT_CALLBACK="minimal", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_SSH_ARGS=ssh_args,
               ANSIBLE_PRIVATE_KEY_FILE=str(fleet.key), ANSIBLE_REMOTE_USER=fleet.user,
               ANSIBLE_REMOTE_PORT=str(fleet.port), ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3",
               ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"), ANSIBLE_SSH_CONTROL_PATH_DIR=str(cp),
               ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_CONFIG=str(cfg),
               HOME=str(tmp / "ansible-home"))
    if module == "script":
        args = ["-m", "script", "-a", f"{script} executable=python3"]
    else:
        # raw runs one command line, no file transfer: ship the probe inline
        payload = base64.b64encode(script.read_bytes()).decode()
        args = ["-m", "raw", "-a", f"python3 -c 'import base64;exec(base64.b64decode(\"{payload}\"))'"]
    out = tmp / f"ansible-{module}.json"
    with open(out, "w") as so, open(tmp / f"ansible-{module}.err", "w") as se:
        wall, cpu, peak, rss = measured([ansible, "fleet", "-i", str(inv), "-f", str(forks), *args], fleet,
                                      env=env, stdout=so, stderr=se)
    # ansible-core's built-in `minimal` callback prints each host's stdout verbatim after
    # "host | CHANGED | rc=0 >>" (the json callback lives in the ansible.posix collection)
    envs = _envelopes_in(out.read_text(errors="replace"))
    reached, ok = reached_from_envelopes(envs, fleet.port)
    return Measure(f"ansible -m {module}", n, forks, wall, cpu, peak, reached, ok, rss)


def _median(ms: list[Measure], attr: str) -> float:
    return statistics.median(getattr(m, attr) for m in ms)


def summarize(rows: list[Measure]) -> str:
    by: dict[tuple[int, int, str], list[Measure]] = {}
    for r in rows:
        by.setdefault((r.n, r.forks, r.tool), []).append(r)
    lines = ["| hosts | forks | tool | runs | wall s, median (min–max) | × OpenSSH floor | × ansible -m script | "
             "controller CPU s, median | peak MB, process tree PSS (RSS sum) | distinct hosts reached (min) | ok envelopes (min) |",
             "|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for (n, forks, tool), ms in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1], TOOL_ORDER.get(kv[0][2], 9))):
        walls = [m.wall_s for m in ms]
        med = statistics.median(walls)
        ratios = []
        for ref in (FLOOR, "ansible -m script"):
            base = by.get((n, forks, ref))
            ratios.append(f"{med / _median(base, 'wall_s'):.2f}" if base else "–")
        lines.append(f"| {n} | {forks} | {tool} | {len(ms)} | {med:.2f} ({min(walls):.2f}–{max(walls):.2f}) | "
                     f"{ratios[0]} | {ratios[1]} | {_median(ms, 'cpu_s'):.2f} | {max(m.peak_mb for m in ms):.0f} "
                     f"({max(m.peak_rss_mb for m in ms):.0f}) | "
                     f"{min(m.reached for m in ms)} | {min(m.ok for m in ms)} |")
    return "\n".join(lines)


TOOL_ORDER = {"openssh fan-out": 0, "probe run": 1, "pssh": 2, "ansible -m raw": 3, "ansible -m script": 4,
              "openssh fan-out (default kex)": 5}
FLOOR = "openssh fan-out"


def controller_one(n: int) -> dict:
    """Normalize, check and write fleet.json for n hosts built from the demo recordings (no transport)."""
    from orchestrator.commands.run import judge
    from orchestrator.fleet import HostInput
    from orchestrator.transport.replay import DEMO_RECORDINGS

    recs = sorted(p for p in DEMO_RECORDINGS.iterdir() if p.is_dir()) if DEMO_RECORDINGS.is_dir() else []
    if not recs:
        raise SystemExit("no demo recordings found")
    templates = []
    for d in recs:
        data = {p.stem: json.loads(p.read_text())["data"] for p in d.glob("*.json")}
        probes_s = {p: {"outcome": "ok", "reason": "", "duration_s": 0.1, "probe_version": "1", "retried": 0} for p in data}
        templates.append((d.name, data, probes_s))
    inputs = [HostInput(f"h{i:05d}-{templates[i % len(templates)][0]}", f"10.0.{i // 250}.{i % 250}", ["all"],
                        templates[i % len(templates)][2], templates[i % len(templates)][1]) for i in range(n)]
    t0 = time.monotonic()
    fleet = judge({"id": f"bench-{n}"}, inputs, {})
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "fleet.json"
        atomic.write_json(p, fleet)  # the writer `probe run` uses (json.dump would take the slow path)
        size = p.stat().st_size / 2**20
    dt = time.monotonic() - t0
    return {"n": n, "seconds": dt, "fleet_mb": size, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "machines": len(templates)}


def controller_only(sizes: list[int], timeout: float) -> str:
    """Each size in a process of its own, so peak RSS is that size's alone; bounded by `timeout`."""
    if not sizes:
        return "(not run: --controller-sizes was empty)"
    lines = ["| hosts | normalize + check + write fleet.json, s | per 1,000 hosts, s | fleet.json MB | peak RSS MB |",
             "|---:|---:|---:|---:|---:|"]
    per_k = []
    for n in sizes:
        try:
            r = subprocess.run([sys.executable, __file__, "--controller-one", str(n)], capture_output=True,
                               text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=str(REPO)))
        except subprocess.TimeoutExpired:
            lines.append(f"| {n} | did not finish within {timeout:.0f} s | – | – | – |")
            continue
        if r.returncode != 0:
            lines.append(f"| {n} | failed: {(r.stderr.strip().splitlines() or ['?'])[-1][:120]} | – | – | – |")
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        per_k.append(d["seconds"] / n * 1000)
        lines.append(f"| {n} | {d['seconds']:.2f} | {per_k[-1]:.2f} | {d['fleet_mb']:.1f} | {d['maxrss_mb']:.0f} |")
    if len(per_k) >= 2:
        lines.append(f"\nPer-host cost grows {per_k[-1] / per_k[0]:.2f}× from the smallest to the largest size "
                     "(1.00 = linear).")
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


RUNNERS = {
    "probe": lambda f, n, k, s, t: run_probe(f, n, k, s, t),
    "openssh": lambda f, n, k, s, t: run_openssh(f, n, k, s, t),
    "openssh-defaultkex": lambda f, n, k, s, t: run_openssh(f, n, k, s, t, default_kex=True),
    "pssh": lambda f, n, k, s, t: run_pssh(f, n, k, s, t),
    "ansible-script": lambda f, n, k, s, t: run_ansible(f, n, k, s, t, "script"),
    "ansible-raw": lambda f, n, k, s, t: run_ansible(f, n, k, s, t, "raw"),
}


def plan(sizes: list[int], tools: list[str], repeats: int, forks: int, limits: dict[str, int],
         sweep_forks: list[int], sweep_n: int, sweep_tools: list[str], sweep_repeats: int) -> list[tuple[int, int, int, str]]:
    """(n, forks, repeat, tool) in run order: per size and repeat every tool once, the starting
    tool rotated between repeats, so slow drift of the shared machine hits every tool alike."""
    out = []
    for n in sizes:
        todo = [t for t in tools if n <= limits.get(t, n)]
        for rep in range(repeats):
            k = rep % len(todo) if todo else 0
            out.extend((n, forks, rep, t) for t in todo[k:] + todo[:k])
    for rep in range(sweep_repeats):
        for fk in sweep_forks:
            k = rep % len(sweep_tools)
            out.extend((sweep_n, fk, rep, t) for t in sweep_tools[k:] + sweep_tools[:k])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,100,500,1000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--forks", type=int, default=32, help="forks for every tool (default 32)")
    ap.add_argument("--tools", default="probe,openssh,pssh,ansible-script,ansible-raw,openssh-defaultkex")
    ap.add_argument("--ansible-max", type=int, default=100, help="largest N Ansible is run at (it is slow)")
    ap.add_argument("--sweep-forks", default="", help="extra forks values, e.g. 16,64,100, run at --sweep-n")
    ap.add_argument("--sweep-n", type=int, default=500)
    ap.add_argument("--sweep-tools", default="probe,openssh")
    ap.add_argument("--sweep-repeats", type=int, default=1)
    ap.add_argument("--defaultkex-max", type=int, default=100, help="largest N for openssh-defaultkex (slow)")
    ap.add_argument("--controller-sizes", default="1000,10000")
    ap.add_argument("--controller-timeout", type=float, default=300)
    ap.add_argument("--controller-one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--controller-refresh", action="store_true",
                    help="only re-measure the controller-alone section of --out")
    ap.add_argument("--out", default=str(REPO / "bench" / "RESULTS.md"))
    a = ap.parse_args()
    if a.controller_one:
        print(json.dumps(controller_one(a.controller_one)))
        return 0
    if a.controller_refresh:
        # Re-measure only the controller section of an existing RESULTS.md, leaving the fan-out as it was.
        ctl = controller_only([int(x) for x in a.controller_sizes.split(",") if x], a.controller_timeout)
        text = Path(a.out).read_text()
        head, sep, _ = text.partition("## Controller alone")
        cmd = "python bench/fleet_bench.py " + " ".join(sys.argv[1:])
        Path(a.out).write_text(head + sep + f" (normalize + check + write fleet.json, hosts cloned from the demo "
                               f"recordings)\n\nRe-measured by `{cmd}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
                               + ctl + "\n")
        print(ctl)
        return 0
        return 0
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # 1,000 connections are 1,000+ sockets in one controller and 2,000+ fds in sshd: raise the limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    become_subreaper()
    sizes = [int(x) for x in a.sizes.split(",") if x]
    tools = [t for t in a.tools.split(",") if t]
    unknown = [t for t in tools if t not in RUNNERS]
    if unknown:
        ap.error(f"unknown tools {unknown}; known: {', '.join(RUNNERS)}")
    sweep = [int(x) for x in a.sweep_forks.split(",") if x]
    sweep_tools = [t for t in a.sweep_tools.split(",") if t]
    limits = {"ansible-script": a.ansible_max, "ansible-raw": a.ansible_max, "openssh-defaultkex": a.defaultkex_max}
    runs = plan(sizes, tools, a.repeats, a.forks, limits, sweep, a.sweep_n, sweep_tools, a.sweep_repeats)
    tmp = Path(tempfile.mkdtemp(prefix="fpbench-"))
    tmp.chmod(0o755)
    fleet = start_fleet(max([*sizes, a.sweep_n if sweep else 0]), tmp / "fleet")
    script = tmp / "probe_host.py"
    script.write_bytes(probes.build_script("host", {}, 30.0))
    script.chmod(0o644)
    rows: list[Measure] = []
    t_start = time.monotonic()
    try:
        for n, forks, rep, tool in runs:
            m = RUNNERS[tool](fleet, n, forks, script, tmp)
            if m is None:
                continue
            rows.append(m)
            flag = "" if m.reached == n else f"  <-- reached {m.reached} of {n}"
            print(f"[{time.monotonic() - t_start:6.0f}s] n={n} forks={forks} rep={rep} {m.tool}: {m.wall_s:.2f}s "
                  f"cpu={m.cpu_s:.2f}s peak={m.peak_mb:.0f}MB reached={m.reached} ok={m.ok}{flag}", flush=True)
    finally:
        fleet.sshd.terminate()
        fleet.sshd.wait()
    (Path(a.out).with_suffix(".json")).write_text(json.dumps([m.__dict__ for m in rows], indent=1) + "\n")
    fan_elapsed = time.monotonic() - t_start
    ctl = controller_only([int(x) for x in a.controller_sizes.split(",") if x], a.controller_timeout)
    cmd = "sh bench/setup.sh && " + " ".join(
        ["BENCH_ANSIBLE=" + shlex.quote(os.environ["BENCH_ANSIBLE"])] if os.environ.get("BENCH_ANSIBLE") else []
    ) + f" python bench/fleet_bench.py {shlex.join(sys.argv[1:])}"
    text = (f"# Fleet benchmark results\n\nGenerated by `{cmd.strip()}` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} (fan-out part took {fan_elapsed / 60:.1f} min).\n"
            f"Do not edit by hand: rerun the command.  Raw measurements: `{Path(a.out).with_suffix('.json').name}`.\n\n"
            f"## Machine\n\n{machine_description()}\n\n"
            f"## Method\n\n{METHOD.format(user=fleet.user, forks=a.forks, repeats=a.repeats)}\n\n"
            f"## Fan-out: the `host` probe on N hosts\n\n{summarize(rows)}\n\n"
            f"## Controller alone (normalize + check + write fleet.json, hosts cloned from the demo recordings)\n\n{ctl}\n")
    Path(a.out).write_text(text)
    print(text)
    return 0


METHOD = """\
- Fleet: one sshd (`ListenAddress 0.0.0.0`, logins allowed only from 127.0.0.0/8, MaxStartups 4000,
  its fd limit raised with this process's) reached at 127.0.x.y, one address per host, so every host
  is a separate TCP peer; login user `{user}` (/bin/sh, empty home, no rc files); ed25519 host and user keys.
- Work: every tool ships the same composed `host` probe (prelude + probe, ~20 KB) to `python3 -` on each
  host; `distinct hosts reached` counts the distinct server addresses in the probes' `$SSH_CONNECTION`.
- Same options for every tool: the key alone, strict host-key checking against the same known_hosts,
  no ssh config, no agent, forks={forks}.  Ansible keeps its default ssh_args (ControlPersist master per
  host, compression); `-m script` copies the file and runs it, `-m raw` runs `python3 -c` with the probe inline.
- OpenSSH fan-out: `xargs -P forks sh -c 'ssh ... python3 - < probe > out'`, the practical floor
  ("× OpenSSH floor" is relative to it).  Every OpenSSH-based tool (this, pssh, Ansible) gets
  `KexAlgorithms=curve25519-sha256`, the key exchange Paramiko negotiates with this sshd: OpenSSH
  9.2's default, sntrup761x25519 (post-quantum), costs ~70 ms of client CPU per login here and would
  measure the key exchange instead of the tool.  `openssh fan-out (default kex)` shows that cost.
- Wall: until the tool's process exits.  Controller CPU: user+system of the tool and every process it
  started (reaped, incl. Ansible's background ssh masters).  Peak MB: largest sampled (20 Hz) sum of PSS
  (shared pages split among the processes sharing them) over the tool's whole process tree; the
  plain RSS sum, which counts every forked worker's shared pages again, in parentheses.  The sshd and the probes run on the same 2 cores, so
  the "hosts" compete with the controller: absolute times are pessimistic, ratios are the point.
- {repeats} repeats per (size, tool), interleaved with a rotating start; median (min–max).  The machine
  is shared with other work, so single runs can be noisy."""


if __name__ == "__main__":
    sys.exit(main())
