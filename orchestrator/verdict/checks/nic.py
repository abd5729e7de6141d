"""InfiniBand/RoCE port checks over facts nic: state, rate, error counters, firmware.  Pure.

With the expectations `nic_ports_up` / `nic_rate_gbps` a port is judged against them; without,
against the host's peers (hosts with the same HCAs): the port most of them have up or at a rate is
the norm, never a per-model default.  Error counters are cumulative since the driver loaded, so
they are judged as growth since the previous run of the same boot; without one, only counters
where any count is already a fault are judged.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

from orchestrator.facts.model import Facts, NicDevice, NicFacts, NicPort, PreviousFacts
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import FleetReads, HostView
from orchestrator.verdict.findings import (
    Device,
    DeviceKind,
    Finding,
    Located,
    Severity,
    fault,
    pci_device,
    unknown,
)

# Port counters (ports/N/counters) that count link or physical errors.
ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                  "port_rcv_remote_physical_errors", "local_link_integrity_errors",
                  "excessive_buffer_overrun_errors", "port_xmit_constraint_errors", "port_rcv_constraint_errors")
# Any count of these is a fault on its own: the link went beyond its error thresholds.
ABSOLUTE_COUNTERS = ("local_link_integrity_errors", "excessive_buffer_overrun_errors")


def _nic(view: HostView) -> NicFacts | None:
    facts: NicFacts | None = view.measured("nic")
    return facts


def _ports(nic: NicFacts) -> Iterator[tuple[NicDevice, NicPort]]:
    for d in nic.get("devices") or []:
        for p in d.get("ports") or []:
            yield d, p


def _subject(d: NicDevice, p: NicPort) -> Located:
    """The port as a finding's subject: the text a person reads and the device it is."""
    port = p.get("port")
    dev = pci_device(DeviceKind.NIC_PORT, d.get("bus_id"), nic=d.get("name") or None,
                     port=port if isinstance(port, int) and not isinstance(port, bool) else None)
    return Located(f"{d.get('name')} port {port} ({d.get('bus_id') or 'PCI function unknown'})", (dev,))


def _hca(d: Any) -> Device:
    """The adapter as a whole (its name and PCI function)."""
    return pci_device(DeviceKind.NIC, d.get("bus_id"), nic=d.get("name") or None)


def _up(p: NicPort) -> bool:
    return p.get("state") == "ACTIVE" and p.get("phys_state") == "LinkUp"


def port_down(view: HostView) -> Iterator[Finding]:
    nic = _nic(view)
    if nic is None or view.expect.nic_ports_up is not True:
        return
    for d, p in _ports(nic):
        if not _up(p):
            yield fault(rules.nic.PORT_DOWN.id, view.name, _subject(d, p),
                        f"port is {p.get('state') or '?'} / {p.get('phys_state') or '?'}, ACTIVE / LinkUp expected",
                        expected="ACTIVE / LinkUp", actual=f"{p.get('state')} / {p.get('phys_state')}",
                        evidence=["nic.devices.ports.state", "nic.devices.ports.phys_state"],
                        hint="check the cable and the switch port; Polling: no link partner, INIT: no subnet manager")


def device_unreadable(view: HostView) -> Iterator[Finding]:
    """An HCA the tools could not read (ibstat: "stat of IB device 'mlx5_8' failed"): its ports are
    not known, which is no pass.  Where another report of the same host (ibstatus) read its ports,
    the HCA is known after all."""
    nic = _nic(view)
    for d in (nic.get("devices") if nic else None) or []:
        error = d.get("error")
        if error and not d.get("ports"):
            yield fault(rules.nic.DEVICE_UNREADABLE.id, view.name,
                        Located(f"{d.get('name')} ({d.get('bus_id') or 'PCI function unknown'})", (_hca(d),)),
                        f"{error}; its ports are not known (ibstat before rdma-core's 2024 fix stops at such an "
                        "HCA, so HCAs after it may be missing too)",
                        severity=Severity.WARN, expected="readable", actual=error, evidence=["nic.devices.error"],
                        hint="an HCA that is not InfiniBand (an Ethernet-only/Accelerated Networking function) "
                             "makes older ibstat stop: run `ibstat <hca>` per device or ibstatus; otherwise "
                             "check `dmesg | grep mlx5` and the device's state")


def rate_low(view: HostView) -> Iterator[Finding]:
    nic = _nic(view)
    want = view.expect.nic_rate_gbps
    if nic is None or want is None:
        return
    for d, p in _ports(nic):
        rate = p.get("rate_gbps")
        if _up(p) and isinstance(rate, (int, float)) and rate < want:
            yield fault(rules.nic.PORT_RATE_LOW.id, view.name, _subject(d, p),
                        f"port runs at {rate:g} Gb/s, at least {want:g} Gb/s expected ({p.get('rate')})",
                        expected=want, actual=rate, evidence=["nic.devices.ports.rate"],
                        hint="a port trained below its rate: check the cable/transceiver and the switch port config")


def _growth(cur: dict[str, int], prev: dict[str, int]) -> dict[str, int] | None:
    """Per-counter growth, None when a counter went backwards (the driver reloaded: not comparable)."""
    out = {}
    for k in ERROR_COUNTERS:
        if k in cur and k in prev:
            if cur[k] < prev[k]:
                return None
            if cur[k] > prev[k]:
                out[k] = cur[k] - prev[k]
    return out


def same_boot(facts: Facts, previous: PreviousFacts | None) -> bool:
    now, then = facts.get("kmsg"), previous.get("kmsg") if previous else None
    a = now.get("boot_id") if now else None
    b = then.get("boot_id") if then else None
    return bool(a) and a == b


def port_errors(view: HostView) -> Iterator[Finding]:
    nic = _nic(view)
    if nic is None:
        return
    prev_nic = view.previous.get("nic") if same_boot(view.facts, view.previous) and view.previous else None
    prev_ports = {(d.get("name"), p.get("port")): p for d, p in _ports(prev_nic)} if isinstance(prev_nic, dict) else {}
    for d, p in _ports(nic):
        counters = p.get("counters") or {}
        before = prev_ports.get((d.get("name"), p.get("port")))
        grown = _growth(counters, before.get("counters") or {}) if before else None
        if grown:
            yield fault(rules.nic.PORT_ERRORS.id, view.name, _subject(d, p),
                        "error counters grew since the previous run of this boot: "
                        + ", ".join(f"{k} +{v}" for k, v in sorted(grown.items())),
                        severity=Severity.WARN, expected="no growth", actual=grown,
                        evidence=["nic.devices.ports.counters", "previous run's nic.devices.ports.counters"],
                        hint="a link that keeps counting errors is marginal: check or replace the cable/transceiver")
            continue
        bad = {k: counters[k] for k in ABSOLUTE_COUNTERS if counters.get(k)}
        if bad and not before:
            yield fault(rules.nic.PORT_ERRORS.id, view.name, _subject(d, p),
                        "the link exceeded its error thresholds: " + ", ".join(f"{k} {v}" for k, v in sorted(bad.items())),
                        severity=Severity.WARN, expected=0, actual=bad, evidence=["nic.devices.ports.counters"],
                        hint="check or replace the cable/transceiver; clear the counters (perfquery -x) to watch again")


def _peer_key(view: HostView) -> tuple[Any, ...] | None:
    nic = _nic(view)
    if not nic or not nic.get("devices"):
        return None
    return tuple(sorted((str(d.get("name")), str(d.get("hca_type"))) for d in nic["devices"]))


def _majority(values: list[Any], n_hosts: int) -> Any:
    """The value more than half of the peers have, else None (no norm to compare with)."""
    if not values:
        return None
    value, count = Counter(values).most_common(1)[0]
    return value if count * 2 > n_hosts else None


# What peer_ports and firmware_outlier read (checks/__init__.fleet_facts): not the ports' counters,
# most of the section.
FLEET_READS: FleetReads = {"nic": {"devices": {
    "name": None, "bus_id": None, "hca_type": None, "board_id": None, "fw_ver": None,
    "ports": {"port": None, "state": None, "phys_state": None, "rate": None, "rate_gbps": None}}}}


def peer_ports(views: list[HostView]) -> Iterator[Finding]:
    """Without expectations: a port down, or slower, where most hosts with the same HCAs have it up
    or faster."""
    groups: dict[tuple[Any, ...], list[HostView]] = defaultdict(list)
    for v in views:
        key = _peer_key(v)
        if key is not None:
            groups[key].append(v)
    for members in groups.values():
        if len(members) < 3:
            continue  # two hosts that differ do not say which one is right
        table: dict[tuple[Any, Any], list[tuple[HostView, NicDevice, NicPort]]] = defaultdict(list)
        for v in members:
            nic = _nic(v)
            for d, p in _ports(nic) if nic else ():
                table[(d.get("name"), p.get("port"))].append((v, d, p))
        for entries in table.values():
            up_norm = _majority([_up(p) for _, _, p in entries], len(members))
            rate_norm = _majority([p.get("rate_gbps") for _, _, p in entries if _up(p)], len(members))
            for v, d, p in entries:
                if v.expect.nic_ports_up is None and up_norm is True and not _up(p):
                    yield fault(rules.nic.PORT_DOWN.id, v.name, _subject(d, p),
                                f"port is {p.get('state') or '?'} / {p.get('phys_state') or '?'} while it is "
                                f"ACTIVE on most of the {len(members)} hosts with the same HCAs",
                                severity=Severity.WARN, expected="ACTIVE / LinkUp (peers)",
                                actual=f"{p.get('state')} / {p.get('phys_state')}",
                                evidence=["nic.devices.ports.state", f"{len(members)} peer hosts"],
                                hint="check the cable and the switch port; set probe_expect nic_ports_up to make it strict")
                rate = p.get("rate_gbps")
                if (v.expect.nic_rate_gbps is None and isinstance(rate_norm, (int, float)) and _up(p)
                        and isinstance(rate, (int, float)) and rate < rate_norm):
                    yield fault(rules.nic.PORT_RATE_LOW.id, v.name, _subject(d, p),
                                f"port runs at {rate:g} Gb/s where most of the {len(members)} hosts with the same "
                                f"HCAs run {rate_norm:g} Gb/s ({p.get('rate')})",
                                severity=Severity.WARN, expected=rate_norm, actual=rate,
                                evidence=["nic.devices.ports.rate", f"{len(members)} peer hosts"],
                                hint="check the cable/transceiver and the switch port; set probe_expect "
                                     "nic_rate_gbps to make it strict")


def firmware_outlier(views: list[HostView]) -> Iterator[Finding]:
    """An HCA whose firmware differs from what most HCAs of the same board (board_id) in the fleet run."""
    by_board: dict[str, list[tuple[HostView, NicDevice]]] = defaultdict(list)
    for v in views:
        nic = _nic(v)
        for d in (nic.get("devices") if nic else None) or []:
            if d.get("board_id") and d.get("fw_ver"):
                by_board[str(d["board_id"])].append((v, d))
    for board, entries in sorted(by_board.items()):
        if len(entries) < 3:
            continue
        norm = _majority([d["fw_ver"] for _, d in entries], len(entries))
        if norm is None:
            continue
        for v, d in entries:
            if d["fw_ver"] != norm:
                yield fault(rules.nic.FIRMWARE_OUTLIER.id, v.name, Located(f"{d.get('name')} ({d.get('bus_id')})", (_hca(d),)),
                            f"HCA firmware {d['fw_ver']} where most {board} HCAs in the fleet run {norm}",
                            severity=Severity.WARN, expected=norm, actual=d["fw_ver"],
                            evidence=["nic.devices.fw_ver", f"{len(entries)} {board} HCAs"],
                            hint="update the HCA firmware (mlxfwmanager) to the fleet's version")


def _kernel_at_least(kernel: Any, want: tuple[int, int]) -> bool | None:
    m = re.match(r"^(\d+)\.(\d+)", kernel) if isinstance(kernel, str) else None
    return (int(m.group(1)), int(m.group(2))) >= want if m else None


# DMA-BUF, the other way NCCL does GPUDirect RDMA without a peer-memory module, needs Linux 5.12+.
DMABUF_KERNEL = (5, 12)


def gdr_unavailable(view: HostView) -> Iterator[Finding]:
    """With `gdr: true`: a peer-memory client (nvidia_peermem / nv_peer_mem) is loaded, or at least
    the kernel could do DMA-BUF (whether the driver and NIC stack do is not measured: unknown)."""
    nic = _nic(view)
    if nic is None or view.expect.gdr is not True:
        return
    gdr = nic.get("gdr")
    gpus_facts = view.facts.get("gpus")
    gpus = (gpus_facts.get("list") if gpus_facts else None) or []
    if not isinstance(gdr, dict) or not nic.get("devices") or not gpus:
        return
    if gdr.get("peermem_loaded"):
        return
    host = view.facts.get("host")
    kernel = host.get("kernel") if host else None
    dmabuf = _kernel_at_least(kernel, DMABUF_KERNEL)
    gpu_dmabuf = _gpu_dmabuf(view)
    kw: dict[str, Any] = {"expected": "nvidia_peermem loaded or DMA-BUF",
                          "actual": {"peermem": None, "kernel": kernel, "gpu_dmabuf": gpu_dmabuf},
                          "evidence": ["nic.gdr", "host.kernel", "p2p.dmabuf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)"]}
    if dmabuf is False:
        yield fault(rules.gpu.GDR_UNAVAILABLE.id, view.name, "GPUDirect RDMA",
                    "no GPU peer-memory module (nvidia_peermem / nv_peer_mem) is loaded and the kernel is older "
                    "than 5.12 (no DMA-BUF): NICs cannot read or write GPU memory directly",
                    hint="modprobe nvidia_peermem (and load it at boot); NCCL otherwise stages through host memory",
                    **kw)
        return
    without = sorted(b for b, ok in (gpu_dmabuf or {}).items() if ok is False)
    if without:
        yield fault(rules.gpu.GDR_UNAVAILABLE.id, view.name, "GPUDirect RDMA",
                    "no GPU peer-memory module (nvidia_peermem / nv_peer_mem) is loaded and CUDA says "
                    f"{len(without)} GPU(s) do not support DMA-BUF ({', '.join(without[:4])}): NICs cannot reach "
                    "their memory directly", hint="modprobe nvidia_peermem, or a driver with DMA-BUF support "
                    "(the open kernel modules, R515+)", **kw)
        return
    if gpu_dmabuf and all(ok is True for ok in gpu_dmabuf.values()) and dmabuf is True:
        return  # every GPU supports DMA-BUF and the kernel can do it: NCCL's DMA-BUF path is open
    yield unknown(rules.gpu.GDR_UNAVAILABLE.id, view.name, "GPUDirect RDMA",
                  "no GPU peer-memory module (nvidia_peermem / nv_peer_mem) is loaded; GPUDirect RDMA works "
                  "only through DMA-BUF here, and the GPUs' DMA-BUF support was not read (the p2p probe reads it)",
                  severity=Severity.WARN,
                  hint="modprobe nvidia_peermem, or run the p2p probe (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED); "
                       "NCCL_DEBUG=INFO says 'DMA-BUF is available'", **kw)


def _gpu_dmabuf(view: HostView) -> dict[str, bool | None] | None:
    """CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED per GPU, as the p2p probe read it (None: not read)."""
    p2p = view.measured("p2p")
    m = p2p.get("dmabuf") if p2p else None
    return dict(m) if isinstance(m, dict) and m else None


CHECKS = [port_down, rate_low, port_errors, device_unreadable, gdr_unavailable]
FLEET_CHECKS = [peer_ports, firmware_outlier]

FINDING_IDS: tuple[str, ...] = (
    rules.nic.PORT_DOWN.id,
    rules.nic.PORT_RATE_LOW.id,
    rules.nic.PORT_ERRORS.id,
    rules.nic.FIRMWARE_OUTLIER.id,
    rules.nic.DEVICE_UNREADABLE.id,
    rules.gpu.GDR_UNAVAILABLE.id,
)


