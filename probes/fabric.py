# Probe `fabric`: the host's part of a multi-host fabric qualification (orchestrator/api/fabric.py
# plans it and starts this probe on every host at once).
#
# role "discover" (the default): what the host brings to the fabric, read-only: every InfiniBand/RoCE
# port (state, active rate and width, link layer, LID, port GUID, the HCA's PCI function and its
# PCIe link current vs max, NUMA node), the GPUs (PCI bus ids and links from sysfs; CUDA ordinals
# and DMA-BUF support through libcuda when it loads), the GPU nearest each HCA (the longest shared
# PCIe path), GPUDirect RDMA readiness (nvidia_peermem / nv_peer_mem loaded), which perftest tools
# are installed and whether they were built with CUDA (`--help` mentions --use_cuda), and the busy
# guard: GPUs with compute processes (NVML), which make the controller leave the host out.
#
# role "pairs": run the host's steps of a schedule: in round order, for each round every rail side
# by side, each test of the round in turn (ib_write_bw, ib_write_lat, ...), as the server (listens
# on the test's port) or the client (dials the peer's rail address, retrying while the server is
# not listening yet: a refused connection costs the server nothing).  Every step has a window on
# this host's clock (from the schedule, counted from this probe's start); a tool still running at
# its window's end is killed.  A --use_cuda run that fails to register GPU memory (no GPUDirect)
# is noted and run again from host memory, so the link is still measured.  Each tool's stdout and
# stderr are returned, bounded; the controller parses them (facts/textparse/perftest.py).
#
# Nothing is written or installed on the host and nothing is left running: the tools are this
# process's children, die with it (PR_SET_PDEATHSIG) and are killed at their deadline; if the
# controller goes away (the SSH channel closes: our stdout's reader is gone), every tool is killed
# and the probe exits at once.
#
# Arguments: role, root (filesystem prefix: a fixture tree stands in for /sys and the tools' homes),
# lib / nvml_lib (libcuda / libnvidia-ml), perftest_dirs (extra places to look), help_timeout_s;
# "pairs": steps (orchestrator/engine/fabric_plan.py:probe_steps), tests, size, iters, lat_iters,
# duration_s, gid_index, cuda ({hca: CUDA ordinal} for --use_cuda), output_cap, start_at (the
# wave's common start, seconds since the epoch on this host's clock: rounds count from it).
# requires: _cuda
import ctypes
import fcntl
import os
import re
import select
import signal
import socket
import struct
import subprocess
import threading
import time

PROBE_NAME = "fabric"
PROBE_VERSION = "1.0"
PROBE_DESCRIPTION = ("Fabric qualification, the host's part: its InfiniBand/RoCE ports, GPUs, GPUDirect RDMA "
                     "and perftest tools; then its pairwise perftest steps with its peers, round by round")
PASSIVE = False

_TOOLS = ("ib_write_bw", "ib_write_lat", "ib_send_bw", "ib_send_lat", "ib_read_bw")
_TOOL_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/opt/perftest/bin", "/usr/local/perftest/bin",
              "/opt/mellanox/perftest/bin")
_CONNECT_FAILED = re.compile(r"Couldn't connect to|Unable to open file descriptor for socket connection|"
                             r"Unable to init the socket connection|Failed to establish connection", re.I)
_GDR_FAILED = re.compile(r"Couldn't allocate MR|ibv_reg_mr failed|failed to register|Couldn't allocate CUDA", re.I)
# The server address a client dials is a peer's word (relayed by the controller, which checks it
# too: engine/fabric_plan.py:address_problem, the same grammar): an IPv4/IPv6 address or an RFC
# 1123 host name, at most 253 ASCII characters, never an option; it is passed after "--".
_ADDR_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
_ADDR_IP = re.compile(r"[0-9A-Fa-f:.]{2,45}\Z")  # IPv6 or a GID; IPv4 reads as labels
_LIVE = []  # tool processes running now (killed when the controller goes away)
_LIVE_LOCK = threading.Lock()


def _p(root, path):
    return os.path.join(root or "/", path.lstrip("/"))


def _read(path):
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


def _int(text, base=10):
    try:
        return int(text, base)
    except (TypeError, ValueError):
        return None


# ------------------------------------------------------------------------------ discover


def _pci_dir(root, bdf):
    """The device's real sysfs directory (its path is its place in the PCIe tree)."""
    return os.path.realpath(_p(root, "/sys/bus/pci/devices/" + bdf))


def _link(pci):
    return {
        "speed": _read(os.path.join(pci, "current_link_speed")),
        "width": _int(_read(os.path.join(pci, "current_link_width"))),
        "max_speed": _read(os.path.join(pci, "max_link_speed")),
        "max_width": _int(_read(os.path.join(pci, "max_link_width"))),
    }


def _ipv4(netdev):
    """The interface's IPv4 address (SIOCGIFADDR), None when it has none or does not exist here."""
    if not netdev:
        return None
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", netdev[:15].encode()))
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None
    finally:
        s.close()


def _netdevs_by_pci(root):
    out = {}
    base = _p(root, "/sys/class/net")
    for name in _listdir(base):
        real = os.path.realpath(os.path.join(base, name, "device"))
        out.setdefault(os.path.basename(real), []).append(name)
    return out


def _hcas(root):
    base = _p(root, "/sys/class/infiniband")
    nets = _netdevs_by_pci(root)
    out = []
    for name in _listdir(base):
        d = os.path.join(base, name)
        pci = os.path.realpath(os.path.join(d, "device"))
        bdf = os.path.basename(pci)
        for port in _listdir(os.path.join(d, "ports")):
            pd = os.path.join(d, "ports", port)
            rate = _read(os.path.join(pd, "rate"))
            gid = _read(os.path.join(pd, "gids", "0"))
            ndev = _read(os.path.join(pd, "gid_attrs", "ndevs", "0"))
            netdev = ndev if ndev and ndev != "<NULL>" else (nets.get(bdf) or [None])[0]
            m = re.match(r"^\s*([\d.]+)\s*Gb/sec\s*\((\d+)X\s*(\w+)\)", rate or "")
            out.append({
                "hca": name, "port": _int(port), "bus_id": bdf if re.match(r"^[0-9a-f]{4,}:", bdf) else None,
                "state": (_read(os.path.join(pd, "state")) or "").split(":")[-1].strip() or None,
                "phys_state": (_read(os.path.join(pd, "phys_state")) or "").split(":")[-1].strip() or None,
                "rate": rate, "rate_gbps": float(m.group(1)) if m else None, "width": _int(m.group(2)) if m else None,
                "speed": m.group(3) if m else None, "link_layer": _read(os.path.join(pd, "link_layer")),
                "lid": _read(os.path.join(pd, "lid")), "sm_lid": _read(os.path.join(pd, "sm_lid")),
                "gid": gid, "port_guid": ":".join(gid.split(":")[4:]) if gid and gid.count(":") == 7 else None,
                "node_guid": _read(os.path.join(d, "node_guid")), "netdev": netdev,
                "address": None if root else _ipv4(netdev),
                "pcie": _link(pci), "numa_node": _int(_read(os.path.join(pci, "numa_node"))), "pci_path": pci,
            })
    return out


def _sysfs_gpus(root):
    out = []
    base = _p(root, "/sys/bus/pci/devices")
    for bdf in _listdir(base):
        pci = os.path.realpath(os.path.join(base, bdf))
        if _read(os.path.join(pci, "vendor")) != "0x10de":
            continue
        cls = _read(os.path.join(pci, "class")) or ""
        if not (cls.startswith("0x0302") or cls.startswith("0x0300")):
            continue
        out.append({"bus_id": bdf, "pcie": _link(pci), "numa_node": _int(_read(os.path.join(pci, "numa_node"))),
                    "pci_path": pci, "ordinal": None, "dmabuf": None, "busy": None})
    return out


def _shared(a, b):
    n = 0
    for x, y in zip(a.split("/"), b.split("/")):
        if x != y:
            break
        n += 1
    return n


def _nearest(hca, gpus):
    """The GPU whose PCIe path shares the most with the HCA's (under one switch beats one root)."""
    if not gpus:
        return None
    best = max(gpus, key=lambda g: (_shared(hca["pci_path"], g["pci_path"]), -gpus.index(g)))
    return best["bus_id"]


def _cuda_view(a, gpus, data, ctx):
    """CUDA ordinals and DMA-BUF support of the sysfs GPUs, where libcuda loads."""
    try:
        cu = _open_cuda(a.get("lib") or "libcuda.so.1")
        _, found = _discover(cu)
    except (Unsupported, CudaError, OSError, AttributeError) as e:
        data["cuda"] = {"loaded": False, "reason": str(e)[:300]}
        return
    data["cuda"] = {"loaded": True, "reason": None}
    by_bus = dict((g["bus_id"], g) for g in gpus)
    for g in found:
        rec = by_bus.get(g["bus_id"])
        if rec is None:  # CUDA sees a GPU sysfs did not list (a container's partial /sys)
            rec = {"bus_id": g["bus_id"], "pcie": None, "numa_node": None, "pci_path": "", "busy": None}
            gpus.append(rec)
            by_bus[g["bus_id"]] = rec
        rec["ordinal"] = g["index"]
        rec["dmabuf"] = g.get("dmabuf_supported")


def _busy(a, gpus, data):
    guard = {"checked": False, "reason": None}
    data["busy_guard"] = guard
    try:
        nvml = _Nvml(a.get("nvml_lib") or "libnvidia-ml.so.1")
    except (OSError, AttributeError) as e:
        guard["reason"] = "NVML unavailable (%s): busy GPUs could not be detected" % e
        return
    try:
        for g in gpus:
            try:
                g["busy"] = nvml.processes(g["bus_id"])
            except OSError as e:
                g["busy"] = None
                guard["reason"] = str(e)[:200]
        guard["checked"] = True
    finally:
        nvml.close()


def _tool_dirs(a):
    root = a.get("root") or ""
    dirs = [_p(root, d) for d in list(a.get("perftest_dirs") or []) + list(_TOOL_DIRS)]
    if not root:
        dirs = [d for d in (os.environ.get("PATH") or "").split(os.pathsep) if d] + dirs
    seen = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def _find_tools(a):
    dirs = _tool_dirs(a)
    found = {}
    for tool in _TOOLS:
        for d in dirs:
            path = os.path.join(d, tool)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                found[tool] = path
                break
    return found, dirs


def _cuda_flags(path, timeout):
    """Whether the tool takes --use_cuda and --use_cuda_dmabuf (perftest lists them in --help only
    when built with CUDA, the second when that CUDA has DMA-BUF): (cuda, dmabuf)."""
    try:
        p = subprocess.run([path, "--help"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout, preexec_fn=_child_setup)
    except (OSError, subprocess.SubprocessError):
        return None, None
    out = p.stdout[:65536]
    return b"use_cuda" in out, b"use_cuda_dmabuf" in out


def _discover_host(ctx, a):
    root = a.get("root") or ""
    data = {"role": "discover", "hostname": os.uname()[1], "hcas": [], "gpus": [], "gdr": {}, "perftest": {},
            "cuda": None, "busy_guard": None}
    ctx.partial = data
    data["hcas"] = _hcas(root)
    gpus = _sysfs_gpus(root)
    data["gpus"] = gpus
    _cuda_view(a, gpus, data, ctx)
    _busy(a, gpus, data)
    for h in data["hcas"]:
        h["nearest_gpu"] = _nearest(h, gpus)
    data["gdr"] = {
        "nvidia_peermem": os.path.isdir(_p(root, "/sys/module/nvidia_peermem")),
        "nv_peer_mem": os.path.isdir(_p(root, "/sys/module/nv_peer_mem")),
        "dmabuf": any(g.get("dmabuf") == 1 for g in gpus) if any(g.get("dmabuf") is not None for g in gpus) else None,
    }
    tools, dirs = _find_tools(a)
    cuda = dmabuf = None
    for path in tools.values():
        cuda, dmabuf = _cuda_flags(path, float(a.get("help_timeout_s", 5.0)))
        break
    data["perftest"] = {"tools": tools, "searched": dirs, "cuda": cuda, "dmabuf": dmabuf}
    for key in ("pci_path",):
        for rec in data["hcas"] + gpus:
            rec.pop(key, None)
    data["clock"] = time.time()  # the controller measures this host's clock against its own
    return data


# ------------------------------------------------------------------------------ running tools


def _child_setup():
    """In the tool's child (its own session, so its whole group is killed at its deadline): die with
    this probe too (PR_SET_PDEATHSIG, SIGKILL), whatever kills the probe."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _kill(p):
    """A tool and whatever it started: its own process group (a tool that forks leaves nothing)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        try:
            p.kill()
        except OSError:
            pass


def _kill_all():
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for p in procs:
        _kill(p)


def _bounded(data, cap):
    if len(data) <= cap:
        return data.decode("utf-8", "replace")
    head = cap // 4
    return (data[:head].decode("utf-8", "replace") + "\n[... %d bytes left out ...]\n" % (len(data) - cap)
            + data[-(cap - head):].decode("utf-8", "replace"))


def _run_tool(argv, deadline, cap):
    """Run one tool until it exits or `deadline` (time.time()); (exit code or None, stdout, stderr,
    timed_out).  Output past 4 x cap is read and dropped, so a chatty tool cannot fill memory."""
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=_child_setup, close_fds=True, start_new_session=True)
    except OSError as e:
        return 127, b"", str(e).encode(), False
    with _LIVE_LOCK:
        _LIVE.append(p)
    out, err = bytearray(), bytearray()
    fds = {p.stdout.fileno(): out, p.stderr.fileno(): err}
    timed_out = False
    try:
        while fds:
            left = deadline - time.time()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(list(fds), [], [], min(left, 0.5))
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    del fds[fd]
                elif len(fds[fd]) < 4 * cap:
                    fds[fd].extend(chunk)
        if timed_out:
            _kill(p)
        try:
            p.wait(timeout=max(0.5, deadline - time.time()) if not timed_out else 5)
        except subprocess.TimeoutExpired:
            _kill(p)
            p.wait()
            timed_out = True
    finally:
        with _LIVE_LOCK:
            if p in _LIVE:
                _LIVE.remove(p)
        for f in (p.stdout, p.stderr):
            try:
                f.close()
            except OSError:
                pass
    return (None if timed_out else p.returncode), bytes(out), bytes(err), timed_out


def address_ok(text):
    """Whether a server address may go on a perftest command line (see _ADDR_LABEL)."""
    if not isinstance(text, str) or not text or len(text) > 253 or any(ord(c) > 127 for c in text):
        return False
    if ":" in text:
        return bool(_ADDR_IP.match(text))
    labels = text[:-1].split(".") if text.endswith(".") else text.split(".")
    return all(_ADDR_LABEL.match(label) for label in labels)


def _argv(a, tool_path, test, step, port, cuda):
    lat = test.endswith("_lat")
    argv = [tool_path, "-d", step["hca"], "-i", str(step.get("ib_port") or 1), "-p", str(port), "-F"]
    if lat:
        argv += ["-s", "2", "-n", str(int(a.get("lat_iters", 1000)))]
    else:
        argv += ["--report_gbits", "-s", str(int(a.get("size", 65536)))]
        if a.get("duration_s"):
            argv += ["-D", str(int(a["duration_s"]))]
        else:
            argv += ["-n", str(int(a.get("iters", 5000)))]
    if a.get("gid_index") is not None:
        argv += ["-x", str(int(a["gid_index"]))]
    if cuda is not None:
        argv.append("--use_cuda=%d" % int(cuda))
        if a.get("cuda_dmabuf"):  # GPU memory registered through DMA-BUF (no peer-memory module)
            argv.append("--use_cuda_dmabuf")
    if step["role"] == "client":
        argv += ["--", step["connect"]]  # the server's address, never read as an option
    return argv


def _one_test(a, tools, step, test, port, test_end, cap):
    """One test of one step, to its end: the client retries a refused connection; a --use_cuda run
    that cannot register GPU memory is run again from host memory."""
    rec = {"round": step["round"], "rail": step["rail"], "hca": step["hca"], "role": step["role"],
           "peer": step["peer"], "peer_hca": step.get("peer_hca"), "peer_lid": step.get("peer_lid"),
           "test": test, "port": port,
           "extra": bool(step.get("extra")), "use_cuda": None, "gdr_error": None, "attempts": 0, "exit": None,
           "timed_out": False, "stdout": "", "stderr": "", "elapsed_s": None, "error": None}
    path = tools.get(test)
    if path is None:
        rec["error"] = "%s not installed on this host" % test
        return rec
    if step["role"] == "client" and not address_ok(step.get("connect")):
        rec["error"] = "the server address is not an IP address or host name: not run"
        return rec
    cuda = None if test.endswith("_lat") else (a.get("cuda") or {}).get(step["hca"])
    t0 = time.time()
    while True:
        rec["attempts"] += 1
        rec["use_cuda"] = cuda
        argv = _argv(a, path, test, step, port, cuda)
        rc, out, err, timed_out = _run_tool(argv, test_end, cap)
        rec.update(exit=rc, timed_out=timed_out, stdout=_bounded(out, cap), stderr=_bounded(err, 2048),
                   argv=[os.path.basename(argv[0]), *argv[1:]])
        text = out + b"\n" + err
        if rc == 0 or timed_out or time.time() >= test_end:
            break
        if cuda is not None and _GDR_FAILED.search(text.decode("utf-8", "replace")):
            rec["gdr_error"] = err.decode("utf-8", "replace").strip().splitlines()[0][:200] if err.strip() else \
                "GPU memory registration failed"
            cuda = None  # the link is still measured, from host memory
            continue
        if step["role"] == "client" and _CONNECT_FAILED.search(text.decode("utf-8", "replace")):
            # the server is not listening yet (its host still on its previous round): back off, each
            # attempt is a process, and many hosts waiting at once must not starve the one awaited
            time.sleep(min(0.05 * 2 ** min(rec["attempts"], 4), 0.5, max(0.0, test_end - time.time())))
            continue
        break
    rec["elapsed_s"] = round(time.time() - t0, 3)
    return rec


def _run_step(a, tools, step, t_start, results, lock, cap):
    """A step's tests in turn, test i by the end of its share of the round's window; a test that
    ends early hands its time on (the next starts at once, its partner does the same)."""
    tests = a.get("tests") or ["ib_write_bw"]
    s0, s1 = t_start + float(step["start_s"]), t_start + float(step["end_s"])
    for i, test in enumerate(tests):
        test_end = s0 + (s1 - s0) * (i + 1) / len(tests)
        rec = _one_test(a, tools, step, test, step["ports"][i], test_end, cap)
        with lock:
            results.append(rec)


def _sleep_until(t):
    while time.time() < t:
        time.sleep(max(0.0, min(0.2, t - time.time())))


def _pairs(ctx, a):
    # Every host of the wave counts its rounds from the same moment (start_at, on this host's clock),
    # so a host that came up late on a slow fan-out does not run out of step with its peers: it
    # skips the windows that passed instead of running them late.
    t_start = float(a.get("start_at") or time.time())
    ctx.exit_with_controller(_kill_all)
    _sleep_until(t_start)
    tools, _ = _find_tools(a)
    steps = a.get("steps") or []
    cap = int(a.get("output_cap", 16384))
    data = {"role": "pairs", "hostname": os.uname()[1], "tools": tools, "results": [], "rounds": [],
            "missing": [t for t in (a.get("tests") or []) if t not in tools]}
    ctx.partial = data
    lock = threading.Lock()
    by_round = {}
    for s in steps:
        by_round.setdefault(s["round"], []).append(s)
    for rnd in sorted(by_round):
        group = by_round[rnd]
        # a round's ports are those of a round some windows before it (the plan's port layout):
        # not starting it before its earliest start keeps that round's servers out of reach
        _sleep_until(t_start + max(float(s.get("not_before_s", 0.0)) for s in group))
        t_round = time.time()
        threads = []
        for step in group:
            if t_start + float(step["end_s"]) <= time.time():
                with lock:
                    data["results"].append({"round": rnd, "rail": step["rail"], "hca": step["hca"], "role": step["role"],
                                            "peer": step["peer"], "peer_hca": step.get("peer_hca"), "test": None,
                                            "error": "round window passed before it could start", "extra": bool(step.get("extra"))})
                continue
            t = threading.Thread(target=_run_step, args=(a, tools, step, t_start, data["results"], lock, cap))
            t.daemon = True
            t.start()
            threads.append(t)
        for t in threads:
            t.join(max(0.0, t_start + max(float(s["end_s"]) for s in group) + 5 - time.time()))
        data["rounds"].append({"round": rnd, "started_s": round(t_round - t_start, 3),
                               "took_s": round(time.time() - t_round, 3)})
        if ctx.remaining() < 2:
            ctx.warn("probe deadline near: rounds after %d not run" % rnd)
            break
    _kill_all()
    data["results"].sort(key=lambda r: (r.get("round", 0), r.get("rail", 0), r.get("test") or ""))
    return data


def collect(ctx):
    a = ctx.args or {}
    role = a.get("role", "discover")
    if role == "discover":
        return _discover_host(ctx, a)
    if role == "pairs":
        if not isinstance(a.get("steps"), list):
            raise Unsupported("bad arguments: steps must be a list")
        return _pairs(ctx, a)
    raise Unsupported("bad arguments: unknown role %r (discover or pairs)" % role)
