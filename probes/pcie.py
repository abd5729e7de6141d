# Probe `pcie`: the PCIe tree from sysfs (what `lspci -tv` shows) without lspci and, where possible,
# without root.  Reads /sys/bus/pci/devices (attributes + binary config space), the resolved sysfs
# paths for the upstream chain, /sys/class/{infiniband,net} for NIC names, /sys/kernel/iommu_groups,
# /proc/driver/nvidia/gpus/*/information and the /dev/nvidia[0-9]* names.  Argument `root`
# (default "/") prefixes every path so fixture trees stand in for a machine.  Raw facts only: the
# controller classifies devices and computes levels (orchestrator/facts/normalize/pcie.py).
import os
import re
import struct

PROBE_NAME = "pcie"
PROBE_VERSION = "1.1"
PROBE_DESCRIPTION = "PCIe tree from sysfs: devices, upstream chains, link speed/width, port types, ACS, AER counters, NVIDIA /proc and /dev"
PASSIVE = True

_BDF = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ATTRS_HEX = ("vendor", "device", "subsystem_vendor", "subsystem_device", "class", "revision")
_ATTRS_TEXT = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width",
               "local_cpulist", "numa_node")
_HEADER_ONLY = "config space beyond 64 bytes is readable by root only"


def _p(ctx, path):
    return os.path.join(ctx.args.get("root") or "/", path.lstrip("/"))


def _read(ctx, path):
    try:
        return ctx.read_text(path)
    except PermissionError:
        return None


def _link_name(path):
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def _u16(buf, off):
    return struct.unpack_from("<H", buf, off)[0] if off + 2 <= len(buf) else None


def _u32(buf, off):
    return struct.unpack_from("<I", buf, off)[0] if off + 4 <= len(buf) else None


def _parse_config(buf):
    """Decode what the controller needs from config space; fields beyond the readable part are
    needs_root markers, never absent."""
    out = {"length": len(buf)}
    if len(buf) < 64:
        out["unreadable"] = "config space shorter than the 64-byte header (%d bytes)" % len(buf)
        return out
    out["header_type"] = buf[0x0e] & 0x7f
    status = _u16(buf, 0x06)
    has_caps = bool(status & 0x10)
    out["has_capabilities"] = has_caps
    if out["header_type"] == 1:
        out["secondary_bus"] = buf[0x19]
        out["subordinate_bus"] = buf[0x1a]
    if len(buf) <= 64:
        for key in ("pcie", "acs", "bridge_subsystem"):
            out[key] = needs_root(_HEADER_ONLY)
        return out
    out["pcie"] = None
    out["acs"] = None
    out["bridge_subsystem"] = None
    ptr = buf[0x34] & 0xfc if has_caps else 0
    seen = set()
    while ptr and ptr not in seen and ptr + 2 <= len(buf) and len(seen) < 48:
        seen.add(ptr)
        cap_id, nxt = buf[ptr], buf[ptr + 1] & 0xfc
        if cap_id == 0x10 and ptr + 0x14 <= len(buf):
            flags = _u16(buf, ptr + 0x02)
            lnkcap = _u32(buf, ptr + 0x0c)
            lnksta = _u16(buf, ptr + 0x12)
            out["pcie"] = {
                "version": flags & 0x0f,
                "port_type": (flags >> 4) & 0x0f,
                "slot": bool(flags & 0x0100),
                "lnkcap_speed": lnkcap & 0x0f,
                "lnkcap_width": (lnkcap >> 4) & 0x3f,
                "port_number": (lnkcap >> 24) & 0xff,
                "lnksta_speed": lnksta & 0x0f,
                "lnksta_width": (lnksta >> 4) & 0x3f,
                "dll_active": bool(lnksta & 0x2000),
            }
        elif cap_id == 0x0d and ptr + 8 <= len(buf):
            out["bridge_subsystem"] = {"vendor": "0x%04x" % _u16(buf, ptr + 4),
                                       "device": "0x%04x" % _u16(buf, ptr + 6)}
        ptr = nxt
    if out["pcie"] is None:
        out["acs"] = None  # conventional PCI: no extended space, ACS cannot exist
    elif len(buf) <= 256:
        # A PCIe function always has 4 KiB; seeing 256 bytes means the platform (often a VM
        # without ECAM) hides the extended space, so ACS is unknown rather than absent.
        out["acs"] = {"unknown": "extended config space not exposed (%d bytes)" % len(buf)}
    else:
        off = 0x100
        seen = set()
        while off and off not in seen and off + 8 <= len(buf) and len(seen) < 96:
            seen.add(off)
            hdr = _u32(buf, off)
            if hdr in (0, 0xffffffff):
                break
            if hdr & 0xffff == 0x0d:
                out["acs"] = {"cap": _u16(buf, off + 4), "ctl": _u16(buf, off + 6)}
                break
            off = (hdr >> 20) & 0xffc
    return out


def _read_config(path):
    try:
        with open(path, "rb") as f:
            return f.read(4096), None
    except PermissionError:
        return None, "config not readable (permission denied)"
    except OSError as e:
        return None, "config not readable: %s" % e


def _class_names(ctx, cls):
    """Map BDF -> names from /sys/class/<cls>/*/device (RDMA devices, netdevs)."""
    out = {}
    base = _p(ctx, "/sys/class/" + cls)
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for name in names:
        target = os.path.realpath(os.path.join(base, name, "device"))
        # virtio NICs point at .../0000:00:03.0/virtio2: the PCI function is the nearest BDF above.
        bdfs = [c for c in target.split(os.sep) if _BDF.match(c)]
        if bdfs and os.path.exists(os.path.join(base, name, "device")):
            out.setdefault(bdfs[-1], []).append(name)
    return out


def _nvidia(ctx):
    proc = _p(ctx, "/proc/driver/nvidia")
    data = {"proc_present": os.path.isdir(proc), "version": None, "gpus": [], "dev_nodes": []}
    ver = _read(ctx, os.path.join(proc, "version"))
    if ver:
        m = re.search(r"NVRM version:.*?(\d+\.\d+(?:\.\d+)?)", ver)
        data["version"] = m.group(1) if m else None
    gdir = os.path.join(proc, "gpus")
    try:
        entries = sorted(os.listdir(gdir))
    except OSError:
        entries = []
    for entry in entries:
        info = {"dir": entry}
        text = _read(ctx, os.path.join(gdir, entry, "information")) or ""
        for line in text.splitlines():
            if ":" not in line:
                continue
            k, v = line.split(":", 1)
            k, v = k.strip().lower(), v.strip()
            if k == "model":
                info["model"] = v
            elif k == "gpu uuid":
                info["uuid"] = v
            elif k == "bus location":
                info["bus_id"] = v.lower()
            elif k == "device minor":
                try:
                    info["minor"] = int(v)
                except ValueError:
                    info["minor"] = None
            elif k in ("gpu excluded", "blacklisted"):
                info["excluded"] = v.lower().startswith("y")
        info.setdefault("bus_id", entry.lower())
        data["gpus"].append(info)
    try:
        data["dev_nodes"] = sorted(n for n in os.listdir(_p(ctx, "/dev")) if re.match(r"^nvidia\d+$", n))
    except OSError:
        pass
    try:
        data["nvswitch_nodes"] = sorted(n for n in os.listdir(_p(ctx, "/dev"))
                                        if re.match(r"^nvidia-nvswitch\d+$", n))
    except OSError:
        data["nvswitch_nodes"] = []
    return data


def _iommu(ctx):
    base = _p(ctx, "/sys/kernel/iommu_groups")
    try:
        groups = os.listdir(base)
    except OSError:
        return {"present": False, "groups": 0, "types": {}}
    types = {}
    for g in groups:
        t = _read(ctx, os.path.join(base, g, "type"))
        if t:
            types[t] = types.get(t, 0) + 1
    return {"present": True, "groups": len(groups), "types": types}


_AER_FILES = (("correctable", "aer_dev_correctable"), ("fatal", "aer_dev_fatal"), ("nonfatal", "aer_dev_nonfatal"))


def _aer(ctx, link):
    """The AER counters the kernel keeps per device (Linux 5.8+: aer_dev_correctable, aer_dev_fatal,
    aer_dev_nonfatal, world-readable; lines "RxErr 0" ... "TOTAL_ERR_COR 0"), cumulative since boot.
    None when the device has no AER capability or the kernel no such files."""
    out = {}
    for key, name in _AER_FILES:
        try:
            text = ctx.read_text(os.path.join(link, name))
        except PermissionError:
            out[key] = needs_root("%s not readable" % name)
            continue
        if text is None:
            continue
        counts = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and fp_is_digits(parts[1]):
                counts[parts[0]] = int(parts[1])
        out[key] = counts
    return out or None


def _device(ctx, bdf, devices_dir, sys_devices):
    link = os.path.join(devices_dir, bdf)
    d = {"bdf": bdf.lower()}
    real = os.path.realpath(link)
    rel = os.path.relpath(real, sys_devices)
    # The components after /sys/devices: host bridge ("pci0000:15"), then the bridges, then bdf.
    d["path"] = [] if rel.startswith("..") else rel.split(os.sep)
    for a in _ATTRS_HEX:
        d[a] = _read(ctx, os.path.join(link, a))
    for a in _ATTRS_TEXT:
        d[a] = _read(ctx, os.path.join(link, a))
    d["driver"] = _link_name(os.path.join(link, "driver"))
    g = _link_name(os.path.join(link, "iommu_group"))
    d["iommu_group"] = int(g) if g and fp_is_digits(g) else None
    d["vf"] = os.path.exists(os.path.join(link, "physfn"))
    buf, why = _read_config(os.path.join(link, "config"))
    d["config"] = _parse_config(buf) if buf is not None else {"unreadable": why}
    d["aer"] = _aer(ctx, link)
    return d


def collect(ctx):
    root = os.path.realpath(ctx.args.get("root") or "/")
    ctx.args["root"] = root
    devices_dir = _p(ctx, "/sys/bus/pci/devices")
    sys_devices = _p(ctx, "/sys/devices")
    try:
        bdfs = sorted(n for n in os.listdir(devices_dir) if _BDF.match(n.lower()))
    except OSError as e:
        raise Unsupported("no PCI bus in sysfs (%s): %s" % (devices_dir, e)) from None
    rdma = _class_names(ctx, "infiniband")
    net = _class_names(ctx, "net")
    data = {"devices": [], "nvidia": None, "iommu": None}
    ctx.partial = data
    for bdf in bdfs:
        d = _device(ctx, bdf, devices_dir, sys_devices)
        d["rdma"] = rdma.get(d["bdf"], [])
        d["netdevs"] = net.get(d["bdf"], [])
        data["devices"].append(d)
    data["nvidia"] = _nvidia(ctx)
    data["iommu"] = _iommu(ctx)
    lengths = [d["config"].get("length") for d in data["devices"]]
    if not lengths or all(n is None for n in lengths):
        data["config_access"] = "none"
    elif any(n is not None and n <= 64 for n in lengths):
        data["config_access"] = "header_only"
    else:
        data["config_access"] = "full"
    return data

