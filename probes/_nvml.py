# fleetprobe NVML binding shared by the `nvml` and `nvlink` probes (pulled in by `# requires: _nvml`).
# ctypes only, Python 3.6+.  Every symbol is resolved at run time: an old driver that lacks a
# function yields the reason FUNCTION_NOT_FOUND for that field and nothing else.
# Layouts and enum values: ../shared/reference/gpu-probe-reference.md section 1.
import ctypes

NVML_ERRORS = {
    0: "SUCCESS", 1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED", 4: "NO_PERMISSION",
    5: "ALREADY_INITIALIZED", 6: "NOT_FOUND", 7: "INSUFFICIENT_SIZE", 8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED", 10: "TIMEOUT", 11: "IRQ_ISSUE", 12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND", 14: "CORRUPTED_INFOROM", 15: "GPU_IS_LOST", 16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM", 18: "LIB_RM_VERSION_MISMATCH", 19: "IN_USE", 20: "MEMORY",
    21: "NO_DATA", 22: "VGPU_ECC_NOT_SUPPORTED", 23: "INSUFFICIENT_RESOURCES",
    24: "FREQ_NOT_SUPPORTED", 25: "ARGUMENT_VERSION_MISMATCH", 26: "DEPRECATED", 27: "NOT_READY",
    28: "GPU_NOT_FOUND", 29: "INVALID_STATE", 30: "RESET_TYPE_NOT_SUPPORTED", 999: "UNKNOWN",
}
NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25

# nvmlDeviceGetNvLinkVersion returns an nvmlNvlinkVersion_t index, not the spec version.
NVLINK_VERSIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
NVLINK_DEVICE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "nvswitch", 0xFF: "unknown"}
NVLINK_SCAN_LIMIT = 36  # NVML_NVLINK_MAX_LINKS of the newest header: an upper bound only
TOPOLOGY_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}
P2P_CAPS = (("read", 0), ("write", 1), ("nvlink", 2), ("atomics", 3))
ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
                 8: "Ada", 9: "Hopper", 10: "Blackwell", 13: "Rubin"}
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
VIRT_MODES = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
FABRIC_HEALTH = {0: None, 1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
FI_DEV_NVLINK_LINK_COUNT = 91
FI_DEV_GET_GPU_RECOVERY_ACTION = 230  # R570+ nvml.h; older drivers answer INVALID_ARGUMENT per field
# nvmlGpuRecoveryAction_t (nvml.h, nvidia-ml-py: tests/engine/test_nvml_bindings.py)
RECOVERY_ACTIONS = {0: "NONE", 1: "GPU_RESET", 2: "NODE_REBOOT", 3: "DRAIN_P2P", 4: "DRAIN_AND_RESET",
                    5: "RECOVER_IMEX_DOMAIN", 6: "BUS_RESET", 7: "SYSTEM_REBOOT"}
# nvmlPerfPolicyType_t values whose violation time the probe reads
PERF_POLICIES = (("power", 0), ("thermal", 1), ("sync_boost", 2), ("board_limit", 3), ("low_utilization", 4),
                 ("reliability", 5))


class PciInfo(ctypes.Structure):
    # nvmlPciInfo_t as filled by _v3 (68 bytes).  The legacy _v2/v1 layout shares the first 36
    # bytes and is shorter, so one zeroed buffer of this size is safe for every variant.
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint),
                ("pciSubSystemId", ctypes.c_uint), ("busId", ctypes.c_char * 32)]


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class FabricInfoV1(ctypes.Structure):
    # status is an nvmlReturn_t (unsigned, as nvidia-ml-py declares it); state is an unsigned char
    _fields_ = [("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint),
                ("state", ctypes.c_ubyte)]


class FabricInfoV3(ctypes.Structure):
    # v2 is the same without healthSummary; the version word tells the library which one we mean.
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint),
                ("healthSummary", ctypes.c_ubyte)]


class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", ctypes.c_ulonglong)]


class ViolationTime(ctypes.Structure):
    # nvmlViolationTime_t: referenceTime (CPU timestamp, us), violationTime (cumulative, ns)
    _fields_ = [("referenceTime", ctypes.c_ulonglong), ("violationTime", ctypes.c_ulonglong)]


class MarginTemperatureV1(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("marginTemperature", ctypes.c_int)]


MARGIN_TEMPERATURE_V1_VERSION = ctypes.sizeof(MarginTemperatureV1) | (1 << 24)  # 0x1000008
MEMORY_V2_VERSION = ctypes.sizeof(MemoryV2) | (2 << 24)
FABRIC_V3_VERSION = ctypes.sizeof(FabricInfoV3) | (3 << 24)
FABRIC_V2_VERSION = 0x24 | (2 << 24)


class NvmlUnavailable(Exception):
    pass


class Nvml(object):
    """A loaded, initialised libnvidia-ml.  call() never raises for NVML errors: it returns the code."""

    def __init__(self, path):
        try:
            self.lib = ctypes.CDLL(path or "libnvidia-ml.so.1")
        except OSError as e:
            raise NvmlUnavailable("cannot load %s: %s" % (path or "libnvidia-ml.so.1", e)) from None
        self._fns = {}
        self.missing = set()
        self.subject = None  # what the probe reads now ("GPU 3"): named if a call hangs
        rc = self.call("nvmlInit_v2")
        if rc == NVML_ERROR_FUNCTION_NOT_FOUND:
            rc = self.call("nvmlInit")
        if rc != NVML_SUCCESS:
            raise NvmlUnavailable("nvmlInit failed: %s" % self.err(rc))

    def fn(self, name):
        if name not in self._fns:
            try:
                f = getattr(self.lib, name)
                f.restype = ctypes.c_int
            except AttributeError:
                f = None
                self.missing.add(name)
            self._fns[name] = f
        return self._fns[name]

    def has(self, name):
        return self.fn(name) is not None

    def call(self, name, *args):
        f = self.fn(name)
        if f is None:
            return NVML_ERROR_FUNCTION_NOT_FOUND
        # watched: a wedged driver never returns from an NVML call (prelude fp_watched)
        return int(fp_watched(name, self.subject, f, *args))

    def first(self, names, *args):
        """Call the newest of several symbol variants that the library exports."""
        rc = NVML_ERROR_FUNCTION_NOT_FOUND
        for name in names:
            rc = self.call(name, *args)
            if rc != NVML_ERROR_FUNCTION_NOT_FOUND:
                return rc
        return rc

    @staticmethod
    def err(rc):
        return NVML_ERRORS.get(rc, "ERROR_%d" % rc)

    def shutdown(self):
        self.call("nvmlShutdown")

    # -- small typed helpers: each returns (value, reason); exactly one of them is None ----------

    def string(self, name, handle, size=96):
        buf = ctypes.create_string_buffer(size)
        args = (buf, ctypes.c_uint(size)) if handle is None else (handle, buf, ctypes.c_uint(size))
        rc = self.call(name, *args)
        if rc != NVML_SUCCESS:
            return None, self.err(rc)
        return buf.value.decode("utf-8", "replace").strip(), None

    def uint(self, name, *args):
        v = ctypes.c_uint(0)
        rc = self.call(name, *args, ctypes.byref(v))
        if rc != NVML_SUCCESS:
            return None, self.err(rc)
        return v.value, None

    def handle(self, index):
        self.subject = "GPU %d" % index
        h = ctypes.c_void_p()
        rc = self.first(("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"),
                        ctypes.c_uint(index), ctypes.byref(h))
        if rc != NVML_SUCCESS:
            return None, self.err(rc)
        return h, None

    def count(self):
        v = ctypes.c_uint(0)
        rc = self.first(("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"), ctypes.byref(v))
        if rc != NVML_SUCCESS:
            return None, self.err(rc)
        return v.value, None

    def pci(self, handle):
        """(bus_id, pci_device_id, reason) of a GPU, bus id lower-case 0000:bb:dd.f."""
        info = PciInfo()
        rc = self.first(("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo"),
                        handle, ctypes.byref(info))
        if rc != NVML_SUCCESS:
            return None, None, self.err(rc)
        return pci_bus_id(info), "0x%04x" % (info.pciDeviceId >> 16), None


def pci_bus_id(info):
    """Bus id from the numeric fields (same in every struct variant); the string as a fallback."""
    if info.domain or info.bus or info.device:
        return "%04x:%02x:%02x.0" % (info.domain & 0xFFFF, info.bus, info.device)
    text = (info.busId or info.busIdLegacy or b"").decode("ascii", "replace").strip().lower()
    return normalize_bus_id(text)


def normalize_bus_id(text):
    """'00000000:18:00.0' / '0000:18:00.0' / '18:00.0' -> '0000:18:00.0'; None when unparseable."""
    if not text or not all(32 < ord(c) < 127 for c in text):
        return None
    parts = text.lower().split(":")
    try:
        if len(parts) == 3:
            dom, bus, devfn = int(parts[0], 16), int(parts[1], 16), parts[2]
        elif len(parts) == 2:
            dom, bus, devfn = 0, int(parts[0], 16), parts[1]
        else:
            return None
        dev, _, fn = devfn.partition(".")
        return "%04x:%02x:%02x.%x" % (dom & 0xFFFF, bus, int(dev, 16), int(fn or "0", 16))
    except ValueError:
        return None


def cpulist(words, bits_per_word):
    """Bitmask words -> '0-47,96-143'."""
    cpus = []
    for w, word in enumerate(words):
        for b in range(bits_per_word):
            if word >> b & 1:
                cpus.append(w * bits_per_word + b)
    ranges = []
    for c in cpus:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges)


def nvml_open(path):
    """Load and init NVML or raise Unsupported (defined by the prelude) with the reason."""
    try:
        return Nvml(path)
    except NvmlUnavailable as e:
        raise Unsupported(str(e)) from None


def link_count(nv, handle):
    """(count, source): NVLink links the device really has.  The field value is exact; without it,
    scan up to the header bound and stop at INVALID_ARGUMENT ('no such link')."""
    fv = FieldValue()
    fv.fieldId = FI_DEV_NVLINK_LINK_COUNT
    rc = nv.call("nvmlDeviceGetFieldValues", handle, ctypes.c_int(1), ctypes.byref(fv))
    if rc == NVML_SUCCESS and fv.nvmlReturn == NVML_SUCCESS:
        return int(fv.value & 0xFFFFFFFF), "field_value", None
    n = 0
    st = ctypes.c_int(0)
    for link in range(NVLINK_SCAN_LIMIT):
        rc = nv.call("nvmlDeviceGetNvLinkState", handle, ctypes.c_uint(link), ctypes.byref(st))
        if rc == NVML_ERROR_INVALID_ARGUMENT:
            break
        if rc in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND) and link == 0:
            return 0, "scan", nv.err(rc)
        if rc == NVML_ERROR_GPU_IS_LOST:
            return None, "scan", nv.err(rc)
        n = link + 1
    return n, "scan", None
