"""What to do about each finding: the action class its rule declares, and the facts that justify it.

Operators want the action, not only the diagnosis (OCI's GPU scanner: software fix / reboot /
reboot-then-repair; Nebius: node problem -> re-check -> hardware problem).  Each rule declares its
class and reason (verdict/rules/<prefix>.py); a rule may refine its class from the finding itself
where the id spans several remedies (an Xid's own action, NVML's recovery action).

The classes escalate in the order declared.  `probe remediate` (verdict/remedy.py) turns the
disruptive ones into an Ansible playbook a person may approve; fleetprobe never runs it.

Pure: a finding in, its action out.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.verdict import rules
from orchestrator.verdict.findings import Action, Finding
from orchestrator.verdict.rule import Rule

__all__ = ["ACTIONS", "HOST_WIDE", "HOST_WIDE_AT_TIMES", "Action", "Rule", "action_of", "decide"]

# Every rule by id: its action class, reason and service (tests/verdict/test_actions.py).
ACTIONS: Mapping[str, Rule] = rules.BY_ID

# Rules about the whole host: their findings name no device (`devices` is empty), by design.
# tests/verdict/test_finding_devices.py holds every judged finding to it: a finding of any other id
# names its devices, one of these names none (HOST_WIDE_AT_TIMES: both, as the finding says).
HOST_WIDE: frozenset[str] = frozenset(r.id for r in rules.ALL if r.host_wide)
# Rules whose finding names devices where it is about some, and none where it is about the host.
HOST_WIDE_AT_TIMES: dict[str, str] = {r.id: r.host_wide_when for r in rules.ALL if r.host_wide_when}
UNKNOWN_ID = "an id this fleetprobe does not know"


def decide(f: Finding) -> tuple[Action, str]:
    """The finding's action class and the reason its rule gives: decided once, when the finding is
    made (verdict/findings.py Finding.__post_init__); every reader takes the finding's own."""
    rule = ACTIONS.get(f.id)
    return action_of(f), (rule.because if rule is not None else UNKNOWN_ID)


def action_of(f: Finding) -> Action:
    """The finding's action class (its rule's, refined by the finding where the rule says so);
    an id no rule declares (a stored run of a newer fleetprobe) is to be looked at."""
    rule = ACTIONS.get(f.id)
    return rule.action_of(f) if rule is not None else Action.RESEAT_INSPECT
