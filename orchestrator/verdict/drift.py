"""Drift between two runs: what changed per host (pure: two fleet.json dicts in, a FleetDiff out).

A section is compared only when its probe ran fine in both runs: a quick triage today against
last night's audit must not report every NVLink as "down" just because nvlink did not run.  Hosts
unreachable in either run get a reachability change and nothing else, for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from orchestrator.facts import read as F
from orchestrator.facts import registry


@dataclass(frozen=True)
class Change:
    host: str
    kind: str  # host.added, host.removed, host.unreachable, host.recovered, gpu.lost, gpu.gained,
    #            gpu.moved, gpu.replaced, link.down, link.up, level.changed, bandwidth.dropped,
    #            bandwidth.rose, class.changed, finding.new, finding.resolved
    subject: str
    old: Any = None
    new: Any = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FleetDiff:
    old_run: str | None
    new_run: str | None
    changes: list[Change] = field(default_factory=list)

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
        return bool(self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {"old_run": self.old_run, "new_run": self.new_run, "changes": [c.to_dict() for c in self.changes]}


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


def _run_id(fleet: dict[str, Any]) -> str | None:
    run = fleet.get("run") if isinstance(fleet, dict) else None
    return run.get("id") if isinstance(run, dict) else None


def _probe_ok(host: dict[str, Any], probe: str) -> bool:
    probes = host.get("probes")
    if not isinstance(probes, dict):
        return True  # no per-probe record: trust the facts that are there
    rec = probes.get(probe)
    return isinstance(rec, dict) and rec.get("outcome") == "ok"


def _comparable(old: dict[str, Any], new: dict[str, Any], section: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    probe = registry.probe_of(section) or section
    if not (_probe_ok(old, probe) and _probe_ok(new, probe)):
        return None
    of, nf = old.get("facts") or {}, new.get("facts") or {}
    if section not in of or section not in nf:
        return None
    return of, nf


def _finding_key(f: dict[str, Any]) -> tuple[str, str, str]:
    return (str(f.get("id")), str(f.get("host")), str(f.get("subject")))


def _diff_gpus(name: str, of: dict[str, Any], nf: dict[str, Any], source: str) -> list[Change]:
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


def _diff_links(name: str, of: dict[str, Any], nf: dict[str, Any]) -> list[Change]:
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


def _diff_levels(name: str, of: dict[str, Any], nf: dict[str, Any]) -> list[Change]:
    old, new = F.level_matrix(of) or {}, F.level_matrix(nf) or {}
    out: list[Change] = []
    for a, b in sorted(set(old) & set(new)):
        if a > b and (b, a) in old and (b, a) in new:
            continue  # the matrix is symmetric: each pair once
        if old[(a, b)] != new[(a, b)]:
            out.append(Change(name, "level.changed", f"{a} <-> {b}", old[(a, b)], new[(a, b)],
                              f"path {a} <-> {b}: {old[(a, b)]} -> {new[(a, b)]}"))
    return out


def _diff_bandwidth(name: str, of: dict[str, Any], nf: dict[str, Any], tol: float) -> list[Change]:
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


def diff_fleets(old: dict[str, Any], new: dict[str, Any], bw_tolerance: float = 0.10) -> FleetDiff:
    """Per-host changes from run `old` to run `new` (both fleet.json dicts)."""
    if bw_tolerance < 0:
        raise ValueError("bw_tolerance must be >= 0 (0.10 = 10%)")
    d = FleetDiff(old_run=_run_id(old), new_run=_run_id(new))
    oh, nh = _hosts(old), _hosts(new)
    old_findings: dict[str, set[tuple[str, str, str]]] = {}
    new_findings: dict[str, set[tuple[str, str, str]]] = {}
    messages: dict[tuple[str, str, str], str] = {}
    for fleet, into in ((old, old_findings), (new, new_findings)):
        for f in fleet.get("findings") or []:
            if isinstance(f, dict):
                k = _finding_key(f)
                into.setdefault(k[1], set()).add(k)
                messages[k] = str(f.get("message", ""))
    for name in [*oh, *[n for n in nh if n not in oh]]:
        if name not in nh:
            d.changes.append(Change(name, "host.removed", name, message="host no longer in the run"))
            continue
        if name not in oh:
            d.changes.append(Change(name, "host.added", name, message="host new in this run"))
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
        if o.get("class") != n.get("class") and (o.get("class") or n.get("class")):
            d.changes.append(Change(name, "class.changed", name, o.get("class"), n.get("class"),
                                    f"topology class {o.get('class')} -> {n.get('class')}"))
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
        d.changes.extend(gpu_changes)
        d.changes.extend(links)
        pair = _comparable(o, n, "topology")
        if pair:
            d.changes.extend(_diff_levels(name, *pair))
        pair = _comparable(o, n, "p2p")
        if pair:
            d.changes.extend(_diff_bandwidth(name, *pair, bw_tolerance))
        was, now = old_findings.get(name, set()), new_findings.get(name, set())
        for k in sorted(now - was):
            d.changes.append(Change(name, "finding.new", f"{k[0]} {k[2]}", None, k[0], messages.get(k, "")))
        for k in sorted(was - now):
            d.changes.append(Change(name, "finding.resolved", f"{k[0]} {k[2]}", k[0], None, messages.get(k, "")))
    return d
