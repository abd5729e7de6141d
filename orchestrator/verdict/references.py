"""What a run judges its hosts against besides their expectations: one value, made by the plan
(api/plan.py) and handed to the verdict, so a stored run is judged again against the same files.

* the security floor (facts/security.py): NVIDIA's bulletins, the shipped file or `--security-floor FILE`.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.facts.security import SecurityFloor


@dataclass(frozen=True)
class References:
    security_floor: SecurityFloor | None = None  # None: the shipped floor
