"""``ansible-inventory --list`` and ``--graph`` views of an Inventory (pure: data in, data out)."""

from __future__ import annotations

from typing import Any

from orchestrator.inventory.model import Host, Inventory, InventoryError


def inventory_list(inv: Inventory, hosts: list[Host] | None = None) -> dict[str, Any]:
    """The ``ansible-inventory --list`` JSON shape.

    ``{"_meta": {"hostvars": {host: merged vars}}, "all": {"children": [...]},
    group: {"hosts": [...], "children": [...]}}``; as in Ansible, ``all`` lists no hosts, empty
    keys and empty groups are left out (``all.children`` still names them), and hosts without
    variables are absent from ``hostvars``. ``hosts`` (e.g. from select_hosts) restricts the
    output like ``--limit``.
    """
    available = set(inv.hosts) if hosts is None else {h.name for h in hosts}
    result: dict[str, Any] = {}
    seen: set[str] = set()
    # Iterative depth-first walk in Ansible's order (a group is expanded at its first mention).
    stack = ["all"]
    while stack:
        name = stack.pop()
        group = inv.groups[name]
        entry: dict[str, Any] = {}
        if name != "all":
            members = [h for h in group.hosts if h in available]
            if members:
                entry["hosts"] = members
        if group.children:
            entry["children"] = list(group.children)
        if entry:
            result[name] = entry
        for child in reversed(group.children):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    hostvars = {n: dict(h.vars) for n, h in inv.hosts.items() if n in available and h.vars}
    return {"_meta": {"hostvars": hostvars}, **result}


def inventory_graph(inv: Inventory, group: str = "all", hosts: list[Host] | None = None) -> str:
    """The ``ansible-inventory --graph [group]`` tree: ``@group:`` lines and ``|--`` indentation."""
    if group not in inv.groups:
        raise InventoryError(f"--graph needs a group name; there is no group '{group}'")
    available = set(inv.hosts) if hosts is None else {h.name for h in hosts}
    lines: list[str] = []

    def line(text: str, depth: int) -> str:
        return "  |" * depth + "--" + text if depth else text

    # Explicit work list (deep group chains must not hit the recursion limit); a group under two
    # parents is drawn under each, as Ansible does; a group's hosts come after its child groups.
    stack: list[tuple[bool, str, int]] = [(True, group, 0)]
    while stack:
        is_group, name, depth = stack.pop()
        if not is_group:
            lines.append(line(name, depth))
            continue
        lines.append(line(f"@{name}:", depth))
        g = inv.groups[name]
        if name != "all":
            stack.extend((False, h, depth + 1) for h in reversed(g.hosts) if h in available)
        stack.extend((True, c, depth + 1) for c in reversed(g.children))
    return "\n".join(lines)
