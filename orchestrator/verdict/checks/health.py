"""Health from the kernel log (facts kmsg) and from the GPU counters NVML reports (facts gpus).

Pure: HostView in, findings out.  Kernel-log events are events of one boot: an event whose key was
already in the previous run's facts of the same boot is reported as "still present", not as new
(`split_new`).  What each Xid asks for comes from facts/xid.py, the one table of codes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from orchestrator.facts import xid as xids
from orchestrator.facts.gpu_models import PCIE_GEN_GT_S
from orchestrator.facts.model import AerLink, Facts, KmsgEvent, KmsgFacts, PreviousFacts
from orchestrator.facts.normalize import kmsg as kmsg_facts
from orchestrator.facts.shown import shown
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.checks.nic import same_boot
from orchestrator.verdict.findings import (
    Device,
    DeviceKind,
    Finding,
    Located,
    Severity,
    fault,
    gpu_device,
    joined,
    limitation,
    pci_device,
    unknown,
)
from orchestrator.verdict.rule import Unjudged

# Corrected AER events in one boot below this are the background noise of many platforms.
AER_CORRECTED_MIN = 10

_ACTION_TEXT = {
    "application": "an application error: restart the job",
    "reset": "reset the GPU (nvidia-smi -r) once idle",
    "reboot": "reboot the node",
    "inspect_hardware": "take the GPU out of service and inspect the hardware",
}


def _kmsg(view: HostView) -> KmsgFacts | None:
    facts: KmsgFacts | None = view.measured("kmsg")
    return facts


def previous_keys(current: KmsgFacts, previous: PreviousFacts | None) -> set[str]:
    """Event keys of the previous run when it read the same boot (same boot id), else none."""
    prev = previous.get("kmsg") if previous else None
    if not isinstance(prev, dict) or not prev.get("readable"):
        return set()
    if not current.get("boot_id") or prev.get("boot_id") != current.get("boot_id"):
        return set()
    return {str(e.get("key")) for e in prev.get("events") or [] if isinstance(e, dict)}


def split_new(events: list[KmsgEvent], seen: set[str]) -> tuple[list[KmsgEvent], list[KmsgEvent]]:
    """(new, still present) under the previous run's keys of the same boot."""
    new = [e for e in events if e.get("key") not in seen]
    old = [e for e in events if e.get("key") in seen]
    return new, old


def _gpu_label(view: HostView, bus: str | None) -> Located:
    """The GPU a kernel event names by bus id, as a finding's subject (text and device)."""
    gpus = view.facts.get("gpus")
    for g in (gpus.get("list") if gpus else None) or []:
        if bus and g.get("bus_id") == bus:
            return Located(f"GPU{g.get('index')} ({bus})", (gpu_device(g),))
    return Located(bus or "bus id unknown", (pci_device(DeviceKind.GPU, bus),) if bus else ())


def _when(new: list[KmsgEvent], old: list[KmsgEvent]) -> str:
    if new and old:
        text = f"{len(new)} new since the previous run, {len(old)} still present"
    elif old:
        text = f"{len(old)} still present (already seen in the previous run of this boot)"
    else:
        text = f"{len(new)} in this boot"
    at = kmsg_facts.span([*old, *new])  # the wall clock the log printed: last night's event or last year's
    if at is None:
        return text
    return f"{text}, at {at[0]}" if at[0] == at[1] else f"{text}, first {at[0]}, last {at[1]}"


def _by(events: list[KmsgEvent], kind: str, *keys: str) -> dict[tuple[Any, ...], list[KmsgEvent]]:
    groups: dict[tuple[Any, ...], list[KmsgEvent]] = defaultdict(list)
    for e in events:
        if e.get("kind") == kind:
            groups[tuple(e.get(k) for k in keys)].append(e)
    return groups


def _event_groups(view: HostView, kind: str, *keys: str,
                  order: Callable[[tuple[Any, ...]], Any] = lambda k: tuple(map(str, k)),
                  ) -> Iterator[tuple[tuple[Any, ...], list[KmsgEvent], list[KmsgEvent], list[KmsgEvent]]]:
    """A readable kernel log's events of one kind grouped by `keys`, in `order`: each group with its
    events new since the previous run of this boot and those already seen there."""
    km = _kmsg(view)
    if km is None or not km.get("readable"):
        return
    seen = previous_keys(km, view.previous)
    groups = _by(km.get("events") or [], kind, *keys)
    for key in sorted(groups, key=order):
        new, old = split_new(groups[key], seen)
        yield key, groups[key], new, old


def _by_bus_and_code(key: tuple[Any, ...]) -> tuple[str, Any]:
    return str(key[0]), key[1] or 0


def kernel_log_unreadable(view: HostView) -> Iterator[Finding]:
    km = _kmsg(view)
    if km is None or km.get("readable"):
        return
    why = km.get("unreadable_reason") or "no source could be read"
    host = view.facts.get("host")
    virt = host.get("virtualization") if host else None
    container = virt.get("container") if virt else None
    msg = f"the kernel log could not be read, so XIDs, AER and NIC events are not judged ({why})"
    hint = ("add the probe user to the systemd-journal or adm group (journalctl -k), or run with become: true "
            "(/dev/kmsg, dmesg need root where kernel.dmesg_restrict=1)")
    if container:
        yield limitation(rules.host.KERNEL_LOG_UNREADABLE.id, view.name, "kernel log",
                         msg + f"; the host is a {container} container, which usually hides the host's log",
                         evidence=["kmsg.attempts"], hint=hint)
        return
    yield unknown(rules.host.KERNEL_LOG_UNREADABLE.id, view.name, "kernel log", msg, evidence=["kmsg.attempts"],
                  severity=Severity.WARN, hint=hint)


def gpu_xid(view: HostView) -> Iterator[Finding]:
    for (bus, code), events, new, old in _event_groups(view, "xid", "bus_id", "code", order=_by_bus_and_code):
        actions = {e.get("action") for e in events}
        info = xids.lookup(code) if isinstance(code, int) else None
        subject = _gpu_label(view, bus)
        kw: dict[str, Any] = {"actual": {"count": len(events), "new": len(new)},
                              "evidence": [f"kmsg.events[xid {code}]: {events[-1].get('text', '')[:160]}"]}
        if info is None:
            yield fault(rules.gpu.XID.id, view.name, subject,
                        f"Xid {code} ({_when(new, old)}): a code fleetprobe's table does not know",
                        severity=Severity.WARN, hint="look the code up in NVIDIA's Xid catalog", **kw)
            continue
        worst = next((a for a in ("inspect_hardware", "reboot", "reset", "application") if a in actions), "ignore")
        if worst == "ignore":
            continue
        msg = f"Xid {code}, {info.meaning} ({_when(new, old)})"
        hint = _ACTION_TEXT[worst] + (f"; {info.note}" if info.note else "")
        if worst == "application":
            if info.burst and len(events) >= xids.BURST_COUNT:
                yield fault(rules.gpu.XID.id, view.name, subject,
                            msg + f": repeated on this GPU ({len(events)} events), more than one job's bug",
                            severity=Severity.WARN, expected=f"fewer than {xids.BURST_COUNT}",
                            hint="if the errors follow this GPU across jobs, drain it and run diagnostics; "
                                 + (info.note or ""), **kw)
            else:
                yield fault(rules.gpu.XID.id, view.name, subject, msg, severity=Severity.INFO, hint=hint, **kw)
            continue
        yield fault(rules.gpu.XID.id, view.name, subject, msg, hint=hint, **kw)


def nvswitch_sxid(view: HostView) -> Iterator[Finding]:
    for (bus, code), events, new, old in _event_groups(view, "sxid", "bus_id", "code", order=_by_bus_and_code):
        fatal = any(e.get("severity") == "fatal" for e in events)
        yield fault(rules.nvswitch.SXID.id, view.name, Located(f"NVSwitch {bus}", _at(DeviceKind.NVSWITCH, bus)),
                    f"SXid {code}, {'fatal' if fatal else 'non-fatal'} ({_when(new, old)}): "
                    f"{str(events[-1].get('text', ''))[:120]}",
                    severity=Severity.FAIL if fatal else Severity.WARN,
                    actual={"count": len(events), "new": len(new)}, evidence=["kmsg.events[sxid]"],
                    hint=("a fatal SXid stops the NVLink fabric: reset the GPUs and NVSwitches (or reboot) and "
                          "check the fabric manager log" if fatal else
                          "non-fatal link errors: watch their rate; persistent ones point at a link or cable"))


def gpu_fallen_off_bus(view: HostView) -> Iterator[Finding]:
    for (bus,), events, new, old in _event_groups(view, "fallen_off_bus", "bus_id"):
        yield fault(rules.gpu.FALLEN_OFF_BUS.id, view.name, _gpu_label(view, bus),
                    f"the GPU fell off the PCIe bus ({_when(new, old)})",
                    actual={"count": len(events), "new": len(new)}, evidence=["kmsg.events[fallen_off_bus]"],
                    hint="reboot the node; check power delivery, seating, cooling and the slot; "
                         "repeated falls are a hardware fault")


def pcie_aer(view: HostView) -> Iterator[Finding]:
    for (bus,), events, new, old in _event_groups(view, "aer", "bus_id"):
        uncorrected = [e for e in events if str(e.get("severity", "")).lower().startswith("uncorrected")]
        types = sorted({str(e.get("error_type")) for e in events})
        kw: dict[str, Any] = {"actual": {"events": len(events), "uncorrected": len(uncorrected), "new": len(new)},
                              "evidence": [f"kmsg.events[aer]: {str(events[-1].get('text', ''))[:160]}"]}
        if uncorrected:
            yield fault(rules.pcie.AER.id, view.name, Located(bus or "PCIe device", _at(DeviceKind.PCIE, bus)),
                        f"{len(uncorrected)} uncorrected PCIe error(s) ({', '.join(types)}; {_when(new, old)})",
                        hint="uncorrected errors lose transactions: check the device, its slot and the link "
                             "partner; the GPU or NIC below this port may need a reset or a reseat", **kw)
        elif len(events) >= AER_CORRECTED_MIN and (new or not old):
            yield fault(rules.pcie.AER.id, view.name, Located(bus or "PCIe device", _at(DeviceKind.PCIE, bus)),
                        f"{len(events)} corrected PCIe errors ({', '.join(types)}; {_when(new, old)})",
                        severity=Severity.WARN, expected=f"fewer than {AER_CORRECTED_MIN} per boot",
                        hint="a link that keeps correcting errors is marginal: check the riser, cable or slot "
                             "and the link's speed/width", **kw)


_MLX5_TEXT = {
    "slot_power": ("the slot advertises less power than the NIC needs: the firmware throttles it",
                   "check the slot's power budget (lspci SlotPowerLimit), the riser and the BIOS slot settings"),
    "module_temperature": ("the transceiver module reported a high temperature",
                           "check airflow at the NIC and the transceiver; an overheating module shuts its link down"),
    "tx_timeout": ("a transmit queue timed out (NETDEV WATCHDOG)",
                   "the NIC stopped sending: check its firmware, the link and the driver log around this time"),
    "health_compromised": ("the driver found the device's health compromised",
                           "the NIC needs a reset (or the host a reboot); repeated: replace the adapter"),
}


def nic_kernel_events(view: HostView) -> Iterator[Finding]:
    """mlx5 events in the kernel log: slot power, module temperature, transmit timeouts, health."""
    for (dev, subtype), events, new, old in _event_groups(view, "mlx5", "bus_id", "subtype"):
        device = dev or events[-1].get("device") or "mlx5 device"
        what, hint = _MLX5_TEXT.get(str(subtype), (str(subtype), "read the driver's message"))
        name = events[-1].get("device")
        nic = pci_device(DeviceKind.NIC, dev, nic=name if isinstance(name, str) and name else None)
        yield fault(rules.nic.KERNEL_EVENT.id, view.name, Located(str(device), (nic,)), f"{what} ({_when(new, old)})",
                    severity=Severity.FAIL if subtype == "health_compromised" else Severity.WARN,
                    actual={"count": len(events), "new": len(new)},
                    evidence=[f"kmsg.events[mlx5]: {str(events[-1].get('text', ''))[:160]}"], hint=hint)


def peermem_errors(view: HostView) -> Iterator[Finding]:
    """nvidia-peermem errors in the kernel log: GPUDirect RDMA through the peer-memory module failed."""
    km = _kmsg(view)
    if km is None or not km.get("readable"):
        return
    events = [e for e in km.get("events") or [] if e.get("kind") == "peermem"]
    if not events:
        return
    new, old = split_new(events, previous_keys(km, view.previous))
    yield fault(rules.gpu.GDR_PEERMEM_ERROR.id, view.name, "nvidia-peermem",
                f"the GPU peer-memory module reported errors ({_when(new, old)}): "
                f"{str(events[-1].get('text', ''))[:160]}",
                severity=Severity.WARN, actual={"count": len(events), "new": len(new)},
                evidence=["kmsg.events[peermem]"],
                hint="GPUDirect RDMA registrations failed: check that nvidia_peermem matches the loaded driver and "
                     "the MLNX_OFED/inbox RDMA stack (reload it after a driver upgrade), or use DMA-BUF")


def gpu_library_segfaults(view: HostView) -> Iterator[Finding]:
    """Processes that crashed inside libnccl / libcuda: a driver/library mismatch, a bad NCCL build or
    a GPU fault that surfaced in user space."""
    for (lib,), events, new, old in _event_groups(view, "segfault", "library"):
        procs = sorted({f"{shown(e.get('process'), 'process unknown')}[{shown(e.get('pid'))}]" for e in events})
        yield fault(rules.host.SEGFAULT_GPU_LIBRARY.id, view.name, shown(lib, "library unknown"),
                    f"{len(events)} segfault(s) inside {lib} ({_when(new, old)}): {', '.join(procs[:5])}",
                    severity=Severity.WARN, actual={"count": len(events), "new": len(new), "processes": procs[:10]},
                    evidence=[f"kmsg.events[segfault]: {str(events[-1].get('text', ''))[:160]}"],
                    hint="check that the CUDA driver library and the user-space CUDA/NCCL versions match the "
                         "loaded kernel module, and look for Xids at the same time")


# Growth between two runs of one boot at which a link's correctable AER count is worth a warning
# (as for kernel-log AER events, fewer are the background noise of many platforms), for a Gen4 x16
# link.  A link that moves more symbols sees more correctable errors at one bit error rate, so the
# threshold scales with lanes x GT/s: 20 for Gen5 x16, 1 for a Gen1 x4 link (any error there is news).
AER_COUNTER_CORRECTED_MIN = 10
_AER_REFERENCE_LANE_GTS = 16 * PCIE_GEN_GT_S[4]


def aer_corrected_threshold(link: AerLink | Mapping[str, Any]) -> int:
    """The correctable-error growth per run worth a warning on this link, by its trained width and
    generation (the reference threshold when either is unknown)."""
    gen, width = link.get("gen_current"), link.get("width_current")
    if type(gen) is not int or type(width) is not int or gen not in PCIE_GEN_GT_S or width <= 0:
        return AER_COUNTER_CORRECTED_MIN
    return max(1, round(AER_COUNTER_CORRECTED_MIN * width * PCIE_GEN_GT_S[gen] / _AER_REFERENCE_LANE_GTS))


def _at(kind: DeviceKind, bus: str | None) -> tuple[Device, ...]:
    """The device a kernel event names by bus id; none when the event names none."""
    return (pci_device(kind, bus),) if bus else ()


def _link_at(link: AerLink) -> Located:
    """The link as a finding's subject: its text and its two ends (device and partner)."""
    dev = pci_device(DeviceKind.PCIE, link.get("device"), peer_bus_id=link.get("partner") or None)
    return Located(_link_label(link), (dev,))


def _link_label(link: AerLink) -> str:
    gen, width = link.get("gen_current"), link.get("width_current")
    trained = f"Gen{gen} x{width}" if gen and width else "link state unknown"
    return (shown(link.get("device"), "device unknown") + (f" <-> {link['partner']}" if link.get("partner") else "")
            + f" ({trained})")


def aer_counters(view: HostView) -> Iterator[Finding]:
    """AER counters in sysfs along the GPUs' and NICs' upstream chains (both ends of each link):
    fatal errors are judged as absolutes (any count is a fault), correctable and non-fatal ones as
    growth between runs of one boot."""
    if view.measured("pcie") is None:
        return
    links = _aer_links(view.facts)
    prev_links: dict[str | None, AerLink] = {}
    if same_boot(view.facts, view.previous) and view.previous:
        prev_pcie = view.previous.get("pcie")
        prev_links = {lk.get("device"): lk for lk in (prev_pcie.get("aer_links") if prev_pcie else None) or []
                      if isinstance(lk, dict)}
    for lk in links:
        kw: dict[str, Any] = {"evidence": ["pcie.aer_links (aer_dev_* of both link ends)"]}
        fatal = lk.get("fatal")
        if isinstance(fatal, int) and fatal > 0:
            serves = _served(view, lk)
            yield fault(rules.pcie.AER_COUNTERS.id, view.name, _link_at(lk),
                        f"{fatal} fatal PCIe error(s) counted on the link since boot (serves {serves})",
                        expected=0, actual={"fatal": fatal, "ends": lk.get("ends")},
                        hint="a fatal error resets the link and loses the device's transactions: reseat the card or "
                             "riser, check the slot and the switch; the GPU/NIC below needs a reset or a reboot", **kw)
            continue
        old = prev_links.get(lk.get("device"))
        if not old:
            continue
        grown: dict[str, int] = {}
        for k in ("correctable", "nonfatal"):
            now, then = lk.get(k), old.get(k)
            if isinstance(now, int) and isinstance(then, int) and now > then:
                grown[k] = now - then
        threshold = aer_corrected_threshold(lk)
        if grown.get("nonfatal") or grown.get("correctable", 0) >= threshold:
            serves = _served(view, lk)
            yield fault(rules.pcie.AER_COUNTERS.id, view.name, _link_at(lk),
                        "PCIe AER counters grew since the previous run of this boot: "
                        + ", ".join(f"{k} +{v}" for k, v in sorted(grown.items())) + f" (serves {serves})",
                        severity=Severity.WARN, expected="no non-fatal errors, " + (f"fewer than {threshold} correctable" if threshold > 1 else
                                                            "no correctable errors")
                        + " per run (scaled to the link's width and speed)", actual=grown,
                        hint="a link that keeps counting errors is marginal: check the riser, cable or slot and "
                             "whether it trained at its full speed and width", **kw)


def _served(view: HostView, lk: AerLink) -> str:
    """The GPUs (or bus ids) a link serves, as a message names them: worked out only for a link
    that has a finding, since each GPU's label scans the host's GPUs and most links count nothing."""
    return joined(_gpu_label(view, b) for b in lk.get("serves") or []).text


def _aer_links(facts: Facts) -> list[AerLink]:
    pcie = facts.get("pcie")
    return (pcie.get("aer_links") if pcie else None) or []


def _aer_unjudged(facts: Facts) -> dict[str, str]:
    links = _aer_links(facts)
    if any(isinstance(lk, dict) and lk.get("ends") for lk in links):
        return {}
    return {rules.pcie.AER_COUNTERS.id: "no AER counters in sysfs on the GPUs' and NICs' chains (pcie probe before 1.1, "
                                 "a kernel before 5.8, or no GPU/NIC)"}


CHECKS = [kernel_log_unreadable, gpu_xid, nvswitch_sxid, gpu_fallen_off_bus, pcie_aer, nic_kernel_events,
          peermem_errors, gpu_library_segfaults, aer_counters]

FINDING_IDS: tuple[str, ...] = (
    rules.host.KERNEL_LOG_UNREADABLE.id,
    rules.gpu.XID.id,
    rules.nvswitch.SXID.id,
    rules.gpu.FALLEN_OFF_BUS.id,
    rules.pcie.AER.id,
    rules.nic.KERNEL_EVENT.id,
    rules.gpu.GDR_PEERMEM_ERROR.id,
    rules.host.SEGFAULT_GPU_LIBRARY.id,
    rules.pcie.AER_COUNTERS.id,
)



# The rules whose judgement the facts may hold back (their declaration says `held_back`):
# _aer_unjudged shares its steps with the checks, so the check and its coverage cannot disagree.
HELD_BACK: dict[str, Unjudged] = {fid: _aer_unjudged for fid in (rules.pcie.AER_COUNTERS.id,)}
