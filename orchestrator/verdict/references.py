"""What a run judges its hosts against besides their expectations: one value, made by the plan
(api/plan.py) and handed to the verdict, so a stored run is judged again against the same files.

* the security floor (facts/security.py): NVIDIA's bulletins, the shipped file or `--security-floor FILE`;
* the fleet baselines (verdict/baseline.py): the thresholds of each host (a playbook's `baselines:`
  over the table) and a class baseline exported from a known-good fleet (`--baseline-file`);
* the run history (verdict/offenders.py): what the previous complete runs of the same inventory
  said of their hosts, for naming repeat offenders (api/session.py reads it from the results);
* the scheduler's view (inventory/scheduler.py): what Slurm or Kubernetes advertises of each node,
  reconciled with the verdict (verdict/checks/scheduler.py);
* the classes carried forward: a host this run did not class, as the last run that measured it
  classed it (verdict/classes.py:CarriedClass), shown as carried.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from orchestrator.facts.security import SecurityFloor
from orchestrator.inventory.scheduler import SchedulerView
from orchestrator.verdict.baseline import Reference, Threshold
from orchestrator.verdict.classes import CarriedClass
from orchestrator.verdict.offenders import PastRun


@dataclass(frozen=True)
class References:
    security_floor: SecurityFloor | None = None  # None: the shipped floor
    baseline: Reference | None = None  # None: each class against itself in this run
    thresholds_for: Callable[[str], Mapping[str, Threshold]] | None = None  # host -> its thresholds; None: the table
    # the earlier runs, oldest first; None: no history was read (merge, import), so no host is judged
    history: tuple[PastRun, ...] | None = None
    # hosts this run did not class -> their class in the last run that measured them (api/session.py
    # reads the history only when asked, for those hosts); None: no history (merge, import)
    carry: Callable[[Collection[str]], Mapping[str, CarriedClass]] | None = None
    # what Slurm or Kubernetes advertises about the hosts (--slurm, --k8s-nodes); None: not reconciled
    scheduler: SchedulerView | None = None
