"""A real Slurm cluster on loopback for one test: munged, slurmctld and N emulated `slurmd -N nodeK`.

Debian's slurm-wlm (22.05) runs several slurmd on one machine when each node has its own port
and NodeHostname=localhost; every daemon runs in the foreground as our child process, with its
config, state, spool, logs and munge socket in a private directory, and is stopped after.
`missing_reason()` says why the cluster cannot start here (packages absent, not root).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ports import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


def missing_reason() -> str | None:
    absent = [d for d in DAEMONS if not shutil.which(d) and not Path(f"/usr/sbin/{d}").exists()]
    if absent:
        return f"Slurm/munge not installed ({', '.join(absent)} missing): scripts/test.sh installs slurm-wlm and munge"
    if os.geteuid() != 0:
        return "slurmd launches tasks as root here: run the Slurm test as root"
    return None


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    dir: Path
    nodes: list[str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, argv: list[str], timeout: float = 120, stdin: Path | None = None) -> subprocess.CompletedProcess[str]:
        with open(stdin or os.devnull, "rb") as f:
            return subprocess.run(argv, stdin=f, capture_output=True, timeout=timeout, env=self.env(), check=False,
                                  text=True)

    def steps(self, job: str) -> list[str]:
        """The steps of allocation `job` other than its extern step ("ID NAME" each), as squeue
        lists them."""
        out = self.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"], timeout=30).stdout
        return [ln for ln in out.splitlines() if ln.strip() and ".extern" not in ln]

    def logs(self) -> str:
        out = []
        for log in sorted((self.dir / "log").glob("*.log")):
            out.append(f"== {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:]))
        return "\n".join(out)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + 10
        for p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


class PortTaken(RuntimeError):
    """A daemon found the port it was given already taken."""


def start_cluster(work: Path, n_nodes: int = 4, gres: dict[str, str] | None = None) -> SlurmCluster:
    """Start the cluster in `work`; a daemon whose port was taken between choosing and binding it
    costs one more start with new ports, in a fresh directory (`work/2`, `work/3`).  `gres`: node ->
    its `gpu:TYPE:N` (slurm.conf's Gres, gres.conf's count without device files)."""
    for attempt in range(1, 4):
        try:
            return _start_once(work if attempt == 1 else work / str(attempt), n_nodes, gres or {})
        except PortTaken:
            if attempt == 3:
                raise
    raise AssertionError("unreachable")


def _gres_conf(work: Path, gres: dict[str, str]) -> str:
    """gres.conf: each node's GPUs as files of its own (slurmd counts the files; nothing opens them)."""
    rows = []
    for node, spec in gres.items():
        _, kind, count = spec.split(":")
        dev = work / "dev" / node
        dev.mkdir(parents=True, exist_ok=True)
        for i in range(int(count)):
            (dev / f"nvidia{i}").touch()
        rows.append(f"NodeName={node} Name=gpu Type={kind} File={dev}/nvidia[0-{int(count) - 1}]")
    return "AutoDetect=off\n" + "\n".join(rows) + "\n"


def _start_once(work: Path, n_nodes: int, gres: dict[str, str]) -> SlurmCluster:
    work.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "log"):
        (work / sub).mkdir(exist_ok=True)
    nodes = [f"node{i}" for i in range(1, n_nodes + 1)]
    cluster = SlurmCluster(work, nodes)
    key = work / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = work / "munge.sock"
    ports: set[int] = set()
    ctld_port = free_port(ports)
    ports.add(ctld_port)
    lines = [
        "ClusterName=fptest", "SlurmctldHost=localhost(127.0.0.1)", f"SlurmctldPort={ctld_port}",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
        f"StateSaveLocation={work}/state", f"SlurmdSpoolDir={work}/spool/%n",
        f"SlurmctldPidFile={work}/slurmctld.pid", f"SlurmdPidFile={work}/slurmd-%n.pid",
        f"SlurmctldLogFile={work}/log/slurmctld.log", f"SlurmdLogFile={work}/log/slurmd-%n.log",
        # step creation and launch are logged at `verbose`: a stalled step says where it stalled
        "SlurmctldDebug=verbose", "SlurmdDebug=verbose",
        # no cgroups in a container: the plugins that need nothing from the kernel
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/linear",
        "SchedulerType=sched/builtin", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none", "MpiDefault=none",
        "ReturnToService=2",
    ] + (["GresTypes=gpu", "SlurmdParameters=config_overrides"] if gres else [])  # no GPUs here: the configured count stands
    for node in nodes:
        # several slurmd on one machine: each node its own port, all on localhost
        port = free_port(ports)
        ports.add(port)
        lines.append(f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=1 "
                     + (f"Gres={gres[node]} " if node in gres else "") + "State=UNKNOWN")
    lines.append("PartitionName=fp Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    cluster.conf.write_text("\n".join(lines) + "\n")
    if gres:
        (work / "gres.conf").write_text(_gres_conf(work, gres))
    env = cluster.env()

    def spawn(argv: list[str]) -> None:
        log = open(work / "log" / f"{Path(argv[0]).name}-{len(cluster.procs)}.out", "wb")  # noqa: SIM115
        cluster.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                              env=env, start_new_session=True))

    try:
        spawn([_exe("munged"), "-F", "-f", f"--socket={sock}", f"--key-file={key}",
               f"--log-file={work}/log/munged.log", f"--pid-file={work}/munged.pid", f"--seed-file={work}/munged.seed"])
        _wait(lambda: sock.exists(), 15, "munged's socket", cluster)
        spawn([_exe("slurmctld"), "-D", "-i", "-f", str(cluster.conf)])
        _wait(lambda: cluster.run([_exe("sinfo"), "-h"], timeout=10).returncode == 0, 30, "slurmctld", cluster)
        for node in nodes:
            (work / "spool" / node).mkdir(exist_ok=True)
            spawn([_exe("slurmd"), "-D", "-N", node, "-f", str(cluster.conf)])

        def all_idle() -> bool:
            res = cluster.run([_exe("sinfo"), "-h", "-N", "-o", "%N %T"], timeout=10)
            states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
            return all(states.get(n) == "idle" for n in nodes)

        _wait(all_idle, 60, f"{n_nodes} idle nodes", cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait(predicate: Callable[[], bool], timeout: float, what: str, cluster: SlurmCluster) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except (subprocess.TimeoutExpired, ValueError):
            pass
        if any(p.poll() is not None for p in cluster.procs):
            logs = cluster.logs()
            error = PortTaken if "Address already in use" in logs else RuntimeError
            raise error(f"a Slurm daemon exited while waiting for {what}:\n{logs}")
        if time.monotonic() > end:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}:\n{cluster.logs()}")
        time.sleep(0.2)


@contextlib.contextmanager
def allocation(work: Path, n_nodes: int, name: str) -> Iterator[tuple[SlurmCluster, str]]:
    """A cluster of `n_nodes` and an allocation of all of them (`salloc --no-shell`): (cluster, job
    id).  The allocation is cancelled and the cluster stopped after."""
    c = start_cluster(work, n_nodes)
    try:
        res = c.run(["salloc", f"-N{n_nodes}", "--no-shell", f"--job-name={name}"], timeout=60)
        m = re.search(r"allocation (\d+)", res.stderr + res.stdout)
        assert m, f"salloc: {res.stderr}\n{c.logs()}"
        yield c, m.group(1)
        c.run(["scancel", m.group(1)], timeout=30)  # its steps' slurmstepd end with it
        time.sleep(1)
    finally:
        c.stop()
