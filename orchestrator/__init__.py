__version__ = "0.1.0"

# The transport registry tells the inventory which ansible_connection values exist
# (orchestrator/inventory/connections.py); importing it here makes that true for every entry point.
from orchestrator.transport import factory as _transport_registry  # noqa: F401
