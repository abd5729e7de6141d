"""Drift between two runs: what changed per host (pure: two judged fleets in, a FleetDiff out).

Only what both runs measured is compared.  A section is compared only when its probe ran fine in
both runs: a quick triage today against last night's audit must not report every NVLink as
"down" just because nvlink did not run.  A finding is new only where the baseline's check judged
that host, and resolved only where this run's check judged it and did not raise it
(verdict/coverage.py); findings whose check the other run did not judge are counted apart, with
the reason ("p2p probe not in this run", "no expectation gpu_count set").  Hosts in only one of
the runs (another --limit, another inventory) are listed, not compared; hosts unreachable in
either run get a reachability change and nothing else.  Changes of the playbook, the probes, the
limit and the expectations are reported as such.  Findings are keyed by id, host and subject
(a directional finding names its direction in the subject: `GPU0 (...) host->GPU`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from orchestrator.engine.outcomes import NOT_STARTED
from orchestrator.facts import read as F
from orchestrator.facts import registry
from orchestrator.facts.model import Facts
from orchestrator.facts.shown import shown
from orchestrator.store import members
from orchestrator.store.atomic import encode_json
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict import baseline, coverage
from orchestrator.verdict.changes import Change, FindingKey, FleetDiff
from orchestrator.verdict.findings import Finding
from orchestrator.verdict.result import FleetResult, JudgedHost


def _probe_ok(host: JudgedHost, probe: str) -> bool:
    return host.ran(probe) if host.probes else True  # no per-probe record: trust the facts that are there


def _comparable(old: JudgedHost, new: JudgedHost, section: str) -> tuple[Facts, Facts] | None:
    """Both runs' facts of `section`, when every probe it is made from finished with an answer in
    both: a section cut short (a stopped run, a probe that timed out) is not compared."""
    if not all(_probe_ok(old, p) and _probe_ok(new, p) for p in registry.probes_of(section)):
        return None
    of, nf = old.facts, new.facts
    if section not in of or section not in nf:
        return None
    return of, nf


def finding_key(f: Finding) -> FindingKey:
    return (f.id, f.host, f.subject)


def _playbook_name(value: Any) -> str | None:
    if not value:
        return None
    name = str(value).replace("\\", "/").rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if name.endswith((".yml", ".yaml")) else name


def _run_changes(o: RunMeta, n: RunMeta) -> list[Change]:
    """What the two runs were asked to do differently (one line each, for the whole run)."""
    out = []
    op, np_ = _playbook_name(o.playbook), _playbook_name(n.playbook)
    if op and np_ and op != np_:
        out.append(Change("", "run.playbook", "playbook", op, np_, f"playbook changed: {op} -> {np_}"))
    oprobes, nprobes = o.probes, n.probes
    if oprobes is not None and nprobes is not None and set(oprobes) != set(nprobes):
        gone, added = sorted(set(oprobes) - set(nprobes)), sorted(set(nprobes) - set(oprobes))
        text = "; ".join(part for part in (f"not run now: {', '.join(gone)}" if gone else "",
                                            f"run now: {', '.join(added)}" if added else "") if part)
        out.append(Change("", "run.probes", "probes", sorted(oprobes), sorted(nprobes), f"probes changed ({text})"))
    if (o.limit or None) != (n.limit or None):
        out.append(Change("", "run.limit", "limit", o.limit, n.limit,
                          f"limit changed: {o.limit or '(none)'} -> {n.limit or '(none)'}"))
    return out


def _shown(value: Any) -> str:
    return "(none)" if value is None else value if isinstance(value, str) else json.dumps(value)


def _expect_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(key, old value, new value) for each expectation that differs ("(none)": not set)."""
    return [(k, _shown(old.get(k)), _shown(new.get(k))) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


_NAMED = 3  # hosts named in one expectation line; the rest are counted


def _states(host: JudgedHost, findings: list[Finding], fleet: FleetResult,
            ids: list[str]) -> dict[str, coverage.CheckState]:
    return coverage.check_states(host.not_judged, findings, ids, fleet.not_judged_on(host.name),
                                 fleet.silenced_of(host.name))


def _class_comparable(o: JudgedHost, n: JudgedHost) -> bool:
    """The topology class is made of host, pcie, nvml and nvlink facts: compared only when the same
    of those probes ran in both runs (a quick run without nvlink is not a changed machine) and
    both hosts have a class (a host cut short has none: its shape is not known)."""
    return all(_probe_ok(o, p) == _probe_ok(n, p) for p in ("host", "pcie", "nvml", "nvlink")) \
        and not o.unfinished() and not n.unfinished()


def _diff_gpus(name: str, of: Facts, nf: Facts, source: str) -> list[Change]:
    old, new = F.gpus(of, source) or [], F.gpus(nf, source) or []
    out: list[Change] = []
    new_by_uuid = {g.uuid: g for g in new if g.uuid}
    new_by_bus = {g.bus_id: g for g in new if g.bus_id}
    matched: set[int] = set()  # ids of new GpuRefs accounted for
    for g in old:
        if g.uuid and g.uuid in new_by_uuid:
            n = new_by_uuid[g.uuid]
            matched.add(id(n))
            if g.bus_id and n.bus_id and g.bus_id != n.bus_id:
                out.append(Change(name, "gpu.moved", g.uuid, g.bus_id, n.bus_id,
                                  f"GPU {g.uuid} moved from {g.bus_id} to {n.bus_id}"))
            if n.lost and not g.lost:
                out.append(Change(name, "gpu.lost", n.label, g.uuid, None,
                                  f"GPU lost: {n.label} fell off the bus (NVML: GPU_IS_LOST)"))
            elif g.lost and not n.lost:
                out.append(Change(name, "gpu.gained", n.label, None, n.uuid, f"GPU back: {n.label} answers again"))
            continue
        n2 = new_by_bus.get(g.bus_id) if g.bus_id else None
        if n2 is not None and id(n2) not in matched:
            matched.add(id(n2))
            if g.uuid and n2.uuid and g.uuid != n2.uuid:
                out.append(Change(name, "gpu.replaced", g.bus_id or "?", g.uuid, n2.uuid,
                                  f"GPU at {g.bus_id} is another board: {g.uuid} -> {n2.uuid}"))
            continue
        out.append(Change(name, "gpu.lost", g.label, g.uuid, None,
                          f"GPU lost: {g.label}" + (f" ({g.name}, {g.uuid})" if g.uuid else "")))
    for n in new:
        if id(n) not in matched:
            out.append(Change(name, "gpu.gained", n.label, None, n.uuid,
                              f"GPU gained: {n.label}" + (f" ({n.name}, {n.uuid})" if n.uuid else "")))
    return out


def _diff_links(name: str, of: Facts, nf: Facts) -> list[Change]:
    old, new = F.nvlinks(of) or {}, F.nvlinks(nf) or {}
    out: list[Change] = []
    # True up, False down, None: NVML could not tell (no change claimed either way)
    for key in sorted(set(old) | set(new)):
        was: object = old.get(key, "absent")
        now: object = new.get(key, "absent")
        subject = f"{key[0]} link {key[1]}"
        if was is True and now in (False, "absent"):
            state = "down" if now is False else "absent"
            out.append(Change(name, "link.down", subject, "up", state, f"NVLink {subject} went {state}"))
        elif now is True and was in (False, "absent"):
            out.append(Change(name, "link.up", subject, "down" if was is False else "absent", "up",
                              f"NVLink {subject} came up"))
    return out


def _diff_levels(name: str, of: Facts, nf: Facts) -> list[Change]:
    old, new = F.level_matrix(of) or {}, F.level_matrix(nf) or {}
    out: list[Change] = []
    for a, b in sorted(set(old) & set(new)):
        if a > b and (b, a) in old and (b, a) in new:
            continue  # the matrix is symmetric: each pair once
        if old[(a, b)] != new[(a, b)]:
            out.append(Change(name, "level.changed", f"{a} <-> {b}", old[(a, b)], new[(a, b)],
                              f"path {a} <-> {b}: {old[(a, b)]} -> {new[(a, b)]}"))
    return out


def _diff_bandwidth(name: str, of: Facts, nf: Facts, tol: float) -> list[Change]:
    old, new = F.bandwidths(of) or {}, F.bandwidths(nf) or {}
    out: list[Change] = []
    for path in sorted(set(old) & set(new)):
        a, b = old[path], new[path]
        if a <= 0:
            if b > 0:
                out.append(Change(name, "bandwidth.rose", path, a, b, f"{path}: {a:.1f} -> {b:.1f} GB/s"))
            continue
        rel = (b - a) / a
        if abs(rel) > tol:
            kind = "bandwidth.dropped" if rel < 0 else "bandwidth.rose"
            out.append(Change(name, kind, path, a, b, f"{path}: {a:.1f} -> {b:.1f} GB/s ({rel:+.0%})"))
    return out


# What diff_fleets reads of a host record besides its findings (which come from the fleet's list)
# and its fingerprint/class (decided fleet-wide: the spool adds it, spool.SpooledRecords.digest).
_DIGEST_KEYS = ("outcome", "reason", "probes", "expect", "not_judged")
_DIGEST_SECTIONS = ("gpus", "nvlink", "topology", "p2p")


def drift_digest(rec: dict[str, Any], encoded: Mapping[str, str] | None = None) -> str | None:
    """A digest of everything diff_fleets reads of this host record (outcome, probes, expectations,
    not-judged ids, the GPU, NVLink, topology and p2p facts), or None when a diff must read the
    record itself: the host was unreachable, its not-judged ids are not stored, or compared with
    itself it would show changes (GPUs without a distinct identity).  Two runs whose records of a
    host have one digest, the same class and the same findings have no change on it, so `probe
    diff` of two 10,000-host runs decodes only the hosts that differ.

    `encoded`: the JSON of the record's values and facts sections as the writer cut it
    (fleet_file.record_text's `parts`, schema 3's text, store/members.py); what it lacks is encoded
    here, to the same text."""
    try:
        if rec.get("outcome") == "unreachable" or not isinstance(rec.get("not_judged"), dict):
            return None
        if not isinstance(rec.get("facts"), dict):
            return None
        facts = F.host_facts(rec)
        if _self_diff(str(rec.get("name")), facts):
            return None
        by_name: Mapping[str, Any] = facts  # sections by a name held in a variable
        have = encoded or {}
        parts = [have.get(k) or (_text(rec[k]) if k in rec else _ABSENT) for k in _DIGEST_KEYS]
        parts += [have.get(f"facts.{k}") or (_text(by_name[k]) if k in by_name else _ABSENT)
                  for k in _DIGEST_SECTIONS]
        pcie = facts.get("pcie")
        parts.append(_ABSENT if "pcie" not in facts else encode_json(pcie.get("gpus") if isinstance(pcie, dict) else pcie))
        return hashlib.blake2b("\n".join(parts).encode(), digest_size=16).hexdigest()
    except Exception:  # a value of an odd type: this host is compared the slow way
        return None


def _text(value: Any) -> str:
    return members.text(value).decode("utf-8")


def _self_diff(name: str, facts: Facts) -> bool:
    """Would _diff_sections of this record against itself report anything?  GPU lists and level
    matrices can (a GPU with no identity, a NaN level); links and bandwidths compare each value
    with itself, which never reports a change, so they are not walked here (the walk over the p2p
    matrices was a quarter of judging a host)."""
    if _diff_gpus(name, facts, facts, "gpus") or _diff_gpus(name, facts, facts, "pcie"):
        return True
    topo = facts.get("topology")
    matrix = topo.get("matrix") if isinstance(topo, dict) else None
    if isinstance(matrix, list) and all(isinstance(row, list) and all(c is None or type(c) is str for c in row)
                                        for row in matrix):
        return False  # every level equals itself: no level change (the usual matrix, not walked twice)
    return bool(_diff_levels(name, facts, facts))


_ABSENT = "\u0000absent"


def diff_fleets(old: FleetResult, new: FleetResult, bw_tolerance: float = 0.10) -> FleetDiff:
    """Per-host changes from run `old` to run `new`."""
    if bw_tolerance < 0:
        raise ValueError("bw_tolerance must be >= 0 (0.10 = 10%)")
    d = FleetDiff(old_run=old.run.id or None, new_run=new.run.id or None, run_changes=_run_changes(old.run, new.run),
                  old_limit=old.run.limit, new_limit=new.run.limit)
    old_names, new_names = old.hosts.names(), new.hosts.names()
    in_old, in_new = set(old_names), set(new_names)
    ids = sorted({f.id for f in old.findings} | {f.id for f in new.findings})
    d.not_in_new = [name for name in dict.fromkeys(old_names) if name not in in_new]
    d.not_in_old = [name for name in dict.fromkeys(new_names) if name not in in_old]
    expect_changes: dict[tuple[str, str, str], list[str]] = {}
    compared = 0
    for name in [n for n in dict.fromkeys(old_names) if n in in_new]:
        was_f, now_f = old.findings_of(name), new.findings_of(name)
        od = old.hosts.digest_by_name(name)
        if od is not None and od == new.hosts.digest_by_name(name) and \
                {finding_key(f) for f in was_f} == {finding_key(f) for f in now_f}:
            compared += 1  # the same in both runs (drift_digest): nothing to decode, nothing changed
            continue
        o, n = old.hosts.by_name(name), new.hosts.by_name(name)
        if o is None or n is None:
            continue
        if not _reachability(d, o, n):
            continue  # nothing to compare on the side that did not answer
        compared += 1
        if o.expect and n.expect and o.expect != n.expect:
            for change in _expect_changes(o.expect, n.expect):
                expect_changes.setdefault(change, []).append(name)
        if _class_comparable(o, n) and o.topology_class != n.topology_class and (o.topology_class or n.topology_class):
            d.changes.append(Change(name, "class.changed", name, o.topology_class, n.topology_class,
                                    f"topology class {shown(o.topology_class, 'none')} -> "
                                    f"{shown(n.topology_class, 'none')}"))
        d.changes.extend(_diff_sections(name, o, n, bw_tolerance))
        _diff_findings(d, o, n, was_f, now_f, old, new, ids)
    d.compared = compared
    # one line per changed expectation, for the whole run: --expect and playbooks set them for many hosts
    for (key, was, now), hosts in expect_changes.items():
        where = (f"all {compared} hosts" if len(hosts) == compared else
                 f"{len(hosts)} host(s): " + ", ".join(hosts[:_NAMED]) + (f" and {len(hosts) - _NAMED} more"
                                                                          if len(hosts) > _NAMED else ""))
        d.run_changes.append(Change("", "run.expect", key, was, now, f"expectation {key}: {was} -> {now} on {where}"))
    return d


def _never_started(h: JudgedHost) -> bool:
    """A host the run was stopped before it reached: it said nothing, it is neither up nor down."""
    return bool(h.probes) and all(r.outcome == "skipped" and r.reason == NOT_STARTED for r in h.probes.values())


def _reachability(d: FleetDiff, o: JudgedHost, n: JudgedHost) -> bool:
    """Record a change of reachability; True when both runs heard from the host, so the rest of it
    can be compared.  A host one run never started is not compared, and never "reachable again"."""
    if _never_started(o) or _never_started(n):
        return False
    o_down, n_down = not o.reachable, not n.reachable
    if n_down and not o_down:
        d.changes.append(Change(o.name, "host.unreachable", o.name, o.outcome, "unreachable",
                                f"host newly unreachable: {n.reason or 'no reason given'}"))
    elif o_down and not n_down:
        d.changes.append(Change(o.name, "host.recovered", o.name, "unreachable", n.outcome, "host reachable again"))
    return not (o_down or n_down)


def _diff_sections(name: str, o: JudgedHost, n: JudgedHost, bw_tolerance: float) -> list[Change]:
    out: list[Change] = []
    # NVML's GPU list when nvml ran both times, else the PCIe bus's (bus ids, no uuids)
    gpu_changes: list[Change] = []
    bus_of: dict[str, str | None] = {}  # a GPU change's subject (the GPU's label) -> its bus id
    for section in ("gpus", "pcie"):
        pair = _comparable(o, n, section)
        if pair:
            gpu_changes = _diff_gpus(name, *pair, source=section)
            bus_of = {r.label: r.bus_id for facts in pair for r in F.gpus(facts, section) or []}
            break
    pair = _comparable(o, n, "nvlink")
    links = _diff_links(name, *pair) if pair else []
    # A GPU that is gone takes its links with it: one line for the GPU, not one per link.
    for i, g in enumerate(gpu_changes):
        if g.kind != "gpu.lost":
            continue
        bus = bus_of.get(g.subject)  # the facts' own bus id, never read back out of the label
        gone = [c for c in links if bus and c.new == "absent" and c.subject.startswith(f"{bus} link ")]
        if gone:
            links = [c for c in links if c not in gone]
            gpu_changes[i] = replace(g, message=f"{g.message}; its {len(gone)} NVLink(s) with it")
    out.extend(gpu_changes)
    out.extend(links)
    pair = _comparable(o, n, "topology")
    if pair:
        out.extend(_diff_levels(name, *pair))
    pair = _comparable(o, n, "p2p")
    if pair:
        out.extend(_diff_bandwidth(name, *pair, bw_tolerance))
    return out


def _diff_findings(d: FleetDiff, o: JudgedHost, n: JudgedHost, was_f: list[Finding], now_f: list[Finding],
                   old: FleetResult, new: FleetResult, ids: list[str]) -> None:
    """New: the baseline judged that check on this host; resolved: this run judged it and did not
    raise it.  Anything else is counted in d.not_compared with the reason."""
    was = {finding_key(f): f for f in was_f}
    now = {finding_key(f): f for f in now_f}
    if not (set(was) ^ set(now)):
        return
    old_states, new_states = _states(o, was_f, old, ids), _states(n, now_f, new, ids)
    for k in sorted(set(now) - set(was)):
        st = old_states.get(k[0])
        unmeasured = _unmeasured(now[k], o)
        if (st is not None and st.state == coverage.NOT_JUDGED) or unmeasured:
            why = f"not judged in the baseline: {st.reason if st and st.state == coverage.NOT_JUDGED else unmeasured}"
            d.not_compared[why] = d.not_compared.get(why, 0) + 1
            continue
        d.new_findings.append(k)
        d.new.append(now[k])
        d.changes.append(Change(n.name, "finding.new", f"{k[0]} {k[2]}", None, k[0], now[k].message))
    for k in sorted(set(was) - set(now)):
        st = new_states.get(k[0])
        unmeasured = _unmeasured(was[k], n)
        if (st is not None and st.state == coverage.NOT_JUDGED) or unmeasured:
            why = f"not judged in this run: {st.reason if st and st.state == coverage.NOT_JUDGED else unmeasured}"
            d.not_compared[why] = d.not_compared.get(why, 0) + 1
            continue
        d.resolved_findings.append(k)
        d.resolved.append(was[k])
        if o.topology_class:
            d.old_classes[o.name] = o.topology_class
        d.changes.append(Change(n.name, "finding.resolved", f"{k[0]} {k[2]}", k[0], None, was[k].message))


def _unmeasured(f: Finding, host: JudgedHost) -> str:
    """Why a fleet-baseline finding cannot be compared on `host`, or '': the run judged the rule
    there but did not measure that figure (a temperature under load, in a run that applied no load;
    a GPU pair copy of a link kind it did not copy over), so it is neither resolved nor new."""
    if f.id not in baseline.FINDING_IDS:
        return ""
    figure, gpu = baseline.figure_of(f)
    try:
        measured = baseline.measured_figures(host.facts)
    except Exception:  # a value of an odd type: the rule's coverage alone decides, as before
        return ""
    return "" if (figure, gpu) in measured else f"{baseline.figure_text(figure)} not measured"
