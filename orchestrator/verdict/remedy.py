"""What to do about a judged fleet, host by host, and the blast-radius guard over it.

Each host's faults (root findings of severity warn or fail, verdict/causes.py) carry an action
class (verdict/actions.py).  `plan` turns them into what a person may approve: which hosts to drain
in Slurm, which GPUs to reset (`nvidia-smi -r`, only when idle: the playbook checks), which
services to restart, which hosts to reboot, and which need hands (reseat, inspect, RMA) or a
configuration change; present/outputs/remediation.py writes it as an Ansible playbook, the Slurm
drain list (present/outputs/slurm_drain.py) writes its drain part.  fleetprobe never runs either.

The guard (NVSentinel's circuit breaker): one bad rule, a wrong threshold, a broken probe, can
call a whole fleet faulty.  A list that would disrupt (drain, reset, restart, reboot) more than
`max_share` of the fleet, or of one topology class, is refused unless forced, and the refusal
names the rules (finding ids) that would have taken the hosts.  At least one host is always
allowed: one host is never a blast.

A drain fleetprobe writes carries a reason that starts with DRAIN_REASON_PREFIX: it is how the
generated lines and plays tell fleetprobe's own drains from someone else's when they run (they
read the node's reason from slurmctld then), so that they never overwrite a foreign reason and
resume only their own drains.  `resume_plan` is the resume list's decision: the hosts this run
found clean.

The plan holds only hosts an artefact can name as exactly one host (inventory/targets.py: a name
Ansible would read as a pattern or template, or Slurm as a list, is refused): a refused host is in
`left_out`, with why, and is not counted as taken out, since nothing written will touch it.

Pure: the judged fleet in, the plan out.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from orchestrator.inventory.targets import name_problem
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict.actions import ACTIONS, Action
from orchestrator.verdict.fabric_faults import host_findings
from orchestrator.verdict.findings import DeviceKind, Finding, Kind, Severity
from orchestrator.verdict.health import Health
from orchestrator.verdict.result import FleetResult

DEFAULT_MAX_SHARE = 0.10
# Every drain reason fleetprobe writes starts with this (slurm_drain.py, remediation.py): a node whose
# reason does not is someone else's drain, never overwritten and never resumed.
DRAIN_REASON_PREFIX = "fleetprobe "
# Actions that take a host away from its jobs: a host with one of these is drained first.
DISRUPTIVE = (Action.RESET_GPU, Action.RESTART_SERVICE, Action.REBOOT, Action.RESEAT_INSPECT, Action.RMA)


# Devices whose bus ids are GPUs: a GPU, the GPU of an NVLink link, both GPUs of a pair.
_GPU_KINDS = (DeviceKind.GPU, DeviceKind.NVLINK, DeviceKind.GPU_PAIR)


@dataclass(frozen=True)
class Step:
    """One fault of a host and what it asks for."""

    finding: Finding  # the root
    action: Action
    because: str


@dataclass(frozen=True)
class HostPlan:
    host: str
    steps: tuple[Step, ...]

    @property
    def action(self) -> Action:
        """The most disruptive of its steps: a reboot also resets every GPU and restarts every service."""
        return max((s.action for s in self.steps), key=lambda a: a.rank)

    @property
    def disruptive(self) -> bool:
        return self.action in DISRUPTIVE

    def of(self, action: Action) -> list[Step]:
        return [s for s in self.steps if s.action is action]

    def gpus_to_reset(self) -> list[str]:
        """Bus ids of the GPUs its reset steps' findings name in their devices (a reset of a GPU
        whose bus id the finding does not know is left to a person)."""
        out: list[str] = []
        for s in self.of(Action.RESET_GPU):
            for d in s.finding.devices:
                if d.kind in _GPU_KINDS:
                    out.extend(b for b in d.bus_ids() if b not in out)
        return out

    def services(self) -> list[str]:
        out: list[str] = []
        for s in self.of(Action.RESTART_SERVICE):
            unit = ACTIONS[s.finding.id].service if s.finding.id in ACTIONS else None
            if unit and unit not in out:
                out.append(unit)
        return out

    @property
    def rules(self) -> list[str]:
        return sorted({s.finding.id for s in self.steps if s.action in DISRUPTIVE})


@dataclass(frozen=True)
class Refusal:
    """The guard's refusal: `hosts` of `of` in `scope` would be disrupted, `limit` may be."""

    scope: str  # "the fleet" or "class <name>"
    hosts: int
    of: int
    limit: int
    rules: tuple[tuple[str, int], ...]  # finding id -> hosts it would take, most first

    def text(self, max_share: float) -> str:
        rules = ", ".join(f"{fid} ({n} host(s))" for fid, n in self.rules[:5])
        return (f"{self.hosts} of {self.of} host(s) of {self.scope} would be taken out, more than "
                f"{max_share:.0%} ({self.limit} allowed): the rules that would take them: {rules}")


@dataclass(frozen=True)
class LeftOut:
    """A host with a fault that asks for something whose name no artefact may carry."""

    host: str
    why: str  # inventory/targets.py name_problem


@dataclass(frozen=True)
class Plan:
    run_id: str
    hosts: tuple[HostPlan, ...]  # hosts with a fault that asks for something, in the run's order
    max_share: float
    forced: bool
    refused: tuple[Refusal, ...] = ()
    fleet_size: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    left_out: tuple[LeftOut, ...] = ()  # hosts the plan needs but cannot name: not in `hosts`, not counted
    rerun: tuple[str, ...] = ("probe", "run", "-q")  # the run's check again (rerun_argv), `-l HOST` appended
    rerun_in: str | None = None  # the directory the run was started in (its relative paths are from there)

    @property
    def blocked(self) -> bool:
        """The guard refused and was not overridden: nothing disruptive may be written."""
        return bool(self.refused) and not self.forced

    def disruptive(self) -> list[HostPlan]:
        return [h for h in self.hosts if h.disruptive]

    def refusal_text(self) -> str:
        return "; ".join(r.text(self.max_share) for r in self.refused)


def _roots(findings: Iterable[Finding]) -> list[Finding]:
    """The host's faults to act on: root findings of severity warn or fail (platform limitations and
    readings fleetprobe could not take ask nothing of the host)."""
    return [f for f in findings if f.is_root and f.severity in (Severity.FAIL, Severity.WARN) and f.kind is Kind.FAULT]


def host_plan(host: str, findings: Iterable[Finding], min_severity: Severity = Severity.WARN) -> HostPlan | None:
    steps = []
    for f in _roots(findings):
        if f.severity.rank < min_severity.rank:
            continue
        if f.action is Action.NONE:
            continue
        steps.append(Step(f, f.action, f.because))
    return HostPlan(host, tuple(steps)) if steps else None


def guard(disrupted: Mapping[str, list[str]], classes: Mapping[str, str | None], max_share: float
          ) -> tuple[Refusal, ...]:
    """Refusals for `disrupted` (host -> the rules that take it) against the fleet (`classes`: every
    host of the run -> its topology class) and each class."""
    def limit(n: int) -> int:
        return max(1, math.floor(n * max_share + 1e-9))

    def rules(hosts: Iterable[str]) -> tuple[tuple[str, int], ...]:
        count = Counter(fid for h in hosts for fid in disrupted[h])
        return tuple(sorted(count.items(), key=lambda kv: (-kv[1], kv[0])))

    out = []
    n = len(classes)
    if len(disrupted) > limit(n):
        out.append(Refusal("the fleet", len(disrupted), n, limit(n), rules(disrupted)))
    members: dict[str, list[str]] = defaultdict(list)
    for h, cls in classes.items():
        if cls:
            members[cls].append(h)
    for cls, hosts in sorted(members.items()):
        hit = [h for h in hosts if h in disrupted]
        if len(hit) > limit(len(hosts)):
            out.append(Refusal(f"class {cls}", len(hit), len(hosts), limit(len(hosts)), rules(hit)))
    return tuple(out)


def _nameable(hosts: Iterable[HostPlan]) -> tuple[tuple[HostPlan, ...], tuple[LeftOut, ...]]:
    """The hosts an artefact may name, and the others with why (a refused name targets no one)."""
    kept: list[HostPlan] = []
    left: list[LeftOut] = []
    for hp in hosts:
        why = name_problem(hp.host)
        if why is None:
            kept.append(hp)
        else:
            left.append(LeftOut(hp.host, why))
    return tuple(kept), tuple(left)


def rerun_argv(run: RunMeta) -> tuple[str, ...]:
    """`probe run -q` over the run's own inventories and playbook: the check that found the faults,
    to be limited to one host (`-l HOST`) once it has been acted on."""
    argv = ["probe", "run", "-q"]
    for inv in run.inventory:
        argv += ["-i", inv]
    if run.playbook:
        argv += ["-p", run.playbook]
    return tuple(argv)


def plan(fleet: FleetResult, max_share: float = DEFAULT_MAX_SHARE, force: bool = False,
         min_severity: Severity = Severity.WARN) -> Plan:
    """What to do about every host's faults of `min_severity` or worse, guarded."""
    classes: dict[str, str | None] = {}
    hosts = []
    for h in fleet.hosts.with_facts(()):
        classes[h.name] = h.topology_class
        # the fabric's faults raised on the host are not its own: no step on a host fixes a rail
        hp = host_plan(h.name, host_findings(fleet.findings_of(h.name)), min_severity)
        if hp is not None:
            hosts.append(hp)
    kept, left = _nameable(hosts)
    disrupted = {hp.host: hp.rules for hp in kept if hp.disruptive}
    refused = guard(disrupted, classes, max_share)
    return Plan(fleet.run.id or "run", kept, max_share, force, refused, len(classes), left_out=left,
                rerun=rerun_argv(fleet.run), rerun_in=fleet.run.cwd)


def drain_plan(fleet: FleetResult, max_share: float = DEFAULT_MAX_SHARE, force: bool = False) -> Plan:
    """The Slurm drain list's decision: the failed hosts (a fail fault of their own, not the
    fabric's: FleetResult.faults), guarded."""
    classes = {h.name: h.topology_class for h in fleet.hosts.with_facts(())}
    failing: dict[str, list[Finding]] = defaultdict(list)
    for fault in fleet.faults("fail"):
        failing[fault.host].append(fault.root)
    for host in failing:  # a host only in the findings (a hand-made document) still counts in the fleet
        classes.setdefault(host, None)
    hosts, left = _nameable(HostPlan(h, tuple(Step(f, f.action, f.because) for f in roots))
                            for h, roots in failing.items())
    disrupted = {hp.host: sorted({s.finding.id for s in hp.steps}) for hp in hosts}
    return Plan(fleet.run.id or "run", hosts, max_share, force, guard(disrupted, classes, max_share), len(classes),
                left_out=left)


@dataclass(frozen=True)
class Resume:
    """The resume list's decision: the hosts this run found clean, which a drain of fleetprobe's
    own may be lifted from (the list checks each node's reason when it runs)."""

    run_id: str
    hosts: tuple[str, ...]
    left_out: tuple[LeftOut, ...] = ()


# A clean host: it answered and finished every probe (an unmeasured fault is no cleared fault), and
# nothing this run found asks to take it out of service.
_CLEAN = (Health.HEALTHY, Health.DEGRADED)


def resume_plan(fleet: FleetResult) -> Resume:
    """The hosts that are clean in this run: healthy, or degraded by faults that disrupt nothing
    (no fail fault, no warn fault whose action drains the host)."""
    clean: list[HostPlan] = []
    for h in fleet.hosts:
        if h.health.state not in _CLEAN or h.health.fail:
            continue
        hp = host_plan(h.name, fleet.findings_of(h.name))
        if hp is None or not hp.disruptive:
            clean.append(HostPlan(h.name, ()))
    kept, left = _nameable(clean)
    return Resume(fleet.run.id or "run", tuple(hp.host for hp in kept), left)
