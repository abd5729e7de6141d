"""Inventory data: hosts with their merged variables and group membership."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from orchestrator.inventory import connections


class InventoryError(Exception):
    """A user's inventory is wrong; the message names the file and line and says what to do."""


_TRUE = {"yes", "y", "true", "t", "on", "1"}

# The variables that say how to reach a host and run on it, as Ansible names them (the pre-2.0
# ansible_ssh_* spellings included): a judged run keeps them, so an inventory written from it
# reaches the same hosts the same way (present/outputs/ansible_inventory.py).  Secrets are not
# among them (a password never reaches disk: store/redaction.py).
CONNECTION_VARS = (
    "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port", "ansible_user", "ansible_ssh_user",
    "ansible_connection", "ansible_ssh_private_key_file", "ansible_private_key_file", "ansible_python_interpreter",
    "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_become", "ansible_become_user",
    "ansible_become_method",
)
# A host's name in the scheduler, where it differs from its inventory name: kept with the
# connection variables (the scheduler is another road to the same machine), read by --k8s-out
# (present/outputs/kubernetes.py) and by the scheduler reconciliation (verdict/scheduler.py).
K8S_NODE_VAR = "probe_k8s_node"
SLURM_NODE_VAR = "probe_slurm_node"
SCHEDULER_VARS = (K8S_NODE_VAR, SLURM_NODE_VAR)


def is_playbook_python(value: Any) -> bool:
    """``{{ ansible_playbook_python }}``: the one Jinja2 template we understand (no other is evaluated)."""
    return isinstance(value, str) and value.replace(" ", "") == "{{ansible_playbook_python}}"


def _first(vars: dict[str, Any], *keys: str) -> Any:
    # Ansible still honours the pre-2.0 ansible_ssh_* spellings; old inventories use them.
    for k in keys:
        if vars.get(k) is not None:
            return vars[k]
    return None


@dataclass
class Host:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)  # merged: all < parent < child < host
    # every group the host is in, "all" included, in the order their variables apply (weakest first)
    groups: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)  # var name -> "file:line" of the winning value

    @property
    def address(self) -> str:
        a = _first(self.vars, "ansible_host", "ansible_ssh_host")
        return str(a) if a is not None else self.name

    @property
    def port(self) -> int | None:
        p = _first(self.vars, "ansible_port", "ansible_ssh_port")
        return int(p) if p is not None else None

    @property
    def user(self) -> str | None:
        u = _first(self.vars, "ansible_user", "ansible_ssh_user")
        return str(u) if u is not None else None

    @property
    def connection(self) -> str:
        """The transport's registered name (ssh, local, replay...; Ansible's paramiko and smart mean ssh)."""
        c = str(self.vars.get("ansible_connection") or "ssh")
        return connections.canonical(c) or c

    @property
    def python(self) -> str:
        p = self.vars.get("ansible_python_interpreter")
        # "auto", "auto_silent", "auto_legacy": Ansible's interpreter discovery; python3 is what it
        # finds on every supported distribution, and what we run when nothing is set.
        if p is None or str(p).startswith("auto"):
            return "python3"
        if is_playbook_python(p):  # the common idiom for local hosts: the controller's own Python
            return sys.executable or "python3"
        return str(p)

    @property
    def key_file(self) -> str | None:
        k = _first(self.vars, "ansible_ssh_private_key_file", "ansible_private_key_file")
        return str(k) if k is not None else None

    @property
    def become(self) -> bool:
        b = self.vars.get("ansible_become", False)
        if isinstance(b, str):  # "yes"/"no" strings are booleans to Ansible; bool("no") is True
            return b.strip().lower() in _TRUE
        return bool(b)

    @property
    def become_user(self) -> str | None:
        """`ansible_become_user`: whom sudo runs the probe as (default root, as Ansible's)."""
        u = _first(self.vars, "ansible_become_user", "ansible_sudo_user")
        return str(u) if u not in (None, "") else None

    @property
    def become_method(self) -> str:
        """`ansible_become_method`; only sudo is supported (checked when the plan is built)."""
        m = self.vars.get("ansible_become_method")
        return str(m).strip().lower() if m not in (None, "") else "sudo"


@dataclass
class Group:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # direct members
    depth: int = 0  # longest path from "all" (all = 0); deeper groups' vars win
    priority: int = 1  # ansible_group_priority: breaks ties between groups of equal depth


@dataclass
class Inventory:
    hosts: dict[str, Host]  # insertion order = inventory order
    groups: dict[str, Group]
    sources: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # "file:line: ..." things Ansible also only warns about
    ignored: list[str] = field(default_factory=list)  # the warnings about group keys skipped (`hots:`), also in warnings
