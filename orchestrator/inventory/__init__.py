"""Ansible-compatible YAML inventory: loading, ranges, variables and --limit patterns."""

from orchestrator.inventory.model import Group, Host, Inventory, InventoryError

__all__ = ["Group", "Host", "Inventory", "InventoryError"]
