# Probe `nic`: InfiniBand/RoCE and Ethernet ports from sysfs, without root.  Reads
# /sys/class/infiniband/<hca>/ (hca_type, board_id, fw_ver, node_guid, sys_image_guid; per port state, phys_state,
# rate, link_layer, the GUID of GID 0, counters/, hw_counters/) and /sys/class/net/<if>/ (operstate, carrier, speed,
# carrier_changes, mtu, driver) for interfaces backed by a PCI function; each is tied to its PCI
# function through the `device` link, so the PCIe tree (probe `pcie`) joins it.  Raw values only:
# the controller judges (orchestrator/facts/normalize/nic.py).  Argument `root` prefixes every
# path so a fixture tree stands in for a machine.
import os
import re

PROBE_NAME = "nic"
PROBE_VERSION = "1.2"
PROBE_DESCRIPTION = "InfiniBand/RoCE and Ethernet ports: state, rate, link layer, firmware, error counters, PCI function"
PASSIVE = True

_BDF = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_MAX_COUNTERS = 200  # per directory: hw_counters of a new HCA can list well over 100


def _p(ctx, path):
    return os.path.join(ctx.args.get("root") or "/", path.lstrip("/"))


def _read(path):
    """Text or None; a file that exists but cannot be read (EINVAL on a down link) is None too."""
    try:
        with open(path, "r", errors="replace") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _pci_function(path):
    """The PCI bus id a class device's `device` link resolves to, else None (virtual devices)."""
    try:
        real = os.path.realpath(os.path.join(path, "device"))
    except OSError:
        return None
    name = os.path.basename(real)
    return name if _BDF.match(name) else None


def _driver(path):
    try:
        return os.path.basename(os.readlink(os.path.join(path, "device", "driver")))
    except OSError:
        return None


def _counters(path):
    out = {}
    for name in _listdir(path)[:_MAX_COUNTERS]:
        v = _read(os.path.join(path, name))
        if v is not None and re.match(r"^\d+$", v):
            out[name] = int(v)
    return out


def _port_guid(gid):
    """The port GUID ibstat prints: the interface id of the port's GID 0 (its last 64 bits)."""
    parts = (gid or "").split(":")
    if len(parts) != 8 or not all(re.match(r"^[0-9a-fA-F]{4}$", x) for x in parts):
        return None
    tail = [x.lower() for x in parts[4:]]
    return None if tail == ["0000"] * 4 else ":".join(tail)


def _ib_port(base, port):
    d = os.path.join(base, "ports", port)
    ndev = _read(os.path.join(d, "gid_attrs", "ndevs", "0"))
    return {
        "port_guid": _port_guid(_read(os.path.join(d, "gids", "0"))),
        "port": int(port) if fp_is_digits(port) else port,
        "state": _read(os.path.join(d, "state")),
        "phys_state": _read(os.path.join(d, "phys_state")),
        "rate": _read(os.path.join(d, "rate")),
        "link_layer": _read(os.path.join(d, "link_layer")),
        "netdev": ndev if ndev and ndev != "<NULL>" else None,
        "counters": _counters(os.path.join(d, "counters")),
        "hw_counters": _counters(os.path.join(d, "hw_counters")),
    }


def _infiniband(ctx):
    base = _p(ctx, "/sys/class/infiniband")
    if not os.path.isdir(base):
        return None
    out = []
    for name in _listdir(base):
        d = os.path.join(base, name)
        dev = {
            "name": name,
            "bus_id": _pci_function(d),
            "driver": _driver(d),
            "hca_type": _read(os.path.join(d, "hca_type")),
            "board_id": _read(os.path.join(d, "board_id")),
            "fw_ver": _read(os.path.join(d, "fw_ver")),
            "node_guid": _read(os.path.join(d, "node_guid")),
            "sys_image_guid": _read(os.path.join(d, "sys_image_guid")),
            "ports": [],
        }
        for port in _listdir(os.path.join(d, "ports")):
            if ctx.remaining() < 1.0:
                ctx.warn("deadline near: stopped reading InfiniBand ports")
                break
            dev["ports"].append(_ib_port(d, port))
        out.append(dev)
    return out


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _net(ctx):
    base = _p(ctx, "/sys/class/net")
    out = []
    for name in _listdir(base):
        d = os.path.join(base, name)
        bus = _pci_function(d)
        if bus is None:
            continue  # lo, bridges, veths, bonds: no PCI function to join
        carrier = _read(os.path.join(d, "carrier"))
        out.append({
            "name": name,
            "bus_id": bus,
            "driver": _driver(d),
            "operstate": _read(os.path.join(d, "operstate")),
            "carrier": None if carrier is None else carrier == "1",
            "speed": _int(_read(os.path.join(d, "speed"))),
            "carrier_changes": _int(_read(os.path.join(d, "carrier_changes"))),
            "mtu": _int(_read(os.path.join(d, "mtu"))),
            "type": _int(_read(os.path.join(d, "type"))),
        })
    return out


def _gdr(ctx):
    """GPUDirect RDMA through a peer-memory client: nvidia_peermem (driver 470+) or the older
    nv_peer_mem module, as /sys/module and the memory_peers registry show them."""
    peers = _p(ctx, "/sys/kernel/mm/memory_peers")
    return {
        "nvidia_peermem": os.path.isdir(_p(ctx, "/sys/module/nvidia_peermem")),
        "nv_peer_mem": os.path.isdir(_p(ctx, "/sys/module/nv_peer_mem")),
        "memory_peers": _listdir(peers) if os.path.isdir(peers) else None,
    }


def collect(ctx):
    data = {"infiniband": None, "net": [], "gdr": None}
    ctx.partial = data
    data["infiniband"] = _infiniband(ctx)
    data["net"] = _net(ctx)
    data["gdr"] = _gdr(ctx)
    return data
