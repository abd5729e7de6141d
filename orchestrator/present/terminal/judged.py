"""What the run could not judge, in a few lines: no finding is a pass only where a check ran.

Grouped by reason, so an audit without the p2p probe is one line ("p2p.* on 25 hosts: p2p probe
not in this run"), not 13 ids x 25 hosts.  The states come from verdict/coverage.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from orchestrator.present.terminal.text import clean
from orchestrator.present.terminal.width import wrap
from orchestrator.verdict.coverage import NOT_JUDGED
from orchestrator.verdict.result import FleetResult

_SHOWN_IDS = 4  # ids named per line; the rest are counted
_SHOWN_HOSTS = 3


def _ids_text(ids: Iterable[str], catalog: Sequence[str]) -> str:
    """ids, three or more of one family written as `family.*` (with how many of the catalog's)."""
    ids = sorted(set(ids))
    families: dict[str, list[str]] = {}
    for fid in ids:
        families.setdefault(fid.split(".", 1)[0], []).append(fid)
    parts: list[str] = []
    for family, members in families.items():
        if len(members) < 3:
            parts.extend(members)
            continue
        total = sum(1 for i in catalog if i.split(".", 1)[0] == family)
        parts.append(f"{family}.*" + (f" ({len(members)} of {total})" if len(members) < total else ""))
    more = len(parts) - _SHOWN_IDS
    return ", ".join(parts[:_SHOWN_IDS]) + (f" (+{more} more)" if more > 0 else "")


def _hosts_text(hosts: list[str]) -> str:
    if len(hosts) <= _SHOWN_HOSTS:
        return ", ".join(clean(h, 40) for h in hosts)
    return f"{len(hosts)} hosts"


# Why a check did not judge, by kind: the one-line count of the default report (answer.py) names
# these.  The first matching pattern wins; a reason of several parts is classed by its first.
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("host not probed", re.compile(r"^(host unreachable|no probe ran)")),
    ("probe not in this run", re.compile(r"probe not in this run")),
    ("no expectation set", re.compile(r"^(no expectation|its stored expectation)")),
    ("too few peers or runs", re.compile(r"too few|needs at least|needs \d")),
    ("platform unsupported", re.compile(r"^\S+ unsupported")),
    ("not readable there", re.compile(r"not readable|neither|^no |unreadable|not run")),
)


def reason_kind(reason: str) -> str:
    """`probe not in this run`, `no expectation set`, ...: what kind of gap a not-judged reason is."""
    first = reason.split("; ", 1)[0]
    return next((kind for kind, pattern in _KINDS if pattern.search(first)), "other")


def not_judged_lines(fleet: FleetResult) -> list[str]:
    """One line per reason: which ids on which hosts were not judged, and why."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    by_reason: dict[str, dict[str, list[str]]] = {}
    catalog = fleet.check_ids
    for judged, states in fleet.check_states():
        for fid, st in states.items():
            if st.state == NOT_JUDGED:
                by_reason.setdefault(st.reason, {}).setdefault(judged.name, []).append(fid)
    for reason, missing in by_reason.items():
        # hosts missing the same ids for the same reason share a line
        for host, fids in missing.items():
            groups.setdefault((reason, tuple(sorted(fids))), []).append(host)
    lines = []
    for (reason, ids), hosts in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        what = "all checks" if set(ids) >= set(catalog) else _ids_text(ids, catalog)
        lines.append(f"{what} on {_hosts_text(hosts)}: {clean(reason, 600)}")
    return lines


def not_judged_block(fleet: FleetResult, width: int | None = None) -> str:
    """The terminal block, or "" when every check judged every host; each line wrapped to `width`
    (whole when None), never cut before its reason's advice."""
    lines = not_judged_lines(fleet)
    if not lines:
        return ""
    body = [wrap(line, width, indent="  ", subsequent="      ") for line in lines]
    return "Not judged (these checks did not run: their silence is not a pass):\n" + "\n".join(body)
