"""The per-host summary table and the RECAP line: health first, as the verdict decided it."""

from __future__ import annotations

import re
from collections import Counter
from typing import cast

from orchestrator.facts.model import Facts, HostFacts
from orchestrator.facts.shown import shown
from orchestrator.present.terminal.text import clean
from orchestrator.present.terminal.width import fit_table, wrap
from orchestrator.verdict.result import FleetResult, JudgedHost

# Host-controlled text is cleaned and bounded (a hostile host must not flood the terminal); the
# table then fits it to the terminal by wrapping, never by cutting.
_CELL = 200


def _board(host: HostFacts) -> str:
    b = host.get("board") or {}
    parts = [b.get("vendor") or b.get("system_vendor"), b.get("model") or b.get("product")]
    return " ".join(clean(p, _CELL) for p in parts if isinstance(p, str)) or "-"


def _gpus(facts: Facts) -> str:
    g = facts.get("gpus")
    if not g:
        return "-"
    gpus = g.get("list") or []
    # a GPU whose name the text does not give (topo -m, nvbandwidth) is "unknown model", never "None"
    names = Counter(shown(x.get("name") or x.get("model"), "unknown model") for x in gpus)
    text = ", ".join(f"{n}x {clean(name, _CELL)}" for name, n in names.items()) or "0"
    count, at_least = g.get("count"), g.get("count_at_least")
    if isinstance(count, int) and count > len(gpus):
        return f"{count} ({len(gpus)} described: {text})"  # a -q excerpt: Attached GPUs is the count
    if count is None and isinstance(at_least, int):
        return f">={at_least} ({text})"  # nvlink -s -i N: part of the host
    return text


# A class name is made of parts joined by these; a narrow column wraps it after one of them only.
_CLASS_SEPARATOR = re.compile(r"(?<=[-+/@~])")
# A why cell (`2 fault(s): software.security.driver, ...`) wraps after a space, and a finding id
# too long for its line after one of its dots.
_SPACE = re.compile(r"(?<= )")
_DOT = re.compile(r"(?<=\.)")


def _break_after(text: str, width: int | None, separator: re.Pattern[str]) -> str:
    """`text` on lines of at most `width` characters, broken only after `separator`, never inside a part."""
    if width is None or len(text) <= width:
        return text
    lines, line = [], ""
    for part in separator.split(text):
        if line and len(line.rstrip()) + len(part.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += part
    return "\n".join([*lines, line.rstrip()])


def class_cell(text: str, width: int | None) -> str:
    """A topology class name, on lines of at most `width` characters broken only after a
    separator (`8xH100-SXM-NV18-` / `8NIC-PIX`), never inside a part."""
    return _break_after(text, width, _CLASS_SEPARATOR)


def why_cell(text: str, width: int | None) -> str:
    """A host's why, broken after a space, and inside a finding id longer than the line after a
    dot (`software.` / `security.driver`)."""
    lines = _break_after(text, width, _SPACE).split("\n")
    return "\n".join(_break_after(line, width, _DOT) for line in lines)


HEADERS = ["host", "health", "fail", "warn", "outcome", "os", "kernel", "board", "driver", "gpus", "class", "time"]


def _row(h: JudgedHost, fleet: FleetResult) -> list[str]:
    host = cast(HostFacts, h.facts.get("host") or {})  # every read below is a .get
    return [
        clean(h.name, _CELL),
        h.health.state.value,
        str(h.health.fail),
        str(h.health.warn),
        h.outcome,
        clean(host.get("os"), _CELL),
        clean(host.get("kernel"), _CELL),
        _board(host),
        clean((host.get("driver") or {}).get("version")),
        _gpus(h.facts),
        clean(fleet.class_shown(h)),  # measured now, else carried and said so
        f"{h.duration_s:.1f}s",
    ]


def hosts_table(fleet: FleetResult, width: int | None = None) -> str:
    """One row per host, health and its fault counts first, the transport outcome beside them.

    Without a width (not a terminal) each host is one line and its reason (why it is not healthy,
    or what its transport said) is the line's last column, so `grep HOST` shows why and no row is
    padded to another's reason.  With a width the transport's reasons go beneath the table, whole
    and wrapped, so a column never cuts off their advice ("is sshd running there?"); the faults
    follow in the hosts view."""
    rows, reasons = [], []
    for h in fleet.hosts.with_facts(("host", "gpus")):
        row = _row(h, fleet)
        if width is None:
            row.append(clean(_reason(h), 1000))
        else:
            row.append(clean(_short_reason(h), 1000))
            if h.outcome != "ok" and h.reason:  # faults are listed by host beneath; the transport's why here
                reasons.append(wrap(clean(h.reason, 1000), width, f"  {clean(h.name, _CELL)} ({h.outcome}): "))
        rows.append(row)
    if width is None:
        table = fit_table(rows, [*HEADERS, "why"], None)
        return "\n".join(line.rstrip() for line in table.splitlines())
    # `why` is read before the time and the transport outcome: it goes last, and only when even
    # wrapped it would leave a column less than a readable width
    table = fit_table(rows, [*HEADERS, "why"], width,
                      droppable=("kernel", "os", "time", "driver", "board", "outcome", "why"),
                      fixed=("host", "health", "fail", "warn"), drop_before_wrap=True, wrappers={"class": class_cell, "why": why_cell},
                      keep_wrapped=("why",))
    return table + ("\n" + "\n".join(reasons) if reasons else "")


def _reason(h: JudgedHost) -> str:
    """Why the host is not healthy: what its transport said where that is the trouble (the
    interpreter missing, garbage on stdout), else its faults; a healthy host whose probe the
    platform cannot run says that."""
    if h.outcome != "ok" and h.reason and (h.outcome_is_problem or not h.health.reason):
        return f"{h.outcome}: {h.reason}"
    return h.health.reason


def _short_reason(h: JudgedHost) -> str:
    """The `why` cell on a terminal: the host's faults; a transport's reason, which can be long
    advice, is written whole beneath the table and named here by its outcome."""
    if h.outcome != "ok" and h.reason and (h.outcome_is_problem or not h.health.reason):
        return f"{h.outcome} (below)"
    return h.health.reason


def health_summary(fleet: FleetResult) -> str:
    """`40 hosts: 12 failed, 1 unreachable, 8 degraded, 19 healthy`: hosts by health, worst first."""
    counts = ", ".join(f"{n} {state}" for state, n in fleet.health_counts.items() if n)
    return f"{fleet.summary.hosts} host(s): {counts or 'none'}"


def recap(fleet: FleetResult, width: int | None = None) -> str:
    """`RECAP hosts=40 failed=12 degraded=8 unreachable=1 healthy=19 | fabric=1 | faults fail=12 ...`:
    hosts by health (they add up to the hosts), the fabric's faults (where there are any), the
    hosts' faults by root, every finding, the transport outcomes."""
    s = fleet.summary
    health = [f"{k}={v}" for k, v in fleet.health_counts.items() if v or k in ("failed", "healthy")]
    outcomes = [f"{k}={v}" for k, v in s.outcomes.items() if v]
    faults = " ".join(f"{k}={s.faults.get(k, 0)}" for k in ("fail", "warn", "info"))
    findings = " ".join(f"{k}={s.findings.get(k, 0)}" for k in ("fail", "warn", "info"))
    # the fabric's faults are no host's: counted beside the hosts, not in them
    fabric = f" | fabric={s.fabric_total}" if s.fabric_total else ""
    text = (f"RECAP hosts={s.hosts} " + " ".join(health) + fabric + f" | faults {faults} | findings {findings}"
            + " | transport " + (" ".join(outcomes) or "-"))
    return wrap(text, width, "", "  ")
