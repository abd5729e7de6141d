# Probe `host`: OS, kernel, CPU, memory, NUMA, DMI board identity, virtualization, NVIDIA driver,
# uptime, and the processes holding /dev/nvidia* (those stuck in uninterruptible sleep in the driver).
# Reads /proc, /sys and os.uname only.  Argument `root` (default "/") prefixes every path so the
# same code reads a fixture tree in tests and in the demo fleet.
import os
import platform
import re
import socket
import time

PROBE_NAME = "host"
PROBE_VERSION = "1.2"
PROBE_DESCRIPTION = ("OS, kernel, CPU, memory, NUMA, DMI board/BIOS/serials, virtualization, NVIDIA driver, "
                     "processes holding /dev/nvidia*")
# How long a process must stay in uninterruptible sleep (state D) to count as stuck: one reading
# catches processes waiting briefly for I/O; a second one this much later leaves the stuck ones.
_STUCK_RECHECK_S = 0.2
_MAX_HOLDERS = 200  # processes listed; the count says how many more there were
PASSIVE = True

_DMI_FIELDS = [
    "sys_vendor", "product_name", "product_version", "product_sku", "product_family",
    "board_vendor", "board_name", "board_version", "bios_vendor", "bios_version", "bios_date",
    "chassis_vendor", "chassis_type",
]
_DMI_ROOT_ONLY = ["product_serial", "product_uuid", "board_serial", "chassis_serial"]
_HYPERVISOR_STRINGS = [
    ("qemu", "kvm"), ("kvm", "kvm"), ("vmware", "vmware"), ("virtualbox", "virtualbox"),
    ("xen", "xen"), ("amazon ec2", "aws"), ("google compute engine", "gce"), ("google", "gce"),
    ("microsoft corporation", "hyperv"), ("openstack", "openstack"), ("bochs", "bochs"),
    ("parallels", "parallels"), ("oracle", "oracle"),
]


def _p(ctx, path):
    root = ctx.args.get("root") or "/"
    return os.path.join(root, path.lstrip("/"))


def _read(ctx, path):
    try:
        return ctx.read_text(_p(ctx, path))
    except PermissionError:
        return None


def _os_release(ctx):
    text = _read(ctx, "/etc/os-release") or _read(ctx, "/usr/lib/os-release") or ""
    out = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"')
    return {"id": out.get("ID"), "version_id": out.get("VERSION_ID"), "pretty_name": out.get("PRETTY_NAME")}


def _cpu(ctx):
    text = _read(ctx, "/proc/cpuinfo") or ""
    model = None
    flags = set()
    sockets = set()
    cores = set()
    threads = 0
    phys = None
    for line in text.splitlines():
        if ":" not in line:
            continue
        k, v = [s.strip() for s in line.split(":", 1)]
        if k == "processor":
            threads += 1
        elif k in ("model name", "Model") and model is None:
            model = v
        elif k == "flags" and not flags:
            flags = set(v.split())
        elif k == "physical id":
            phys = v
            sockets.add(v)
        elif k == "core id":
            cores.add((phys, v))
    return {
        "model": model,
        "sockets": len(sockets) or None,
        "cores": len(cores) or None,
        "threads": threads or None,
        "hypervisor_flag": "hypervisor" in flags,
    }


def _memory(ctx):
    text = _read(ctx, "/proc/meminfo") or ""
    m = re.search(r"^MemTotal:\s+(\d+)\s+kB", text, re.MULTILINE)
    return {"total_bytes": int(m.group(1)) * 1024 if m else None}


def _numa(ctx):
    base = _p(ctx, "/sys/devices/system/node")
    try:
        nodes = sorted(int(n[4:]) for n in os.listdir(base) if re.match(r"^node\d+$", n))
    except OSError:
        return {"nodes": None}
    out = []
    for n in nodes:
        out.append({"node": n, "cpulist": _read(ctx, "/sys/devices/system/node/node%d/cpulist" % n)})
    return {"nodes": out}


def _dmi(ctx):
    base = "/sys/class/dmi/id/"
    dmi = {}
    for f in _DMI_FIELDS:
        dmi[f] = _read(ctx, base + f)
    for f in _DMI_ROOT_ONLY:
        path = _p(ctx, base + f)
        try:
            dmi[f] = ctx.read_text(path)
        except PermissionError:
            dmi[f] = needs_root("%s is readable by root only" % path)
    return dmi


def _virtualization(ctx, cpu, dmi):
    hints = []
    kind = None
    vendor_text = " ".join(str(dmi.get(k) or "") for k in ("sys_vendor", "product_name", "bios_vendor", "board_vendor")).lower()
    for needle, name in _HYPERVISOR_STRINGS:
        if needle in vendor_text:
            kind = name
            hints.append("dmi:%s" % needle)
            break
    if cpu.get("hypervisor_flag"):
        hints.append("cpuflag:hypervisor")
        kind = kind or "unknown-hypervisor"
    hv_type = _read(ctx, "/sys/hypervisor/type")
    if hv_type:
        hints.append("sys_hypervisor:%s" % hv_type)
        kind = kind or hv_type
    container = None
    if os.path.exists(_p(ctx, "/.dockerenv")):
        container = "docker"
    elif os.path.exists(_p(ctx, "/run/.containerenv")):
        container = "podman"
    else:
        cg = _read(ctx, "/proc/1/cgroup") or ""
        for name in ("kubepods", "docker", "lxc", "containerd"):
            if name in cg:
                container = name
                break
    if container:
        hints.append("container:%s" % container)
    return {"virtualized": kind is not None, "hypervisor": kind, "container": container, "evidence": hints}


def _driver(ctx):
    text = _read(ctx, "/proc/driver/nvidia/version")
    if text is None:
        return {"loaded": False, "version": None}
    m = re.search(r"NVRM version:.*?(\d+\.\d+(?:\.\d+)?)", text)
    return {"loaded": True, "version": m.group(1) if m else None, "raw": text.splitlines()[0] if text else ""}


def _fabric_manager(ctx):
    """The installed NVIDIA fabric manager package and its version, from the dpkg database (readable
    by everyone); None where there is no dpkg database, absent ({"installed": False}) where dpkg
    lists no such package.  RPM hosts: its database is not a text file, so the version is unknown."""
    text = _read(ctx, "/var/lib/dpkg/status")
    if text is None:
        return None
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if ":" in line and not line.startswith(" "):
                k, v = line.split(":", 1)
                fields[k.strip()] = v.strip()
        name = fields.get("Package", "")
        if re.match(r"^(cuda-drivers-fabricmanager|nvidia-fabricmanager)(-\d+)?$", name) \
                and "installed" in fields.get("Status", ""):
            return {"installed": True, "package": name, "version": fields.get("Version"), "source": "dpkg"}
    return {"installed": False, "source": "dpkg"}


def _proc_state(ctx, pid):
    """(state letter, command) from /proc/<pid>/stat; (None, None) when the process is gone."""
    stat = _read(ctx, "/proc/%s/stat" % pid)
    if not stat or ")" not in stat:
        return None, None
    comm = stat[stat.find("(") + 1:stat.rfind(")")]
    rest = stat[stat.rfind(")") + 1:].split()
    return (rest[0] if rest else None), comm


def _gpu_processes(ctx):
    """Every process with an open /dev/nvidia* file: pid, command, state, and for one in
    uninterruptible sleep (D) in two readings _STUCK_RECHECK_S apart its wait channel (the kernel
    function it sleeps in: a wedged driver shows there).  Without root only our own processes'
    file descriptors are readable: `unreadable` counts the others."""
    proc = _p(ctx, "/proc")
    try:
        pids = sorted((n for n in os.listdir(proc) if fp_is_digits(n)), key=int)
    except OSError as e:
        return {"holders": [], "unreadable": None, "scanned": 0, "error": str(e)}
    holders, unreadable = [], 0
    for pid in pids:
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            unreadable += 1
            continue
        except OSError:
            continue  # gone, or a kernel thread
        devices = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                devices.add(target)
        if devices:
            state, comm = _proc_state(ctx, pid)
            holders.append({"pid": int(pid), "command": comm, "state": state, "devices": sorted(devices)})
    waiting = [h for h in holders if h["state"] == "D"]
    if waiting:
        time.sleep(_STUCK_RECHECK_S)
        for h in waiting:
            state, _ = _proc_state(ctx, h["pid"])
            h["stuck"] = state == "D"
            h["wchan"] = _read(ctx, "/proc/%d/wchan" % h["pid"]) or None
    out = {"holders": holders[:_MAX_HOLDERS], "unreadable": unreadable, "scanned": len(pids)}
    if len(holders) > _MAX_HOLDERS:
        out["more"] = len(holders) - _MAX_HOLDERS
    return out


def collect(ctx):
    un = os.uname()
    cpu = _cpu(ctx)
    dmi = _dmi(ctx)
    hostname = ctx.args.get("hostname") or _read(ctx, "/proc/sys/kernel/hostname") or socket.gethostname()
    data = {
        "hostname": hostname,
        "os": _os_release(ctx),
        "kernel": _read(ctx, "/proc/sys/kernel/osrelease") or un.release,
        "arch": un.machine,
        "cpu": cpu,
        "memory": _memory(ctx),
        "numa": _numa(ctx),
        "dmi": dmi,
        "virtualization": _virtualization(ctx, cpu, dmi),
        "nvidia_driver": _driver(ctx),
        "fabric_manager": _fabric_manager(ctx),
        "python": platform.python_version(),
        # Which address the controller reached us on: lets a benchmark prove N distinct peers.
        "ssh_connection": os.environ.get("SSH_CONNECTION"),
        "uptime_s": None,
    }
    up = _read(ctx, "/proc/uptime")
    if up:
        try:
            data["uptime_s"] = float(up.split()[0])
        except ValueError:
            pass
    data["gpu_processes"] = _gpu_processes(ctx)
    return data
