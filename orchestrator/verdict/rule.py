"""What a finding rule is: everything fleetprobe knows about one finding id, in one declaration.

A rule is declared once, in the module of verdict/rules/ its id's prefix names (`gpu.lost` in
verdict/rules/gpu.py); nothing else in orchestrator/ spells the id.  The check that raises it
(verdict/checks/<area>.py) names it by its declaration (`rules.gpu.LOST.id`), coverage reads what
it needs, the action class and its reason come from it, the grouping of one fault's findings reads
which rules it follows from (each rules module's `causes()`), and docs/findings.md's rows are
rendered from it (tests/verdict/test_rules.py).

Pure data: no rule module reads a check, so any check may name any rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from orchestrator.facts.model import Facts
from orchestrator.verdict.causes import Cause, Scope
from orchestrator.verdict.findings import Action, Finding

__all__ = ["Doc", "Needs", "Rule", "Unjudged", "follows"]

# facts -> {finding id: why its rule was not judged}: what the measured facts themselves hold back
Unjudged = Callable[[Facts], Mapping[str, str]]


@dataclass(frozen=True)
class Needs:
    """What a rule's check must have measured on a host before its silence means "passed";
    verdict/coverage.py reads it to tell pass from not judged.  Sections are facts section keys
    (facts/registry.py names the probe behind each)."""

    sections: tuple[str, ...] = ()  # every one measured: its probe ran ok and the section is there
    any_of: tuple[str, ...] = ()  # at least one measured (the check reads whichever ran)
    expect: tuple[str, ...] = ()  # at least one of these expectations set: the check compares with it
    # expectations that turn the check on: judged only where one of them is true (`gdr: false` or no
    # `security_floor` means the check was not asked for, which is not a pass)
    switched_on: tuple[str, ...] = ()
    gpus: bool = False  # at least one GPU seen: on a host without GPUs there is nothing to judge
    # a section whose facts say `readable: false` (the kernel log) was not measured, except for the
    # check that reports exactly that
    unreadable_ok: bool = False
    # What the measured facts themselves hold back (one GPU, no result, a platform limitation, a
    # stronger finding that stands for this one): facts -> {finding id: why}, a pure function that
    # shares its steps with the check, so the check and its coverage cannot disagree.  A rule says
    # `held_back=True`; the check area hands the function over (its `HELD_BACK`), and the registry
    # (verdict/checks/__init__.py) puts the two together.
    unjudged: Unjudged | None = None


@dataclass(frozen=True)
class Doc:
    """The rule's row of docs/findings.md's catalog, as markdown cells."""

    severity: str  # the default severity, and the condition where it depends on one
    kind: str  # fault / platform_limitation / unknown
    means: str  # what the finding says about the host
    todo: str  # what an operator does about it


@dataclass(frozen=True)
class Rule:
    id: str  # the stable dotted id findings carry
    action: Action  # what the finding asks of its host (verdict/findings.py Action: the escalation order)
    because: str  # the facts that justify the action, as an operator reads them
    needs: Needs  # what must have been measured before silence is a pass
    doc: Doc
    service: str | None = None  # RESTART_SERVICE: the systemd unit
    refine: Callable[[Finding], Action | None] | None = None  # the finding's own facts, where they decide
    # the facts the check reads hold some of its judgements back (Needs.unjudged, from the check area)
    held_back: bool = False
    # about the whole host: its findings name no device (tests/verdict/test_finding_devices.py)
    host_wide: bool = False
    # names devices where the finding is about some, none where it is about the host: why
    host_wide_when: str | None = None
    # raised by a fleet-wide step (decided across hosts): `probe merge` judges it again over all runs
    fleet: bool = False
    # raised by a host check and, under this subject, by a fleet check: those findings are the fleet's
    fleet_subject: str | None = None
    # The fabric's own subject, not its host's (a rail, a switch, a path or pair between ports):
    # raised on every host the fault touches, but no host is failed, drained or remedied for it
    # (verdict/fabric_faults.py); `fabric_when`: the finding's own facts decide (None: `fabric` alone)
    fabric: bool = False
    fabric_when: Callable[[Finding], bool] | None = None

    def action_of(self, f: Finding) -> Action:
        refined = self.refine(f) if self.refine is not None else None
        return refined or self.action

    def of_fabric(self, f: Finding) -> bool:
        """`f` is about the fabric, not about its host: the localisation points at no host's HCA,
        port or GPU."""
        return self.fabric or (self.fabric_when is not None and self.fabric_when(f))

    def catalog_row(self) -> str:
        d = self.doc
        return f"| `{self.id}` | {d.severity} | {d.kind} | {d.means} | {d.todo} |"

    def action_row(self) -> str:
        why = self.because + (f" (restarts `{self.service}`)" if self.service else "")
        return f"| `{self.id}` | `{self.action.value}` | {why}{'; refined by the finding' if self.refine else ''} |"


def follows(consequence: Rule, roots: tuple[Rule, ...], scope: Scope = Scope.HOST,
            when: Callable[[Finding, Finding], bool] | None = None) -> Iterator[Cause]:
    """`consequence`'s findings follow from any of `roots`' met in `scope` (verdict/causes.py),
    the roots in the order they are preferred."""
    for root in roots:
        yield Cause(root.id, consequence.id, scope, when)
