"""End-to-end helpers: drive the real `probe` CLI in a subprocess, and build a simulated GPU fleet
whose hosts are reached over the real test sshd.

* `Cli(tmp)`                 runs `python -m orchestrator ...` with HOME, the results directory and
                             the environment isolated from the developer's (~/.ssh, agent, XDG state)
* `build_simulated_fleet()`  sysfs/proc roots + compiled fake libnvidia-ml / libcuda per host, the
                             same machines and seeds as the bundled demo recordings
* `ssh_inventory()` / `replay_inventory()`  the same hosts, reached over SSH (probe_root and
                             probe_args point the probes at the fixtures) or replayed from the demo
                             recordings, so the two judgements can be compared
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.inventory.model import Host
from orchestrator.simulate.fake_cuda import build_fake_cuda
from orchestrator.simulate.fake_cuda import machines as cuda_machines
from orchestrator.simulate.fake_nvml import build_fake_nvml
from orchestrator.simulate.hostfiles import build_host_files
from orchestrator.simulate.record import GROUPS, demo_hosts
from orchestrator.simulate.sysfs import build_machine
from tests.support.sshd import ROOT_DIR, SshdServer

# What the demo recorder passes to the p2p probe against a fake libcuda (record.py): small buffers,
# since the fake's figures come from its fixture, not from the copy size.
P2P_FAKE_ARGS: dict[str, Any] = {"size_mb": 2, "repeats": 1, "loops": 2, "latency_loops": 4, "load_s": 0.05}


# --------------------------------------------------------------------------------------------- CLI


@dataclass
class Cli:
    """The `probe` command as a user runs it, in a subprocess with its own HOME and results dir."""

    home: Path
    results: Path

    @classmethod
    def create(cls, tmp: Path) -> Cli:
        home = tmp / "home"
        (home / ".ssh").mkdir(parents=True, exist_ok=True)
        return cls(home=home, results=tmp / "runs")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("SSH_AUTH_SOCK", "SSH_CONNECTION", "SSH_CLIENT", "XDG_STATE_HOME", "PYTHONPATH",
                            "COLUMNS")}
        env.update(HOME=str(self.home), PYTHONPATH=str(ROOT_DIR), PYTHONDONTWRITEBYTECODE="1")
        return env

    def argv(self, *args: str) -> list[str]:
        argv = [sys.executable, "-m", "orchestrator", *args]
        # Every command that reads or writes runs gets the private results directory.
        if args and args[0] in ("run", "runs", "show", "diff", "rejudge", "report"):
            argv += ["--results", str(self.results)]
        return argv

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), env=self.env(), cwd=str(self.home), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self, *args: str, stdout: Any = subprocess.PIPE) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), env=self.env(), cwd=str(self.home), stdout=stdout,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)

    def on_a_terminal(self, *args: str, timeout: float = 120) -> tuple[int, str]:
        """`probe ARGS` with its stderr on a pseudo-terminal, as a user at a shell sees it: (exit, stderr)."""
        import pty

        leader, follower = pty.openpty()
        proc = subprocess.Popen(self.argv(*args), env=self.env(), cwd=str(self.home), stdout=subprocess.DEVNULL,
                                stderr=follower, stdin=subprocess.DEVNULL)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            seen += chunk
        os.close(leader)
        return proc.wait(timeout=timeout), seen.decode("utf-8", "replace")

    def run_json(self, *args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        """`probe run ... --format json`: the process and the fleet.json it printed."""
        proc = self.run(*args, "--format", "json", timeout=timeout)
        try:
            fleet = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"no JSON on stdout (exit {proc.returncode}); stderr:\n{proc.stderr}") from None
        return proc, fleet


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen[str]) -> None:
    """Make sure a CLI process a test started is gone (the test failed half-way)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def hosts_by_name(fleet: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["name"]: h for h in fleet["hosts"]}


def finding_ids(fleet: dict[str, Any], severities: tuple[str, ...] = ("fail", "warn", "info")) -> dict[str, set[str]]:
    """host -> the set of finding ids raised on it (every host present, empty when clean)."""
    out: dict[str, set[str]] = {h["name"]: set() for h in fleet["hosts"]}
    for f in fleet["findings"]:
        if f["severity"] in severities:
            out.setdefault(f["host"], set()).add(f["id"])
    return out


# A command that never finishes, yet ends within a second once nobody reads it: OpenSSH ignores the
# transport's "signal" request for root logins, so a plain `sleep` would outlive the test.
HANG = "cat >/dev/null\nwhile printf . >&2; do sleep 0.5; done"


def write_script(path: Path, body: str) -> Path:
    """An executable shell script (used as a misbehaving ansible_python_interpreter)."""
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


# ----------------------------------------------------------------------------- simulated fleet


@dataclass
class SimulatedHost:
    name: str
    machine: str
    root: Path
    nvml_lib: Path
    cuda_lib: Path | None

    def probe_vars(self) -> dict[str, Any]:
        """Inventory variables that point every probe at this host's fixtures instead of the real
        /sys, /proc and libraries of the machine sshd runs on."""
        args: dict[str, Any] = {"nvml": {"lib": str(self.nvml_lib)}, "nvlink": {"lib": str(self.nvml_lib)}}
        if self.cuda_lib is not None:
            args["p2p"] = {"lib": str(self.cuda_lib), "nvml_lib": str(self.cuda_lib), **P2P_FAKE_ARGS}
        return {"probe_root": str(self.root), "probe_args": args}


def demo_machine(name: str) -> str:
    """The simulated machine a bundled demo host was recorded from."""
    return demo_hosts()[name]


def expectations(name: str) -> dict[str, Any]:
    """The demo inventory's probe_expect for a demo host (by its group's name prefix)."""
    for _group, prefix, expect in GROUPS:
        if name.startswith(prefix):
            return dict(expect)
    return {}


def build_simulated_host(name: str, machine: str, work: Path) -> SimulatedHost:
    """Fixtures for one host, built exactly as the demo recorder builds them (same seed = name)."""
    root = work / name / "root"
    build_machine(machine, root)
    build_host_files(machine, root, name)
    libs = work / "_libs"
    nvml = build_fake_nvml(machine, libs, seed=name)
    names = set(cuda_machines())
    cuda = build_fake_cuda(machine, libs) if machine in names or machine.split("--")[0] in names else None
    return SimulatedHost(name=name, machine=machine, root=root, nvml_lib=nvml, cuda_lib=cuda)


def build_simulated_fleet(names: list[str], work: Path) -> list[SimulatedHost]:
    return [build_simulated_host(n, demo_machine(n), work) for n in names]


def ssh_hosts(sshd: SshdServer, sims: list[SimulatedHost]) -> list[Host]:
    """The simulated hosts as inventory hosts on the test sshd, spread over its addresses."""
    out = []
    for i, sim in enumerate(sims):
        h = sshd.host(sim.name, sshd.addresses[i % len(sshd.addresses)], **sim.probe_vars())
        h.vars["probe_expect"] = expectations(sim.name)
        out.append(h)
    return out


def replay_inventory(names: list[str]) -> str:
    """The same hosts replayed from the bundled demo recordings, with the same expectations."""
    lines = ["all:", "  hosts:"]
    for name in names:
        lines += [f"    {name}:", "      ansible_connection: replay", f"      probe_replay: {json.dumps(name)}",
                  f"      probe_expect: {json.dumps(expectations(name))}"]
    return "\n".join(lines) + "\n"
