"""Ansible dynamic-inventory JSON, so the next automation can target what a run found:

    ansible -i fleetprobe-inventory.sh finding_pcie_link_downgraded -m reboot

Groups: `health_<healthy|degraded|failed|unreachable|incomplete>`, `class_<topology class>`,
`finding_<finding id>` (any severity), `severity_<fail|warn|info>` (hosts with at least one
finding of it), `outcome_<host outcome>`.  Group names are reduced to what Ansible accepts without
warnings (letters, digits, underscore, not starting with a digit).  Each host keeps every
connection variable its source inventory gave it (ansible_host, ansible_port, ansible_user, its
key file, ansible_connection, its interpreter, become), so `ansible -i OUT HOST -m ping` reaches
it as the source inventory did.

`render_inventory` gives the `--list` shape of an inventory script (`_meta.hostvars` included);
`render_static_inventory` the YAML-inventory shape (`all: {hosts:, children:}`).  `--ansible-inventory
FILE` writes the YAML inventory, which `ansible-inventory -i FILE --list` and `ansible -i FILE`
read through the yaml inventory plugin (the script shape in a plain file is refused by Ansible:
"Invalid hosts entry ... requires a dictionary").

A host's name is a key Ansible expands (`a[1:3]` is three hosts, `a:22` a port) and a play
targets by pattern: a name inventory/targets.py refuses is left out of every shape, and the YAML
inventory names it in a comment line.  Every string value of the YAML inventory that Ansible could
template (one holding a `{`) is `!unsafe` (inert.py): a finding id or a connection value of a
stored run is never templated when a play reads the host's variables; the others stay plain, so
`ansible-inventory --list` shows them as they are.  The JSON shapes cannot carry that tag: they are for tools that read
JSON, and hold the same checked names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from orchestrator.facts import read as F
from orchestrator.files import jsontext
from orchestrator.inventory.targets import name_problem, shown
from orchestrator.present.outputs import write_atomic
from orchestrator.present.outputs.inert import dump, inert
from orchestrator.verdict.fabric_faults import host_findings
from orchestrator.verdict.result import FleetResult

_BAD = re.compile(r"[^A-Za-z0-9_]+")


def group_name(prefix: str, raw: Any) -> str:
    """`prefix_<raw>` with every run of invalid characters made one underscore."""
    body = _BAD.sub("_", str(raw)).strip("_").lower() or "unnamed"
    name = f"{prefix}_{body}" if prefix else body
    return f"_{name}" if name[0].isdigit() else name


def _groups_and_vars(fleet: FleetResult) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    groups: dict[str, dict[str, None]] = {}  # an insertion-ordered set per group: 10k hosts stay linear
    origin: dict[str, str] = {}  # group name -> the raw value it came from, to keep distinct values apart
    hostvars: dict[str, dict[str, Any]] = {}

    def add(prefix: str, raw: Any, host: str) -> None:
        name = group_name(prefix, raw)
        key = f"{prefix}:{raw}"
        n = 2
        while name in origin and origin[name] != key:  # "a.b_c" and "a_b.c" must not merge
            name = f"{group_name(prefix, raw)}_{n}"
            n += 1
        origin[name] = key
        groups.setdefault(name, {})[host] = None

    for h in fleet.hosts:
        name = h.name
        if name_problem(name) is not None:  # left_out() names it
            continue
        mine = host_findings(fleet.findings_of(name))  # a group to act on never holds a rail's hosts
        add("health", h.health.state.value, name)
        if h.topology_class:
            add("class", h.topology_class, name)
        add("outcome", h.outcome, name)
        for f in mine:
            add("finding", f.id, name)
            add("severity", f.severity.value, name)
        # how to reach it, as the source inventory said; the address as probed where it said none
        hv: dict[str, Any] = dict(h.connection)
        if "ansible_host" not in hv and "ansible_ssh_host" not in hv and h.address != name \
                and h.address != "(imported)":
            hv["ansible_host"] = h.address
        hv.update({
            "fleetprobe_health": h.health.state.value,
            "fleetprobe_outcome": h.outcome,
            "fleetprobe_class": h.topology_class,
            "fleetprobe_fingerprint": h.fingerprint,
            "fleetprobe_gpu_count": F.gpu_count(h.facts),
            "fleetprobe_nvlink_links_up": F.nvlink_links_up(h.facts),
            "fleetprobe_findings": sorted({f.id for f in mine}),
        })
        hostvars[name] = hv
    return {g: list(members) for g, members in groups.items()}, hostvars


def left_out(fleet: FleetResult) -> list[tuple[str, str]]:
    """The hosts no inventory shape holds, with why (inventory/targets.py)."""
    return [(h.name, why) for h in fleet.hosts if (why := name_problem(h.name)) is not None]


def render_inventory(fleet: FleetResult) -> dict[str, Any]:
    """The JSON an inventory script prints for `--list`."""
    groups, hostvars = _groups_and_vars(fleet)
    out: dict[str, Any] = {name: {"hosts": members} for name, members in sorted(groups.items())}
    out["all"] = {"hosts": list(hostvars), "children": sorted(groups)}
    out["_meta"] = {"hostvars": hostvars}
    return out


def render_static_inventory(fleet: FleetResult) -> dict[str, Any]:
    """The same groups in the YAML-inventory shape (`all: {hosts:, children:}`), as JSON."""
    groups, hostvars = _groups_and_vars(fleet)
    return {"all": {
        "hosts": {name: hv for name, hv in hostvars.items()},
        "children": {name: {"hosts": dict.fromkeys(members, None)} for name, members in sorted(groups.items())},
    }}


SHAPES = ("yaml", "static-json", "script-json")


def write_inventory(fleet: FleetResult, path: str | Path, shape: str = "yaml") -> Path:
    """`yaml`: the YAML inventory (what --ansible-inventory writes); `static-json`: the same in
    JSON; `script-json`: what an inventory script prints for `--list`."""
    if shape == "yaml":
        text = "# Ansible inventory written by fleetprobe (groups: health_*, class_*, finding_*, severity_*, outcome_*)\n"
        text += "".join(f"# not an Ansible host name, left out: {shown(name)}: {why}\n" for name, why in left_out(fleet))
        doc = render_static_inventory(fleet)
        hosts = doc["all"]["hosts"]
        doc["all"]["hosts"] = {name: inert(hv, every=False) for name, hv in hosts.items()}
        text += dump(doc, width=1000, allow_unicode=True)
    elif shape in SHAPES:
        doc = render_static_inventory(fleet) if shape == "static-json" else render_inventory(fleet)
        text = jsontext.dumps(doc, indent=2, sort_keys=False) + "\n"
    else:
        raise ValueError(f"unknown inventory shape {shape!r}; use one of {', '.join(SHAPES)}")
    return write_atomic(path, text)
