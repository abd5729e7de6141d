"""Checks on `facts["pcie"]` (docs/facts-pcie.md): downgraded links, NICs sharing GPU uplinks,
ACS redirect on GPU paths, GPUs on the bus but not in the driver, GPU<->NIC affinity, and what
could not be judged without root.  Pure: HostView in, findings out.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from orchestrator.checks.base import HostCheck, HostView
from orchestrator.findings import Finding, Severity, fault, limitation, unknown

LEVEL_RANK = {"X": 0, "NV": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def _facts(view: HostView) -> dict[str, Any] | None:
    if not view.ran("pcie"):
        return None  # the probe outcome already says why
    facts = view.facts.get("pcie")
    return facts if isinstance(facts, dict) else None


def _virtualized(view: HostView, pcie: dict[str, Any]) -> bool:
    host = view.facts.get("host") or {}
    virt = host.get("virtualization") or {} if isinstance(host, dict) else {}
    return bool(virt.get("virtualized")) or bool((pcie.get("virtual_platform") or {}).get("detected"))


def _in_container(view: HostView) -> bool:
    host = view.facts.get("host") or {}
    return bool(((host.get("virtualization") or {}) if isinstance(host, dict) else {}).get("container"))


def _names(pcie: dict[str, Any]) -> dict[str, str]:
    """bdf -> "GPU3 (0000:5d:00.0)" / "NIC mlx5_0 (0000:19:00.0)" for subjects and messages."""
    out: dict[str, str] = {}
    for i, b in enumerate(pcie.get("gpus") or []):
        out[b] = f"GPU{i} ({b})"
    labels = {d["bdf"]: d.get("label") for d in pcie.get("devices") or [] if isinstance(d, dict)}
    for b in pcie.get("nics") or []:
        out[b] = f"NIC {labels.get(b)} ({b})" if labels.get(b) else f"NIC {b}"
    return out


def _gw(gen: Any, width: Any) -> str:
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def check_link_downgraded(view: HostView) -> Iterator[Finding]:
    pcie = _facts(view)
    if pcie is None:
        return
    names = _names(pcie)
    exp_gen, exp_width = view.expect.pcie_gen, view.expect.pcie_width
    reported = set()
    for e in pcie.get("downgraded") or []:
        b = e["bdf"]
        reported.add(b)
        gpu = e.get("kind") == "gpu"
        below_expect = gpu and ((exp_gen and (e["gen_current"] or 0) < exp_gen)
                                or (exp_width and (e["width_current"] or 0) < exp_width))
        width_low = (e["width_current"] or 0) < (e["width_max"] or 0)
        actual = f"{_gw(e['gen_current'], e['width_current'])} ({e.get('speed_current')})"
        expected = f"{_gw(exp_gen or e['gen_max'], exp_width or e['width_max'])}"
        subject = names.get(b, f"{e.get('kind')} {b}")
        evidence = [f"sysfs {b}: current_link_speed/width vs max_link_speed/width of the device and its port"]
        if below_expect:
            yield fault("pcie.link.downgraded", view.name, subject,
                        f"{subject} link trained at {actual}, expected at least {expected}",
                        expected=expected, actual=actual, evidence=evidence,
                        hint="reseat the card or riser, check the slot's bifurcation/link settings in the BIOS, "
                             "compare with `lspci -vvv` LnkSta")
        elif width_low or not gpu:
            yield fault("pcie.link.downgraded", view.name, subject,
                        f"{subject} link trained at {actual}, both ends support {_gw(e['gen_max'], e['width_max'])}",
                        severity=Severity.WARN, expected=expected, actual=actual, evidence=evidence,
                        hint="a link below its width is a seating, riser or lane fault; reseat and re-check")
        else:
            # GPUs lower the link speed when idle to save power; only the width is conclusive at rest.
            yield unknown("pcie.link.downgraded", view.name, subject,
                          f"{subject} link at {actual} below its {_gw(e['gen_max'], e['width_max'])}; "
                          "GPUs slow the link when idle",
                          expected=expected, actual=actual, evidence=evidence,
                          hint="re-check while the GPU is busy (e.g. during the p2p probe); set probe_expect.pcie_gen "
                               "to make this a hard requirement")
    if not (exp_gen or exp_width):
        return
    # Expectations also catch a GPU that trained at its best but in a slot below the requirement.
    for d in pcie.get("devices") or []:
        if d.get("kind") != "gpu" or d["bdf"] in reported or not d.get("link"):
            continue
        link = d["link"]
        if (exp_gen and (link["gen_current"] or 0) < exp_gen) or (exp_width and (link["width_current"] or 0) < exp_width):
            subject = names.get(d["bdf"], d["bdf"])
            actual = f"{_gw(link['gen_current'], link['width_current'])} ({link.get('speed_current')})"
            expected = _gw(exp_gen or link["gen_max"], exp_width or link["width_max"])
            yield fault("pcie.link.downgraded", view.name, subject,
                        f"{subject} link at {actual}, expected at least {expected}",
                        expected=expected, actual=actual,
                        evidence=[f"sysfs {d['bdf']}: current_link_speed/width"],
                        hint="the GPU or its slot cannot reach the expected generation/width; check the slot and riser")


def check_nic_shared_switch(view: HostView) -> Iterator[Finding]:
    """A NIC sharing a GPU uplink by accident rather than by design (definition: docs/facts-pcie.md)."""
    pcie = _facts(view)
    if pcie is None:
        return
    names = _names(pcie)
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
            subject = names.get(n, n)
            yield fault("pcie.nic.shared_switch", view.name, subject,
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
    names = _names(pcie)
    virtual = _virtualized(view, pcie)
    for e in pcie.get("acs") or []:
        if e.get("port_role") != "downstream_port" or not e.get("peers"):
            continue  # root ports: P2P across them crosses the root complex anyway
        gpus = ", ".join(names.get(g, g) for g in e["gpus"])
        subject = e["port"]
        msg = (f"ACS {'/'.join(e['enabled'])} enabled on switch port {e['port']} above {gpus}: peer-to-peer "
               "traffic is redirected through the root complex")
        kw: dict[str, Any] = {"expected": "ACS redirect off on switch ports between GPUs/NICs",
                              "actual": e["enabled"], "evidence": [f"config space {e['port']} ACS control"]}
        if virtual:
            yield limitation("pcie.acs.enabled", view.name, subject, msg + " (virtualized host: the hypervisor "
                             "needs ACS for isolation)", hint="P2P between passed-through devices is the "
                             "platform's choice; ask the provider for a P2P-capable configuration", **kw)
        else:
            yield fault("pcie.acs.enabled", view.name, subject, msg,
                        hint="boot with pci=disable_acs_redir=<ports> or clear ACS control (setpci ECAP_ACS+0x6.w=0) "
                             "on bare metal; see NCCL troubleshooting 'PCI Access Control Services'", **kw)


def check_gpu_count(view: HostView) -> Iterator[Finding]:
    pcie = _facts(view)
    if pcie is None:
        return
    counts = pcie.get("gpu_counts") or {}
    gpus = pcie.get("gpus") or []
    names = _names(pcie)
    passthrough = set(counts.get("passthrough") or [])
    if not gpus or len(passthrough) == len(gpus):
        return
    if not counts.get("driver_loaded"):
        yield fault("gpu.count.pci_vs_driver", view.name, "host",
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
        subject = names.get(b, b)
        kw: dict[str, Any] = {"expected": f"{b} in /proc/driver/nvidia/gpus and /dev", "actual": f"missing from {where}",
                              "evidence": [f"/sys/bus/pci/devices/{b}", where]}
        if container and b not in miss_proc:
            yield limitation("gpu.count.pci_vs_driver", view.name, subject,
                             f"{subject} is on the PCI bus but not in this container's /dev", **kw)
            continue
        yield fault("gpu.count.pci_vs_driver", view.name, subject,
                    f"{subject} is on the PCI bus but missing from {where} "
                    f"(PCI {counts.get('pci')}, /proc {counts.get('proc')}, /dev {counts.get('dev')})",
                    hint="the driver did not initialise this GPU: check dmesg for NVRM/Xid errors, the GPU's "
                         "power and seating, and nvidia-smi -q for it", **kw)


def check_needs_root(view: HostView) -> Iterator[Finding]:
    pcie = _facts(view)
    if pcie is None or not pcie.get("needs_root"):
        return
    yield unknown("pcie.config.needs_root", view.name, "host",
                  "PCIe config space beyond 64 bytes needs root: port types inferred from the tree, ACS not judged",
                  actual=pcie.get("needs_root"), evidence=["sysfs config files read 64 bytes"],
                  hint="run the pcie probe with become (sudo -n) to judge ACS and confirm switch ports")


def check_gpu_nic_affinity(view: HostView) -> Iterator[Finding]:
    pcie = _facts(view)
    want = view.expect.gpu_nic_level
    if pcie is None or not want:
        return
    levels = pcie.get("levels") or {}
    order = levels.get("order") or []
    matrix = levels.get("matrix") or []
    gpus = pcie.get("gpus") or []
    nic_idx = [i for i, b in enumerate(order) if b not in gpus]
    names = _names(pcie)
    want_rank = LEVEL_RANK.get("PIX" if want == "NV" else want, 5)
    for gi, g in enumerate(order):
        if g not in gpus:
            continue
        cells = [(matrix[gi][j], order[j]) for j in nic_idx if matrix[gi][j] in LEVEL_RANK]
        best = min(cells, key=lambda c: LEVEL_RANK[c[0]]) if cells else None
        if best and LEVEL_RANK[best[0]] <= want_rank:
            continue
        subject = names.get(g, g)
        actual = f"{best[0]} to {names.get(best[1], best[1])}" if best else "no NIC found"
        yield fault("pcie.gpu_nic.affinity", view.name, subject,
                    f"{subject} has no NIC at {want} or closer (nearest: {actual})",
                    expected=want, actual=best[0] if best else None,
                    evidence=["pcie.levels (GPU x NIC)"],
                    hint="the GPU's RDMA traffic will cross the host bridge; check NIC placement against the design")


CHECKS: list[HostCheck] = [
    check_link_downgraded,
    check_nic_shared_switch,
    check_acs,
    check_gpu_count,
    check_needs_root,
    check_gpu_nic_affinity,
]
