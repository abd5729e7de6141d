"""Runs whose probes were carried to the hosts by someone else: a scheduler (srun), Ansible, cron.

`bundle_script` writes the very script `probe run` pipes to a host (engine/runner.py composes it;
the bundle runner prints one document instead of frames), and `import_documents` turns the
documents those hosts printed back into a run: each answer classified as a live one
(runner.document_result), stored and judged by `session.store_streamed` under the plan the
bundle was written from.  Host names come from inside the documents (the inventory name the
bundle was written for, else the scheduler's node name, else the hostname); but a host speaks only
for itself, so every document's claim is weighed before any is named, and the file's place (which
the controller writes, not the host) decides between documents that claim one name (api/claims.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.api import claims
from orchestrator.api.claims import Claim, Named
from orchestrator.api.errors import UsageError, usage_message
from orchestrator.api.import_judged import JudgeWhereRead
from orchestrator.api.import_workers import (
    HostFor,
    ReadBack,
    ReadDocument,
    read_in_workers,
    read_slice,
    unreadable,
)
from orchestrator.api.plan import (
    PlanError,
    PlanInputs,
    RunPlan,
    build_plan,
    check_limits,
    load_inventory,
    parse_expect_items,
    probe_calls,
)
from orchestrator.api.playbook import PlaybookError, find_playbook, load_playbook
from orchestrator.api.session import Collected, RunResult, store_streamed
from orchestrator.engine import bundle
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.results import HostInput
from orchestrator.engine.runner import HostResult, ProbeCall, ProbeResult, document_script
from orchestrator.files.bounded import UnreadableInput, is_regular, read_regular
from orchestrator.inventory.model import Host
from orchestrator.store.redaction import public_vars
from orchestrator.store.rundir import RunDirectory, host_input_from_result
from orchestrator.transport.base import DEFAULT_MAX_OUTPUT, DEFAULT_MAX_STDERR
from orchestrator.verdict.expectations import ExpectationError
from orchestrator.verdict.parallel import worker_count

ANY_HOST = "(any host)"  # the host a bundle for no particular host is planned for: in group all only


@dataclass
class Bundle:
    script: bytes
    calls: list[ProbeCall]
    warnings: list[str] = field(default_factory=list)


def _calls_of(plan: RunPlan, host: str) -> tuple[list[ProbeCall], bool]:
    """The host's probes over every play that selects it, as a run merges them (a later play's
    result of a probe replaces the earlier one), and whether any of those plays asks for root."""
    calls: dict[str, ProbeCall] = {}
    become = False
    for pp in plan.plays:
        if any(h.name == host for h in pp.hosts):
            calls.update((c.name, c) for c in pp.calls)
            become = become or pp.become
    return list(calls.values()), become


def bundle_script(inputs: PlanInputs, host: str | None = None) -> Bundle:
    """The bundle of `inputs` (playbook, --probe, --expect): for one inventory host (its probe
    arguments included), or for every host alike (the plays that run on `all`)."""
    warnings: list[str] = []
    if host is not None:
        if not inputs.inventory:
            raise UsageError("--host needs the inventory it is in (-i)")
        plan = build_plan(dataclasses.replace(inputs, limit=host))
        found = [h for h in plan.hosts if h.name == host]
        if not found:
            raise UsageError(f"no play of the playbook runs on {host!r}")
        target: Host | None = found[0]
        calls, become = _calls_of(plan, host)
    else:
        if inputs.inventory:
            warnings.append("-i without --host: the bundle is for every host alike, without any host's "
                            "probe_root/probe_args; give --host NAME for one host's bundle")
        placeholder = HostInput(name=ANY_HOST, address=ANY_HOST, groups=["all"], probes={}, data={})
        plan = build_plan(inputs, stored=[placeholder])
        target = None
        calls, become = _calls_of(plan, ANY_HOST)
        for pp in plan.plays:
            if not pp.hosts:
                warnings.append(f"play {pp.play.name!r} (hosts: {pp.play.hosts}) is not in the bundle: it runs on "
                                "some hosts only; write one bundle per host with -i INVENTORY --host NAME")
        if not calls:
            raise UsageError("no play of the playbook runs on all hosts; give -i INVENTORY --host NAME")
    warnings.extend(plan.warnings)
    if become or inputs.become:
        warnings.append("the playbook asks for root: the bundle runs as whoever runs it (run it as root, "
                        "or with become in Ansible); it never calls sudo itself")
    plan_doc = {k: v for k, v in inputs.to_dict().items() if k in ("playbook", "probes", "expect", "timeout")}
    script = document_script(target, calls, plan_doc, DEFAULT_MAX_OUTPUT, DEFAULT_MAX_STDERR)
    return Bundle(script, calls, warnings)


# ------------------------------------------------------------------------------------ import


@dataclass
class Imported:
    """One file's contribution: the host and its results, or why the file held none."""

    source: str
    document: bundle.Document | None
    error: str = ""


def document_files(paths: Iterable[Path]) -> list[Path]:
    """The files named, and every file of a directory named (sorted), in order; whatever in a
    directory is not a regular file (a FIFO would block the import for ever) is left out, a file
    named that is not one is refused."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(f for f in p.iterdir() if is_regular(f) and not f.name.startswith(".")))
        elif is_regular(p):
            out.append(p)
        elif p.exists():
            raise UsageError(f"{p}: not a regular file (a FIFO, socket or device); give bundle output files")
        else:
            raise UsageError(f"no such file or directory: {p}")
    if not out:
        raise UsageError("no bundle output files in " + ", ".join(map(str, paths)))
    return out


# A bundle document carries each probe's output, which the live road caps at DEFAULT_MAX_OUTPUT
# (and stderr at DEFAULT_MAX_STDERR): four times that is more than a real audit's document holds;
# a bigger file costs its own host only, unread (parsing it would hold it three times over).
MAX_DOCUMENT = 4 * (DEFAULT_MAX_OUTPUT + DEFAULT_MAX_STDERR)


def read_document(f: Path) -> Imported:
    """One file's document, or why it holds none."""
    try:
        data = read_regular(f, MAX_DOCUMENT, "bundle document")
    except UnreadableInput as e:
        return Imported(str(f), None, str(e))
    try:
        doc = bundle.read_document(data)
        PlanInputs.from_dict(doc.plan)  # a plan no fleetprobe writes costs this file, not the import
        return Imported(str(f), doc)
    except PlanError as e:
        return Imported(str(f), None, f"{f.name}: the document's plan is malformed ({e})")
    except bundle.DocumentError as e:
        tail = data.decode("utf-8", "replace").strip().splitlines()[-1:] if data.strip() else []
        more = f"; it ends: {tail[0][:160]}" if tail else "; the file is empty"
        return Imported(str(f), None, f"{f.name}: {e}{more}")


def _unique(name: str, taken: set[str]) -> str:
    """`name`, else the first of name#2, name#3 ... not taken: two files named alike are both kept."""
    if name not in taken:
        return name
    n = 2
    while f"{name}#{n}" in taken:
        n += 1
    return f"{name}#{n}"


def _plan_inputs(plan: dict[str, Any], inventory: tuple[str, ...], playbook: str | None,
                 probes: tuple[str, ...] | None, expect: tuple[str, ...] | None) -> PlanInputs:
    """The plan a bundle was written from (a document's `plan`, with what is given instead), over
    `inventory`."""
    stored = PlanInputs.from_dict(plan)
    return PlanInputs(inventory=inventory, playbook=playbook if playbook is not None else stored.playbook,
                      probes=tuple(probes) if probes else stored.probes,
                      expect=tuple(expect) if expect is not None else stored.expect,
                      timeout=stored.timeout)


# The most distinct plans tried, most documents first: each try reads the plan's playbook, and
# documents forged with a plan each must not make that a read per document.
_PLANS_TRIED = 8


def _judged_plan(plans: list[dict[str, Any]], stored: list[HostInput], inventory: tuple[str, ...],
                 playbook: str | None, probes: tuple[str, ...] | None, expect: tuple[str, ...] | None
                 ) -> tuple[RunPlan, PlanInputs, list[str]]:
    """The plan the documents are judged under: the one most of them were written from (the first
    met among equals) that this fleetprobe can use, with what is given instead.  A plan it cannot
    use (a probe or expectation it has no name for, a playbook it cannot read here) costs the
    documents written from it their plan only: they are judged under the others'.  UsageError,
    saying what to give instead, when no document's plan can be used.  What goes wrong past the
    documents' own plan (the inventory, what the user gave) is raised as building any plan raises it."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for written in plans:
        groups.setdefault(json.dumps(written, sort_keys=True, default=str), []).append(written)
    ranked = sorted(groups.values(), key=len, reverse=True)  # sorted() is stable: first met among equals
    unusable: list[tuple[int, str, Exception]] = []
    for group in ranked[:_PLANS_TRIED]:
        inputs = _plan_inputs(group[0], inventory, playbook, probes, expect)
        problem = _plan_problem(inputs, playbook is None, expect is None)
        if problem is not None:
            unusable.append((len(group), *problem))
            continue
        plan = build_plan(inputs, stored=stored)
        warnings = [f"{n} document(s) come from a bundle whose plan this fleetprobe cannot use "
                    f"({usage_message(why)}); judged under the plan of {len(group)} other document(s)"
                    for n, _, why in unusable]
        if len(ranked) > len(unusable) + 1 and playbook is None and expect is None:
            warnings.append(f"the documents come from bundles of {len(ranked)} different plans; judged under the "
                            f"one of {len(group)} of the {len(plans)} documents (give -p / --expect to choose)")
        return plan, inputs, warnings
    _, part, why = unusable[0]
    if part == "expect":
        raise UsageError(f"the documents' plan expects what this fleetprobe cannot read ({usage_message(why)}); "
                         "give --expect to judge against expectations of your own")
    hint = ("give -p PLAYBOOK to judge them under a playbook of your own" if part == "playbook"
            else "the bundle may come from a newer fleetprobe: import its documents with that version")
    raise UsageError(f"the documents' plan cannot be used here ({usage_message(why)}); {hint}")


def _plan_problem(inputs: PlanInputs, own_playbook: bool, own_expect: bool) -> tuple[str, Exception] | None:
    """What keeps this fleetprobe from judging under a document's plan, in the parts the plan itself
    gives (its probes and timeout, and its playbook and expectations where none are given instead),
    as (which part, the error); None when it can be used."""
    checks: list[tuple[str, Callable[[], object]]] = [
        ("probes", lambda: probe_calls([(name, {}, inputs.timeout) for name in inputs.probes])),
        ("probes", lambda: check_limits(inputs.forks, inputs.timeout))]
    if own_playbook:
        checks.append(("playbook", lambda: load_playbook(find_playbook(inputs.playbook))))
    if own_expect:
        checks.append(("expect", lambda: parse_expect_items(inputs.expect)))
    for part, check in checks:
        try:
            check()
        except (UsageError, PlaybookError, ExpectationError) as e:
            return part, e
    return None


def _inventory_hosts(inventory: tuple[str, ...], warnings: list[str]) -> dict[str, Host]:
    if not inventory:
        return {}
    _inv, hosts, inv_warnings = load_inventory(inventory, None)
    warnings.extend(inv_warnings)
    return {h.name: h for h in hosts}


def _host_of(source: str, base: str | None, ident: Mapping[str, Any], inv_hosts: Mapping[str, Host],
             taken: set[str], warnings: list[str]) -> Host:
    """A file's host: named after its document's host (`base`), or after the file when it holds
    none; a second document of one host is kept under a name of its own."""
    base = base if base is not None else Path(source).name
    name = _unique(base, taken)
    if name != base:
        warnings.append(f"{source}: a second document of {base!r}, kept as {name!r}")
    taken.add(name)
    return _host_named(name, base, ident, inv_hosts)


def _named(read: Iterable[ReadDocument], inv_hosts: Mapping[str, Host]) -> list[Named]:
    """What each document (in the files' order, files without one left out) is in the run
    (api/claims.py), from the read records (read back once more: names only)."""
    found = [Claim(rd.source, rd.name, _slot(rd.identity)) for rd in read if rd.result is not None and rd.name is not None]
    return claims.decide(found, inv_hosts)


def _slot(identity: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The job step slot a document says it ran in, None where no scheduler is named."""
    if not identity.get("job_id"):
        return None
    return str(identity["job_id"]), str(identity.get("step_id") or ""), str(identity.get("task_id") or "")


def _read_here(files: list[Path], run: RunDirectory, host_for: HostFor, say: Callable[[str], None]) -> ReadBack:
    """Every file read in this process as one worker reads its slice (import_workers.read_slice):
    one document held at a time, its probe files staged, its record kept to be read back."""
    part = run.stage_dir("parts") / "here.pickle"
    say(f"0/{len(files):,} documents read")
    read_slice(files, 0, read_document, host_for, run, part,
               done=lambda n: say(f"{n:,}/{len(files):,} documents read") if n % _SAY_EVERY == 0 else None)
    return ReadBack([part])


def _host_claiming(rd: ReadDocument, named: Named | None, inv_hosts: Mapping[str, Host], taken: set[str],
                   warnings: list[str]) -> tuple[Host, str]:
    """A document's host, and why it does not speak for the name it claims ("" where it does)."""
    claimed = rd.name or Path(rd.source).name
    if named is None or named.name in taken:  # not met: both passes read the same records; never a shared name
        named = Named(_unique(claimed, taken | {claimed}), f"claims {claims.quoted(claimed)}, which could not "
                                                          "be weighed with the other documents' claims")
    if named.refused:
        said = sum(1 for w in warnings if w.endswith(_CLAIMANT_SAID))
        if said < _CLAIMANTS_SAID:  # a flood of claimants is one line each up to here; the findings name every one
            warnings.append(f"{rd.source}: {named.refused}; kept as {named.name!r}{_CLAIMANT_SAID}")
    return _host_of(rd.source, named.name, rd.identity, inv_hosts, taken, warnings), named.refused


# claimants named one warning line each; past them, the run's identity.name.claimed findings name them
_CLAIMANTS_SAID = 20
_CLAIMANT_SAID = ", not judged"


def claimant(host: Host, why: str) -> HostResult:
    """A document that speaks for a host it cannot be shown to be, as its host's one result
    (verdict/checks/host.py turns it into the host's identity.name.claimed)."""
    return HostResult(host, {claims.CLAIM_PROBE: ProbeResult(claims.CLAIM_PROBE, Outcome.INVALID_OUTPUT, why)})


def _host_named(name: str, base: str, ident: Mapping[str, Any], inv_hosts: Mapping[str, Host]) -> Host:
    """The inventory's host `base` (its groups and variables) as `name`, else a host in group all
    only, reached at the address the document's identity gives."""
    known = inv_hosts.get(base)
    if known is not None:
        return Host(name=name, vars=dict(known.vars), groups=list(known.groups))
    return Host(name=name, vars={"ansible_host": ident.get("hostname", "(unknown)")}, groups=["all"])


def import_documents(paths: list[Path], root: Path, inventory: tuple[str, ...] = (), playbook: str | None = None,
                     probes: tuple[str, ...] | None = None, expect: tuple[str, ...] | None = None,
                     step: Callable[[str], None] | None = None) -> tuple[RunResult, list[str]]:
    """Bundle documents (files, or directories of them) -> one judged run, and the warnings.

    One document at a time: read, classified, stored and let go before the next is read (a
    directory of 10,000 hosts' documents is gigabytes), so the import holds one document; many
    documents are read by worker processes, each holding one (import_workers).  `step` hears
    where the import stands (a line of safe text)."""
    files = document_files(paths)
    say = step or _quiet
    total = len(files)
    warnings: list[str] = []
    inv_hosts = _inventory_hosts(inventory, warnings)
    plans: list[dict[str, Any]] = []
    first_error = [""]

    def host_for(base: str, ident: dict[str, Any]) -> Host:
        return _host_named(base, base, ident, inv_hosts)

    workers = worker_count(len(files))
    judge = _judge_as_read(files, root, inventory, playbook, probes, expect) if workers > 1 else None

    def results(run: RunDirectory) -> Iterator[Collected]:
        read = (read_in_workers(files, workers, read_document, host_for, run, judge,
                                heard=None if step is None else lambda n: say(f"{n:,}/{total:,} documents read"))
                if workers > 1 else None) or _read_here(files, run, host_for, say)
        # every document's claim is weighed before any is named: the order of the files decides nothing
        decided = _named(read, inv_hosts)
        named = iter(decided)
        taken: set[str] = set()
        others = {n.name for n in decided}  # a file without a document is named around the documents' names
        for k, rd in enumerate(read):
            if k % _SAY_EVERY == 0:
                say(f"{k:,}/{total:,} documents stored")
            origin: dict[str, Any] = {"via": "bundle", "file": rd.source}
            staged = rd.staged
            if rd.result is None:
                host = _host_of(rd.source, None, rd.identity, inv_hosts, others, warnings)
                first_error[0] = first_error[0] or rd.error
                res = unreadable(host, rd.error)
            else:
                host, refused = _host_claiming(rd, next(named, None), inv_hosts, taken, warnings)
                plans.append(rd.plan)
                origin["identity"] = rd.identity
                res = dataclasses.replace(rd.result, host=host)
                if refused:
                    origin["claimed"] = rd.name
                    res, staged = claimant(host, refused), None  # its answers speak for no host: not kept
            if judge is not None:
                judge.named(rd.judged, host_input_from_result(res))
            yield Collected(res, origin, staged)
        unsaid = sum(1 for n in decided if n.refused) - _CLAIMANTS_SAID
        if unsaid > 0:
            warnings.append(f"{unsaid:,} more document(s) claim a name they cannot be shown to own, kept under "
                            "names of their own and not judged: their identity.name.claimed findings name each")

    def plan_of(hosts: list[HostResult]) -> tuple[RunPlan, dict[str, Any]]:
        if not plans:
            raise UsageError(f"none of the {len(files)} file(s) is a fleetprobe bundle document ({first_error[0]})")
        stored = [HostInput(name=r.host.name, address=r.host.address, groups=r.host.groups, probes={}, data={},
                            vars=public_vars(r.host.vars)) for r in hosts]
        plan, inputs, more = _judged_plan(plans, stored, inventory, playbook, probes, expect)
        warnings.extend(more)
        return plan, {"timeout": inputs.timeout}

    # in the inventory's order, as a live run keeps its hosts: fleet-wide messages name hosts in
    # fleet order, and so read as the live run's; hosts the inventory lacks come after, as found
    pos = {name: i for i, name in enumerate(inv_hosts)}
    result = store_streamed(results, root, {"via": "bundle", "files": len(files)}, plan_of,
                            lambda name: pos.get(name, len(pos)), judge, step=say)
    return result, warnings


# documents between two progress lines where they come one by one (the workers' count is read on a clock)
_SAY_EVERY = 100


def _quiet(_text: str) -> None:
    pass


# the documents looked at for the plan the workers judge under: where the first few files are not
# documents, the hosts are judged after reading, as for a small import
_PLAN_FROM_FIRST = 8


def _judge_as_read(files: list[Path], root: Path, inventory: tuple[str, ...], playbook: str | None,
                   probes: tuple[str, ...] | None, expect: tuple[str, ...] | None) -> JudgeWhereRead | None:
    """The reading workers' judge (api/import_judged.py) under the plan of the first document, as
    the import judges under it; None where that plan cannot be had before reading (the import
    then judges after reading, and says there what is wrong with the plan)."""
    for f in files[:_PLAN_FROM_FIRST]:
        doc = read_document(f).document
        if doc is None:
            continue
        try:
            return JudgeWhereRead(_plan_inputs(doc.plan, inventory, playbook, probes, expect), root)
        except (UsageError, ValueError, TypeError):  # a plan the import itself will refuse, in its words
            return None
    return None
