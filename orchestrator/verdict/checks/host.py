"""Checks on the host's identity, firmware, virtualization and driver, and on what the platform
exposes: NVSwitch and NIC counts against the expectation, NVSwitches hidden from the PCI bus, and
peer-to-peer access the driver or platform refuses (NVML P2P status)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from orchestrator.facts import gpu_models
from orchestrator.facts.shown import shown
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import (
    FleetReads,
    HostView,
    gpu_models_of,
    gpus_ran,
    nvlink_ran,
    pcie_ran,
)
from orchestrator.verdict.findings import (
    Device,
    DeviceKind,
    Finding,
    Kind,
    Severity,
    fault,
    limitation,
    located,
    unknown,
)


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def board_identity(view: HostView) -> Iterator[Finding]:
    host = view.facts.get("host")
    if not host:
        return
    board = host.get("board") or {}
    exp = view.expect
    for key, want in (("vendor", exp.board_vendor), ("model", exp.board_model)):
        have = board.get(key) if key == "vendor" else (board.get("model") or board.get("product"))
        if want and (not isinstance(have, str) or want.lower() not in have.lower()):
            yield fault(rules.host.BOARD_MISMATCH.id, view.name, f"board {key}", f"board {key} is {have!r}, expected {want!r}",
                        expected=want, actual=have, evidence=[f"host.dmi.board_{'vendor' if key == 'vendor' else 'name'}"],
                        hint="check the machine against the order; the vendor may have shipped another board")
    serial = board.get("system_serial")
    if isinstance(serial, dict):
        yield unknown(rules.identity.SERIAL_NEEDS_ROOT.id, view.name, "system serial",
                      "system and board serial numbers are readable by root only", actual=None,
                      evidence=["host.dmi.product_serial"], hint="run with become: true to record serials")


def virtualization(view: HostView) -> Iterator[Finding]:
    host = view.facts.get("host")
    if not host:
        return
    virt = host.get("virtualization") or {}
    want = view.expect.virtualization
    what = virt.get("hypervisor") or ("container " + str(virt.get("container")) if virt.get("container") else None)
    if want and want.lower() == "none" and virt.get("virtualized"):
        yield fault(rules.host.VIRTUALIZED.id, view.name, "platform",
                    f"host is virtualized ({shown(what, 'hypervisor unknown')}) but bare metal was expected", expected="none", actual=what,
                    evidence=[f"host.virtualization.evidence={','.join(virt.get('evidence') or [])}"],
                    hint="a VM hides the PCIe tree, NVSwitches and often P2P; ask for a bare-metal node")
    elif virt.get("virtualized"):
        yield limitation(rules.host.VIRTUALIZED.id, view.name, "platform",
                         f"host is virtualized ({shown(what, 'hypervisor unknown')}): PCIe topology, NVSwitches and P2P may be hidden or emulated",
                         actual=what, evidence=[f"host.virtualization.evidence={','.join(virt.get('evidence') or [])}"],
                         hint="findings about topology on this host describe the VM, not the physical machine")
    else:
        # The host probe saw no hypervisor (DMI and CPU flags can be masked) but the PCI bus is an
        # emulated one: a VM that hides itself, so its "topology" is the hypervisor's invention.
        pcie = pcie_ran(view)
        vp = (pcie.get("virtual_platform") if pcie else None) or {}
        if vp.get("detected"):
            strict = bool(want and want.lower() == "none")
            yield Finding(rules.host.VIRTUALIZED.id, Severity.FAIL if strict else Severity.WARN,
                          Kind.FAULT if strict else Kind.PLATFORM_LIMITATION, view.name, "platform",
                          "the PCI bus is emulated (" + "; ".join(vp.get("evidence") or [])[:200]
                          + ") although the host reports no hypervisor: a masked VM",
                          expected="none" if strict else None, actual="emulated PCI bus",
                          evidence=["pcie.virtual_platform.evidence", "host.virtualization"],
                          hint="ask the provider what this machine is; PCIe/NVLink topology here is not physical")


def driver(view: HostView) -> Iterator[Finding]:
    host = view.facts.get("host")
    if not host:
        return
    drv = host.get("driver") or {}
    exp = view.expect
    if not drv.get("loaded"):
        if exp.gpu_count:
            yield fault(rules.host.DRIVER_MISSING.id, view.name, "nvidia driver",
                        "NVIDIA kernel driver is not loaded (/proc/driver/nvidia/version missing)",
                        expected=f"{exp.gpu_count} GPUs", actual="no driver", evidence=["host.nvidia_driver.loaded"],
                        hint="load the nvidia module (modprobe nvidia) or install the driver")
        return
    version = drv.get("version")
    if not version:
        return
    if exp.driver_min and _version_tuple(version) < _version_tuple(exp.driver_min):
        yield Finding(rules.host.DRIVER_VERSION.id, Severity.FAIL, Kind.FAULT, view.name, "nvidia driver",
                      f"driver {version} is older than the required {exp.driver_min}", expected=f">={exp.driver_min}",
                      actual=version, evidence=["host.nvidia_driver.version"], hint="upgrade the NVIDIA driver")
    if exp.driver_max and _version_tuple(version) > _version_tuple(exp.driver_max):
        yield Finding(rules.host.DRIVER_VERSION.id, Severity.WARN, Kind.FAULT, view.name, "nvidia driver",
                      f"driver {version} is newer than the allowed {exp.driver_max}", expected=f"<={exp.driver_max}",
                      actual=version, evidence=["host.nvidia_driver.version"], hint="pin the driver version the fleet is validated on")


# Firmware fill-ins that many boards share: not identities, so never "duplicates".
_PLACEHOLDER_SERIALS = re.compile(
    r"^(to be filled by o\.?e\.?m\.?|default string|system serial number|not specified|not applicable|none|"
    r"n/?a|unknown|chassis serial number|serial|0123456789|123456789|(.)\2*)$", re.IGNORECASE)
_NAMED = 5  # hosts named in one message; the rest are counted (10,000 hosts on "ubuntu" stay readable)


def duplicate_identities(views: list[HostView]) -> Iterator[Finding]:
    """Two hosts claiming one hostname or one system serial are two names for one box, or forged."""
    for fid, key, label in ((rules.identity.HOSTNAME_DUPLICATE.id, "hostname", "hostname"),
                            (rules.identity.SYSTEM_SERIAL_DUPLICATE.id, "system_serial", "system serial")):
        seen: dict[str, list[str]] = defaultdict(list)
        for v in views:
            host = v.facts.get("host")
            board = host.get("board") if host and key != "hostname" else None
            value = ((host.get("hostname") if host else None) if key == "hostname"
                     else board.get("system_serial") if board else None)
            if not isinstance(value, str) or not value.strip():
                continue
            if key == "system_serial" and _PLACEHOLDER_SERIALS.match(value.strip()):
                continue
            seen[value].append(v.name)
        for value, names in seen.items():
            if len(names) < 2:
                continue
            # Linear in the hosts sharing the value: each message names a few others and counts the rest.
            head = names[:_NAMED + 1]
            for name in names:
                others = [n for n in head if n != name][:_NAMED]
                more = len(names) - 1 - len(others)
                text = ", ".join(others) + (f" and {more} more" if more else "")
                peers = located(label, (Device(DeviceKind.PEER_HOST, host=n) for n in others))
                if key == "hostname":
                    yield fault(fid, name, peers, f"{label} {value!r} is also reported by {text}",
                                actual=value, expected="unique across the fleet",
                                evidence=[f"host.{key}", f"{len(names)} hosts report it"], severity=Severity.WARN,
                                hint="two inventory entries reach the same machine, or the machine lies about its "
                                     "identity")
                    continue
                # one serial a board: nothing in one run tells which host's is its own, so which one
                # lied is unknown and neither is drained for it (verdict/rules/identity.py)
                yield unknown(fid, name, peers, f"{label} {value!r} is also reported by {text}; nothing in this run "
                              "tells which host's serial is its own", actual=value, expected="unique across the fleet",
                              evidence=[f"host.{key}", f"{len(names)} hosts report it"], severity=Severity.WARN,
                              hint="investigate before acting on either host: two inventory entries reach the same "
                                   "machine, or one machine forges another's identity; read the serial on each "
                                   "machine (`dmidecode -s system-serial-number`) and its asset label")


def _virtual(view: HostView) -> bool:
    host, pcie, gpus = view.facts.get("host"), view.facts.get("pcie"), view.facts.get("gpus")
    virt = host.get("virtualization") if host else None
    return bool((virt.get("virtualized") if virt else None)
                or ((pcie.get("virtual_platform") if pcie else None) or {}).get("detected")
                or (gpus.get("virtualized") if gpus else None))


def _switches_off_bus(view: HostView) -> bool:
    """NVLink5 GPUs (B200/B300 boards, GB200 racks) reach NVSwitches that are never PCI functions
    of the host (managed through NVLSM; DCGM on a 7-GPU B300 XE9780 says "0 NvSwitches found")."""
    models = gpu_models_of(view)
    return bool(models) and all((m.nvlink_version or 0) >= 5 for m in models)


def nvswitches(view: HostView) -> Iterator[Finding]:
    """NVSwitches on the PCI bus vs those the GPUs' NVLinks reach vs the expectation."""
    pcie, nvl = pcie_ran(view), nvlink_ran(view)
    on_bus = len(pcie.get("nvswitches") or []) if pcie is not None else None
    via_links = len(nvl.get("nvswitches") or []) if nvl is not None else None
    want = view.expect.nvswitch_count
    seen = [n for n in (on_bus, via_links) if n is not None]
    if want is not None and seen and max(seen) != want:
        found = max(seen)
        msg = f"{found} NVSwitch(es) found, {want} expected (PCI bus {on_bus}, NVLink {via_links})"
        kw = {"expected": want, "actual": {"pci": on_bus, "nvlink": via_links},
              "evidence": ["pcie.nvswitches", "nvlink.nvswitches"]}
        if _virtual(view) and found == 0:
            yield limitation(rules.nvlink.NVSWITCH_COUNT.id, view.name, "NVSwitches", msg + " (virtualized host)",
                             hint="a VM sees the NVSwitch fabric only if the provider passes it through", **kw)
        else:
            yield fault(rules.nvlink.NVSWITCH_COUNT.id, view.name, "NVSwitches", msg,
                        hint="a missing NVSwitch leaves GPUs with fewer NVLinks; check `nvidia-smi nvlink -s`, "
                             "fabric manager and the baseboard", **kw)
    if on_bus == 0 and via_links and pcie and pcie.get("gpus") and not _switches_off_bus(view):
        # NVLinks end on switches the PCI bus does not show: a hypervisor that hides the fabric.  Only
        # when the bus was really read (it shows the GPUs): garbage pcie data proves nothing.
        yield limitation(rules.nvlink.NVSWITCH_HIDDEN.id, view.name, "NVSwitches",
                         f"GPU NVLinks reach {via_links} NVSwitch(es) that are not on this PCI bus",
                         expected="NVSwitches visible on the PCI bus", actual={"pci": 0, "nvlink": via_links},
                         evidence=["pcie.nvswitches", "nvlink.nvswitches"],
                         hint="the platform hides the NVSwitches (VM or partitioned system): fabric health "
                              "and fabric manager state cannot be checked from here")


def nic_count(view: HostView) -> Iterator[Finding]:
    pcie = pcie_ran(view)
    want = view.expect.nic_count
    if pcie is None or want is None:
        return
    nics = pcie.get("nics") or []
    if len(nics) != want:
        yield fault(rules.pcie.NIC_COUNT.id, view.name, "NICs", f"{len(nics)} NIC(s) on the PCI bus, {want} expected",
                    expected=want, actual=len(nics), evidence=["pcie.nics"],
                    severity=Severity.FAIL if len(nics) < want else Severity.WARN,
                    hint="a missing NIC is unseated, disabled in the BIOS or dead; compare `lspci` with the order")


_BY_TOPOLOGY = ("TNS",)  # "topology not supported": P2P across the CPU interconnect, refused by design


def p2p_status(view: HostView) -> Iterator[Finding]:
    """GPU pairs whose NVML P2P read status is not OK: by design (GeForce, topology), by the platform
    (VM, vGPU, MIG), or a P2P-capable bare-metal machine with P2P switched off."""
    gfacts = gpus_ran(view)
    if gfacts is None:
        return
    read = (gfacts.get("p2p") or {}).get("read") or []
    gpus = gfacts.get("list") or []
    bad: dict[str, list[str]] = defaultdict(list)
    for i, row in enumerate(read):
        for j, status in enumerate(row if isinstance(row, list) else []):
            if j <= i or status in (None, "X", "OK") or status in _BY_TOPOLOGY:
                continue
            back = read[j][i] if j < len(read) and isinstance(read[j], list) and i < len(read[j]) else None
            if back == "OK":
                continue  # one direction answers: a driver quirk, not a refused pair
            bad[str(status)].append(f"GPU{i}<->GPU{j}")
    if not bad:
        return
    pairs = sum(len(v) for v in bad.values())
    total = len(gpus) * (len(gpus) - 1) // 2
    summary = "; ".join(f"{s}: {', '.join(v[:6])}{' …' if len(v) > 6 else ''}" for s, v in sorted(bad.items()))
    models = {gpu_models.lookup(g.get("name")) for g in gpus}
    no_p2p_model = next((m for m in models if m and not m.p2p_supported), None)
    mig = any(m.get("current") for g in gpus if (m := g.get("mig")))
    kw = {"expected": "OK", "actual": {s: len(v) for s, v in bad.items()},
          "evidence": ["nvml.p2p.read"]}
    msg = f"P2P access refused on {pairs} of {total} GPU pair(s) ({summary})"
    if no_p2p_model is not None:
        yield limitation(rules.p2p.STATUS_DISABLED.id, view.name, "GPU pairs",
                         msg + f": {no_p2p_model.key} cards have peer-to-peer disabled by the driver", **kw,
                         hint="GeForce boards do not do P2P; collectives go through host memory")
    elif _virtual(view) or mig:
        yield limitation(rules.p2p.STATUS_DISABLED.id, view.name, "GPU pairs",
                         msg + " (virtualized or MIG: the platform does not grant P2P)", **kw,
                         hint="ask the provider for a P2P-capable configuration (NVLink/PCIe pass-through with P2P)")
    else:
        yield fault(rules.p2p.STATUS_DISABLED.id, view.name, "GPU pairs", msg, severity=Severity.WARN, **kw,
                    hint="`nvidia-smi topo -p2p r`; check ACS/IOMMU settings, the driver's P2P registry keys "
                         "and the BIOS; P2P-capable GPUs on bare metal should read OK")


def raw_mode(view: HostView) -> Iterator[Finding]:
    """Facts read from nvidia-smi/lspci text know less than the probes: say so once per host."""
    if view.outcomes.get("raw") == "ok":
        yield unknown(rules.probe.RAW_MODE.id, view.name, "host",
                      "probed in raw mode (no usable Python 3): facts parsed from nvidia-smi/lspci text, "
                      "lower confidence; fields text cannot give are unknown",
                      evidence=["raw.outputs"], hint="install python3 (3.6+) or set ansible_python_interpreter "
                      "for the full probes")


# The result a host's only answer is where its document claims a name it cannot be shown to own
# (api/claims.py): its reason says which and why; nothing of it is judged.
CLAIM_PROBE = "identity"


def claimed_name(view: HostView) -> Iterator[Finding]:
    """A document that speaks for a host it cannot be shown to be is its own finding, never a
    verdict on the host it names; unknown, so no remedy or drain line ever acts on it."""
    if CLAIM_PROBE in view.outcomes:
        why = view.reasons.get(CLAIM_PROBE) or "its document claims a name it cannot be shown to own"
        yield unknown(rules.identity.NAME_CLAIMED.id, view.name, "host name", why, severity=Severity.WARN,
                      evidence=["bundle.identity", "bundle.file"],
                      hint="find which machine wrote it (the job's node list, the file's place) and probe that "
                           "node again with srun -o out/%N.json, one task per node")


CHECKS = [board_identity, virtualization, driver, nvswitches, nic_count, p2p_status, raw_mode, claimed_name]
FLEET_CHECKS = [duplicate_identities]
FLEET_READS: FleetReads = {"host": {"hostname": None, "board": {"system_serial": None}}}

# The rules this module's checks raise, each declared in verdict/rules/<prefix>.py (JUnit lists them as cases).
FINDING_IDS: tuple[str, ...] = (
    rules.host.BOARD_MISMATCH.id,
    rules.host.VIRTUALIZED.id,
    rules.host.DRIVER_MISSING.id,
    rules.host.DRIVER_VERSION.id,
    rules.identity.SERIAL_NEEDS_ROOT.id,
    rules.identity.HOSTNAME_DUPLICATE.id,
    rules.identity.SYSTEM_SERIAL_DUPLICATE.id,
    rules.identity.NAME_CLAIMED.id,
    rules.probe.RAW_MODE.id,
    rules.nvlink.NVSWITCH_COUNT.id,
    rules.nvlink.NVSWITCH_HIDDEN.id,
    rules.pcie.NIC_COUNT.id,
    rules.p2p.STATUS_DISABLED.id,
)


