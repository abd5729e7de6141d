"""The default terminal report: the answer first, in one screen, on a fleet of any size (issue 49).

RECAP, then one line per topology class with its hosts by health (healthy hosts fold into it),
then each unhealthy host with its faults (the root, what followed from it beneath, one hint per
finding id), then one line each for the fabric's faults, the notes and what was not judged.
One cause on many hosts is one line (their names folded, names.py): a transport failure, an
unknown host key (one ssh-keyscan command for all), a note, a Ctrl-C.  A line longer than the
terminal is cut with `…` (`-v` shows every line whole); piped (no width) lines stay whole.

`-v` / `--hosts all` keep the full report (cli/run.py:render_fleet_text)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby

from orchestrator.present.terminal.findings import carried_line, classes_table
from orchestrator.present.terminal.judged import reason_kind
from orchestrator.present.terminal.names import fold_names
from orchestrator.present.terminal.text import clean
from orchestrator.present.terminal.width import wrap
from orchestrator.verdict.coverage import NOT_JUDGED
from orchestrator.verdict.findings import severity_rank
from orchestrator.verdict.health import HEALTH_ORDER
from orchestrator.verdict.result import Fault, FleetResult, JudgedHost

DETAILED_HOSTS = 30  # unhealthy hosts shown fault by fault; the rest one line per root id
GROUPED_IDS = 10  # root ids named for those, the rest counted
NO_CLASS = "(no class in this run)"


def cut(text: str, width: int | None) -> str:
    """One line of at most `width` columns, cut with `…`; whole without a width (piped: grep reads it)."""
    if width is None or len(text) <= width:
        return text
    return text[: max(1, width - 1)] + "…"


# --- classes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassVerdict:
    """A nominal topology class and its hosts by health: its members and the hosts that are its
    outliers (a host that differs from its class by a fault counts with that class, not alone)."""

    name: str
    health: Counter[str]

    @property
    def hosts(self) -> int:
        return sum(self.health.values())


def class_verdicts(fleet: FleetResult) -> list[ClassVerdict]:
    nominal: dict[str, str] = {}
    for c in fleet.classes:
        for m in c.members:
            nominal.setdefault(m, c.name)
    for c in fleet.classes:  # an outlier's own one-host class is its fault, not a shape
        for o in c.outliers:
            nominal[o.host] = c.name
    by_class: dict[str, Counter[str]] = {}
    for h in fleet.hosts.with_facts(()):
        name = nominal.get(h.name) or fleet.class_shown(h) or NO_CLASS
        by_class.setdefault(name, Counter())[h.health.state.value] += 1
    verdicts = [ClassVerdict(n, c) for n, c in by_class.items()]
    return sorted(verdicts, key=lambda v: (v.name == NO_CLASS, -v.hosts, v.name))


def _health_text(counts: Counter[str]) -> str:
    """`13 healthy, 9 failed, 5 degraded`: healthy first, then worst first."""
    order = ["healthy", *(s for s in HEALTH_ORDER if s != "healthy")]
    return ", ".join(f"{counts[s]} {s}" for s in order if counts.get(s))


def classes_lines(fleet: FleetResult, width: int | None) -> list[str]:
    """A line per class with its hosts by health; a run that measured no host's shape says so
    and why (findings.py:classes_table), and hosts showing a carried class are counted."""
    if not fleet.classes:
        said = classes_table(fleet, width)
        return [said] if said else []
    verdicts = class_verdicts(fleet)
    pad = min(40, max(len(clean(v.name, 80)) for v in verdicts))
    head = f"Classes ({len(verdicts)}): healthy hosts fold into their class; -v (or --hosts all) lists every host"
    lines = [cut(head, width)]
    # one-host classes whose host is healthy say nothing more than their name: one line for them all
    singles = [v for v in verdicts if v.hosts == 1 and v.health.get("healthy") and v.name != NO_CLASS]
    for v in verdicts:
        if v in singles and len(singles) > 1:
            continue
        count = f"{v.hosts} host" + ("s" if v.hosts != 1 else "")
        lines.append(cut(f"  {clean(v.name, 80):<{pad}}  {count:>9}: {_health_text(v.health)}", width))
    if len(singles) > 1:
        names = ", ".join(clean(v.name, 80) for v in singles)
        lines.append(wrap(f"+ {len(singles)} healthy one-host classes: {names}", width, "  ", "    "))
    carried = carried_line(fleet, width)
    return lines + ([carried] if carried else [])


# --- unhealthy hosts --------------------------------------------------------------------------

_LABEL = r"^{name}(?: \([^)]*\))?: "
_KEYSCAN = re.compile(r"unknown host key for .*?`ssh-keyscan -p (\d+) (\S+) >> ([^`]+)`")
KEYSCAN_LISTED = 50  # hosts written into the one ssh-keyscan command; more go through a file


# `host skipped (why); pcie skipped (why): judged on what finished` (verdict/health.py's reason)
_PROBE_PARTS = re.compile(r"^((?:\S+ \w+ \([^()]*\)(?:; |(?=:)|$))+)(.*)$")
_PROBE_PART = re.compile(r"(\S+) (\w+) \(([^()]*)\)")


def _same_why(text: str) -> str:
    """`host, pcie, nvml skipped (run interrupted ...): ...` where every probe says the same."""
    m = _PROBE_PARTS.match(text)
    if not m:
        return text
    parts = _PROBE_PART.findall(m[1])
    if len(parts) < 2 or len({(o, why) for _, o, why in parts}) != 1:
        return text
    return f"{', '.join(p for p, _, _ in parts)} {parts[0][1]} ({parts[0][2]}){m[2]}"


def _transport_reason(h: JudgedHost) -> str:
    """Why a host without faults is not healthy, without its own name in front, so that hosts
    with one cause share a line."""
    text = h.reason if h.outcome_is_problem and h.reason else (h.health.reason or h.reason or h.outcome)
    return _same_why(re.sub(_LABEL.format(name=re.escape(h.name)), "", clean(text, 1000), count=1))


def _keyscan_lines(hosts: list[JudgedHost], width: int | None) -> tuple[list[str], list[JudgedHost]]:
    """Hosts whose key is unknown under the strict policy: one ssh-keyscan command for them all
    (per port and known_hosts file), and the hosts that are not of this kind."""
    groups: dict[tuple[str, str], list[tuple[JudgedHost, str]]] = {}
    rest = []
    for h in hosts:
        m = _KEYSCAN.search(h.reason or "")
        if m:
            groups.setdefault((m[1], clean(m[3], 300)), []).append((h, clean(m[2], 100)))
        else:
            rest.append(h)
    lines = []
    for (port, record_to), members in groups.items():
        names = [h.name for h, _ in members]
        targets = list(dict.fromkeys(t for _, t in members))  # hosts may share an address
        if len(targets) <= KEYSCAN_LISTED:
            command = f"`ssh-keyscan -p {port} {' '.join(targets)} >> {record_to}`"
        else:
            command = (f"`ssh-keyscan -p {port} -f hostkeys.txt >> {record_to}` (hostkeys.txt: the {len(targets)} "
                       "addresses, one a line; -v lists them)")
        state = members[0][0].health.state.value.upper()
        text = (f"{state} {fold_names(names)}: unknown host key and the host-key policy is strict; check the "
                f"fingerprints (-v shows each), then add them all with {command}, or run with "
                "--host-key-policy accept-new")
        lines.append(wrap(text, width, "", "    "))  # a command is never cut
    return lines, rest


def cause_lines(hosts: list[JudgedHost], width: int | None) -> list[str]:
    """Unhealthy hosts without faults of their own: one line per cause, the hosts folded."""
    lines, rest = _keyscan_lines(hosts, width)
    groups: dict[tuple[str, str], list[str]] = {}
    for h in rest:
        groups.setdefault((h.health.state.value, _transport_reason(h)), []).append(h.name)
    for (state, why), names in groups.items():
        lines.append(wrap(f"{state.upper()} {fold_names(names)}: {why}", width, "", "    "))
    return lines


def _follows_text(fault: Fault) -> str:
    """`gpu.count.mismatch, topology.class.outlier`, `pcie.acs.enabled x7`: what followed, by id."""
    ids = Counter(c.id for c in fault.consequences)
    return ", ".join(fid + (f" x{n}" if n > 1 else "") for fid, n in ids.items())


def fault_lines(head: str, fault: Fault, hinted: set[str], width: int | None) -> list[str]:
    """Two lines at most: the root; what followed and the hint (once per id: `hint above`)."""
    r = fault.root
    lines = [cut(f"{head}{r.id} {clean(r.subject, 200)}: {clean(r.message, 1000)}", width)]
    tail = []
    if fault.consequences:
        tail.append("-> " + _follows_text(fault))
    if r.hint:
        tail.append("hint above" if r.id in hinted else f"hint: {clean(r.hint, 1000)}")
        hinted.add(r.id)
    if tail:
        lines.append(cut("    " + "; ".join(tail), width))
    return lines


def _head(h: JudgedHost) -> str:
    head = f"{h.health.state.value.upper()} {clean(h.name, 100)}"
    if h.outcome_is_problem and h.reachable:
        head += f" (transport {h.outcome})"
    return head + ": "


Faults = Mapping[str, Sequence[Fault]]  # host -> its warn/fail faults


def host_lines(hosts: Sequence[JudgedHost], faults: Faults, width: int | None) -> list[str]:
    """Each host with its warn/fail faults, two lines a fault; hosts without faults by cause,
    after the hosts of their health with faults (the hosts come worst health first)."""
    lines: list[str] = []
    hinted: set[str] = set()
    for _, same_health in groupby(hosts, key=lambda h: h.health.state):
        causeless = []
        for h in same_health:
            if not faults[h.name]:
                causeless.append(h)
                continue
            head = _head(h)
            for i, fault in enumerate(faults[h.name]):
                lines.extend(fault_lines(head if i == 0 else "  + ", fault, hinted, width))
        lines.extend(cause_lines(causeless, width))
    return lines


def grouped_lines(hosts: Sequence[JudgedHost], faults: Faults, width: int | None) -> list[str]:
    """The hosts with faults past the detailed ones: one line per root id with its hosts folded."""
    by_id: dict[str, list[str]] = {}
    for h in hosts:
        for f in faults[h.name]:
            by_id.setdefault(f"{f.severity.value.upper()} {f.root.id}", []).append(h.name)
    ranked = sorted(by_id.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    lines = [cut(f"{fid} on {fold_names(names)}", width) for fid, names in ranked[:GROUPED_IDS]]
    if len(ranked) > GROUPED_IDS:
        left = ranked[GROUPED_IDS:]
        lines.append(cut(f"{len(left)} more finding id(s) on {len({n for _, ns in left for n in ns})} host(s)", width))
    return lines


def unhealthy_lines(fleet: FleetResult, width: int | None) -> list[str]:
    """The unhealthy hosts: the first DETAILED_HOSTS with faults fault by fault, the rest with
    faults by finding id; those without faults (a transport failure, a Ctrl-C) by cause."""
    hosts = fleet.problem_hosts
    if not hosts:
        return ["No unhealthy hosts."]
    faults = {h.name: [f for f in fleet.faults_of(h.name) if f.severity.rank >= severity_rank("warn")]
              for h in hosts}
    detailed = {h.name for h in hosts if faults[h.name]}
    rest = [h for h in hosts if faults[h.name]][DETAILED_HOSTS:]
    detailed -= {h.name for h in rest}
    counts = ", ".join(f"{n} {state}" for state, n in fleet.health_counts.items() if n and state != "healthy")
    head = f"Unhealthy hosts ({counts}): each fault's root, -> what followed; -v shows all whole"
    shown = [h for h in hosts if h.name in detailed or not faults[h.name]]
    lines = [cut(head, width), *host_lines(shown, faults, width)]
    if rest:
        lines.append(cut(f"{len(rest)} more unhealthy host(s) with faults, by finding id "
                         "(--findings checks lists each):", width))
        lines.extend(grouped_lines(rest, faults, width))
    return lines


# --- fabric, notes, not judged ----------------------------------------------------------------


def fabric_lines(fleet: FleetResult, width: int | None) -> list[str]:
    """Each warn/fail fault of the fabric once, with its hosts folded."""
    faults = [f for f in fleet.fabric_faults if f.severity.rank >= severity_rank("warn")]
    if not faults:
        return []
    head = f"Fabric faults ({len(faults)}): the fabric's, no host is failed for them (docs/fabric.md)"
    return [cut(head, width)] + [
        cut(f"{f.severity.value.upper()} {f.id} {clean(f.subject, 200)} on {fold_names(f.hosts)}: "
            f"{clean(f.message, 1000)}", width) for f in faults]


def notes_line(fleet: FleetResult, width: int | None) -> str:
    """The info faults in one line: each root id once with its hosts folded (ids on the same hosts
    together)."""
    by_id: dict[str, list[str]] = {}
    for fault in fleet.faults():
        if fault.severity.value == "info":
            by_id.setdefault(fault.root.id, []).append(fault.host)
    if not by_id:
        return ""
    same_hosts: dict[tuple[str, ...], list[str]] = {}  # ids on the very same hosts share their names
    for fid, hosts in by_id.items():
        same_hosts.setdefault(tuple(dict.fromkeys(hosts)), []).append(fid)
    parts = "; ".join(f"{', '.join(ids)} on {fold_names(hosts)}" for hosts, ids in same_hosts.items())
    return wrap(f"Notes (info, --findings checks shows them whole): {parts}", width, "", "  ")


def _not_judged_counts(fleet: FleetResult) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for _, states in fleet.check_states():
        for st in states.values():
            if st.state == NOT_JUDGED:
                kinds[reason_kind(st.reason)] += 1
    return kinds


def not_judged_line(fleet: FleetResult, width: int | None, kinds: Iterable[tuple[str, int]] | None = None) -> str:
    """`Not judged: 1,416 check x host pairs (800 probe not in this run, ...); -v lists them`, or ""."""
    counted = list(kinds) if kinds is not None else _not_judged_counts(fleet).most_common()
    total = sum(n for _, n in counted)
    if not total:
        return ""
    parts = ", ".join(f"{n:,} {kind}" for kind, n in counted)
    return wrap(f"Not judged (silence is no pass): {total:,} check x host pairs ({parts}); -v lists them by reason",
                width, "", "  ")


def answer_text(fleet: FleetResult, width: int | None, recap_text: str) -> list[str]:
    """The sections, in order, each a block of lines (joined with a blank line by the caller)."""
    blocks = [recap_text, "\n".join(classes_lines(fleet, width)), "\n".join(unhealthy_lines(fleet, width)),
              "\n".join(fabric_lines(fleet, width)), notes_line(fleet, width), not_judged_line(fleet, width)]
    if fleet.silenced:
        blocks.append(f"{len(fleet.silenced)} finding(s) silenced by the playbook")
    return [b for b in blocks if b]
