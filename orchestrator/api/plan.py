"""The plan of a run: which probes run on which hosts, and what each host is judged against.

One function, `build_plan`, turns a run's inputs (inventory sources, limit, playbook, `--probe`,
`--expect`) into a `RunPlan`.  `probe run` builds it from the command line; `probe rejudge` builds
it again from the inputs stored in run.json, over the hosts the run stored, so a stored run is
judged exactly as it was live: the same plays select the same hosts, each host gets the
expectations and finding overrides of the plays that ran on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.api.errors import UsageError
from orchestrator.api.playbook import Play, Playbook, find_playbook, load_playbook
from orchestrator.engine import descriptors, payload
from orchestrator.engine.results import HostInput
from orchestrator.engine.runner import DEFAULT_FORKS, ProbeCall
from orchestrator.facts import security
from orchestrator.facts.shown import json_shown
from orchestrator.facts.textsafe import is_digits, one_line
from orchestrator.files.bounded import UnreadableInput
from orchestrator.files.jsontext import loads_strict, read_json_file
from orchestrator.inventory.model import Group, Host, Inventory, InventoryError
from orchestrator.inventory.scheduler import SchedulerView, parse_k8s_nodes, parse_scontrol
from orchestrator.store.redaction import redact_message
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict import baseline
from orchestrator.verdict.expectations import ExpectationError, Expectations, usable_part
from orchestrator.verdict.overrides import Override
from orchestrator.verdict.references import References

DEMO_INVENTORY = Path(__file__).resolve().parent.parent / "demo" / "inventory.yml"
DEFAULT_TIMEOUT_S = 60.0

# Probe arguments are embedded in the script as JSON.  YAML aliases share objects, so a few hundred
# bytes of playbook can stand for billions of values (or contain themselves): count before encoding.
MAX_ARG_VALUES = 100_000


@dataclass(frozen=True)
class PlanInputs:
    """What a run was asked to do; run.json keeps it (`plan`) so the run can be judged again."""

    inventory: tuple[str, ...] = ()  # sources as given; empty: the bundled demo fleet
    limit: str | None = None
    playbook: str | None = None  # a shipped name or a path, as given; None: the default playbook
    probes: tuple[str, ...] = ()  # --probe: replaces every play's probes
    expect: tuple[str, ...] = ()  # --expect KEY=VALUE, for every host, over inventory and plays
    forks: int = DEFAULT_FORKS
    timeout: float = DEFAULT_TIMEOUT_S
    become: bool = False
    shard: str | None = None  # --shard K/N: this controller's part of the inventory (inventory/shard.py)
    # --security-floor FILE: judge every host's driver and NIC firmware against this floor file
    # (facts/security.py) instead of the shipped one
    security_floor: str | None = None
    # --baseline-file FILE: judge each class's figures against this exported class baseline
    # (`probe baseline RUN -o FILE`, verdict/baseline.py) instead of against the run's own hosts
    baseline_file: str | None = None
    # --slurm / --k8s-nodes FILE|-: reconcile what the scheduler advertises with the verdict
    # (inventory/scheduler.py, verdict/checks/scheduler.py); a rejudge reads the scheduler again
    slurm: bool = False
    k8s_nodes: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlanInputs:
        """The inputs a stored plan (run.json's `plan`, a bundle document's) names.  PlanError
        names the first field of a type this program never writes there."""
        def text(key: str) -> str | None:
            value = d.get(key)
            if value is None or isinstance(value, str):
                return value
            raise PlanError(f"{key}: {json_shown(value)} is not a string")

        def strings(key: str) -> tuple[str, ...]:
            value = d.get(key)
            if value is None:
                return ()
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                return tuple(value)
            raise PlanError(f"{key}: {json_shown(value)} is not a list of strings")

        def number(key: str, default: float) -> float:
            value = d.get(key)
            if value is None:
                return default
            # compared, not math.isfinite: an int past a float's range would raise OverflowError
            if isinstance(value, (int, float)) and not isinstance(value, bool) and -1e15 < value < 1e15:
                return value
            raise PlanError(f"{key}: {json_shown(value)} is not a number of a sane size")

        become, slurm = d.get("become"), d.get("slurm")
        for key, flag in (("become", become), ("slurm", slurm)):
            if flag is not None and not isinstance(flag, bool):
                raise PlanError(f"{key}: {json_shown(flag)} is not true or false")
        forks = number("forks", DEFAULT_FORKS)
        if forks != int(forks):
            raise PlanError(f"forks: {json_shown(forks)} is not a whole number")
        return cls(inventory=strings("inventory"), limit=text("limit"), playbook=text("playbook"),
                   probes=strings("probes"), expect=strings("expect"), forks=int(forks),
                   timeout=float(number("timeout", DEFAULT_TIMEOUT_S)), become=bool(become), shard=text("shard"),
                   security_floor=text("security_floor"), baseline_file=text("baseline_file"),
                   slurm=bool(slurm), k8s_nodes=text("k8s_nodes"))


class PlanError(ValueError):
    """A stored plan with a field of a type this program never writes there."""


def stored_plan_inputs(meta: RunMeta, run: str) -> tuple[PlanInputs, dict[str, str]]:
    """The inputs of stored run `run`'s plan, its files as the run read them (`anchored`), and for
    each relative path read from here instead, because nothing of its kind is where the run was
    made, a note (keyed by the PlanInputs field: a caller that replaces the path says nothing)."""
    inputs = run_plan_inputs({**(meta.plan or {"playbook": meta.playbook}), "inventory": meta.inventory}, run)
    notes: dict[str, str] = {}

    def at(field: str, what: str, path: str | None) -> str | None:
        if path is None:
            return None
        kind = inventory_source if field == "inventory" else regular_file
        found = anchored(path, meta.cwd, kind)
        if found == path and meta.cwd and not os.path.isabs(path) and kind(path) and not _same_dir(meta.cwd, "."):
            notes.setdefault(field, f"{run}: its {what} {path} is no longer in {meta.cwd}, where the run was made: "
                                    f"{path} here is read instead")
        return found

    return replace(inputs, inventory=tuple(at("inventory", "inventory", p) or p for p in inputs.inventory),
                   playbook=at("playbook", "playbook", inputs.playbook),
                   security_floor=at("security_floor", "security floor", inputs.security_floor),
                   baseline_file=at("baseline_file", "baseline file", inputs.baseline_file)), notes


def regular_file(path: str) -> bool:
    """A playbook or reference file: a regular one (a playbook's name else names a shipped one)."""
    return os.path.isfile(path)


def inventory_source(path: str) -> bool:
    """An inventory source: a file or a directory (else a comma list of hosts)."""
    return os.path.isfile(path) or os.path.isdir(path)


def anchored(path: str, cwd: str | None, kind: Callable[[str], bool] = regular_file) -> str:
    """A path a run stored as it was given, as that run read it: a relative one under the directory
    the run was made in (`cwd`), while what is there is of the `kind` its reader takes; else as
    stored, read from here (a run made on another controller, a file moved).  A shipped
    playbook's name and a comma list of hosts name nothing of their kind there, and stay."""
    if not cwd or os.path.isabs(path):
        return path
    there = os.path.join(cwd, path)
    return there if kind(there) else path


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def run_plan_inputs(plan: dict[str, Any], run: str) -> PlanInputs:
    """The inputs of stored run `run`'s plan (its run.json `plan`, for rejudge and merge): one
    message naming the run where it is malformed."""
    try:
        return PlanInputs.from_dict(plan)
    except PlanError as e:
        raise UsageError(f"{run}: the plan in its run.json is malformed ({e}); it was not written by "
                         "fleetprobe") from None


@dataclass
class PlannedPlay:
    play: Play
    hosts: list[Host]
    calls: list[ProbeCall]
    forks: int
    become: bool


@dataclass
class RunPlan:
    inputs: PlanInputs
    inventory: Inventory
    playbook: Playbook
    plays: list[PlannedPlay]
    hosts: list[Host]  # every host some play runs on, in inventory order
    cli_expect: Expectations  # --expect, over everything else
    expectations: dict[str, Expectations] = field(default_factory=dict)  # host -> what it is judged against
    overrides: dict[str, dict[str, Override]] = field(default_factory=dict)  # host -> finding overrides
    warnings: list[str] = field(default_factory=list)
    refs: References = field(default_factory=References)  # the files the hosts are judged against

    def probe_names(self) -> list[str]:
        fabric = {"fabric"} if any(pp.play.fabric is not None and pp.hosts for pp in self.plays) else set()
        return sorted({c.name for pp in self.plays for c in pp.calls} | fabric)

    def expectations_for(self, name: str, vars: dict[str, Any]) -> Expectations:
        """A host no play ran on (a stored host judged under another playbook) is judged against
        its inventory expectations and --expect only."""
        found = self.expectations.get(name)
        return found if found is not None else host_expectations(name, vars, self.cli_expect)

    def meta(self, **more: Any) -> RunMeta:
        """run.json's description of the plan (the run directory adds id, state and times); `more`:
        the other fields of the run (options, how it was collected)."""
        meta = RunMeta(
            # [] is the bundled demo fleet, wherever this install keeps it (its path changes with the venv)
            inventory=list(self.inventory.sources) if self.inputs.inventory else [],
            limit=self.inputs.limit,
            playbook=str(self.playbook.path),
            probes=self.probe_names(),
            hosts_order=[h.name for h in self.hosts],
            plan=self.inputs.to_dict(),
            **more,
        )
        if any(e.security_floor for e in self.expectations.values()):
            floor = self.refs.security_floor or security.load()
            meta.security_floor = {"file": floor.file, "date": floor.date, "made": floor.made}
        return meta


def check_limits(forks: Any, timeout: Any, where: str = "") -> None:
    """Forks and the probe timeout must be able to run something: `-f 0` would probe nothing and
    exit 0, `-t -1` would time every host out."""
    if not isinstance(forks, int) or isinstance(forks, bool) or forks < 1:
        raise UsageError(f"{where}forks (-f/--forks) must be a whole number of at least 1, got {forks!r}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise UsageError(f"{where}the probe timeout (-t/--timeout) must be a positive number of seconds, got {timeout!r}")


def check_key_files(hosts: list[Host]) -> None:
    """Every private key file the inventory names for an SSH host exists, before anything connects
    (otherwise each host would only be reported unreachable at run time)."""
    missing: dict[str, list[str]] = {}
    for h in hosts:
        key = h.key_file
        if key is not None and h.connection == "ssh" and not Path(key).expanduser().is_file():
            missing.setdefault(str(Path(key).expanduser()), []).append(h.name)
    if missing:
        parts = []
        for key, names in missing.items():
            more = f" and {len(names) - 1} more host(s)" if len(names) > 1 else ""
            parts.append(f"host {names[0]}{more}: private key file {key} does not exist (ansible_ssh_private_key_file)")
        raise UsageError("; ".join(parts))


def parse_expect_items(items: tuple[str, ...] | list[str]) -> Expectations:
    raw: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--expect takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            raw[k.strip()] = json.loads(v) if v.strip() in ("true", "false") or is_digits(v.strip().lstrip("-").replace(".", "", 1)) else v
        except ValueError:  # past the digits Python reads as an int (4,300)
            raise UsageError(f"--expect {k.strip()}: a number of {len(v.strip()):,} characters is no expectation") from None
    return Expectations.from_mapping(raw, where="--expect")


def host_expectations(name: str, vars: dict[str, Any], override: Expectations) -> Expectations:
    """The host's `probe_expect` (inventory vars, or the vars stored with a run) under `override`."""
    try:
        base = Expectations.from_mapping(vars.get("probe_expect"), where=f"host {name}: probe_expect")
    except ExpectationError as e:
        raise UsageError(str(e)) from None
    return base.merged(override)


def with_usable_expect(h: HostInput) -> tuple[HostInput, str]:
    """A stored host judged with the part of its probe_expect this program can use, and what was
    left out ('' when nothing was): the host's record says it (HostInput.notes), the caller warns."""
    raw = h.vars.get("probe_expect")
    kept, left, unusable = usable_part(raw, where="probe_expect")
    if not left:
        return h, ""
    lost = "it" if not isinstance(raw, dict) or not kept else ", ".join(unusable)
    why = f"its stored probe_expect cannot be used whole ({'; '.join(left)}); it is judged without {lost}"
    host = replace(h, vars={**h.vars, "probe_expect": kept}, notes=[*h.notes, why], unusable_expect=unusable)
    return host, why


def load_inventory(sources: tuple[str, ...], limit: str | None) -> tuple[Inventory, list[Host], list[str]]:
    """The inventory (the demo fleet without sources) and the hosts the limit selects."""
    from orchestrator.inventory.loader import load_inventory as load
    from orchestrator.inventory.patterns import select_hosts

    warnings: list[str] = []
    inv = load(list(sources) or [str(DEMO_INVENTORY)])
    hosts = select_hosts(inv, limit, warnings)
    if not hosts:
        raise UsageError("the inventory has no hosts" + (f" matching --limit {limit!r}" if limit else "")
                         + _skipped_keys(inv.ignored))
    return inv, hosts, [redact_message(w) for w in [*inv.warnings, *warnings]]


def _skipped_keys(ignored: list[str]) -> str:
    """An empty inventory's likely cause, on the same line: the group keys that were skipped
    (`hots:` for `hosts:`), the first three of them."""
    if not ignored:
        return ""
    more = f"; and {len(ignored) - 3} more key(s)" if len(ignored) > 3 else ""
    return ": " + "; ".join(redact_message(w) for w in ignored[:3]) + more


def shard_hosts(hosts: list[Host], spec: str) -> list[Host]:
    """The hosts of part K of N (--shard K/N); an empty part is a usage error, as an empty limit is."""
    from orchestrator.inventory.shard import ShardError, in_shard, parse_shard

    try:
        k, n = parse_shard(spec)
    except ShardError as e:
        raise UsageError(str(e)) from None
    part = [h for h in hosts if in_shard(h.name, k, n)]
    if not part:
        raise UsageError(f"--shard {spec}: none of the {len(hosts)} selected host(s) falls in part {k} of {n}")
    return part


def stored_inventory(inputs: list[HostInput], sources: list[str]) -> Inventory:
    """An inventory of a stored run's hosts, with the groups they had, so the plays' host patterns
    select the same hosts again without the original inventory files."""
    hosts = {h.name: Host(name=h.name, vars=dict(h.vars), groups=list(h.groups)) for h in inputs}
    groups: dict[str, Group] = {}
    for h in inputs:
        for g in h.groups:
            groups.setdefault(g, Group(name=g)).hosts.append(h.name)
    groups.setdefault("all", Group(name="all"))
    return Inventory(hosts=hosts, groups=groups, sources=sources)


def _args_problem(args: Any) -> str | None:
    seen = 0
    stack: list[tuple[Any, tuple[int, ...]]] = [(args, ())]
    while stack:
        value, parents = stack.pop()
        seen += 1
        if seen > MAX_ARG_VALUES:
            return f"expand to more than {MAX_ARG_VALUES:,} values (a YAML alias bomb?)"
        if isinstance(value, (dict, list)):
            if id(value) in parents:
                return "contain themselves (a recursive YAML alias)"
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, (*parents, id(value))) for v in items)
    return None


def probe_calls(steps: list[tuple[str, dict[str, Any], float]], where: str = "playbook") -> list[ProbeCall]:
    calls = []
    for name, args, timeout in steps:
        try:
            payload.get(name)
        except payload.UnknownProbe as e:
            raise UsageError(str(e.args[0])) from None
        problem = _args_problem(args)
        if problem:
            raise UsageError(f"{where}: the args of probe {name!r} {problem}; refusing to run it")
        calls.append(ProbeCall(name, dict(args), timeout))
    return calls


SUPPORTED_BECOME_METHODS = ("sudo",)


def _check_become(plays: list[PlannedPlay]) -> None:
    """A become method we cannot honour is a usage error before anything runs: running the probe
    as another user than asked (or not escalating at all) would judge a different view of the host."""
    for pp in plays:
        for h in pp.hosts:
            if (pp.become or h.become) and h.become_method not in SUPPORTED_BECOME_METHODS:
                raise UsageError(f"host {h.name}: ansible_become_method {h.become_method!r} is not supported "
                                 f"(fleetprobe escalates with {', '.join(SUPPORTED_BECOME_METHODS)} -n only); "
                                 "set ansible_become_method: sudo or run without become")


def _fit_descriptors(plays: list[PlannedPlay], warnings: list[str]) -> list[PlannedPlay]:
    """Plays whose forks the controller's descriptor limit allows (engine/descriptors.py)."""
    limit = descriptors.limit_now()
    out = []
    for pp in plays:
        fits = descriptors.forks_within(pp.forks, limit)
        if fits < min(pp.forks, len(pp.hosts)):
            warnings.append(f"play {pp.play.name!r}: {fits} host(s) at a time, not {pp.forks}: the controller may open "
                            f"{limit} files (ulimit -n), about {descriptors.PER_HOST} per host in flight; "
                            "raise the limit for more")
            pp = replace(pp, forks=fits)
        out.append(pp)
    return out


class ReferenceFileError(UsageError):
    """A file the inputs judge against (`option`: --security-floor or --baseline-file) that cannot
    be used; `why` names the file and what is wrong with it."""

    def __init__(self, option: str, why: str) -> None:
        super().__init__(f"{option}: {why}")
        self.option = option
        self.why = why


K8S_NODES_LIMIT = 512 << 20  # bytes: `kubectl get nodes -o json` of a large cluster, with room
SCONTROL_TIMEOUT_S = 60.0


def _scontrol_nodes() -> str:
    """`scontrol show node -o` as slurmctld answers it now (read-only)."""
    try:
        r = subprocess.run(["scontrol", "show", "node", "-o"], capture_output=True, text=True,
                           timeout=SCONTROL_TIMEOUT_S, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ReferenceFileError("--slurm", f"cannot run `scontrol show node -o`: {e}; run it where Slurm's "
                                 "client and its slurm.conf are") from None
    if r.returncode != 0:
        raise ReferenceFileError("--slurm", f"`scontrol show node -o` failed ({r.returncode}): "
                                 f"{one_line(r.stderr.strip())[:300] or 'no message'}")
    return r.stdout


def _k8s_nodes_doc(path: str) -> Any:
    try:
        if path == "-":
            data = sys.stdin.buffer.read(K8S_NODES_LIMIT + 1)
            if len(data) > K8S_NODES_LIMIT:
                raise ReferenceFileError("--k8s-nodes", f"standard input is larger than {K8S_NODES_LIMIT} bytes")
            return loads_strict(data)
        return read_json_file(path, K8S_NODES_LIMIT, "kubectl nodes file")
    except UnreadableInput as e:
        raise ReferenceFileError("--k8s-nodes", f"cannot read {e}") from None
    except ValueError as e:  # not UTF-8, not JSON
        raise ReferenceFileError("--k8s-nodes", f"{'standard input' if path == '-' else path}: {e}; give it the "
                                 "output of `kubectl get nodes -o json`") from None


def load_scheduler_view(inputs: PlanInputs) -> SchedulerView | None:
    """What the scheduler advertises (--slurm, --k8s-nodes), read before anything runs."""
    if inputs.slurm and inputs.k8s_nodes:
        raise ReferenceFileError("--slurm", "give one scheduler's view: --slurm or --k8s-nodes, not both")
    if inputs.slurm:
        return parse_scontrol(_scontrol_nodes())
    if inputs.k8s_nodes:
        try:
            return parse_k8s_nodes(_k8s_nodes_doc(inputs.k8s_nodes))
        except ValueError as e:
            raise ReferenceFileError("--k8s-nodes", f"{inputs.k8s_nodes}: {e}") from None
    return None


def load_references(inputs: PlanInputs) -> References:
    """The files the inputs name (--security-floor, --baseline-file), read and checked before
    anything runs."""
    try:
        floor = security.load(inputs.security_floor) if inputs.security_floor else None
    except security.FloorError as e:
        raise ReferenceFileError("--security-floor", str(e)) from None
    reference = None
    if inputs.baseline_file:
        file = inputs.baseline_file
        try:  # a FIFO, a device or a file of gigabytes is refused, never waited on or read whole
            doc = read_json_file(file, baseline.FILE_LIMIT, "baseline file")
        except UnreadableInput as e:
            raise ReferenceFileError("--baseline-file", f"cannot read {e}") from None
        except ValueError as e:  # not UTF-8, not strict JSON: the message names the field
            raise ReferenceFileError("--baseline-file", f"{file}: {e}") from None
        try:
            reference = baseline.parse_reference(doc, file)
        except ValueError as e:  # BaselineError: not a baseline file, named in the message
            raise ReferenceFileError("--baseline-file", str(e)) from None
    return References(security_floor=floor, baseline=reference, scheduler=load_scheduler_view(inputs))


def build_plan(inputs: PlanInputs, stored: list[HostInput] | None = None) -> RunPlan:
    """The plan of `inputs` over the inventory it names, or over a stored run's hosts (`stored`:
    rejudge, where the limit already chose them)."""
    check_limits(inputs.forks, inputs.timeout)
    cli_expect = _cli_expect(inputs)
    refs = load_references(inputs)
    if stored is None:
        inv, limited, warnings = load_inventory(inputs.inventory, inputs.limit)
        if inputs.shard:
            limited = shard_hosts(limited, inputs.shard)
    else:
        inv, warnings = stored_inventory(stored, list(inputs.inventory)), []
        limited = list(inv.hosts.values())
    book = load_playbook(find_playbook(inputs.playbook))
    allowed = {h.name for h in limited}
    plays = []
    for play in book.plays:
        hosts = _selected(inv, play, allowed)
        steps: list[tuple[str, dict[str, Any], float]]
        if inputs.probes and play.probes:
            steps = [(n, {}, inputs.timeout) for n in inputs.probes]
        else:
            steps = [(s.name, s.args, s.timeout or inputs.timeout) for s in play.probes]
        plays.append(PlannedPlay(play, hosts, probe_calls(steps, str(book.path)), play.forks or inputs.forks,
                                 play.become or inputs.become))
    if stored is None:
        _check_become(plays)
        plays = _fit_descriptors(plays, warnings)
    if stored is None and not any(p.hosts for p in plays):
        raise UsageError(f"no play of {book.path} selects any of the {len(limited)} host(s) of the inventory/limit")
    if refs.scheduler is not None:  # a node the scheduler's output held unreadable costs that node only
        warnings = [*warnings, *(f"{refs.scheduler.source}: {p}" for p in refs.scheduler.problems)]
    plan = RunPlan(inputs, inv, book, plays, [], cli_expect, warnings=warnings, refs=refs)
    by_play = _play_expectations((pp.play, pp.hosts) for pp in plays)
    for pp in plays:  # with the finding overrides of every play that ran on the host
        for h in pp.hosts:
            plan.overrides.setdefault(h.name, {}).update(pp.play.findings)
    plan.hosts = [h for h in limited if h.name in by_play]
    if stored is None:
        check_key_files(plan.hosts)
    plan.expectations = {h.name: _scheduler_given(by_play[h.name].merged(cli_expect), refs) for h in plan.hosts}
    plan.refs = replace(refs, thresholds_for=_thresholds(plays))
    return plan


def _scheduler_given(expect: Expectations, refs: References) -> Expectations:
    """`scheduler: true` only where the run has the scheduler's view: an inventory that asks for it
    without one would have its reconciliation pass unjudged (it is not judged instead)."""
    return replace(expect, scheduler=None) if expect.scheduler and refs.scheduler is None else expect


def _cli_expect(inputs: PlanInputs) -> Expectations:
    """What --expect (and --security-floor) ask of every host, over inventory and plays."""
    cli_expect = parse_expect_items(inputs.expect)
    if inputs.slurm or inputs.k8s_nodes:
        cli_expect = Expectations(scheduler=True).merged(cli_expect)
    return Expectations(security_floor=True).merged(cli_expect) if inputs.security_floor else cli_expect


def _selected(inv: Inventory, play: Play, allowed: set[str]) -> list[Host]:
    from orchestrator.inventory.patterns import select_hosts

    try:
        return [h for h in select_hosts(inv, play.hosts) if h.name in allowed]
    except InventoryError:
        return []  # a play for a group this inventory lacks simply has nothing to do


def _play_expectations(selected: Iterable[tuple[Play, list[Host]]]) -> dict[str, Expectations]:
    """Each selected host's inventory expectations, then those of every play that runs on it (in
    playbook order); --expect is merged over these by the caller."""
    by_play: dict[str, Expectations] = {}
    for play, hosts in selected:
        for h in hosts:
            if h.name not in by_play:
                by_play[h.name] = host_expectations(h.name, h.vars, Expectations())
            by_play[h.name] = by_play[h.name].merged(play.expect)
    return by_play


def expectations_alone(inputs: PlanInputs) -> Callable[[HostInput], Expectations]:
    """host -> what it is judged against under `inputs` were it the only stored host of the run:
    `build_plan(inputs, stored=[h]).expectations_for(h.name, h.vars)`, with the playbook read once.

    A pattern that picks hosts by their place among the others (`all[0]`, `gpu[2:]`) selects the
    host differently in the whole run: whoever judges with this compares it with the whole run's
    plan before keeping the verdict (api/import_judged.py)."""
    book = load_playbook(find_playbook(inputs.playbook))
    cli_expect = _cli_expect(inputs)
    sources = list(inputs.inventory)

    def of(h: HostInput) -> Expectations:
        inv = stored_inventory([h], sources)
        found = _play_expectations((play, _selected(inv, play, {h.name})) for play in book.plays).get(h.name)
        return found.merged(cli_expect) if found is not None else host_expectations(h.name, h.vars, cli_expect)

    return of


def _thresholds(plays: list[PlannedPlay]) -> Callable[[str], Mapping[str, baseline.Threshold]] | None:
    """host -> the baselines' thresholds: the table under the `baselines:` of every play that ran
    on it (later plays win field by field); None when no play changes the table."""
    if not any(pp.play.baselines for pp in plays):
        return None
    per_host: dict[str, dict[str, dict[str, Any]]] = {}
    for pp in plays:
        for h in pp.hosts:
            merged = per_host.setdefault(h.name, {})
            for metric, fields in pp.play.baselines.items():
                merged[metric] = {**merged.get(metric, {}), **fields}
    tables: dict[str, dict[str, baseline.Threshold]] = {}  # one table per distinct set of overrides
    by_host = {}
    for name, overrides in per_host.items():
        key = json.dumps(overrides, sort_keys=True)
        if key not in tables:
            tables[key] = baseline.thresholds_with(overrides)
        by_host[name] = tables[key]
    return lambda host: by_host.get(host, baseline.THRESHOLDS)
