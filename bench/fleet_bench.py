#!/usr/bin/env python3
"""Fleet-scale benchmark: fleetprobe vs a plain OpenSSH fan-out, Ansible and pssh, side by side.

One sshd listens on 0.0.0.0:PORT of this machine; host i of the simulated fleet is the distinct
loopback address 127.0.x.y, so every host is a separate TCP peer.  Every tool ships the same
probe scripts and must reach N distinct addresses (the `host` probe reports $SSH_CONNECTION).
Two kinds of work: the `host` probe alone (--sizes), and the audit playbook against per-host
fixture roots of a simulated GPU machine (--audit-sizes).  Runs are interleaved across tools and
repeated; figures are medians with min-max.  Each run reports the tool's (controller) CPU and,
apart from it, the simulated hosts' CPU: sshd runs under bench/subreaper.py so none of its
processes is ever reaped by this one.  Results go to bench/RESULTS.md, regenerated, never typed.

    sh bench/setup.sh            # parallel-ssh, gcc, ansible-core (in /tmp/ansible-venv); as root
    BENCH_ANSIBLE=/tmp/ansible-venv/bin/ansible python bench/fleet_bench.py \\
        --sizes 10,100,500,1000 --audit-sizes 10,100
    python bench/fleet_bench.py --selfcheck    # only the controller / host-side CPU attribution check
    # the fan-out under latency, through bench/delayproxy.c (docs/performance.md, "Fan-out under latency"):
    python bench/fleet_bench.py --sizes '' --rtt-ms 20,100 --rtt-sizes 500,1000 --rtt-forks 32,128,256,512 \
        --ansible-max 500 --controller-sizes ''
    # the same with hosts that answer from recordings of the real probe (bench/replayhost.py, issue 51):
    python bench/fleet_bench.py --latency-only --replay asyncssh --rtt-ms 0,20,100 --rtt-forks 32,128,256,512

Run as root it creates the login user `fpbench`.  Not part of the test suite.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import dataclasses
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

from orchestrator.engine import payload as probes  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from delayproxy import DelayProxy  # noqa: E402
from replayhost import Replayer, replayed, uses_placeholder  # noqa: E402


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
    host_cpu_s: float = 0.0  # the simulated hosts' side: sshd sessions and the probes they ran
    work: str = "host"  # "host": the host probe; "audit": every probe of the audit playbook
    rc: int = 0  # the tool's exit status (pssh and xargs say non-zero when a host failed)
    rtt_ms: float | None = None  # through bench/delayproxy.c at this round-trip time; None: direct
    replay: str = ""  # the hosts answered from recordings through this endpoint (bench/replayhost.py)
    proxy_cpu_s: float = 0.0  # the delay proxy's own CPU during the run (neither tool nor hosts)
    bad: dict[str, int] = field(default_factory=dict)  # `probe run`: hosts per outcome other than ok
    why: dict[str, int] = field(default_factory=dict)  # `probe run`: hosts per reason of those outcomes


@dataclass
class Fleet:
    work: Path
    port: int
    user: str
    key: Path
    known_hosts: Path
    addresses: list[str]
    reaper: subprocess.Popen  # bench/subreaper.py, the parent of sshd and of its orphans
    sshd_pid: int
    ssh_opts: list[str] = field(default_factory=list)
    sshd_port: int = 0  # where sshd listens; `port` is where the tools connect (a delay proxy's, or the same)
    proxy: DelayProxy | None = None  # the tools reach sshd through it (latency tables)
    helpers: list[int] = field(default_factory=list)  # bench processes (delay proxies) no tool owns
    replay: Replayer | None = None  # every login answered from recordings (bench/replayhost.py)
    replay_kind: str = ""  # through which endpoint: "sshd" or "asyncssh"

    @property
    def sshd(self) -> subprocess.Popen:
        """What to terminate and wait for to stop sshd (bench/profile_run.py does `fleet.sshd.terminate()`)."""
        return self.reaper

    def stop(self) -> None:
        self.reaper.terminate()  # forwarded to sshd; the wrapper exits once all below it are reaped
        try:
            self.reaper.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.reaper.kill()
            self.reaper.wait()


BENCH_USER = "fpbench"
# The key exchange every OpenSSH-based tool is given: the one Paramiko negotiates with this sshd.
# OpenSSH 9.2's default, sntrup761x25519 (post-quantum), costs ~70 ms of client CPU per login
# here, which would measure the choice of key exchange rather than the tools; the
# `openssh-defaultkex` tool shows that cost separately.
KEX = "curve25519-sha256"


def address(i: int) -> str:
    """Host i of the fleet: a loopback address of its own, so every host is a separate TCP peer."""
    return f"127.0.{i // 250}.{i % 250 + 1}"


ADDRESS0 = address(0)


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


def start_fleet(n: int, work: Path, replay: str = "") -> Fleet:
    """The simulated fleet: sshd running the real probes, or with `replay` answering from recordings
    (bench/replayhost.py): "sshd" through a ForceCommand, "asyncssh" from one bench/replayserver.py
    process in sshd's place (the recordings are made through "sshd" first)."""
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
    replayer = Replayer.prepare(work) if replay else None
    if replayer is not None and replay == "sshd":
        with open(cfg, "a") as f:
            f.write(replayer.sshd_config())
    sshd_bin = shutil.which("sshd") or "/usr/sbin/sshd"
    check = subprocess.run([sshd_bin, "-t", "-f", str(cfg)], capture_output=True, text=True)
    if check.returncode != 0:
        raise SystemExit(f"sshd rejects the bench config: {check.stderr.strip()}")
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory sshd insists on
    # sshd runs under a subreaper of its own, so no process of the hosts' side (an sshd session or
    # a probe that lost its parent) is ever reparented to this process and counted as a tool's CPU.
    # -r (replaying fleets): no re-exec of sshd for every login, which costs the host a quarter of a login's CPU
    server = [sshd_bin, "-D", "-e", *(["-r"] if replay else []), "-f", str(cfg)]
    if replayer is not None and replay == "asyncssh":
        server = [sys.executable, str(Path(__file__).resolve().parent / "replayserver.py"), "--port", str(port),
                  "--host-key", str(work / "host_key"), "--authorized-keys", str(auth),
                  "--recordings", str(replayer.folder / "recordings"), "--shim", str(replayer.folder / "shim")]
    with open(work / "sshd.log", "w") as log:
        reaper = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "subreaper.py"),
                                   *server], stdout=subprocess.PIPE, stderr=log, text=True)
    assert reaper.stdout is not None
    sshd_pid = int(reaper.stdout.readline().strip() or 0)
    if not sshd_pid:
        raise SystemExit(f"sshd did not start under bench/subreaper.py; see {work / 'sshd.log'}")
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
    return Fleet(work, port, user, work / "user_key", kh, addrs, reaper, sshd_pid, opts, sshd_port=port,
                 replay=replayer, replay_kind=replay)


def via_proxy(fleet: Fleet, rtt_ms: float) -> Fleet:
    """The same fleet seen through a delay proxy (bench/delayproxy.c) at `rtt_ms`: the tools connect to
    127.0.x.y:PROXY, the proxy to 127.0.x.y:SSHD, so sshd still sees one server address per host."""
    proxy = DelayProxy.start(fleet.sshd_port, rtt_ms)
    fleet.helpers.append(proxy.proc.pid)
    hostkey = (fleet.work / "host_key.pub").read_text().split()[:2]
    with open(fleet.known_hosts, "a") as kh:
        kh.write("".join(f"[{a}]:{proxy.port} {hostkey[0]} {hostkey[1]}\n" for a in fleet.addresses))
    return dataclasses.replace(fleet, port=proxy.port, proxy=proxy)


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # fields from 3 (state) on: index = field - 3


CLK_TCK = os.sysconf("SC_CLK_TCK")


def host_cpu(fleet: Fleet) -> float:
    """CPU seconds spent so far on the hosts' side of the simulated fleet: the sshd listener itself,
    every session it waited for (with the shells and probes those waited for), and every orphan of
    that tree, which bench/subreaper.py reaped.  Processes still running are not in it yet: call
    `settle` first."""
    sshd = _stat_fields(fleet.sshd_pid)
    wrapper = _stat_fields(fleet.reaper.pid)
    ticks = sum(int(sshd[i]) for i in (11, 12, 13, 14)) + int(wrapper[13]) + int(wrapper[14])
    return ticks / CLK_TCK


def settle(fleet: Fleet, timeout: float = 15.0) -> bool:
    """Wait until the hosts' side is idle again (the wrapper has only sshd below it, sshd no
    sessions), so a run's host CPU is complete and nothing of it spills into the next run."""
    deadline = time.monotonic() + timeout
    while True:
        children, _ = _proc_table()
        busy = [p for p in children.get(fleet.reaper.pid, []) if p != fleet.sshd_pid] + children.get(fleet.sshd_pid, [])
        if not busy:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


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
    ControlPersist ssh masters) stays in the tree and is counted too.  `exclude` prunes the fleet's
    side (bench/subreaper.py and the sshd below it).
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


@dataclass
class Usage:
    wall_s: float
    cpu_s: float  # the tool: its process and everything it started (controller side)
    peak_mb: float  # summed PSS of the tool's tree
    peak_rss_mb: float
    host_cpu_s: float  # the simulated hosts: sshd, its sessions, the probes
    rc: int = 0  # the tool's exit status
    proxy_cpu_s: float = 0.0  # the delay proxy in front of sshd, when there is one


def measured(cmd: list[str] | str, fleet: Fleet, shell: bool = False, env: dict | None = None,
             stdout=None, stderr=None) -> Usage:
    """Wall time until the tool exits; CPU of the tool and everything it started (reaped
    background helpers included); peak memory of that whole tree; and, apart from it, the CPU the
    run cost on the hosts' side (sshd under bench/subreaper.py, never reaped by this process)."""
    exclude = {fleet.reaper.pid, *fleet.helpers}  # the hosts' side and the delay proxies are no tool's
    if not settle(fleet):
        print("warning: the fleet's sshd still has sessions from the previous run", file=sys.stderr)
    host_before = host_cpu(fleet)
    proxy_before = fleet.proxy.cpu_s() if fleet.proxy else 0.0
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
    if not settle(fleet):
        print("warning: sshd sessions outlived the tool by 15 s; their CPU so far is counted", file=sys.stderr)
    proxy_cpu = (fleet.proxy.cpu_s() - proxy_before) if fleet.proxy else 0.0
    return Usage(wall, cpu, peak[0] / 2**20, peak[1] / 2**20, host_cpu(fleet) - host_before, proc.returncode,
                 proxy_cpu)


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


def reached_from_envelopes(envs: list[dict], port: int, probe_names: list[str] | None = None) -> tuple[int, int]:
    """(distinct server addresses the `host` probe ran behind, ok envelopes).

    With `probe_names`, ok is the smallest count of ok envelopes over those probes, so one number
    says "every probe came back ok from this many hosts"; without, every ok envelope counts.
    """
    seen: set[str] = set()
    ok: dict[str, int] = {p: 0 for p in probe_names or ()}
    total = 0
    for env in envs:
        conn = str((env.get("data") or {}).get("ssh_connection") or "").split()
        if len(conn) == 4 and conn[3] == str(port):
            seen.add(conn[2])
        if env.get("status") == "ok":
            total += 1
            if probe_names is not None and env.get("probe") in ok:
                ok[str(env.get("probe"))] += 1
    return len(seen), (min(ok.values()) if probe_names else total)


def envelopes_from_files(paths) -> list[dict]:
    envs: list[dict] = []
    for p in paths:
        envs.extend(_envelopes_in(p.read_text(errors="replace")))
    return envs


@dataclass
class Work:
    """What every tool does on every host: these composed probe scripts, one after another.

    Scripts live in `scripts/<probe>.py` (the same for every host) or, with `per_host`, in
    `scripts/<address>/<probe>.py` (each host its own fixture and so its own arguments).
    """

    name: str  # "host" (the host probe alone) or "audit" (every probe of the audit playbook)
    probe_names: list[str]  # in play order
    scripts: Path
    probe_cli: list[str]  # how `probe run` is told to do the same work
    per_host: bool = False
    host_vars: list[dict] = field(default_factory=list)  # inventory vars of host i (probe_root, probe_args)

    def script(self, probe: str, address: str | None = None) -> Path:
        """Host `address`'s script; without an address, the first host's (for a tool that can only
        send every host the same bytes)."""
        if not self.per_host:
            return self.scripts / f"{probe}.py"
        return self.scripts / (address or ADDRESS0) / f"{probe}.py"

    def shell_script(self, probe: str) -> str:
        """The script as a shell word in a per-host command line whose $1 is the address."""
        if not self.per_host:
            return shlex.quote(str(self.script(probe)))
        return f'{shlex.quote(str(self.scripts))}/"$1"/{probe}.py'

    def ansible_script(self, probe: str) -> str:
        return str(self.script(probe)) if not self.per_host else f"{self.scripts}/{{{{ ansible_host }}}}/{probe}.py"


def _measure(tool: str, work: Work, n: int, forks: int, u: Usage, envs: list[dict], fleet: Fleet) -> Measure:
    reached, ok = reached_from_envelopes(envs, fleet.sshd_port, work.probe_names)
    return Measure(tool, n, forks, u.wall_s, u.cpu_s, u.peak_mb, reached, ok, u.peak_rss_mb, u.host_cpu_s, work.name,
                   u.rc, fleet.proxy.rtt_ms if fleet.proxy else None, fleet.replay_kind, u.proxy_cpu_s)


# `probe run --procs N` for every probe run of this bench (None: the CLI's own choice); set by --procs.
PROBE_PROCS: int | None = None


def run_probe(fleet: Fleet, n: int, forks: int, work: Work, tmp: Path, procs: int | None = None) -> Measure:
    """`probe run`; `procs` (else --procs, else the CLI's own choice) is its --procs."""
    procs = procs if procs is not None else PROBE_PROCS
    inv = tmp / "inv.yml"
    # every host carries its own probe_root/probe_args, as a real inventory would (JSON is YAML)
    def extra(i: int) -> str:
        return (", " + json.dumps(work.host_vars[i])[1:-1]) if work.host_vars else ""

    hosts = "\n".join(f"    b{i:05d}: {{ansible_host: '{a}'{extra(i)}}}" for i, a in enumerate(fleet.addresses[:n]))
    inv.write_text(f"all:\n  vars:\n    ansible_port: {fleet.port}\n    ansible_user: {fleet.user}\n"
                   f"    ansible_ssh_private_key_file: {fleet.key}\n  hosts:\n{hosts}\n")
    results = tmp / "probe-results"
    shutil.rmtree(results, ignore_errors=True)
    out = results / "run"
    cmd = [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "-f", str(forks), "-o", str(out), "-q",
           "--format", "json", "--known-hosts", str(fleet.known_hosts), "--ssh-config", "/dev/null",
           *work.probe_cli, *(["--procs", str(procs)] if procs is not None else [])]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("SSH_AUTH_SOCK", None)  # the same for every tool: the key file, no agent
    with open(tmp / "probe.out", "w") as so, open(tmp / "probe.err", "w") as se:
        u = measured(cmd, fleet, env=env, stdout=so, stderr=se)
    envs = envelopes_from_files(p for p in (out / "raw").glob("*/*.json") if p.name != "_host.json") \
        if (out / "raw").is_dir() else []
    m = _measure(ONE_PROCESS if procs == 1 and PROBE_PROCS != 1 else "probe run", work, n, forks, u, envs, fleet)
    for meta in (out / "raw").glob("*/_host.json") if (out / "raw").is_dir() else ():
        for summary in json.loads(meta.read_text()).get("probes", {}).values():
            if summary.get("outcome") != "ok":
                m.bad[summary["outcome"]] = m.bad.get(summary["outcome"], 0) + 1
                # the reason without its host ("b00012 (127.0.0.13:2222): connection refused ...")
                why = str(summary.get("reason") or "?").split("): ", 1)[-1][:160]
                m.why[why] = m.why.get(why, 0) + 1
    return m


def plain_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SSH_AUTH_SOCK", None)
    return env


def _ssh_fanout_cmd(fleet: Fleet, n: int, forks: int, body: str, tmp: Path, default_kex: bool = False) -> str:
    """xargs hands each address to one `sh -c BODY sh ADDRESS` (`forks` at a time); BODY runs
    `$SSH "$1" ...`.  sh only sets up the redirections and the loop over probes."""
    lst = tmp / "addrs"
    lst.write_text("\n".join(fleet.addresses[:n]) + "\n")
    opts = fleet.ssh_opts[:-2] if default_kex else fleet.ssh_opts
    ssh = shlex.join(["ssh", *opts, "-p", str(fleet.port), "-l", fleet.user])
    return f"xargs -P {forks} -n 1 sh -c {shlex.quote(body.replace('$SSH', ssh))} sh < {shlex.quote(str(lst))}"


def run_openssh(fleet: Fleet, n: int, forks: int, work: Work, tmp: Path, default_kex: bool = False,
                mux: bool = False) -> Measure:
    outdir = tmp / "ssh-out"
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir()
    ssh = "$SSH"
    if mux:
        # one login per host: the first probe's ssh becomes a ControlPersist master that the next
        # probes of that host multiplex over; `-O exit` ends it after the host's last probe
        cp = tmp / "cp-mux"
        cp.mkdir(exist_ok=True)
        ssh = f"$SSH -o ControlMaster=auto -o ControlPersist=60 -o ControlPath={shlex.quote(str(cp))}/%C"
    # per host, the work's probes one after another, each `ssh ... python3 -` fed its script
    body = "".join(f'{ssh} "$1" python3 - < {work.shell_script(probe)} > {shlex.quote(str(outdir))}/"$1".{probe}.json '
                   "2>/dev/null; " for probe in work.probe_names)
    if mux:
        body += f'{ssh} -O exit "$1" 2>/dev/null'
    u = measured(_ssh_fanout_cmd(fleet, n, forks, body, tmp, default_kex), fleet, shell=True, env=plain_env())
    tool = "openssh fan-out" + (" (default kex)" if default_kex else "") + (" (one login per host)" if mux else "")
    return _measure(tool, work, n, forks, u, envelopes_from_files(outdir.glob("*.json")), fleet)


def pssh_exe() -> str | None:
    return shutil.which("parallel-ssh") or shutil.which("pssh")


def run_pssh(fleet: Fleet, n: int, forks: int, work: Work, tmp: Path) -> Measure | None:
    exe = pssh_exe()
    if not exe:
        return None
    outdir = tmp / "pssh-out"
    shutil.rmtree(outdir, ignore_errors=True)
    lst = tmp / "pssh-hosts"
    lst.write_text("".join(f"{fleet.user}@{a}:{fleet.port}\n" for a in fleet.addresses[:n]))
    # one parallel-ssh call per probe, in play order (pssh has no notion of a per-host sequence); it
    # sends every host the same stdin, so per-host fixtures give it the first host's scripts
    calls = [shlex.join([exe, "-h", str(lst), "-p", str(forks), "-t", "120", "-o", str(outdir / probe), "-I",
                         "-x", shlex.join(fleet.ssh_opts), "python3", "-"]) + f" < {shlex.quote(str(work.script(probe)))}"
             for probe in work.probe_names]
    u = measured("; ".join(calls), fleet, shell=True, env=plain_env())
    envs = envelopes_from_files(p for p in outdir.glob("*/*") if p.is_file()) if outdir.is_dir() else []
    return _measure("pssh", work, n, forks, u, envs, fleet)


def ansible_exe(program: str = "ansible") -> str | None:
    base = os.environ.get("BENCH_ANSIBLE")
    if base:
        return str(Path(base).with_name(program)) if program != "ansible" else base
    beside = Path(sys.executable).parent / program  # the venv's own, which a plain PATH may not name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(program)


def _raw_python(script: Path) -> str:
    """`raw` runs one command line, no file transfer: the probe goes inline."""
    payload = base64.b64encode(script.read_bytes()).decode()
    return f"python3 -c 'import base64;exec(base64.b64decode(\"{payload}\"))'"


def run_ansible(fleet: Fleet, n: int, forks: int, work: Work, tmp: Path, module: str,
                strategy: str = "linear") -> Measure | None:
    single = len(work.probe_names) == 1 and not work.per_host
    ansible = ansible_exe("ansible" if single else "ansible-playbook")
    if not ansible or not os.access(ansible, os.X_OK):
        return None
    inv = tmp / "ansible-inv.ini"
    inv.write_text("[fleet]\n" + "".join(f"b{i:05d} ansible_host={a}\n" for i, a in enumerate(fleet.addresses[:n])))
    cp = tmp / "cp"
    cp.mkdir(exist_ok=True)
    (tmp / "ansible-home" / ".ansible").mkdir(parents=True, exist_ok=True)
    cfg = tmp / "ansible.cfg"  # an empty config: no ansible.cfg of this machine or user applies
    cfg.write_text("[defaults]\n")
    # Ansible's own default ssh_args (compression, a ControlPersist master per host, which its
    # script module reuses for mkdir/put/run/cleanup and for the next task) plus the options every tool gets.
    ssh_args = "-C -o ControlMaster=auto -o ControlPersist=60s " + shlex.join(
        [o for o in fleet.ssh_opts if o not in ("-i", str(fleet.key))])
    env = dict(plain_env(), ANSIBLE_STDOUT_CALLBACK="minimal", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_SSH_ARGS=ssh_args,
               ANSIBLE_PRIVATE_KEY_FILE=str(fleet.key), ANSIBLE_REMOTE_USER=fleet.user,
               ANSIBLE_REMOTE_PORT=str(fleet.port), ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3",
               ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"), ANSIBLE_SSH_CONTROL_PATH_DIR=str(cp),
               ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_CONFIG=str(cfg),
               HOME=str(tmp / "ansible-home"))
    if single:  # the ad-hoc command the issue names: `ansible all -m script` / `-m raw`
        script = work.script(work.probe_names[0])
        args = ["-m", "script", "-a", f"{script} executable=python3"] if module == "script" else ["-m", "raw", "-a",
                                                                                                   _raw_python(script)]
        cmd = [ansible, "fleet", "-i", str(inv), "-f", str(forks), *args]
    else:  # a playbook with one task per probe, in play order
        # `raw` carries the probe inline on its command line, the same for every host (the first
        # host's script); `script` copies each host's own file
        tasks = [{"name": probe, module: f"{work.ansible_script(probe)} executable=python3" if module == "script"
                  else _raw_python(work.script(probe))} for probe in work.probe_names]
        book = tmp / f"ansible-{work.name}-{module}.yml"
        book.write_text(json.dumps([{"hosts": "fleet", "gather_facts": False, "strategy": strategy,
                                     "tasks": tasks}], indent=1))  # JSON is YAML
        cmd = [ansible, "-i", str(inv), "-f", str(forks), str(book)]
    out = tmp / f"ansible-{module}.json"
    with open(out, "w") as so, open(tmp / f"ansible-{module}.err", "w") as se:
        u = measured(cmd, fleet, env=env, stdout=so, stderr=se)
    # ansible-core's built-in `minimal` callback prints each host's stdout verbatim after
    # "host | CHANGED | rc=0 >>", or the result as JSON with the output in "stdout" (the json
    # callback lives in the ansible.posix collection)
    envs = _envelopes_in(out.read_text(errors="replace"))
    tool = f"ansible -m {module}" + (f" ({strategy})" if strategy != "linear" else "")
    return _measure(tool, work, n, forks, u, envs, fleet)


def _median(ms: list[Measure], attr: str) -> float:
    return statistics.median(getattr(m, attr) for m in ms)


def summarize(rows: list[Measure], work: str = "host") -> str:
    by: dict[tuple[int, int, str], list[Measure]] = {}
    for r in rows:
        if r.work == work and r.rtt_ms is None:  # the latency table's rows are summarize_latency's
            by.setdefault((r.n, r.forks, r.tool), []).append(r)
    if not by:
        return "(not run)"
    ok_label = "ok envelopes (min)" if work == "host" else "ok envelopes of the scarcest probe (min)"
    refs = [FLOOR, *([MUX_FLOOR] if work != "host" else []), "ansible -m script"]
    ref_heads = {FLOOR: "× OpenSSH floor", MUX_FLOOR: "× one-login floor", "ansible -m script": "× ansible -m script"}
    lines = ["| hosts | forks | tool | runs | wall s, median (min–max) | " + " | ".join(ref_heads[r] for r in refs) + " | "
             "controller CPU s | host-side CPU s | CPU ms per host: controller / host side | "
             f"peak MB, process tree PSS (RSS sum) | distinct hosts reached (min) | {ok_label} |",
             "|---:|---:|---|---:|---|" + "---:|" * len(refs) + "---:|---:|---:|---:|---:|---:|"]
    for (n, forks, tool), ms in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1], TOOL_ORDER.get(kv[0][2], 9))):
        walls = [m.wall_s for m in ms]
        med = statistics.median(walls)
        ratios = []
        for ref in refs:
            base = by.get((n, forks, ref))
            ratios.append(f"{med / _median(base, 'wall_s'):.2f}" if base else "–")
        cpu, host = _median(ms, "cpu_s"), _median(ms, "host_cpu_s")
        lines.append(f"| {n} | {forks} | {tool} | {len(ms)} | {med:.2f} ({min(walls):.2f}–{max(walls):.2f}) | "
                     f"{' | '.join(ratios)} | {cpu:.2f} | {host:.2f} | {cpu / n * 1000:.0f} / {host / n * 1000:.0f} | "
                     f"{max(m.peak_mb for m in ms):.0f} ({max(m.peak_rss_mb for m in ms):.0f}) | "
                     f"{min(m.reached for m in ms)} | {min(m.ok for m in ms)} |")
    return "\n".join(lines) + host_floor_note(by)


def host_floor_note(by: dict[tuple[int, int, str], list[Measure]]) -> str:
    """What the hosts' side alone takes of this machine's cores in the OpenSSH floor's runs: a
    lower bound on any tool's wall time here, since the simulated hosts share the cores."""
    cores = os.cpu_count() or 1
    out = []
    for (n, forks, tool), ms in sorted(by.items()):
        if tool == FLOOR:
            host = _median(ms, "host_cpu_s")
            out.append(f"{n} hosts (forks {forks}): {host:.2f} s host-side CPU ÷ {cores} cores = {host / cores:.2f} s "
                       f"(floor's wall {_median(ms, 'wall_s'):.2f} s)")
    return ("\n\nHost side alone in the OpenSSH floor runs: " + "; ".join(out) + ".") if out else ""


ONE_PROCESS = "probe run --procs 1"
TOOL_ORDER = {"openssh fan-out": 0, "openssh fan-out (one login per host)": 1, "probe run": 2, ONE_PROCESS: 2.5, "pssh": 3,
              "ansible -m raw": 4, "ansible -m script": 5, "ansible -m script (free)": 6,
              "openssh fan-out (default kex)": 7}
FLOOR = "openssh fan-out"
MUX_FLOOR = "openssh fan-out (one login per host)"


def controller_one(n: int) -> dict:
    """Normalize, check and write fleet.json (and its index) for n hosts: the demo recordings
    repeated with identities of their own (bench/controller_bench.py), no transport; the way
    `probe run` judges, with its worker processes and spool."""
    sys.path.insert(0, str(REPO / "bench"))
    from controller_bench import make_inputs

    from orchestrator.api.session import judge
    from orchestrator.store.fleet_file import write_fleet
    from orchestrator.store.runmeta import RunMeta
    from orchestrator.verdict import parallel as fleet_workers

    inputs, expect = make_inputs(n)
    with tempfile.TemporaryDirectory() as td:
        t0, c0 = time.monotonic(), time.process_time()
        fleet = judge(RunMeta(id=f"bench-{n}"), inputs, expect, spool=Path(td))
        p = write_fleet(Path(td) / "fleet.json", fleet.to_document())
        dt, cpu = time.monotonic() - t0, time.process_time() - c0
        size = p.stat().st_size / 2**20
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"n": n, "seconds": dt, "cpu_s": cpu, "workers": fleet_workers.worker_count(n),
            "workers_cpu_s": kids.ru_utime + kids.ru_stime, "fleet_mb": size,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_maxrss_mb": kids.ru_maxrss / 1024, "findings": len(fleet.findings)}


def controller_only(sizes: list[int], timeout: float) -> str:
    """Each size in a process of its own, so peak RSS is that size's alone; bounded by `timeout`."""
    if not sizes:
        return "(not run: --controller-sizes was empty)"
    lines = ["| hosts | normalize + check + write fleet.json, s | per 1,000 hosts, s | worker processes | "
             "CPU s: controller / its workers | fleet.json MB | peak RSS MB: controller / largest worker | findings |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    per_k = []
    for n in sizes:
        try:
            r = subprocess.run([sys.executable, __file__, "--controller-one", str(n)], capture_output=True,
                               text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=str(REPO)))
        except subprocess.TimeoutExpired:
            lines.append(f"| {n} | did not finish within {timeout:.0f} s | – | – | – | – | – | – |")
            continue
        if r.returncode != 0:
            lines.append(f"| {n} | failed: {(r.stderr.strip().splitlines() or ['?'])[-1][:120]} | – | – | – | – | – | – |")
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        per_k.append(d["seconds"] / n * 1000)
        lines.append(f"| {n} | {d['seconds']:.2f} | {per_k[-1]:.2f} | {d['workers']} | {d['cpu_s']:.1f} / "
                     f"{d['workers_cpu_s']:.1f} | {d['fleet_mb']:.1f} | {d['maxrss_mb']:.0f} / {d['worker_maxrss_mb']:.0f} "
                     f"| {d['findings']} |")
    if len(per_k) >= 2:
        lines.append(f"\nPer-host cost grows {per_k[-1] / per_k[0]:.2f}× from the smallest to the largest size "
                     "(1.00 = linear).  Hosts: the 25 demo recordings repeated with identities of their own "
                     "(hostname, serials, GPU UUIDs); fleets of 500 hosts and more are judged in one worker process "
                     "per CPU (orchestrator/verdict/parallel.py).")
    return "\n".join(lines)


def after_controller(a: argparse.Namespace) -> str:
    """The sections that follow the controller table: history at scale and bytes per host."""
    sys.path.insert(0, str(REPO / "bench"))
    out = ""
    if a.history_hosts:
        from history_bench import section as history_section
        out += ("## History at scale: `probe diff`, `show` and `report` of stored runs\n\n"
                + history_section(a.history_hosts, changed=5, keep=None, timeout=a.history_timeout) + "\n\n")
        print("history table done", flush=True)
    if a.end_latency_hosts:
        from end_latency import section as end_latency_section
        out += ("## `probe run`: from the last host's answer to its end\n\n"
                + end_latency_section(a.end_latency_hosts, forks=32, probe_ms=50.0, repeats=a.end_latency_repeats)
                + "\n\n")
        print("end latency done", flush=True)
    if a.record_sizes:
        from record_size import main as record_sizes
        out += "## fleet.json bytes per host, by playbook (schema 1 and 2)\n\n" + record_sizes([]) + "\n"
    return out


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
    "probe": lambda f, n, k, w, t: run_probe(f, n, k, w, t),
    # before/after of the fan-out over one process per core, in one invocation; not a peer
    "probe-1proc": lambda f, n, k, w, t: run_probe(f, n, k, w, t, procs=1),
    "openssh": lambda f, n, k, w, t: run_openssh(f, n, k, w, t),
    "openssh-defaultkex": lambda f, n, k, w, t: run_openssh(f, n, k, w, t, default_kex=True),
    "openssh-mux": lambda f, n, k, w, t: run_openssh(f, n, k, w, t, mux=True),
    "pssh": lambda f, n, k, w, t: run_pssh(f, n, k, w, t),
    "ansible-script": lambda f, n, k, w, t: run_ansible(f, n, k, w, t, "script"),
    "ansible-script-free": lambda f, n, k, w, t: run_ansible(f, n, k, w, t, "script", strategy="free"),
    "ansible-raw": lambda f, n, k, w, t: run_ansible(f, n, k, w, t, "raw"),
}


def plan(sizes: list[int], tools: list[str], repeats: int, forks: int, limits: dict[str, int],
         sweep_forks: list[int], sweep_n: int, sweep_tools: list[str], sweep_repeats: int,
         audit_sizes: list[int] | None = None, audit_tools: list[str] | None = None,
         ) -> list[tuple[int, int, int, str, str]]:
    """(n, forks, repeat, tool, work) in run order: per size and repeat every tool once, the starting
    tool rotated between repeats, so slow drift of the shared machine hits every tool alike."""
    out: list[tuple[int, int, int, str, str]] = []
    for work, ns, ts in (("host", sizes, tools), ("audit", audit_sizes or [], audit_tools or [])):
        for n in ns:
            todo = [t for t in ts if n <= limits.get(t, n)]
            for rep in range(repeats):
                k = rep % len(todo) if todo else 0
                out.extend((n, forks, rep, t, work) for t in todo[k:] + todo[:k])
    for rep in range(sweep_repeats):
        for fk in sweep_forks:
            k = rep % len(sweep_tools)
            out.extend((sweep_n, fk, rep, t, "host") for t in sweep_tools[k:] + sweep_tools[:k])
    return out


# What the demo recorder passes to the p2p probe against a fake libcuda: small buffers, since the
# fake's figures come from its fixture, not from the copy size (only used if the playbook has p2p).
P2P_FAKE_ARGS = {"size_mb": 2, "repeats": 1, "loops": 2, "latency_loops": 4}
PROBE_TIMEOUT_S = 60.0  # `probe run`'s default per-probe timeout; scripts get it less its 2 s margin


def host_work(tmp: Path) -> Work:
    sdir = tmp / "host-scripts"
    sdir.mkdir()
    sdir.chmod(0o755)
    script = sdir / "host.py"
    script.write_bytes(probes.build_script("host", {}, PROBE_TIMEOUT_S - 2))
    script.chmod(0o644)
    return Work("host", ["host"], sdir, ["--probe", "host"])


def _link_tree(src: Path, dst: Path) -> None:
    """dst gets src's tree as hard links (symlinks recreated as symlinks), keeping what dst has."""
    for d, dirs, files in os.walk(src):
        out = dst / os.path.relpath(d, src)
        out.mkdir(parents=True, exist_ok=True)
        for name in dirs + files:
            s, t = os.path.join(d, name), out / name
            if os.path.lexists(t):
                continue
            if os.path.islink(s):
                os.symlink(os.readlink(s), t)
            elif name in files:
                os.link(s, t)


def audit_work(tmp: Path, machine: str, playbook: str, n: int) -> Work:
    """n simulated hosts of one machine type, each with an identity of its own, as a real fleet
    has: the sysfs/proc tree is built once and hard-linked into every host's root, the host files
    (hostname = inventory name, DMI serials) and the fake libnvidia-ml (GPU UUIDs and serials
    seeded by the name) are per host.  Without that, every host would be a clone and `probe run`
    would judge N×16 duplicate-identity findings that no real fleet has.  The playbook's probes
    are composed once per host with the arguments `probe run` derives from probe_root/probe_args,
    so every tool ships the same scripts."""
    from orchestrator.api.playbook import find_playbook, load_playbook
    from orchestrator.simulate.fake_cuda import build_fake_cuda
    from orchestrator.simulate.fake_cuda import machines as cuda_machines
    from orchestrator.simulate.fake_nvml import build_fake_nvml
    from orchestrator.simulate.hostfiles import build_host_files
    from orchestrator.simulate.sysfs import build_machine

    t0 = time.monotonic()
    fx = tmp / "fixture"
    base = fx / "base"
    build_machine(machine, base)
    cuda = None
    if machine in cuda_machines() or machine.split("--")[0] in cuda_machines():
        cuda = str(build_fake_cuda(machine, fx / "libs"))
    book = load_playbook(find_playbook(playbook))
    steps, seen = [], set()
    for play in book.plays:
        for step in play.probes:
            if step.name not in seen:
                seen.add(step.name)
                steps.append(step)
    sdir = tmp / "audit-scripts"
    host_vars = []
    for i in range(n):
        addr, name = address(i), f"b{i:05d}"
        root = fx / addr / "root"
        build_host_files(machine, root, name)
        _link_tree(base, root)
        nvml = str(build_fake_nvml(machine, fx / "libs", seed=name))
        per_probe: dict[str, dict] = {"nvml": {"lib": nvml}, "nvlink": {"lib": nvml}}
        if cuda:
            per_probe["p2p"] = {"lib": cuda, "nvml_lib": cuda, **P2P_FAKE_ARGS}
        host_vars.append({"probe_root": str(root), "probe_args": {p: a for p, a in per_probe.items() if p in seen}})
        (sdir / addr).mkdir(parents=True)
        for step in steps:
            args = {**step.args, "root": str(root), **per_probe.get(step.name, {})}
            (sdir / addr / f"{step.name}.py").write_bytes(
                probes.build_script(step.name, args, (step.timeout or PROBE_TIMEOUT_S) - 2))
    print(f"audit fixtures: {n} × {machine} built in {time.monotonic() - t0:.0f} s", flush=True)
    return Work("audit", [s.name for s in steps], sdir, ["-p", playbook], per_host=True, host_vars=host_vars)


BUSY = "import time;t=time.process_time();[0 for _ in iter(lambda: time.process_time()-t<{s}, False)]"


def selfcheck(fleet: Fleet, tmp: Path, n: int = 10, busy_s: float = 0.2) -> tuple[bool, str]:
    """Prove where CPU is booked: the same OpenSSH fan-out to n hosts running `true`, `python3 -c
    pass` and a python3 that burns busy_s of CPU (process time, so contention does not change it).
    The extra n * busy_s seconds must appear on the host side, not in the controller.
    Returns (passed, a markdown table and verdict)."""
    variants = [("true", "true"), ("python3 -c pass", "python3 -c pass"),
                (f"python3 busy {busy_s} s", "python3 -c " + shlex.quote(BUSY.format(s=busy_s)))]
    got: dict[str, Usage] = {}
    lines = [f"| remote command ({n} hosts, forks {n}, OpenSSH fan-out) | exit | wall s | controller CPU s | "
             "host-side CPU s | per host ms: controller / host side |", "|---|---:|---:|---:|---:|---:|"]
    for label, remote in variants:
        body = f'$SSH "$1" {shlex.quote(remote)} >/dev/null 2>&1'
        u = got[label] = measured(_ssh_fanout_cmd(fleet, n, n, body, tmp), fleet, shell=True, env=plain_env())
        lines.append(f"| `{label}` | {u.rc} | {u.wall_s:.2f} | {u.cpu_s:.2f} | {u.host_cpu_s:.2f} | "
                     f"{u.cpu_s / n * 1000:.0f} / {u.host_cpu_s / n * 1000:.0f} |")
    base, busy = got["python3 -c pass"], got[variants[2][0]]
    d_host, d_ctl, want = busy.host_cpu_s - base.host_cpu_s, busy.cpu_s - base.cpu_s, n * busy_s
    problems = [f"`{label}` exited {u.rc}: not every host ran it" for label, u in got.items() if u.rc != 0]
    if not 0.8 * want <= d_host <= 1.5 * want + 0.2:
        problems.append(f"host side grew by {d_host:.2f} s, expected about {want:.2f} s")
    if abs(d_ctl) > 0.25 * want:
        problems.append(f"controller CPU changed by {d_ctl:+.2f} s: host work leaks into the controller")
    lines.append(f"\nBusy minus `python3 -c pass`: host side {d_host:+.2f} s, controller {d_ctl:+.2f} s "
                 f"(expected about +{want:.2f} s and 0): " + ("FAILED: " + "; ".join(problems) if problems else "passed."))
    return not problems, "\n".join(lines)


# -- latency: the fleet behind bench/delayproxy.c ---------------------------------------------------

LATENCY_PEERS = ("openssh fan-out", "pssh", "ansible -m script", "ansible -m raw")


def plan_latency(rtts: list[float], sizes: list[int], forks_list: list[int], tools: list[str], repeats: int,
                 limits: dict[str, int]) -> list[tuple[float, int, int, int, str]]:
    """(rtt_ms, n, forks, repeat, tool) in run order: per (rtt, n, forks) and repeat every tool once, the
    starting tool rotated, as `plan` does."""
    out: list[tuple[float, int, int, int, str]] = []
    cell = 0
    for rep in range(repeats):
        for rtt in rtts:
            for n in sizes:
                for fk in forks_list:
                    todo = [t for t in tools if n <= limits.get(t, n)]
                    k = (rep + cell) % len(todo) if todo else 0
                    cell += 1
                    out.extend((rtt, n, fk, rep, t) for t in todo[k:] + todo[:k])
    return out


def _echo_server() -> tuple[socket.socket, int]:
    """A TCP echo server on 127.0.0.1 in a daemon thread: what the RTT check pings through the proxy."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def loop() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return srv, srv.getsockname()[1]


def measured_rtt(rtt_ms: float, pings: int = 20) -> float:
    """Median ping-pong time (ms) of one byte through a fresh delay proxy at `rtt_ms` to an echo server."""
    srv, port = _echo_server()
    proxy = DelayProxy.start(port, rtt_ms, bind="127.0.0.1")
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.sendall(b".")
            c.recv(1)  # the first one also waits for the proxy's upstream connect
            times = []
            for _ in range(pings):
                t0 = time.monotonic()
                c.sendall(b".")
                if not c.recv(1):
                    raise RuntimeError("the echo server closed the connection")
                times.append((time.monotonic() - t0) * 1000)
    finally:
        proxy.stop()
        srv.close()
    return statistics.median(times)


def login_ms(fleet: Fleet, logins: int = 10) -> float:
    """Median wall time (ms) of one `ssh HOST true` login, one after another (no contention)."""
    ssh = ["ssh", *fleet.ssh_opts, "-p", str(fleet.port), "-l", fleet.user]
    times = []
    for i in range(logins):
        t0 = time.monotonic()
        subprocess.run([*ssh, fleet.addresses[i % len(fleet.addresses)], "true"], env=plain_env(),
                       stdin=subprocess.DEVNULL, capture_output=True, check=True, timeout=60)
        times.append((time.monotonic() - t0) * 1000)
    return statistics.median(times)


def latency_selfcheck(fleet: Fleet, views: dict[float, Fleet], work: Work, tmp: Path, n: int, forks: int,
                      repeats: int = 3) -> tuple[bool, str, dict[float, float]]:
    """Prove the latency tables measure the tools, not the proxy: the RTT a ping-pong sees through the
    proxy is the configured one; the OpenSSH fan-out through the proxy at 0 ms is as fast as direct, and
    the proxy's CPU is small; a login through the proxy costs the RTTs an SSH login has, nothing more.
    Also returns the login times, ms by RTT (the saturation note's one-host wall)."""
    problems: list[str] = []
    lines = ["| configured RTT ms | ping-pong through the proxy, ms (median of 20) | `ssh host true`, ms "
             "(median of 10) | login minus direct, in RTTs |", "|---:|---:|---:|---:|"]
    direct_login = login_ms(fleet)
    logins: dict[float, float] = {}
    lines.append(f"| direct (no proxy) | – | {direct_login:.0f} | – |")
    for rtt, view in sorted(views.items()):
        ping = measured_rtt(rtt)
        login = logins[rtt] = login_ms(view)
        per = f"{(login - direct_login) / rtt:.1f}" if rtt else "–"
        lines.append(f"| {rtt:g} | {ping:.1f} | {login:.0f} | {per} |")
        if not (rtt - 0.5 <= ping <= rtt * 1.1 + 2):
            problems.append(f"ping-pong at {rtt:g} ms took {ping:.1f} ms")
    zero = views.get(0.0)
    if zero is not None:
        direct, proxied = [], []
        for _ in range(repeats):
            direct.append(run_openssh(fleet, n, forks, work, tmp))
            proxied.append(run_openssh(zero, n, forks, work, tmp))
        d, p = _median(direct, "wall_s"), _median(proxied, "wall_s")
        pcpu = _median(proxied, "proxy_cpu_s")
        lines.append(f"\nOpenSSH fan-out of the `host` probe, {n} hosts, forks {forks}, {repeats} runs each, "
                     f"alternating: direct {d:.2f} s (controller {_median(direct, 'cpu_s'):.2f} s, host side "
                     f"{_median(direct, 'host_cpu_s'):.2f} s), through the proxy at 0 ms {p:.2f} s (controller "
                     f"{_median(proxied, 'cpu_s'):.2f} s, host side {_median(proxied, 'host_cpu_s'):.2f} s, proxy "
                     f"{pcpu:.2f} s = {pcpu / n * 1000:.1f} ms per connection): {p / d:.2f}×.")
        if p > 1.10 * d + 0.2:
            problems.append(f"the proxy at 0 ms makes the fan-out {p / d:.2f}× slower than direct")
        if min(m.reached for m in direct + proxied) < n:
            problems.append("not every host was reached in the direct/proxy comparison")
    verdict = "passed." if not problems else "FAILED: " + "; ".join(problems)
    return not problems, "\n".join(lines) + f"\n\nLatency self-check: {verdict}", logins


# -- the replaying endpoint (issue 51 item 4): the simulated hosts answer from recordings --------------

REPLAY_HEADING = "## Fan-out through a replaying endpoint (issue 51 item 4)"
ENDPOINTS = ("sshd", "asyncssh")


def record_answers(fleet_dir: Path, work: Work, tmp: Path, tools: list[str]) -> int:
    """Run each tool once on 3 hosts of a fleet whose sshd records what the real probe prints for every
    script it is sent (bench/replayhost.c); the recordings every replaying endpoint answers from."""
    rec = start_fleet(3, fleet_dir, replay="sshd")
    try:
        for tool in tools:
            RUNNERS[tool](rec, 3, 3, work, tmp)
    finally:
        rec.stop()
    assert rec.replay is not None
    return rec.replay.count()


def replay_mismatches(fleet: Fleet, work: Work, envs: list[dict]) -> list[str]:
    """What differs between `envs` (the OpenSSH fan-out's, through a replaying fleet) and the real probe's
    recording of the same script with each login's $SSH_CONNECTION put in; [] when every one matches."""
    assert fleet.replay is not None
    rec = fleet.replay.recording_for([], work.script("host").read_bytes())
    if rec is None or len(rec.envelopes()) != 1:
        return ["no recording of the OpenSSH fan-out's script"]
    want = rec.envelopes()[0]
    if not uses_placeholder(want):
        return ["the recording does not carry the login's $SSH_CONNECTION as a placeholder"]
    bad = []
    for env in envs:
        conn = str((env.get("data") or {}).get("ssh_connection"))
        if env != replayed(want, conn):
            bad.append(f"envelope from {conn} differs from the recording")
    return bad


@dataclass(frozen=True)
class LoginCost:
    endpoint: str  # "real probe", "sshd", "asyncssh"
    ms_per_login: float  # host-side CPU ÷ logins, median of the runs
    client_ms: float  # the OpenSSH fan-out's own CPU ÷ hosts (the same client work for every endpoint)
    problems: tuple[str, ...]


def login_cost(kind: str, fleet_dir: Path, work: Work, tmp: Path, n: int, runs: int = 2) -> LoginCost:
    """Host-side CPU per login of one endpoint, through the OpenSSH fan-out of the `host` probe."""
    fleet = start_fleet(n, fleet_dir, replay=kind)
    try:
        ms, problems = [], []
        for _ in range(runs):
            m = run_openssh(fleet, n, 8, work, tmp)
            ms.append(m)
            if m.reached != n or m.ok != n:
                problems.append(f"{kind or 'real'}: reached {m.reached}, ok {m.ok} of {n}")
            if fleet.replay is not None:
                problems += replay_mismatches(fleet, work, envelopes_from_files((tmp / "ssh-out").glob("*.json")))
    finally:
        fleet.stop()
    per = statistics.median(m.host_cpu_s / n * 1000 for m in ms)
    client = statistics.median(m.cpu_s / n * 1000 for m in ms)
    return LoginCost(kind or "real probe", per, client, tuple(dict.fromkeys(problems)))


def endpoint_check(costs: list[LoginCost], used: str, n: int) -> str:
    lines = [f"Host-side CPU per login, OpenSSH fan-out of the `host` probe, {n} hosts, forks 8, median of 2 runs "
             "(the endpoint's envelopes compared with the real probe's recording, each login's $SSH_CONNECTION "
             "put in):", "",
             "| endpoint | host-side CPU ms a login | OpenSSH client CPU ms a host | envelopes equal to the recording |",
             "|---|---:|---:|---|"]
    for c in costs:
        eq = "–" if c.endpoint == "real probe" else ("yes" if not c.problems else "NO: " + "; ".join(c.problems)[:200])
        lines.append(f"| {c.endpoint}{' (used below)' if c.endpoint == used else ''} | {c.ms_per_login:.1f} | "
                     f"{c.client_ms:.1f} | {eq} |")
    return "\n".join(lines)


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


LATENCY_HEADING = "## Fan-out under latency: the `host` probe through a delay proxy"


def latency_section(rows: list[Measure], check: str, logins: dict[float, float], elapsed_s: float | None = None,
                    raw: str = "", heading: str = LATENCY_HEADING, preface: str = "") -> str:
    """The latency section; with `elapsed_s`, as a run of the latency table alone writes it (its command,
    date and raw rows named, since the rest of RESULTS.md comes from other runs)."""
    own = ""
    if elapsed_s is not None:
        own = (f"Regenerated alone by `python bench/fleet_bench.py {shlex.join(sys.argv[1:])}` on "
               f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({elapsed_s / 60:.1f} min; raw rows: `{raw}`).\n\n")
    return (f"{heading}\n\n{own}{preface}{LATENCY_METHOD}\n\n### Latency self-check (before the table)\n\n{check}\n\n"
            + summarize_latency(rows) + "\n\n" + saturation_note(rows, logins))


def replace_section(path: Path, heading: str, section: str) -> None:
    """`path` with its `heading` section (up to the next `## `) replaced by `section`, or `section` appended."""
    doc = path.read_text() if path.is_file() else ""
    at = doc.find(heading + "\n")
    if at < 0:
        path.write_text(doc.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n")
        return
    nxt = doc.find("\n## ", at + len(heading))
    rest = doc[nxt + 1:] if nxt >= 0 else ""
    path.write_text(doc[:at] + section.rstrip("\n") + "\n\n" + rest)


def saturation_note(rows: list[Measure], logins: dict[float, float]) -> str:
    """What bounds the table on this machine: the simulated hosts' CPU per host (the OpenSSH fan-out's
    runs: the same work for every tool) against what one host takes through the proxy with nothing
    else running (its `ssh host true` login from the self-check, a lower bound of a host's wall).
    Below forks = that wall × cores ÷ CPU per host the link bounds a run; above it, the CPU."""
    floor = [r for r in rows if r.rtt_ms is not None and r.tool == "openssh fan-out" and r.n]
    if not floor:
        return ""
    cores = os.cpu_count() or 1
    per_host_s = statistics.median(r.host_cpu_s / r.n for r in floor)
    n = floor[0].n
    what = ("the endpoint's login and its recorded answer" if any(r.replay for r in floor)
            else "sshd's login and `python3` with the `host` probe")
    lines = [f"What bounds these rows: the simulated hosts cost {per_host_s * 1000:.0f} ms of CPU per host ({what}; "
             f"median of the OpenSSH fan-out's runs), on the {cores} "
             f"cores the tools also run on, so {n} hosts take at least {per_host_s * n / cores:.1f} s of wall "
             "before any tool's own CPU counts.  The link bounds a run only while forks × CPU per host < one "
             "host's wall × cores:"]
    for rtt in sorted(logins.keys() & {m.rtt_ms for m in floor}):
        wall_s = logins[rtt] / 1000
        lines.append(f"- {rtt:g} ms: one login through the proxy takes {logins[rtt]:.0f} ms with nothing else "
                     f"running, so the hosts' CPU saturates the cores from about {wall_s * cores / per_host_s:.0f} "
                     "forks on.")
    return "\n".join(lines)


# A row whose simulated hosts (host side + proxy) keep more than this share of the cores busy measures the
# machine, not the tool: it is marked machine-bound and its ratio is not counted (issue 51 item 4).
MACHINE_BOUND_PCT = 50.0


def host_share_pct(ms: list[Measure], cores: int) -> float:
    """(host-side CPU + proxy CPU) ÷ cores ÷ wall of a row's runs (medians), in % of the cores."""
    med = statistics.median(m.wall_s for m in ms)
    return (_median(ms, "host_cpu_s") + _median(ms, "proxy_cpu_s")) / cores / med * 100 if med > 0 else 100.0


def latency_cells(rows: list[Measure]) -> dict[tuple[float, int, int, str], list[Measure]]:
    by: dict[tuple[float, int, int, str], list[Measure]] = {}
    for r in rows:
        if r.rtt_ms is not None and r.work == "host":
            by.setdefault((r.rtt_ms, r.n, r.forks, r.tool), []).append(r)
    return by


@dataclass(frozen=True)
class Ratio:
    """`probe run` against the fastest peer in one (RTT, hosts, forks) cell."""

    rtt_ms: float
    n: int
    forks: int
    ratio: float
    peer: str
    counted: bool  # neither `probe run`'s row nor the best peer's is machine-bound


def probe_ratios(rows: list[Measure], cores: int) -> list[Ratio]:
    by = latency_cells(rows)
    out = []
    for (rtt, n, forks, tool), ms in sorted(by.items()):
        if tool != "probe run":
            continue
        peers = {p: by[(rtt, n, forks, p)] for p in LATENCY_PEERS if (rtt, n, forks, p) in by}
        if not peers:
            continue
        peer, pms = min(peers.items(), key=lambda kv: statistics.median(m.wall_s for m in kv[1]))
        ratio = statistics.median(m.wall_s for m in ms) / statistics.median(m.wall_s for m in pms)
        counted = max(host_share_pct(ms, cores), host_share_pct(pms, cores)) <= MACHINE_BOUND_PCT
        out.append(Ratio(rtt, n, forks, ratio, peer, counted))
    return out


def goal_line(rows: list[Measure], cores: int, goal: float = 1.0, hosts: int = 1000) -> str:
    """Whether `probe run` is within `goal`× the best peer at `hosts` hosts in every cell not machine-bound
    (the issue's goal); cells of other sizes are in the table, not in the goal."""
    ratios = [r for r in probe_ratios(rows, cores) if r.n == hosts]
    counted = [r for r in ratios if r.counted]
    head = f"Goal (≤ {goal:.1f}× the best peer at {hosts} hosts in every cell not machine-bound): "
    if not ratios:
        return head + f"not decided; no `probe run` cell of {hosts} hosts with a peer to compare."
    if not counted:
        return (head + f"not decided; all {len(ratios)} of `probe run`'s cells are machine-bound (host side + "
                f"proxy over {MACHINE_BOUND_PCT:.0f} % of the cores).")
    worst = max(counted, key=lambda r: r.ratio)
    within = sum(r.ratio <= goal for r in counted)
    return (head + f"{'met' if within == len(counted) else 'NOT met'}: {within} of {len(counted)} counted cells "
            f"within {goal:.1f}× ({len(ratios) - len(counted)} machine-bound, not counted); worst counted: "
            f"{worst.ratio:.2f}× {worst.peer} at {worst.rtt_ms:g} ms, forks {worst.forks}.")


def summarize_latency(rows: list[Measure]) -> str:
    by = latency_cells(rows)
    if not by:
        return "(not run)"
    cores = os.cpu_count() or 1
    ratios = {(r.rtt_ms, r.n, r.forks): r for r in probe_ratios(rows, cores)}
    lines = ["| RTT ms | hosts | forks | tool | runs | wall s, median (min–max) | × best peer | controller CPU s | "
             "host-side CPU s | host-side CPU ms a host | proxy CPU s | host side + proxy, % of the cores | "
             "machine-bound | whole machine, % of the cores | "
             "peak MB, PSS (RSS sum) | distinct hosts reached (min) | ok envelopes (min) | not ok (probe run, worst run) |",
             "|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for (rtt, n, forks, tool), ms in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2],
                                                                        TOOL_ORDER.get(kv[0][3], 9))):
        walls = [m.wall_s for m in ms]
        med = statistics.median(walls)
        r = ratios.get((rtt, n, forks)) if tool == "probe run" else None
        best = "–" if r is None else f"{r.ratio:.2f}" + ("" if r.counted else " (not counted)")
        cpu, host, prox = _median(ms, "cpu_s"), _median(ms, "host_cpu_s"), _median(ms, "proxy_cpu_s")
        load = host_share_pct(ms, cores)
        whole = (host + prox + cpu) / cores / med * 100
        worst = max(ms, key=lambda m: sum(m.bad.values()))
        bad = ", ".join(f"{k} {v}" for k, v in sorted(worst.bad.items())) or ("0" if tool in ("probe run", ONE_PROCESS) else "–")
        if worst.why:  # the commonest reason, so a false unreachable shows what the tool said
            reason, count = max(worst.why.items(), key=lambda kv: kv[1])
            bad += f" ({count}: {reason.replace('|', '/')[:100]})"
        lines.append(f"| {rtt:g} | {n} | {forks} | {tool} | {len(ms)} | {med:.2f} ({min(walls):.2f}–{max(walls):.2f}) | "
                     f"{best} | {cpu:.2f} | {host:.2f} | {host / n * 1000:.1f} | {prox:.2f} | {load:.0f} | "
                     f"{'yes' if load > MACHINE_BOUND_PCT else 'no'} | {whole:.0f} | "
                     f"{max(m.peak_mb for m in ms):.0f} ({max(m.peak_rss_mb for m in ms):.0f}) | "
                     f"{min(m.reached for m in ms)} | {min(m.ok for m in ms)} | {bad} |")
    return "\n".join(lines) + "\n\n" + goal_line(rows, cores)


REPLAY_METHOD = """\
- The simulated hosts answer from recordings, so that they cost the machine less than the tools do.
  Recorded first: each tool ran once on 3 hosts of an sshd whose ForceCommand is `bench/replayhost.c`,
  which ran the real `python3` with the probe for every script it had not seen and stored its stdout and
  exit status (keyed by the interpreter options and the script bytes; the login's `$SSH_CONNECTION`
  stored as a placeholder).  {recorded} recordings; scripts first seen during the table: {late}.
- The table's endpoint: `{endpoint}`.  `sshd`: the same sshd and ForceCommand (`sshd -r`, no re-exec per
  login), answering a `python3 ... -` from the recording and running any other command (Ansible's)
  in /bin/sh with a `python3` shim that answers from the recording of the script file.  `asyncssh`:
  one `bench/replayserver.py` process in sshd's place (curve25519-sha256, the same ed25519 keys, known
  hosts and one address per host), answering from the same recordings, other commands through
  /bin/sh, sftp by asyncssh's server.  The check below measures both against the real probe.
- A row is **machine-bound** when host side + proxy keep more than 50 % of the cores busy; its ratio is
  shown but not counted.  Load when the table ended: {load} (above the core count, other work shared
  the cores: the walls are noisy, and a tool of many processes gets more of a loaded machine's CPU
  than one of a single process).
- The full matrix, on a quiet machine: `sh bench/setup.sh && BENCH_ANSIBLE=/tmp/ansible-venv/bin/ansible
  python bench/fleet_bench.py --latency-only --replay asyncssh --rtt-ms 0,20,100 --rtt-sizes 1000
  --rtt-forks 32,128,256,512 --rtt-tools probe,openssh,pssh,ansible-script --ansible-max 1000 --rtt-repeats 3`."""


LATENCY_METHOD = """\
- The fleet of the first table, reached through `bench/delayproxy.c` (built by `bench/delayproxy.py` with
  gcc -O2): one process, one epoll loop, in front of the one sshd.  The tools connect to 127.0.x.y:PROXY,
  the proxy to 127.0.x.y:SSHD, so sshd still sees one server address per host and `distinct hosts reached`
  still counts them.  Every byte waits RTT/2 in each direction, in order; a new connection reaches sshd one
  RTT after the proxy accepted it (the TCP handshake a client's connect() would have waited for); an end
  of stream travels like data.  This machine's kernel has no netem qdisc, hence a proxy in user space.
- The proxy's CPU is measured apart (`proxy CPU s`, utime+stime from /proc), like the hosts' side, and
  neither is in a tool's controller CPU or memory.  `host side + proxy, % of the cores` = (host-side CPU +
  proxy CPU) ÷ cores ÷ wall: near 100 % the simulated hosts, not the link or the tool, bound the wall
  time, and the row measures this machine's CPU rather than latency.  `whole machine` adds the
  controller's CPU.
- Same work, options and key exchange as the first table; `ansible -m script` up to --ansible-max hosts.
  `× best peer`: `probe run`'s median wall ÷ the fastest other tool's at the same RTT, hosts and forks.
  `not ok (probe run)`: the outcomes other than ok that `probe run` recorded (timeout, unreachable ...).
- The self-check before the table: a ping-pong through the proxy takes the configured RTT; an `ssh true`
  login pays the RTTs an SSH login has (login minus direct, in RTTs); the OpenSSH fan-out through the proxy
  at 0 ms is as fast as direct (the proxy adds no cost of its own the tools would pay)."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,100,500,1000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--forks", type=int, default=32, help="forks for every tool (default 32)")
    ap.add_argument("--procs", type=int, default=None,
                    help="`probe run --procs N` (default: probe run's own choice, one process per core from 500 hosts each)")
    ap.add_argument("--tools", default="probe,openssh,pssh,ansible-script,ansible-raw,openssh-defaultkex")
    ap.add_argument("--ansible-max", type=int, default=100, help="largest N Ansible is run at (it is slow)")
    ap.add_argument("--audit-sizes", default="", help="fleet sizes for the audit playbook against fixture roots, "
                    "e.g. 10,100 (default: none)")
    ap.add_argument("--audit-tools", default="probe,openssh,openssh-mux,pssh,ansible-script,ansible-raw")
    ap.add_argument("--audit-playbook", default="audit", help="shipped playbook name or file (default audit)")
    ap.add_argument("--audit-machine", default="dgx-h100", help="simulated machine every host is (default dgx-h100)")
    ap.add_argument("--sweep-forks", default="", help="extra forks values, e.g. 16,64,100, run at --sweep-n")
    ap.add_argument("--sweep-n", type=int, default=500)
    ap.add_argument("--sweep-tools", default="probe,openssh")
    ap.add_argument("--sweep-repeats", type=int, default=1)
    ap.add_argument("--rtt-ms", default="", help="round-trip times for the latency table through bench/delayproxy.c, "
                    "e.g. 0,20,100 (default: no latency table)")
    ap.add_argument("--rtt-sizes", default="1000", help="fleet sizes of the latency table (default 1000)")
    ap.add_argument("--rtt-forks", default="32,128,256,512", help="forks of the latency table")
    ap.add_argument("--rtt-tools", default="probe,openssh,pssh,ansible-script")
    ap.add_argument("--rtt-repeats", type=int, default=1)
    ap.add_argument("--rtt-check-n", type=int, default=100,
                    help="hosts of the latency self-check's direct vs proxy-at-0-ms fan-out (default 100)")
    ap.add_argument("--defaultkex-max", type=int, default=100, help="largest N for openssh-defaultkex (slow)")
    ap.add_argument("--controller-sizes", default="1000,10000")
    ap.add_argument("--controller-timeout", type=float, default=300)
    ap.add_argument("--history-hosts", type=int, default=10000,
                    help="fleet size of the diff/show/report table (bench/history_bench.py); 0 leaves it out")
    ap.add_argument("--history-timeout", type=float, default=900)
    ap.add_argument("--end-latency-hosts", type=int, default=1000,
                    help="replayed hosts of the end-latency table (bench/end_latency.py; 0: not run)")
    ap.add_argument("--end-latency-repeats", type=int, default=3)
    ap.add_argument("--no-record-sizes", dest="record_sizes", action="store_false",
                    help="leave out the bytes-per-host table (bench/record_size.py)")
    ap.add_argument("--controller-one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--controller-refresh", action="store_true",
                    help="only re-measure the controller-alone section of --out")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="skip the untimed warm-up run of every tool on 3 hosts")
    ap.add_argument("--selfcheck", action="store_true",
                    help="only check the CPU attribution (host side vs controller) on 10 hosts, then exit")
    ap.add_argument("--latency-only", action="store_true",
                    help="run the latency table alone (--rtt-*) and replace only its section of --out; the raw "
                         "rows go to RESULTS-latency.json beside it")
    ap.add_argument("--replay", choices=ENDPOINTS, default="",
                    help="the fleet answers from recordings of the real probe (bench/replayhost.py): through sshd's "
                         "ForceCommand or one asyncssh process; with --latency-only its section is "
                         f"'{REPLAY_HEADING[3:]}'")
    ap.add_argument("--replay-check-n", type=int, default=50, help="hosts of the endpoints' CPU-per-login check")
    ap.add_argument("--out", default=str(REPO / "bench" / "RESULTS.md"))
    a = ap.parse_args()
    global PROBE_PROCS
    PROBE_PROCS = a.procs
    if a.controller_one:
        print(json.dumps(controller_one(a.controller_one)))
        return 0
    if a.controller_refresh:
        # Re-measure only the sections after the fan-out (controller, history, bytes per host) of an
        # existing RESULTS.md, leaving the fan-out tables as they were.
        ctl = controller_only([int(x) for x in a.controller_sizes.split(",") if x], a.controller_timeout)
        text = Path(a.out).read_text()
        head, sep, _ = text.partition("## Controller alone")
        cmd = "python bench/fleet_bench.py " + " ".join(sys.argv[1:])
        Path(a.out).write_text(head + sep + f" (normalize + check + write fleet.json, hosts cloned from the demo "
                               f"recordings)\n\nRe-measured by `{cmd}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
                               f" (the sections from here on).\n\n" + ctl + "\n\n" + after_controller(a))
        print(ctl)
        return 0
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # 1,000 connections are 1,000+ sockets in one controller and 2,000+ fds in sshd: raise the limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    become_subreaper()
    os.umask(0o022)  # the login user `fpbench` reads the keys' folder, fixtures and scripts
    tmp = Path(tempfile.mkdtemp(prefix="fpbench-"))
    tmp.chmod(0o755)
    atexit.register(shutil.rmtree, tmp, True)  # fixtures, outputs, keys: gone however we exit
    if a.selfcheck:
        fleet = start_fleet(10, tmp / "fleet")
        try:
            passed, table = selfcheck(fleet, tmp)
        finally:
            fleet.stop()
        print(table)
        return 0 if passed else 1
    if a.latency_only:
        if not a.rtt_ms:
            ap.error("--latency-only needs --rtt-ms")
        a.sizes = a.audit_sizes = a.sweep_forks = ""
        a.tools = a.rtt_tools  # the warm-up runs the tools of the table
    sizes = [int(x) for x in a.sizes.split(",") if x]
    audit_sizes = [int(x) for x in a.audit_sizes.split(",") if x]
    tools = [t for t in a.tools.split(",") if t]
    audit_tools = [t for t in a.audit_tools.split(",") if t] if audit_sizes else []
    unknown = [t for t in tools + audit_tools if t not in RUNNERS]
    if unknown:
        ap.error(f"unknown tools {unknown}; known: {', '.join(RUNNERS)}")
    sweep = [int(x) for x in a.sweep_forks.split(",") if x]
    sweep_tools = [t for t in a.sweep_tools.split(",") if t]
    limits = {"ansible-script": a.ansible_max, "ansible-script-free": a.ansible_max, "ansible-raw": a.ansible_max,
              "openssh-defaultkex": a.defaultkex_max}
    runs = plan(sizes, tools, a.repeats, a.forks, limits, sweep, a.sweep_n, sweep_tools, a.sweep_repeats,
                audit_sizes, audit_tools)
    rtts = [float(x) for x in a.rtt_ms.split(",") if x]
    rtt_sizes = [int(x) for x in a.rtt_sizes.split(",") if x] if rtts else []
    rtt_tools = [t for t in a.rtt_tools.split(",") if t] if rtts else []
    unknown = [t for t in rtt_tools if t not in RUNNERS]
    if unknown:
        ap.error(f"unknown --rtt-tools {unknown}; known: {', '.join(RUNNERS)}")
    latency_runs = plan_latency(rtts, rtt_sizes, [int(x) for x in a.rtt_forks.split(",") if x], rtt_tools,
                                a.rtt_repeats, limits)
    works = {"host": host_work(tmp)}
    if audit_sizes:
        works["audit"] = audit_work(tmp, a.audit_machine, a.audit_playbook, max(audit_sizes))
    replay_preface = ""
    if a.replay:
        recorded = record_answers(tmp / "fleet", works["host"], tmp, rtt_tools or tools)
        costs = [login_cost(k, tmp / "fleet", works["host"], tmp, a.replay_check_n) for k in ("", *ENDPOINTS)]
        replay_preface = endpoint_check(costs, a.replay, a.replay_check_n)
        print(replay_preface, flush=True)
    fleet = start_fleet(max([*sizes, *audit_sizes, *rtt_sizes, a.sweep_n if sweep else 0]), tmp / "fleet",
                        replay=a.replay)
    views = {rtt: via_proxy(fleet, rtt) for rtt in sorted(set(rtts) | ({0.0} if rtts else set()))}
    rows: list[Measure] = []
    attribution = latency_check = "(not run)"
    logins: dict[float, float] = {}
    t_start = time.monotonic()
    try:
        if a.warmup:
            # page cache, .pyc files, the fixtures' libraries: whoever runs first must not pay for them
            for wname, ts in (("host", tools), ("audit", audit_tools)):
                for tool in ts if wname in works else ():
                    RUNNERS[tool](fleet, min(3, len(fleet.addresses)), a.forks, works[wname], tmp)
            print(f"[{time.monotonic() - t_start:6.0f}s] warm-up done (not counted)", flush=True)
        passed, attribution = selfcheck(fleet, tmp, n=min(10, len(fleet.addresses)))
        print(attribution, flush=True)
        if not passed:
            print("warning: the CPU attribution check failed; the CPU columns below are suspect", file=sys.stderr)
        for n, forks, rep, tool, wname in runs:
            work = works[wname]
            m = RUNNERS[tool](fleet, n, forks, work, tmp)
            if m is None:
                continue
            rows.append(m)
            flag = "" if m.reached == n and m.ok == n else f"  <-- reached {m.reached}, ok {m.ok} of {n}"
            flag += f"  (exit status {m.rc})" if m.rc else ""
            print(f"[{time.monotonic() - t_start:6.0f}s] {wname} n={n} forks={forks} rep={rep} {m.tool}: "
                  f"{m.wall_s:.2f}s cpu={m.cpu_s:.2f}s host_cpu={m.host_cpu_s:.2f}s peak={m.peak_mb:.0f}MB "
                  f"reached={m.reached} ok={m.ok}{flag}", flush=True)
        if latency_runs:
            passed, latency_check, logins = latency_selfcheck(fleet, views, works["host"], tmp,
                                                              min(a.rtt_check_n, len(fleet.addresses)), 32)
            print(latency_check, flush=True)
            if not passed:
                print("warning: the latency self-check failed; the latency table below is suspect", file=sys.stderr)
        for rtt, n, forks, rep, tool in latency_runs:
            m = RUNNERS[tool](views[rtt], n, forks, works["host"], tmp)
            if m is None:
                continue
            rows.append(m)
            flag = "" if m.reached == n and m.ok == n else f"  <-- reached {m.reached}, ok {m.ok} of {n}"
            flag += f"  (exit status {m.rc})" if m.rc else ""
            flag += f"  not ok: {m.bad} {dict(sorted(m.why.items(), key=lambda kv: -kv[1])[:3])}" if m.bad else ""
            print(f"[{time.monotonic() - t_start:6.0f}s] rtt={rtt:g}ms n={n} forks={forks} rep={rep} {m.tool}: "
                  f"{m.wall_s:.2f}s cpu={m.cpu_s:.2f}s host_cpu={m.host_cpu_s:.2f}s proxy_cpu={m.proxy_cpu_s:.2f}s "
                  f"peak={m.peak_mb:.0f}MB reached={m.reached} ok={m.ok}{flag}", flush=True)
    finally:
        for view in views.values():
            if view.proxy is not None:
                view.proxy.stop()
        fleet.stop()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    suffix = "-replay.json" if a.replay else "-latency.json"
    raw = Path(a.out).with_name(Path(a.out).stem + suffix) if a.latency_only else Path(a.out).with_suffix(".json")
    raw.write_text(json.dumps([m.__dict__ for m in rows], indent=1) + "\n")
    fan_elapsed = time.monotonic() - t_start
    if a.replay and fleet.replay is not None:
        late = fleet.replay.count() - recorded
        replay_preface = (REPLAY_METHOD.format(endpoint=a.replay, load=load_line(), recorded=recorded,
                                               late=late if late else "none") + "\n\n" + replay_preface + "\n\n")
    if a.latency_only:
        heading = REPLAY_HEADING if a.replay else LATENCY_HEADING
        section = latency_section(rows, latency_check, logins, fan_elapsed, raw.name, heading, replay_preface)
        replace_section(Path(a.out), heading, section)
        print(section)
        return 0
    ctl = controller_only([int(x) for x in a.controller_sizes.split(",") if x], a.controller_timeout)
    print(f"[{time.monotonic() - t_start:6.0f}s] controller table done", flush=True)
    after = after_controller(a)
    cmd = "sh bench/setup.sh && " + " ".join(
        ["BENCH_ANSIBLE=" + shlex.quote(os.environ["BENCH_ANSIBLE"])] if os.environ.get("BENCH_ANSIBLE") else []
    ) + f" python bench/fleet_bench.py {shlex.join(sys.argv[1:])}"
    audit = ""
    if "audit" in works:
        w = works["audit"]
        audit = (f"## Audit playbook: `{a.audit_playbook}` ({', '.join(w.probe_names)}) against a simulated "
                 f"`{a.audit_machine}` on N hosts\n\n" + AUDIT_METHOD + "\n\n" + summarize(rows, "audit") + "\n\n")
    latency = latency_section(rows, latency_check, logins) + "\n\n" if latency_runs else ""
    method = METHOD.format(user=fleet.user, forks=a.forks, repeats=a.repeats, cores=os.cpu_count(),
                           host_kb=works["host"].script("host").stat().st_size / 1024)
    text = (f"# Fleet benchmark results\n\nGenerated by `{cmd.strip()}` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} (fan-out part took {fan_elapsed / 60:.1f} min).\n"
            f"Do not edit by hand: rerun the command.  Raw measurements: `{Path(a.out).with_suffix('.json').name}`.\n\n"
            f"## Machine\n\n{machine_description()}\n\n"
            f"## Method\n\n{method}\n\n"
            f"## CPU attribution check (`--selfcheck`, run before the fan-out)\n\n{attribution}\n\n"
            f"## Fan-out: the `host` probe on N hosts\n\n{summarize(rows)}\n\n{audit}{latency}"
            f"## Controller alone (normalize + check + write fleet.json, hosts cloned from the demo recordings)\n\n{ctl}\n\n"
            f"{after}")
    Path(a.out).write_text(text)
    print(text)
    return 0


METHOD = """\
- Fleet: one sshd (`ListenAddress 0.0.0.0`, logins allowed only from 127.0.0.0/8, MaxStartups 4000,
  its fd limit raised with this process's) reached at 127.0.x.y, one address per host, so every host
  is a separate TCP peer; login user `{user}` (/bin/sh, empty home, no rc files); ed25519 host and user keys.
- Work (first table): every tool ships the same composed `host` probe (prelude + probe, {host_kb:.0f} KB) to
  `python3 -` on each host (`probe run` to `python3 -I -S -`, its own way: isolated, no site); `distinct hosts reached` counts the distinct server addresses in the probes' `$SSH_CONNECTION`.
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
  plain RSS sum, which counts every forked worker's shared pages again, in parentheses.
- Host-side CPU: what the run cost the simulated hosts, kept apart from the controller.  sshd runs
  under `bench/subreaper.py`, a child subreaper of its own, so sshd sessions and probes that lose their
  parent are reaped there and never by the benchmark (which is a subreaper itself, for Ansible's
  masters: before this split, orphans of the sshd tree landed in the OpenSSH fan-out's controller
  CPU).  Host-side CPU = the sshd listener's utime+stime+cutime+cstime plus the wrapper's
  cutime+cstime (`/proc/<pid>/stat`), read before and after each run once no session is left.
  The check below (also `python bench/fleet_bench.py --selfcheck`) proves the split: 10 × `python3`
  burning 0.2 s of CPU over ssh must add ~2 s on the host side and nothing to the controller.
- The sshd and the probes run on the same {cores} cores as the controller: every host-side CPU second is
  taken from the tool being measured.  A login costs sshd tens of ms of CPU and python3 with the probe
  about as much again (`--selfcheck` prints both), so the host side alone keeps the cores busy for
  most of the OpenSSH floor's wall time (the note under each table divides host-side CPU by the cores).
  No tool finishes before the hosts have had the CPU its run gives them (its host-side CPU ÷ the
  cores), so ratios to Ansible cannot fall far below the floor's own ratio to Ansible here; a tool
  beats the floor only by giving the hosts less to do (fewer logins, fewer interpreter starts), which
  the host-side column shows.  With real remote hosts, host-side CPU is spread over the fleet and only
  the controller columns remain.  Absolute times are pessimistic, ratios are the point.
- First one untimed warm-up run of every tool on 3 hosts (caches, .pyc files).  Then {repeats} repeats
  per (size, tool), interleaved with a rotating start; median (min–max).  The machine
  is shared with other work, so single runs can be noisy."""


AUDIT_METHOD = """\
- Every host is the same simulated machine (`orchestrator/simulate`) with an identity of its own, as
  in a real fleet: the sysfs/proc tree is built once and hard-linked into each host's fixture root; the
  host files (hostname = inventory name, DMI serials) and a compiled fake libnvidia-ml (GPU UUIDs and
  serials seeded by the name) are per host, so a healthy fleet yields no findings (clones would give
  `probe run` N×16 duplicate-identity findings to judge).  Built before the runs, not timed.
- `probe run -p PLAYBOOK` reads each host's fixture from its inventory vars (`probe_root`,
  `probe_args`); the other tools ship the same probes composed with the same per-host arguments
  (`orchestrator.engine.payload.build_script`).  pssh (one stdin for all hosts) and `ansible -m raw` (the
  probe inline in the task) send every host the first host's scripts: the same machine, the same
  work, only other serials.
- OpenSSH fan-out: per host, the playbook's probes one after another, one `ssh ... python3 - < probe`
  each (hosts in parallel, `xargs -P forks`): one login per probe.  `(one login per host)`: the same,
  but the first ssh of a host is a ControlMaster the host's other probes multiplex over, ended with
  `ssh -O exit` after the last one: the floor for a tool that carries a whole play over one
  connection ("× one-login floor").  pssh: one `parallel-ssh` call per probe, in play order.
- Ansible: `ansible-playbook` with one task per probe (`script` or `raw`), linear strategy,
  `gather_facts: false`, its default ControlPersist master reused by the tasks of a host
  (`--audit-tools ansible-script-free` adds `strategy: free`).  `probe run`: however the CLI ships
  the play (the host-side column shows what that costs the hosts).
- `ok envelopes of the scarcest probe`: for each probe, the ok envelopes that came back; the smallest
  of those counts (N means every probe came back ok from every host); reached hosts come from the
  `host` probe's `$SSH_CONNECTION`."""


if __name__ == "__main__":
    sys.exit(main())
