"""Checks on the host's identity, firmware, virtualization and driver."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from orchestrator.checks.base import HostView
from orchestrator.findings import Finding, Kind, Severity, fault, limitation, unknown


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
            yield fault("host.board.mismatch", view.name, f"board {key}", f"board {key} is {have!r}, expected {want!r}",
                        expected=want, actual=have, evidence=[f"host.dmi.board_{'vendor' if key == 'vendor' else 'name'}"],
                        hint="check the machine against the order; the vendor may have shipped another board")
    serial = board.get("system_serial")
    if isinstance(serial, dict):
        yield unknown("identity.serial.needs_root", view.name, "system serial",
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
        yield fault("host.virtualized", view.name, "platform",
                    f"host is virtualized ({what}) but bare metal was expected", expected="none", actual=what,
                    evidence=[f"host.virtualization.evidence={','.join(virt.get('evidence') or [])}"],
                    hint="a VM hides the PCIe tree, NVSwitches and often P2P; ask for a bare-metal node")
    elif virt.get("virtualized"):
        yield limitation("host.virtualized", view.name, "platform",
                         f"host is virtualized ({what}): PCIe topology, NVSwitches and P2P may be hidden or emulated",
                         actual=what, evidence=[f"host.virtualization.evidence={','.join(virt.get('evidence') or [])}"],
                         hint="findings about topology on this host describe the VM, not the physical machine")


def driver(view: HostView) -> Iterator[Finding]:
    host = view.facts.get("host")
    if not host:
        return
    drv = host.get("driver") or {}
    exp = view.expect
    if not drv.get("loaded"):
        if exp.gpu_count:
            yield fault("host.driver.missing", view.name, "nvidia driver",
                        "NVIDIA kernel driver is not loaded (/proc/driver/nvidia/version missing)",
                        expected=f"{exp.gpu_count} GPUs", actual="no driver", evidence=["host.nvidia_driver.loaded"],
                        hint="load the nvidia module (modprobe nvidia) or install the driver")
        return
    version = drv.get("version")
    if not version:
        return
    if exp.driver_min and _version_tuple(version) < _version_tuple(exp.driver_min):
        yield Finding("host.driver.version", Severity.FAIL, Kind.FAULT, view.name, "nvidia driver",
                      f"driver {version} is older than the required {exp.driver_min}", expected=f">={exp.driver_min}",
                      actual=version, evidence=["host.nvidia_driver.version"], hint="upgrade the NVIDIA driver")
    if exp.driver_max and _version_tuple(version) > _version_tuple(exp.driver_max):
        yield Finding("host.driver.version", Severity.WARN, Kind.FAULT, view.name, "nvidia driver",
                      f"driver {version} is newer than the allowed {exp.driver_max}", expected=f"<={exp.driver_max}",
                      actual=version, evidence=["host.nvidia_driver.version"], hint="pin the driver version the fleet is validated on")


def duplicate_identities(views: list[HostView]) -> Iterator[Finding]:
    """Two hosts claiming one hostname or one system serial are two names for one box, or forged."""
    for fid, key, label in (("identity.hostname.duplicate", "hostname", "hostname"),
                            ("identity.system_serial.duplicate", "system_serial", "system serial")):
        seen: dict[str, list[str]] = defaultdict(list)
        for v in views:
            host = v.facts.get("host") or {}
            value = host.get(key) if key == "hostname" else (host.get("board") or {}).get(key)
            if isinstance(value, str) and value:
                seen[value].append(v.name)
        for value, names in seen.items():
            if len(names) > 1:
                for name in names:
                    others = [n for n in names if n != name]
                    yield fault(fid, name, label, f"{label} {value!r} is also reported by {', '.join(others)}",
                                actual=value, expected="unique across the fleet", evidence=[f"host.{key}"],
                                severity=Severity.WARN if key == "hostname" else Severity.FAIL,
                                hint="two inventory entries reach the same machine, or the machine lies about its identity")


CHECKS = [board_identity, virtualization, driver]
FLEET_CHECKS = [duplicate_identities]
