# Probe `p2p`: measured copy bandwidth and latency with the CUDA driver API (ctypes on
# libcuda.so.1): host<->GPU per GPU (pinned, copy engine), device-local copies, per ordered GPU
# pair copy-engine and SM-kernel bandwidth, bidirectional bandwidth, small-copy latency, and all
# GPUs to/from the host at once (the shared-uplink test).  Every copy's data is verified.
# Not passive: it loads the GPUs, so the busy guard leaves GPUs with other processes alone.
#
# Arguments: lib (libcuda path), nvml_lib (libnvidia-ml path for the busy guard and the NVLink
# pair filter), size_mb (buffer per copy, default 64), repeats (timed samples, median reported,
# default 5), loops (copies per sample, default 4), pairs ("all" | "nvlink" | "none" | list of
# [src, dst] CUDA ordinals or bus ids), budget_s (total time the probe keeps, default 120),
# force (measure GPUs that run other processes too), latency_loops (default 20), load_s (seconds
# each GPU runs the SM copy kernel back to back while NVML reads its SM clock, power and
# temperature under that load, default 0.3; 0 skips it).
# The CUDA driver session (errors, signatures, discovery, busy guard) is shared with `nccl`:
# requires: _cuda
# Timing follows nvbandwidth: a spin kernel holds the stream while the copies are enqueued,
# CUDA events bracket them, the host then releases the flag; one warm-up sample is discarded.
import ctypes
import statistics
import time

PROBE_NAME = "p2p"
PROBE_VERSION = "1.1"
PROBE_DESCRIPTION = ("measured host<->GPU, device-local and GPU<->GPU copy bandwidth and latency "
                     "(copy engine and SM kernel, uni/bidirectional, all-to-host), data verified; "
                     "SM clock, power and temperature under load")
PASSIVE = False

# Generated from probes/p2p_kernel.cu (see its header for the exact command); the header is
# rewritten to PTX ISA 6.0 / sm_50 so every driver since CUDA 9.0 can JIT it.
_PTX = """.version 6.0
.target sm_50
.address_size 64
.visible .entry fp_spin(
	.param .u64 fp_spin_param_0,
	.param .u64 fp_spin_param_1
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<8>;
	ld.param.u64 	%rd5, [fp_spin_param_0];
	ld.param.u64 	%rd3, [fp_spin_param_1];
	cvta.to.global.u64 	%rd1, %rd5;
	mov.u64 %rd4, %globaltimer;
$L__BB0_1:
	ld.volatile.global.u32 	%r1, [%rd1];
	setp.ne.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_3;
	mov.u64 %rd6, %globaltimer;
	sub.s64 	%rd7, %rd6, %rd4;
	setp.le.u64 	%p2, %rd7, %rd3;
	@%p2 bra 	$L__BB0_1;
$L__BB0_3:
	ret;
}
.visible .entry fp_copy(
	.param .u64 fp_copy_param_0,
	.param .u64 fp_copy_param_1,
	.param .u64 fp_copy_param_2
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<13>;
	.reg .b64 	%rd<16>;
	ld.param.u64 	%rd6, [fp_copy_param_0];
	ld.param.u64 	%rd7, [fp_copy_param_1];
	ld.param.u64 	%rd8, [fp_copy_param_2];
	mov.u32 	%r1, %ntid.x;
	cvt.u64.u32 	%rd1, %r1;
	mov.u32 	%r2, %ctaid.x;
	mul.wide.u32 	%rd9, %r2, %r1;
	mov.u32 	%r3, %tid.x;
	cvt.u64.u32 	%rd10, %r3;
	add.s64 	%rd15, %rd9, %rd10;
	setp.ge.u64 	%p1, %rd15, %rd8;
	@%p1 bra 	$L__BB1_3;
	mov.u32 	%r4, %nctaid.x;
	cvt.u64.u32 	%rd11, %r4;
	mul.lo.s64 	%rd3, %rd11, %rd1;
$L__BB1_2:
	shl.b64 	%rd14, %rd15, 4;
	add.s64 	%rd12, %rd7, %rd14;
	ld.global.cg.v4.u32 {%r5,%r6,%r7,%r8}, [%rd12];
	add.s64 	%rd13, %rd6, %rd14;
	st.global.cg.v4.u32 [%rd13], {%r5,%r6,%r7,%r8};
	add.s64 	%rd15, %rd15, %rd3;
	setp.lt.u64 	%p2, %rd15, %rd8;
	@%p2 bra 	$L__BB1_2;
$L__BB1_3:
	ret;
}
"""
_PTX_MIN_DRIVER = 9000  # PTX ISA 6.0 needs a CUDA 9.0 driver

_PTX_LOAD_ERRORS = {
    222: "insufficient driver: its JIT does not know this PTX ISA version",
    221: "the PTX JIT compiler library (libnvidia-ptxjitcompiler) is missing",
    209: "no binary for this GPU", 218: "invalid PTX",
}

class _Session(_CudaSession):
    """Everything allocated, in one place, so every path frees it (see close)."""

    def __init__(self, cu, ctx, args):
        _CudaSession.__init__(self, cu)
        self.ctx = ctx
        self.size = args["size"]
        self.repeats = args["repeats"]
        self.loops = args["loops"]
        self.lat_loops = args["latency_loops"]
        self.load_s = args["load_s"]
        self.nvml = None    # the busy guard's NVML, for the readings under load
        self.deadline = args["t_end"]
        self.modules = {}   # gpu -> CUmodule
        self.funcs = {}     # gpu -> (spin, copy)
        self.src = {}       # gpu -> device buffer holding the GPU's pattern
        self.dst = {}       # gpu -> device buffer copies land in
        self.host = {}      # gpu -> pinned host buffer
        self.flag = None    # pinned host flag the spin kernel polls
        self.flag_dev = {}  # gpu -> device address of the flag
        self.sm = {}
        self.blocks = {}
        self.expect = None
        self.expect_for = None
        self.memcmp = _memcmp()

    # -- context and resources ------------------------------------------------------------
    def load_module(self, g):
        self.use(g)
        log = ctypes.create_string_buffer(8192)
        opts = (c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
        vals = (c_void_p * 2)(ctypes.cast(log, c_void_p), c_void_p(len(log)))
        m = c_void_p()
        try:
            self.cu("cuModuleLoadDataEx", ctypes.byref(m), _PTX.encode() + b"\0", 2, opts, vals)
        except CudaError as e:
            e.jit_log = log.value.decode("utf-8", "replace").strip()
            raise
        self.modules[g] = m
        fs = []
        for name in (b"fp_spin", b"fp_copy"):
            f = c_void_p()
            self.cu("cuModuleGetFunction", ctypes.byref(f), m, name)
            fs.append(f)
        self.funcs[g] = tuple(fs)

    def alloc_gpu(self, g):
        self.use(g)
        for table in (self.src, self.dst):
            p = c_uint64()
            self.cu("cuMemAlloc_v2", ctypes.byref(p), self.size)
            table[g] = p.value
        h = c_void_p()
        self.cu("cuMemHostAlloc", ctypes.byref(h), self.size, 1)  # PORTABLE
        self.host[g] = h.value

    def alloc_flag(self, gpus):
        self.use(gpus[0])
        h = c_void_p()
        self.cu("cuMemHostAlloc", ctypes.byref(h), 64, 3)  # PORTABLE | DEVICEMAP
        self.flag = h.value
        ctypes.memset(self.flag, 0, 64)
        for g in gpus:
            self.use(g)
            d = c_uint64()
            self.cu("cuMemHostGetDevicePointer_v2", ctypes.byref(d), c_void_p(self.flag), 0)
            self.flag_dev[g] = d.value

    def free_gpu(self, g, errors):
        """Free one GPU's buffers (after a partial allocation too); errors are recorded."""
        for table, call in ((self.src, "cuMemFree_v2"), (self.dst, "cuMemFree_v2"),
                            (self.host, "cuMemFreeHost")):
            p = table.pop(g, None)
            if p is None:
                continue
            try:
                self.use(g)
            except CudaError:
                pass
            try:
                self.cu(call, c_uint64(p) if call == "cuMemFree_v2" else c_void_p(p))
            except CudaError as e:
                errors.append(str(e))

    def close(self):
        errors = []
        for g in list(self.ctxs):
            self.close_gpu(g, errors)
            self.free_gpu(g, errors)
            m = self.modules.pop(g, None)
            if m is not None:
                self._quiet(errors, "cuModuleUnload", m)
        if self.flag is not None:
            self._quiet(errors, "cuMemFreeHost", c_void_p(self.flag))
            self.flag = None
        self.release_contexts(errors)
        return errors

    # -- patterns and verification ----------------------------------------------------------
    def block(self, g):
        """1 MiB (or the buffer size) of a pattern unique to GPU g and to the offset."""
        b = self.blocks.get(g)
        if b is None:
            n = min(self.size, 1 << 20)
            seed = (g + 1) * 0x9E3779B1
            words = [(i * 2654435761 + seed) & 0xFFFFFFFF for i in range(n // 4)]
            import struct
            b = struct.pack("<%dI" % len(words), *words)
            self.blocks[g] = b
        return b

    def fill(self, ptr, g, nbytes=None):
        b = self.block(g)
        total = self.size if nbytes is None else nbytes
        off = 0
        while off < total:
            n = min(len(b), total - off)
            ctypes.memmove(ptr + off, b, n)
            off += n

    def expected(self, g):
        if self.expect is None:
            self.expect = ctypes.create_string_buffer(self.size)
        if self.expect_for != g:
            self.fill(ctypes.addressof(self.expect), g)
            self.expect_for = g
        return ctypes.addressof(self.expect)

    def same(self, ptr, g, nbytes):
        exp = self.expected(g)
        if self.memcmp is not None:
            return self.memcmp(c_void_p(ptr), c_void_p(exp), nbytes) == 0
        return ctypes.string_at(ptr, nbytes) == ctypes.string_at(exp, nbytes)

    def check_host(self, g_host, g_pattern, nbytes=None):
        return self.same(self.host[g_host], g_pattern, nbytes or self.size)

    def check_device(self, g_buf, dptr, g_pattern, nbytes=None):
        """Read a device buffer back through GPU g_buf's host buffer and compare."""
        n = nbytes or self.size
        h = self.host[g_buf]
        ctypes.memset(h, 0, n)
        self.use(g_buf)
        self.cu("cuMemcpyDtoHAsync_v2", c_void_p(h), c_uint64(dptr), n, self.streams[g_buf])
        self.cu("cuStreamSynchronize", self.streams[g_buf])
        return self.same(h, g_pattern, n)

    def clear(self, g, dptr, nbytes=None):
        self.use(g)
        self.cu("cuMemsetD8Async", c_uint64(dptr), 0, nbytes or self.size, self.streams[g])
        self.cu("cuStreamSynchronize", self.streams[g])

    # -- timing ---------------------------------------------------------------------------
    def timed(self, jobs, loops):
        """One timed sample: ms for `loops` rounds of every job, all streams released together.

        jobs: list of (gpu whose stream runs it, callable(stream) enqueuing one copy)."""
        gpus = []
        for g, _ in jobs:
            if g not in gpus:
                gpus.append(g)
        g0 = gpus[0]
        ctypes.memset(self.flag, 0, 4)
        remaining_ns = max(0.05, min(5.0, self.deadline - time.time())) * 1e9
        self.use(g0)
        s0 = self.streams[g0]
        start0, end0 = self.events[g0]
        params = (c_uint64 * 2)(self.flag_dev[g0], int(remaining_ns))
        argv = (c_void_p * 2)(ctypes.addressof(params), ctypes.addressof(params) + 8)
        self.cu("cuLaunchKernel", self.funcs[g0][0], 1, 1, 1, 1, 1, 1, 0, s0, argv, None)
        self.cu("cuEventRecord", start0, s0)
        for g in gpus[1:]:
            self.use(g)
            self.cu("cuStreamWaitEvent", self.streams[g], start0, 0)
        try:
            for _ in range(loops):
                for g, enqueue in jobs:
                    self.use(g)
                    enqueue(self.streams[g])
            for g in gpus[1:]:
                self.use(g)
                self.cu("cuEventRecord", self.events[g][1], self.streams[g])
                self.use(g0)
                self.cu("cuStreamWaitEvent", s0, self.events[g][1], 0)
            self.use(g0)
            self.cu("cuEventRecord", end0, s0)
        finally:
            ctypes.memset(self.flag, 1, 4)  # never leave a spin kernel waiting on us
        for g in gpus:
            self.use(g)
            self.cu("cuStreamSynchronize", self.streams[g])
        ms = ctypes.c_float()
        self.cu("cuEventElapsedTime_v2", ctypes.byref(ms), start0, end0)
        return float(ms.value)

    def median_ms(self, jobs, loops):
        samples = []
        for i in range(1 + self.repeats):  # sample 0 is the warm-up
            ms = self.timed(jobs, loops)
            if i:
                samples.append(ms)
        return statistics.median(samples), samples

    def gbps(self, jobs, nbytes_per_round):
        ms, samples = self.median_ms(jobs, self.loops)
        if ms <= 0:
            return None, samples
        return round(nbytes_per_round * self.loops / (ms / 1e3) / 1e9, 3), samples

    # -- copy enqueuers -------------------------------------------------------------------
    def h2d(self, dptr, hptr, n=None):
        n = n or self.size
        return lambda s: self.cu("cuMemcpyHtoDAsync_v2", c_uint64(dptr), c_void_p(hptr), n, s)

    def d2h(self, hptr, dptr, n=None):
        n = n or self.size
        return lambda s: self.cu("cuMemcpyDtoHAsync_v2", c_void_p(hptr), c_uint64(dptr), n, s)

    def d2d(self, dst, src, n=None):
        n = n or self.size
        return lambda s: self.cu("cuMemcpyDtoDAsync_v2", c_uint64(dst), c_uint64(src), n, s)

    def peer(self, gdst, dst, gsrc, src, n=None):
        n = n or self.size
        return lambda s: self.cu("cuMemcpyPeerAsync", c_uint64(dst), self.ctxs[gdst], c_uint64(src),
                                 self.ctxs[gsrc], n, s)

    def kernel_copy(self, g, dst, src):
        n16 = self.size // 16
        params = (c_uint64 * 3)(dst, src, n16)
        base = ctypes.addressof(params)
        argv = (c_void_p * 3)(base, base + 8, base + 16)
        blocks = max(1, self.sm.get(g, 1)) * 4

        def run(s):
            self.cu("cuLaunchKernel", self.funcs[g][1], blocks, 1, 1, 512, 1, 1, 0, s, argv, None)
            run.keep = (params, argv)  # the arrays must outlive the call
        return run


def _args(ctx):
    a = ctx.args or {}
    size_mb = float(a.get("size_mb", 64))
    if not (0.0625 <= size_mb <= 4096):
        raise ValueError("size_mb must be between 0.0625 and 4096, got %r" % size_mb)
    size = int(size_mb * (1 << 20)) // 65536 * 65536
    repeats = int(a.get("repeats", 5))
    loops = int(a.get("loops", 4))
    lat = int(a.get("latency_loops", 20))
    if not (1 <= repeats <= 100 and 1 <= loops <= 64 and 1 <= lat <= 1000):
        raise ValueError("repeats must be 1-100, loops 1-64, latency_loops 1-1000")
    budget = float(a.get("budget_s", 120))
    if budget < 0:
        raise ValueError("budget_s must not be negative")
    load_s = float(a.get("load_s", 0.3))
    if not (0 <= load_s <= 10):
        raise ValueError("load_s must be between 0 and 10 seconds")
    pairs = a.get("pairs", "all")
    if not (pairs in ("all", "nvlink", "none") or isinstance(pairs, list)):
        raise ValueError("pairs must be 'all', 'nvlink', 'none' or a list of [src, dst]")
    return {"size": size, "repeats": repeats, "loops": loops, "latency_loops": lat,
            "budget_s": budget, "pairs": pairs, "force": bool(a.get("force", False)), "load_s": load_s,
            "lib": a.get("lib") or "libcuda.so.1", "nvml_lib": a.get("nvml_lib", "libnvidia-ml.so.1")}


def _peer_matrix(cu, gpus):
    n = len(gpus)
    access = [[None] * n for _ in range(n)]
    rank = [[None] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            x = c_int()
            cu("cuDeviceCanAccessPeer", ctypes.byref(x), a, b)
            access[a][b] = bool(x.value)
            try:
                cu("cuDeviceGetP2PAttribute", ctypes.byref(x), 1, a, b)  # PERFORMANCE_RANK
                rank[a][b] = x.value
            except CudaError:
                rank[a][b] = None
    return access, rank


def _select_pairs(args, gpus, nvlink, ctx):
    n = len(gpus)
    mode = args["pairs"]
    if mode == "none":
        return []
    every = [(a, b) for a in range(n) for b in range(n) if a != b]
    if mode == "all":
        return every
    if mode == "nvlink":
        if nvlink is None:
            ctx.warn("pairs=nvlink but NVML could not say which pairs are NVLink; testing every pair")
            return every
        return [(a, b) for a, b in every if nvlink[a][b]]
    by_bus = dict((g["bus_id"], g["index"]) for g in gpus)
    out = []
    for item in mode:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise ValueError("each entry of pairs must be [src, dst], got %r" % (item,))
        ab = []
        for x in item:
            if isinstance(x, str):
                x = by_bus.get(x.lower(), x)
            if not isinstance(x, int) or not (0 <= x < n):
                raise ValueError("pair member %r is not a CUDA ordinal 0-%d or a known bus id" % (x, n - 1))
            ab.append(x)
        if ab[0] != ab[1] and tuple(ab) not in out:
            out.append(tuple(ab))
    return out


def collect(ctx):
    t0 = time.time()
    try:
        args = _args(ctx)
    except (TypeError, ValueError) as e:
        raise Unsupported("bad arguments: %s" % e) from None
    # The probe keeps its own budget and always leaves time to free memory before the deadline.
    t_end = t0 + max(0.0, min(args["budget_s"], ctx.remaining() - 3.0))
    args["t_end"] = t_end
    cu = _open_cuda(args["lib"])
    driver, gpus = _discover(cu)
    data = {
        "driver_version": driver,
        "cuda_driver": "%d.%d" % (driver // 1000, (driver % 1000) // 10),
        "params": {"size_bytes": args["size"], "repeats": args["repeats"], "loops": args["loops"],
                   "latency_bytes": 16, "latency_loops": args["latency_loops"],
                   "pairs": args["pairs"], "budget_s": args["budget_s"], "force": args["force"],
                   "load_s": args["load_s"],
                   "timing": "cuda-events around spin-held streams, median of repeats after 1 warm-up",
                   "ptx": "6.0/sm_50"},
        "gpus": gpus, "pairs": [], "bidirectional": [], "all_to_host": None,
        "can_access_peer": None, "p2p_rank": None, "nvml_nvlink": None,
        "guard": {"ran": False, "reason": None, "busy": {}, "forced": args["force"]},
        "errors": [], "not_reached": [], "budget_exhausted": False, "complete": False,
    }
    ctx.partial = data
    if not gpus:
        raise Unsupported("no CUDA device (cuDeviceGetCount answered 0)")
    data["can_access_peer"], data["p2p_rank"] = _peer_matrix(cu, gpus)

    nvml = None
    try:
        nvml = _Nvml(args["nvml_lib"])
    except (OSError, AttributeError) as e:
        data["guard"]["reason"] = "NVML unavailable (%s): busy GPUs could not be detected" % e
        ctx.warn(data["guard"]["reason"])
    if nvml is not None:
        try:
            for g in gpus:
                busy = nvml.processes(g["bus_id"])
                if busy:
                    data["guard"]["busy"][str(g["index"])] = busy
                    if not args["force"]:
                        g["status"] = "busy"
            data["guard"]["ran"] = True
            n = len(gpus)
            data["nvml_nvlink"] = [[None if a == b else nvml.nvlink_ok(gpus[a]["bus_id"], gpus[b]["bus_id"])
                                    for b in range(n)] for a in range(n)]
        except (OSError, AttributeError) as e:
            data["guard"]["reason"] = "NVML guard failed: %s" % e
            ctx.warn(data["guard"]["reason"])
            nvml.close()
            nvml = None
    try:
        pairs = _select_pairs(args, gpus, data["nvml_nvlink"], ctx)
    except ValueError as e:
        if nvml is not None:
            nvml.close()
        raise Unsupported("bad arguments: %s" % e) from None

    sess = _Session(cu, ctx, args)
    sess.nvml = nvml  # kept open for the readings under load
    try:
        _measure(sess, data, gpus, pairs, driver, t_end)
    finally:
        leftovers = sess.close()
        if leftovers:
            data["cleanup_errors"] = leftovers
        if nvml is not None:
            nvml.close()
    if data["module_unloadable"] and not any(g["status"] == "ok" for g in gpus):
        raise Unsupported(data["module_unloadable"])
    data["elapsed_s"] = round(time.time() - t0, 3)
    return data


def _err(data, where, e):
    rec = {"where": where, "error": getattr(e, "name", type(e).__name__), "message": str(e)}
    if getattr(e, "jit_log", None):
        rec["jit_log"] = e.jit_log
    data["errors"].append(rec)


def _measure(sess, data, gpus, pairs, driver, t_end):
    data["module_unloadable"] = None
    usable = [g["index"] for g in gpus if g["status"] == "ok"]
    # Contexts, streams, events and the kernels first: loading a module in the middle of a
    # timed region can deadlock under lazy loading (nvbandwidth preloads for the same reason).
    for g in list(usable):
        try:
            sess.open_gpu(g)
            sess.sm[g] = gpus[g]["sm_count"] or 1
            sess.load_module(g)
        except CudaError as e:
            usable.remove(g)
            gpus[g]["status"] = "error"
            gpus[g]["error"] = e.name
            if e.call == "cuModuleLoadDataEx" and e.code in _PTX_LOAD_ERRORS:
                why = _PTX_LOAD_ERRORS[e.code]
                if e.code == 222 and driver < _PTX_MIN_DRIVER:
                    why = "insufficient driver: CUDA %d.%d driver, the probe's PTX 6.0 needs 9.0 or newer" % (
                        driver // 1000, (driver % 1000) // 10)
                data["module_unloadable"] = "%s (%s)" % (why, e.name)
            _err(data, "gpu %d setup" % g, e)
            if e.code in _STICKY:
                return
    for g in list(usable):
        try:
            sess.alloc_gpu(g)
        except CudaError as e:
            errs = []
            sess.free_gpu(g, errs)
            usable.remove(g)
            gpus[g]["status"] = "error"
            gpus[g]["error"] = e.name
            _err(data, "gpu %d allocation of 2 x %d bytes device + %d pinned" % (g, sess.size, sess.size), e)
    if not usable:
        return
    try:
        sess.alloc_flag(usable)
    except CudaError as e:
        _err(data, "flag allocation", e)
        return
    pairs = [(a, b) for a, b in pairs if a in usable and b in usable]
    units = []
    for g in usable:
        units += [("h2d", g), ("d2h", g), ("local_ce", g), ("local_sm", g)]
        if sess.load_s > 0:
            units.append(("load", g))
    if len(usable) > 1:
        units += [("all_d2h", None), ("all_h2d", None)]
    # One unordered pair at a time: enable peer access both ways, measure, disable again, so a
    # GPU never holds more peer mappings than one (TOO_MANY_PEERS on large non-switch systems).
    seen = set()
    for a, b in pairs:
        key = (min(a, b), max(a, b))
        if key in seen:
            continue
        seen.add(key)
        both = [ab for ab in (key, (key[1], key[0])) if ab in pairs]
        for ab in both:
            units.append(("enable_peer", ab))
            units += [("ce", ab), ("sm_read", ab), ("latency", ab)]
        if len(both) == 2:
            units.append(("bidir", key))
        units.append(("disable_peer", key))
    state = {"pair": {}, "per_gpu": dict((g, gpus[g]) for g in usable)}
    for i, (kind, who) in enumerate(units):
        if time.time() >= t_end:
            data["budget_exhausted"] = True
            data["not_reached"] = ["%s %s" % (k, _who(w)) for k, w in units[i:]]
            return
        try:
            _run_unit(sess, data, state, kind, who)
        except CudaError as e:
            _err(data, "%s %s" % (kind, _who(who)), e)
            if e.code in _STICKY:
                data["not_reached"] = ["%s %s" % (k, _who(w)) for k, w in units[i + 1:]]
                return
    data["complete"] = True


def _who(w):
    if w is None:
        return "all"
    if isinstance(w, tuple):
        return "%d->%d" % w
    return "gpu%d" % w


def _pair_rec(data, state, a, b):
    rec = state["pair"].get((a, b))
    if rec is None:
        gpus = data["gpus"]
        rec = {"src": a, "dst": b, "src_bus_id": gpus[a]["bus_id"], "dst_bus_id": gpus[b]["bus_id"],
               "can_access_peer": data["can_access_peer"][a][b], "peer_enabled": False,
               "peer_error": None, "ce_gbps": None, "sm_read_gbps": None, "latency_us": None,
               "verified": {}, "samples_ms": {}}
        state["pair"][(a, b)] = rec
        data["pairs"].append(rec)
    return rec


def _enable(sess, a, b):
    """Let GPU a's context access GPU b's memory; None on success or the error's name."""
    sess.use(a)
    try:
        sess.cu("cuCtxEnablePeerAccess", sess.ctxs[b], 0)
    except CudaError as e:
        if e.code != 704:  # already enabled counts as success, as nvbandwidth does
            return e.name
    return None


def _disable(sess, a, b):
    sess.use(a)
    try:
        sess.cu("cuCtxDisablePeerAccess", sess.ctxs[b])
    except CudaError as e:
        if e.code != 705:  # not enabled (the other direction's call already undid it) is fine
            raise


def _under_load(sess, rec, g):
    """The SM copy kernel back to back on GPU g for load_s seconds; NVML's SM clock, power and
    temperature read half-way, while the queue is full (what the GPU does under load, the figure
    DCGM's diagnostics compare across GPUs)."""
    if sess.nvml is None:
        rec["load"] = None
        rec["load_unknown"] = "NVML unavailable: nothing to read the clocks and power with"
        return
    enqueue = sess.kernel_copy(g, sess.dst[g], sess.src[g])
    sess.use(g)
    stream = sess.streams[g]
    t0 = time.time()
    sample = None
    while time.time() - t0 < sess.load_s:
        for _ in range(8):
            enqueue(stream)
        if sample is None and time.time() - t0 >= sess.load_s / 2:
            sample = sess.nvml.load_sample(rec["bus_id"])
    sess.cu("cuStreamSynchronize", stream)
    if sample is None:
        sample = sess.nvml.load_sample(rec["bus_id"])
    sample["seconds"] = round(time.time() - t0, 3)
    rec["load"] = sample


def _run_unit(sess, data, state, kind, who):
    size = sess.size
    if kind == "load":
        try:
            _under_load(sess, state["per_gpu"][who], who)
        except OSError as e:  # NVML lost the GPU or refused: the bandwidth figures still stand
            state["per_gpu"][who]["load"] = None
            state["per_gpu"][who]["load_unknown"] = str(e)
        return
    if kind in ("h2d", "d2h", "local_ce", "local_sm"):
        g = who
        rec = state["per_gpu"][g]
        rec.setdefault("verified", {})
        rec.setdefault("samples_ms", {})
        if kind == "h2d":
            sess.fill(sess.host[g], g)
            sess.clear(g, sess.src[g])
            bw, smp = sess.gbps([(g, sess.h2d(sess.src[g], sess.host[g]))], size)
            rec["verified"]["h2d"] = sess.check_device(g, sess.src[g], g)
        elif kind == "d2h":
            ctypes.memset(sess.host[g], 0, size)
            bw, smp = sess.gbps([(g, sess.d2h(sess.host[g], sess.src[g]))], size)
            rec["verified"]["d2h"] = sess.check_host(g, g)
        elif kind == "local_ce":
            sess.clear(g, sess.dst[g])
            bw, smp = sess.gbps([(g, sess.d2d(sess.dst[g], sess.src[g]))], size)
            rec["verified"]["local_ce"] = sess.check_device(g, sess.dst[g], g)
        else:
            sess.clear(g, sess.dst[g])
            bw, smp = sess.gbps([(g, sess.kernel_copy(g, sess.dst[g], sess.src[g]))], size)
            rec["verified"]["local_sm"] = sess.check_device(g, sess.dst[g], g)
        rec[kind + "_gbps"] = bw
        rec["samples_ms"][kind] = [round(x, 6) for x in smp]
        return
    if kind in ("all_d2h", "all_h2d"):
        gs = sorted(state["per_gpu"])
        if kind == "all_d2h":
            for g in gs:
                ctypes.memset(sess.host[g], 0, size)
            bw, smp = sess.gbps([(g, sess.d2h(sess.host[g], sess.src[g])) for g in gs], size * len(gs))
            ok = all(sess.check_host(g, g) for g in gs)
        else:
            for g in gs:
                sess.fill(sess.host[g], g)
                sess.clear(g, sess.dst[g])
            bw, smp = sess.gbps([(g, sess.h2d(sess.dst[g], sess.host[g])) for g in gs], size * len(gs))
            ok = all(sess.check_device(g, sess.dst[g], g) for g in gs)
        if data["all_to_host"] is None:
            data["all_to_host"] = {"gpus": gs, "verified": {}, "samples_ms": {}}
        data["all_to_host"][kind[4:] + "_total_gbps"] = bw
        data["all_to_host"]["verified"][kind[4:]] = ok
        data["all_to_host"]["samples_ms"][kind[4:]] = [round(x, 6) for x in smp]
        return
    a, b = who
    if kind == "bidir":
        sess.clear(a, sess.dst[a])
        sess.clear(b, sess.dst[b])
        jobs = [(a, sess.peer(b, sess.dst[b], a, sess.src[a])), (b, sess.peer(a, sess.dst[a], b, sess.src[b]))]
        bw, smp = sess.gbps(jobs, 2 * size)
        ok = sess.check_device(b, sess.dst[b], a) and sess.check_device(a, sess.dst[a], b)
        data["bidirectional"].append({
            "a": a, "b": b, "a_bus_id": data["gpus"][a]["bus_id"], "b_bus_id": data["gpus"][b]["bus_id"],
            "peer": bool(state["pair"][(a, b)]["peer_enabled"] and state["pair"][(b, a)]["peer_enabled"]),
            "total_gbps": bw, "verified": ok, "samples_ms": [round(x, 6) for x in smp]})
        return
    if kind == "disable_peer":
        for x, y in ((a, b), (b, a)):
            if (x, y) in state["pair"] and state["pair"][(x, y)]["peer_enabled"]:
                _disable(sess, x, y)
                _disable(sess, y, x)
        return
    rec = _pair_rec(data, state, a, b)
    if kind == "enable_peer":
        if rec["can_access_peer"]:
            # both directions: the copy engine of either side may touch the other's memory
            err = _enable(sess, a, b) or _enable(sess, b, a)
            rec["peer_enabled"] = err is None
            rec["peer_error"] = err
        return
    if kind == "ce":
        sess.clear(b, sess.dst[b])
        bw, smp = sess.gbps([(a, sess.peer(b, sess.dst[b], a, sess.src[a]))], size)
        rec["ce_gbps"] = bw
        rec["staged"] = not rec["peer_enabled"]
        rec["samples_ms"]["ce"] = [round(x, 6) for x in smp]
        rec["verified"]["ce"] = sess.check_device(b, sess.dst[b], a)
    elif kind == "sm_read":
        if not rec["peer_enabled"]:
            return  # a kernel cannot read a peer it has no access to
        sess.clear(b, sess.dst[b])
        bw, smp = sess.gbps([(b, sess.kernel_copy(b, sess.dst[b], sess.src[a]))], size)
        rec["sm_read_gbps"] = bw
        rec["samples_ms"]["sm_read"] = [round(x, 6) for x in smp]
        rec["verified"]["sm_read"] = sess.check_device(b, sess.dst[b], a)
    elif kind == "latency":
        sess.clear(b, sess.dst[b], 16)
        ms, smp = sess.median_ms([(a, sess.peer(b, sess.dst[b], a, sess.src[a], 16))], sess.lat_loops)
        rec["latency_us"] = round(ms * 1000.0 / sess.lat_loops, 3)
        rec["verified"]["latency"] = sess.check_device(b, sess.dst[b], a, 16)
