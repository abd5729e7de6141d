# Probe `nvml`: every GPU as the driver's own library sees it, plus the topology and P2P matrices.
# requires: _nvml
# ctypes on libnvidia-ml.so.1 (argument `lib` overrides the path so a compiled fake can stand in).
# Every field fails alone: its value becomes null and `unknown[field]` says why (NVML error name).
import ctypes

PROBE_NAME = "nvml"
PROBE_VERSION = "1.4"
PROBE_DESCRIPTION = "NVML: GPUs, identity (VBIOS, InfoROM), memory, MIG, virtualization, PCIe link, sensors, ECC, fabric, P2P matrix"
PASSIVE = True


class _Gpu(object):
    """Collects one GPU's fields; a failed field is stored as None with its reason."""

    def __init__(self, nv, handle, index):
        self.nv = nv
        self.h = handle
        self.d = {"index": index, "unknown": {}}

    def put(self, key, value, reason):
        self.d[key] = value
        if reason is not None:
            self.d["unknown"][key] = reason
            if reason == "GPU_IS_LOST":
                self.d["lost"] = True

    def string(self, key, fn, size=96):
        v, why = self.nv.string(fn, self.h, size)
        self.put(key, v, why)
        return v

    def uint(self, key, fn, decode=None):
        v, why = self.nv.uint(fn, self.h)
        if v is not None and decode is not None:
            v = decode.get(v, "unknown(%d)" % v)
        self.put(key, v, why)
        return v


def _memory(nv, g):
    m2 = MemoryV2()
    m2.version = MEMORY_V2_VERSION
    rc = nv.call("nvmlDeviceGetMemoryInfo_v2", g.h, ctypes.byref(m2))
    if rc == NVML_SUCCESS:
        g.put("memory_total_bytes", m2.total, None)
        g.put("memory_used_bytes", m2.used, None)
        return
    m = Memory()
    rc = nv.call("nvmlDeviceGetMemoryInfo", g.h, ctypes.byref(m))
    ok = rc == NVML_SUCCESS
    g.put("memory_total_bytes", m.total if ok else None, None if ok else nv.err(rc))
    g.put("memory_used_bytes", m.used if ok else None, None if ok else nv.err(rc))


def _compute_capability(nv, g):
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    rc = nv.call("nvmlDeviceGetCudaComputeCapability", g.h, ctypes.byref(major), ctypes.byref(minor))
    g.put("compute_capability", "%d.%d" % (major.value, minor.value) if rc == NVML_SUCCESS else None,
          None if rc == NVML_SUCCESS else nv.err(rc))


def _mig(nv, g):
    cur, pend = ctypes.c_uint(0), ctypes.c_uint(0)
    rc = nv.call("nvmlDeviceGetMigMode", g.h, ctypes.byref(cur), ctypes.byref(pend))
    if rc != NVML_SUCCESS:
        g.put("mig", None, nv.err(rc))
        return
    mig = {"current": cur.value == 1, "pending": pend.value == 1, "instances": []}
    if cur.value == 1:
        n, why = nv.uint("nvmlDeviceGetMaxMigDeviceCount", g.h)
        if why:
            mig["instances_unknown"] = why
        for i in range(n or 0):
            mh = ctypes.c_void_p()
            rc = nv.call("nvmlDeviceGetMigDeviceHandleByIndex", g.h, ctypes.c_uint(i), ctypes.byref(mh))
            if rc == 6:  # NOT_FOUND: no instance in this slot
                continue
            if rc != NVML_SUCCESS:
                mig["instances_unknown"] = nv.err(rc)
                continue
            inst = {"index": i}
            inst["uuid"], _ = nv.string("nvmlDeviceGetUUID", mh)
            inst["name"], _ = nv.string("nvmlDeviceGetName", mh)
            m = Memory()
            inst["memory_total_bytes"] = (m.total if nv.call("nvmlDeviceGetMemoryInfo", mh, ctypes.byref(m))
                                          == NVML_SUCCESS else None)
            mig["instances"].append(inst)
    g.put("mig", mig, None)


def _pcie(nv, g):
    out, unknown = {}, {}
    for key, fn in (("gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
                    ("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                    ("gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
                    ("width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
                    ("width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
        out[key], why = nv.uint(fn, g.h)
        if why:
            unknown[key] = why
    if unknown:
        out["unknown"] = unknown
    lost = "GPU_IS_LOST" in unknown.values()
    g.put("pcie", out, "GPU_IS_LOST" if lost else None)


def _affinity(nv, g):
    words = (ctypes.c_ulong * 16)()
    rc = nv.call("nvmlDeviceGetCpuAffinity", g.h, ctypes.c_uint(16), words)
    ok = rc == NVML_SUCCESS
    g.put("cpu_affinity", cpulist(list(words), ctypes.sizeof(ctypes.c_ulong) * 8) if ok else None,
          None if ok else nv.err(rc))


def _fans(nv, g):
    n, why = nv.uint("nvmlDeviceGetNumFans", g.h)
    fans = []
    if n is not None:
        for i in range(n):
            v, fwhy = nv.uint("nvmlDeviceGetFanSpeed_v2", g.h, ctypes.c_uint(i))
            fans.append({"index": i, "speed_pct": v} if fwhy is None else
                        {"index": i, "speed_pct": None, "unknown": fwhy})
        g.put("fans", fans, None)
        return
    if why == "FUNCTION_NOT_FOUND":  # driver < 510: only the single-fan call exists
        v, why = nv.uint("nvmlDeviceGetFanSpeed", g.h)
        if v is not None:
            g.put("fans", [{"index": 0, "speed_pct": v}], None)
            return
    g.put("fans", None, why)


def _power(nv, g):
    mw, why = nv.uint("nvmlDeviceGetPowerUsage", g.h)
    g.put("power_w", round(mw / 1000.0, 1) if mw is not None else None, why)


def _ecc(nv, g):
    cur, pend = ctypes.c_uint(0), ctypes.c_uint(0)
    rc = nv.call("nvmlDeviceGetEccMode", g.h, ctypes.byref(cur), ctypes.byref(pend))
    if rc != NVML_SUCCESS:
        g.put("ecc", None, nv.err(rc))
        return
    ecc = {"mode_current": cur.value == 1, "mode_pending": pend.value == 1}
    unknown = {}
    for key, etype, ctype in (("volatile_uncorrected", 1, 0), ("aggregate_uncorrected", 1, 1),
                              ("aggregate_corrected", 0, 1)):
        v = ctypes.c_ulonglong(0)
        rc = nv.call("nvmlDeviceGetTotalEccErrors", g.h, ctypes.c_int(etype), ctypes.c_int(ctype),
                     ctypes.byref(v))
        ecc[key] = v.value if rc == NVML_SUCCESS else None
        if rc != NVML_SUCCESS:
            unknown[key] = nv.err(rc)
    if unknown:
        ecc["unknown"] = unknown
    ecc["_h"] = g.h
    ecc["locations"] = _ecc_locations(nv, ecc)
    del ecc["_h"]
    g.put("ecc", ecc, None)


def _ecc_locations(nv, ecc):
    # DRAM (NVML_MEMORY_LOCATION_DEVICE_MEMORY = 2) and, from Ampere on, SRAM (= 7), apart.
    out = {}
    for loc, code in (("dram", 2), ("sram", 7)):
        counts, why = {}, None
        for key, etype, ctype in (("volatile_corrected", 0, 0), ("aggregate_corrected", 0, 1),
                                  ("volatile_uncorrected", 1, 0), ("aggregate_uncorrected", 1, 1)):
            v = ctypes.c_ulonglong(0)
            rc = nv.call("nvmlDeviceGetMemoryErrorCounter", ecc["_h"], ctypes.c_int(etype), ctypes.c_int(ctype),
                         ctypes.c_int(code), ctypes.byref(v))
            if rc != NVML_SUCCESS:
                why = nv.err(rc)
                break
            counts[key] = v.value
        out[loc] = counts if why is None else {"unknown": why}
    return out


def _power_limits(nv, g):
    out, unknown = {}, {}
    for key, fn in (("limit_w", "nvmlDeviceGetPowerManagementLimit"),
                    ("default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit"),
                    ("enforced_limit_w", "nvmlDeviceGetEnforcedPowerLimit")):
        mw, why = nv.uint(fn, g.h)
        out[key] = round(mw / 1000.0, 1) if mw is not None else None
        if why:
            unknown[key] = why
    if unknown:
        out["unknown"] = unknown
    g.put("power_limits", out, None)


def _clock_reasons(nv, g):
    # The bitmask as NVML gives it (nvmlClocksEventReason*); the controller names the bits.
    v = ctypes.c_ulonglong(0)
    rc = nv.first(("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                  g.h, ctypes.byref(v))
    ok = rc == NVML_SUCCESS
    g.put("clock_event_reasons", v.value if ok else None, None if ok else nv.err(rc))


def _remapped(nv, g):
    c, u, p, f = ctypes.c_uint(0), ctypes.c_uint(0), ctypes.c_uint(0), ctypes.c_uint(0)
    rc = nv.call("nvmlDeviceGetRemappedRows", g.h, ctypes.byref(c), ctypes.byref(u), ctypes.byref(p),
                 ctypes.byref(f))
    if rc != NVML_SUCCESS:
        g.put("remapped_rows", None, nv.err(rc))
        return
    g.put("remapped_rows", {"correctable": c.value, "uncorrectable": u.value, "pending": p.value != 0,
                            "failure": f.value != 0}, None)


def _fabric(nv, g):
    # Recipe from the reference: V with v3, then v2 on a version mismatch, then the v1 call.
    info = FabricInfoV3()
    rc = NVML_ERROR_FUNCTION_NOT_FOUND
    for version in (FABRIC_V3_VERSION, FABRIC_V2_VERSION):
        info.version = version
        rc = nv.call("nvmlDeviceGetGpuFabricInfoV", g.h, ctypes.byref(info))
        if rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
            break
    if rc == NVML_SUCCESS:
        uuid = bytes(bytearray(info.clusterUuid))
        summary = info.healthSummary if info.version == FABRIC_V3_VERSION else 0
        fab = {"state": FABRIC_STATES.get(info.state, "unknown(%d)" % info.state),
               "status": nv.err(info.status), "clique_id": info.cliqueId, "cluster_uuid": uuid.hex(),
               "health_mask": info.healthMask, "health_summary": FABRIC_HEALTH.get(summary)}
        g.put("fabric", fab, None)
        return
    if rc == NVML_ERROR_FUNCTION_NOT_FOUND:
        v1 = FabricInfoV1()
        rc = nv.call("nvmlDeviceGetGpuFabricInfo", g.h, ctypes.byref(v1))
        if rc == NVML_SUCCESS:
            g.put("fabric", {"state": FABRIC_STATES.get(v1.state, "unknown(%d)" % v1.state),
                             "status": nv.err(v1.status), "clique_id": v1.cliqueId,
                             "cluster_uuid": bytes(bytearray(v1.clusterUuid)).hex(),
                             "health_mask": None, "health_summary": None}, None)
            return
    g.put("fabric", None, nv.err(rc))


def _violations(nv, g):
    # Cumulative time (ns since the driver loaded) each performance policy held the clocks down.
    out, unknown = {"reference_us": None}, {}
    for key, policy in PERF_POLICIES:
        t = ViolationTime()
        rc = nv.call("nvmlDeviceGetViolationStatus", g.h, ctypes.c_int(policy), ctypes.byref(t))
        out[key] = t.violationTime if rc == NVML_SUCCESS else None
        if rc != NVML_SUCCESS:
            unknown[key] = nv.err(rc)
        elif t.referenceTime:
            out["reference_us"] = t.referenceTime  # the CPU timestamp (us) of the reading
    if len(unknown) == len(PERF_POLICIES):
        g.put("violation_ns", None, next(iter(unknown.values())))
        return
    if unknown:
        out["unknown"] = unknown
    g.put("violation_ns", out, None)


def _thermal(nv, g):
    # Slowdown/shutdown thresholds (nvmlTemperatureThresholds_t 1 and 0) and, on newer drivers, the
    # margin to the nearest slowdown threshold (a versioned struct).
    out, unknown = {}, {}
    for key, kind in (("slowdown_c", 1), ("shutdown_c", 0)):
        out[key], why = nv.uint("nvmlDeviceGetTemperatureThreshold", g.h, ctypes.c_int(kind))
        if why:
            unknown[key] = why
    m = MarginTemperatureV1()
    m.version = MARGIN_TEMPERATURE_V1_VERSION
    rc = nv.call("nvmlDeviceGetMarginTemperature", g.h, ctypes.byref(m))
    out["margin_c"] = m.marginTemperature if rc == NVML_SUCCESS else None
    if rc != NVML_SUCCESS:
        unknown["margin_c"] = nv.err(rc)
    if unknown:
        out["unknown"] = unknown
    g.put("thermal", out, None)


def _recovery_action(nv, g):
    fv = FieldValue()
    fv.fieldId = FI_DEV_GET_GPU_RECOVERY_ACTION
    rc = nv.call("nvmlDeviceGetFieldValues", g.h, ctypes.c_int(1), ctypes.byref(fv))
    if rc == NVML_SUCCESS and fv.nvmlReturn == NVML_SUCCESS:
        v = int(fv.value & 0xFFFFFFFF)
        g.put("recovery_action", RECOVERY_ACTIONS.get(v, "unknown(%d)" % v), None)
        return
    # INVALID_ARGUMENT per field: a driver older than the field (R570)
    g.put("recovery_action", None, nv.err(rc if rc != NVML_SUCCESS else fv.nvmlReturn))


def _gpu(nv, index):
    h, why = nv.handle(index)
    if h is None:
        return None, {"index": index, "unknown": {"handle": why}, "lost": why == "GPU_IS_LOST"}
    g = _Gpu(nv, h, index)
    g.d["lost"] = False
    bus_id, devid, why = nv.pci(h)
    g.put("bus_id", bus_id, why)
    g.put("pci_device_id", devid, why)
    g.string("name", "nvmlDeviceGetName")
    g.string("uuid", "nvmlDeviceGetUUID")
    g.string("serial", "nvmlDeviceGetSerial", 32)
    g.string("board_part_number", "nvmlDeviceGetBoardPartNumber", 80)
    g.string("vbios", "nvmlDeviceGetVbiosVersion", 32)
    # NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE (16); boards without an InfoROM answer NOT_SUPPORTED
    g.string("inforom_image", "nvmlDeviceGetInforomImageVersion", 16)
    g.uint("minor_number", "nvmlDeviceGetMinorNumber")
    _memory(nv, g)
    g.uint("architecture", "nvmlDeviceGetArchitecture", ARCHITECTURES)
    _compute_capability(nv, g)
    persistence = g.uint("persistence_mode", "nvmlDeviceGetPersistenceMode")
    if persistence is not None:
        g.d["persistence_mode"] = persistence == 1
    g.uint("compute_mode", "nvmlDeviceGetComputeMode", COMPUTE_MODES)
    _mig(nv, g)
    g.uint("virtualization_mode", "nvmlDeviceGetVirtualizationMode", VIRT_MODES)
    _pcie(nv, g)
    g.uint("numa_node", "nvmlDeviceGetNumaNodeId")
    _affinity(nv, g)
    temp, why = nv.uint("nvmlDeviceGetTemperature", h, ctypes.c_int(0))
    g.put("temperature_c", temp, why)
    _fans(nv, g)
    _power(nv, g)
    _ecc(nv, g)
    _remapped(nv, g)
    _fabric(nv, g)
    _power_limits(nv, g)
    _clock_reasons(nv, g)
    g.uint("pcie_replays", "nvmlDeviceGetPcieReplayCounter")
    pending = g.uint("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
    if pending is not None:
        g.d["retired_pages_pending"] = pending == 1
    _violations(nv, g)
    _thermal(nv, g)
    _recovery_action(nv, g)
    return h, g.d


def _matrices(nv, handles, gpus):
    n = len(handles)
    levels = [[None] * n for _ in range(n)]
    p2p = dict((name, [[None] * n for _ in range(n)]) for name, _ in P2P_CAPS)
    unknown = {}
    for i in range(n):
        for j in range(n):
            if i == j:
                levels[i][j] = "X"
                for name, _ in P2P_CAPS:
                    p2p[name][i][j] = "X"
                continue
            if handles[i] is None or handles[j] is None:
                continue
            nv.subject = "GPU %d and GPU %d" % (i, j)
            if j > i:
                v = ctypes.c_int(0)
                rc = nv.call("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j], ctypes.byref(v))
                if rc == NVML_SUCCESS:
                    levels[i][j] = levels[j][i] = TOPOLOGY_LEVELS.get(v.value, "unknown(%d)" % v.value)
                else:
                    unknown.setdefault("%d-%d" % (i, j), "level: " + nv.err(rc))
            for name, cap in P2P_CAPS:
                v = ctypes.c_int(0)
                rc = nv.call("nvmlDeviceGetP2PStatus", handles[i], handles[j], ctypes.c_int(cap), ctypes.byref(v))
                if rc == NVML_SUCCESS:
                    p2p[name][i][j] = P2P_STATUS.get(v.value, "U")
                else:
                    unknown.setdefault("%d-%d" % (min(i, j), max(i, j)), "p2p %s: %s" % (name, nv.err(rc)))
    return levels, p2p, unknown


def collect(ctx):
    nv = nvml_open(ctx.args.get("lib"))
    data = {"library": ctx.args.get("lib") or "libnvidia-ml.so.1", "unknown": {}}
    ctx.partial = data
    try:
        data["driver_version"], why = nv.string("nvmlSystemGetDriverVersion", None, 80)
        if why:
            data["unknown"]["driver_version"] = why
        data["nvml_version"], why = nv.string("nvmlSystemGetNVMLVersion", None, 80)
        if why:
            data["unknown"]["nvml_version"] = why
        v = ctypes.c_int(0)
        rc = nv.first(("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"), ctypes.byref(v))
        data["cuda_driver_version"] = ("%d.%d" % (v.value // 1000, (v.value % 1000) // 10)
                                       if rc == NVML_SUCCESS else None)
        if rc != NVML_SUCCESS:
            data["unknown"]["cuda_driver_version"] = nv.err(rc)
        count, why = nv.count()
        data["count"] = count
        if why:
            data["unknown"]["count"] = why
            ctx.error("nvmlDeviceGetCount failed: %s" % why)
        data["gpus"] = []
        handles = []
        for i in range(count or 0):
            if ctx.remaining() < 1.0:
                ctx.warn("deadline near: stopped after %d of %d GPUs" % (i, count))
                break
            h, g = _gpu(nv, i)
            handles.append(h)
            data["gpus"].append(g)
        levels, p2p, unknown = _matrices(nv, handles, data["gpus"])
        data["levels"] = levels
        data["p2p"] = p2p
        if unknown:
            data["unknown"]["pairs"] = unknown  # "i-j" (NVML indices) -> first failure for that pair
        data["missing_symbols"] = sorted(nv.missing)
    finally:
        nv.shutdown()
    return data
