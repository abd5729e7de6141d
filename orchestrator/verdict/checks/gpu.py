"""GPU, NVLink and GPU-sensor checks over facts gpus / nvlink / pcie.  Pure: HostView in, findings out.

Kinds: a hardware or driver problem is a fault; what MIG, vGPU or a VM take away by design
(NVLink, P2P) is a platform limitation, never a fault.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from orchestrator.facts import gpu_models
from orchestrator.facts.model import GpuRecord, NvlinkGpu
from orchestrator.facts.shown import shown
from orchestrator.facts.textsafe import is_digits
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import (
    FleetCheck,
    FleetReads,
    HostCheck,
    HostView,
    gpus_ran,
    nvlink_ran,
    pcie_ran,
)
from orchestrator.verdict.findings import (
    Device,
    DeviceKind,
    Finding,
    Located,
    Severity,
    fault,
    gpu_device,
    gpu_pair,
    joined,
    limitation,
    located,
    pci_device,
    unknown,
)

_NAMED = 5  # places elsewhere named in one duplicate-identity message; the rest are counted
HOT_C = 50  # a fan at 0 % above this temperature is not "idle and cool"


def _subject(g: GpuRecord | NvlinkGpu) -> Located:
    """The GPU as a finding's subject: the text a person reads and the device it is."""
    return Located(f"GPU{shown(g.get('index'))} ({g.get('bus_id') or 'bus id unknown'})", (gpu_device(g),))


def _gpus(view: HostView) -> list[GpuRecord]:
    facts = gpus_ran(view)
    return list(facts.get("list") or []) if facts else []


def _key(g: GpuRecord | NvlinkGpu) -> str:
    """What identifies one GPU on a host: its bus id, else its NVML index (text imports without
    `nvidia-smi -q` have no bus ids; keying those by None would fold every GPU into one)."""
    bus = g.get("bus_id")
    return bus if isinstance(bus, str) and bus else f"#{g.get('index')}"


def _bus_label(key: str) -> str:
    return "bus id unknown" if key.startswith("#") else key


def _mig_on(g: GpuRecord | None) -> bool:
    mig = g.get("mig") if g else None
    return bool(mig.get("current") if mig else None)


def _vgpu(g: GpuRecord | None) -> bool:
    return (g.get("virtualization_mode") if g else None) in ("vgpu", "host_vgpu")


def check_lost(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        if g.get("lost"):
            # NVML's own word only where NVML said it (a text import's lost GPU is nvidia-smi's handle error)
            nvml = "GPU_IS_LOST" in (g.get("unknown") or {}).values()
            yield fault(rules.gpu.LOST.id, view.name, _subject(g),
                        "NVML reports the GPU as lost (GPU_IS_LOST)" if nvml else
                        "the GPU is listed but its driver cannot reach it (lost)",
                        expected="GPU answering", actual="GPU_IS_LOST" if nvml else "lost",
                        evidence=[f"nvml.gpus[{g.get('index')}].unknown"],
                        hint="check `dmesg` for Xid 79 (fallen off the bus); a reset or reboot is needed, "
                             "reseat or RMA if it recurs")


def check_count(view: HostView) -> Iterator[Finding]:
    gfacts = gpus_ran(view)
    pcie = pcie_ran(view)
    nvml_bus = [b for b in (gfacts.get("order") if gfacts else None) or [] if b]
    nvml_count = gfacts.get("count") if gfacts else None
    if view.expect.gpu_count is not None:
        # An lspci-only text import has pcie.gpus = null (unknown), which is not "0 GPUs".
        bus_gpus = pcie.get("gpus") if pcie else None
        found = nvml_count if gfacts is not None else (len(bus_gpus) if isinstance(bus_gpus, list) else None)
        if found is not None and found != view.expect.gpu_count:
            yield fault(rules.gpu.COUNT_MISMATCH.id, view.name, "GPUs",
                        f"{found} GPUs found, {view.expect.gpu_count} expected",
                        expected=view.expect.gpu_count, actual=found,
                        evidence=["nvml.count" if gfacts is not None else "pcie.gpus"],
                        hint="compare with the order or contract; see gpu.count.pci_vs_nvml for which bus id")
    if gfacts is None or pcie is None or not isinstance(pcie.get("gpus"), list):
        return
    counts = pcie.get("gpu_counts") or {}
    passthrough = set(counts.get("passthrough") or [])
    on_bus = [b for b in pcie.get("gpus") or [] if b not in passthrough]
    missing = sorted(set(on_bus) - set(nvml_bus))
    extra = sorted(set(nvml_bus) - set(pcie.get("gpus") or []))
    if not missing and not extra:
        return
    parts = []
    if missing:
        parts.append(f"on the PCI bus but not in NVML: {', '.join(missing)}")
    if extra:
        parts.append(f"in NVML but not on the PCI bus: {', '.join(extra)}")
    for key, label in (("missing_from_proc", "/proc/driver/nvidia"), ("missing_from_dev", "/dev/nvidia*")):
        gone = counts.get(key) or []
        if gone:
            parts.append(f"missing from {label}: {', '.join(gone)}")
    yield fault(rules.gpu.COUNT_PCI_VS_NVML.id, view.name,
                located(", ".join(missing + extra), (pci_device(DeviceKind.GPU, b) for b in missing + extra)),
                f"PCI bus shows {len(on_bus)} GPUs, NVML {len(nvml_bus)}; " + "; ".join(parts),
                expected={"pci": len(on_bus)},
                actual={"nvml": len(nvml_bus), "proc": counts.get("proc"), "dev": counts.get("dev")},
                evidence=["pcie.gpus", "nvml.order", "pcie.gpu_counts"],
                hint="the driver did not attach the GPU: check `dmesg | grep -i nvrm` (Xid, RmInitAdapter "
                     "failed), the excluded-GPU list, power and seating")


def check_model(view: HostView) -> Iterator[Finding]:
    want = view.expect.gpu_model
    if not want:
        return
    for g in _gpus(view):
        name = g.get("name")
        if name and want.lower() not in name.lower():
            yield fault(rules.gpu.MODEL_MISMATCH.id, view.name, _subject(g), f"GPU is {name!r}, {want!r} expected",
                        expected=want, actual=name, evidence=[f"nvml.gpus[{g.get('index')}].name"],
                        hint="the machine is not the model that was ordered")


def check_nvlink_links(view: HostView) -> Iterator[Finding]:
    nvl = nvlink_ran(view)
    if nvl is None:
        return
    by_key = {_key(g): g for g in _gpus(view)}
    all_up = view.expect.nvlink_all_up is True
    for lg in nvl.get("gpus") or []:
        if lg.get("lost") or lg.get("links_total") is None:
            continue  # unreadable, not down: gpu.lost / the probe outcome already says so
        g = by_key.get(_key(lg))
        model = gpu_models.lookup(lg.get("name") or (g.get("name") if g else None))
        total, up = lg.get("links_total") or 0, lg.get("links_up") or 0
        inactive = list(lg.get("inactive") or [])
        want = view.expect.nvlink_links_per_gpu
        bridge_optional = bool(model and model.nvlink_bridge)
        if want is None and model and model.nvlink_links and not bridge_optional:
            want = model.nvlink_links
        if all_up:
            # "every link the GPU has": the links it reports, or the model's count if it reports fewer.
            has = max(total, model.nvlink_links if model and not bridge_optional else 0)
            want = max(want or 0, has) or None
        if bridge_optional and up == 0 and view.expect.nvlink_links_per_gpu is None and not all_up:
            continue  # PCIe card without a bridge: no NVLink by design (unless all links were required)
        if not inactive and (want is None or up >= want):
            continue
        missing = max(0, (want or 0) - total)
        desc = []
        if inactive:
            desc.append(f"link(s) {', '.join(map(shown, inactive))} inactive")
        if missing:
            desc.append(f"{missing} link(s) absent")
        msg = f"{up} of {want if want is not None else total} NVLinks active" + (f": {'; '.join(desc)}" if desc else "")
        kw: dict[str, Any] = {"expected": want if want is not None else total, "actual": up,
                              "evidence": [f"nvlink.gpus[{lg.get('index')}].links"]}
        if _mig_on(g) or _vgpu(g):
            yield limitation(rules.nvlink.LINK_DOWN.id, view.name, _subject(lg), msg + " (MIG/vGPU: expected)", **kw,
                             hint="MIG instances and vGPU guests do not use NVLink; not a hardware fault")
        elif total == 0 and g and g.get("virtualization_mode") == "passthrough":
            yield limitation(rules.nvlink.LINK_DOWN.id, view.name, _subject(lg),
                             msg + " (pass-through VM does not expose NVLink)", **kw,
                             hint="ask the provider for NVLink/NVSwitch pass-through if you need it")
        else:
            yield fault(rules.nvlink.LINK_DOWN.id, view.name, _subject(lg), msg, **kw,
                        hint="`nvidia-smi nvlink -s -i N`; check fabric manager, reseat/RMA the baseboard if "
                             "links stay down after a reset")


def check_p2p_vs_nvlink(view: HostView) -> Iterator[Finding]:
    nvl, gfacts = nvlink_ran(view), gpus_ran(view)
    if nvl is None or gfacts is None:
        return
    order, nv = nvl.get("order") or [], nvl.get("nv") or []
    g_order = gfacts.get("order") or []
    status = (gfacts.get("p2p") or {}).get("nvlink") or []
    # GPUs by bus id, or by NVML index where a text import has no bus ids (never by None).
    glist = [g for g in gfacts.get("list") or [] if isinstance(g, dict)]
    g_order = [_key(g) for g in glist] if len(glist) == len(g_order) else [b or None for b in g_order]
    by_bus = {_key(g): g for g in glist}
    nl = [g for g in nvl.get("gpus") or [] if isinstance(g, dict)]
    order = [_key(g) for g in nl] if len(nl) == len(order) else [b or None for b in order]
    for i, a in enumerate(order):
        for j, b in enumerate(order):
            if j <= i or a is None or b is None or a not in g_order or b not in g_order:
                continue
            links = nv[i][j] if i < len(nv) and j < len(nv[i]) else None
            if not links:
                continue
            gi, gj = g_order.index(a), g_order.index(b)
            vals = {status[x][y] for x, y in ((gi, gj), (gj, gi))
                    if x < len(status) and y < len(status[x])} - {None}
            bad = sorted(v for v in vals if v != "OK")
            if not bad:
                continue
            pair = gpu_pair({**by_bus.get(a, {}), "index": gi}, {**by_bus.get(b, {}), "index": gj})
            subj = Located(f"GPU{gi}<->GPU{gj} ({_bus_label(a)} / {_bus_label(b)})", (pair,))
            msg = f"NV{links} links up but NVML P2P status over NVLink is {'/'.join(bad)}"
            kw: dict[str, Any] = {"expected": "OK", "actual": bad, "evidence": ["nvlink.nv", "nvml.p2p.nvlink"]}
            if any(_mig_on(by_bus.get(x)) or _vgpu(by_bus.get(x)) for x in (a, b)):
                yield limitation(rules.nvlink.P2P_STATUS_MISMATCH.id, view.name, subj, msg + " (MIG/vGPU)", **kw,
                                 hint="P2P is unavailable between MIG instances / most vGPU setups")
            else:
                yield fault(rules.nvlink.P2P_STATUS_MISMATCH.id, view.name, subj, msg, **kw,
                            hint="`nvidia-smi topo -p2p n`; check the driver's P2P registry keys, fabric "
                                 "manager state and IOMMU/ACS settings")


def check_mig(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        mig = g.get("mig")
        if not mig or (not mig.get("current") and not mig.get("pending")):
            continue
        n = len(mig.get("instances") or [])
        sev = Severity.WARN if view.expect.mig is False else Severity.INFO
        yield limitation(rules.gpu.MIG_ENABLED.id, view.name, _subject(g),
                         f"MIG mode {'on' if mig.get('current') else 'off'}"
                         f"{' (pending on after reset)' if mig.get('pending') and not mig.get('current') else ''}"
                         f", {n} instance(s): no NVLink or P2P between instances", severity=sev,
                         expected="MIG off" if view.expect.mig is False else None,
                         actual={"current": mig.get("current"), "pending": mig.get("pending"), "instances": n},
                         evidence=[f"nvml.gpus[{g.get('index')}].mig"],
                         hint="NVLink/P2P absence on this GPU is a consequence of MIG, not a fault; "
                              "`nvidia-smi -i N -mig 0` (with a reset) if whole GPUs are needed")


def check_virtualization(view: HostView) -> Iterator[Finding]:
    modes: dict[str, list[Located]] = defaultdict(list)
    for g in _gpus(view):
        m = g.get("virtualization_mode")
        if m and m != "none":
            modes[m].append(_subject(g))
    for mode, subjects in sorted(modes.items()):
        sev = Severity.WARN if view.expect.virtualization == "none" else Severity.INFO
        yield limitation(rules.gpu.VIRTUALIZATION.id, view.name, joined(subjects),
                         f"GPU virtualization mode {mode} on {len(subjects)} GPU(s): PCIe topology, NVLink and "
                         "P2P are what the hypervisor exposes", severity=sev,
                         expected=view.expect.virtualization, actual=mode, evidence=["nvml.gpus[].virtualization_mode"],
                         hint="pass-through shows a flattened PCIe tree; vGPU shares the GPU with other tenants")


def check_fans(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        if g.get("lost"):
            continue
        fans, temp = g.get("fans"), g.get("temperature_c")
        model = gpu_models.lookup(g.get("name"))
        if fans:
            speeds = [f.get("speed_pct") for f in fans if isinstance(f, dict)]
            if speeds and all(s == 0 for s in speeds) and isinstance(temp, (int, float)) and temp >= HOT_C:
                yield fault(rules.sensor.FAN_ZERO_WHILE_HOT.id, view.name, _subject(g),
                            f"all {len(speeds)} fan(s) at 0 % while the GPU is at {temp} °C",
                            severity=Severity.WARN, expected=f"fan > 0 % above {HOT_C} °C",
                            actual={"fans_pct": speeds, "temperature_c": temp},
                            evidence=[f"nvml.gpus[{g.get('index')}].fans", f"nvml.gpus[{g.get('index')}].temperature_c"],
                            hint="fan failed or its sensor lies: check physically before the GPU throttles")
            elif any(s is None for s in speeds):
                yield fault(rules.sensor.FAN_NOT_REPORTING.id, view.name, _subject(g),
                            "some fans do not report a speed", severity=Severity.WARN,
                            actual=fans, evidence=[f"nvml.gpus[{g.get('index')}].fans"],
                            hint="a fan tachometer or controller is not answering")
            continue
        if fans == [] and model and model.has_fans:
            yield fault(rules.sensor.FAN_NOT_REPORTING.id, view.name, _subject(g),
                        "NVML reports zero fans on an actively cooled board", severity=Severity.WARN,
                        expected="fan speeds", actual=[], evidence=[f"nvml.gpus[{g.get('index')}].fans"],
                        hint="the fan controller is not seen by the driver; check the card physically")
            continue
        if fans == []:
            continue  # passively cooled: newer drivers answer "0 fans" instead of NOT_SUPPORTED
        reason = g.get("fans_unknown")
        if reason == "NOT_SUPPORTED" and not (model and model.has_fans):
            continue  # passively cooled (SXM, most data-center boards): no fan to report
        if reason in (None, "FUNCTION_NOT_FOUND"):
            continue
        yield fault(rules.sensor.FAN_NOT_REPORTING.id, view.name, _subject(g),
                    f"fan speed not readable ({reason}) on an actively cooled board", severity=Severity.WARN,
                    expected="fan speeds", actual=reason, evidence=[f"nvml.gpus[{g.get('index')}].fans"],
                    hint="N/A is not 0: the fan controller does not answer; check the card physically")


def check_row_remap(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        rr = g.get("remapped_rows")
        if not rr:
            continue
        ev = [f"nvml.gpus[{g.get('index')}].remapped_rows"]
        if rr.get("failure"):
            yield fault(rules.gpu.ROW_REMAP_FAILURE.id, view.name, _subject(g),
                        "a row remapping failed: uncorrectable memory error could not be repaired",
                        expected=False, actual=rr, evidence=ev,
                        hint="the GPU needs RMA (NVIDIA memory error management guide)")
        if rr.get("pending"):
            yield fault(rules.gpu.ROW_REMAP_PENDING.id, view.name, _subject(g),
                        f"row remapping pending ({shown(rr.get('uncorrectable'))} uncorrectable, "
                        f"{shown(rr.get('correctable'))} correctable rows): a GPU reset is required",
                        severity=Severity.WARN, expected=False, actual=rr, evidence=ev,
                        hint="drain the GPU and reset it (`nvidia-smi -r -i N`) or reboot")


def check_fabric(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        fab = g.get("fabric")
        if not fab or fab.get("state") in (None, "not_supported"):
            continue
        ok = fab.get("state") == "completed" and fab.get("status") in (None, "SUCCESS")
        if fab.get("health_summary") in ("unhealthy", "limited_capacity"):
            ok = False
        if ok:
            continue
        yield fault(rules.nvlink.FABRIC_INCOMPLETE.id, view.name, _subject(g),
                    f"NVLink fabric registration {shown(fab.get('state'))} (status {shown(fab.get('status'))}, "
                    f"health {shown(fab.get('health_summary'), 'not reported')})",
                    expected="completed/SUCCESS", actual=fab, evidence=[f"nvml.gpus[{g.get('index')}].fabric"],
                    hint="check `systemctl status nvidia-fabricmanager` and its log; CUDA cannot use "
                         "NVLink until registration completes")


def _shown(by_host: dict[str, list[str]]) -> list[str]:
    """The hosts a duplicate identity is shown to be wrong on: their own list holds it more than
    once (a physical GPU has one identity, so that list is forged or virtualised whatever the
    others say).  Nothing in one run tells which of two hosts holding it once each is the real one."""
    return sorted(h for h, places in by_host.items() if len(places) > 1)


def _identity(g: GpuRecord, field: str) -> str | None:
    """A GPU's identity `field` where it names one GPU (not a placeholder)."""
    value = g.get(field)
    if isinstance(value, str) and value.strip() and not value.upper().startswith(("N/A", "0000000")):
        return value
    return None


def _identity_duplicates(views: list[HostView], field: str, fid: str, label: str) -> Iterator[Finding]:
    # Two passes: the places (a subject each) are made only for values held more than once; made
    # for every GPU they were most of a 100,000-host merge's peak (identities never repeat there).
    # The first pass keeps hashes, not the values, which a merge holds packed (verdict/held.py).
    once: set[int] = set()
    again: set[int] = set()
    for v in views:
        for g in _gpus(v):
            value = _identity(g, field)
            if value is not None:
                key = hash(value)
                (again if key in once else once).add(key)
    del once
    seen: dict[str, list[tuple[str, Located]]] = defaultdict(list)
    for v in views if again else ():
        for g in _gpus(v):
            value = _identity(g, field)
            if value is not None and hash(value) in again:
                seen[value].append((v.name, _subject(g)))
    for value, where in sorted(seen.items()):
        if len(where) < 2:
            continue
        # Each message names this host's places and at most _NAMED elsewhere, and counts the rest:
        # listing every place in every message is quadratic (497 MB of text at 3,000 hosts, one UUID).
        by_host: dict[str, list[str]] = defaultdict(list)
        own_gpus: dict[str, list[Device]] = defaultdict(list)
        for h, s in where:
            by_host[h].append(f"{h}:{s.text}")
            own_gpus[h].extend(s.devices)
        hosts = list(by_host)  # first-seen order
        shown_wrong = _shown(by_host)
        for host in sorted(hosts):
            own = by_host[host][:_NAMED]
            # Places on the first other hosts: at most _NAMED + 1 hosts are looked at, whatever the fleet size.
            others = [pl for h in islice((h for h in hosts if h != host), _NAMED) for pl in by_host[h]][:_NAMED]
            named = own + others
            more = len(where) - len(named)
            text = ", ".join(named) + (f" and {more} more" if more else "")
            peers = [Device(DeviceKind.PEER_HOST, host=h) for h in islice((h for h in hosts if h != host), _NAMED)]
            yield _duplicate_finding(fid, host, located(value, [*own_gpus[host], *peers]),
                                     f"GPU {label} {value} appears {len(where)} times in the fleet: " + text,
                                     {h: len(by_host[h]) for h in shown_wrong}, {"count": len(where), "named": named},
                                     [f"nvml.gpus[].{field}", f"{len(hosts)} hosts report it"])


def _duplicate_finding(fid: str, host: str, where: Located, message: str, shown_wrong: dict[str, int],
                       actual: dict[str, Any], evidence: list[str]) -> Finding:
    """A host whose own list repeats the identity is shown wrong: a fault it is acted on for.  One
    that holds it once cannot be told from the others that do: which of them lied is unknown, and
    the finding asks for an investigation, never a drain (its rule's action: verdict/rules/identity.py)."""
    if host in shown_wrong:
        return fault(fid, host, where, f"{message}; this host's own list holds it {shown_wrong[host]} times: "
                     "its list is forged or virtualised", expected="unique", actual=actual, evidence=evidence,
                     hint="a device list that repeats identities is forged or virtualised; "
                          "ask the provider which physical GPU you got")
    why = (f"{', '.join(sorted(shown_wrong)[:_NAMED])} repeat(s) it in its own list and is shown wrong, not this host"
           if shown_wrong else "nothing in this run tells which host's identity is its own")
    return unknown(fid, host, where, f"Not shown to be this host's ({why}). {message}", severity=Severity.WARN, expected="unique", actual=actual,
                   evidence=[*evidence, why],
                   hint="investigate before acting on any of these hosts: read the identity on each machine "
                        "(`nvidia-smi -q`, the board label), and ask the provider which physical GPU you got")


def check_uuid_duplicates(views: list[HostView]) -> Iterable[Finding]:
    return _identity_duplicates(views, "uuid", rules.identity.UUID_DUPLICATE.id, "UUID")


def check_serial_duplicates(views: list[HostView]) -> Iterable[Finding]:
    return _identity_duplicates(views, "serial", rules.identity.GPU_SERIAL_DUPLICATE.id, "serial")


# All-to-all NV<n> over a switch fabric (or a full bridge) comes in these GPU counts per host; a
# different count on such a fabric means GPUs are missing or withheld (HGX/DGX boards carry 8,
# Grace trays 4, HGX H100 4-GPU boards are NV6 all-to-all, DGX-2 16 x NV6, bridged pairs 2).
FABRIC_COUNTS: dict[int, tuple[int, ...]] = {6: (4, 16), 12: (2, 8), 18: (2, 4, 8)}


def check_fabric_count(view: HostView) -> Iterator[Finding]:
    """A count question without a written count: every GPU pair at the same NV# of a switch
    fabric, but fewer (or more) GPUs than any board of that fabric carries."""
    if view.expect.gpu_count is not None:
        return  # gpu.count.mismatch judges against the written count
    topo = view.facts.get("topology")
    if not isinstance(topo, dict):
        return
    devices = topo.get("devices") or []
    matrix = topo.get("matrix") or []
    idx = [i for i, d in enumerate(devices) if isinstance(d, dict) and d.get("kind") == "gpu"]
    if len(idx) < 3:
        return
    try:
        cells = {matrix[a][b] for a in idx for b in idx if a != b}
    except (IndexError, TypeError):
        return
    if len(cells) != 1:
        return
    cell = next(iter(cells))
    if not (isinstance(cell, str) and cell.startswith("NV") and is_digits(cell[2:])):
        return
    boards = FABRIC_COUNTS.get(int(cell[2:]))
    if boards is None or len(idx) in boards:
        return
    yield unknown(rules.gpu.COUNT_PARTIAL_FABRIC.id, view.name, "GPUs",
                  f"{len(idx)} GPUs, every pair {cell}: a fabric of that kind carries "
                  f"{' or '.join(map(str, boards))} GPUs per host, so GPUs may be missing or withheld",
                  severity=Severity.WARN, expected=list(boards), actual=len(idx),
                  evidence=["topology.matrix"],
                  hint="compare with the order (`probe_expect: {gpu_count: 8}` makes it a pass/fail check); "
                       "on a VM the provider may hand out part of a board; on bare metal check "
                       "`lspci | grep -i nvidia` and `dmesg | grep -i nvrm` for the missing GPUs")


CHECKS: list[HostCheck] = [
    check_lost, check_count, check_model, check_nvlink_links, check_p2p_vs_nvlink, check_mig,
    check_virtualization, check_fans, check_row_remap, check_fabric, check_fabric_count,
]
FLEET_CHECKS: list[FleetCheck] = [check_uuid_duplicates, check_serial_duplicates]

# What of each GPU the fleet checks above read (_identity_duplicates, _subject).  A fleet judged in
# worker processes hands the parent only this of the gpus section (checks.fleet_facts): the whole
# section is ~30 KB of objects per 8-GPU host, most of a 10,000-host fleet's controller memory.
# What this area's fleet checks read (checks/__init__.fleet_facts hands on only what areas name).
FLEET_READS: FleetReads = {"gpus": {"list": {"uuid": None, "serial": None, "index": None, "bus_id": None}}}

# The rules this module's checks raise, each declared in verdict/rules/<prefix>.py (JUnit lists them as cases).
FINDING_IDS: tuple[str, ...] = (
    rules.gpu.LOST.id,
    rules.gpu.COUNT_MISMATCH.id,
    rules.gpu.COUNT_PCI_VS_NVML.id,
    rules.gpu.MODEL_MISMATCH.id,
    rules.nvlink.LINK_DOWN.id,
    rules.nvlink.P2P_STATUS_MISMATCH.id,
    rules.gpu.MIG_ENABLED.id,
    rules.gpu.VIRTUALIZATION.id,
    rules.sensor.FAN_ZERO_WHILE_HOT.id,
    rules.sensor.FAN_NOT_REPORTING.id,
    rules.gpu.ROW_REMAP_PENDING.id,
    rules.gpu.ROW_REMAP_FAILURE.id,
    rules.nvlink.FABRIC_INCOMPLETE.id,
    rules.identity.UUID_DUPLICATE.id,
    rules.identity.GPU_SERIAL_DUPLICATE.id,
    rules.gpu.COUNT_PARTIAL_FABRIC.id,
)
