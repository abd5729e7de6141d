"""Normalize the `pcie` probe's raw sysfs data into `facts["pcie"]` (shape: docs/facts-pcie.md).

Pure: a JSON-able dict in, a JSON-able dict out.  Levels follow the reconstruction of
`nvidia-smi topo -m` in gpu-probe-reference.md §4.3: different host bridge -> NODE/SYS by NUMA
node, same host bridge without a common bridge -> PHB, otherwise count the PCIe switches on the
path (<= 1 -> PIX, more -> PXB).  Broadcom's two internal levels are deliberately not flattened,
because nvidia-smi does not flatten them either (DGX A100 shows GPU<->NIC PXB).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

from orchestrator.facts.gpu_models import PCIE_GEN_GT_S, PCIE_SPEED_TEXT
from orchestrator.facts.model import PcieFacts

T = TypeVar("T")

NVIDIA = 0x10DE
_BDF = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_PORT_TYPES = {0: "endpoint", 1: "legacy_endpoint", 4: "root_port", 5: "upstream_port",
               6: "downstream_port", 7: "pcie_to_pci_bridge", 8: "pci_to_pcie_bridge",
               9: "rc_integrated", 10: "rc_event_collector"}
# the rate as sysfs writes it ("16" before kernel 4.x, "16.0" after) -> generation
_SPEED_GEN = {text: gen for gen, rate in PCIE_GEN_GT_S.items() for text in (f"{rate:g}", f"{rate:.1f}")}
_GEN_SPEED = PCIE_SPEED_TEXT
_ACS_BITS = (("SV", 0x01), ("TB", 0x02), ("RR", 0x04), ("CR", 0x08), ("UF", 0x10), ("EC", 0x20), ("DT", 0x40))
_REDIRECT = ("RR", "CR", "EC")  # the bits pci=disable_acs_redir= clears: they force P2P upstream
_SWITCH_VENDORS = {0x10B5: "PLX", 0x1000: "Broadcom PEX", 0x11F8: "Microchip"}
_VENDORS = {NVIDIA: "NVIDIA", 0x15B3: "Mellanox", 0x14E4: "Broadcom", 0x8086: "Intel", 0x10B5: "PLX",
            0x1000: "Broadcom PEX", 0x11F8: "Microchip", 0x1022: "AMD", 0x144D: "Samsung",
            0x1A03: "ASPEED", 0x1AF4: "virtio", 0x1B36: "QEMU", 0x1414: "Microsoft", 0x15AD: "VMware",
            0x1234: "QEMU", 0x1D0F: "Amazon"}
_VIRTUAL_HOST_BRIDGES = {(0x8086, 0x1237): "QEMU i440FX host bridge", (0x8086, 0x29C0): "QEMU Q35 host bridge"}
_VIRTUAL_VENDORS = {0x1AF4: "virtio device", 0x1B36: "QEMU device", 0x1414: "Hyper-V device",
                    0x15AD: "VMware device", 0x1234: "QEMU/Bochs display"}
PORT_TYPES = _PORT_TYPES  # the PCIe capability's port type codes, for sources that print the name
ACS_BITS = _ACS_BITS
TEXT_SOURCE = "lspci"  # a device record built from lspci text (facts/textparse): what it could not read is None
LEVEL_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")
HEADER_ONLY = "needs root: config space beyond 64 bytes"


def _per_fleet(fn: Callable[..., T], maxsize: int = 4096) -> Callable[..., T]:
    """Memoize a parser of raw id/speed/width/register values (results must be immutable).

    Algorithmic: alike machines repeat the same few hundred values, so a fleet parses each once
    (build_fleet at 1,000 hosts: ~2.1 CPU s with it, ~3.0 without).  typed: 16, 16.0 and True
    parse differently.  An unhashable value (not what the probe writes) is parsed uncached, so it
    fails exactly as it would without the cache."""
    cached = lru_cache(maxsize=maxsize, typed=True)(fn)

    @functools.wraps(fn)
    def call(*args: Any) -> T:
        try:
            return cached(*args)
        except TypeError:  # unhashable; or fn's own TypeError, which the call below raises again
            return fn(*args)
    return call


def _hex(value: Any) -> int | None:
    try:
        return int(str(value), 16)
    except ValueError:
        return None


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())  # str() first: True and 16.0 are not widths
    except ValueError:
        return None


_SPEED = re.compile(r"\s*([\d.]+)\s*GT/s")


def parse_speed(text: Any) -> tuple[int | None, str | None]:
    """sysfs link speed ("16.0 GT/s PCIe", old "16 GT/s", "Unknown") -> (generation, "16.0 GT/s")."""
    m = _SPEED.match(text) if isinstance(text, str) else None
    if not m:
        return None, None
    gen = _SPEED_GEN.get(m.group(1))
    return gen, _GEN_SPEED.get(gen) if gen else f"{m.group(1)} GT/s"


@_per_fleet
def _sysfs_link(cur_speed: Any, max_speed: Any, cur_width: Any,
                max_width: Any) -> tuple[int | None, str | None, int | None, str | None, int | None, int | None]:
    return (*parse_speed(cur_speed), *parse_speed(max_speed), _int(cur_width), _int(max_width))


def _link(raw: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any] | None:
    gen_cur, speed_cur, gen_max, speed_max, w_cur, w_max = _sysfs_link(
        raw.get("current_link_speed"), raw.get("max_link_speed"), raw.get("current_link_width"),
        raw.get("max_link_width"))
    if gen_max is None and w_max is None:
        pcie = cfg.get("pcie") if isinstance(cfg.get("pcie"), dict) and "unknown" not in cfg["pcie"] else None
        if pcie:
            # Older kernels without link attributes: fall back to LNKCAP/LNKSTA from config space.
            gen_max, w_max = pcie.get("lnkcap_speed") or None, pcie.get("lnkcap_width")
            gen_cur, w_cur = pcie.get("lnksta_speed") or None, pcie.get("lnksta_width")
            speed_cur, speed_max = _GEN_SPEED.get(gen_cur or 0), _GEN_SPEED.get(gen_max or 0)
            if w_cur == 0 and raw.get("source") == TEXT_SOURCE:
                gen_cur, speed_cur = None, None  # no link trained: LnkSta's speed is stale (sysfs: "Unknown")
        if gen_max is None and w_max is None:
            return None
    return {"gen_current": gen_cur, "gen_max": gen_max, "speed_current": speed_cur, "speed_max": speed_max,
            "width_current": w_cur, "width_max": w_max}


def _acs(cfg: dict[str, Any], text: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    acs = cfg.get("acs")
    if isinstance(acs, dict) and "unknown" in acs and text:
        return None, str(acs["unknown"])  # not read from config space (lspci text): the source's reason
    if isinstance(acs, dict) and "unknown" in acs:
        return None, HEADER_ONLY if int(cfg.get("length") or 0) <= 64 else str(acs["unknown"])
    if "unreadable" in cfg:
        return None, str(cfg["unreadable"])
    if not isinstance(acs, dict):
        return None, None
    capable, enabled, redirect = _acs_bits(acs.get("cap"), acs.get("ctl"))
    return {"capable": list(capable), "enabled": list(enabled), "redirect": redirect}, None


@_per_fleet
def _acs_bits(cap: Any, ctl: Any) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    cap, ctl = int(cap or 0), int(ctl or 0)
    enabled = tuple(n for n, b in _ACS_BITS if ctl & b)
    return tuple(n for n, b in _ACS_BITS if cap & b), enabled, any(b in enabled for b in _REDIRECT)


@_per_fleet
def _kind(vendor_id: Any, class_id: Any) -> str:
    """The device kind from the raw vendor and class ids (before bridges get their roles)."""
    vendor, cls = _hex(vendor_id), _hex(class_id)
    if cls is None:
        return "other"
    if vendor == NVIDIA and cls >> 8 in (0x0300, 0x0302):
        return "gpu"
    if vendor == NVIDIA and cls == 0x068000:
        return "nvswitch"
    if cls >> 8 in (0x0200, 0x0207):
        return "nic"
    if cls == 0x010802:
        return "nvme"
    if cls >> 8 == 0x0600:
        return "host_bridge"
    if cls >> 8 in (0x0604, 0x0609):
        return "bridge"
    return "other"


def _text_kind(raw: dict[str, Any]) -> str | None:
    """The kind of a device from lspci text: lspci -nn prints the class without its prog-if
    (`[0302]`), so the subclass decides (NVIDIA's only 0680 functions are NVSwitches, 0108 is the
    NVMe subclass); without a class code, the kind the device's name gave (None: unknown)."""
    cls = _hex(raw.get("class"))
    if cls is None:
        name_kind = raw.get("name_kind")
        return str(name_kind) if name_kind else None
    kind = _kind(raw.get("vendor"), f"0x{cls:04x}00")  # prog-if 00: NVSwitches' own (068000)
    return "nvme" if kind == "other" and cls == 0x0108 else kind


@_per_fleet
def _family(vendor_id: Any, kind: str) -> str | None:
    vendor = _hex(vendor_id)
    if vendor is None:
        return None
    if vendor == 0x15B3:
        return "ConnectX" if kind == "nic" else "Mellanox"
    if vendor == 0x1000 and kind != "switch_port":
        return "Broadcom/LSI"
    return _VENDORS.get(vendor)


def _split_path(path: list[str], bdf: str) -> tuple[str | None, list[str]]:
    """(host bridge component, bridges from the root port down to the parent)."""
    host, chain = _split_str_path(tuple(path or ()), bdf)
    return host, list(chain)


# Memory as well as time: alike machines repeat the same bus ids and sysfs paths, and caching them
# makes every host's facts share one string per distinct address instead of a copy per host
# (controller_bench at 1,000 hosts: peak RSS 294 MB with, 311 MB without).
@functools.partial(_per_fleet, maxsize=1 << 16)
def _split_str_path(comps: tuple[str, ...], bdf: str) -> tuple[str | None, tuple[str, ...]]:
    low = [c.lower() for c in comps]
    if not low or low[-1] != bdf:
        return None, ()
    i = len(low) - 1
    while i > 0 and _BDF.match(low[i - 1]):
        i -= 1
    host = low[i - 1] if i > 0 else None
    return host, tuple(low[i:-1])


def _bdf(value: Any) -> str | None:
    """The device's own address, lower-case (one shared string per distinct address), or None."""
    return _str_bdf(value if isinstance(value, str) else str(value or ""))


@functools.partial(_per_fleet, maxsize=1 << 16)  # shared strings: see _split_str_path
def _str_bdf(text: str) -> str | None:
    bdf = text.lower()
    return bdf if _BDF.match(bdf) else None


def _device(raw: dict[str, Any]) -> dict[str, Any] | None:
    bdf = _bdf(raw.get("bdf"))
    if bdf is None:
        return None
    cfg = raw.get("config")
    if not isinstance(cfg, dict):
        cfg = {}
    host, chain = _split_path(raw.get("path") or [], bdf)
    numa = _int(raw.get("numa_node"))
    pcie = cfg.get("pcie")
    port_type, port_unknown = None, None
    text = raw.get("source") == TEXT_SOURCE
    if text and (not isinstance(pcie, dict) or pcie.get("port_type") is None):
        port_unknown = "needs lspci -vvv (PCI Express capability)"
    elif isinstance(pcie, dict) and "unknown" not in pcie:
        port_type = _PORT_TYPES.get(int(pcie.get("port_type", -1)), "other")
    elif isinstance(pcie, dict):
        port_unknown = HEADER_ONLY
    elif "unreadable" in cfg:
        port_unknown = str(cfg["unreadable"])
    acs, acs_unknown = _acs(cfg, text)
    rdma = [str(x) for x in raw.get("rdma") or []]
    netdevs = [str(x) for x in raw.get("netdevs") or []]
    vendor, cls = raw.get("vendor"), raw.get("class")
    kind = _text_kind(raw) if text else _kind(vendor, cls)
    d: dict[str, Any] = {
        "bdf": bdf,
        "vendor": vendor, "device": raw.get("device"),
        "subsystem_vendor": raw.get("subsystem_vendor"), "subsystem_device": raw.get("subsystem_device"),
        "class": cls,
        "kind": kind,
        "family": None,
        "label": None, "netdevs": netdevs, "rdma": rdma[0] if rdma else None,
        "driver": raw.get("driver"),
        "numa": numa if numa is not None and numa >= 0 else None,
        "local_cpulist": raw.get("local_cpulist"),
        "iommu_group": raw.get("iommu_group"),
        "host_bridge": host,
        "chain": chain,
        "parent": chain[-1] if chain else None,
        "port_type": port_type,
        "port_type_unknown": port_unknown,
        "switch": None,
        "link": _link(raw, cfg),
        "acs": acs,
        "acs_unknown": acs_unknown,
        "vf": None if text else bool(raw.get("vf")),  # lspci does not say which functions are virtual
    }
    if text and cls is None and kind is not None and kind != "bridge":
        d["kind_source"] = "name"  # read from the pci.ids name lspci -tv printed, not a class code
    if kind == "nic":
        d["label"] = d["rdma"] or (netdevs[0] if netdevs else None)
    return d


def _classify_bridges(devs: dict[str, dict[str, Any]]) -> None:
    """Give every bridge a role: root_port / upstream / downstream / plain bridge.

    With config space readable the PCIe port type decides.  Without it (non-root), infer from the
    position, as the reference §3.2 says: below a root port bridges alternate upstream/downstream;
    an upstream-position bridge counts as a switch port only if it has bridges below it or comes
    from a switch vendor (an ASPEED PCIe-to-PCI bridge with a VGA below stays a plain bridge).
    """
    children: dict[str, list[str]] | None = None  # only needed where the port type is unknown
    bridges = [b for b, d in devs.items() if d["kind"] == "bridge"]
    for bdf in sorted(bridges, key=lambda b: len(devs[b]["chain"])):  # stable: as sorting all devices
        d = devs[bdf]
        pt = d["port_type"]
        if pt is None:
            if children is None:
                children = {}
                for c in devs.values():
                    if c["parent"]:
                        children.setdefault(c["parent"], []).append(c["bdf"])
            parent = devs.get(d["parent"] or "")
            prole = parent.get("_role") if parent else None
            vendor = _hex(d["vendor"])
            has_bridge_kids = any(devs[c]["kind"] == "bridge" for c in children.get(bdf, []) if c in devs)
            if parent is None:
                role = "root"
            elif prole == "usp":
                role = "dsp"
            elif prole in ("root", "dsp") and (has_bridge_kids or vendor in _SWITCH_VENDORS):
                role = "usp"
            else:
                role = "bridge"
        else:
            role = {"root_port": "root", "upstream_port": "usp", "downstream_port": "dsp"}.get(pt, "bridge")
        d["_role"] = role
        d["kind"] = {"root": "root_port", "usp": "switch_port", "dsp": "switch_port"}.get(role, "bridge")
    for d in devs.values():
        d["family"] = _family(d["vendor"], d["kind"])


def _switch_of(devs: dict[str, dict[str, Any]], bdf: str) -> str | None:
    """The switch (its upstream port) a bridge belongs to; None for root ports and plain bridges."""
    d = devs.get(bdf)
    if not d:
        return None
    if d.get("_role") == "usp":
        return bdf
    if d.get("_role") == "dsp" and d["parent"] and devs.get(d["parent"], {}).get("_role") == "usp":
        return d["parent"]
    return None


def level(devs: dict[str, dict[str, Any]], a: str, b: str, numa_nodes: int) -> str | None:
    """The topo -m PCIe level between two devices (reference §4.3)."""
    if a == b:
        return "X"
    return _level_matrix(devs, [a, b], numa_nodes)[0][1]


def _level_matrix(devs: dict[str, dict[str, Any]], order: list[str], numa_nodes: int) -> list[list[str | None]]:
    """The topo -m PCIe level of every pair of devices in `order` (reference §4.3), "X" on the
    diagonal.  Levels are symmetric, so each unordered pair is computed once; each bridge's switch
    is looked up once per host.

    Different host bridges: NODE/SYS by NUMA node; same host bridge without a common bridge: PHB;
    otherwise the PCIe switches on the path: at most one -> PIX, more -> PXB."""
    n = len(order)
    matrix: list[list[str | None]] = [[None] * n for _ in range(n)]
    switch_of: dict[str, str | None] = {}

    def sw(x: str) -> str | None:
        if x not in switch_of:
            switch_of[x] = _switch_of(devs, x)
        return switch_of[x]

    info = [(devs[b]["host_bridge"], devs[b]["numa"], devs[b]["chain"]) for b in order]
    for i in range(n):
        matrix[i][i] = "X"
        hba, na, ca = info[i]
        row = matrix[i]
        for j in range(i + 1, n):
            hbb, nb, cb = info[j]
            if hba is None or hbb is None:
                continue
            cell: str | None
            if hba != hbb:
                if na is not None and nb is not None:
                    cell = "NODE" if na == nb else "SYS"
                else:
                    cell = "NODE" if numa_nodes <= 1 else None
            else:
                common, limit = 0, min(len(ca), len(cb))
                while common < limit and ca[common] == cb[common]:
                    common += 1
                if common == 0:
                    cell = "PHB"
                else:
                    switches = {sw(ca[common - 1])}
                    switches.update(sw(x) for x in ca[common:])
                    switches.update(sw(x) for x in cb[common:])
                    switches.discard(None)
                    cell = "PIX" if len(switches) <= 1 else "PXB"
            row[j] = matrix[j][i] = cell
    return matrix


def _tree(devs: dict[str, dict[str, Any]], by_bdf: list[str]) -> list[dict[str, Any]]:
    nodes: dict[str, dict[str, Any]] = {b: {"bdf": b, "children": []} for b in devs}
    roots: dict[str, dict[str, Any]] = {}
    for b in by_bdf:
        d = devs[b]
        if d["parent"] and d["parent"] in nodes:
            nodes[d["parent"]]["children"].append(nodes[b])
        else:
            hb = d["host_bridge"] or "?"
            r = roots.setdefault(hb, {"host_bridge": hb, "numa": None, "children": []})
            r["children"].append(nodes[b])
            if r["numa"] is None:
                r["numa"] = d["numa"]
    return [roots[k] for k in sorted(roots)]


def _below(devs: dict[str, dict[str, Any]], port: str, kinds: tuple[str, ...]) -> list[str]:
    return sorted(b for b, d in devs.items() if port in d["chain"] and d["kind"] in kinds)


def _min_known(a: Any, b: Any) -> Any:
    """The smaller of the two values that are not None; None when neither is truthy."""
    if not (a or b):
        return None
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)  # ties and type errors as min() over the two, in this order


def _gpu_counts(gpus: list[str], devs: dict[str, dict[str, Any]], nvidia: dict[str, Any]) -> dict[str, Any]:
    proc_present = bool(nvidia.get("proc_present"))
    proc_gpus = {str(g.get("bus_id", "")).lower(): g for g in nvidia.get("gpus") or [] if isinstance(g, dict)}
    dev_nodes = set(nvidia.get("dev_nodes") or [])
    passthrough = [b for b in gpus if devs[b]["driver"] in ("vfio-pci", "pci-stub")]
    host_gpus = [b for b in gpus if b not in passthrough]
    missing_proc = [b for b in host_gpus if b not in proc_gpus] if proc_present else []
    missing_dev = []
    if proc_present:
        for b in host_gpus:
            g = proc_gpus.get(b)
            minor = g.get("minor") if g else None
            if g is None or minor is None or f"nvidia{minor}" not in dev_nodes:
                missing_dev.append(b)
    return {
        "pci": len(gpus),
        "proc": len(proc_gpus) if proc_present else None,
        "dev": len(dev_nodes) if proc_present or dev_nodes else None,
        "driver_loaded": proc_present,
        "missing_from_proc": missing_proc,
        "missing_from_dev": missing_dev,
        "proc_not_on_pci": sorted(b for b in proc_gpus if b not in devs),
        "passthrough": passthrough,
    }


def _virtual(devs: dict[str, dict[str, Any]], by_bdf: list[str]) -> dict[str, Any]:
    evidence = []
    for b in by_bdf:
        what = _virtual_device(devs[b]["vendor"], devs[b]["device"])
        if what:
            evidence.append(f"{b}: {what}")
    return {"detected": bool(evidence), "evidence": evidence[:8]}


@_per_fleet
def _virtual_device(vendor: Any, device: Any) -> str | None:
    v, dv = _hex(vendor), _hex(device)
    if (v, dv) in _VIRTUAL_HOST_BRIDGES:
        return _VIRTUAL_HOST_BRIDGES[(v or 0, dv or 0)]
    if v in _VIRTUAL_VENDORS:
        return _VIRTUAL_VENDORS[v or 0]
    return None


def _devices(data: Any) -> dict[str, dict[str, Any]]:
    """The probe's devices by bus id, bridges given their roles, each device its outermost switch."""
    devs: dict[str, dict[str, Any]] = {}
    for raw in (data.get("devices") if isinstance(data, dict) else None) or []:
        if isinstance(raw, dict):
            d = _device(raw)
            if d:
                devs[d["bdf"]] = d
    _classify_bridges(devs)
    usps = {b for b, d in devs.items() if d.get("_role") == "usp"}
    for d in devs.values():
        d["switch"] = next((x for x in d["chain"] if x in usps), None)
    return devs


def _of_kind(devs: dict[str, dict[str, Any]], by_bdf: list[str], kind: str) -> list[str]:
    """Physical functions of one kind, in bus order (virtual functions are not devices of their own)."""
    return [b for b in by_bdf if devs[b]["kind"] == kind and not devs[b]["vf"]]


def _levels(devs: dict[str, dict[str, Any]], gpus: list[str], nics_all: list[str]) -> dict[str, Any]:
    """The topo -m view: GPUs then NICs, their labels and the level matrix."""
    # topo -m lists RDMA devices; a box without any lists every NIC so affinity still shows.
    nics = [b for b in nics_all if devs[b]["rdma"]] or nics_all
    numa_nodes = len({d["numa"] for d in devs.values() if d["numa"] is not None})
    order = gpus + nics
    return {"order": order,
            "labels": [f"GPU{i}" for i in range(len(gpus))] + [f"NIC{j}" for j in range(len(nics))],
            "nic_names": [devs[b]["label"] or b for b in nics],
            "matrix": _level_matrix(devs, order, numa_nodes)}


def _switches(devs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per physical switch (its outermost upstream port), with its downstream ports."""
    usps = [b for b, d in devs.items() if d.get("_role") == "usp"]
    dsps_below: dict[str | None, list[str]] = {}  # downstream ports by the port above them
    for b, d in devs.items():
        if d.get("_role") == "dsp":
            dsps_below.setdefault(d["parent"], []).append(b)
    switches = []
    for b in sorted(usps):
        d = devs[b]
        if d["switch"] is not None:
            continue  # an inner upstream port: part of the switch above it
        inner = [x for x in usps if b in devs[x]["chain"]]
        same_part = [x for x in inner if (devs[x]["vendor"], devs[x]["device"]) == (d["vendor"], d["device"])]
        switches.append({"upstream": b, "parent": d["parent"], "vendor": d["vendor"], "device": d["device"],
                         "family": d["family"], "levels": 1 + (1 if same_part else 0),
                         "nested": sorted(inner),
                         "downstream": sorted(x for up in {b, *same_part} for x in dsps_below.get(up, ()))})
    return switches


_GROUP_KEY = {"gpu": "gpus", "nic": "nics", "nvme": "nvme", "nvswitch": "nvswitches"}


def _uplinks(devs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Endpoints grouped by the switch or root port whose uplink they share."""
    groups: dict[tuple[str, str], list[str]] = {}
    for b, d in devs.items():
        if d["kind"] not in ("gpu", "nic", "nvme", "nvswitch", "other") or d["vf"]:
            continue
        if d["switch"]:
            groups.setdefault(("switch", d["switch"]), []).append(b)
        elif d["chain"] and devs.get(d["chain"][0], {}).get("_role") == "root":
            groups.setdefault(("root_port", d["chain"][0]), []).append(b)
    uplinks = []
    for (gtype, gid), members in sorted(groups.items(), key=lambda kv: kv[0][1]):
        g: dict[str, Any] = {"id": gid, "type": gtype, "port": devs[gid]["parent"] if gtype == "switch" else gid,
                             "gpus": [], "nics": [], "nvme": [], "nvswitches": [], "other": []}
        for m in sorted(members):
            g[_GROUP_KEY.get(devs[m]["kind"], "other")].append(m)
        if g["gpus"] or g["nics"] or gtype == "switch":
            uplinks.append(g)
    return uplinks


def _downgraded(devs: dict[str, dict[str, Any]], by_bdf: list[str]) -> list[dict[str, Any]]:
    """Links running below the maximum both their ends support."""
    out = []
    for b in by_bdf:
        d = devs[b]
        link = d["link"]
        if not link or d.get("_role") in ("root", "dsp") or not link["width_current"]:
            continue  # ports report the link below them; that link is reported by the device there
        parent = devs.get(d["parent"] or "")
        plink = parent["link"] if parent and parent.get("_role") in ("root", "dsp") else None
        gmax, wmax = link["gen_max"], link["width_max"]
        if plink:
            gmax, wmax = _min_known(gmax, plink["gen_max"]), _min_known(wmax, plink["width_max"])
        gcur, wcur = link["gen_current"], link["width_current"]
        if (gcur and gmax and gcur < gmax) or (wcur and wmax and wcur < wmax):
            out.append({"bdf": b, "kind": d["kind"], "gen_current": gcur, "gen_max": gmax,
                        "speed_current": link["speed_current"], "speed_max": _GEN_SPEED.get(gmax or 0),
                        "width_current": wcur, "width_max": wmax})
    return out


def _acs_redirects(devs: dict[str, dict[str, Any]], by_bdf: list[str]) -> list[dict[str, Any]]:
    """Ports above GPUs whose ACS redirect bits send peer traffic up to the root complex."""
    out = []
    for b in by_bdf:
        d = devs[b]
        if d.get("_role") not in ("dsp", "root") or not d["acs"] or not d["acs"]["redirect"]:
            continue
        below = _below(devs, b, ("gpu",))
        if not below:
            continue
        group = d["switch"] or (b if d.get("_role") == "dsp" else None)
        peers = sorted(x for x, e in devs.items() if e["kind"] in ("gpu", "nic") and x not in below
                       and group and (e["switch"] == group or group in e["chain"]))
        out.append({"port": b, "port_role": "downstream_port" if d["_role"] == "dsp" else "root_port",
                    "enabled": [x for x in d["acs"]["enabled"] if x in _REDIRECT], "gpus": below, "peers": peers})
    return out


_ROLES = {"root": "root_port", "usp": "upstream_port", "dsp": "downstream_port", "bridge": "bridge"}


def _finish_devices(devs: dict[str, dict[str, Any]], by_bdf: list[str], nvidia: dict[str, Any]) -> list[Any]:  # PcieDevice records, built key by key
    """The devices as written: the working role becomes `role`, GPUs get the driver's model."""
    models = {str(g.get("bus_id", "")).lower(): g.get("model") for g in nvidia.get("gpus") or [] if isinstance(g, dict)}
    out = []
    for b in by_bdf:
        d = devs[b]  # the working record itself: no per-device copy
        d["role"] = _ROLES.get(d.pop("_role", None) or "")  # port_type, or inferred from the tree without root
        if d["kind"] == "gpu":
            d["model"] = models.get(b)
        out.append(d)
    return out


_AER_TOTALS = (("correctable", "TOTAL_ERR_COR"), ("nonfatal", "TOTAL_ERR_NONFATAL"), ("fatal", "TOTAL_ERR_FATAL"))


def _aer_total(counts: Any, total_key: str) -> int | None:
    if not isinstance(counts, dict):
        return None
    if type(counts.get(total_key)) is int:  # the kernel's own total: the usual case, without the copy below
        return counts[total_key]
    nums = {str(k): v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}
    if total_key in nums:
        return nums[total_key]
    return sum(v for k, v in nums.items() if not k.startswith("TOTAL")) if nums else None


def _aer_end(bdf: str, counts: dict[str, Any]) -> dict[str, Any]:
    """One end's counters by kind, only those that counted: a healthy link's ~50 zero counters
    per end would be most of the PCIe facts, and the link's totals already say they were read."""
    end: dict[str, Any] = {"device": bdf}
    for key, _total in _AER_TOTALS:
        kind = counts.get(key)
        if not isinstance(kind, dict):
            end[key] = None
        elif any(kind.values()):
            end[key] = {str(k): v for k, v in kind.items() if type(v) is int and v}
        else:  # every value falsy, so none is kept: told in C, without the per-counter loop (the usual case)
            end[key] = {}
    return end


def _aer_links(devs: dict[str, dict[str, Any]], data: Any, endpoints: list[str]) -> list[Any]:
    """Each link on the GPUs' and NICs' upstream chains, with the AER counts of both its ends.

    A link joins an upstream-facing end (the endpoint, or a switch's upstream port) to the root or
    switch downstream port above it; a switch's internal usp/dsp hop is not a link."""
    raw_aer = {str(r.get("bdf", "")).lower(): r.get("aer") for r in (data.get("devices") or [] if isinstance(data, dict)
                                                                      else []) if isinstance(r, dict)}
    if not any(isinstance(v, dict) for v in raw_aer.values()):
        return []  # a probe before pcie 1.1, or a kernel without the aer_dev_* files
    serves: dict[str, set[str]] = {}
    for ep in endpoints:
        for x in [*devs[ep]["chain"], ep]:
            if x == ep or devs.get(x, {}).get("_role") == "usp":
                serves.setdefault(x, set()).add(ep)
    out = []
    for x in sorted(serves):
        d = devs[x]
        parent = devs.get(d["parent"] or "")
        partner = d["parent"] if parent and parent.get("_role") in ("root", "dsp") else None
        read: dict[str, dict[str, Any]] = {}
        for b in (x, partner):
            counts = raw_aer.get(b) if b else None
            if b and isinstance(counts, dict):
                read[b] = counts
        link = d["link"] or {}
        rec: dict[str, Any] = {"device": x, "kind": d["kind"], "partner": partner, "serves": sorted(serves[x]),
                               "gen_current": link.get("gen_current"), "width_current": link.get("width_current"),
                               "speed_current": link.get("speed_current")}
        for key, total in _AER_TOTALS:
            vals = [n for n in (_aer_total(e.get(key), total) for e in read.values()) if n is not None]
            rec[key] = sum(vals) if vals else None
        rec["ends"] = [_aer_end(b, counts) for b, counts in read.items()]
        out.append(rec)
    return out


def normalize(data: dict[str, Any]) -> PcieFacts:
    devs = _devices(data)
    by_bdf = sorted(devs)
    gpus, nics = _of_kind(devs, by_bdf, "gpu"), _of_kind(devs, by_bdf, "nic")
    aer_links = _aer_links(devs, data, gpus + nics)  # before _finish_devices drops the working roles
    levels = _levels(devs, gpus, nics)
    switches, uplinks = _switches(devs), _uplinks(devs)
    downgraded, acs = _downgraded(devs, by_bdf), _acs_redirects(devs, by_bdf)
    needs_root = sorted({f for d in devs.values() for f, u in (("port_type", d["port_type_unknown"]),
                                                                ("acs", d["acs_unknown"])) if u == HEADER_ONLY})
    access = data.get("config_access") if isinstance(data, dict) else None
    nvidia: dict[str, Any] = data["nvidia"] if isinstance(data, dict) and isinstance(data.get("nvidia"), dict) else {}
    virtual = _virtual(devs, by_bdf)
    tree = _tree(devs, by_bdf)
    return {
        "config_access": access or ("header_only" if needs_root else "full"),
        "needs_root": needs_root,
        "virtual_platform": virtual,
        "devices": _finish_devices(devs, by_bdf, nvidia),
        "tree": tree,
        "gpus": gpus, "nics": nics, "nvswitches": _of_kind(devs, by_bdf, "nvswitch"),
        "nvme": _of_kind(devs, by_bdf, "nvme"),
        "switches": switches,
        "uplinks": uplinks,
        "levels": levels,
        "downgraded": downgraded,
        "acs": acs,
        "gpu_counts": _gpu_counts(gpus, devs, nvidia),
        "nvswitch_nodes": len(nvidia.get("nvswitch_nodes") or []),
        "iommu": data.get("iommu") if isinstance(data, dict) else None,
        "aer_links": aer_links,
    }
