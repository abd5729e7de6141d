"""Slurm transport: the command runs on the host's node as a Slurm job step (`srun`), not over SSH.

For sites where Slurm is what the operator has (no SSH to compute nodes): `ansible_connection:
slurm` makes every command of a run, the probes and a fabric qualification's coordinated steps
alike, one `srun -N1 -n1 --nodelist NODE --unbuffered --input=all ... /bin/sh -c COMMAND` started
here, its stdin forwarded to the task and its stdout streamed back (a fabric step's first line is
read while it runs).  The node is `probe_slurm_node` (default: the inventory name); the step runs
inside the allocation `probe_slurm_jobid` names, or SLURM_JOB_ID when this controller runs under
salloc/sbatch (steps of one allocation share its nodes with --overlap, so a host's rails run side by
side), else each command is a job of its own.  `probe_srun` names srun, `probe_srun_args` adds
arguments (partition, account...).

Stopping (a deadline, Ctrl-C): srun is sent SIGTERM, which makes Slurm signal and end the step on
the node; a step srun cannot end is killed with srun after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Callable

from orchestrator.inventory.model import Host
from orchestrator.transport.base import CommandResult, TransportCapabilities, TransportOptions
from orchestrator.transport.local import LocalTransport

SRUN_GRACE_S = 5.0


def srun_argv(host: Host, command: str) -> list[str]:
    """The srun command line that runs `command` on the host's node."""
    v = host.vars
    srun = str(v.get("probe_srun") or "srun")
    node = str(v.get("probe_slurm_node") or host.name)
    job = v.get("probe_slurm_jobid") or os.environ.get("SLURM_JOB_ID")
    extra = v.get("probe_srun_args") or []
    extra = shlex.split(extra) if isinstance(extra, str) else [str(x) for x in extra]
    argv = [srun, "-N1", "-n1", f"--nodelist={node}", "--unbuffered", "--input=all", "--quiet", "--kill-on-bad-exit=1"]
    if job:
        argv += [f"--jobid={job}", "--overlap"]
    return [*argv, *extra, "/bin/sh", "-c", command]


class SlurmTransport(LocalTransport):
    # srun starts a real shell and interpreter on the node: probes can share one interpreter start
    capabilities = TransportCapabilities(pipes_to_interpreter=True)

    def __init__(self, host: Host | None = None, options: TransportOptions | None = None):
        super().__init__(host, options)
        if host is None:
            raise ValueError("the Slurm transport needs the inventory host (its node)")
        self.slurm_host = host

    def run(
        self, command: str, stdin: bytes = b"", timeout: float | None = None, *, deadline: float | None = None,
        first_output: float | None = None, clock_on_host: bool = False,
        on_output: Callable[[bytes], None] | None = None,
    ) -> CommandResult:
        """`command` on the host's node through srun (LocalTransport's contract: caps, deadlines)."""
        return super().run(shlex.join(srun_argv(self.slurm_host, command)), stdin, timeout, deadline=deadline,
                           first_output=first_output, clock_on_host=clock_on_host, on_output=on_output)

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        """srun is asked to end the step (SIGTERM: Slurm signals and ends the task on the node), then
        killed with its process group if it does not.  Killing srun alone would leave the step
        running on the node, outside any deadline."""
        if proc.poll() is not None:
            return
        srun = _srun_child(proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(srun or proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=SRUN_GRACE_S)
        except subprocess.TimeoutExpired:
            super()._stop(proc)


def _srun_child(sh_pid: int) -> int | None:
    """The srun below the /bin/sh LocalTransport started (the signal must reach srun itself)."""
    try:
        with open(f"/proc/{sh_pid}/task/{sh_pid}/children") as f:
            kids = [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return None
    return kids[0] if kids else None
