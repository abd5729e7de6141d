"""Ansible-compatible YAML inventory: loading, ranges, variables and --limit patterns."""

from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.model import Group, Host, Inventory, InventoryError
from orchestrator.inventory.patterns import PatternError, select_hosts
from orchestrator.inventory.render import inventory_graph, inventory_list

__all__ = [
    "Group",
    "Host",
    "Inventory",
    "InventoryError",
    "PatternError",
    "inventory_graph",
    "inventory_list",
    "load_inventory",
    "select_hosts",
]
