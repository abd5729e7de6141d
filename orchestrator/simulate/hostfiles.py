"""Write the /proc, /etc and DMI files the `host` probe reads, for a simulated machine.

The NVIDIA driver files (/proc/driver/nvidia) belong to the PCIe layer (simulate/sysfs.py), so
every probe of one simulated host sees one driver version.

Descriptions live in machines/<name>.host.yaml; a fault variant `<base>--<fault>` without a host
file of its own uses its base machine's.  Serials are derived from the host name so that a fleet of
identical machines still has unique identities (and a test can make two collide on purpose).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

MACHINES = Path(__file__).resolve().parent / "machines"


def description_path(machine: str, layer: str) -> Path | None:
    """machines/<machine>.<layer>.yaml, else the base machine's (the part before '--')."""
    for name in (machine, machine.split("--", 1)[0]):
        p = MACHINES / f"{name}.{layer}.yaml"
        if p.is_file():
            return p
    return None


def load_description(machine: str, layer: str) -> dict[str, Any] | None:
    p = description_path(machine, layer)
    if p is None:
        return None
    doc = yaml.safe_load(p.read_text()) or {}
    base = doc.pop("base", None)
    if base:
        parent = load_description(base, layer) or {}
        parent.update(doc)
        return parent
    return doc


def serial_for(hostname: str, salt: str) -> str:
    return str(int(hashlib.sha256(f"{salt}:{hostname}".encode()).hexdigest()[:12], 16))[:13]


def _write(root: Path, rel: str, text: str, mode: int = 0o444) -> None:
    p = root / rel.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text if text.endswith("\n") else text + "\n")
    p.chmod(mode)


def _processes(root: Path, processes: list[dict[str, Any]]) -> None:
    """/proc/<pid>/{stat,comm,wchan} and fd/<n> links for the fixture's processes (a process stuck in
    the driver: state D, a wait channel, /dev/nvidia* open)."""
    for p in processes:
        pid, comm, state = int(p["pid"]), str(p["comm"]), str(p.get("state", "S"))
        _write(root, f"/proc/{pid}/stat", f"{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 0 0 0 0")
        _write(root, f"/proc/{pid}/comm", comm)
        _write(root, f"/proc/{pid}/wchan", str(p.get("wchan", "0")))
        fd_dir = root / "proc" / str(pid) / "fd"
        fd_dir.mkdir(parents=True, exist_ok=True)
        for n, target in enumerate(p.get("fds") or [], start=3):
            link = fd_dir / str(n)
            if not link.is_symlink():
                link.symlink_to(str(target))


def build_host_files(machine: str, root: Path, hostname: str) -> Path:
    d = load_description(machine, "host")
    if d is None:
        raise FileNotFoundError(f"no host description for machine {machine!r} in {MACHINES}")
    _write(root, "/proc/sys/kernel/hostname", hostname)
    _write(root, "/proc/sys/kernel/osrelease", d["kernel"])
    _write(root, "/etc/os-release", f'ID={d["os_id"]}\nVERSION_ID="{d["os_version"]}"\nPRETTY_NAME="{d["os_pretty"]}"\n')
    sockets, cores, tpc = d["sockets"], d["cores_per_socket"], d.get("threads_per_core", 2)
    flags = "fpu vme de pse tsc msr pae sse sse2 avx avx2" + (" hypervisor" if d.get("hypervisor") else "")
    lines = []
    cpu = 0
    for _thread in range(tpc):
        for s in range(sockets):
            for c in range(cores):
                lines.append(f"processor\t: {cpu}\nmodel name\t: {d['cpu_model']}\nphysical id\t: {s}\n"
                             f"core id\t\t: {c}\nflags\t\t: {flags}\n")
                cpu += 1
    _write(root, "/proc/cpuinfo", "\n".join(lines))
    _write(root, "/proc/meminfo", f"MemTotal:       {int(d['memory_gib'] * 1024 * 1024)} kB\n")
    _write(root, "/proc/uptime", f"{float(d.get('uptime_s', 86400)):.2f} 100000.00")
    _processes(root, d.get("processes") or [])
    per_node = cpu // max(1, d.get("numa_nodes", sockets))
    for n in range(d.get("numa_nodes", sockets)):
        _write(root, f"/sys/devices/system/node/node{n}/cpulist", f"{n * per_node}-{(n + 1) * per_node - 1}")
    dmi = dict(d.get("dmi") or {})
    if d.get("serials_readable", True):
        dmi.setdefault("product_serial", serial_for(hostname, "system"))
        dmi.setdefault("board_serial", serial_for(hostname, "board"))
    for key, value in dmi.items():
        _write(root, f"/sys/class/dmi/id/{key}", str(value))
    fm = d.get("fabric_manager")  # the installed nvidia-fabricmanager package version (dpkg)
    if fm:
        branch = str(fm).split(".", 1)[0]
        _write(root, "/var/lib/dpkg/status",
               "Package: libc6\nStatus: install ok installed\nVersion: 2.35-0ubuntu3.6\n\n"
               f"Package: nvidia-fabricmanager-{branch}\nStatus: install ok installed\nPriority: optional\n"
               f"Architecture: amd64\nVersion: {fm}-1\nDescription: Fabric Manager for NVSwitch based systems.\n")
    return root


# The lines every simulated machine's kernel log has (a driver that loaded, links that came up),
# so the parser sees ordinary traffic next to the faults of machines/<name>.kmsg.yaml.
_BENIGN_KMSG = (
    (4.112, "pci 0000:00:00.0: [8086:09a2] type 00 class 0x088000"),
    (12.503, "nvidia: loading out-of-tree module taints kernel."),
    (12.910, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"),
    (14.221, "nvidia-nvswitch: Probing device 0000:05:00.0, Vendor Id = 0x10de, Device Id = 0x22a3, Class = 0x68000"),
    (21.377, "mlx5_core 0000:19:00.0: mlx5_pcie_event:299:(pid 1029): PCIe slot advertised sufficient power (75W)."),
)


def build_kernel_log(machine: str, root: Path, hostname: str) -> Path:
    """Write <root>/dev/kmsg (as /dev/kmsg records: "pri,seq,usec,-;message"), the boot id and
    /proc/stat's btime for the `kmsg` probe.  machines/<name>.kmsg.yaml (with `base:`) adds
    `lines: [[seconds since boot, message], ...]`; `readable: false` leaves /dev/kmsg out (a host
    whose kernel log the probe user cannot read)."""
    d = load_description(machine, "kmsg") or {}
    boot = hashlib.sha256(f"boot:{hostname}".encode()).hexdigest()
    _write(root, "/proc/sys/kernel/random/boot_id", f"{boot[:8]}-{boot[8:12]}-{boot[12:16]}-{boot[16:20]}-{boot[20:32]}")
    _write(root, "/proc/stat", "cpu  100 0 100 1000 0 0 0 0 0 0\nbtime 1796030626\n")
    if d.get("readable", True) is False:
        return root
    lines = sorted([(float(t), str(m)) for t, m in _BENIGN_KMSG] + [(float(t), str(m)) for t, m in d.get("lines") or []])
    records = [f"{3 if 'Xid' in m or 'Error' in m else 6},{seq},{round(t * 1e6)},-;{m}"
               for seq, (t, m) in enumerate(lines)]
    _write(root, "/dev/kmsg", "\n".join(records))
    return root
