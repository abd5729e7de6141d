"""Drift between two runs: what changed per host (pure: two fleet.json dicts in, a FleetDiff out).

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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from orchestrator.facts import read as F
from orchestrator.facts import registry
from orchestrator.facts.model import Facts
from orchestrator.facts.shown import shown
from orchestrator.store import compact
from orchestrator.store.atomic import encode_json
from orchestrator.verdict import coverage


@dataclass(frozen=True)
class Change:
    host: str
    kind: str  # host.unreachable, host.recovered, gpu.lost, gpu.gained, gpu.moved, gpu.replaced,
    #            link.down, link.up, level.changed, bandwidth.dropped, bandwidth.rose, class.changed,
    #            finding.new, finding.resolved; for the run (host ""): run.playbook,
    #            run.probes, run.limit, run.expect
    subject: str
    old: Any = None
    new: Any = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FindingKey = tuple[str, str, str]  # id, host, subject


@dataclass
class FleetDiff:
    old_run: str | None
    new_run: str | None
    changes: list[Change] = field(default_factory=list)  # per host, on hosts both runs probed
    run_changes: list[Change] = field(default_factory=list)  # playbook, probes, limit, fleet-wide expectations
    not_in_new: list[str] = field(default_factory=list)  # hosts of the baseline this run did not probe
    not_in_old: list[str] = field(default_factory=list)  # hosts this run probed that the baseline did not
    old_limit: str | None = None
    new_limit: str | None = None
    # findings present in one run only whose check did not judge that host in the other: reason -> count
    not_compared: dict[str, int] = field(default_factory=dict)
    compared: int = 0  # hosts both runs probed and reached
    new_findings: list[FindingKey] = field(default_factory=list)
    resolved_findings: list[FindingKey] = field(default_factory=list)

    def by_host(self) -> dict[str, list[Change]]:
        out: dict[str, list[Change]] = {}
        for c in self.changes:
            out.setdefault(c.host, []).append(c)
        return out

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.changes:
            out[c.kind] = out.get(c.kind, 0) + 1
        return out

    def __bool__(self) -> bool:
        return bool(self.changes or self.run_changes or self.not_in_new or self.not_in_old)

    def to_dict(self) -> dict[str, Any]:
        return {"old_run": self.old_run, "new_run": self.new_run,
                "run_changes": [c.to_dict() for c in self.run_changes],
                "changes": [c.to_dict() for c in self.changes],
                "not_in_new": {"limit": self.new_limit, "hosts": list(self.not_in_new)},
                "not_in_old": {"limit": self.old_limit, "hosts": list(self.not_in_old)},
                "not_compared": dict(self.not_compared)}


class _HostsByName(Mapping[str, dict[str, Any]]):
    """Records kept on disk (spool.SpooledRecords), looked up by name one at a time, so
    comparing two big fleets holds two host records, not two fleets."""

    def __init__(self, records: Any) -> None:
        self._records = records
        self._names = records.names()
        self._known = set(self._names)

    def __getitem__(self, name: str) -> dict[str, Any]:
        rec = self._records.by_name(name)
        if not isinstance(rec, dict):
            raise KeyError(name)
        return rec

    def __contains__(self, name: object) -> bool:
        return name in self._known

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(self._names))

    def __len__(self) -> int:
        return len(self._known)


def _hosts(fleet: dict[str, Any]) -> Mapping[str, dict[str, Any]]:
    hosts = fleet.get("hosts") if isinstance(fleet, dict) else None
    if hasattr(hosts, "by_name"):
        return _HostsByName(hosts)
    return {h["name"]: h for h in hosts or [] if isinstance(h, dict) and isinstance(h.get("name"), str)}


def _digests(fleet: dict[str, Any]) -> Callable[[str], str | None]:
    """host -> its record's drift digest with its class, where the fleet's records carry them
    (judged in workers, or a stored fleet.json with its digests file); else None for every host."""
    hosts = fleet.get("hosts") if isinstance(fleet, dict) else None
    by_name = getattr(hosts, "digest_by_name", None)
    return by_name if callable(by_name) else (lambda name: None)


def _run_id(fleet: dict[str, Any]) -> str | None:
    run = fleet.get("run") if isinstance(fleet, dict) else None
    return run.get("id") if isinstance(run, dict) else None


def _probe_ok(host: dict[str, Any], probe: str) -> bool:
    probes = host.get("probes")
    if not isinstance(probes, dict):
        return True  # no per-probe record: trust the facts that are there
    rec = probes.get(probe)
    return isinstance(rec, dict) and rec.get("outcome") == "ok"


def _comparable(old: dict[str, Any], new: dict[str, Any], section: str) -> tuple[Facts, Facts] | None:
    probe = registry.probe_of(section) or section
    if not (_probe_ok(old, probe) and _probe_ok(new, probe)):
        return None
    of, nf = F.host_facts(old), F.host_facts(new)
    if section not in of or section not in nf:
        return None
    return of, nf


def finding_key(f: dict[str, Any]) -> FindingKey:
    return (str(f.get("id")), str(f.get("host")), str(f.get("subject")))


def _run_meta(fleet: dict[str, Any]) -> dict[str, Any]:
    run = fleet.get("run") if isinstance(fleet, dict) else None
    return run if isinstance(run, dict) else {}


def _playbook_name(value: Any) -> str | None:
    if not value:
        return None
    name = str(value).replace("\\", "/").rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if name.endswith((".yml", ".yaml")) else name


def _run_changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """What the two runs were asked to do differently (one line each, for the whole run)."""
    o, n = _run_meta(old), _run_meta(new)
    out = []
    op, np_ = _playbook_name(o.get("playbook")), _playbook_name(n.get("playbook"))
    if op and np_ and op != np_:
        out.append(Change("", "run.playbook", "playbook", op, np_, f"playbook changed: {op} -> {np_}"))
    oprobes, nprobes = o.get("probes"), n.get("probes")
    if isinstance(oprobes, list) and isinstance(nprobes, list) and set(oprobes) != set(nprobes):
        gone, added = sorted(set(oprobes) - set(nprobes)), sorted(set(nprobes) - set(oprobes))
        text = "; ".join(part for part in (f"not run now: {', '.join(gone)}" if gone else "",
                                            f"run now: {', '.join(added)}" if added else "") if part)
        out.append(Change("", "run.probes", "probes", sorted(oprobes), sorted(nprobes), f"probes changed ({text})"))
    if (o.get("limit") or None) != (n.get("limit") or None) and ("limit" in o or "limit" in n):
        out.append(Change("", "run.limit", "limit", o.get("limit"), n.get("limit"),
                          f"limit changed: {o.get('limit') or '(none)'} -> {n.get('limit') or '(none)'}"))
    return out


def _shown(value: Any) -> str:
    return "(none)" if value is None else value if isinstance(value, str) else json.dumps(value)


def _expect_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, old value, new value) for each expectation that differs ("(none)": not set)."""
    return [(k, _shown(old.get(k)), _shown(new.get(k))) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


_NAMED = 3  # hosts named in one expectation line; the rest are counted


def _states(rec: dict[str, Any], findings: list[dict[str, Any]], fleet: dict[str, Any],
            ids: list[str]) -> dict[str, coverage.CheckState]:
    fleet_level = fleet.get("not_judged") if isinstance(fleet.get("not_judged"), dict) else {}
    silenced = [x for x in fleet.get("silenced") or [] if isinstance(x, dict)]
    return coverage.check_states(rec, findings, ids, fleet_level, silenced)


def _class_comparable(o: dict[str, Any], n: dict[str, Any]) -> bool:
    """The topology class is made of host, pcie, nvml and nvlink facts: compared only when the same
    of those probes ran in both runs (a quick run without nvlink is not a changed machine)."""
    return all(_probe_ok(o, p) == _probe_ok(n, p) for p in ("host", "pcie", "nvml", "nvlink"))


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

    `encoded`: the compact JSON of the record's values and facts sections as the writer cut it
    (fleet_file.record_text's `parts`, in schema 2's stored form); what it lacks is encoded here, to
    the same text."""
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
        parts = [have.get(k) or (compact.value_text(rec[k]) if k in rec else _ABSENT) for k in _DIGEST_KEYS]
        parts += [have.get(f"facts.{k}") or (compact.value_text(by_name[k]) if k in by_name else _ABSENT)
                  for k in _DIGEST_SECTIONS]
        pcie = facts.get("pcie")
        parts.append(_ABSENT if "pcie" not in facts else encode_json(pcie.get("gpus") if isinstance(pcie, dict) else pcie))
        return hashlib.blake2b("\n".join(parts).encode(), digest_size=16).hexdigest()
    except Exception:  # a value of an odd type: this host is compared the slow way
        return None


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


def diff_fleets(old: dict[str, Any], new: dict[str, Any], bw_tolerance: float = 0.10) -> FleetDiff:
    """Per-host changes from run `old` to run `new` (both fleet.json dicts)."""
    if bw_tolerance < 0:
        raise ValueError("bw_tolerance must be >= 0 (0.10 = 10%)")
    d = FleetDiff(old_run=_run_id(old), new_run=_run_id(new), run_changes=_run_changes(old, new),
                  old_limit=_run_meta(old).get("limit"), new_limit=_run_meta(new).get("limit"))
    oh, nh = _hosts(old), _hosts(new)
    old_by_host, new_by_host = F.findings_by_host(old), F.findings_by_host(new)
    ids = sorted({str(f.get("id")) for fs in (old_by_host, new_by_host) for items in fs.values() for f in items})
    d.not_in_new = [name for name in oh if name not in nh]
    d.not_in_old = [name for name in nh if name not in oh]
    expect_changes: dict[tuple[str, str, str], list[str]] = {}
    compared = 0
    old_digest, new_digest = _digests(old), _digests(new)
    for name in [n for n in oh if n in nh]:
        od = old_digest(name)
        if od is not None and od == new_digest(name) and \
                {finding_key(f) for f in old_by_host.get(name, [])} == {finding_key(f) for f in new_by_host.get(name, [])}:
            compared += 1  # the same in both runs (drift_digest): nothing to decode, nothing changed
            continue
        o, n = oh[name], nh[name]
        o_down, n_down = o.get("outcome") == "unreachable", n.get("outcome") == "unreachable"
        if n_down and not o_down:
            d.changes.append(Change(name, "host.unreachable", name, o.get("outcome"), "unreachable",
                                    f"host newly unreachable: {n.get('reason') or 'no reason given'}"))
        elif o_down and not n_down:
            d.changes.append(Change(name, "host.recovered", name, "unreachable", n.get("outcome"),
                                    "host reachable again"))
        if o_down or n_down:
            continue  # nothing to compare on the side that did not answer
        compared += 1
        if isinstance(o.get("expect"), dict) and isinstance(n.get("expect"), dict) and o["expect"] != n["expect"]:
            for change in _expect_changes(o["expect"], n["expect"]):
                expect_changes.setdefault(change, []).append(name)
        if _class_comparable(o, n) and o.get("class") != n.get("class") and (o.get("class") or n.get("class")):
            d.changes.append(Change(name, "class.changed", name, o.get("class"), n.get("class"),
                                    f"topology class {shown(o.get('class'), 'none')} -> {shown(n.get('class'), 'none')}"))
        d.changes.extend(_diff_sections(name, o, n, bw_tolerance))
        _diff_findings(d, name, o, n, old_by_host.get(name, []), new_by_host.get(name, []), old, new, ids)
    d.compared = compared
    # one line per changed expectation, for the whole run: --expect and playbooks set them for many hosts
    for (key, was, now), hosts in expect_changes.items():
        where = (f"all {compared} hosts" if len(hosts) == compared else
                 f"{len(hosts)} host(s): " + ", ".join(hosts[:_NAMED]) + (f" and {len(hosts) - _NAMED} more"
                                                                          if len(hosts) > _NAMED else ""))
        d.run_changes.append(Change("", "run.expect", key, was, now, f"expectation {key}: {was} -> {now} on {where}"))
    return d


def _diff_sections(name: str, o: dict[str, Any], n: dict[str, Any], bw_tolerance: float) -> list[Change]:
    out: list[Change] = []
    # NVML's GPU list when nvml ran both times, else the PCIe bus's (bus ids, no uuids)
    gpu_changes: list[Change] = []
    for section in ("gpus", "pcie"):
        pair = _comparable(o, n, section)
        if pair:
            gpu_changes = _diff_gpus(name, *pair, source=section)
            break
    pair = _comparable(o, n, "nvlink")
    links = _diff_links(name, *pair) if pair else []
    # A GPU that is gone takes its links with it: one line for the GPU, not one per link.
    for i, g in enumerate(gpu_changes):
        if g.kind != "gpu.lost":
            continue
        bus = g.subject.rsplit(" ", 1)[-1]
        gone = [c for c in links if c.new == "absent" and c.subject.startswith(f"{bus} link ")]
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


def _diff_findings(d: FleetDiff, name: str, o: dict[str, Any], n: dict[str, Any], was_f: list[dict[str, Any]],
                   now_f: list[dict[str, Any]], old: dict[str, Any], new: dict[str, Any], ids: list[str]) -> None:
    """New: the baseline judged that check on this host; resolved: this run judged it and did not
    raise it.  Anything else is counted in d.not_compared with the reason."""
    was = {finding_key(f): f for f in was_f}
    now = {finding_key(f): f for f in now_f}
    if not (set(was) ^ set(now)):
        return
    old_states, new_states = _states(o, was_f, old, ids), _states(n, now_f, new, ids)
    for k in sorted(set(now) - set(was)):
        st = old_states.get(k[0])
        if st is not None and st.state == coverage.NOT_JUDGED:
            why = f"not judged in the baseline: {st.reason}"
            d.not_compared[why] = d.not_compared.get(why, 0) + 1
            continue
        d.new_findings.append(k)
        d.changes.append(Change(name, "finding.new", f"{k[0]} {k[2]}", None, k[0], str(now[k].get("message", ""))))
    for k in sorted(set(was) - set(now)):
        st = new_states.get(k[0])
        if st is not None and st.state == coverage.NOT_JUDGED:
            why = f"not judged in this run: {st.reason}"
            d.not_compared[why] = d.not_compared.get(why, 0) + 1
            continue
        d.resolved_findings.append(k)
        d.changes.append(Change(name, "finding.resolved", f"{k[0]} {k[2]}", k[0], None,
                                str(was[k].get("message", ""))))
