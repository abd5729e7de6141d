"""Inventory sources only Ansible can read: executable inventory scripts and inventory plugin
configurations (`plugin: amazon.aws.aws_ec2`, ...).  They run through the real
`ansible-inventory -i SOURCE --list --export` when it is installed; its JSON is then read like
any other source.  Without it, one message says what to install or how to export the inventory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

from orchestrator.inventory.model import InventoryError

TIMEOUT_S = 300.0  # a cloud inventory plugin pages through an API; a script may be slow too


def ansible_inventory_binary() -> str | None:
    """$FLEETPROBE_ANSIBLE_INVENTORY, else the one installed beside this Python (a venv), else PATH."""
    env = os.environ.get("FLEETPROBE_ANSIBLE_INVENTORY")
    if env:
        return env
    beside = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which("ansible-inventory")


def export_inventory(path: str, what: str) -> dict[str, Any]:
    """`ansible-inventory -i path --list --export` as a dict (groups with hosts, children and their
    own vars; `_meta.hostvars` with each host's own vars).  `what` names the source in messages."""
    binary = ansible_inventory_binary()
    if binary is None:
        raise InventoryError(
            f"{path}: {what}; fleetprobe reads these through 'ansible-inventory --list', which is not installed "
            f"(pip install ansible-core), or export a static inventory once with "
            f"'ansible-inventory -i {path} --list -y > inventory.yml'")
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1", "ANSIBLE_NOCOLOR": "1"}
    try:
        proc = subprocess.run([binary, "-i", path, "--list", "--export"], capture_output=True, text=True,
                              timeout=TIMEOUT_S, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise InventoryError(f"{path}: {what}; ansible-inventory did not finish within {TIMEOUT_S:.0f}s") from None
    except OSError as e:
        raise InventoryError(f"{path}: {what}; cannot run {binary}: {e.strerror or e}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        why = " ".join(lines[-3:])[:600] or f"exit status {proc.returncode}"
        raise InventoryError(f"{path}: {what}; ansible-inventory --list failed: {why}")
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise InventoryError(f"{path}: {what}; ansible-inventory printed no JSON ({e})") from None
    if not isinstance(data, dict):
        raise InventoryError(f"{path}: {what}; ansible-inventory printed {type(data).__name__}, not a mapping")
    return data
