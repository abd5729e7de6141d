"""Findings on the terminal: by host (each unhealthy host with its faults, root first, what
followed from it beneath) or by check (grouped by finding id, then host); the fabric's faults
once each, in a section of their own (verdict/fabric_faults.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import groupby

from orchestrator.present.terminal.text import clean
from orchestrator.present.terminal.width import fit_table, wrap
from orchestrator.verdict.fabric_faults import FabricFault
from orchestrator.verdict.findings import Finding, severity_rank
from orchestrator.verdict.result import Fault, FleetResult

FINDINGS_VIEWS = ("hosts", "checks")  # --findings: by host (default), by check


def _follows(f: Finding) -> str:
    return f" (follows from {f.caused_by.id} {f.caused_by.subject})" if f.caused_by else ""


def findings_table(findings: Sequence[Finding], min_severity: str = "info", width: int | None = None) -> str:
    """Findings grouped by id: a head line, a host/subject/finding table fitted to `width` (the
    message wrapped, never cut), and the id's hint once beneath it.  A finding that follows from
    another says from which."""
    shown = [f for f in findings if f.severity.rank >= severity_rank(min_severity)]
    if not shown:
        return "No findings."
    shown.sort(key=lambda f: (-f.severity.rank, f.id, f.host, f.subject))
    blocks = []
    for fid, group in groupby(shown, key=lambda f: f.id):
        items = list(group)
        head = (f"{items[0].severity.value.upper()} {fid} ({items[0].kind.value}) "
                f"on {len({i.host for i in items})} host(s)")
        rows = [[clean(i.host, 200), clean(i.subject, 200), clean(i.message + _follows(i), 2000)] for i in items]
        hint = wrap(clean(items[0].hint, 2000), width, "  hint: ") if items[0].hint else ""
        table = fit_table(rows, ["host", "subject", "finding"], width)
        blocks.append(wrap(head, width, "", "  ") + "\n" + table + ("\n" + hint if hint else ""))
    return "\n\n".join(blocks)


def _fault_lines(fault: Fault, width: int | None) -> list[str]:
    r = fault.root
    lines = [wrap(f"{fault.severity.value.upper()} {r.id} ({r.kind.value}) {clean(r.subject, 200)}: "
                  f"{clean(r.message, 2000)}", width, "  ", "      ")]
    for c in fault.consequences:
        lines.append(wrap(f"{c.severity.value} {c.id} {clean(c.subject, 200)}: {clean(c.message, 2000)}",
                          width, "      -> ", "         "))
    if r.hint:
        lines.append(wrap(clean(r.hint, 2000), width, "      hint: ", "            "))
    if fault.severity.value != "info":  # what to do, in the action table's words (verdict/actions.py)
        lines.append(wrap(f"{fault.action.value}: {fault.because}", width, "      action: ", "              "))
    return lines


def hosts_view(fleet: FleetResult, width: int | None = None, min_severity: str = "warn") -> str:
    """Each host that is not healthy, worst first: its health and why, then its faults at
    `min_severity` or worse (the root finding; what followed from it beneath; the hint once)."""
    blocks = []
    for h in fleet.problem_hosts:
        faults = [f for f in fleet.faults_of(h.name) if f.severity.rank >= severity_rank(min_severity)]
        head = f"{h.health.state.value.upper()} {clean(h.name, 200)}"
        if h.outcome_is_problem and h.reachable:  # the transport's outcome, as what it is
            bad = [p for p, r in h.probes.items() if r.outcome == h.outcome]
            head += f" (transport {h.outcome}" + (f": {', '.join(bad)}" if bad else "") + ")"
        if h.health.reason and not faults:
            head += f": {clean(h.health.reason, 1000)}"
        elif faults:
            head += f": {len(faults)} fault(s)"
        lines = [wrap(head, width, "", "    ")]
        for fault in faults:
            lines.extend(_fault_lines(fault, width))
        blocks.append("\n".join(lines))
    if not blocks:
        return "No unhealthy hosts."
    counts = ", ".join(f"{n} {state}" for state, n in fleet.health_counts.items() if n and state != "healthy")
    return f"Unhealthy hosts ({counts}):\n\n" + "\n\n".join(blocks)


def _fabric_lines(fault: FabricFault, width: int | None) -> list[str]:
    lines = [wrap(f"{fault.severity.value.upper()} {fault.id} ({fault.kind.value}) {clean(fault.subject, 200)}: "
                  f"{clean(fault.message, 2000)}", width, "  ", "      ")]
    lines.append(wrap(clean(fault.hosts_text(), 2000), width, "      hosts: ", "             "))
    if fault.hint:
        lines.append(wrap(clean(fault.hint, 2000), width, "      hint: ", "            "))
    return lines


def fabric_view(fleet: FleetResult, width: int | None = None, min_severity: str = "warn") -> str:
    """The fabric's faults at `min_severity` or worse, each once with the hosts it touches; ""
    when there are none.  No host is failed, drained or remedied for them."""
    faults = [f for f in fleet.fabric_faults if f.severity.rank >= severity_rank(min_severity)]
    if not faults:
        return ""
    head = wrap(f"Fabric faults ({len(faults)}): the fabric's, not its hosts' (no host is failed or drained "
                "for them; docs/fabric.md):", width, "", "  ")
    return head + "\n\n" + "\n\n".join("\n".join(_fabric_lines(f, width)) for f in faults)


def notes_block(fleet: FleetResult, width: int | None = None) -> str:
    """The info faults (platform limitations, what could not be read), one line per host: each
    root id, what followed from it in parentheses."""
    by_host: dict[str, list[str]] = {}
    for fault in fleet.faults():
        if fault.severity.value == "info":
            follows = ", ".join(dict.fromkeys(c.id for c in fault.consequences))
            by_host.setdefault(fault.host, []).append(fault.root.id + (f" (+ {follows})" if follows else ""))
    if not by_host:
        return ""
    lines = [wrap(f"{clean(host, 200)}: " + ", ".join(dict.fromkeys(ids)), width, "  ", "      ")
             for host, ids in by_host.items()]
    head = wrap("Notes (info: platform limitations and what could not be read; --findings checks shows them "
                "whole):", width, "", "  ")
    return head + "\n" + "\n".join(lines)


# Why a run of hosts has no topology class (verdict/judge.py:shape_descriptor): said, so an empty
# class column is not read as "these hosts have no shape" (a fabric-only run once classed every DGX
# cpu-only).
UNCLASSED = ("topology classes: none: this run measured no host's shape (a host is classed only by a run in "
             "which host, pcie, nvml and nvlink all answered, as the audit and premigration playbooks do); "
             "its class is that of its last such run, and drift compares classes only between such runs")


def classes_table(fleet: FleetResult, width: int | None = None) -> str:
    if not fleet.classes:
        answered = any(h.reachable for h in fleet.hosts)
        return "\n".join(x for x in (wrap(UNCLASSED, width, "", "  ") if answered else "",
                                      carried_line(fleet, width)) if x)
    rows = []
    for c in fleet.classes:
        outl = ", ".join(clean(o.host, 200) for o in c.outliers)
        rows.append([clean(c.name, 200), str(len(c.members)), outl or "-"])
    table = fit_table(rows, ["topology class", "hosts", "outliers"], width, fixed=("hosts",))
    carried = carried_line(fleet, width)
    return table + "\n" + carried if carried else table


def carried_line(fleet: FleetResult, width: int | None = None) -> str:
    """The hosts this run did not class that show the class of their last run that measured them,
    counted by that run (verdict/classes.py:CarriedClass); '' when none."""
    if not fleet.carried:
        return ""
    by_run = Counter(c.run for c in fleet.carried.values())
    runs = ", ".join(f"{n} from run {clean(r, 80)}" for r, n in sorted(by_run.items()))
    return wrap(f"carried classes: {len(fleet.carried)} host(s) not measured in this run show the class of their "
                f"last run that measured them ({runs}), marked \"carried from run ...\" in the class column",
                width, "", "  ")
