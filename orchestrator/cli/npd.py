"""`probe npd`: Node Problem Detector custom-plugin mode (docs/npd.md).

Runs the passive probes on THIS node through the local transport, as `probe run` does (a child
process with a one-host inventory in a private directory), and answers NPD's contract: exit 0 /
1 / 2 and one line of at most 80 bytes naming the root fault (present/npd.py).  The child is
bounded by `--timeout`: at the deadline its whole process group is killed and the answer is 2
(Unknown), so the plugin always answers before NPD's own timeout kills it.  Nothing fleetprobe
prints reaches NPD but that line; the run itself is thrown away unless `--keep DIR` keeps it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.api.errors import USAGE_ERRORS, usage_message
from orchestrator.api.plan import load_inventory
from orchestrator.api.stored import load_result
from orchestrator.files import jsontext
from orchestrator.present.npd import NpdAnswer, npd_answer, unknown

# connection variables of the node's inventory entry: the plugin runs on the node itself
_CONNECTION = ("ansible_host", "ansible_ssh_host", "ansible_port", "ansible_user", "ansible_connection",
               "ansible_ssh_private_key_file", "ansible_become", "ansible_become_user")
MARGIN_S = 1.0  # kept back from --timeout for reading the verdict and answering


def node_inventory(node: str, inventory: list[str] | None) -> dict[str, Any]:
    """A one-host inventory for this node: its variables from `inventory` (expectations, probe
    arguments) where it is there, the local transport always."""
    hostvars: dict[str, Any] = {}
    if inventory:
        _inv, hosts, _warnings = load_inventory(tuple(inventory), node)
        if hosts:
            hostvars = {k: v for k, v in hosts[0].vars.items() if k not in _CONNECTION}
    hostvars["ansible_connection"] = "local"
    hostvars.setdefault("ansible_python_interpreter", sys.executable)
    return {"all": {"hosts": {node: hostvars}}}


def _children() -> dict[int, list[int]]:
    """pid -> its child pids, from /proc (Linux, where NPD runs)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])  # after "pid (comm) state"
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _descendants(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        kids = tree.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _kill_tree(pid: int) -> None:
    """SIGKILL the child's process group and every group below it: the local transport starts each
    probe in a session of its own, which killing the child's group alone would leave running."""
    groups = {pid}
    for p in _descendants(pid):
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(p))
    for g in groups:
        with contextlib.suppress(OSError):
            os.killpg(g, signal.SIGKILL)


def _run_child(cmd: list[str], deadline: float) -> int | None:
    """The child's exit status, or None when it had to be killed at the deadline."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        return proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        proc.wait()
        return None


def _started() -> float:
    """When this process started, on the time.monotonic() clock (NPD's timeout counts from there,
    Python's start-up and imports included); now where /proc cannot say."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # field 22: starttime, clock ticks after boot
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.monotonic() - max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic()


def answer(args: argparse.Namespace, work: Path) -> NpdAnswer:
    start = _started()
    node = args.node or socket.gethostname()
    inv = work / "node.yml"
    try:
        hosts = node_inventory(node, args.inventory)
    except USAGE_ERRORS as e:  # NPD reads stdout only: the reason goes there, as Unknown
        return unknown(f"inventory: {usage_message(e)}")
    inv.write_text(jsontext.dumps(hosts))  # JSON: YAML that evaluates nothing
    run_dir = work / "results" / "run"
    probe_timeout = max(1.0, (args.timeout - MARGIN_S) * 0.6)
    cmd = [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "-p", args.playbook, "-o", str(run_dir),
           "-t", f"{probe_timeout:g}", "-q"]
    status = _run_child(cmd, start + args.timeout - MARGIN_S)
    if status is None:
        return unknown(f"no verdict within {args.timeout:g}s (probes killed)")
    try:
        fleet = load_result(run_dir)
    except Exception:  # no fleet.json: the run could not judge; the plugin still answers, as Unknown
        return unknown(f"no verdict (probe run exited {status})")
    if args.keep:
        shutil.copytree(run_dir, Path(args.keep) / run_dir.name, dirs_exist_ok=True)
    return npd_answer(fleet, node)


def execute_npd(args: argparse.Namespace) -> int:
    if args.timeout <= MARGIN_S:
        print(f"probe npd: --timeout must be more than {MARGIN_S:g} seconds", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fleetprobe-npd-") as tmp:
        result = answer(args, Path(tmp))
    print(result.message)
    return result.status


def add_parser(sub: Any) -> None:
    p = sub.add_parser("npd", help="Node Problem Detector plugin: probe THIS node, exit 0 ok / 1 problem / "
                                   "2 unknown with one line naming the root fault")
    p.add_argument("--timeout", type=float, default=50.0,
                   help="answer within this many seconds, probes included (default 50; set it below the "
                        "rule's timeout in NPD's custom-plugin-monitor JSON)")
    p.add_argument("-p", "--playbook", default="audit", help="playbook to run (default audit: passive probes only)")
    p.add_argument("-i", "--inventory", action="append", metavar="INV",
                   help="take this node's variables (probe_expect, probe_args) from this inventory")
    p.add_argument("--node", help="this node's name in the inventory and the verdict (default: its hostname)")
    p.add_argument("--keep", metavar="DIR", help="keep the run directory under DIR (default: thrown away)")
    p.set_defaults(func=execute_npd)
