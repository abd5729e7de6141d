"""The verdict on one node as Node Problem Detector's custom-plugin answer (`probe npd`).

NPD's custom plugin contract: the exit status is 0 (OK), 1 (NonOK: a problem) or 2 (Unknown),
and the first `max_output_length` bytes of stdout (80 by default) are the condition's message.
A healthy node is 0; a failed or degraded one is 1 with its worst root fault (id and subject,
and how many more); a node that could not be judged whole (unreachable, incomplete, no verdict)
is 2, never 0: NPD must not read "no answer" as "healthy".  Pure: the judged run in, the answer out.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.facts.textsafe import display_safe
from orchestrator.verdict.findings import SEVERITY_ORDER
from orchestrator.verdict.health import Health
from orchestrator.verdict.result import FleetResult

OK, PROBLEM, UNKNOWN = 0, 1, 2
MAX_MESSAGE = 80  # NPD's default max_output_length, in bytes
PREFIX = "fleetprobe: "


@dataclass(frozen=True)
class NpdAnswer:
    status: int  # OK, PROBLEM or UNKNOWN
    message: str  # one line, at most MAX_MESSAGE bytes of UTF-8


def fit(text: str, limit: int = MAX_MESSAGE) -> str:
    """One line of at most `limit` UTF-8 bytes (never half a character); a cut ends in '...'."""
    line = " ".join(display_safe(text).split())
    if len(line.encode()) <= limit:
        return line
    cut = line.encode()[: limit - 3].decode("utf-8", "ignore")
    return cut.rstrip() + "..."


def unknown(why: str) -> NpdAnswer:
    return NpdAnswer(UNKNOWN, fit(PREFIX + why))


def npd_answer(fleet: FleetResult, node: str) -> NpdAnswer:
    """The node's answer: OK, PROBLEM naming its worst root fault, or UNKNOWN with why."""
    h = fleet.hosts.by_name(node)
    if h is None:
        return unknown(f"no verdict on {node}")
    state = h.health.state
    if state is Health.HEALTHY:
        return NpdAnswer(OK, fit(PREFIX + "healthy"))
    if state in (Health.FAILED, Health.DEGRADED):
        faults = [f for f in fleet.faults_of(node) if f.severity.value in ("fail", "warn")]
        faults.sort(key=lambda f: SEVERITY_ORDER.index(f.severity.value))
        if faults:
            root = faults[0].root
            more = f" (+{len(faults) - 1} more)" if len(faults) > 1 else ""
            return NpdAnswer(PROBLEM, fit(f"{PREFIX}{root.id} {root.subject}{more}"))
        return NpdAnswer(PROBLEM, fit(PREFIX + (h.health.reason or state.value)))
    return unknown(f"{state.value}: {h.health.reason or 'no reason recorded'}")
