"""Build a fixture machine's sysfs/proc/dev tree from a compact YAML description.

The tree is laid out as on a real Linux host, so the `pcie` probe runs unchanged against it:
`sys/devices/pci<dom>:<bus>/<root port>/.../<bdf>/` holds the attributes and a binary `config`,
`sys/bus/pci/devices/<bdf>` is a *relative* symlink into it (realpath gives the upstream chain),
`driver` and `iommu_group` are symlinks, `/sys/class/{infiniband,net}/<name>/device` point at the
NIC functions, `/proc/driver/nvidia/gpus/<bdf>/information` and `/dev/nvidia<minor>` exist for GPUs
bound to the driver.  `/dev` nodes are empty files: the probe checks names only.

Description format (`machines/<name>.pcie.yaml`), see dgx-h100.pcie.yaml for a full example:

* `types`: reusable device kinds: vendor, device, class, subsys [vendor, device], driver, port
  (root|usp|dsp|endpoint|pci_bridge), link "<gen>x<width>" (max), pcie (false: conventional PCI),
  acs (capability bits of a port), dsp (the downstream-port type of a switch), rdma (name prefix,
  numbered in BDF order), model (the /proc Model line).
* `roots`: host bridges `{bus: pci0000:15, numa: 0, devices: [node...]}`; a node is
  `{bdf, type, children: [node...]}` or, for a switch upstream port, `ports: {<dsp bdf>: node|null}`.
  Node overrides: numa, link (max), link_cur ("1x8"), acs_ctl ([RR, CR]), driver, proc/dev
  (false: missing from /proc/driver/nvidia or /dev), rdma, net.
* `base: <name>` inherits another description; `patch: [{bdf, set: {...}}]` changes nodes,
  `move: [{bdf, under, new_bdf}]` re-plugs a card; other top-level keys replace the base's.
* `config_bytes`: 4096 (root), 256 (VM without ECAM) or 64 (non-root reader).
* `aer` on a node: `{correctable: {RxErr: 12}, fatal: {..}, nonfatal: {..}}` AER counts since boot,
  written to aer_dev_* in the kernel's format; `aer_files: false` (a kernel before 5.8) writes none.
* `nvidia: {driver: <version>}` writes /proc/driver/nvidia (null: driver not loaded, with
  `drivers_unloaded: [nvidia]` so no GPU is bound); `cpus` is the CPU list of NUMA-less devices.
* A name `<base>--<fault>` without a file of its own (a fault of the NVML or P2P layer) builds
  its base machine.
* `levels`, `findings`, `expect`: what tests expect of this machine (not used by the builder).
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

MACHINES_DIR = Path(__file__).resolve().parent / "machines"
SUFFIX = ".pcie.yaml"

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_SPEEDS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
           5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}
_PORT_TYPE = {"endpoint": 0, "root": 4, "usp": 5, "dsp": 6, "pci_bridge": 7}
_ACS_BITS = {"SV": 0x01, "TB": 0x02, "RR": 0x04, "CR": 0x08, "UF": 0x10, "EC": 0x20, "DT": 0x40}


# The AER counter names the kernel prints in aer_dev_correctable / aer_dev_fatal / aer_dev_nonfatal
# (drivers/pci/pcie/aer.c: one "<name> <count>" line per named bit, then the file's total line).
AER_CORRECTABLE = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF")
AER_UNCORRECTABLE = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP",
                     "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr",
                     "PoisonTLPBlocked")
_AER_FILES = (("correctable", "aer_dev_correctable", AER_CORRECTABLE, "TOTAL_ERR_COR"),
              ("fatal", "aer_dev_fatal", AER_UNCORRECTABLE, "TOTAL_ERR_FATAL"),
              ("nonfatal", "aer_dev_nonfatal", AER_UNCORRECTABLE, "TOTAL_ERR_NONFATAL"))


def aer_text(names: tuple[str, ...], total: str, counts: dict[str, int]) -> str:
    """One AER sysfs file as the kernel writes it."""
    unknown = set(counts) - set(names)
    if unknown:
        raise FixtureError(f"unknown AER counters {sorted(unknown)}; known: {', '.join(names)}")
    lines = [f"{n} {int(counts.get(n, 0))}" for n in names]
    return "\n".join([*lines, f"{total} {sum(int(v) for v in counts.values())}"]) + "\n"


class FixtureError(ValueError):
    """A machine description that cannot be built; the message says which and why."""


def list_machines() -> list[str]:
    """Every fixture machine, variants included (`_common` holds shared device types)."""
    return sorted(p.name[: -len(SUFFIX)] for p in MACHINES_DIR.glob("*" + SUFFIX) if not p.name.startswith("_"))


def _common_types() -> dict[str, Any]:
    path = MACHINES_DIR / ("_common" + SUFFIX)
    data = yaml.safe_load(path.read_text()) if path.is_file() else None
    return dict((data or {}).get("types") or {})


def load_description(name_or_description: str | dict[str, Any]) -> dict[str, Any]:
    """The fully resolved description (bases merged, patches applied) of a machine."""
    if isinstance(name_or_description, dict):
        desc = copy.deepcopy(name_or_description)
        desc.setdefault("name", "custom")
    else:
        path = MACHINES_DIR / (name_or_description + SUFFIX)
        base_name = name_or_description.split("--", 1)[0]
        if not path.is_file() and "--" in name_or_description and (MACHINES_DIR / (base_name + SUFFIX)).is_file():
            # A fault of another layer (NVML, P2P) looks like its base machine on the PCIe bus.
            desc = load_description(base_name)
            desc["name"] = name_or_description
            for key in ("levels", "findings"):
                desc.setdefault(key, None)
            return desc
        if not path.is_file():
            raise FixtureError(f"unknown fixture machine {name_or_description!r}; known: {', '.join(list_machines())}")
        desc = yaml.safe_load(path.read_text())
        if not isinstance(desc, dict):
            raise FixtureError(f"{path}: expected a mapping")
        desc["name"] = name_or_description
    base_name = desc.pop("base", None)
    if base_name:
        base = load_description(base_name)
        patches = desc.pop("patch", [])
        moves = desc.pop("move", [])
        merged = base
        for k, v in desc.items():
            merged[k] = v
        _apply_moves(merged, moves)
        _apply_patches(merged, patches)
        desc = merged
    return desc


def _walk(nodes: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for n in nodes:
        yield n
        yield from _walk(_children(n))


def _children(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Children of a node; a switch's `ports` mapping becomes downstream-port nodes once."""
    if "ports" in node:
        kids = node.setdefault("children", [])
        for dsp_bdf, child in node.pop("ports").items():
            kids.append({"bdf": dsp_bdf, "type": node.get("dsp_type") or "__dsp__",
                         "children": [child] if child else []})
    return node.setdefault("children", [])


def _all_nodes(desc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for r in desc.get("roots", []):
        yield from _walk(r.setdefault("devices", []))


def _find(desc: dict[str, Any], bdf: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    for r in desc.get("roots", []):
        stack = [r["devices"]]
        while stack:
            siblings = stack.pop()
            for n in siblings:
                if n.get("bdf") == bdf:
                    return n, siblings
                stack.append(_children(n))
    raise FixtureError(f"{desc.get('name')}: no device {bdf} to change")


def _apply_patches(desc: dict[str, Any], patches: list[dict[str, Any]]) -> None:
    for p in patches or []:
        node, _ = _find(desc, p["bdf"])
        node.update(p.get("set", {}))


def _apply_moves(desc: dict[str, Any], moves: list[dict[str, Any]]) -> None:
    for m in moves or []:
        node, siblings = _find(desc, m["bdf"])
        siblings.remove(node)
        target, _ = _find(desc, m["under"])
        node["bdf"] = m.get("new_bdf", node["bdf"])
        _children(target).append(node)


def _gw(text: Any) -> tuple[int, int]:
    gen, width = str(text).lower().split("x")
    return int(gen), int(width)


class _Builder:
    def __init__(self, desc: dict[str, Any], dest: Path) -> None:
        self.desc = desc
        self.dest = dest
        self.types: dict[str, dict[str, Any]] = {**_common_types(), **(desc.get("types") or {})}
        self.full = int(desc.get("config_bytes", 4096))
        self.cpus: dict[Any, str] = {int(k): v for k, v in (desc.get("numa") or {}).items()}
        # local_cpulist of a device without NUMA node is every online CPU, as the kernel prints it
        self.all_cpus = str(desc.get("cpus") or ",".join(self.cpus.values()) or "0-3")
        self.unloaded = set(desc.get("drivers_unloaded") or [])
        self.iommu = bool(desc.get("iommu", True))
        self.next_group = 0
        self.rdma_counters: dict[str, int] = {}

    # -- helpers ---------------------------------------------------------------------------
    def type_of(self, node: dict[str, Any], parent_type: dict[str, Any] | None) -> dict[str, Any]:
        tname = node.get("type")
        if tname == "__dsp__":
            tname = (parent_type or {}).get("dsp")
        if tname not in self.types:
            raise FixtureError(f"{self.desc['name']}: device {node.get('bdf')} has unknown type {tname!r}")
        t = dict(self.types[tname])
        t["_name"] = tname
        return t

    def path(self, rel: str) -> Path:
        p = self.dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write(self, rel: str, text: str) -> None:
        self.path(rel).write_text(text + "\n")

    def symlink(self, link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(os.path.relpath(target, link.parent), link)

    # -- build -----------------------------------------------------------------------------
    def build(self) -> None:
        for r in self.desc.get("roots", []):
            hb = r["bus"]
            (self.dest / "sys/devices" / hb).mkdir(parents=True, exist_ok=True)
            numa = r.get("numa", -1)
            for node in r.get("devices", []):
                self.resolve(node, None, None, numa)
            for node in r.get("devices", []):
                self.emit(node, Path("sys/devices") / hb, None)
        self.emit_nvidia()
        (self.dest / "dev").mkdir(parents=True, exist_ok=True)

    def resolve(self, node: dict[str, Any], parent: dict[str, Any] | None,
                parent_type: dict[str, Any] | None, numa: int) -> None:
        """Fill in derived values: type, numa, trained link (both ends agree), RDMA names."""
        if not _BDF.match(str(node.get("bdf", ""))):
            raise FixtureError(f"{self.desc['name']}: {node.get('bdf')!r} is not a bus id like 0000:18:00.0")
        t = self.type_of(node, parent_type)
        node["_t"] = t
        node["_numa"] = int(node.get("numa", numa))
        port = t.get("port", "endpoint")
        pcie = t.get("pcie", True)
        node["_max"] = _gw(node.get("link", t.get("link", "3x16"))) if pcie else None
        if pcie and port not in ("root", "dsp"):
            if "link_cur" in node:
                node["_cur"] = _gw(node["link_cur"])
            else:
                pmax = parent["_max"] if parent and parent.get("_max") and parent["_t"].get("port") in ("root", "dsp") else None
                mx = node["_max"]
                node["_cur"] = (min(mx[0], pmax[0]), min(mx[1], pmax[1])) if pmax else mx
        for child in _children(node):
            self.resolve(child, node, t, node["_numa"])
        if pcie and port in ("root", "dsp"):
            kids = [c for c in _children(node) if c.get("_cur")]
            node["_cur"] = kids[0]["_cur"] if kids else (0, 0)
        prefix = t.get("rdma")
        if prefix and "rdma" not in node:
            node["_rdma_auto"] = prefix

    def emit(self, node: dict[str, Any], parent_dir: Path, parent: dict[str, Any] | None) -> None:
        t = node["_t"]
        bdf = node["bdf"]
        d = parent_dir / bdf
        ad = self.dest / d
        ad.mkdir(parents=True, exist_ok=True)
        cls = int(str(t["class"]), 16) if isinstance(t["class"], str) else int(t["class"])
        vendor, device = int(t["vendor"]), int(t["device"])
        sv, sd = (t.get("subsys") or [vendor, 0])
        attrs = {
            "vendor": f"0x{vendor:04x}", "device": f"0x{device:04x}",
            "subsystem_vendor": f"0x{int(sv):04x}", "subsystem_device": f"0x{int(sd):04x}",
            "class": f"0x{cls:06x}", "revision": f"0x{int(t.get('revision', 0xa1)):02x}",
            "numa_node": str(node["_numa"]),
            "local_cpulist": self.cpus.get(node["_numa"], self.all_cpus),
        }
        if node.get("_max"):
            mx, cur = node["_max"], node["_cur"]
            attrs.update({"max_link_speed": _SPEEDS[mx[0]], "max_link_width": str(mx[1]),
                          "current_link_speed": _SPEEDS.get(cur[0], "Unknown"), "current_link_width": str(cur[1])})
        for k, v in attrs.items():
            (ad / k).write_text(v + "\n")
        (ad / "config").write_bytes(self.config(node, cls, vendor, device, int(sv), int(sd))[: self.full])
        if node.get("_max") and self.desc.get("aer_files", True):
            # Every PCIe function has the AER capability here (config space at 0x100); node `aer:
            # {correctable: {RxErr: 12}, fatal: {...}}` sets counts since boot.
            aer = node.get("aer") or {}
            for key, fname, aer_names, total in _AER_FILES:
                (ad / fname).write_text(aer_text(aer_names, total, aer.get(key) or {}))
        driver = node.get("driver", t.get("driver"))
        if driver and driver not in self.unloaded:
            drv = self.dest / "sys/bus/pci/drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            self.symlink(ad / "driver", drv)
        self.symlink(self.dest / "sys/bus/pci/devices" / bdf, ad)
        if self.iommu:
            g = self.dest / "sys/kernel/iommu_groups" / str(self.next_group)
            self.next_group += 1
            (g / "devices").mkdir(parents=True, exist_ok=True)
            (g / "type").write_text("DMA\n")
            self.symlink(ad / "iommu_group", g)
            self.symlink(g / "devices" / bdf, ad)
        for cls_dir, names in (("infiniband", node.get("rdma")), ("net", node.get("net"))):
            for name in [names] if isinstance(names, str) else (names or []):
                cd = self.dest / "sys/class" / cls_dir / name
                cd.mkdir(parents=True, exist_ok=True)
                self.symlink(cd / "device", ad)
        for child in node.get("children", []):
            self.emit(child, d, node)

    def config(self, node: dict[str, Any], cls: int, vendor: int, device: int, sv: int, sd: int) -> bytes:
        t = node["_t"]
        port = t.get("port", "endpoint")
        is_bridge = port in ("root", "usp", "dsp", "pci_bridge")
        buf = bytearray(4096)
        struct.pack_into("<HHHH", buf, 0, vendor, device, 0x0406, 0x0010)
        buf[0x08] = int(t.get("revision", 0xa1))
        buf[0x09], buf[0x0a], buf[0x0b] = cls & 0xff, (cls >> 8) & 0xff, (cls >> 16) & 0xff
        buf[0x0e] = 1 if is_bridge else 0
        buf[0x34] = 0x40
        if is_bridge:
            bus = int(node["bdf"].split(":")[1], 16)
            kids = node.get("children", [])
            sec = int(kids[0]["bdf"].split(":")[1], 16) if kids else bus + 1
            buf[0x18], buf[0x19], buf[0x1a] = bus, sec, max(sec, *(self._max_bus(k) for k in kids)) if kids else sec
        else:
            struct.pack_into("<HH", buf, 0x2c, sv, sd)
        # Capability list: PM at 0x40 -> PCIe at 0x60 -> (bridges) SSVID at 0x90.
        pcie = bool(node.get("_max"))
        buf[0x40], buf[0x41] = 0x01, 0x60 if pcie else (0x90 if is_bridge else 0)
        if pcie:
            mx, cur = node["_max"], node["_cur"]
            buf[0x60], buf[0x61] = 0x10, 0x90 if is_bridge else 0
            struct.pack_into("<H", buf, 0x62, 2 | (_PORT_TYPE[port] << 4) | (0x100 if port in ("root", "dsp") else 0))
            struct.pack_into("<I", buf, 0x6c, mx[0] | (mx[1] << 4) | 0x100000 | ((int(node["bdf"][-4:-2], 16) & 0xff) << 24))
            struct.pack_into("<H", buf, 0x72, (cur[0] if cur[1] else 1) | (cur[1] << 4) | (0x2000 if cur[1] else 0))
            struct.pack_into("<I", buf, 0x8c, sum(1 << g for g in range(1, mx[0] + 1)))
        if is_bridge:
            buf[0x90], buf[0x91] = 0x0d, 0
            struct.pack_into("<HH", buf, 0x94, sv, sd)
        if pcie:
            # Extended capabilities: AER at 0x100, then ACS at 0x148 on ports that have it.
            acs_cap = sum(_ACS_BITS[b] for b in t.get("acs", []))
            nxt = 0x148 if acs_cap else 0
            struct.pack_into("<I", buf, 0x100, 0x0001 | (2 << 16) | (nxt << 20))
            if acs_cap:
                ctl = sum(_ACS_BITS[b] for b in node.get("acs_ctl", []))
                struct.pack_into("<IHH", buf, 0x148, 0x000d | (1 << 16), acs_cap, ctl)
        return bytes(buf)

    def _max_bus(self, node: dict[str, Any]) -> int:
        buses = [int(node["bdf"].split(":")[1], 16)] + [self._max_bus(k) for k in node.get("children", [])]
        return max(buses)

    def emit_nvidia(self) -> None:
        nv = self.desc.get("nvidia")
        # NIC RDMA names in BDF order, as mlx5_core numbers them at probe time.
        auto = sorted((n for n in _all_nodes(self.desc) if n.get("_rdma_auto")), key=lambda n: n["bdf"])
        for n in auto:
            prefix = n["_rdma_auto"]
            i = self.rdma_counters.get(prefix, 0)
            self.rdma_counters[prefix] = i + 1
            ad = self.dest / "sys/bus/pci/devices" / n["bdf"]
            cd = self.dest / "sys/class/infiniband" / f"{prefix}{i}"
            cd.mkdir(parents=True, exist_ok=True)
            self.symlink(cd / "device", Path(os.path.realpath(ad)))
        if not nv:
            return
        proc = self.dest / "proc/driver/nvidia"
        proc.mkdir(parents=True, exist_ok=True)
        (proc / "version").write_text(
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {nv.get('driver', '550.54.15')}  (fixture)\n"
            "GCC version:  gcc version 12.2.0 (fixture)\n")
        gpus = sorted((n for n in _all_nodes(self.desc)
                       if n["_t"].get("gpu") and n.get("driver", n["_t"].get("driver")) == "nvidia"
                       and n.get("proc", True)), key=lambda n: n["bdf"])
        dev = self.dest / "dev"
        dev.mkdir(parents=True, exist_ok=True)
        (dev / "nvidiactl").write_text("")
        (dev / "nvidia-uvm").write_text("")
        for minor, n in enumerate(gpus):
            gd = proc / "gpus" / n["bdf"]
            gd.mkdir(parents=True, exist_ok=True)
            (gd / "information").write_text(
                f"Model: \t\t {n['_t'].get('model', 'NVIDIA GPU')}\n"
                f"IRQ:   \t\t {100 + minor}\n"
                f"GPU UUID: \t {fixture_uuid(self.desc['name'], n['bdf'])}\n"
                "Video BIOS: \t 96.00.00.00.01\n"
                "Bus Type: \t PCIe\n"
                "DMA Size: \t 52 bits\n"
                "DMA Mask: \t 0xfffffffffffff\n"
                f"Bus Location: \t {n['bdf']}\n"
                f"Device Minor: \t {minor}\n"
                "GPU Excluded:\t No\n")
            if n.get("dev", True):
                (dev / f"nvidia{minor}").write_text("")
        switches = [n for n in _all_nodes(self.desc) if n["_t"].get("nvswitch")]
        for i, _ in enumerate(sorted(switches, key=lambda n: n["bdf"])):
            (dev / f"nvidia-nvswitch{i}").write_text("")


def fixture_uuid(machine: str, bdf: str) -> str:
    """Deterministic GPU UUID of a fixture GPU, so other fakes can reproduce it."""
    base = machine.split("--")[0]
    h = hashlib.sha1(f"fleetprobe:{base}:{bdf}".encode()).hexdigest()
    return "GPU-" + str(uuid.UUID(h[:32]))


def build_machine(name_or_description: str | dict[str, Any], dest: Path) -> Path:
    """Write the machine's tree under `dest` (created; must be empty or absent); returns `dest`."""
    desc = load_description(name_or_description)
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FixtureError(f"{dest} is not empty; build fixture machines into a fresh directory")
    dest.mkdir(parents=True, exist_ok=True)
    _Builder(desc, dest).build()
    (dest / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
    (dest / "proc/sys/kernel/hostname").write_text(desc["name"] + "\n")
    return dest


# -- NIC state: /sys/class/infiniband and /sys/class/net attributes ----------------------------------
#
# The PCIe build above names the RDMA and net devices (links to their PCI functions); this writes
# what the `nic` probe reads under them.  Defaults come from the HCA's PCI device id; a machine's
# `machines/<name>.nic.yaml` (with `base:`) overrides per device (`devices: {mlx5_0: {fw_ver: ..}}`),
# per port (`ports: {mlx5_3: {state: "1: DOWN", phys_state: "3: Disabled", rate: .., counters: {..}}}`)
# and per net interface (`net: {eno1: {operstate: down}}`); `peermem: false` leaves nvidia_peermem
# unloaded (default: loaded where there are RDMA devices and the NVIDIA driver).

_HCA_PROFILES: dict[int, dict[str, str]] = {
    0x1021: {"hca_type": "MT4129", "board_id": "MT_0000000838", "fw_ver": "28.39.1002",
             "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"},  # ConnectX-7
    0x101B: {"hca_type": "MT4123", "board_id": "MT_0000000223", "fw_ver": "20.35.1012",
             "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand"},  # ConnectX-6
    0x101D: {"hca_type": "MT4125", "board_id": "MT_0000000359", "fw_ver": "22.36.1010",
             "rate": "100 Gb/sec (4X EDR)", "link_layer": "Ethernet"},  # ConnectX-6 Dx (RoCE)
    0x1013: {"hca_type": "MT4115", "board_id": "MT_2180110032", "fw_ver": "12.28.2006",
             "rate": "100 Gb/sec (4X EDR)", "link_layer": "InfiniBand"},  # ConnectX-4
    # ConnectX-8 and BlueField-3: type and firmware as published ibstat prints them
    # (tests/fixtures/evidence/ibstat_11ca_cx8_mt4131_cx7_port_guid_xe9780_01.txt,
    # ibstat_bf3_b3220_mt41692_logical_down_fusee_01.txt); the BF3 is a host's Ethernet front end.
    0x1023: {"hca_type": "MT4131", "board_id": "MT_0000001093", "fw_ver": "40.46.5500",
             "rate": "800 Gb/sec (4X XDR)", "link_layer": "InfiniBand"},  # ConnectX-8
    0xA2DC: {"hca_type": "MT41692", "board_id": "MT_0000000965", "fw_ver": "32.47.1088",
             "rate": "200 Gb/sec (2X NDR)", "link_layer": "Ethernet"},  # BlueField-3
}
IB_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
               "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
               "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
               "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_data", "port_rcv_data",
               "port_xmit_packets", "port_rcv_packets")
IB_HW_COUNTERS = ("out_of_buffer", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
                  "rnr_nak_retry_err", "duplicate_request", "implied_nak_seq_err")


def _guid_text(hex16: str) -> str:
    """16 hex digits as sysfs writes a GUID: 7425:5403:0035:3ded."""
    return ":".join(hex16[i:i + 4] for i in range(0, 16, 4))


def _nic_description(machine: str) -> dict[str, Any]:
    from orchestrator.simulate.hostfiles import load_description as load_layer

    return load_layer(machine, "nic") or {}


def _put(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def build_nic_state(machine: str, dest: Path, hostname: str | None = None) -> Path:
    """Write the InfiniBand device/port and net interface attributes of a built machine tree."""
    desc = _nic_description(machine)
    dest = Path(dest)
    salt = hostname or machine
    ib_root = dest / "sys/class/infiniband"
    net_root = dest / "sys/class/net"
    port_over = desc.get("ports") or {}
    dev_over = desc.get("devices") or {}
    net_over = desc.get("net") or {}
    named_net: dict[str, str] = {}  # PCI function -> its net interface (from the PCIe description)
    for nd in sorted(net_root.iterdir()) if net_root.is_dir() else []:
        named_net[os.path.basename(os.path.realpath(nd / "device"))] = nd.name
    for dev in sorted(ib_root.iterdir()) if ib_root.is_dir() else []:
        pci = Path(os.path.realpath(dev / "device"))
        try:
            devid = int((pci / "device").read_text().strip(), 16)
        except (OSError, ValueError):
            devid = 0
        prof = {**_HCA_PROFILES.get(devid, _HCA_PROFILES[0x1021]), **(dev_over.get(dev.name) or {})}
        guid = hashlib.sha1(f"{salt}:{dev.name}".encode()).hexdigest()[:16]
        # The functions of one adapter (a BlueField's two ports) share its system image GUID.
        card = hashlib.sha1(f"{salt}:{pci.name.rsplit('.', 1)[0]}".encode()).hexdigest()[:16]
        for key in ("hca_type", "board_id", "fw_ver"):
            _put(dev / key, prof[key])
        _put(dev / "node_guid", _guid_text(guid))
        _put(dev / "sys_image_guid", _guid_text(card))
        port = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": prof["rate"],
                "link_layer": prof["link_layer"], **(port_over.get(dev.name) or {})}
        pd = dev / "ports" / "1"
        for key in ("state", "phys_state", "rate", "link_layer"):
            _put(pd / key, port[key])
        # GID 0: the link-local prefix and the port GUID (the node GUID on a ConnectX port 1), as
        # ibstat's "Port GUID" shows it.
        _put(pd / "gids" / "0", "fe80:0000:0000:0000:" + _guid_text(guid))
        counters = {c: 0 for c in IB_COUNTERS}
        busy = int(guid[:6], 16)
        counters.update(port_xmit_data=busy * 4096, port_rcv_data=busy * 4000, port_xmit_packets=busy * 16,
                        port_rcv_packets=busy * 15)
        counters.update(port.get("counters") or {})
        for name, v in counters.items():
            _put(pd / "counters" / name, v)
        hw = {c: 0 for c in IB_HW_COUNTERS}
        hw.update(port.get("hw_counters") or {})
        for name, v in hw.items():
            _put(pd / "hw_counters" / name, v)
        up = port["state"].endswith("ACTIVE")
        ib = port["link_layer"] == "InfiniBand"
        # Net interfaces are the PCIe description's (`net:`): an HCA without one has no IPoIB/RoCE
        # interface here, as on hosts that do not load ib_ipoib.
        netname = named_net.get(pci.name)
        if netname is None:
            continue
        if not ib:
            _put(pd / "gid_attrs/ndevs/0", netname)  # RoCE: the port's GIDs belong to this interface
        gbps = float(port["rate"].split()[0]) if port["rate"].split() else 0.0
        net_over.setdefault(netname, {})
        net_over[netname] = {"operstate": "up" if up else "down", "carrier": 1 if up else 0,
                             "speed": int(gbps * 1000) if up else -1, "mtu": 4092 if ib else 9000,
                             "type": 32 if ib else 1, **net_over[netname]}
    nvidia = (dest / "proc/driver/nvidia/version").is_file()
    if desc.get("peermem", nvidia and ib_root.is_dir() and any(ib_root.iterdir())):
        _put(dest / "sys/module/nvidia_peermem/initstate", "live")
    for nd in sorted(net_root.iterdir()) if net_root.is_dir() else []:
        attrs = {"operstate": "up", "carrier": 1, "speed": 10000, "carrier_changes": 2, "mtu": 1500, "type": 1,
                 **(net_over.get(nd.name) or {})}
        attrs.setdefault("carrier_changes", 2)
        for key, v in attrs.items():
            if key == "speed" and v == -1:
                continue  # reading speed of a link that is down fails (EINVAL): leave it out
            _put(nd / key, v)
    return dest
