# fleetprobe CUDA driver-API session shared by the `p2p` and `nccl` probes (pulled in by
# `# requires: _cuda`): the error names, ctypes signatures and the libcuda wrapper, device
# discovery, the NVML busy-GPU guard, and the session base that owns retained primary contexts
# and streams so every path can release them.  Python 3.6+ standard library only, read-only.
import ctypes

_ERRORS = {
    0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY",
    35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 36: "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
    200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
    218: "CUDA_ERROR_INVALID_PTX", 220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    304: "CUDA_ERROR_OPERATING_SYSTEM", 400: "CUDA_ERROR_INVALID_HANDLE", 500: "CUDA_ERROR_NOT_FOUND",
    600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", 705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
    708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", 709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    711: "CUDA_ERROR_TOO_MANY_PEERS", 719: "CUDA_ERROR_LAUNCH_FAILED", 800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED", 802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    909: "CUDA_ERROR_TIMEOUT", 999: "CUDA_ERROR_UNKNOWN",
}
# After these the context is unusable: stop measuring, free what can be freed, report.
_STICKY = (700, 702, 709, 719, 999)
# The host cannot answer at all: the envelope says unsupported, with the error named.
_UNSUPPORTED_INIT = {
    100: "no CUDA device", 34: "libcuda is the toolkit's stub library, not a driver",
    35: "insufficient driver", 803: "driver and kernel module versions differ",
    804: "forward-compatibility libcuda on a GPU that does not support it",
    3: "CUDA not initialised", 304: "operating system call failed",
}
c_int, c_uint, c_uint64, c_size_t, c_void_p = (ctypes.c_int, ctypes.c_uint, ctypes.c_uint64,
                                               ctypes.c_size_t, ctypes.c_void_p)
_P = ctypes.POINTER
_SIGS = {
    "cuInit": [c_uint], "cuDriverGetVersion": [_P(c_int)], "cuDeviceGetCount": [_P(c_int)],
    "cuDeviceGet": [_P(c_int), c_int], "cuDeviceGetName": [ctypes.c_char_p, c_int, c_int],
    "cuDeviceGetPCIBusId": [ctypes.c_char_p, c_int, c_int],
    "cuDeviceGetAttribute": [_P(c_int), c_int, c_int], "cuDeviceTotalMem_v2": [_P(c_size_t), c_int],
    "cuDeviceCanAccessPeer": [_P(c_int), c_int, c_int],
    "cuDeviceGetP2PAttribute": [_P(c_int), c_int, c_int, c_int],
    "cuDevicePrimaryCtxRetain": [_P(c_void_p), c_int], "cuDevicePrimaryCtxRelease_v2": [c_int],
    "cuCtxSetCurrent": [c_void_p], "cuCtxEnablePeerAccess": [c_void_p, c_uint],
    "cuCtxDisablePeerAccess": [c_void_p],
    "cuMemAlloc_v2": [_P(c_uint64), c_size_t], "cuMemFree_v2": [c_uint64],
    "cuMemHostAlloc": [_P(c_void_p), c_size_t, c_uint], "cuMemFreeHost": [c_void_p],
    "cuMemHostGetDevicePointer_v2": [_P(c_uint64), c_void_p, c_uint],
    "cuMemsetD8Async": [c_uint64, ctypes.c_ubyte, c_size_t, c_void_p],
    "cuMemcpyHtoDAsync_v2": [c_uint64, c_void_p, c_size_t, c_void_p],
    "cuMemcpyDtoHAsync_v2": [c_void_p, c_uint64, c_size_t, c_void_p],
    "cuMemcpyDtoDAsync_v2": [c_uint64, c_uint64, c_size_t, c_void_p],
    "cuMemcpyPeerAsync": [c_uint64, c_void_p, c_uint64, c_void_p, c_size_t, c_void_p],
    "cuStreamCreate": [_P(c_void_p), c_uint], "cuStreamDestroy_v2": [c_void_p],
    "cuStreamSynchronize": [c_void_p], "cuStreamWaitEvent": [c_void_p, c_void_p, c_uint],
    "cuStreamQuery": [c_void_p], "cuEventQuery": [c_void_p], "cuMemGetInfo_v2": [_P(c_size_t), _P(c_size_t)],
    "cuEventCreate": [_P(c_void_p), c_uint], "cuEventDestroy_v2": [c_void_p],
    "cuEventRecord": [c_void_p, c_void_p],
    "cuEventElapsedTime_v2": [_P(ctypes.c_float), c_void_p, c_void_p],
    "cuEventElapsedTime": [_P(ctypes.c_float), c_void_p, c_void_p],
    "cuModuleLoadDataEx": [_P(c_void_p), ctypes.c_char_p, c_uint, _P(c_int), _P(c_void_p)],
    "cuModuleGetFunction": [_P(c_void_p), c_void_p, ctypes.c_char_p], "cuModuleUnload": [c_void_p],
    "cuLaunchKernel": [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                       _P(c_void_p), _P(c_void_p)],
}


class CudaError(Exception):
    def __init__(self, call, code):
        self.call = call
        self.code = code
        self.name = _ERRORS.get(code, "CUDA_ERROR_%d" % code)
        Exception.__init__(self, "%s: %s (%d)" % (call, self.name, code))


class _Cuda(object):
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self._fns = {}
        self.subject = None  # the GPU whose context is current ("GPU 2"): named if a call hangs

    def fn(self, name):
        f = self._fns.get(name)
        if f is None:
            names = [name, name[:-3]] if name == "cuEventElapsedTime_v2" else [name]
            for n in names:
                try:
                    f = getattr(self.lib, n)
                except AttributeError:
                    continue
                f.argtypes = _SIGS[n]
                f.restype = c_int
                break
            else:
                raise CudaError(name + " (symbol missing in libcuda)", 500)
            self._fns[name] = f
        return f

    def __call__(self, name, *args):
        # watched: a wedged driver never returns (prelude fp_watched answers for the probe)
        rc = fp_watched(name, self.subject, self.fn(name), *args)
        if rc != 0:
            raise CudaError(name, rc)


class _Nvml(object):
    """The two NVML questions this probe asks: who else runs on a GPU, which pairs are NVLink."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        init = getattr(self.lib, "nvmlInit_v2", None) or self.lib.nvmlInit
        rc = init()
        if rc != 0:
            raise OSError("nvmlInit failed with NVML error %d" % rc)
        self.handles = {}

    def handle(self, bus_id):
        if bus_id not in self.handles:
            h = c_void_p()
            f = getattr(self.lib, "nvmlDeviceGetHandleByPciBusId_v2", None) or \
                self.lib.nvmlDeviceGetHandleByPciBusId
            f.argtypes = [ctypes.c_char_p, _P(c_void_p)]
            rc = f(bus_id.encode(), ctypes.byref(h))
            if rc != 0:
                raise OSError("NVML has no GPU at %s (error %d)" % (bus_id, rc))
            self.handles[bus_id] = h
        return self.handles[bus_id]

    def processes(self, bus_id):
        h = self.handle(bus_id)
        for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                     "nvmlDeviceGetComputeRunningProcesses"):
            f = getattr(self.lib, name, None)
            if f is not None:
                break
        else:
            raise OSError("NVML lacks nvmlDeviceGetComputeRunningProcesses")
        f.argtypes = [c_void_p, _P(c_uint), c_void_p]
        count = c_uint(0)
        rc = f(h, ctypes.byref(count), None)  # count only: no struct layout to get wrong
        if rc == 0:
            return 0
        if rc == 7:  # NVML_ERROR_INSUFFICIENT_SIZE: count now holds the number of processes
            return int(count.value)
        raise OSError("%s failed with NVML error %d" % (name, rc))

    def nvlink_ok(self, bus_a, bus_b):
        f = self.lib.nvmlDeviceGetP2PStatus
        f.argtypes = [c_void_p, c_void_p, c_int, _P(c_int)]
        st = c_int(-1)
        rc = f(self.handle(bus_a), self.handle(bus_b), 2, ctypes.byref(st))  # 2: NVML_P2P_CAPS_INDEX_NVLINK
        if rc != 0:
            return None
        return st.value == 0

    def mig_mode(self, bus_id):
        """1 when MIG is on for the GPU, 0 off, None when NVML cannot say (old driver, no MIG)."""
        f = getattr(self.lib, "nvmlDeviceGetMigMode", None)
        if f is None:
            return None
        f.argtypes = [c_void_p, _P(c_uint), _P(c_uint)]
        cur, pend = c_uint(0), c_uint(0)
        rc = f(self.handle(bus_id), ctypes.byref(cur), ctypes.byref(pend))
        return int(cur.value) if rc == 0 else None

    def virtualization_mode(self, bus_id):
        """NVML's virtualization mode (0 none, 1 pass-through, 2 vGPU guest, 3/4 host), None unknown."""
        f = getattr(self.lib, "nvmlDeviceGetVirtualizationMode", None)
        if f is None:
            return None
        f.argtypes = [c_void_p, _P(c_uint)]
        mode = c_uint(0)
        rc = f(self.handle(bus_id), ctypes.byref(mode))
        return int(mode.value) if rc == 0 else None

    def load_sample(self, bus_id):
        """The GPU's SM clock (MHz), power draw (W) and temperature (C) now, read while the probe
        loads it; each None with the NVML error in `unknown` when it cannot be read."""
        out, unknown = {}, {}
        h = self.handle(bus_id)
        for key, name, args, scale in (("sm_clock_mhz", "nvmlDeviceGetClockInfo", (c_int(1),), 1.0),  # NVML_CLOCK_SM
                                       ("power_w", "nvmlDeviceGetPowerUsage", (), 1000.0),
                                       ("temperature_c", "nvmlDeviceGetTemperature", (c_int(0),), 1.0)):  # GPU sensor
            f = getattr(self.lib, name, None)
            v = c_uint(0)
            rc = f(h, *args, ctypes.byref(v)) if f is not None else 13  # FUNCTION_NOT_FOUND
            out[key] = round(v.value / scale, 1) if rc == 0 else None
            if rc != 0:
                unknown[key] = "NVML error %d" % rc
        if unknown:
            out["unknown"] = unknown
        return out

    def close(self):
        f = getattr(self.lib, "nvmlShutdown", None)
        if f is not None:
            f()


def _memcmp():
    try:
        f = ctypes.CDLL(None).memcmp
        f.argtypes = [c_void_p, c_void_p, c_size_t]
        f.restype = c_int
        return f
    except (OSError, AttributeError):
        return None


def _discover(cu):
    v = c_int()
    cu("cuDriverGetVersion", ctypes.byref(v))
    n = c_int()
    cu("cuDeviceGetCount", ctypes.byref(n))
    gpus = []
    for i in range(n.value):
        name = ctypes.create_string_buffer(256)
        cu("cuDeviceGetName", name, 256, i)
        bus = ctypes.create_string_buffer(32)
        cu("cuDeviceGetPCIBusId", bus, 32, i)
        attrs = {}
        for key, attr in (("sm_count", 16), ("cc_major", 75), ("cc_minor", 76), ("clock_khz", 13),
                          ("async_engines", 40), ("unified_addressing", 41),
                          # CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (cuda.h 11.7+); older drivers answer
                          # CUDA_ERROR_INVALID_VALUE, kept as None (unknown)
                          ("dmabuf_supported", 124)):
            x = c_int()
            try:
                cu("cuDeviceGetAttribute", ctypes.byref(x), attr, i)
                attrs[key] = x.value
            except CudaError:
                attrs[key] = None
        mem = c_size_t()
        try:
            cu("cuDeviceTotalMem_v2", ctypes.byref(mem), i)
            total = mem.value
        except CudaError:
            total = None
        bus_id = bus.value.decode("ascii", "replace").lower()
        if bus_id.count(":") == 1:
            bus_id = "0000:" + bus_id
        gpus.append({
            "index": i, "bus_id": bus_id, "name": name.value.decode("utf-8", "replace"),
            "sm_count": attrs["sm_count"], "async_engines": attrs["async_engines"],
            "unified_addressing": attrs["unified_addressing"], "dmabuf_supported": attrs["dmabuf_supported"],
            "compute_capability": ("%s.%s" % (attrs["cc_major"], attrs["cc_minor"])
                                   if attrs["cc_major"] is not None else None),
            "memory_total_bytes": total, "status": "ok",
        })
    return v.value, gpus


class _CudaSession(object):
    """Retained primary contexts, streams and timing events, in one place, so every path releases them."""

    def __init__(self, cu):
        self.cu = cu
        self.ctxs = {}      # gpu -> CUcontext (retained primary context)
        self.streams = {}   # gpu -> CUstream
        self.events = {}    # gpu -> (start, end) CUevent
        self.current = None

    def use(self, g):
        if self.current != g:
            self.cu.subject = "GPU %d" % g
            self.cu("cuCtxSetCurrent", self.ctxs[g])
            self.current = g

    def retain(self, g):
        """Retain GPU g's primary context (the one the CUDA runtime and NCCL share) and make it current."""
        ctxh = c_void_p()
        self.cu("cuDevicePrimaryCtxRetain", ctypes.byref(ctxh), g)
        self.ctxs[g] = ctxh
        self.current = None
        self.use(g)

    def new_stream(self, g):
        self.use(g)
        s = c_void_p()
        self.cu("cuStreamCreate", ctypes.byref(s), 1)  # CU_STREAM_NON_BLOCKING
        self.streams[g] = s
        return s

    def open_gpu(self, g):
        """GPU g's primary context retained, its stream and its start/end events created."""
        self.retain(g)
        self.new_stream(g)
        evs = []
        for _ in range(2):
            e = c_void_p()
            self.cu("cuEventCreate", ctypes.byref(e), 0)
            evs.append(e)
        self.events[g] = tuple(evs)

    def close_gpu(self, g, errors):
        """GPU g's events and stream destroyed (its context stays until release_contexts)."""
        try:
            self.use(g)
        except CudaError:
            pass
        for e in self.events.pop(g, ()):
            self._quiet(errors, "cuEventDestroy_v2", e)
        s = self.streams.pop(g, None)
        if s is not None:
            self._quiet(errors, "cuStreamDestroy_v2", s)

    def _quiet(self, errors, name, *args):
        try:
            self.cu(name, *args)
        except CudaError as e:
            errors.append(str(e))

    def release_contexts(self, errors):
        for g in list(self.ctxs):
            self._quiet(errors, "cuDevicePrimaryCtxRelease_v2", g)
            del self.ctxs[g]
        self._quiet(errors, "cuCtxSetCurrent", None)


def _open_cuda(path):
    """The loaded and initialised driver, or Unsupported saying why the host cannot answer."""
    try:
        cu = _Cuda(path)
    except OSError as e:
        # no libcuda: no NVIDIA driver, so no GPU this host can use (a wheel's NCCL or cudart loads without one)
        raise Unsupported("no NVIDIA driver (cannot load %s: %s)" % (path, e)) from None
    try:
        cu("cuInit", 0)
    except CudaError as e:
        why = _UNSUPPORTED_INIT.get(e.code, "cuInit failed")
        raise Unsupported("%s: %s" % (why, e)) from None
    return cu
