# Probe `nccl`: NCCL all_reduce bus bandwidth on the host's own libnccl.so.2 (ctypes), the figure
# operators see first.  One process drives every GPU: ncclCommInitAll over all GPUs (or a listed
# subset), one warm-up, then timed iterations per message size up to 1 GiB by default, bounded by
# a time budget; algbw = bytes / time and busbw = algbw x 2(n-1)/n as nccl-tests computes them;
# every out-of-place result is read back and compared with the expected sum.
# Not passive: it loads every GPU and its links, so the busy guard leaves GPUs with other
# processes alone (as p2p does).
#
# NCCL's own output never reaches stdout: NCCL_DEBUG=INFO goes to NCCL_DEBUG_FILE, a pipe read by a
# thread (its transport and channel lines are returned for the controller to parse), and fd 1 is
# another drained pipe while NCCL is loaded; C stdio is flushed before fd 1 is restored.  Nothing
# is written on the host (no temporary files).
# Inherited NCCL_* variables and /etc/nccl.conf, ~/.nccl.conf (or NCCL_CONF_FILE) are recorded
# and, unless keep_env, do not steer the test: inherited ones are removed, the files' keys are set
# empty (NCCL's loader never overwrites a set variable; an empty value means the default).
# A hang in NCCL or CUDA is inside C, where Python signals do not run: streams and events are
# polled against a deadline, never synchronised; a hung communicator is aborted (ncclCommAbort),
# and the bundle's per-probe kill is the last resort.
#
# Arguments: lib (libcuda path), nvml_lib (busy guard, MIG and virtualization mode), nccl_lib
# (libnccl.so.2 path; default: the loader's path, then the usual system, pip nvidia-nccl-cu*,
# conda and PyTorch locations under `root`), gpus (CUDA ordinals or bus ids; default all),
# min_bytes (default 1 MiB), max_bytes (default 1 GiB), step_factor (default 4), iters (timed
# iterations per size, default 20), warmup_iters (default 1), budget_s (default 60), hang_s (a
# collective that has not finished after this long is a hang, default 30), force (measure busy
# GPUs too), keep_env (measure under the host's NCCL settings), root (filesystem prefix; tests),
# ops (default ["all_reduce"]; "all_gather" and "reduce_scatter" too).
#
# comm (a fabric qualification's communicator across hosts, api/fabric_nccl.py): {"nranks": N,
# "first_rank": R, "id": hex or null, "ib_hca": "mlx5_0" or null, "ib_only": true, "group": name}.
# The GPUs become ranks R.. of one communicator of N ranks (ncclCommInitRank inside a group); with
# "id" null this process is rank 0's: it calls ncclGetUniqueId and says the id to the controller
# (one `FPSAY` line before the envelope), which hands it to the other hosts' processes.  ib_hca
# sets NCCL_IB_HCA (rail-aligned: one HCA), ib_only NCCL_P2P_DISABLE and NCCL_SHM_DISABLE (traffic
# between GPUs of a host takes the network too).  Results are verified against every rank's pattern.
# requires: _cuda
import glob
import os
import pwd
import select
import struct
import threading
import time

PROBE_NAME = "nccl"
PROBE_VERSION = "1.0"
PROBE_DESCRIPTION = ("NCCL all_reduce bus bandwidth per message size on the host's libnccl.so.2 "
                     "(all GPUs, one process), results verified, transport and channels from NCCL's log")
PASSIVE = False

_NCCL_RESULTS = {
    0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
    4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
    8: "ncclTimeout",  # NCCL 2.32 (held to the real libnccl.so.2: tests/engine/test_nccl_real_lib.py)
}
_NCCL_FLOAT32 = 7  # ncclDataType_t ncclFloat32
_NCCL_SUM = 0      # ncclRedOp_t ncclSum
_REQUIRED = ("ncclGetVersion", "ncclGetErrorString", "ncclCommInitAll", "ncclCommDestroy", "ncclAllReduce",
             "ncclGroupStart", "ncclGroupEnd")
# Newer than NCCL 2.0: absent from old libraries, so each is asked for before use.
_OPTIONAL = ("ncclCommAbort", "ncclCommGetAsyncError", "ncclGetLastError", "ncclAllGather", "ncclReduceScatter",
             "ncclGetUniqueId", "ncclCommInitRank")
# nccl-tests' bus factors: the share of the message each rank moves over the bus
_OPS = {"all_reduce": "ncclAllReduce", "all_gather": "ncclAllGather", "reduce_scatter": "ncclReduceScatter"}
# The variables the probe sets itself; inherited values of these only decide where NCCL logs.
_OWN = ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_CONF_FILE")
_CHUNK = 4 << 20    # host staging for filling and verifying device buffers
_PERIOD = 1024      # float32 elements per pattern period (4 KiB): offsets within it are checked
_LOG_KEEP = ("via ", "coll channels", "NVLS", "NCCL version", "WARN", "set by environment", "Init COMPLETE")
_LOG_MAX_LINES = 600
_NOT_READY = 600


class _UniqueId(ctypes.Structure):
    _fields_ = (("internal", ctypes.c_char * 128),)


class NcclError(Exception):
    def __init__(self, call, code, detail=None):
        self.call = call
        self.code = code
        self.name = _NCCL_RESULTS.get(code, "ncclResult %d" % code)
        self.detail = detail
        msg = "%s: %s (%d)" % (call, self.name, code)
        if detail:
            msg += ": " + detail
        Exception.__init__(self, msg)


def _args(ctx):
    a = ctx.args or {}
    out = {
        "lib": a.get("lib") or "libcuda.so.1", "nvml_lib": a.get("nvml_lib", "libnvidia-ml.so.1"),
        "nccl_lib": a.get("nccl_lib") or None, "root": a.get("root") or "",
        "min_bytes": int(a.get("min_bytes", 1 << 20)), "max_bytes": int(a.get("max_bytes", 1 << 30)),
        "step_factor": int(a.get("step_factor", 4)), "iters": int(a.get("iters", 20)),
        "warmup_iters": int(a.get("warmup_iters", 1)), "budget_s": float(a.get("budget_s", 60)),
        "hang_s": float(a.get("hang_s", 30)), "force": bool(a.get("force", False)),
        "keep_env": bool(a.get("keep_env", False)), "gpus": a.get("gpus"),
        "ops": a.get("ops", ["all_reduce"]), "comm": a.get("comm"),
    }
    comm = out["comm"]
    if comm is not None:
        if not isinstance(comm, dict) or not isinstance(comm.get("nranks"), int) or \
                not isinstance(comm.get("first_rank"), int) or not 1 <= comm["nranks"] <= 65536 or \
                not 0 <= comm["first_rank"] < comm["nranks"]:
            raise ValueError("comm must give nranks and first_rank (0 <= first_rank < nranks)")
        if comm.get("id") is not None and (not isinstance(comm["id"], str) or len(comm["id"]) != 256):
            raise ValueError("comm.id must be the 128-byte ncclUniqueId in hex")
    if not isinstance(out["ops"], list) or not out["ops"] or [o for o in out["ops"] if o not in _OPS]:
        raise ValueError("ops must be a non-empty list of %s" % ", ".join(sorted(_OPS)))
    if not (4 <= out["min_bytes"] <= out["max_bytes"] <= (16 << 30)):
        raise ValueError("need 4 <= min_bytes <= max_bytes <= 16 GiB")
    if not (2 <= out["step_factor"] <= 1024 and 1 <= out["iters"] <= 10000 and 0 <= out["warmup_iters"] <= 100):
        raise ValueError("step_factor must be 2-1024, iters 1-10000, warmup_iters 0-100")
    if out["budget_s"] < 0 or out["hang_s"] <= 0:
        raise ValueError("budget_s must not be negative and hang_s must be positive")
    if out["gpus"] is not None and not isinstance(out["gpus"], list):
        raise ValueError("gpus must be a list of CUDA ordinals or bus ids")
    return out


def _sizes(a):
    out = []
    s = a["min_bytes"] // 4 * 4
    while s < a["max_bytes"]:
        out.append(s)
        s *= a["step_factor"]
    out.append(a["max_bytes"] // 4 * 4)
    return out


# ------------------------------------------------------------------------- finding the library


def _home():
    try:
        return pwd.getpwuid(os.getuid()).pw_dir  # what NCCL itself uses for ~/.nccl.conf
    except KeyError:
        return os.environ.get("HOME") or "/root"


def _candidates(root):
    """(label, glob pattern) for the usual homes of libnccl.so.2, in the order they are tried."""
    home = _home()
    prefixes = ["/usr", "/usr/local", "/opt/conda", home + "/.local", home + "/miniconda3",
                home + "/anaconda3", home + "/miniforge3"]
    for var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
        if os.environ.get(var):
            prefixes.insert(0, os.environ[var])
    pats = [
        ("system", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"), ("system", "/usr/lib/aarch64-linux-gnu/libnccl.so.2"),
        ("system", "/usr/lib64/libnccl.so.2"), ("system", "/usr/lib/libnccl.so.2"),
        ("system", "/usr/local/cuda/lib64/libnccl.so.2"), ("system", "/usr/local/cuda*/lib64/libnccl.so.2"),
        ("system", "/usr/local/nccl*/lib/libnccl.so.2"), ("system", "/opt/nccl*/lib/libnccl.so.2"),
    ]
    for p in prefixes:
        pats.append(("pip nvidia-nccl-cu*", p + "/lib/python3*/*-packages/nvidia/nccl/lib/libnccl.so.2"))
    for p in prefixes:
        pats.append(("conda", p + "/lib/libnccl.so.2"))
        pats.append(("conda", p + "/envs/*/lib/libnccl.so.2"))
    for p in prefixes:
        pats.append(("PyTorch", p + "/lib/python3*/*-packages/torch/lib/libnccl.so.2"))
    seen = set()
    for label, pat in pats:
        full = root.rstrip("/") + pat if root else pat
        if full not in seen:
            seen.add(full)
            yield label, full


def _find_nccl(a):
    """(loaded CDLL, path, how it was found, every place looked); Unsupported when none loads."""
    looked = []
    if a["nccl_lib"]:
        try:
            return ctypes.CDLL(a["nccl_lib"]), a["nccl_lib"], "argument nccl_lib", [a["nccl_lib"]]
        except OSError as e:
            raise Unsupported("cannot load nccl_lib %s: %s" % (a["nccl_lib"], e)) from None
    if not a["root"]:
        looked.append("the loader's path (ld.so.cache, LD_LIBRARY_PATH)")
        try:
            return ctypes.CDLL("libnccl.so.2"), "libnccl.so.2", "loader", looked
        except OSError:
            pass
    errors = []
    for label, pat in _candidates(a["root"]):
        looked.append(pat)
        for path in sorted(glob.glob(pat)):
            try:
                return ctypes.CDLL(path), path, label, looked
            except OSError as e:
                errors.append("%s: %s" % (path, e))
    why = "libnccl.so.2 not found (NCCL is not installed where fleetprobe looks)"
    if errors:
        why = "no loadable libnccl.so.2 (%s)" % "; ".join(errors[:3])
    raise Unsupported("%s; looked in: %s" % (why, ", ".join(looked)))


# ------------------------------------------------------------------------- the host's NCCL settings


def _read_conf(path):
    """NCCL's own reading of a conf file: NAME=VALUE lines, '#' comments; {} when unreadable."""
    out = {}
    try:
        with open(path, "r", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line or line.startswith("#") or "=" not in line:
                    continue
                k, v = line.split("=", 1)
                out[k] = v
    except (OSError, UnicodeError):
        return None
    return out


def _settings(root):
    """The NCCL settings this host gives a process: inherited variables and the conf files."""
    inherited = dict((k, v) for k, v in os.environ.items() if k.startswith("NCCL_"))
    files = {}
    user = inherited.get("NCCL_CONF_FILE")
    paths = [user] if user else [_home() + "/.nccl.conf"]
    paths.append("/etc/nccl.conf")
    for p in paths:
        conf = _read_conf(root.rstrip("/") + p if root else p)
        if conf is not None:
            files[p] = conf
    return inherited, files


def _neutralise(inherited, files, keep, log_path):
    """Set the environment NCCL will read; returns what was applied (name -> value, None: removed)."""
    applied = {}
    if not keep:
        for k in inherited:
            if k not in _OWN:
                del os.environ[k]
                applied[k] = None
        for conf in files.values():
            for k in conf:
                if k not in _OWN:
                    os.environ[k] = ""  # set, so the file cannot set it; empty, so NCCL's default
                    applied[k] = ""
        os.environ["NCCL_CONF_FILE"] = os.devnull  # an empty conf file instead of ~/.nccl.conf
        applied["NCCL_CONF_FILE"] = os.devnull
    for k, v in (("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_FILE", log_path), ("NCCL_DEBUG_SUBSYS", "INIT,ENV")):
        if v is None:
            os.environ.pop(k, None)  # no log pipe: NCCL logs to stdout, which is captured too
        else:
            os.environ[k] = v
        applied[k] = v
    return applied


# ------------------------------------------------------------------------- NCCL's output


def _flush_c_stdio():
    """What NCCL left in C's stdio buffers (stdout is fully buffered on a pipe) is written now."""
    try:
        libc = ctypes.CDLL(None)
        libc.fflush.argtypes = [ctypes.c_void_p]
        libc.fflush(None)
    except (OSError, AttributeError):
        pass


class _Drain(threading.Thread):
    """A pipe NCCL writes into, read by a thread (NCCL would block on a full pipe): its log lines
    are kept (filtered, bounded), the first bytes of anything else too.  Nothing touches the disk."""

    def __init__(self):
        threading.Thread.__init__(self)
        self.daemon = True
        self.r, self.w = os.pipe()
        self.stopping = False
        self.total = 0
        self.head = b""
        self.rest = b""
        self.lines = []
        self.truncated = False

    def run(self):
        while True:
            ready, _, _ = select.select([self.r], [], [], 0.05)
            if ready:
                data = os.read(self.r, 65536)
                if not data:
                    return
                self._feed(data)
            elif self.stopping:
                return

    def _feed(self, data):
        self.total += len(data)
        if len(self.head) < 2000:
            self.head += data[:2000 - len(self.head)]
        self.rest += data
        *whole, self.rest = self.rest.split(b"\n")
        for raw in whole:
            line = raw.decode("utf-8", "replace")
            if " NCCL " in line and any(k in line for k in _LOG_KEEP):
                if len(self.lines) >= _LOG_MAX_LINES:
                    self.truncated = True
                else:
                    self.lines.append(line[:400])

    def finish(self):
        _flush_c_stdio()
        self.stopping = True
        self.join(5.0)
        if self.rest:
            self._feed(b"\n")
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass


class _StdoutTrap(object):
    """fd 1 -> a drained pipe while NCCL is loaded; C stdio flushed before fd 1 is restored."""

    def __init__(self):
        self.drain = _Drain()
        self.saved = None

    def __enter__(self):
        self.drain.start()
        self.saved = os.dup(1)
        os.dup2(self.drain.w, 1)
        return self

    def restore(self):
        if self.saved is None:
            return
        _flush_c_stdio()  # before fd 1 changes back, or the chatter would land on the real stdout
        os.dup2(self.saved, 1)
        os.close(self.saved)
        self.saved = None
        self.drain.finish()

    def __exit__(self, *exc):
        self.restore()
        return False


# ------------------------------------------------------------------------- NCCL


class _Nccl(object):
    def __init__(self, lib):
        self.lib = lib
        self.missing = [n for n in _REQUIRED if not hasattr(lib, n)]
        self.optional_missing = [n for n in _OPTIONAL if not hasattr(lib, n)]
        if self.missing:
            return
        P = ctypes.POINTER
        sigs = {
            "ncclGetVersion": [P(c_int)], "ncclGetErrorString": [c_int],
            "ncclCommInitAll": [P(c_void_p), c_int, P(c_int)], "ncclCommDestroy": [c_void_p],
            "ncclAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
            "ncclAllGather": [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p],
            "ncclReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
            "ncclGroupStart": [], "ncclGroupEnd": [], "ncclCommAbort": [c_void_p],
            "ncclCommGetAsyncError": [c_void_p, P(c_int)], "ncclGetLastError": [c_void_p],
        }
        for name, argtypes in sigs.items():
            f = getattr(lib, name, None)
            if f is None:
                continue
            f.argtypes = argtypes
            f.restype = ctypes.c_char_p if name in ("ncclGetErrorString", "ncclGetLastError") else c_int

    def has(self, name):
        return name not in self.missing and name not in self.optional_missing

    def detail(self, code):
        parts = []
        try:
            s = self.lib.ncclGetErrorString(code)
            if s:
                parts.append(s.decode("utf-8", "replace"))
        except (OSError, AttributeError):
            pass
        if self.has("ncclGetLastError"):
            last = self.lib.ncclGetLastError(None)
            if last:
                parts.append("last error: " + last.decode("utf-8", "replace"))
        return "; ".join(parts) or None

    def __call__(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise NcclError(name, rc, self.detail(rc))

    def version(self):
        v = c_int()
        self("ncclGetVersion", ctypes.byref(v))
        code = v.value
        # NCCL_VERSION_CODE: major*10000+minor*100+patch since 2.9, major*1000+minor*100+patch before
        if code >= 10000:
            major, minor, patch = code // 10000, (code % 10000) // 100, code % 100
        else:
            major, minor, patch = code // 1000, (code % 1000) // 100, code % 100
        return code, "%d.%d.%d" % (major, minor, patch)


class _Run(_CudaSession):
    """Contexts, streams, events, buffers and communicators, in one place, so every path frees them."""

    def __init__(self, cu, nccl, gpus, max_bytes, comm=None):
        _CudaSession.__init__(self, cu)
        self.nccl = nccl
        self.gpus = gpus
        self.comm = comm  # across hosts: {"nranks", "first_rank", ...}; None: this host's GPUs alone
        self.rank_base = comm["first_rank"] if comm else 0
        self.nranks = comm["nranks"] if comm else len(gpus)
        self.max_bytes = max_bytes
        self.send = {}
        self.recv = {}
        self.stage = None  # pinned host staging buffer, usable from every context (PORTABLE)
        self.comms = None  # ctypes array of ncclComm_t
        self.hung = False
        self.aborted = False
        self.memcmp = _memcmp()

    def open_contexts(self):
        for g in self.gpus:
            self.open_gpu(g)

    def fit(self, data):
        """Send and receive buffers must fit beside what the GPUs already hold: halve until they do."""
        free = []
        for g in self.gpus:
            self.use(g)
            f, t = c_size_t(), c_size_t()
            try:
                self.cu("cuMemGetInfo_v2", ctypes.byref(f), ctypes.byref(t))
                free.append(f.value)
            except CudaError:
                pass
        if not free:
            return
        room = int(min(free) * 0.8) // 2 - (256 << 20)  # NCCL's own buffers take some hundred MiB
        asked = self.max_bytes
        while self.max_bytes > room and self.max_bytes > (1 << 20):
            self.max_bytes //= 2
        if self.max_bytes != asked:
            data["max_bytes_reduced"] = {"asked": asked, "used": self.max_bytes, "free_bytes": min(free)}

    def alloc(self):
        self.use(self.gpus[0])
        h = c_void_p()
        self.cu("cuMemHostAlloc", ctypes.byref(h), _CHUNK, 1)  # CU_MEMHOSTALLOC_PORTABLE
        self.stage = h.value
        for g in self.gpus:
            self.use(g)
            for table in (self.send, self.recv):
                p = c_uint64()
                self.cu("cuMemAlloc_v2", ctypes.byref(p), self.max_bytes)
                table[g] = p.value

    # -- waiting without blocking -------------------------------------------------------
    def async_error(self):
        if self.comms is None or not self.nccl.has("ncclCommGetAsyncError"):
            return None
        for i in range(len(self.gpus)):
            r = c_int(0)
            rc = self.nccl.lib.ncclCommGetAsyncError(self.comms[i], ctypes.byref(r))
            if rc == 0 and r.value not in (0, 7):  # 7: ncclInProgress (non-blocking init)
                return NcclError("ncclCommGetAsyncError", r.value, self.nccl.detail(r.value))
        return None

    def wait(self, kind, handles, deadline):
        """Poll cuEventQuery/cuStreamQuery until every handle is done.  None when done, "hang" when
        the deadline passed first, or the NCCL async error seen meanwhile."""
        query = self.cu.fn("cuEventQuery" if kind == "event" else "cuStreamQuery")
        pending = list(handles)
        pause = 0.0002
        while True:
            still = []
            for h in pending:
                rc = query(h)
                if rc == _NOT_READY:
                    still.append(h)
                elif rc != 0:
                    raise CudaError("cuEventQuery" if kind == "event" else "cuStreamQuery", rc)
            pending = still
            if not pending:
                return None
            err = self.async_error()
            if err is not None:
                return err
            if time.time() >= deadline:
                return "hang"
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def streams_of(self):
        return [self.streams[g] for g in self.gpus]

    # -- patterns -------------------------------------------------------------------------
    def pattern(self, rank, nbytes=_CHUNK):
        """A float32 chunk of whole periods, at most 4 MiB (nbytes rounded up to a period): element i
        of rank r is (r + 1) + (i mod 1024); sums stay exact."""
        block = struct.pack("<%df" % _PERIOD, *[float(rank + 1 + i) for i in range(_PERIOD)])
        return block * max(1, -(-min(_CHUNK, nbytes) // len(block)))

    def expected(self, n):
        base = n * (n + 1) // 2
        block = struct.pack("<%df" % _PERIOD, *[float(base + n * i) for i in range(_PERIOD)])
        return block * (_CHUNK // len(block))

    def fill(self, deadline):
        for r, g in enumerate(self.gpus):
            chunk = self.pattern(self.rank_base + r)
            ctypes.memmove(self.stage, chunk, _CHUNK)
            self.use(g)
            off = 0
            while off < self.max_bytes:
                n = min(_CHUNK, self.max_bytes - off)
                self.cu("cuMemcpyHtoDAsync_v2", c_uint64(self.send[g] + off), c_void_p(self.stage), n,
                        self.streams[g])
                off += n
            if self.wait("stream", [self.streams[g]], deadline) is not None:
                raise CudaError("cuMemcpyHtoDAsync_v2 (fill did not finish)", 909)

    def clear(self, nbytes, deadline):
        for g in self.gpus:
            self.use(g)
            self.cu("cuMemsetD8Async", c_uint64(self.recv[g]), 0xFF, nbytes, self.streams[g])
        if self.wait("stream", self.streams_of(), deadline) is not None:
            raise CudaError("cuMemsetD8Async (did not finish)", 909)

    def verify(self, op, nbytes, deadline):
        """Wrong float32 elements over every rank's result (0: all correct).  all_reduce: the sum
        everywhere; all_gather: rank q's pattern in segment q; reduce_scatter: the sum of segment r
        on rank r (segments are whole pattern periods, so every one starts at phase 0)."""
        n = self.nranks
        total = self.expected(n)
        seg = nbytes // n
        wrong = 0
        for g in self.gpus:
            if op == "all_gather":
                # one rank's pattern at a time, no longer than its segment: a list of every rank's
                # 4 MiB chunk held nranks x 4 MiB per process (1.7 GB at 208 ranks; OOM-killed)
                for q in range(n):
                    wrong += self._compare(g, q * seg, seg, self.pattern(q, seg), deadline)
            else:
                wrong += self._compare(g, 0, nbytes if op == "all_reduce" else seg, total, deadline)
        return wrong

    def _compare(self, g, base, length, exp, deadline):
        self.use(g)
        wrong = 0
        off = 0
        while off < length:
            k = min(_CHUNK, length - off)
            self.cu("cuMemcpyDtoHAsync_v2", c_void_p(self.stage), c_uint64(self.recv[g] + base + off), k,
                    self.streams[g])
            if self.wait("stream", [self.streams[g]], deadline) is not None:
                raise CudaError("cuMemcpyDtoHAsync_v2 (read-back did not finish)", 909)
            if not self._same(exp, k):
                got = ctypes.string_at(self.stage, k)
                a = struct.unpack("<%dI" % (k // 4), got)
                b = struct.unpack("<%dI" % (k // 4), exp[:k])
                wrong += sum(1 for x, y in zip(a, b) if x != y)
            off += k
        return wrong

    def _same(self, exp, k):
        if self.memcmp is not None:
            return self.memcmp(c_void_p(self.stage), exp, k) == 0
        return ctypes.string_at(self.stage, k) == exp[:k]

    # -- NCCL -----------------------------------------------------------------------------
    def init_comms(self, ctx=None):
        n = len(self.gpus)
        comms = (c_void_p * n)()
        if self.comm is None:
            devs = (c_int * n)(*self.gpus)
            self.nccl("ncclCommInitAll", comms, n, devs)
            self.comms = comms
            return
        uid = _UniqueId()
        if self.comm.get("id"):
            raw = bytes(bytearray(int(self.comm["id"][i:i + 2], 16) for i in range(0, 256, 2)))
            ctypes.memmove(ctypes.addressof(uid), raw, 128)
        else:
            self.nccl("ncclGetUniqueId", ctypes.byref(uid))
            raw = ctypes.string_at(ctypes.addressof(uid), 128)
            if ctx is not None:  # the controller hands it to the other hosts' processes
                ctx.say({"nccl_id": "".join("%02x" % b for b in bytearray(raw)), "group": self.comm.get("group")})
        self.nccl("ncclGroupStart")
        try:
            for i, g in enumerate(self.gpus):
                self.use(g)  # the rank's device is the current one, as cudaSetDevice makes it for NCCL
                self.nccl("ncclCommInitRank", ctypes.byref(comms, i * ctypes.sizeof(c_void_p)), self.nranks, uid,
                          self.rank_base + i)
        finally:
            self.nccl("ncclGroupEnd")
        self.comms = comms

    def collective(self, op, nbytes):
        """One collective of `nbytes` (nccl-tests' size: the all_reduce message, the gathered
        result, the scattered input) on every rank, inside one group."""
        n = self.nranks
        self.nccl("ncclGroupStart")
        try:
            for i, g in enumerate(self.gpus):
                send, recv = c_void_p(self.send[g]), c_void_p(self.recv[g])
                if op == "all_reduce":
                    self.nccl("ncclAllReduce", send, recv, nbytes // 4, _NCCL_FLOAT32, _NCCL_SUM, self.comms[i],
                              self.streams[g])
                elif op == "all_gather":
                    self.nccl("ncclAllGather", send, recv, nbytes // 4 // n, _NCCL_FLOAT32, self.comms[i],
                              self.streams[g])
                else:
                    self.nccl("ncclReduceScatter", send, recv, nbytes // 4 // n, _NCCL_FLOAT32, _NCCL_SUM,
                              self.comms[i], self.streams[g])
        finally:
            self.nccl("ncclGroupEnd")

    def abort(self):
        """A hung or failed communicator: ncclCommAbort (never destroy: that waits for the kernels)."""
        if self.comms is None:
            return None
        if not self.nccl.has("ncclCommAbort"):
            return "this NCCL lacks ncclCommAbort: the hung communicators are left to the process exit"
        errs = []
        for i in range(len(self.gpus)):
            rc = self.nccl.lib.ncclCommAbort(self.comms[i])
            if rc != 0:
                errs.append("ncclCommAbort rank %d: %s" % (i, _NCCL_RESULTS.get(rc, rc)))
        self.comms = None
        self.aborted = True
        return "; ".join(errs) or None

    def close(self):
        errors = []
        if self.comms is not None:
            if self.hung:
                err = self.abort()
                if err:
                    errors.append(err)
            else:
                for i in range(len(self.gpus)):
                    rc = self.nccl.lib.ncclCommDestroy(self.comms[i])
                    if rc != 0:
                        errors.append("ncclCommDestroy rank %d: %s" % (i, _NCCL_RESULTS.get(rc, rc)))
                self.comms = None
        if self.hung and not self.aborted:
            # kernels may still run on these buffers: freeing them under a kernel is worse than
            # leaving them to the process exit
            return errors
        for g in list(self.ctxs):
            self.close_gpu(g, errors)  # makes g current: the buffers are freed in its context
            for table in (self.send, self.recv):
                p = table.pop(g, None)
                if p is not None:
                    self._quiet(errors, "cuMemFree_v2", c_uint64(p))
        if self.stage is not None:
            self._quiet(errors, "cuMemFreeHost", c_void_p(self.stage))
            self.stage = None
        self.release_contexts(errors)
        return errors


# ------------------------------------------------------------------------- collect


def _select(a, gpus):
    if a["gpus"] is None:
        return [g["index"] for g in gpus]
    by_bus = dict((g["bus_id"], g["index"]) for g in gpus)
    out = []
    for x in a["gpus"]:
        if isinstance(x, str):
            x = by_bus.get(x.lower(), x)
        if not isinstance(x, int) or not (0 <= x < len(gpus)):
            raise ValueError("gpus entry %r is not a CUDA ordinal 0-%d or a known bus id" % (x, len(gpus) - 1))
        if x not in out:
            out.append(x)
    return out


def _guard(a, gpus, selected, data, ctx):
    """Busy GPUs (other processes), MIG and virtualization mode through NVML."""
    guard = data["guard"]
    try:
        nvml = _Nvml(a["nvml_lib"])
    except (OSError, AttributeError) as e:
        guard["reason"] = "NVML unavailable (%s): busy GPUs could not be detected" % e
        ctx.warn(guard["reason"])
        return
    try:
        for g in selected:
            bus = gpus[g]["bus_id"]
            busy = nvml.processes(bus)
            if busy:
                guard["busy"][str(g)] = busy
                if not a["force"]:
                    gpus[g]["status"] = "busy"
            if nvml.mig_mode(bus) == 1:
                data["platform"]["mig"].append(bus)
            mode = nvml.virtualization_mode(bus)
            if mode is not None:
                data["platform"]["virtualization_mode"] = mode
        guard["ran"] = True
    except (OSError, AttributeError) as e:
        guard["reason"] = "NVML guard failed: %s" % e
        ctx.warn(guard["reason"])
    finally:
        nvml.close()


def collect(ctx):
    t0 = time.time()
    try:
        a = _args(ctx)
    except (TypeError, ValueError) as e:
        raise Unsupported("bad arguments: %s" % e) from None
    # the budget bounds the sweep; the deadline keeps room to abort, free and report
    t_budget = t0 + max(0.0, min(a["budget_s"], ctx.remaining() - 8.0))
    t_hard = t0 + max(1.0, ctx.remaining() - 5.0)
    data = {
        "library": None, "cuda_driver": None, "gpus": [], "selected": [],
        "env": {"inherited": {}, "files": {}, "kept": a["keep_env"], "applied": {}},
        "platform": {"mig": [], "virtualization_mode": None},
        "guard": {"ran": False, "reason": None, "busy": {}, "forced": a["force"]},
        "params": {"min_bytes": a["min_bytes"], "max_bytes": a["max_bytes"], "step_factor": a["step_factor"],
                   "iters": a["iters"], "warmup_iters": a["warmup_iters"], "budget_s": a["budget_s"],
                   "hang_s": a["hang_s"], "ops": a["ops"], "dtype": "float", "redop": "sum",
                   "timing": "cuda-events on every rank's stream around the iterations; the slowest rank"},
        "results": [], "debug_lines": None, "debug_truncated": False, "stdout_bytes": 0, "stdout_head": "",
        "errors": [], "hang": None, "budget_exhausted": False, "not_reached": [], "complete": False,
    }
    ctx.partial = data
    inherited, files = _settings(a["root"])
    data["env"]["inherited"] = inherited
    data["env"]["files"] = files
    # NCCL's log goes into a pipe (NCCL_DEBUG_FILE=/proc/self/fd/N), read by a thread: the probe
    # writes nothing on the host.  Without /proc, NCCL logs to stdout, which is drained as well.
    log = _Drain()
    log_path = "/proc/self/fd/%d" % log.w if os.path.isdir("/proc/self/fd") else None
    applied = _neutralise(inherited, files, a["keep_env"], log_path)
    if a["comm"] is not None:
        # a communicator across hosts: its rail and its IB-only routing are the test's own settings
        ctx.exit_with_controller()
        comm = a["comm"]
        own = {"NCCL_IB_HCA": comm.get("ib_hca")}
        if comm.get("ib_only", True):
            own.update(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1")
        for k, v in own.items():
            if v:
                os.environ[k] = str(v)
                applied[k] = str(v)
        data["comm"] = {"nranks": comm["nranks"], "first_rank": comm["first_rank"], "group": comm.get("group"),
                        "ib_hca": comm.get("ib_hca"), "id": "given" if comm.get("id") else "created here"}
    data["env"]["applied"] = dict((k, "<pipe>" if k == "NCCL_DEBUG_FILE" and v else v) for k, v in applied.items())
    log.start()
    trap = _StdoutTrap()
    try:
        with trap:
            _run(a, data, ctx, t_budget, t_hard)
    finally:
        trap.restore()
        log.finish()
        out = trap.drain
        data["stdout_bytes"], data["stdout_head"] = out.total, out.head.decode("utf-8", "replace")
        data["debug_lines"] = log.lines + out.lines
        data["debug_truncated"] = log.truncated or out.truncated
    data["elapsed_s"] = round(time.time() - t0, 3)
    return data


def _err(data, where, e):
    data["errors"].append({"where": where, "error": getattr(e, "name", type(e).__name__), "message": str(e)})


def _run(a, data, ctx, t_budget, t_hard):
    lib, path, how, looked = _find_nccl(a)
    nccl = _Nccl(lib)
    data["library"] = {"path": path, "found_by": how, "searched": looked, "version_code": None, "version": None,
                       "missing_symbols": nccl.missing + nccl.optional_missing}
    if nccl.missing:
        raise Unsupported("%s is not a usable NCCL 2 library: it lacks %s" % (path, ", ".join(nccl.missing)))
    data["library"]["version_code"], data["library"]["version"] = nccl.version()
    cu = _open_cuda(a["lib"])
    driver, gpus = _discover(cu)
    data["cuda_driver"] = "%d.%d" % (driver // 1000, (driver % 1000) // 10)
    data["gpus"] = gpus
    if not gpus:
        raise Unsupported("no CUDA device (cuDeviceGetCount answered 0)")
    try:
        selected = _select(a, gpus)
    except ValueError as e:
        raise Unsupported("bad arguments: %s" % e) from None
    _guard(a, gpus, selected, data, ctx)
    if data["platform"]["mig"]:
        data["limitation"] = "MIG is enabled on %s: NCCL cannot span MIG instances" % ", ".join(data["platform"]["mig"])
        return
    usable = [g for g in selected if gpus[g]["status"] == "ok"]
    data["selected"] = usable
    if not usable:
        data["limitation"] = "every selected GPU runs other processes (busy guard; force=true measures anyway)"
        return
    run = _Run(cu, nccl, usable, a["max_bytes"], a["comm"])
    try:
        try:
            run.open_contexts()
            run.fit(data)
            run.alloc()
            run.fill(t_hard)
        except CudaError as e:
            _err(data, "contexts and buffers (2 x %d bytes per GPU)" % run.max_bytes, e)
            return
        sizes = [x for x in _sizes(dict(a, max_bytes=run.max_bytes)) if x <= run.max_bytes]
        try:
            run.init_comms(ctx)
        except NcclError as e:
            what = ("ncclCommInitRank of ranks %d-%d of %d" % (run.rank_base, run.rank_base + len(usable) - 1, run.nranks)
                    if a["comm"] else "ncclCommInitAll over %d GPUs" % len(usable))
            _err(data, what, e)
            return
        _sweep(run, data, sizes, a, t_budget, t_hard)
    finally:
        leftovers = run.close()
        if leftovers:
            data["cleanup_errors"] = leftovers


def _units(run, ops, sizes):
    """(op, size) in sweep order; all_gather and reduce_scatter sizes are whole pattern periods per
    rank (multiples of n x 4 KiB), as the verification compares segment by segment."""
    n = run.nranks
    out = []
    for op in ops:
        if op != "all_reduce" and not run.nccl.has(_OPS[op]):
            continue
        for size in sizes:
            if op != "all_reduce":
                size = size // (n * 4 * _PERIOD) * (n * 4 * _PERIOD)
            if size and (op, size) not in out:
                out.append((op, size))
    return out


def _bus_factor(op, n):
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / float(n)


def _sweep(run, data, sizes, a, t_budget, t_hard):
    n = run.nranks
    starts = [run.events[g][0] for g in run.gpus]
    ends = [run.events[g][1] for g in run.gpus]
    for op in a["ops"]:
        if op != "all_reduce" and not run.nccl.has(_OPS[op]):
            data["errors"].append({"where": op, "error": "symbol missing",
                                   "message": "this NCCL lacks %s: %s not measured" % (_OPS[op], op)})
    units = _units(run, a["ops"], sizes)
    for i, (op, size) in enumerate(units):
        now = time.time()
        # across hosts every rank must run the same collectives: no rank may stop early on its own
        # clock (the controller's deadline for the whole communicator bounds it instead)
        if now >= t_budget and run.comm is None:
            data["budget_exhausted"] = True
            data["not_reached"] = _rest(units, i, a)
            return
        where = "%s %d bytes" % (op, size)
        try:
            run.clear(size, t_hard)
            for _ in range(a["warmup_iters"]):
                run.collective(op, size)
            deadline = min(t_hard, time.time() + a["hang_s"])
            state = run.wait("stream", run.streams_of(), deadline)
            if state is None:
                # warm-up time says how many timed iterations the budget leaves for this size
                iters = a["iters"]
                share = (t_budget - time.time()) / max(1, len(units) - i)
                for g in run.gpus:
                    run.use(g)
                    run.cu("cuEventRecord", run.events[g][0], run.streams[g])
                run.collective(op, size)
                for g in run.gpus:
                    run.use(g)
                    run.cu("cuEventRecord", run.events[g][1], run.streams[g])
                state = run.wait("event", ends, min(t_hard, time.time() + a["hang_s"]))
                if state is None:
                    one = _elapsed_ms(run, starts, ends) / 1e3
                    if one > 0 and run.comm is None:  # across hosts: the same count on every rank
                        iters = max(1, min(a["iters"], int(share / one)))
                    for g in run.gpus:
                        run.use(g)
                        run.cu("cuEventRecord", run.events[g][0], run.streams[g])
                    for _ in range(iters):
                        run.collective(op, size)
                    for g in run.gpus:
                        run.use(g)
                        run.cu("cuEventRecord", run.events[g][1], run.streams[g])
                    state = run.wait("event", ends, min(t_hard, time.time() + a["hang_s"] + one * iters))
        except (CudaError, NcclError) as e:
            _err(data, where, e)
            if isinstance(e, NcclError) or e.code in _STICKY:
                run.hung = True  # a failed communicator may hold kernels: abort, never destroy
                data["not_reached"] = _rest(units, i + 1, a)
                return
            continue
        if state is not None:
            run.hung = True
            if state == "hang":
                data["hang"] = {"op": op, "size_bytes": size, "after_s": round(a["hang_s"], 3)}
            else:
                _err(data, where, state)
            data["not_reached"] = _rest(units, i + 1, a)
            abort_err = run.abort()
            if abort_err:
                data["errors"].append({"where": "abort after %s" % where, "error": "ncclCommAbort",
                                       "message": abort_err})
            return
        ms = _elapsed_ms(run, starts, ends)
        time_us = ms * 1e3 / iters
        algbw = size / (time_us * 1e-6) / 1e9 if time_us > 0 else None
        try:
            wrong = run.verify(op, size, t_hard)
        except CudaError as e:
            _err(data, "verify %s" % where, e)
            wrong = None
        data["results"].append({
            "op": op, "size_bytes": size, "count": size // 4, "dtype": "float",
            "redop": None if op == "all_gather" else "sum",
            "in_place": False, "iters": iters, "time_us": round(time_us, 3),
            "algbw_gbps": round(algbw, 3) if algbw is not None else None,
            "busbw_gbps": round(algbw * _bus_factor(op, n), 3) if algbw is not None else None,
            "wrong": wrong,
        })
    data["complete"] = True


def _rest(units, i, a):
    """What was not reached: sizes when only one operation runs (the common case), else "op size"."""
    return [s for _, s in units[i:]] if len(a["ops"]) == 1 else ["%s %d" % u for u in units[i:]]


def _elapsed_ms(run, starts, ends):
    worst = 0.0
    for g, s, e in zip(run.gpus, starts, ends):
        ms = ctypes.c_float()
        run.use(g)
        run.cu("cuEventElapsedTime_v2", ctypes.byref(ms), s, e)
        worst = max(worst, float(ms.value))
    return worst
