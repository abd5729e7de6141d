"""Load Ansible inventories (YAML and INI files, directories, ``host1,host2,`` lists, and through
``ansible-inventory`` executable scripts and plugin configurations) into an Inventory.

Which parser reads a file is Ansible's choice: ``.yml``/``.yaml``/``.json`` are YAML; an
executable file starting with ``#!`` is an inventory script; any other file is YAML when it is a
YAML mapping, else INI (orchestrator/inventory/ini.py).  A directory is read like Ansible reads
it: every file but hidden ones, ``group_vars``/``host_vars`` and the extensions Ansible ignores
(``.md``, ``.txt``, ``.cfg``, ``.orig``, ``.bak`` ...).

Variable precedence is Ansible's (ansible-core's VariableManager with the default
VARIABLE_PRECEDENCE and hash_behaviour=replace), weakest first:

1. ``vars`` of ``all`` in inventory files
2. ``vars`` of every other group of the host in inventory files, groups sorted by
   (depth, ansible_group_priority, name): a child group (deeper) beats its parent; between two
   groups of the same depth the name that sorts later wins (Ansible's rule, not file order)
3. ``group_vars/all`` beside each inventory source
4. ``group_vars/<group>`` beside each inventory source, same group order as 2 -- so any
   group_vars file beats any inventory-file group ``vars``, exactly as in Ansible
5. the host's own variables in inventory files (``hosts: {gpu01: {...}}``)
6. ``host_vars/<host>`` beside each inventory source

Sources apply in the order given; for 3, 4 and 6 the outer loop is the source. A later value
replaces an earlier one whole (nested dicts are not merged, as Ansible's default).

Conflicts (an error naming both places): *within one inventory file*, one host or one group given
the same variable twice with different values -- the same host under the same group twice, a range
and an explicit name that overlap, the same host's inline vars under two groups, a group that
appears in two places with different ``vars``, or a duplicate key in one YAML mapping. Ansible
keeps whichever it read last, which makes the result depend on the file's layout. Across files
(several ``-i``, a directory, ``group_vars``/``host_vars``) the stronger layer wins as in Ansible;
a ``host_vars`` value that replaces a different inline value is reported in
``Inventory.warnings`` rather than refused, so that a working Ansible inventory loads unchanged.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import stat
import unicodedata
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orchestrator.facts.textsafe import is_digits
from orchestrator.inventory import connections
from orchestrator.inventory.external import export_inventory
from orchestrator.inventory.ini import IniChild, IniGroup, IniHost, IniVar, looks_like_ini, parse_ini
from orchestrator.inventory.model import (
    Group,
    Host,
    Inventory,
    InventoryError,
    is_playbook_python,
)
from orchestrator.inventory.ranges import expand_host_pattern, split_outside_brackets
from orchestrator.inventory.secrets import is_secret
from orchestrator.inventory.yamlsafe import LineMap, load_yaml_file

INVENTORY_EXTENSIONS = (".yml", ".yaml", ".json")
# What Ansible skips in an inventory directory (INVENTORY_IGNORE_EXTS: REJECT_EXTS + .orig, .cfg, .retry).
IGNORED_EXTENSIONS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry")
# the variables the transport acts on (a Jinja2 template in one of these is worth a warning)
CONNECTION_KEYS = (
    "ansible_host",
    "ansible_ssh_host",
    "ansible_port",
    "ansible_ssh_port",
    "ansible_user",
    "ansible_ssh_user",
    "ansible_connection",
    "ansible_ssh_private_key_file",
    "ansible_private_key_file",
    "ansible_python_interpreter",
    "ansible_become",
)
# Ansible's find_vars_files: the first of these that exists is used (a directory is read whole).
_VARS_SUFFIXES = ("", ".yml", ".yaml", ".json")
_HOST_LIST = "<-i host list>"
_SECTIONS = {
    "vars": "variable: value",
    "children": "group name: its hosts/children/vars, or empty",
    "hosts": "host name: its variables, or empty",
}
_BRACKETED_V6 = re.compile(r"^\[([0-9A-Fa-f:.]+)\](?::([0-9]+))?$")


@dataclass
class _Var:
    value: Any
    where: str  # "file:line"


@dataclass
class _G:
    name: str
    vars: dict[str, _Var] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    priority: int = 1


@dataclass
class _H:
    name: str
    vars: dict[str, _Var] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)  # direct memberships


def _typename(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"


def _name(value: Any, what: str, where: str) -> str:
    # YAML turns a bare 10 or 1.5 into numbers; Ansible uses their text. Anything else is a mistake.
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InventoryError(f"{where}: {what} must be a name, found {_typename(value)}")
    text = str(value).strip()
    if not text:
        raise InventoryError(f"{where}: {what} is empty")
    if any(unicodedata.category(ch) == "Cc" for ch in text):
        # names reach terminals, file names and command lines; control characters have no business there
        raise InventoryError(f"{where}: {what} {text!r} contains control characters")
    return text


def _split_port(pattern: str) -> tuple[str, int | None]:
    """``gpu01:2222`` -> (gpu01, 2222). Colons inside range brackets and IPv6 addresses are not ports;
    ``[fe80::1]:2222`` is an IPv6 address with a port, as in Ansible."""
    bracketed = _BRACKETED_V6.match(pattern)
    if bracketed:
        try:
            ipaddress.IPv6Address(bracketed.group(1))
        except ValueError:
            pass
        else:
            return bracketed.group(1), int(bracketed.group(2)) if bracketed.group(2) else None
    depth, colons = 0, []
    for i, ch in enumerate(pattern):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == ":" and depth == 0:
            colons.append(i)
    if len(colons) != 1:
        return pattern, None
    head, tail = pattern[: colons[0]], pattern[colons[0] + 1 :]
    if head and is_digits(tail):
        return head, int(tail)
    return pattern, None


def _section(value: Any, line: int) -> Any:
    # Ansible accepts `hosts: gpu01` / `children: gpu` as a one-entry mapping.
    if isinstance(value, str):
        m = LineMap({value: None})
        m.line, m.key_lines = line, {value: line}
        return m
    return value


class _Builder:
    def __init__(self) -> None:
        self.groups: dict[str, _G] = {"all": _G("all"), "ungrouped": _G("ungrouped")}
        self.groups["all"].children.append("ungrouped")
        self.groups["ungrouped"].parents.append("all")
        self.hosts: dict[str, _H] = {}
        self.warnings: list[str] = []
        self.ignored: list[str] = []  # keys of groups that are not a section: why an inventory may be empty
        self.basedirs: list[str] = []
        self._seen: dict[tuple[str, str, str], _Var] = {}  # per file: (kind, entity, var) -> first value
        self._file = ""
        self._vars_cache: dict[str, dict[str, _Var]] = {}
        self._entity_cache: dict[tuple[str, str, str], dict[str, _Var]] = {}
        self._templated: set[str] = set()

    # ----- building blocks -------------------------------------------------------------------
    def _group(self, name: str) -> _G:
        if name not in self.groups:
            self.groups[name] = _G(name)
        return self.groups[name]

    def _reaches(self, start: str, target: str) -> bool:
        """Whether target is start or lies below it (walks down: a new child has no children yet)."""
        seen, todo = {start}, [start]
        while todo:
            g = todo.pop()
            if g == target:
                return True
            for c in self.groups[g].children:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
        return False

    def _add_child(self, parent: str, child: str, where: str) -> None:
        if child == "all":
            raise InventoryError(
                f"{where}: 'all' cannot be a child of group '{parent}'; every group is already in all"
            )
        self._group(child)
        if self._reaches(child, parent):
            raise InventoryError(
                f"{where}: making '{child}' a child of '{parent}' creates a loop ('{parent}' is already inside "
                f"'{child}')"
            )
        if child not in self.groups[parent].children:
            self.groups[parent].children.append(child)
            self.groups[child].parents.append(parent)

    def _add_host(self, name: str, group: str) -> _H:
        host = self.hosts.get(name)
        if host is None:
            host = self.hosts[name] = _H(name)
        if group not in host.groups:
            host.groups.append(group)
            self.groups[group].hosts.append(name)
        return host

    def _check_conflict(self, kind: str, entity: str, key: str, var: _Var) -> None:
        first = self._seen.get((kind, entity, key))
        if first is None:
            self._seen[(kind, entity, key)] = var
        elif first.value != var.value:
            # Never echo a secret back into a log or a terminal.
            secret = is_secret(key)
            now, before = ("<redacted>", "<redacted>") if secret else (repr(var.value), repr(first.value))
            raise InventoryError(
                f"{var.where}: {kind} '{entity}' gets {key}={now} here but {key}={before} at "
                f"{first.where}; within one inventory file a {kind} may have only one value per variable "
                "(Ansible would silently keep the last one). Keep one of them."
            )

    def _set_group_var(self, group: str, key: str, value: Any, where: str) -> None:
        var = _Var(value, where)
        self._check_conflict("group", group, key, var)
        if key == "ansible_group_priority":  # Ansible: a sort key, not a variable
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, str))
                or not is_digits(str(value).strip())
            ):
                raise InventoryError(
                    f"{where}: ansible_group_priority must be a whole number, found {value!r}"
                )
            self.groups[group].priority = int(value)
            return
        self.groups[group].vars[key] = var

    def _set_host_var(self, host: str, key: str, value: Any, where: str) -> None:
        var = _Var(value, where)
        self._check_conflict("host", host, key, var)
        self.hosts[host].vars[key] = var

    # ----- inventory files -------------------------------------------------------------------
    def load_file(self, path: str) -> None:
        """One inventory file, by the parser Ansible would pick (see the module's docstring)."""
        self._file, self._seen = path, {}
        if _is_script(path):
            self.load_exported(path, export_inventory(path, "an executable inventory script"))
            return
        ext = os.path.splitext(path)[1].lower()
        if ext not in INVENTORY_EXTENSIONS and ext != "":
            self.load_ini(path)
            return
        try:
            data = load_yaml_file(path)
        except InventoryError:
            if self._ini_text(path) is not None:
                self.load_ini(path)  # Ansible's yaml plugin refuses it, its ini plugin reads it
                return
            raise
        if data is not None and not isinstance(data, LineMap) and self._ini_text(path) is not None:
            self.load_ini(path)  # "gpu01\ngpu02": a YAML string, an INI list of ungrouped hosts
            return
        if data is None:
            self.warnings.append(f"{path}: empty inventory file, no hosts in it")
            return
        if not isinstance(data, LineMap):
            raise InventoryError(
                f"{path}:1: an inventory must be a mapping of group names (usually starting with 'all:'), "
                f"found {_typename(data)}"
            )
        if "_meta" in data:
            raise InventoryError(
                f"{path}:{data.key_lines['_meta']}: this is 'ansible-inventory --list' JSON output, not an "
                "inventory; give the original inventory, or convert it with 'ansible-inventory -i <inventory> "
                "--list -y > inventory.yml'"
            )
        if isinstance(data.get("plugin"), str):
            self.load_exported(path, export_inventory(path, f"an inventory plugin configuration (plugin: {data['plugin']})"))
            return
        for key, value in data.items():
            where = f"{path}:{data.key_lines[key]}"
            self._parse_group(_name(key, "a group name", where), value, None, where)

    @staticmethod
    def _ini_text(path: str) -> str | None:
        """The file's text when it reads as an INI inventory (a section header or host lines)."""
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            return None
        try:
            parse_ini(text, path)
        except InventoryError:
            return text if looks_like_ini(text) else None  # report the INI error, not YAML's
        return text

    def load_ini(self, path: str) -> None:
        """An INI inventory (orchestrator/inventory/ini.py): its statements applied in file order."""
        self._file, self._seen = path, {}
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except UnicodeDecodeError as e:
            raise InventoryError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        except OSError as e:
            raise InventoryError(f"{path}: cannot read: {e.strerror or e}") from None
        for st in parse_ini(text, path):
            where = f"{path}:{st.line}"
            if isinstance(st, IniGroup):
                self._group(_name(st.name, "a group name", where))
            elif isinstance(st, IniChild):
                self._add_child(st.parent, _name(st.child, "a group name", where), where)
            elif isinstance(st, IniVar):
                self._set_group_var(st.group, _name(st.key, "a variable name", where), st.value, where)
            elif isinstance(st, IniHost):
                name, port = _split_port(_name(st.pattern, "a host name", where))
                for host in expand_host_pattern(name, where):
                    self._add_host(host, st.group)
                    if port is not None:
                        self._set_host_var(host, "ansible_port", port, where)
                    for key, value in st.vars.items():
                        self._set_host_var(host, _name(key, "a variable name", where), value, where)

    def load_exported(self, path: str, data: dict[str, Any]) -> None:
        """`ansible-inventory --list --export` JSON: groups with hosts, children and their own vars;
        `_meta.hostvars` with each host's own vars."""
        self._file, self._seen = path, {}
        where = f"{path} (via ansible-inventory)"
        meta = _exported(data.get("_meta"), dict, "_meta", where) or {}
        for gname, entry in data.items():
            if gname == "_meta":
                continue
            group = _name(gname, "a group name", where)
            entry = _exported(entry, dict, f"group '{group}'", where) or {}
            self._group(group)
            for child in _exported(entry.get("children"), list, f"the children of group '{group}'", where) or []:
                self._add_child(group, _name(child, "a group name", f"{where}: group '{group}'"), where)
            for h in _exported(entry.get("hosts"), list, f"the hosts of group '{group}'", where) or []:
                self._add_host(_name(h, "a host name", f"{where}: group '{group}'"), group)
            for key, value in (_exported(entry.get("vars"), dict, f"the vars of group '{group}'", where) or {}).items():
                self._set_group_var(group, _name(key, "a variable name", where), value, where)
        for h, hvars in (_exported(meta.get("hostvars"), dict, "_meta.hostvars", where) or {}).items():
            host = _name(h, "a host name", where)
            if host not in self.hosts:
                self._add_host(host, "ungrouped")
            for key, value in (_exported(hvars, dict, f"the vars of host '{host}'", where) or {}).items():
                self._set_host_var(host, _name(key, "a variable name", where), value, where)

    def _parse_group(self, name: str, data: Any, parent: str | None, where: str) -> None:
        if data is not None and not isinstance(data, LineMap):
            raise InventoryError(
                f"{where}: group '{name}' must be a mapping with hosts/children/vars (or empty), "
                f"found {_typename(data)}"
            )
        self._group(name)
        if parent is not None:
            self._add_child(parent, name, where)
        if data is None:
            return
        for key, raw in data.items():
            line = data.key_lines[key]
            kwhere = f"{self._file}:{line}"
            if key not in _SECTIONS:
                self.ignored.append(_ignored_key(kwhere, name, key, parent))
                self.warnings.append(self.ignored[-1])
                continue
            value = _section(raw, line)
            if value is None:
                continue
            if not isinstance(value, LineMap):
                raise InventoryError(
                    f"{kwhere}: '{key}' of group '{name}' must be a mapping ({_SECTIONS[key]}), "
                    f"found {_typename(value)}"
                )
            for item, sub in value.items():
                iwhere = f"{self._file}:{value.key_lines[item]}"
                if key == "vars":
                    self._set_group_var(name, _name(item, "a variable name", iwhere), sub, iwhere)
                elif key == "children":
                    self._parse_group(_name(item, "a group name", iwhere), sub, name, iwhere)
                else:
                    self._parse_host_entry(_name(item, "a host name", iwhere), sub, name, iwhere)

    def _parse_host_entry(self, pattern: str, hvars: Any, group: str, where: str) -> None:
        if hvars is not None and not isinstance(hvars, LineMap):
            raise InventoryError(
                f"{where}: variables of host '{pattern}' must be a mapping (variable: value) or empty, "
                f"found {_typename(hvars)}"
            )
        name, port = _split_port(pattern)
        for host in expand_host_pattern(name, where):
            self._add_host(host, group)
            if port is not None:
                self._set_host_var(host, "ansible_port", port, where)
            for key, value in (hvars or {}).items():
                kwhere = f"{self._file}:{hvars.key_lines[key]}"  # type: ignore[union-attr]
                self._set_host_var(host, _name(key, "a variable name", kwhere), value, kwhere)

    def load_host_list(self, text: str) -> None:
        # Ansible's host_list source: every name lands in "ungrouped". Ranges work here too.
        self._file, self._seen = _HOST_LIST, {}
        for item in split_outside_brackets(text, ","):
            item = item.strip()
            if item:
                self._parse_host_entry(item, None, "ungrouped", f"-i {text!r}")

    # ----- group_vars / host_vars ------------------------------------------------------------
    def _vars_file(self, path: str) -> dict[str, _Var]:
        if path not in self._vars_cache:
            data = load_yaml_file(path)
            if data is None:
                self._vars_cache[path] = {}
            elif not isinstance(data, LineMap):
                raise InventoryError(
                    f"{path}:1: a vars file must be a mapping (variable: value), found {_typename(data)}"
                )
            else:
                self._vars_cache[path] = {
                    _name(k, "a variable name", f"{path}:{data.key_lines[k]}"): _Var(
                        v, f"{path}:{data.key_lines[k]}"
                    )
                    for k, v in data.items()
                }
        return self._vars_cache[path]

    def _dir_vars_files(self, path: str) -> Iterator[str]:
        for full in walk_files(path, self.warnings, skip=lambda entry: entry.endswith("~")):
            if os.path.splitext(full)[1] in _VARS_SUFFIXES:
                yield full

    def _entity_vars(self, basedir: str, subdir: str, name: str) -> dict[str, _Var]:
        key = (basedir, subdir, name)
        if key not in self._entity_cache:
            self._entity_cache[key] = self._find_entity_vars(basedir, subdir, name)
        return self._entity_cache[key]

    def _find_entity_vars(self, basedir: str, subdir: str, name: str) -> dict[str, _Var]:
        if os.sep in name or name in (".", ".."):
            return {}
        stem = os.path.join(basedir, subdir, name)
        for suffix in _VARS_SUFFIXES:
            candidate = stem + suffix
            if os.path.exists(candidate):
                if not os.path.isdir(candidate) and not os.path.isfile(candidate):
                    self.warnings.append(f"{candidate}: not a regular file (a FIFO, socket or device); left out")
                    return {}
                files = list(self._dir_vars_files(candidate)) if os.path.isdir(candidate) else [candidate]
                merged: dict[str, _Var] = {}
                for f in files:
                    merged.update(self._vars_file(f))
                return merged
        return {}

    def _warn_orphan_vars(self) -> None:
        for basedir in dict.fromkeys(self.basedirs):
            for subdir, known, what in (
                ("group_vars", self.groups, "group"),
                ("host_vars", self.hosts, "host"),
            ):
                d = os.path.join(basedir, subdir)
                if not os.path.isdir(d):
                    continue
                for entry in sorted(os.listdir(d)):
                    if entry.startswith(".") or entry.endswith("~"):
                        continue
                    stem, ext = os.path.splitext(entry)
                    name = stem if ext in _VARS_SUFFIXES[1:] else entry
                    if name not in known:
                        self.warnings.append(
                            f"{os.path.join(d, entry)}: no {what} '{name}' in the inventory; these variables "
                            "are not used"
                        )

    # ----- finishing -------------------------------------------------------------------------
    def _depths_and_ancestors(self) -> tuple[dict[str, int], dict[str, frozenset[str]]]:
        # Depth is the longest path from "all" (Ansible raises a child's depth to parent depth + 1,
        # transitively). Kahn's order: the graph is acyclic (checked in _add_child), and deep
        # chains must not hit Python's recursion limit.
        pending = {g: len(self.groups[g].parents) for g in self.groups}
        depth = dict.fromkeys(self.groups, 0)
        ancestors: dict[str, frozenset[str]] = {}
        ready = [g for g, n in pending.items() if n == 0]
        while ready:
            g = ready.pop()
            parents = self.groups[g].parents
            ancestors[g] = frozenset(parents).union(*(ancestors[p] for p in parents))
            for child in self.groups[g].children:
                depth[child] = max(depth[child], depth[g] + 1)
                pending[child] -= 1
                if pending[child] == 0:
                    ready.append(child)
        return depth, ancestors

    def finish(self, sources: list[str]) -> Inventory:
        # Top-level groups outside "all:" still belong to all (Ansible's reconcile step).
        for name, gb in self.groups.items():
            if name != "all" and not gb.parents:
                self._add_child("all", name, name)
        ungrouped = self.groups["ungrouped"]
        # the membership a host has is in its own short list of groups, not in the group's list of
        # hosts (40,000 hosts under all: one list scan per host made loading quadratic)
        dropped: set[str] = set()
        for name, h in self.hosts.items():
            others = [g for g in h.groups if g not in ("all", "ungrouped")]
            if not others and "ungrouped" not in h.groups:
                ungrouped.hosts.append(name)
                h.groups.append("ungrouped")
            elif others and "ungrouped" in h.groups:
                h.groups.remove("ungrouped")
                dropped.add(name)
        if dropped:
            ungrouped.hosts = [n for n in ungrouped.hosts if n not in dropped]
        depth, ancestors = self._depths_and_ancestors()

        def order(names: set[str]) -> list[str]:
            return sorted(names, key=lambda n: (depth[n], self.groups[n].priority, n))

        groups: dict[str, Group] = {}
        group_file_vars: dict[str, dict[str, _Var]] = {}
        for name, gb in self.groups.items():
            own = dict(gb.vars)
            extra: dict[str, _Var] = {}
            for basedir in self.basedirs:
                extra.update(self._entity_vars(basedir, "group_vars", name))
            group_file_vars[name] = extra
            own.update(extra)
            groups[name] = Group(
                name=name,
                vars={k: v.value for k, v in own.items()},
                children=list(gb.children),
                hosts=list(gb.hosts),
                depth=depth[name],
                priority=gb.priority,
            )

        hosts: dict[str, Host] = {}
        for name, h in self.hosts.items():
            member: set[str] = set()
            for g in h.groups:
                member.add(g)
                member |= ancestors[g]
            member.add("all")
            ordered = order(member)
            merged: dict[str, _Var] = {}
            for g in ordered:  # 1 and 2: inventory-file group vars
                merged.update(self.groups[g].vars)
            for basedir in self.basedirs:  # 3: group_vars/all
                merged.update(self._entity_vars(basedir, "group_vars", "all"))
            for basedir in self.basedirs:  # 4: group_vars/<group>
                for g in ordered:
                    if g != "all":
                        merged.update(self._entity_vars(basedir, "group_vars", g))
            merged.update(h.vars)  # 5: inline host vars
            for basedir in self.basedirs:  # 6: host_vars/<host>
                for key, var in self._entity_vars(basedir, "host_vars", name).items():
                    inline = h.vars.get(key)
                    if inline is not None and inline.value != var.value:
                        self.warnings.append(
                            f"{var.where}: host '{name}': {key}={var.value!r} from host_vars replaces "
                            f"{key}={inline.value!r} given at {inline.where}"
                        )
                    merged[key] = var
            self._validate(name, merged)
            self._warn_templates(merged)
            hosts[name] = Host(
                name=name,
                vars={k: v.value for k, v in merged.items()},
                groups=ordered,
                origins={k: v.where for k, v in merged.items()},
            )
        self._warn_orphan_vars()
        return Inventory(hosts=hosts, groups=groups, sources=list(sources), warnings=list(self.warnings),
                         ignored=list(self.ignored))

    def _warn_templates(self, merged: dict[str, _Var]) -> None:
        # We connect with these values as written; Ansible would render Jinja2 first.
        for key in CONNECTION_KEYS:
            var = merged.get(key)
            if (
                var is not None
                and isinstance(var.value, str)
                and "{{" in var.value
                and not is_playbook_python(var.value)
                and var.where not in self._templated
            ):
                self._templated.add(var.where)
                self.warnings.append(
                    f"{var.where}: {key}={var.value!r} is a Jinja2 template; templates are not evaluated, "
                    "the text is used as written"
                )

    @staticmethod
    def _validate(host: str, merged: dict[str, _Var]) -> None:
        conn = merged.get("ansible_connection")
        known = connections.known()
        if conn is not None and conn.value not in known:
            raise InventoryError(
                f"{conn.where}: host '{host}': ansible_connection {conn.value!r} is not supported "
                f"(use one of: {', '.join(known)})"
            )
        for key in ("ansible_port", "ansible_ssh_port"):
            port = merged.get(key)
            if port is None:
                continue
            value = port.value
            ok = (
                not isinstance(value, bool) and isinstance(value, (int, str)) and is_digits(str(value).strip())
            )
            if not ok or not 1 <= int(value) <= 65535:
                extra = " (Jinja2 templates are not evaluated)" if "{{" in str(value) else ""
                raise InventoryError(
                    f"{port.where}: host '{host}': {key} must be a port number 1-65535, found {value!r}{extra}"
                )


def _ignored_key(where: str, group: str, key: Any, parent: str | None) -> str:
    """The warning for a key of a group that is not hosts, children or vars.  Ansible skips it
    ("Skipping unexpected key"), and an inventory with `hots:` for `hosts:` then has no hosts at
    all: the key is named with the section it resembles, or, for a top-level group named like a
    section (`hots:` at the top), with what the group was likely meant to be."""
    near_key = difflib.get_close_matches(str(key), list(_SECTIONS), n=1, cutoff=0.6)
    near_group = difflib.get_close_matches(group, list(_SECTIONS), n=1, cutoff=0.6) if parent is None else []
    if near_key:
        hint = f" (did you mean '{near_key[0]}'?)"
    elif near_group:
        hint = f" (is the top-level group '{group}' meant to be '{near_group[0]}:' under 'all:'?)"
    else:
        hint = ""
    return (f"{where}: group '{group}': key {str(key)!r}{hint} ignored; only hosts, children and vars are read "
            "(Ansible ignores it too)")


def _is_script(path: str) -> bool:
    """An executable file that starts with `#!`: Ansible's script inventory plugin runs it."""
    if os.path.splitext(path)[1].lower() in INVENTORY_EXTENSIONS or not os.access(path, os.X_OK):
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"#!"
    except OSError:
        return False


T = TypeVar("T", dict, list)


def _exported(value: Any, kind: type[T], what: str, where: str) -> T | None:
    """A value of an exported inventory (a script's or plugin's JSON) of the kind it must be: a
    string where a list of hosts belongs would otherwise be read letter by letter as host names."""
    if value is None or isinstance(value, kind):
        return value
    shape = "a list (of names)" if kind is list else "a mapping"
    raise InventoryError(f"{where}: {what} must be {shape}, found {_typename(value)[:80]}; "
                         "fix the inventory script or plugin")


def walk_files(directory: str, warnings: list[str], skip: Callable[[str], bool] = lambda entry: False,
               skip_dirs: Collection[str] = ()) -> Iterator[str]:
    """The regular files below `directory`, sorted, recursing through subdirectories (symbolic links
    followed, as Ansible does) but never twice into one directory: a link back up the tree is a loop
    that would never end; it is named in `warnings` and left out.  Hidden entries, those `skip`
    names and directories in `skip_dirs` are left out; so is anything but a regular file (a FIFO
    would block the load for ever, a device never end), with a warning."""
    seen: set[str] = set()

    def walk(path: str) -> Iterator[str]:
        real = os.path.realpath(path)
        if real in seen:
            warnings.append(f"{path}: a directory link loop (it leads back to {real}); not read again")
            return
        seen.add(real)
        try:
            entries = sorted(os.listdir(path))
        except OSError as e:
            warnings.append(f"{path}: cannot list the directory: {e.strerror or e}; left out")
            return
        for entry in entries:
            if entry.startswith(".") or skip(entry):
                continue
            full = os.path.join(path, entry)
            try:
                mode = os.stat(full).st_mode
            except OSError as e:  # a dangling link, or a loop of links
                warnings.append(f"{full}: {e.strerror or e}; left out")
                continue
            if stat.S_ISDIR(mode):
                if entry not in skip_dirs:
                    yield from walk(full)
            elif stat.S_ISREG(mode):
                yield full
            else:
                warnings.append(f"{full}: not a regular file (a FIFO, socket or device); left out")

    yield from walk(directory)


def _inventory_files(directory: str, warnings: list[str]) -> Iterator[str]:
    """Inventory files in a directory, sorted, recursing; group_vars/host_vars, hidden entries and
    the extensions Ansible ignores skipped."""
    yield from walk_files(directory, warnings, skip=lambda entry: entry.lower().endswith(IGNORED_EXTENSIONS),
                          skip_dirs=("group_vars", "host_vars"))


def load_inventory(sources: list[str]) -> Inventory:
    """Load the ``-i`` values, in order, into one Inventory. Raises InventoryError naming file and line."""
    if not sources:
        raise InventoryError("no inventory given; pass -i FILE, -i DIR or -i host1,host2,")
    b = _Builder()
    for src in sources:
        if os.path.isdir(src):
            b.basedirs.append(src)
            files = list(_inventory_files(src, b.warnings))
            if not files:
                b.warnings.append(f"{src}: directory has no inventory files")
            for f in files:
                b.load_file(f)
        elif os.path.isfile(src):
            b.basedirs.append(os.path.dirname(src) or ".")
            b.load_file(src)
        elif "," in src:
            b.load_host_list(src)
        elif os.path.exists(src):
            raise InventoryError(f"inventory source {src!r} is neither a file nor a directory")
        else:
            raise InventoryError(
                f"inventory source {src!r} not found (give a YAML file, a directory, or a comma list "
                "like 'host1,host2,')"
            )
    return b.finish(sources)
