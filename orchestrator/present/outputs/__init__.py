"""Machine-readable outputs of a run for cron, Prometheus, CI and the next automation.

Each module is pure (fleet.json dict in, text or dict out) plus one atomic writer:
`prometheus` (textfile collector), `junit` (CI), `ansible_inventory` (dynamic inventory JSON),
`tabular` (csv/yaml/json of the hosts and findings tables).  Facts are read only through
`outputs.facts`.
"""

from orchestrator.store.atomic import write_output as write_atomic

__all__ = ["write_atomic"]
