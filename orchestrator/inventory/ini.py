"""Ansible's INI inventory format (the classic `hosts` file), parsed as ansible-core's `ini`
inventory plugin parses it.  Pure: text in, statements out; the loader applies them.

What the plugin does, and so this module:

* Lines are stripped; empty lines and lines starting with `#` or `;` are skipped.
* `[group]`, `[group:vars]`, `[group:children]` start a section (a trailing `# comment` is
  allowed); any other `[group:type]` is an error, as is a bracketed line with spaces.  Lines
  before the first section are hosts of `ungrouped`.
* A host line is split like a shell command line (quotes, backslashes, `#` comments): the first
  word is a host pattern (`gpu[01:08]`, `gpu01:2222`), every other word `key=value`.
* In `[group:vars]` a line is `key=value` split at the first `=` (not shell-split).
* A value is read as a Python literal when it is one (`8` -> 8, `True` -> true, `[1, 2]` -> a list,
  `'a b'` -> a b), else kept as the text.
* A group named in `[parent:children]` or `[group:vars]` must have a section of its own somewhere in
  the file; a child group is attached when its own section appears (that fixes Ansible's child order).
"""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from dataclasses import dataclass, field
from typing import Any, Union

from orchestrator.inventory.model import InventoryError

_COMMENT = ("#", ";")
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")


@dataclass(frozen=True)
class IniGroup:
    """A section header: the group exists from here on."""

    name: str
    line: int


@dataclass(frozen=True)
class IniHost:
    """One host line: its pattern (ranges and `:port` not yet expanded) and its `key=value` words."""

    group: str
    pattern: str
    vars: dict[str, Any]
    line: int


@dataclass(frozen=True)
class IniVar:
    group: str
    key: str
    value: Any
    line: int


@dataclass(frozen=True)
class IniChild:
    parent: str
    child: str
    line: int


IniStatement = Union[IniGroup, IniHost, IniVar, IniChild]


@dataclass
class _Pending:
    state: str  # "vars" | "children"
    line: int
    parents: list[tuple[str, int]] = field(default_factory=list)  # children: (parent, line of the mention)


def literal(text: str) -> Any:
    """A value as the ini plugin reads it: a Python literal where the text is one, else the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return _plain(value)


def _plain(value: Any) -> Any:
    # what the plugin keeps of literal_eval's types: tuples and sets become lists; complex, bytes
    # and the ellipsis go back to text
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, (str, int, float, bool)) else k: _plain(v) for k, v in value.items()}
    if value is ...:
        return "..."
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def looks_like_ini(text: str) -> bool:
    """Whether text has a bracketed line, an INI section header or a mistyped one (so a broken INI
    file gets the INI parser's message rather than YAML's)."""
    return any(ln.startswith("[") and ln.endswith("]") for ln in (raw.strip() for raw in text.splitlines()))


def parse_ini(text: str, path: str) -> list[IniStatement]:
    """The statements of an INI inventory, in file order.  InventoryError names file and line."""
    out: list[IniStatement] = []
    declared = {"all", "ungrouped"}  # groups that exist (the plugin's inventory.groups)
    pending: dict[str, _Pending] = {}
    group, state = "ungrouped", "hosts"

    def attach(child: str) -> None:
        """The plugin's _add_pending_children: attach a group now defined to the parents that named it."""
        decl = pending.pop(child)
        for parent, line in decl.parents:
            out.append(IniChild(parent, child, line))
            if parent in pending and pending[parent].state == "children":
                attach(parent)

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{path}:{lineno}"
        if not line or line[0] in _COMMENT:
            continue
        m = _SECTION.match(line)
        if m:
            group, state = m.group(1), m.group(2) or "hosts"
            if state not in ("hosts", "children", "vars"):
                raise InventoryError(f"{where}: section [{group}:{state}] has unknown type {state!r}; "
                                     "use [group], [group:vars] or [group:children]")
            if group not in declared:
                if state == "vars" and group not in pending:
                    pending[group] = _Pending("vars", lineno)
                declared.add(group)
                out.append(IniGroup(group, lineno))
            if group in pending and state != "vars":
                if pending[group].state == "children":
                    attach(group)
                else:
                    del pending[group]
            continue
        if line.startswith("[") and line.endswith("]"):
            raise InventoryError(f"{where}: invalid section {line!r}: a section is [group], [group:vars] or "
                                 "[group:children], with no spaces")
        if state == "hosts":
            out.append(_host_line(line, group, where, lineno))
        elif state == "vars":
            if "=" not in line:
                raise InventoryError(f"{where}: expected key=value in [{group}:vars], got {line!r}")
            key, value = (part.strip() for part in line.split("=", 1))
            out.append(IniVar(group, key, literal(value), lineno))
        else:
            gm = _GROUP_NAME.match(line)
            if not gm:
                raise InventoryError(f"{where}: expected a group name in [{group}:children], got {line!r}")
            child = gm.group(1)
            if child in declared:
                out.append(IniChild(group, child, lineno))
            elif child in pending:
                pending[child].parents.append((group, lineno))
            else:
                pending[child] = _Pending("children", lineno, [(group, lineno)])
    for name, decl in pending.items():
        where = f"{path}:{decl.line}"
        if decl.state == "vars":
            raise InventoryError(f"{where}: section [{name}:vars] is for a group the file never defines; "
                                 f"add a [{name}] or [{name}:children] section")
        raise InventoryError(f"{where}: [{decl.parents[-1][0]}:children] names group {name!r}, which the file "
                             f"never defines; add a [{name}] section (it may be empty)")
    return out


def _host_line(line: str, group: str, where: str, lineno: int) -> IniHost:
    try:
        words = shlex.split(line, comments=True, posix=True)
    except ValueError as e:
        raise InventoryError(f"{where}: cannot parse host line {line!r}: {e}") from None
    if not words:
        raise InventoryError(f"{where}: empty host line {line!r}")
    pattern = words[0]
    if pattern.endswith(":"):
        raise InventoryError(f"{where}: host pattern {pattern!r} ends in ':' (reserved for a port: host:2222)")
    if pattern == "---":
        raise InventoryError(f"{where}: host '---' is the start of a YAML document; is this a YAML inventory "
                             "with a wrong extension?")
    hvars: dict[str, Any] = {}
    for word in words[1:]:
        if "=" not in word:
            raise InventoryError(f"{where}: expected key=value after host {pattern!r}, got {word!r}")
        key, value = word.split("=", 1)
        hvars[key] = literal(value)
    return IniHost(group, pattern, hvars, lineno)
