"""A wedged driver: calls into NVML or CUDA that do not return, and processes stuck in the driver.

The probes watch their own driver calls (probes/_prelude.py fp_watched): a call that does not
return within its share of the probe's deadline is given up, the probe answers with what it had
and names the call (`unresponsive` in the gpus, nvlink, p2p and nccl facts).  That is a driver
that does not answer, not a slow host or a network problem: `gpu.driver.unresponsive`, distinct
from a probe timeout or an unreachable host.  The host probe lists the processes holding
/dev/nvidia*; one in uninterruptible sleep (state D) in two readings is stuck in the kernel,
usually in the driver (its wait channel names the function): `gpu.driver.process_stuck`.  Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from orchestrator.facts.model import Facts
from orchestrator.facts.shown import shown
from orchestrator.facts.textsafe import is_digits
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.findings import Finding, Located, Severity, fault, gpu_device
from orchestrator.verdict.rule import Unjudged

UNRESPONSIVE = rules.gpu.DRIVER_UNRESPONSIVE.id
PROCESS_STUCK = rules.gpu.DRIVER_PROCESS_STUCK.id

# The facts sections whose probe watches its driver calls, and that probe.
_WATCHED = (("gpus", "nvml"), ("nvlink", "nvlink"), ("p2p", "p2p"), ("nccl", "nccl"))


def _gpu_bus_ids(facts: Facts) -> list[str]:
    """The GPUs' bus ids in PCI order, which is NVML's index order: what names "GPU 3" when NVML
    itself could not say (its handle call is the one that hung)."""
    pcie = facts.get("pcie")
    gpus = sorted(str(d.get("bdf")) for d in (pcie.get("devices") if pcie else None) or []
                  if isinstance(d, dict) and d.get("kind") == "gpu" and not d.get("vf"))
    return gpus


def _subject(facts: Facts, subject: Any) -> Located:
    """What the probe's watchdog names ("GPU 3", or the driver as a whole) as a finding's subject:
    the GPU's text and device, or the driver's text and no device (the whole host)."""
    text = str(subject or "the driver")
    parts = text.split()
    if len(parts) == 2 and parts[0] == "GPU" and is_digits(parts[1]):
        buses = _gpu_bus_ids(facts)
        i = int(parts[1])
        if i < len(buses):
            return Located(f"GPU{i} ({buses[i]})", (gpu_device({"index": i, "bus_id": buses[i]}),))
        return Located(f"GPU{i}", (gpu_device({"index": i}),))
    return Located(text)


def unresponsive(view: HostView) -> Iterator[Finding]:
    for section, probe in _WATCHED:
        sec: Mapping[str, Any] | None = view.measured(section)
        if sec is None:
            continue
        for call in sec.get("unresponsive") or []:
            if not isinstance(call, dict):
                continue
            subject = _subject(view.facts, call.get("subject"))
            waited, limit = shown(call.get("waited_s")), shown(call.get("limit_s"))
            yield fault(UNRESPONSIVE, view.name, subject,
                        f"{shown(call.get('call'), 'a driver call')} on {subject} had not returned after {waited} s "
                        f"(the {probe} probe gives one driver call {limit} s, its share of the deadline): the driver "
                        "does not answer; the probe answered without it, so what it would have read after this call "
                        "is missing",
                        expected=f"returns within {limit} s", actual=f"no answer after {waited} s",
                        evidence=[f"{section}.unresponsive", f"probe {probe}"],
                        hint="a wedged driver: look for processes stuck on /dev/nvidia* (gpu.driver.process_stuck) "
                             "and Xid errors; reset the GPU when nothing holds it, else reboot")


def _stuck(facts: Facts) -> tuple[list[dict[str, Any]], Mapping[str, Any] | None]:
    host = facts.get("host")
    procs = host.get("gpu_processes") if host else None
    if not isinstance(procs, dict):
        return [], None
    return [h for h in procs.get("holders") or [] if isinstance(h, dict) and h.get("stuck")], procs


def process_stuck(view: HostView) -> Iterator[Finding]:
    if view.measured("host") is None:
        return
    stuck, _ = _stuck(view.facts)
    if not stuck:
        return
    named = "; ".join(f"pid {shown(h.get('pid'))} {shown(h.get('command'))} (waits in "
                      f"{shown(h.get('wchan'), 'an unknown kernel function')}, holds "
                      f"{', '.join(str(d) for d in h.get('devices') or [] if d) or 'device files not read'})"
                      for h in stuck[:5])
    more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
    yield fault(PROCESS_STUCK, view.name, "processes holding /dev/nvidia*",
                f"{len(stuck)} process(es) in uninterruptible sleep (state D) holding /dev/nvidia* in two readings: "
                f"{named}{more}",
                severity=Severity.WARN, expected="no process stuck in the driver",
                actual=[{k: h.get(k) for k in ("pid", "command", "wchan", "devices")} for h in stuck],
                evidence=["host.gpu_processes (/proc/<pid>/stat, wchan, fd)"],
                hint="a process stuck in the kernel cannot be killed and keeps its GPUs from being reset: "
                     "drain the node and reboot; check the kernel log for Xid errors")


def unjudged(facts: Facts) -> dict[str, str]:
    """What the host facts hold back (verdict/coverage.py): an older host probe did not read the
    processes; without root only the probe user's own processes can be read."""
    host = facts.get("host")
    if not isinstance(host, dict):
        return {}
    stuck, procs = _stuck(facts)
    if procs is None:
        return {PROCESS_STUCK: "host probe older than 1.2"}
    if not stuck and procs.get("error"):
        return {PROCESS_STUCK: f"/proc could not be listed: {procs['error']}"}
    hidden = procs.get("unreadable")
    if not stuck and isinstance(hidden, int) and hidden > 0:
        return {PROCESS_STUCK: f"the open files of {hidden} other users' processes need root (become: true)"}
    return {}


CHECKS = [unresponsive, process_stuck]

FINDING_IDS: tuple[str, ...] = (UNRESPONSIVE, PROCESS_STUCK)


# The rules whose judgement the facts may hold back (their declaration says `held_back`):
# unjudged shares its steps with the checks, so the check and its coverage cannot disagree.
HELD_BACK: dict[str, Unjudged] = {fid: unjudged for fid in (rules.gpu.DRIVER_PROCESS_STUCK.id,)}
