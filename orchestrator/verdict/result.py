"""The judged fleet as one typed value: what the verdict decided, which every surface renders.

`FleetResult` is made by the verdict (verdict/judge.py) and read by everyone else: the terminal,
`-q`, `--show`, the HTML report, JUnit, Prometheus, CSV, the Ansible inventory, the Slurm drain
list, drift and the exit status.  Each asks it; none decides again.  Per host (`JudgedHost`): its
identity, how to reach it, each probe's outcome, its facts, its health (verdict/health.py), its
findings grouped by root (verdict/causes.py) and the state of every check (verdict/coverage.py).

The dict form exists only at the file edge: `to_document()` is fleet.json as written
(orchestrator/schema/fleet.schema.json), `from_document()` reads a stored one back, whatever its
age: a document written before health and roots were stored gets them decided here, by the same
functions that decide them for a new run.  A stored document may be damaged: what is not of the
stored shape is left out and said in `problems`, never raised at a reader.

Host records stay where the verdict put them (in memory, or on disk for a big fleet, read one at
a time: store/spool.py), so a 10,000-host fleet is not held twice.  The result reads them through
files/records.py:HostRecords and never asks how they are kept; reading a stored run from its
directory is the store's and the api's (api/stored.py).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Any, cast, overload

from orchestrator.engine.outcomes import Outcome, finished, is_problem
from orchestrator.facts.conform import conform_facts, conform_probes
from orchestrator.facts.model import Facts
from orchestrator.files.jsontext import encode_compact
from orchestrator.files.records import Body, HostRecords, RecordList
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict import causes, coverage
from orchestrator.verdict.actions import Action
from orchestrator.verdict.checks import CAUSES, FINDING_IDS
from orchestrator.verdict.classes import CarriedClass
from orchestrator.verdict.device_health import HostDevices, device_health
from orchestrator.verdict.drawing import HostDrawing, host_drawing
from orchestrator.verdict.fabric_faults import FabricFault, fabric_counts, fabric_faults, host_findings
from orchestrator.verdict.findings import (
    SEVERITY_ORDER,
    Finding,
    FindingRef,
    Kind,
    Severity,
    devices_from,
    stored_action,
)
from orchestrator.verdict.health import (
    HEALTH_ORDER,
    Health,
    HostHealth,
    decide,
    fault_severities,
    stored_answer,
)
from orchestrator.verdict.overrides import Silenced

_CAUSES = causes.by_consequence(CAUSES)
# fleet.json's schema (orchestrator/schema/fleet.schema.json) in the shapes readers get; the file
# itself is written compacted (store/compact.py, schema 2) and read back into these shapes.
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ProbeRun:
    """One probe on one host: how it ended and why."""

    outcome: str  # engine/outcomes.py Outcome value
    reason: str = ""
    duration_s: float | None = None
    probe_version: str | None = None

    @property
    def finished(self) -> bool:
        return finished(self.outcome, self.reason)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProbeRun:
        dur = d.get("duration_s")
        version = d.get("probe_version")
        return cls(str(d.get("outcome") or "skipped"), str(d.get("reason") or ""),
                   float(dur) if isinstance(dur, (int, float)) and not isinstance(dur, bool) else None,
                   version if isinstance(version, str) else None)


@dataclass(frozen=True)
class JudgedHost:
    name: str
    address: str
    groups: tuple[str, ...]
    outcome: str  # the transport's: how the host answered (engine/outcomes.py)
    reason: str  # why the outcome, when it is not ok
    probes: Mapping[str, ProbeRun]
    facts: Facts
    health: HostHealth
    topology_class: str | None = None
    fingerprint: str | None = None
    expect: Mapping[str, Any] = field(default_factory=dict)  # what it was judged against
    not_judged: Mapping[str, str] = field(default_factory=dict)  # finding id -> why its check could not judge
    normalize_errors: tuple[str, ...] = ()
    # how to reach it again: the inventory's connection variables (ansible_host, ansible_port, ...)
    connection: Mapping[str, Any] = field(default_factory=dict)

    @property
    def reachable(self) -> bool:
        return self.outcome != Outcome.UNREACHABLE.value

    @property
    def outcome_is_problem(self) -> bool:
        return is_problem(self.outcome)

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s or 0.0 for p in self.probes.values())

    def ran(self, probe: str) -> bool:
        """The probe ran to its end with an answer (its facts are what the host said)."""
        run = self.probes.get(probe)
        return run is not None and run.outcome == Outcome.OK.value

    def unfinished(self) -> dict[str, ProbeRun]:
        """The probes the run asked for that did not finish (the host is judged without them)."""
        return {p: r for p, r in self.probes.items() if not r.finished}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], findings: Sequence[Finding] = ()) -> JudgedHost:
        """A fleet.json host record (read tolerantly); `findings`: the host's, for a record stored
        before health was (its health is decided from them, as judge.py decides it)."""
        name = str(rec.get("name"))
        stored_probes = rec.get("probes")
        probes_raw: Mapping[str, Any] = stored_probes if isinstance(stored_probes, dict) else {}
        probes = {str(p): ProbeRun.from_dict(r) for p, r in probes_raw.items() if isinstance(r, dict)}
        stored_facts = rec.get("facts")
        facts = stored_facts if isinstance(stored_facts, dict) else {}
        outcome, reason = stored_answer(rec)
        stored_not_judged = rec.get("not_judged")
        if isinstance(stored_not_judged, dict):
            not_judged = _shared_why(tuple((str(k), str(v)) for k, v in stored_not_judged.items()))
        else:  # a record written before they were stored: worked out from its facts
            not_judged = coverage.record_not_judged(rec)
        health = HostHealth.from_dict(rec.get("health"))
        if health is None:
            unfinished = {p: r.outcome + (f" ({r.reason})" if r.reason else "")
                          for p, r in probes.items() if not r.finished}
            health = decide(outcome, reason, unfinished, findings)
        groups = _list(rec.get("groups"))
        return cls(
            name=name, address=str(rec.get("address") or name), groups=tuple(str(g) for g in groups),
            outcome=outcome, reason=reason, probes=probes, facts=cast(Facts, facts), health=health,
            topology_class=_str_or_none(rec.get("class")), fingerprint=_str_or_none(rec.get("fingerprint")),
            expect=rec["expect"] if isinstance(rec.get("expect"), dict) else {},
            not_judged=not_judged,
            normalize_errors=tuple(e for e in _list(rec.get("normalize_errors")) if isinstance(e, str)),
            connection=rec["connection"] if isinstance(rec.get("connection"), dict) else {})


@lru_cache(maxsize=256)
def _shared_why(items: tuple[tuple[str, str], ...]) -> Mapping[str, str]:
    """A host's not-judged ids and why, one object for every host that has the same (most of a
    fleet: a view of 100,000 unhealthy hosts held ~10 KB of these a host).  Read, never changed."""
    return dict(items)


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


@dataclass(frozen=True)
class Fault:
    """One fault on one host: its root finding and what followed from it, worst severity first."""

    root: Finding
    consequences: tuple[Finding, ...]
    severity: Severity  # the worst of the root and its consequences

    @property
    def host(self) -> str:
        return self.root.host

    @property
    def action(self) -> Action:
        """What the fault asks for: its root's action class (decided when the root was made)."""
        return self.root.action

    @property
    def because(self) -> str:
        """The facts that justify the action, as the root's rule says them."""
        return self.root.because


@dataclass(frozen=True)
class Outlier:
    host: str
    topology_class: str
    differences: tuple[str, ...]


@dataclass(frozen=True)
class TopologyClass:
    name: str
    fingerprint: str
    members: tuple[str, ...]
    outliers: tuple[Outlier, ...]
    descriptor: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "fingerprint": self.fingerprint, "descriptor": dict(self.descriptor),
                "members": list(self.members),
                "outliers": [{"host": o.host, "class": o.topology_class, "differences": list(o.differences)}
                             for o in self.outliers]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TopologyClass:
        outliers = tuple(Outlier(str(o.get("host")), str(o.get("class") or ""),
                                 tuple(str(x) for x in o.get("differences") or () if isinstance(x, str)))
                         for o in d.get("outliers") or () if isinstance(o, dict))
        return cls(str(d.get("name") or ""), str(d.get("fingerprint") or ""),
                   tuple(str(m) for m in d.get("members") or () if isinstance(m, str)), outliers,
                   d["descriptor"] if isinstance(d.get("descriptor"), dict) else {})


@dataclass(frozen=True)
class FleetSummary:
    hosts: int
    health: Mapping[str, int]  # HEALTH_ORDER -> hosts
    outcomes: Mapping[str, int]  # transport outcome -> hosts
    faults: Mapping[str, int]  # severity -> root findings (each with what followed from it)
    findings: Mapping[str, int]  # severity -> every finding
    findings_by_kind: Mapping[str, int]
    # severity -> faults of the fabric (verdict/fabric_faults.py): counted once each, in no host's `faults`
    fabric: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(SEVERITY_ORDER, 0))

    @property
    def fabric_total(self) -> int:
        return sum(self.fabric.values())

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": self.hosts, "health": dict(self.health), "outcomes": dict(self.outcomes),
                "faults": dict(self.faults), "fabric": dict(self.fabric), "findings": dict(self.findings),
                "findings_by_kind": dict(self.findings_by_kind)}

    @property
    def hosts_failed(self) -> int:
        """Hosts whose transport outcome is a problem (exit status 4)."""
        return sum(n for o, n in self.outcomes.items() if is_problem(o))


def stored_record(rec: Mapping[str, Any]) -> Mapping[str, Any]:
    """A host record read back from a file, with what is not of its stored type left out and said
    in its normalize_errors (facts/conform.py): every reader may then trust the types it reads."""
    facts, problems = conform_facts(rec.get("facts", {}))
    probes, probe_problems = conform_probes(rec.get("probes", {}))
    problems.extend(probe_problems)
    if not problems:
        return rec
    errors = [e for e in _list(rec.get("normalize_errors")) if isinstance(e, str)]
    return {**rec, "facts": facts, "probes": probes,
            "normalize_errors": errors + [f"stored record: {p}" for p in problems]}


class HostTable(Sequence[JudgedHost]):
    """The judged hosts, in the run's order; each record becomes a JudgedHost when it is read, so a
    fleet kept on disk stays there.  `stored`: the records were read back from a file, and are
    checked as they are read (stored_record); a run's own records are the normalizers' and are not."""

    def __init__(self, records: HostRecords, findings: FindingIndex, stored: bool = False) -> None:
        self._records = records
        self._findings = findings
        self._stored = stored

    @property
    def records(self) -> HostRecords | Sequence[Mapping[str, Any]]:
        """The file form of the hosts, for the one writer of fleet.json and for drift's digests."""
        return _StoredRecords(self, self._records) if self._stored else self._records

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, i: int) -> JudgedHost: ...

    @overload
    def __getitem__(self, i: slice) -> list[JudgedHost]: ...

    def __getitem__(self, i: int | slice) -> JudgedHost | list[JudgedHost]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self._host(self._records[i])

    def __iter__(self) -> Iterator[JudgedHost]:
        return (self._host(r) for r in self._records)

    def _host(self, rec: Mapping[str, Any]) -> JudgedHost:
        if self._stored:
            rec = stored_record(rec)
        return JudgedHost.from_record(rec, self._findings.of(str(rec.get("name"))))

    def with_facts(self, sections: Collection[str]) -> Iterator[JudgedHost]:
        """Every host with only the named facts sections: a reader of names, health and a section
        or two (the hosts table, -q) skips decoding the rest of a stored record.  A record stored
        without its not-judged ids is read whole: its facts tell what was measured."""
        for i, rec in enumerate(self._records.with_facts(sections)):
            if isinstance(rec.get("not_judged"), dict):
                yield self._host(rec)
                continue
            host = self._host(self._records[i])
            yield replace(host, facts=cast(Facts, {k: v for k, v in host.facts.items() if k in sections}))

    def carried(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[Mapping[str, Any], Body | None]]:
        """Each record (of start:stop) as reading it gives it, with where its stored text sits before
        its fleet-wide keys when that text can be copied as it is (store/carry.py): `probe merge`
        decodes each record once, and one at a time."""
        records = self._records
        rec: Mapping[str, Any]
        body: Body | None
        for i in range(start, len(records) if stop is None else stop):
            rec, body = records.body(i)
            if self._stored:
                checked = stored_record(rec)
                if checked is not rec:  # conformed as it was read: its stored text is not what readers get
                    rec, body = checked, None
            yield rec, body

    def names(self) -> list[str]:
        return self._records.names()

    def by_name(self, name: str) -> JudgedHost | None:
        rec = self._raw_record(name)
        return None if rec is None else self._host(rec)

    def record(self, name: str) -> Mapping[str, Any] | None:
        rec = self._raw_record(name)
        return stored_record(rec) if rec is not None and self._stored else rec

    def _raw_record(self, name: str) -> Mapping[str, Any] | None:
        return self._records.by_name(name)

    def digest_by_name(self, name: str) -> str | None:
        """The host record's drift digest where it was stored with one (verdict/drift.py)."""
        return self._records.digest_by_name(name)


class _StoredRecords(Sequence[Mapping[str, Any]]):
    """The file form of records read back from a file: each checked as it is read (stored_record),
    and given its health where it was stored before health was (decided as the host is read)."""

    def __init__(self, hosts: HostTable, records: HostRecords) -> None:
        self._hosts = hosts
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, i: int) -> Mapping[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[Mapping[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> Mapping[str, Any] | list[Mapping[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        rec = stored_record(self._records[i])
        if isinstance(rec.get("health"), dict):
            return rec
        return {**rec, "health": self._hosts[i].health.to_dict()}

    def json_pieces(self) -> Iterator[str]:
        """The records as one JSON array, in pieces (store/atomic.py:iter_json writes them so)."""
        yield "["
        for i in range(len(self)):
            yield ("," if i else "") + encode_compact(self[i])
        yield "]"


class FindingIndex:
    """A fleet's findings by host, made once."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self._by_host: dict[str, list[Finding]] = {}
        for f in findings:
            self._by_host.setdefault(f.host, []).append(f)

    def of(self, host: str) -> list[Finding]:
        return self._by_host.get(host, [])


@dataclass
class FleetResult:
    """A judged run.  Read it; it is the verdict's, and nothing downstream changes it."""

    run: RunMeta
    summary: FleetSummary
    hosts: HostTable
    findings: list[Finding]  # worst first, then id, host, subject
    classes: list[TopologyClass]
    silenced: list[Silenced]
    # fleet-wide ids a host could not be judged on (no peers to compare with): id -> host -> why
    not_judged: dict[str, dict[str, str]]
    # hosts this run did not class -> the class their last run that measured them gave (shown as carried)
    carried: dict[str, CarriedClass] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    problems: list[str] = field(default_factory=list)  # what a stored document held that could not be read
    # a document stored before health was: its records get the health decided on reading when written

    @cached_property
    def _index(self) -> FindingIndex:
        return FindingIndex(self.findings)

    # ---------------------------------------------------------------- asking it

    def findings_of(self, host: str) -> list[Finding]:
        return self._index.of(host)

    def class_shown(self, host: JudgedHost) -> str | None:
        """The host's class as a surface shows it: measured in this run, else carried (and said so)."""
        if host.topology_class:
            return host.topology_class
        carried = self.carried.get(host.name)
        return carried.shown() if carried is not None else None

    def not_judged_on(self, host: str) -> dict[str, str]:
        """finding id -> why a fleet-wide check could not judge `host`."""
        return {fid: str(hosts[host]) for fid, hosts in self.not_judged.items() if host in hosts}

    def silenced_of(self, host: str) -> list[tuple[str, str]]:
        """(finding id, why) of each of the host's findings the playbook silenced."""
        return self._silenced_by_host.get(host, [])

    @cached_property
    def _silenced_by_host(self) -> dict[str, list[tuple[str, str]]]:
        # one pass: a playbook that silences an id fleet-wide has a silenced finding on every host
        out: dict[str, list[tuple[str, str]]] = {}
        for s in self.silenced:
            out.setdefault(s.finding.host, []).append((s.finding.id, s.reason))
        return out

    def drawing(self, host: JudgedHost) -> HostDrawing:
        """What the checks decided about each device of `host`, for pictures (verdict/drawing.py)."""
        try:
            return host_drawing(host.facts, host.expect, self.findings_of(host.name))
        except Exception:  # facts of a shape a check's reader did not expect: the picture has no marks
            return HostDrawing()

    def devices(self, host: JudgedHost) -> HostDevices:
        """Each device of `host` as the verdict judged it (verdict/device_health.py)."""
        return device_health(self.findings_of(host.name), {p: r.outcome for p, r in host.probes.items()})

    def faults_of(self, host: str) -> list[Fault]:
        """The host's own faults (the fabric's, raised on it too, are `fabric_faults`)."""
        return _faults(host_findings(self.findings_of(host)))

    def faults(self, min_severity: str = "info") -> list[Fault]:
        """Every host fault of the fleet at `min_severity` or worse, worst first, in findings order
        (the fabric's are `fabric_faults`)."""
        floor = Severity(min_severity).rank
        return [f for f in _faults(host_findings(self.findings)) if f.severity.rank >= floor]

    @cached_property
    def fabric_faults(self) -> list[FabricFault]:
        """The fabric's faults, each once with the hosts it touches (verdict/fabric_faults.py)."""
        return fabric_faults(self.findings)

    @property
    def health_counts(self) -> dict[str, int]:
        return {h: int(self.summary.health.get(h, 0)) for h in HEALTH_ORDER}

    @cached_property
    def problem_hosts(self) -> list[JudgedHost]:
        """Hosts that are not healthy, worst health first, in the run's order within one."""
        hosts = [h for h in self.hosts.with_facts(()) if h.health.state.is_problem]
        return sorted(hosts, key=lambda h: HEALTH_ORDER.index(h.health.state.value))

    @property
    def failed_hosts(self) -> list[str]:
        """Hosts whose transport outcome is a problem (unreachable, timed out, a probe failed)."""
        return [h.name for h in self.hosts.with_facts(()) if h.outcome_is_problem]

    @property
    def check_ids(self) -> list[str]:
        """Every finding id this run could have raised: the catalog plus what it did raise."""
        return sorted(set(FINDING_IDS) | {f.id for f in self.findings})

    def check_states(self, ids: Iterable[str] | None = None
                     ) -> Iterator[tuple[JudgedHost, dict[str, coverage.CheckState]]]:
        """(host, finding id -> pass / raised / not judged) for every host, in the run's order."""
        wanted = list(FINDING_IDS if ids is None else ids)
        for host in self.hosts.with_facts(()):
            yield host, coverage.check_states(host.not_judged, self.findings_of(host.name), wanted,
                                              self.not_judged_on(host.name), self.silenced_of(host.name))

    # ---------------------------------------------------------------- the file edge

    def to_document(self) -> dict[str, Any]:
        """fleet.json as written (orchestrator/schema/fleet.schema.json, schema 1 shapes; the
        writer, store/fleet_file.py, compacts it)."""
        return {
            "schema_version": self.schema_version,
            "run": self.run.header(),
            "summary": self.summary.to_dict(),
            "hosts": self.hosts.records,
            "classes": [c.to_dict() for c in self.classes],
            "findings": [f.to_dict() for f in self.findings],
            "silenced": [s.to_dict() for s in self.silenced],
            "not_judged": {k: dict(v) for k, v in self.not_judged.items()},
            "fabric_findings": [f.to_dict() for f in self.fabric_faults],
            **({"carried_classes": {h: c.to_dict() for h, c in self.carried.items()}} if self.carried else {}),
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], run: RunMeta | None = None, grouped: bool = True) -> FleetResult:
        """A stored fleet.json, as the verdict would hand it over now (a stored run is read by
        api/stored.py); `run`: the run's run.json, when the caller has it (else fleet.json's header);
        `grouped`: False leaves the findings' roots as stored (a past run read for the history)."""
        problems: list[str] = []
        findings = [f for f in (_finding(x, problems) for x in _list(doc.get("findings"))) if f is not None]
        # roots are decided again: a document from before they were stored has none, and one that
        # has them gets the same answer from the same tables
        findings = causes.group(findings, _CAUSES) if grouped else findings
        silenced = []
        for s in _list(doc.get("silenced")):
            f = _finding(s.get("finding"), problems) if isinstance(s, dict) else None
            if f is not None:
                silenced.append(Silenced(f, str(s.get("reason") or "")))
        hosts = HostTable(_host_records(doc.get("hosts"), problems), FindingIndex(findings), stored=True)
        stored = doc.get("not_judged")
        not_judged = {str(k): {str(h): str(w) for h, w in v.items()} for k, v in stored.items()
                      if isinstance(v, dict)} if isinstance(stored, dict) else {}
        summary = _summary_of(doc.get("summary"), hosts, findings)
        stored_carried = doc.get("carried_classes")
        carried = {str(h): c for h, c in ((h, CarriedClass.from_dict(d)) for h, d in stored_carried.items())
                   if c is not None} if isinstance(stored_carried, dict) else {}
        schema = doc.get("schema_version")
        return cls(run=run or RunMeta.from_dict(doc.get("run")), summary=summary, hosts=hosts, findings=findings,
                   classes=[TopologyClass.from_dict(c) for c in _list(doc.get("classes")) if isinstance(c, dict)],
                   silenced=silenced, not_judged=not_judged, carried=carried,
                   schema_version=schema if isinstance(schema, int) and not isinstance(schema, bool) else SCHEMA_VERSION,
                   problems=problems)


def _host_records(stored: Any, problems: list[str]) -> HostRecords:
    """A document's hosts: records written in it (a list), each checked for its host's name, or
    the records as the store reads them, handed over as they are (a stored fleet.json read by its
    index names every record as it is read: store/spool.py)."""
    if not isinstance(stored, list) and isinstance(stored, HostRecords):
        return stored
    if not isinstance(stored, Sequence) or isinstance(stored, (str, bytes)):
        problems.append("its hosts are not a list; no host is shown")
        return RecordList()
    return _named(stored, problems)


def _named(records: Sequence[Any], problems: list[str]) -> RecordList:
    """The host records that name their host; the others cannot be shown, judged or merged."""
    out = RecordList()
    for i, rec in enumerate(records):
        if isinstance(rec, dict) and isinstance(rec.get("name"), str) and rec["name"]:
            out.append(rec)
        else:
            problems.append(f"host record {i} names no host: left out")
    return out


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _finding(d: Any, problems: list[str]) -> Finding | None:
    """A stored finding, or None (and why, in `problems`) when it is not of the stored shape."""
    if not isinstance(d, dict):
        problems.append("a finding is not an object; left out")
        return None
    if not all(isinstance(d.get(k), str) for k in ("id", "host", "subject", "message")):
        problems.append(f"finding {str(d.get('id'))[:80]!r} lacks its id, host, subject or message; left out")
        return None
    if d.get("severity") not in SEVERITY_ORDER or d.get("kind") not in {k.value for k in Kind}:
        problems.append(f"finding {d['id'][:80]!r} has an unknown severity or kind; left out")
        return None
    evidence = d.get("evidence")
    return Finding(
        id=d["id"], severity=Severity(d["severity"]), kind=Kind(d["kind"]), host=d["host"], subject=d["subject"],
        message=d["message"], expected=d.get("expected"), actual=d.get("actual"),
        evidence=[str(e) for e in evidence] if isinstance(evidence, list) else [],
        hint=d["hint"] if isinstance(d.get("hint"), str) else "",
        caused_by=FindingRef.from_dict(d.get("caused_by")),
        consequences=tuple(r for r in map(FindingRef.from_dict, _list(d.get("consequences"))) if r),
        # a run of a fleetprobe before devices and actions: no devices, the action its id's
        devices=devices_from(d.get("devices")), **_action(d))


def _action(d: Mapping[str, Any]) -> dict[str, Any]:
    action, because = stored_action(d.get("action"), d.get("because"))
    return {"action": action, "because": because}


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _counts(stored: Any, keys: Iterable[str]) -> dict[str, int] | None:
    """A stored table of counts over `keys` (a count of another type reads 0); None when absent."""
    if not isinstance(stored, dict):
        return None
    return {k: _count(stored.get(k, 0)) for k in keys}


def _summary_of(stored: Any, hosts: HostTable, findings: list[Finding]) -> FleetSummary:
    """The stored summary where it has every count; what it lacks (a document from before health
    and faults were stored) is counted from the hosts and findings."""
    s = stored if isinstance(stored, dict) else {}
    health = _counts(s.get("health"), HEALTH_ORDER)
    outcomes = _counts(s.get("outcomes"), (o.value for o in Outcome))
    if health is None or outcomes is None:
        states: dict[str, int] = dict.fromkeys(HEALTH_ORDER, 0)
        seen: dict[str, int] = {o.value: 0 for o in Outcome}
        for h in hosts.with_facts(()):
            states[h.health.state.value] += 1
            seen[h.outcome] = seen.get(h.outcome, 0) + 1
        health = states if health is None else health
        outcomes = seen if outcomes is None else outcomes
    faults = _counts(s.get("faults"), SEVERITY_ORDER)
    if faults is None:
        faults = dict.fromkeys(SEVERITY_ORDER, 0)
        for _, sev in fault_severities(host_findings(findings)):
            faults[sev.value] += 1
    fabric = _counts(s.get("fabric"), SEVERITY_ORDER)
    if fabric is None:  # a document from before the fabric's faults were its own: counted here
        fabric = fabric_counts(fabric_faults(findings))
    counted = dict.fromkeys(SEVERITY_ORDER, 0)
    kinds: dict[str, int] = {}
    for f in findings:
        counted[f.severity.value] += 1
        kinds[f.kind.value] = kinds.get(f.kind.value, 0) + 1
    n = s.get("hosts")
    return FleetSummary(hosts=n if isinstance(n, int) and not isinstance(n, bool) else len(hosts), health=health,
                        outcomes=outcomes, faults=faults, findings=counted, findings_by_kind=kinds, fabric=fabric)


def _faults(findings: Sequence[Finding]) -> list[Fault]:
    """Findings as faults: each root with its consequences (findings of one host, or a fleet's)."""
    followers: dict[tuple[str, str, str], list[Finding]] = {}
    for f in findings:
        if f.caused_by is not None:
            followers.setdefault((f.host, f.caused_by.id, f.caused_by.subject), []).append(f)
    out: list[Fault] = []
    for root, sev in fault_severities(findings):
        out.append(Fault(root, tuple(followers.get((root.host, root.id, root.subject), ())), sev))
    return sorted(out, key=lambda x: -x.severity.rank)


def fleet_result(run: RunMeta, records: HostRecords, findings: list[Finding],
                 classes: list[dict[str, Any]], silenced: list[Silenced],
                 not_judged: dict[str, dict[str, str]], summary: Mapping[str, Any],
                 carried: Mapping[str, CarriedClass] | None = None) -> FleetResult:
    """The verdict's result of a run it judged (verdict/judge.py): findings grouped, hosts' health
    in their records."""
    hosts = HostTable(records, FindingIndex(findings))
    return FleetResult(run=run, summary=_summary_of(summary, hosts, findings), hosts=hosts, findings=findings,
                       classes=[TopologyClass.from_dict(c) for c in classes], silenced=silenced,
                       not_judged=not_judged, carried=dict(carried or {}))


__all__ = ["Fault", "FleetResult", "FleetSummary", "Health", "HostHealth", "HostTable", "JudgedHost", "ProbeRun",
           "Silenced", "TopologyClass", "fleet_result"]
