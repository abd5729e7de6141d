"""Inventory data: hosts with their merged variables and group membership."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class InventoryError(Exception):
    """A user's inventory is wrong; the message names the file and line and says what to do."""


@dataclass
class Host:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)  # merged: all < parent < child < host
    groups: list[str] = field(default_factory=list)  # every group the host is in, "all" included

    @property
    def address(self) -> str:
        return str(self.vars.get("ansible_host", self.name))

    @property
    def port(self) -> int | None:
        p = self.vars.get("ansible_port")
        return int(p) if p is not None else None

    @property
    def user(self) -> str | None:
        u = self.vars.get("ansible_user")
        return str(u) if u is not None else None

    @property
    def connection(self) -> str:
        return str(self.vars.get("ansible_connection", "ssh"))

    @property
    def python(self) -> str:
        return str(self.vars.get("ansible_python_interpreter", "python3"))

    @property
    def key_file(self) -> str | None:
        k = self.vars.get("ansible_ssh_private_key_file")
        return str(k) if k is not None else None

    @property
    def become(self) -> bool:
        return bool(self.vars.get("ansible_become", False))


@dataclass
class Group:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # direct members


@dataclass
class Inventory:
    hosts: dict[str, Host]  # insertion order = inventory order
    groups: dict[str, Group]
    sources: list[str] = field(default_factory=list)
