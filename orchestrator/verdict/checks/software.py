"""Software and firmware: mixed VBIOS on one host, versions that differ from the host's peers (hosts
with the same board and GPU models), and the security floor (the driver and the ConnectX/BlueField
firmware against NVIDIA's security bulletins, facts/security.py).  Pure.

A version is an outlier only against a clear norm: at least 3 peers and a value more than half of
them share; two hosts that differ do not say which one is right.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from orchestrator.facts import security
from orchestrator.facts.model import GpuRecord, HostFacts
from orchestrator.facts.shown import shown
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import FleetReads, HostView
from orchestrator.verdict.findings import (
    DeviceKind,
    Finding,
    Located,
    Severity,
    fault,
    gpu_device,
    joined,
    pci_device,
    unknown,
)

MIN_PEERS = 3


def _gpus(view: HostView) -> list[GpuRecord]:
    gpus = view.measured("gpus")
    return list((gpus.get("list") if gpus else None) or [])


def vbios_mixed(view: HostView) -> Iterator[Finding]:
    """GPUs of one model on one host running different VBIOS versions."""
    by_model: dict[str, list[GpuRecord]] = defaultdict(list)
    for g in _gpus(view):
        if isinstance(g.get("vbios"), str) and g["vbios"]:
            by_model[str(g.get("model") or g.get("name") or "")].append(g)  # "": model and name unknown
    for model, gpus in sorted(by_model.items()):
        counts = Counter(g["vbios"] for g in gpus)
        if len(counts) < 2:
            continue
        norm, _ = counts.most_common(1)[0]
        odd = [g for g in gpus if g["vbios"] != norm]
        names = ", ".join(f"GPU{shown(g.get('index'))} {g['vbios']}" for g in odd)
        yield fault(rules.gpu.VBIOS_MIXED.id, view.name,
                    joined(Located(f"GPU{shown(g.get('index'))} ({shown(g.get('bus_id'), 'bus id unknown')})",
                                   (gpu_device(g),)) for g in odd),
                    f"{len(counts)} VBIOS versions on the {len(gpus)} {model or 'GPUs of unknown model'}"
                    f"{' GPUs' if model else ''}: {names} where the others run {norm}",
                    severity=Severity.WARN, expected=norm, actual=dict(counts), evidence=["gpus.list.vbios"],
                    hint="a re-flashed or swapped board: flash the fleet's VBIOS (nvflash) or ask the vendor why")


def _most_gpus(v: HostView, key: str) -> str | None:
    """The value most of the host's GPUs give for a firmware version (VBIOS, InfoROM image)."""
    gpus: Sequence[Mapping[str, Any]] = _gpus(v)  # read by a key held in a variable
    counts = Counter(x for x in (g.get(key) for g in gpus) if isinstance(x, str) and x)
    return counts.most_common(1)[0][0] if counts else None


def _host_vbios(v: HostView) -> str | None:
    return _most_gpus(v, "vbios")


def _host_inforom(v: HostView) -> str | None:
    return _most_gpus(v, "inforom_image")


def _host(v: HostView) -> HostFacts | None:
    return v.facts.get("host")


def _driver_version(v: HostView) -> Any:
    host = _host(v)
    driver = host.get("driver") if host else None
    return driver.get("version") if driver else None


def _cuda_driver_version(v: HostView) -> Any:
    if not _gpus(v):
        return None
    gpus = v.facts.get("gpus")
    return gpus.get("cuda_driver_version") if gpus else None


def _kernel(v: HostView) -> Any:
    host = _host(v)
    return host.get("kernel") if host else None


def _bios_version(v: HostView) -> Any:
    host = _host(v)
    board = host.get("board") if host else None
    return board.get("bios_version") if board else None


# (what, reader, evidence): the versions compared across peers.
_FIELDS: tuple[tuple[str, Callable[[HostView], Any], str], ...] = (
    ("NVIDIA driver", _driver_version, rules.host.DRIVER_VERSION.id),
    ("CUDA driver version", _cuda_driver_version, "gpus.cuda_driver_version"),
    ("kernel", _kernel, "host.kernel"),
    ("BIOS", _bios_version, "host.board.bios_version"),
    ("VBIOS", _host_vbios, "gpus.list.vbios"),
    ("InfoROM image", _host_inforom, "gpus.list.inforom_image"),
)  # the fabric manager is judged against the driver it must match (fabric_manager_version)


def _peer_key(v: HostView) -> tuple[Any, ...] | None:
    host = _host(v)
    board = host.get("board") if host else None
    models = tuple(sorted(str(g.get("model") or g.get("name")) for g in _gpus(v)))
    product = (board.get("model") or board.get("product")) if board else None
    if not models or not isinstance(product, str):
        return None
    return (product, models)


# What version_outlier reads (checks/__init__.fleet_facts).
FLEET_READS: FleetReads = {"host": {"board": {"model": None, "product": None, "bios_version": None},
                                    "driver": {"version": None}, "kernel": None},
                           "gpus": {"cuda_driver_version": None, "list": {"model": None, "name": None, "vbios": None,
                                                                       "inforom_image": None}}}


def version_outlier(views: list[HostView]) -> Iterator[Finding]:
    groups: dict[tuple[Any, ...], list[HostView]] = defaultdict(list)
    for v in views:
        key = _peer_key(v)
        if key is not None:
            groups[key].append(v)
    for (product, _), members in groups.items():
        if len(members) < MIN_PEERS:
            continue
        for what, read, evidence in _FIELDS:
            values = [(v, read(v)) for v in members]
            known = [x for _, x in values if isinstance(x, str) and x]
            if not known:
                continue
            norm, count = Counter(known).most_common(1)[0]
            if count * 2 <= len(members):
                continue
            for v, x in values:
                if isinstance(x, str) and x and x != norm:
                    yield fault(rules.software.VERSION_OUTLIER.id, v.name, what,
                                f"{what} {x} where {count} of the {len(members)} {product} hosts with the same GPUs "
                                f"run {norm}", severity=Severity.INFO, expected=norm, actual=x,
                                evidence=[evidence, f"{len(members)} peer hosts"],
                                hint="bring the host to the fleet's version, or pin the difference in the inventory")




def fabric_manager_version(view: HostView) -> Iterator[Finding]:
    """On an NVSwitch system the fabric manager must be the driver's exact version."""
    host = _host(view)
    fm = host.get("fabric_manager") if host else None
    driver = _driver_version(view)
    pcie, nvlink = view.facts.get("pcie"), view.facts.get("nvlink")
    switches = len((pcie.get("nvswitches") if pcie else None) or []) or \
        len((nvlink.get("nvswitches") if nvlink else None) or [])
    if not fm or not fm.get("installed") or not fm.get("version") or not isinstance(driver, str) or not switches:
        return
    if fm["version"] != driver:
        yield fault(rules.nvlink.FABRIC_MANAGER_VERSION.id, view.name, "fabric manager",
                    f"fabric manager {fm['version']} ({shown(fm.get('package'), 'package unknown')}) with driver {driver}: on an NVSwitch "
                    "system they must be the same version", expected=driver, actual=fm["version"],
                    evidence=["host.fabric_manager.version", rules.host.DRIVER_VERSION.id],
                    hint="install the fabric manager package of the driver's exact version and restart "
                         "nvidia-fabricmanager; a mismatch keeps the NVLink fabric from starting")


SECURITY_DRIVER = rules.software.SECURITY_DRIVER.id
SECURITY_BRANCH = rules.software.SECURITY_BRANCH.id
SECURITY_FIRMWARE = rules.software.SECURITY_FIRMWARE.id


def _floor(view: HostView) -> security.SecurityFloor:
    return view.security_floor if view.security_floor is not None else security.load()


def _running_driver(view: HostView) -> tuple[str | None, str]:
    """The loaded driver's version and where it was read: /proc (host probe), else NVML."""
    version = _driver_version(view)
    if isinstance(version, str) and version:
        return version, rules.host.DRIVER_VERSION.id
    gpus = view.measured("gpus")
    nvml = gpus.get("driver_version") if gpus else None
    return (nvml, "gpus.driver_version") if isinstance(nvml, str) and nvml else (None, "")


def _bulletins(items: Sequence[security.Bulletin], limit: int = 3) -> str:
    shown_ = ", ".join(f"{b.id} ({b.date})" for b in items[:limit])
    return shown_ + (f" and {len(items) - limit} older" if len(items) > limit else "")


def security_driver(view: HostView) -> Iterator[Finding]:
    """With `security_floor: true`: the loaded driver against the newest fixed version of its branch
    in NVIDIA's GPU Display Driver bulletins, and its branch against the branches still listed."""
    if view.expect.security_floor is not True:
        return
    version, where = _running_driver(view)
    if version is None:
        return
    floor = _floor(view)
    v = floor.judge_driver(version)
    evidence = [where, floor.describe()]
    if not v.branch or v.newer_than_file:
        yield unknown(SECURITY_DRIVER, view.name, f"driver {version}",
                      f"driver {version} is of a branch ({v.branch or 'unparsed'}) newer than every branch the "
                      f"{floor.describe()} lists: not judged; use a newer floor file (--security-floor)",
                      actual=version, evidence=evidence,
                      hint="regenerate the floor with tools/security_floor.py from NVIDIA's bulletins")
        return
    if v.below and v.last_listed is not None:
        newest = v.missing[0]
        cves = sorted({c for b in v.missing for c in b.cves})
        tail = (f"; {v.branch} is not in the newest bulletin (which lists {', '.join(v.listed_now)}): it gets no "
                "more fixes" if v.unlisted else "")
        yield fault(SECURITY_DRIVER, view.name, f"driver {version}",
                    f"driver {version} lacks the fixes of NVIDIA bulletin {_bulletins(v.missing)} "
                    f"({len(cves)} CVE(s), e.g. {', '.join(cves[:3])}): {v.branch} is fixed from {v.floor}{tail}",
                    expected=f">= {v.floor}", actual=version,
                    evidence=[*evidence, f"bulletin {newest.id}: {newest.url}", *(f"CVE {c}" for c in cves[:12])],
                    hint=f"install {v.branch} {v.floor} or newer (or a branch NVIDIA still lists), then reboot")
        return
    if v.unlisted:
        last = v.last_listed
        oldest = min((b.date for b in floor.driver), default="?")
        since = (f"last listed in bulletin {last.id} ({last.date})" if last
                 else f"in none of the floor's bulletins (from {oldest} on)")
        yield fault(SECURITY_BRANCH, view.name, f"driver {version}",
                    f"driver branch {v.branch} is {since}; the newest bulletin lists only "
                    f"{', '.join(v.listed_now) or 'other branches'}: vulnerabilities found since are not fixed on it",
                    severity=Severity.WARN, expected=", ".join(v.listed_now), actual=v.branch, evidence=evidence,
                    hint="move to a branch NVIDIA still lists in its security bulletins")


def security_firmware(view: HostView) -> Iterator[Finding]:
    """With `security_floor: true`: each ConnectX / BlueField adapter's firmware against the first
    fixed build of its train in NVIDIA's networking bulletins."""
    if view.expect.security_floor is not True or view.measured("nic") is None:
        return
    nic = view.facts.get("nic")
    floor = _floor(view)
    by_version: dict[str, list[Located]] = defaultdict(list)  # one finding per firmware version, naming its adapters
    for dev in (nic.get("devices") if nic else None) or []:
        fw = dev.get("fw_ver")
        if isinstance(fw, str):
            hca = pci_device(DeviceKind.NIC, dev.get("bus_id"), nic=dev.get("name") or None)
            by_version[fw].append(Located(f"{dev.get('name')} ({shown(dev.get('bus_id'), 'bus id unknown')})", (hca,)))
    for fw, devices in sorted(by_version.items()):
        v = floor.judge_firmware(fw)
        if v is None or not v.missing:
            continue
        newest, need = v.missing[0]
        cves = sorted({c for b, _ in v.missing for c in b.cves})
        yield fault(SECURITY_FIRMWARE, view.name, joined(devices),
                    f"{v.family} firmware {fw} on {len(devices)} adapter(s) lacks the fixes of NVIDIA bulletin "
                    f"{_bulletins([b for b, _ in v.missing])} ({', '.join(cves[:3])}): it needs {need}",
                    expected=need, actual=fw,
                    evidence=["nic.devices.fw_ver", floor.describe(), f"bulletin {newest.id}: {newest.url}"],
                    hint="update the adapter firmware (mlxfwmanager / mlxup) to the fixed build of its train, "
                         "then reset the adapter or reboot")


CHECKS = [vbios_mixed, fabric_manager_version, security_driver, security_firmware]
FLEET_CHECKS = [version_outlier]

FINDING_IDS: tuple[str, ...] = (
    rules.gpu.VBIOS_MIXED.id,
    rules.software.VERSION_OUTLIER.id,
    rules.nvlink.FABRIC_MANAGER_VERSION.id,
    SECURITY_DRIVER,
    SECURITY_BRANCH,
    SECURITY_FIRMWARE,
)

