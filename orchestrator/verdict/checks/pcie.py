"""Checks on `facts["pcie"]` (docs/facts-pcie.md): downgraded links, NICs sharing GPU uplinks,
ACS redirect on GPU paths, GPUs on the bus but not in the driver, GPU<->NIC affinity, and what
could not be judged without root.  Pure: HostView in, findings out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from typing import Any

from orchestrator.facts import gpu_models
from orchestrator.facts.model import Facts, GpuRecord, PcieDevice, PcieFacts
from orchestrator.facts.shown import shown
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import HostCheck, HostView, c2c_host, gpus_ran, pcie_ran
from orchestrator.verdict.findings import (
    DeviceKind,
    Finding,
    Located,
    Severity,
    fault,
    gpu_device,
    limitation,
    located,
    pci_device,
    unknown,
)
from orchestrator.verdict.rule import Unjudged

LEVEL_RANK = {"X": 0, "NV": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def _facts(view: HostView) -> PcieFacts | None:
    # None: the probe outcome already says why (and facts without outcomes are not a pcie run)
    return pcie_ran(view) if view.outcomes else None


def _virtualized(view: HostView, pcie: PcieFacts) -> bool:
    host = view.facts.get("host")
    virt = host.get("virtualization") if isinstance(host, dict) else None
    return bool(virt and virt.get("virtualized")) or bool((pcie.get("virtual_platform") or {}).get("detected"))


def _in_container(view: HostView) -> bool:
    host = view.facts.get("host")
    virt = host.get("virtualization") if isinstance(host, dict) else None
    return bool(virt and virt.get("container"))


def _nvml_gpus(view: HostView) -> list[GpuRecord]:
    """NVML's GPU list when the nvml probe ran (or facts came without outcomes, as from an import)."""
    gpus = gpus_ran(view)
    lst = gpus.get("list") if gpus else None
    return [g for g in lst if isinstance(g, dict)] if isinstance(lst, list) else []


def _nvml_index(view: HostView) -> dict[str, int] | None:
    """bus id -> NVML index, or None when NVML cannot say for every GPU it lists (no NVML, or a text
    import without bus ids): then GPUs are numbered by bus order, which is NVML's order on a
    complete box."""
    out: dict[str, int] = {}
    for g in _nvml_gpus(view):
        bus, idx = g.get("bus_id"), g.get("index")
        if not isinstance(bus, str) or not bus or not isinstance(idx, int):
            return None
        out[bus.lower()] = idx
    return out or None


def _at(pcie: PcieFacts, bdf: str, text: str) -> Located:
    """A PCI function as a finding's subject: `text` and the device, a GPU or NIC where the tree
    lists it as one."""
    kind = (DeviceKind.GPU if bdf in (pcie.get("gpus") or []) else
            DeviceKind.NIC if bdf in (pcie.get("nics") or []) else DeviceKind.PCIE)
    return Located(text, (pci_device(kind, bdf),))


def _names(pcie: PcieFacts, view: HostView | None = None) -> dict[str, str]:
    """bdf -> "GPU3 (0000:5d:00.0)" / "NIC mlx5_0 (0000:19:00.0)" for subjects and messages.

    GPU numbers are NVML's (what nvidia-smi shows) when NVML ran: a GPU missing from NVML shifts
    the bus order of every later GPU, so counting on the bus would name the wrong GPU.  A GPU on
    the bus that NVML does not list has no number: "GPU? (bdf)"."""
    out: dict[str, str] = {}
    nvml = _nvml_index(view) if view is not None else None
    for i, b in enumerate(pcie.get("gpus") or []):
        if nvml is None:
            out[b] = f"GPU{i} ({b})"
        else:
            out[b] = f"GPU{nvml[b]} ({b})" if b in nvml else f"GPU? ({b})"
    nics = pcie.get("nics") or []
    if nics:
        wanted = set(nics)  # only NICs are named by label: skip the other devices' labels
        labels: dict[str, Any] = {}
        for d in pcie.get("devices") or []:
            if isinstance(d, dict) and d["bdf"] in wanted:
                labels[d["bdf"]] = d.get("label")
        for b in nics:
            out[b] = f"NIC {labels.get(b)} ({b})" if labels.get(b) else f"NIC {b}"
    return out


class _Names:
    """`_names(pcie, view)`, built the first time a finding needs a name: on a healthy host most
    checks name nothing, and building it walks every GPU and device."""

    def __init__(self, pcie: PcieFacts, view: HostView) -> None:
        self._pcie, self._view = pcie, view
        self._names: dict[str, str] | None = None

    def get(self, bdf: str, default: str) -> str:
        if self._names is None:
            self._names = _names(self._pcie, self._view)
        return self._names.get(bdf, default)


def _gw(gen: Any, width: Any) -> str:
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


# How a link below its maximum is judged (one answer for the check and for the report's picture):
# "fail" below the expectation, "warn" short of its width (or not a GPU), "idle" a GPU whose
# speed alone is low (GPUs slow the link at rest: only the width is conclusive then).
LINK_FAIL, LINK_WARN, LINK_IDLE = "fail", "warn", "idle"
# A link resting at a lower speed is judged by its width and what both ends support, never by its
# speed at rest, with or without probe_expect.pcie_gen (gpu_models.link_resting).
_RESTING_HINT = ("re-check while the GPU is busy (the p2p probe measures the link under load); at rest only the "
                 "width and what both ends support are judged, against probe_expect.pcie_gen too")


def link_verdict(e: Mapping[str, Any], exp_gen: int | None, exp_width: int | None) -> str:
    gpu = e.get("kind") == "gpu"
    if gpu and _short_of_expectation(e, exp_gen, exp_width):
        return LINK_FAIL
    if (e.get("width_current") or 0) < (e.get("width_max") or 0) or not gpu:
        return LINK_WARN
    return LINK_IDLE


def _short_of_expectation(link: Mapping[str, Any], exp_gen: int | None, exp_width: int | None) -> bool:
    slow = bool(exp_gen and (link.get("gen_current") or 0) < exp_gen and not gpu_models.link_resting(link, exp_gen))
    return slow or bool(exp_width and (link.get("width_current") or 0) < exp_width)


def link_verdicts(facts: Facts, exp_gen: int | None, exp_width: int | None) -> dict[str, str]:
    """bus id -> how check_link_downgraded judges that device's link (LINK_*), for the links it
    reports: those below their maximum, and GPUs below the expectation in a link at its best."""
    pcie = facts.get("pcie")
    if not isinstance(pcie, dict):
        return {}
    out = {str(e["bdf"]): link_verdict(e, exp_gen, exp_width) for e in pcie.get("downgraded") or []
           if isinstance(e, dict) and e.get("bdf")}
    if exp_gen or exp_width:
        devs = _by_bdf(pcie)
        for d in pcie.get("devices") or []:
            link = d.get("link") if isinstance(d, dict) else None
            if d.get("kind") == "gpu" and d.get("bdf") not in out and link and \
                    _short_of_expectation(_with_slot(link, d, devs), exp_gen, exp_width):
                out[str(d["bdf"])] = LINK_FAIL
    return out


def check_link_downgraded(view: HostView) -> Iterator[Finding]:
    pcie = _facts(view)
    if pcie is None:
        return
    names = _Names(pcie, view)
    exp_gen, exp_width = view.expect.pcie_gen, view.expect.pcie_width
    reported = set()
    for e in pcie.get("downgraded") or []:
        b = e["bdf"]
        reported.add(b)
        actual = f"{_gw(e['gen_current'], e['width_current'])} ({shown(e.get('speed_current'))})"
        expected = f"{_gw(exp_gen or e['gen_max'], exp_width or e['width_max'])}"
        subject = _at(pcie, b, names.get(b, f"{e.get('kind') or 'PCI device'} {b}"))
        # a text import may know only the device's own LnkCap, not its port's: claim only that
        ends = "the device supports" if e.get("max_of") == "device" else "both ends support"
        evidence = [e["evidence"]] if e.get("evidence") else [
            f"sysfs {b}: current_link_speed/width vs max_link_speed/width of the device and its port"]
        verdict = link_verdict(e, exp_gen, exp_width)
        if verdict == LINK_FAIL:
            yield fault(rules.pcie.LINK_DOWNGRADED.id, view.name, subject,
                        f"{subject} link trained at {actual}, expected at least {expected}",
                        expected=expected, actual=actual, evidence=evidence,
                        hint="reseat the card or riser, check the slot's bifurcation/link settings in the BIOS, "
                             "compare with `lspci -vvv` LnkSta")
        elif verdict == LINK_WARN:
            yield fault(rules.pcie.LINK_DOWNGRADED.id, view.name, subject,
                        f"{subject} link trained at {actual}, {ends} {_gw(e['gen_max'], e['width_max'])}",
                        severity=Severity.WARN, expected=expected, actual=actual, evidence=evidence,
                        hint="a link below its width is a seating, riser or lane fault; reseat and re-check")
        else:
            # GPUs lower the link speed when idle to save power; only the width is conclusive at rest.
            yield unknown(rules.pcie.LINK_DOWNGRADED.id, view.name, subject,
                          f"{subject} link at {actual} below its {_gw(e['gen_max'], e['width_max'])}; "
                          "GPUs slow the link when idle",
                          expected=expected, actual=actual, evidence=evidence,
                          hint=_RESTING_HINT)
    if not exp_gen:
        yield from _below_model_generation(view, pcie, names, reported)
    if not (exp_gen or exp_width):
        return
    # Expectations also catch a GPU that trained at its best but in a slot below the requirement.
    devs = _by_bdf(pcie)
    for d in pcie.get("devices") or []:
        link = d.get("link")
        if d.get("kind") != "gpu" or d["bdf"] in reported or not link:
            continue
        if _short_of_expectation(_with_slot(link, d, devs), exp_gen, exp_width):
            subject = _at(pcie, d["bdf"], names.get(d["bdf"], d["bdf"]))
            actual = f"{_gw(link['gen_current'], link['width_current'])} ({shown(link.get('speed_current'))})"
            expected = _gw(exp_gen or link["gen_max"], exp_width or link["width_max"])
            yield fault(rules.pcie.LINK_DOWNGRADED.id, view.name, subject,
                        f"{subject} link at {actual}, expected at least {expected}",
                        expected=expected, actual=actual,
                        evidence=[f"sysfs {d['bdf']}: current_link_speed/width"],
                        hint="the GPU or its slot cannot reach the expected generation/width; check the slot and riser")


def _by_bdf(pcie: PcieFacts) -> dict[str, PcieDevice]:
    return {d["bdf"]: d for d in pcie.get("devices") or [] if isinstance(d, dict) and d.get("bdf")}


def _with_slot(link: Mapping[str, Any], d: PcieDevice, devs: dict[str, PcieDevice]) -> Mapping[str, Any]:
    """The device's link with the generation both ends support: a GPU's own maximum says nothing
    of a slot that tops out below it (a link resting there is judged by the slot's)."""
    slot, own = _slot_max_gen(d, devs), link.get("gen_max")
    if isinstance(slot, int) and isinstance(own, int) and slot < own:
        return {**link, "gen_max": slot}
    return link


def _slot_max_gen(d: PcieDevice, devs: dict[str, PcieDevice]) -> int | None:
    """The generation the port above a device supports (its slot), None when unknown."""
    parent = devs.get(d.get("parent") or "")
    role = (parent.get("role") or parent.get("port_type")) if parent else None  # text imports: port_type only
    link = parent.get("link") if parent else None
    if not parent or role not in ("root_port", "downstream_port") or not link:
        return None
    gen = link.get("gen_max")
    return gen if isinstance(gen, int) else None


def _below_model_generation(view: HostView, pcie: PcieFacts, names: _Names,
                            reported: set[str]) -> Iterator[Finding]:
    """Where no pcie_gen is written, the GPU model's own generation (gpu_models) is the derived one.

    Only a link that trained at the best both of its ends advertise can be judged: a GPU whose
    current speed is below its own and its slot's maximum may just be idle (GPUs slow the link at
    rest), and that case is already in `downgraded` (reported above as unknown).  Left: the slot
    cannot do the model's generation (the server limits it: a platform limitation), or the GPU
    itself advertises less than its model does in a slot that can do more (a fault).  Both are
    `pcie.link.downgraded`: info/platform_limitation for the slot, warn/fault for the GPU; a written
    `pcie_gen` replaces the model's generation (and makes either a fail).
    """
    if _virtualized(view, pcie):
        return  # an emulated port's link fields describe the hypervisor's bus, not a slot
    nvml_names = {str(g.get("bus_id")).lower(): g.get("name") for g in _nvml_gpus(view) if g.get("bus_id")}
    devs = _by_bdf(pcie)
    for b, d in devs.items():
        link = d.get("link")
        if d.get("kind") != "gpu" or b in reported or not link:
            continue
        model = gpu_models.lookup(d.get("model") or nvml_names.get(b))
        cur, dev_max = link.get("gen_current"), link.get("gen_max")
        if model is None or model.c2c or not isinstance(cur, int) or cur >= model.pcie_gen:
            continue  # a C2C GPU's data path to its CPU is NVLink-C2C, not this link
        slot = _slot_max_gen(d, devs)
        caps = [g for g in (dev_max, slot) if isinstance(g, int)]
        if not caps or cur < min(caps):
            continue  # both ends unknown, or trained below both ends: idle or already in `downgraded`
        subject = _at(pcie, b, names.get(b, f"gpu {b}"))
        actual = f"{_gw(cur, link.get('width_current'))} ({shown(link.get('speed_current'))})"
        expected = _gw(model.pcie_gen, link.get("width_max"))
        evidence = [f"sysfs {b}: current_link_speed, max_link_speed", f"sysfs {d.get('parent')}: max_link_speed",
                    f"gpu_models {model.key}: PCIe Gen{model.pcie_gen}"]
        if slot is not None and slot < model.pcie_gen:
            # Same id as a downgrade (one place for link findings); the kind says it is the platform.
            yield limitation(rules.pcie.LINK_DOWNGRADED.id, view.name, subject,
                             f"{subject} runs at {actual}: its slot supports Gen{slot} at most, the "
                             f"{model.key} does Gen{model.pcie_gen}", expected=expected, actual=actual,
                             evidence=evidence,
                             hint="the server's slot (or riser/switch) limits host<->GPU bandwidth; a newer "
                                  "platform is needed for the GPU's full link; set probe_expect.pcie_gen to "
                                  "make it a requirement")
        else:
            yield fault(rules.pcie.LINK_DOWNGRADED.id, view.name, subject,
                        f"{subject} link at {actual} and advertises Gen{dev_max} at most, below the "
                        f"{model.key}'s Gen{model.pcie_gen}"
                        + (f", in a slot that supports Gen{slot}" if slot is not None else ""),
                        severity=Severity.WARN, expected=expected, actual=actual, evidence=evidence,
                        hint="the GPU reports a lower link capability than its model has: check the VBIOS/"
                             "firmware PCIe setting, the riser and the BIOS slot speed setting; set "
                             "probe_expect.pcie_gen to make this a hard requirement")


def check_nic_shared_switch(view: HostView) -> Iterator[Finding]:
    """A NIC sharing a GPU uplink by accident rather than by design (definition: docs/facts-pcie.md)."""
    pcie = _facts(view)
    if pcie is None:
        return
    names = _Names(pcie, view)
    groups = [u for u in pcie.get("uplinks") or [] if u.get("gpus")]
    mixed = [u for u in groups if u.get("nics")]
    if not mixed:
        return
    by_design = all(u.get("nics") for u in groups) and len(
        {Fraction(len(u["gpus"]), len(u["nics"])) for u in mixed}) == 1
    declared = view.expect.gpu_nic_level is not None  # the user declared the affinity design
    limit = None
    if view.expect.gpu_count and view.expect.nic_count:
        limit = Fraction(view.expect.gpu_count, view.expect.nic_count)  # GPUs each NIC is meant to serve
    for u in mixed:
        ratio = Fraction(len(u["gpus"]), len(u["nics"]))
        over = limit is not None and ratio > limit
        if not over and (by_design or declared):
            continue
        gpus = ", ".join(names.get(g, g) for g in u["gpus"])
        why = (f"expected one NIC per {limit} GPU(s), found {len(u['gpus'])} GPU(s) and {len(u['nics'])} NIC(s)"
               if over else "other GPUs have no NIC on their uplink, so this placement is not a GPU/NIC pairing design")
        for n in u["nics"]:
            subject = _at(pcie, n, names.get(n, n))
            yield fault(rules.pcie.NIC_SHARED_SWITCH.id, view.name, subject,
                        f"{subject} shares the uplink of {u['type'].replace('_', ' ')} {u['id']} with {gpus}; {why}",
                        severity=Severity.WARN,
                        expected="NICs on their own uplink, or paired evenly with GPUs",
                        actual={"uplink": u["id"], "gpus": u["gpus"], "nics": u["nics"]},
                        evidence=[f"pcie.uplinks[{u['id']}]"],
                        hint="GPU host traffic and network traffic compete for one switch uplink; move the NIC to its "
                             "own slot, or set probe_expect.gpu_nic_level if this pairing is intended")


def check_acs(view: HostView) -> Iterator[Finding]:
    pcie = _facts(view)
    if pcie is None or view.expect.acs_allowed:
        return
    names = _Names(pcie, view)
    virtual = _virtualized(view, pcie)
    for e in pcie.get("acs") or []:
        if e.get("port_role") != "downstream_port" or not e.get("peers"):
            continue  # root ports: P2P across them crosses the root complex anyway
        gpus = ", ".join(names.get(g, g) for g in e["gpus"])
        subject = _at(pcie, e["port"], e["port"])
        msg = (f"ACS {'/'.join(e['enabled'])} enabled on switch port {e['port']} above {gpus}: peer-to-peer "
               "traffic is redirected through the root complex")
        kw: dict[str, Any] = {"expected": "ACS redirect off on switch ports between GPUs/NICs",
                              "actual": e["enabled"], "evidence": [f"config space {e['port']} ACS control"]}
        if virtual:
            yield limitation(rules.pcie.ACS_ENABLED.id, view.name, subject, msg + " (virtualized host: the hypervisor "
                             "needs ACS for isolation)", hint="P2P between passed-through devices is the "
                             "platform's choice; ask the provider for a P2P-capable configuration", **kw)
        else:
            yield fault(rules.pcie.ACS_ENABLED.id, view.name, subject, msg,
                        hint="boot with pci=disable_acs_redir=<ports> or clear ACS control (setpci ECAP_ACS+0x6.w=0) "
                             "on bare metal; see NCCL troubleshooting 'PCI Access Control Services'", **kw)


def check_gpu_count(view: HostView) -> Iterator[Finding]:
    pcie = _facts(view)
    if pcie is None:
        return
    counts = pcie.get("gpu_counts") or {}
    gpus = pcie.get("gpus") or []
    names = _Names(pcie, view)
    passthrough = set(counts.get("passthrough") or [])
    if not gpus or len(passthrough) == len(gpus):
        return
    if counts.get("driver_loaded") is None:
        return  # a text that does not print drivers (plain lspci): unbound or not is unknown, no fault
    if not counts.get("driver_loaded"):
        yield fault(rules.gpu.COUNT_PCI_VS_DRIVER.id, view.name,
                    located("host", (_at(pcie, b, b).devices[0] for b in gpus if b not in passthrough)),
                    f"{len(gpus) - len(passthrough)} NVIDIA GPU(s) on the PCI bus but the NVIDIA driver is not loaded",
                    expected=len(gpus) - len(passthrough), actual=0,
                    evidence=["/proc/driver/nvidia absent"] + [b for b in gpus if b not in passthrough],
                    hint="load the driver (modprobe nvidia) and check dmesg for NVRM errors")
        return
    miss_proc = set(counts.get("missing_from_proc") or [])
    miss_dev = set(counts.get("missing_from_dev") or [])
    container = _in_container(view)
    for b in sorted(miss_proc | miss_dev):
        where = " and ".join(w for w, s in (("/proc/driver/nvidia/gpus", miss_proc), ("/dev/nvidia*", miss_dev)) if b in s)
        subject = _at(pcie, b, names.get(b, b))
        kw: dict[str, Any] = {"expected": f"{b} in /proc/driver/nvidia/gpus and /dev", "actual": f"missing from {where}",
                              "evidence": [f"/sys/bus/pci/devices/{b}", where]}
        if container and b not in miss_proc:
            yield limitation(rules.gpu.COUNT_PCI_VS_DRIVER.id, view.name, subject,
                             f"{subject} is on the PCI bus but not in this container's /dev", **kw)
            continue
        yield fault(rules.gpu.COUNT_PCI_VS_DRIVER.id, view.name, subject,
                    f"{subject} is on the PCI bus but missing from {where} "
                    f"(PCI {shown(counts.get('pci'))}, /proc {shown(counts.get('proc'))}, /dev {shown(counts.get('dev'))})",
                    hint="the driver did not initialise this GPU: check dmesg for NVRM/Xid errors, the GPU's "
                         "power and seating, and nvidia-smi -q for it", **kw)


def check_needs_root(view: HostView) -> Iterator[Finding]:
    pcie = _facts(view)
    if pcie is None or not pcie.get("needs_root"):
        return
    yield unknown(rules.pcie.CONFIG_NEEDS_ROOT.id, view.name, "host",
                  "PCIe config space beyond 64 bytes needs root: port types inferred from the tree, ACS not judged",
                  actual=pcie.get("needs_root"), evidence=["sysfs config files read 64 bytes"],
                  hint="run the pcie probe with become (sudo -n) to judge ACS and confirm switch ports")


# A device's subject, made when a finding names it: on a healthy host none is, and naming a PCIe
# device builds the host's GPU and NIC names (_Names).
_Label = Callable[[], Located]


def _named_at(pcie: PcieFacts, bdf: str, names: _Names) -> Located:
    return _at(pcie, bdf, names.get(bdf, bdf))


def _affinity_matrix(view: HostView) -> tuple[list[tuple[str, _Label]], list[list[Any]], str] | None:
    """(key, label) per device in matrix order, the GPU x NIC level matrix, and where it came from.

    The PCIe probe's `levels` first; without them (a `nvidia-smi topo -m` text import, or a host
    where only NVML ran) the merged `topology` matrix, whose devices say their kind.  Keys are
    "gpu:<bus id or name>" / "nic:<...>" so GPUs without a bus id (text) stay apart."""
    pcie = _facts(view)
    levels = (pcie.get("levels") if pcie else None) or {}
    order = levels.get("order") or []
    if pcie is not None and order and levels.get("matrix"):
        gpus = set(pcie.get("gpus") or [])
        names = _Names(pcie, view)
        keyed: list[tuple[str, _Label]] = [(("gpu:" if b in gpus else "nic:") + b,
                                            functools.partial(_named_at, pcie, b, names)) for b in order]
        return keyed, levels["matrix"], "pcie.levels (GPU x NIC)"
    if view.outcomes and not (view.ran("nvml") or view.ran("pcie")):
        return None
    topo = view.facts.get("topology")
    devices = topo.get("devices") if isinstance(topo, dict) else None
    matrix = topo.get("matrix") if isinstance(topo, dict) else None
    if not isinstance(devices, list) or not isinstance(matrix, list) or not devices:
        return None
    keyed = []
    for i, d in enumerate(devices):
        d = d if isinstance(d, dict) else {}
        kind = "gpu" if d.get("kind") == "gpu" else "nic" if d.get("kind") == "nic" else "other"
        bus, name = d.get("bus_id"), d.get("name") or f"#{i}"
        label = f"{name} ({bus or 'bus id unknown'})" if kind == "gpu" else str(name)
        if kind == "nic" and d.get("label"):
            label = f"NIC {d['label']}" + (f" ({bus})" if bus else "")
        dev = pci_device({"gpu": DeviceKind.GPU, "nic": DeviceKind.NIC}.get(kind, DeviceKind.PCIE), bus)
        keyed.append((f"{kind}:{bus or name}#{i}", functools.partial(Located, label, (dev,) if bus else ())))
    # Without the PCIe probe a live run's merged matrix has no GPU x NIC cells (they come from that
    # probe only): no known cell means "not known", never "no NIC".
    gpu_idx = [i for i, (k, _) in enumerate(keyed) if k.startswith("gpu:")]
    nic_idx = [j for j, (k, _) in enumerate(keyed) if k.startswith("nic:")]
    if not any(_cell(matrix, i, j) in LEVEL_RANK for i in gpu_idx for j in nic_idx):
        return None
    return keyed, matrix, "topology (nvidia-smi topo -m GPU x NIC)"


def _cell(matrix: list[list[Any]], i: int, j: int) -> Any:
    row = matrix[i] if i < len(matrix) and isinstance(matrix[i], list) else []
    return row[j] if j < len(row) else None


def check_gpu_nic_affinity(view: HostView) -> Iterator[Finding]:
    """Each GPU has a NIC at `gpu_nic_level` or closer.  A GPU on NVLink-C2C (Grace) shares no PCIe
    bridge with any NIC by design: its best placement is a NIC on its own CPU, NODE in the PCIe
    probe's levels; nvidia-smi's matrix prints SYS for every such cell (GB200), so from a matrix
    alone the placement is unknown rather than wrong."""
    want = view.expect.gpu_nic_level
    if not want:
        return
    found = _affinity_matrix(view)
    if found is None:
        return  # neither the PCIe levels nor a topo matrix: nothing to judge (the outcomes say why)
    keyed, matrix, evidence = found
    nic_idx = [j for j, (k, _) in enumerate(keyed) if k.startswith("nic:")]
    want_rank = LEVEL_RANK.get("PIX" if want == "NV" else want, 5)
    if c2c_host(view):
        if not evidence.startswith("pcie.levels"):
            yield unknown(rules.pcie.GPU_NIC_AFFINITY.id, view.name, "GPU-NIC placement",
                          f"the GPUs sit on NVLink-C2C, where nvidia-smi's matrix prints NODE/SYS for every NIC: "
                          f"{want} cannot be judged from it", expected=want, evidence=[evidence],
                          hint="run the pcie probe: it reads each NIC's NUMA node, which decides a Grace GPU's NIC")
            return
        want_rank = max(want_rank, LEVEL_RANK["NODE"])  # a NIC on the GPU's own CPU is the closest there is
    for gi, (key, label) in enumerate(keyed):
        if not key.startswith("gpu:"):
            continue
        row = matrix[gi] if gi < len(matrix) and isinstance(matrix[gi], list) else []  # as _cell reads it
        cells = []
        for j in nic_idx:
            cell = row[j] if j < len(row) else None
            if cell in LEVEL_RANK:
                cells.append((cell, j))
        best = min(cells, key=lambda c: LEVEL_RANK[c[0]]) if cells else None
        if best and LEVEL_RANK[best[0]] <= want_rank:
            continue
        subject = label()
        actual = f"{best[0]} to {keyed[best[1]][1]()}" if best else "no NIC found"
        yield fault(rules.pcie.GPU_NIC_AFFINITY.id, view.name, subject,
                    f"{subject} has no NIC at {want} or closer (nearest: {actual})",
                    expected=want, actual=best[0] if best else None,
                    evidence=[evidence],
                    hint="the GPU's RDMA traffic will cross the host bridge; check NIC placement against the design")


def check_gpu_link_without_pcie(view: HostView) -> Iterator[Finding]:
    """No PCIe tree (the pcie probe did not run, or an import of `nvidia-smi -q` / `--query-gpu`
    alone): NVML's own view of each GPU's link is judged like the tree's.  NVML's max is already
    the lower of the GPU's and the slot's, so a width below it is a lane fault."""
    if _facts(view) is not None:
        return  # check_link_downgraded judges the tree, which names the port too
    exp_gen, exp_width = view.expect.pcie_gen, view.expect.pcie_width
    for g in _nvml_gpus(view):
        link = g.get("pcie")
        if not isinstance(link, dict):
            continue
        cur_g, cur_w, max_g, max_w = (link.get(k) for k in ("gen_current", "width_current", "gen_max", "width_max"))
        if not isinstance(cur_g, int) or not isinstance(cur_w, int):
            continue
        subject = Located(f"GPU{g.get('index')} ({g.get('bus_id') or 'bus id unknown'})", (gpu_device(g),))
        actual = f"{_gw(cur_g, cur_w)} ({link.get('speed_current')})"
        evidence = [f"nvml.gpus[{g.get('index')}].pcie: current vs max link generation/width"]
        if _short_of_expectation(link, exp_gen, exp_width):
            want = _gw(exp_gen or max_g, exp_width or max_w)
            yield fault(rules.pcie.LINK_DOWNGRADED.id, view.name, subject, f"{subject} link at {actual}, expected at least {want}",
                        expected=want, actual=actual, evidence=evidence,
                        hint="reseat the card or riser, check the slot's bifurcation/link settings in the BIOS")
        elif isinstance(max_w, int) and cur_w < max_w:
            yield fault(rules.pcie.LINK_DOWNGRADED.id, view.name, subject,
                        f"{subject} link trained at {actual}, the GPU and its slot allow {_gw(max_g, max_w)}",
                        severity=Severity.WARN, expected=_gw(max_g, max_w), actual=actual, evidence=evidence,
                        hint="a link below its width is a seating, riser or lane fault; reseat and re-check")
        elif isinstance(max_g, int) and cur_g < max_g:
            yield unknown(rules.pcie.LINK_DOWNGRADED.id, view.name, subject,
                          f"{subject} link at {actual} below its {_gw(max_g, max_w)}; GPUs slow the link when idle",
                          expected=_gw(max_g, max_w), actual=actual, evidence=evidence,
                          hint=_RESTING_HINT)


CHECKS: list[HostCheck] = [
    check_link_downgraded,
    check_gpu_link_without_pcie,
    check_nic_shared_switch,
    check_acs,
    check_gpu_count,
    check_needs_root,
    check_gpu_nic_affinity,
]

# The rules this module's checks raise, each declared in verdict/rules/<prefix>.py (JUnit lists them as cases).
FINDING_IDS: tuple[str, ...] = (
    rules.pcie.LINK_DOWNGRADED.id,
    rules.pcie.NIC_SHARED_SWITCH.id,
    rules.pcie.ACS_ENABLED.id,
    rules.gpu.COUNT_PCI_VS_DRIVER.id,
    rules.pcie.CONFIG_NEEDS_ROOT.id,
    rules.pcie.GPU_NIC_AFFINITY.id,
)



def _links_unjudged(facts: Mapping[str, Any]) -> dict[str, str]:
    """Link downgrades are judged on the PCIe tree, else on NVML's own view of each GPU link
    (check_gpu_link_without_pcie); with neither there is nothing to judge, which is no pass."""
    if isinstance(facts.get("pcie"), dict):
        return {}
    gpus = facts.get("gpus")
    listed = gpus.get("list") if isinstance(gpus, dict) else None
    if any(isinstance(g, dict) and isinstance(g.get("pcie"), dict) and isinstance(g["pcie"].get("gen_current"), int)
           for g in listed or []):
        return {}
    return {rules.pcie.LINK_DOWNGRADED.id: "no PCIe tree (the pcie probe gave none) and no GPU link state from NVML"}


# The rules whose judgement the facts may hold back (their declaration says `held_back`):
# _links_unjudged shares its steps with the checks, so the check and its coverage cannot disagree.
HELD_BACK: dict[str, Unjudged] = {fid: _links_unjudged for fid in (rules.pcie.LINK_DOWNGRADED.id,)}
