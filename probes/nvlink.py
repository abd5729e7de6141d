# Probe `nvlink`: every NVLink of every GPU: state, version, remote end, capabilities, error counters.
# requires: _nvml
# ctypes on libnvidia-ml.so.1 (argument `lib` overrides the path).  Links are enumerated up to what
# the device really has (field NVLINK_LINK_COUNT, else a scan stopped by INVALID_ARGUMENT), never
# up to NVML_NVLINK_MAX_LINKS, and the link state -- not the capability bit -- is the authority.
import ctypes

PROBE_NAME = "nvlink"
PROBE_VERSION = "1.1"
PROBE_DESCRIPTION = "NVLink per GPU per link: state, version, remote PCI id and type, capabilities, error counters"
PASSIVE = True

_CAPS = (("p2p_supported", 0), ("sysmem_access", 1), ("p2p_atomics", 2))
_COUNTERS = (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3))


def _link(nv, h, link):
    out = {"link": link, "unknown": {}}
    L = ctypes.c_uint(link)
    st = ctypes.c_int(0)
    rc = nv.call("nvmlDeviceGetNvLinkState", h, L, ctypes.byref(st))
    out["state"] = ("up" if st.value == 1 else "down") if rc == NVML_SUCCESS else None
    if rc != NVML_SUCCESS:
        out["unknown"]["state"] = nv.err(rc)
    ver, why = nv.uint("nvmlDeviceGetNvLinkVersion", h, L)
    out["version"] = NVLINK_VERSIONS.get(ver, "unknown(%d)" % ver) if ver is not None else None
    out["version_raw"] = ver
    if why:
        out["unknown"]["version"] = why
    info = PciInfo()
    rc = nv.first(("nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo"),
                  h, L, ctypes.byref(info))
    out["remote_bus_id"] = pci_bus_id(info) if rc == NVML_SUCCESS else None
    if rc != NVML_SUCCESS:
        out["unknown"]["remote_bus_id"] = nv.err(rc)
    t = ctypes.c_int(0)
    rc = nv.call("nvmlDeviceGetNvLinkRemoteDeviceType", h, L, ctypes.byref(t))
    out["remote_type"] = NVLINK_DEVICE_TYPES.get(t.value, "unknown") if rc == NVML_SUCCESS else None
    if rc != NVML_SUCCESS:
        out["unknown"]["remote_type"] = nv.err(rc)
    for key, cap in _CAPS:
        v, why = nv.uint("nvmlDeviceGetNvLinkCapability", h, L, ctypes.c_int(cap))
        out[key] = (v != 0) if v is not None else None
        if why:
            out["unknown"][key] = why
    errors = {}
    for key, counter in _COUNTERS:
        v = ctypes.c_ulonglong(0)
        rc = nv.call("nvmlDeviceGetNvLinkErrorCounter", h, L, ctypes.c_int(counter), ctypes.byref(v))
        errors[key] = v.value if rc == NVML_SUCCESS else None
        if rc != NVML_SUCCESS:
            out["unknown"]["errors." + key] = nv.err(rc)
    out["errors"] = errors
    return out


def _gpu(nv, index):
    g = {"index": index, "unknown": {}, "links": []}
    h, why = nv.handle(index)
    if h is None:
        g["unknown"]["handle"] = why
        return g
    g["bus_id"], _, why = nv.pci(h)
    if why:
        g["unknown"]["bus_id"] = why
    g["uuid"], why = nv.string("nvmlDeviceGetUUID", h)
    if why:
        g["unknown"]["uuid"] = why
    g["name"], _ = nv.string("nvmlDeviceGetName", h)
    n, source, why = link_count(nv, h)
    g["link_count"] = n
    g["link_count_source"] = source
    if why:
        g["unknown"]["links"] = why
    for link in range(n or 0):
        g["links"].append(_link(nv, h, link))
    return g


def collect(ctx):
    nv = nvml_open(ctx.args.get("lib"))
    data = {"gpus": [], "unknown": {}}
    ctx.partial = data
    try:
        data["driver_version"], _ = nv.string("nvmlSystemGetDriverVersion", None, 80)
        count, why = nv.count()
        data["count"] = count
        if why:
            data["unknown"]["count"] = why
            ctx.error("nvmlDeviceGetCount failed: %s" % why)
        for i in range(count or 0):
            if ctx.remaining() < 1.0:
                ctx.warn("deadline near: stopped after %d of %d GPUs" % (i, count))
                break
            data["gpus"].append(_gpu(nv, i))
        data["missing_symbols"] = sorted(nv.missing)
    finally:
        nv.shutdown()
    return data
