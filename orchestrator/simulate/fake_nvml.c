/* A fake libnvidia-ml.so.1 for tests and the demo fleet.
 *
 * It exports the real NVML symbol names with the real argument lists, struct layouts and return
 * codes (../shared/reference/gpu-probe-reference.md section 1), so the probes' ctypes code runs
 * unchanged against it.  Its answers come from fake_nvml_data.h, which orchestrator/simulate/
 * fake_nvml.py generates from a machines/<name>.nvml.yaml fixture.  FAKE_DRV (the driver branch,
 * e.g. 410 or 550) decides which symbols exist, following the "first seen" table of the
 * reference, so an old-driver fixture really lacks the _v3 and newer entry points.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef struct fake_handle *nvmlDevice_t;

enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25, NVML_ERROR_UNKNOWN = 999
};

/* nvmlViolationTime_t (nvml.h): referenceTime is a CPU timestamp in microseconds, violationTime the
 * cumulative time in nanoseconds the policy held the clocks down. */
typedef struct { unsigned long long referenceTime, violationTime; } nvmlViolationTime_t;
/* nvmlMarginTemperature_v1_t (nvml.h): 8 bytes; nvmlMarginTemperature_v1 = 8 | (1 << 24) = 0x1000008. */
typedef struct { unsigned int version; int marginTemperature; } nvmlMarginTemperature_v1_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t; /* 68 bytes: the _v3 layout */

typedef struct {
    char busId[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    unsigned int reserved0, reserved1, reserved2, reserved3;
} nvmlPciInfo_legacy_t; /* 52 bytes: what _v2 and the unsuffixed call fill */

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

typedef struct {
    unsigned char clusterUuid[16]; nvmlReturn_t status; unsigned int cliqueId; unsigned char state;
} nvmlGpuFabricInfo_t;
typedef struct {
    unsigned int version; unsigned char clusterUuid[16]; nvmlReturn_t status; unsigned int cliqueId;
    unsigned char state; unsigned int healthMask; unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;

typedef struct {
    unsigned int fieldId, scopeId; long long timestamp, latencyUsec; int valueType; nvmlReturn_t nvmlReturn;
    union { double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal; long long sllVal; } value;
} nvmlFieldValue_t;

typedef struct {
    const char *bus_id, *name, *uuid, *serial, *part, *vbios;
    const char *inforom;                                /* InfoROM image version (the machine's inforom_image); NULL: NOT_SUPPORTED */
    unsigned int pci_device_id, minor;
    unsigned long long mem_total, mem_used;
    unsigned int arch; int cc_major, cc_minor;
    unsigned int persistence, compute_mode, virt_mode;
    int mig_capable; unsigned int mig_current, mig_pending; int nmig;
    unsigned int gen_cur, gen_max, gen_gpu_max, width_cur, width_max;
    int numa_node; /* -1: NOT_SUPPORTED (not a C2C-coherent platform) */
    unsigned long cpu_mask[4];
    unsigned int temp; int nfans; unsigned int fan_pct[4]; unsigned int power_mw;
    int ecc_supported; unsigned int ecc_mode;
    /* the totals over every memory location: the sums of mem_err below (fake_nvml.py fills both) */
    unsigned long long ecc_vol_unc, ecc_agg_unc, ecc_vol_cor, ecc_agg_cor;
    int remap_supported; unsigned int remap_cor, remap_unc, remap_pending, remap_failure;
    int fabric_supported; unsigned char fabric_state; int fabric_status; unsigned int clique;
    unsigned char cluster_uuid[16]; unsigned int health_mask; unsigned char health_summary;
    int lost; int nlinks; /* -1: no NVLink (NOT_SUPPORTED) */ unsigned int nvlink_version;
    unsigned int power_limit_mw, power_default_mw, power_enforced_mw; /* 0: NOT_SUPPORTED */
    unsigned long long clock_reasons; /* nvmlClocksEventReason* bits */
    unsigned long long mem_err[2][2][2]; /* [DRAM, SRAM][corrected, uncorrected][volatile, aggregate] */
    unsigned int pcie_replays; int retired_pending; /* -1: NOT_SUPPORTED (Ampere and newer remap rows) */
    /* issue 18 health readings */
    int viol_supported; unsigned long long viol_ns[12]; /* per nvmlPerfPolicyType_t: cumulative violation time */
    int margin_supported; int margin_c;                 /* nvmlDeviceGetMarginTemperature */
    unsigned int slowdown_c, shutdown_c;                /* temperature thresholds; 0: NOT_SUPPORTED */
    int recovery_action;                                /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; -1: NOT_SUPPORTED */
    const char *fails; /* ",nvmlDeviceGetSerial=3," per-function return-code overrides */
    const char *hangs; /* ",nvmlDeviceGetHandleByIndex_v2=30," seconds a call sleeps first: a wedged driver */
} fake_gpu_t;

typedef struct { int active; const char *remote; int rtype; unsigned long long err[4]; } fake_link_t;
typedef struct { const char *name, *uuid; unsigned long long mem; } fake_mig_t;

#include "fake_nvml_data.h"

struct fake_handle { int magic; int gpu; int mig; };
#define MAGIC 0x4e564d4c
static struct fake_handle HANDLES[FAKE_NGPU];
static struct fake_handle MIG_HANDLES[FAKE_NGPU][FAKE_MAXMIG];
static int init_count = 0;

static const char *ERRNAMES[] = {
    "Success", "Uninitialized", "Invalid Argument", "Not Supported", "Insufficient Permissions",
    "Already Initialized", "Not Found", "Insufficient Size", "Insufficient External Power",
    "Driver Not Loaded", "Timeout", "Interrupt Request Issue", "NVML Shared Library Not Found",
    "Function Not Found", "Corrupted infoROM", "GPU is lost", "GPU requires restart",
    "Operating System Error", "RM has detected an NVML/RM version mismatch", "In use", "Memory",
    "No data", "vGPU ECC not supported", "Insufficient resources", "Frequency not supported",
    "Argument version mismatch", "Deprecated", "Not ready", "GPU not found", "Invalid state"};

const char *nvmlErrorString(nvmlReturn_t r) {
    if (r >= 0 && r < (int)(sizeof(ERRNAMES) / sizeof(ERRNAMES[0]))) return ERRNAMES[r];
    return "Unknown Error";
}

nvmlReturn_t nvmlInit_v2(void) {
    int i, j;
    if (FAKE_INIT_RC != NVML_SUCCESS) return FAKE_INIT_RC; /* e.g. DRIVER_NOT_LOADED: library present, no driver */
    for (i = 0; i < FAKE_NGPU; i++) {
        HANDLES[i].magic = MAGIC; HANDLES[i].gpu = i; HANDLES[i].mig = -1;
        for (j = 0; j < FAKE_MAXMIG; j++) {
            MIG_HANDLES[i][j].magic = MAGIC; MIG_HANDLES[i][j].gpu = i; MIG_HANDLES[i][j].mig = j;
        }
    }
    init_count++;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
#if FAKE_DRV >= 415
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }
#endif
nvmlReturn_t nvmlShutdown(void) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

static nvmlReturn_t put_string(const char *value, char *buf, unsigned int length) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (!value) return NVML_ERROR_NOT_SUPPORTED;
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, value);
    return NVML_SUCCESS;
}

/* The fixture's wedged call: sleep as long as it says before answering (a driver that does not
 * return; the probe's watch must answer for it long before). */
static void maybe_hang(const fake_gpu_t *g, const char *fn) {
    char needle[96];
    const char *hit;
    if (!g->hangs) return;
    snprintf(needle, sizeof needle, ",%s=", fn);
    if ((hit = strstr(g->hangs, needle)) != NULL) sleep((unsigned)atoi(hit + strlen(needle)));
}

/* Common entry checks: initialised, a handle we issued, the fixture's per-function override, a
 * lost GPU (which still answers its handle and PCI identity, as the driver keeps those cached). */
static nvmlReturn_t enter(nvmlDevice_t h, const char *fn, const fake_gpu_t **g, int allow_mig) {
    char needle[96];
    const char *hit;
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (!h || h->magic != MAGIC || h->gpu < 0 || h->gpu >= FAKE_NGPU) return NVML_ERROR_INVALID_ARGUMENT;
    if (h->mig >= 0 && !allow_mig) return NVML_ERROR_NOT_SUPPORTED;
    *g = &FAKE_GPUS[h->gpu];
    maybe_hang(*g, fn);
    snprintf(needle, sizeof needle, ",%s=", fn);
    if ((*g)->fails && (hit = strstr((*g)->fails, needle)) != NULL) return atoi(hit + strlen(needle));
    if ((*g)->lost && strcmp(fn, "pci") != 0) return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}
#define ENTER(fn) const fake_gpu_t *g; nvmlReturn_t rc_ = enter(h, fn, &g, 0); if (rc_) return rc_
#define ENTER_MIG(fn) const fake_gpu_t *g; nvmlReturn_t rc_ = enter(h, fn, &g, 1); if (rc_) return rc_
#define OUT(p) if (!(p)) return NVML_ERROR_INVALID_ARGUMENT

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) { return put_string(FAKE_DRIVER_VERSION, v, n); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int n) { return put_string(FAKE_NVML_VERSION, v, n); }
#if FAKE_DRV >= 378
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    OUT(v); *v = FAKE_CUDA_VERSION; return NVML_SUCCESS;
}
#endif
#if FAKE_DRV >= 415
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }
#endif

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    OUT(count); *count = FAKE_NGPU; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    char needle[64];
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (index >= FAKE_NGPU || !device) return NVML_ERROR_INVALID_ARGUMENT;
    maybe_hang(&FAKE_GPUS[index], "nvmlDeviceGetHandleByIndex_v2");
    snprintf(needle, sizeof needle, ",%s=", "nvmlDeviceGetHandleByIndex_v2");
    if (FAKE_GPUS[index].fails && strstr(FAKE_GPUS[index].fails, needle))
        return atoi(strstr(FAKE_GPUS[index].fails, needle) + strlen(needle));
    *device = &HANDLES[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

static void parse_bus(const char *bus, unsigned int *d, unsigned int *b, unsigned int *dev) {
    unsigned int fn = 0;
    *d = *b = *dev = 0;
    if (bus) sscanf(bus, "%x:%x:%x.%x", d, b, dev, &fn);
}
static void fill_pci(const char *bus, unsigned int devid, nvmlPciInfo_t *p) {
    memset(p, 0, sizeof *p);
    parse_bus(bus, &p->domain, &p->bus, &p->device);
    p->pciDeviceId = devid;
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.0", p->domain, p->bus, p->device);
    snprintf(p->busId, sizeof p->busId, "%08X:%02X:%02X.0", p->domain, p->bus, p->device);
}
static void fill_pci_legacy(const char *bus, unsigned int devid, nvmlPciInfo_legacy_t *p) {
    memset(p, 0, sizeof *p);
    parse_bus(bus, &p->domain, &p->bus, &p->device);
    p->pciDeviceId = devid;
    snprintf(p->busId, sizeof p->busId, "%04X:%02X:%02X.0", p->domain, p->bus, p->device);
}

#if FAKE_DRV >= 415
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci) {
    ENTER("pci"); OUT(pci); fill_pci(g->bus_id, g->pci_device_id, pci); return NVML_SUCCESS;
}
#endif
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t h, nvmlPciInfo_legacy_t *pci) {
    ENTER("pci"); OUT(pci); fill_pci_legacy(g->bus_id, g->pci_device_id, pci); return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t h, nvmlPciInfo_legacy_t *pci) { return nvmlDeviceGetPciInfo_v2(h, pci); }

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int length) {
    ENTER_MIG("nvmlDeviceGetName");
    if (h->mig >= 0) return put_string(FAKE_MIGS[h->gpu][h->mig].name, name, length);
    return put_string(g->name, name, length);
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int length) {
    ENTER_MIG("nvmlDeviceGetUUID");
    if (h->mig >= 0) return put_string(FAKE_MIGS[h->gpu][h->mig].uuid, uuid, length);
    return put_string(g->uuid, uuid, length);
}
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t h, char *s, unsigned int n) { ENTER("nvmlDeviceGetSerial"); return put_string(g->serial, s, n); }
nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t h, char *s, unsigned int n) { ENTER("nvmlDeviceGetBoardPartNumber"); return put_string(g->part, s, n); }
nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t h, char *s, unsigned int n) { ENTER("nvmlDeviceGetVbiosVersion"); return put_string(g->vbios, s, n); }
nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t h, char *s, unsigned int n) { ENTER("nvmlDeviceGetInforomImageVersion"); return put_string(g->inforom, s, n); }
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned int *m) { ENTER("nvmlDeviceGetMinorNumber"); OUT(m); *m = g->minor; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    ENTER_MIG("nvmlDeviceGetMemoryInfo"); OUT(m);
    if (h->mig >= 0) { m->total = FAKE_MIGS[h->gpu][h->mig].mem; m->used = 0; m->free = m->total; return NVML_SUCCESS; }
    m->total = g->mem_total; m->used = g->mem_used; m->free = g->mem_total - g->mem_used;
    return NVML_SUCCESS;
}
#if FAKE_DRV >= 510
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
    ENTER("nvmlDeviceGetMemoryInfo_v2"); OUT(m);
    if (m->version != (sizeof(nvmlMemory_v2_t) | (2u << 24))) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = g->mem_total; m->reserved = 0; m->used = g->mem_used; m->free = g->mem_total - g->mem_used;
    return NVML_SUCCESS;
}
#endif

#if FAKE_DRV >= 450
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t h, unsigned int *a) { ENTER("nvmlDeviceGetArchitecture"); OUT(a); *a = g->arch; return NVML_SUCCESS; }
#endif
#if FAKE_DRV >= 378
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *major, int *minor) {
    ENTER("nvmlDeviceGetCudaComputeCapability"); OUT(major); OUT(minor);
    *major = g->cc_major; *minor = g->cc_minor; return NVML_SUCCESS;
}
#endif
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t h, int *m) { ENTER("nvmlDeviceGetPersistenceMode"); OUT(m); *m = (int)g->persistence; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t h, int *m) { ENTER("nvmlDeviceGetComputeMode"); OUT(m); *m = (int)g->compute_mode; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t h, int *m) { ENTER("nvmlDeviceGetVirtualizationMode"); OUT(m); *m = (int)g->virt_mode; return NVML_SUCCESS; }

#if FAKE_DRV >= 450
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *cur, unsigned int *pend) {
    ENTER("nvmlDeviceGetMigMode"); OUT(cur); OUT(pend);
    if (!g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *cur = g->mig_current; *pend = g->mig_pending; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int *n) {
    ENTER("nvmlDeviceGetMaxMigDeviceCount"); OUT(n);
    *n = (g->mig_capable && g->mig_current) ? FAKE_MAXMIG : 0; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int index, nvmlDevice_t *mig) {
    ENTER("nvmlDeviceGetMigDeviceHandleByIndex"); OUT(mig);
    if (!g->mig_capable || !g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if ((int)index >= g->nmig) return NVML_ERROR_NOT_FOUND;
    *mig = &MIG_HANDLES[h->gpu][index]; return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t h, unsigned int *v) { ENTER("nvmlDeviceGetCurrPcieLinkGeneration"); OUT(v); *v = g->gen_cur; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t h, unsigned int *v) { ENTER("nvmlDeviceGetMaxPcieLinkGeneration"); OUT(v); *v = g->gen_max; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t h, unsigned int *v) { ENTER("nvmlDeviceGetCurrPcieLinkWidth"); OUT(v); *v = g->width_cur; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t h, unsigned int *v) { ENTER("nvmlDeviceGetMaxPcieLinkWidth"); OUT(v); *v = g->width_max; return NVML_SUCCESS; }
#if FAKE_DRV >= 525
nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t h, unsigned int *v) { ENTER("nvmlDeviceGetGpuMaxPcieLinkGeneration"); OUT(v); *v = g->gen_gpu_max; return NVML_SUCCESS; }
#endif
#if FAKE_DRV >= 550
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t h, unsigned int *n) {
    ENTER("nvmlDeviceGetNumaNodeId"); OUT(n);
    if (g->numa_node < 0) return NVML_ERROR_NOT_SUPPORTED;
    *n = (unsigned int)g->numa_node; return NVML_SUCCESS;
}
#endif
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t h, unsigned int size, unsigned long *set) {
    unsigned int i;
    ENTER("nvmlDeviceGetCpuAffinity"); OUT(set);
    for (i = 0; i < size; i++) set[i] = i < 4 ? g->cpu_mask[i] : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned int *t) {
    ENTER("nvmlDeviceGetTemperature"); OUT(t);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *t = g->temp; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t h, unsigned int *s) {
    ENTER("nvmlDeviceGetFanSpeed"); OUT(s);
    if (g->nfans <= 0) return NVML_ERROR_NOT_SUPPORTED;
    *s = g->fan_pct[0]; return NVML_SUCCESS;
}
#if FAKE_DRV >= 418
nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t h, unsigned int fan, unsigned int *s) {
    ENTER("nvmlDeviceGetFanSpeed_v2"); OUT(s);
    if (g->nfans <= 0) return NVML_ERROR_NOT_SUPPORTED;
    if ((int)fan >= g->nfans) return NVML_ERROR_INVALID_ARGUMENT;
    *s = g->fan_pct[fan]; return NVML_SUCCESS;
}
#endif
#if FAKE_DRV >= 510
nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t h, unsigned int *n) {
    ENTER("nvmlDeviceGetNumFans"); OUT(n);
    /* nfans 0: answers SUCCESS with zero fans, as a real H200 on R580 did; -1: NOT_SUPPORTED */
    if (g->nfans < 0) return NVML_ERROR_NOT_SUPPORTED;
    *n = (unsigned int)g->nfans; return NVML_SUCCESS;
}
#endif
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *p) { ENTER("nvmlDeviceGetPowerUsage"); OUT(p); *p = g->power_mw; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t h, unsigned int *cur, unsigned int *pend) {
    ENTER("nvmlDeviceGetEccMode"); OUT(cur); OUT(pend);
    if (!g->ecc_supported) return NVML_ERROR_NOT_SUPPORTED;
    *cur = *pend = g->ecc_mode; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int type, int counter, unsigned long long *n) {
    ENTER("nvmlDeviceGetTotalEccErrors"); OUT(n);
    if (!g->ecc_supported || !g->ecc_mode) return NVML_ERROR_NOT_SUPPORTED;
    if (type == 1) *n = counter == 0 ? g->ecc_vol_unc : g->ecc_agg_unc;
    else *n = counter == 0 ? g->ecc_vol_cor : g->ecc_agg_cor;
    return NVML_SUCCESS;
}
/* Power limits in milliwatts; the default limit is the board's out-of-the-box value. */
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned int *limit) {
    ENTER("nvmlDeviceGetPowerManagementLimit"); OUT(limit);
    if (!g->power_limit_mw) return NVML_ERROR_NOT_SUPPORTED;
    *limit = g->power_limit_mw; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t h, unsigned int *limit) {
    ENTER("nvmlDeviceGetPowerManagementDefaultLimit"); OUT(limit);
    if (!g->power_default_mw) return NVML_ERROR_NOT_SUPPORTED;
    *limit = g->power_default_mw; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned int *limit) {
    ENTER("nvmlDeviceGetEnforcedPowerLimit"); OUT(limit);
    if (!g->power_enforced_mw) return NVML_ERROR_NOT_SUPPORTED;
    *limit = g->power_enforced_mw; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h, unsigned long long *reasons) {
    ENTER("nvmlDeviceGetCurrentClocksThrottleReasons"); OUT(reasons);
    *reasons = g->clock_reasons; return NVML_SUCCESS;
}
#if FAKE_DRV >= 535
/* The same bits under the name R535 gave them; older drivers only have the "Throttle" name. */
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *reasons) {
    ENTER("nvmlDeviceGetCurrentClocksEventReasons"); OUT(reasons);
    *reasons = g->clock_reasons; return NVML_SUCCESS;
}
#endif
/* locationType: NVML_MEMORY_LOCATION_DEVICE_MEMORY (2) = DRAM, NVML_MEMORY_LOCATION_SRAM (7, Ampere
 * and newer); other locations are not kept by this fake. */
nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t h, int errorType, int counterType, int locationType,
                                             unsigned long long *count) {
    ENTER("nvmlDeviceGetMemoryErrorCounter"); OUT(count);
    if (!g->ecc_supported || !g->ecc_mode) return NVML_ERROR_NOT_SUPPORTED;
    if (errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (locationType == 2) { *count = g->mem_err[0][errorType][counterType]; return NVML_SUCCESS; }
    if (locationType == 7 && g->arch >= 7) { *count = g->mem_err[1][errorType][counterType]; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t h, unsigned int *value) {
    ENTER("nvmlDeviceGetPcieReplayCounter"); OUT(value);
    *value = g->pcie_replays; return NVML_SUCCESS;
}
/* Dynamic page retirement (before Ampere): whether retired pages wait for a reboot/reset. */
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t h, int *isPending) {
    ENTER("nvmlDeviceGetRetiredPagesPendingStatus"); OUT(isPending);
    if (g->retired_pending < 0 || !g->ecc_supported) return NVML_ERROR_NOT_SUPPORTED;
    *isPending = g->retired_pending; return NVML_SUCCESS;
}

/* Violation time per performance policy (nvmlPerfPolicyType_t: 0 POWER, 1 THERMAL, 2 SYNC_BOOST,
 * 3 BOARD_LIMIT, 4 LOW_UTILIZATION, 5 RELIABILITY, 10 TOTAL_APP_CLOCKS, 11 TOTAL_BASE_CLOCKS). */
nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t h, int perfPolicyType, nvmlViolationTime_t *t) {
    ENTER("nvmlDeviceGetViolationStatus"); OUT(t);
    if (perfPolicyType < 0 || perfPolicyType > 11 || (perfPolicyType > 5 && perfPolicyType < 10))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->viol_supported) return NVML_ERROR_NOT_SUPPORTED;
    { struct timeval tv; gettimeofday(&tv, NULL);
      t->referenceTime = (unsigned long long)tv.tv_sec * 1000000ull + (unsigned long long)tv.tv_usec; }
    t->violationTime = g->viol_ns[perfPolicyType];
    return NVML_SUCCESS;
}
/* nvmlTemperatureThresholds_t: 0 SHUTDOWN, 1 SLOWDOWN, 2 MEM_MAX, 3 GPU_MAX (others not kept here). */
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t h, int thresholdType, unsigned int *temp) {
    ENTER("nvmlDeviceGetTemperatureThreshold"); OUT(temp);
    if (thresholdType < 0 || thresholdType > 7) return NVML_ERROR_INVALID_ARGUMENT;
    if (thresholdType == 0 && g->shutdown_c) { *temp = g->shutdown_c; return NVML_SUCCESS; }
    if (thresholdType == 1 && g->slowdown_c) { *temp = g->slowdown_c; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_SUPPORTED;
}
#if FAKE_DRV >= 555
/* The distance to the nearest slowdown threshold, in a versioned struct (first in the R555-era
 * headers as far as we know; older drivers lack the symbol and the probe reports FUNCTION_NOT_FOUND). */
nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t h, nvmlMarginTemperature_v1_t *m) {
    ENTER("nvmlDeviceGetMarginTemperature"); OUT(m);
    if (m->version != (sizeof(nvmlMarginTemperature_v1_t) | (1u << 24))) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!g->margin_supported) return NVML_ERROR_NOT_SUPPORTED;
    m->marginTemperature = g->margin_c; return NVML_SUCCESS;
}
#endif

#if FAKE_DRV >= 450
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t h, unsigned int *c, unsigned int *u, unsigned int *p, unsigned int *f) {
    ENTER("nvmlDeviceGetRemappedRows"); OUT(c); OUT(u); OUT(p); OUT(f);
    /* Not supported before Ampere, nor while MIG instances exist. */
    if (!g->remap_supported || (g->mig_current && g->nmig > 0)) return NVML_ERROR_NOT_SUPPORTED;
    *c = g->remap_cor; *u = g->remap_unc; *p = g->remap_pending; *f = g->remap_failure;
    return NVML_SUCCESS;
}
#endif

#if FAKE_DRV >= 525
nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t h, nvmlGpuFabricInfo_t *f) {
    ENTER("nvmlDeviceGetGpuFabricInfo"); OUT(f);
    if (!g->fabric_supported) return NVML_ERROR_NOT_SUPPORTED;
    memcpy(f->clusterUuid, g->cluster_uuid, 16); f->status = g->fabric_status;
    f->cliqueId = g->clique; f->state = g->fabric_state; return NVML_SUCCESS;
}
#endif
#if FAKE_DRV >= 550
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t h, nvmlGpuFabricInfo_v3_t *f) {
    ENTER("nvmlDeviceGetGpuFabricInfoV"); OUT(f);
    if (f->version == (0x28u | (3u << 24))) {
        if (FAKE_DRV < 580) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    } else if (f->version != (0x24u | (2u << 24))) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (!g->fabric_supported) return NVML_ERROR_NOT_SUPPORTED;
    memcpy(f->clusterUuid, g->cluster_uuid, 16); f->status = g->fabric_status;
    f->cliqueId = g->clique; f->state = g->fabric_state; f->healthMask = g->health_mask;
    if (f->version >> 24 == 3) f->healthSummary = g->health_summary;
    return NVML_SUCCESS;
}
#endif

/* ---- NVLink ---- */
static nvmlReturn_t link_enter(nvmlDevice_t h, const char *fn, unsigned int link, const fake_gpu_t **g) {
    nvmlReturn_t rc = enter(h, fn, g, 0);
    if (rc) return rc;
    if ((*g)->nlinks < 0) return NVML_ERROR_NOT_SUPPORTED;
    if ((int)link >= (*g)->nlinks) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}
#define LINK_ENTER(fn) const fake_gpu_t *g; nvmlReturn_t rc_ = link_enter(h, fn, link, &g); if (rc_) return rc_; \
    const fake_link_t *L = &FAKE_LINKS[h->gpu][link]; (void)L

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t h, unsigned int link, int *active) {
    LINK_ENTER("nvmlDeviceGetNvLinkState"); OUT(active); *active = L->active; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t h, unsigned int link, unsigned int *v) {
    LINK_ENTER("nvmlDeviceGetNvLinkVersion"); OUT(v); *v = g->nvlink_version; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t h, unsigned int link, int cap, unsigned int *r) {
    /* Real trap (reference 1.4.6): capability answers TRUE past the real link count, up to the
     * header bound; only the state call rejects those indices. */
    const fake_gpu_t *g;
    nvmlReturn_t rc = enter(h, "nvmlDeviceGetNvLinkCapability", &g, 0);
    if (rc) return rc;
    if (g->nlinks < 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= 36 || cap < 0 || cap > 5 || !r) return NVML_ERROR_INVALID_ARGUMENT;
    *r = (cap == 4) ? 0 : 1;
    return NVML_SUCCESS;
}
#if FAKE_DRV >= 415
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t h, unsigned int link, nvmlPciInfo_t *pci) {
    LINK_ENTER("nvmlDeviceGetNvLinkRemotePciInfo_v2"); OUT(pci); fill_pci(L->remote, 0, pci); return NVML_SUCCESS;
}
#endif
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t h, unsigned int link, nvmlPciInfo_legacy_t *pci) {
    LINK_ENTER("nvmlDeviceGetNvLinkRemotePciInfo"); OUT(pci); fill_pci_legacy(L->remote, 0, pci); return NVML_SUCCESS;
}
#if FAKE_DRV >= 470
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t h, unsigned int link, int *t) {
    LINK_ENTER("nvmlDeviceGetNvLinkRemoteDeviceType"); OUT(t); *t = L->rtype; return NVML_SUCCESS;
}
#endif
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t h, unsigned int link, int counter, unsigned long long *v) {
    LINK_ENTER("nvmlDeviceGetNvLinkErrorCounter"); OUT(v);
    if (counter < 0 || counter > 4) return NVML_ERROR_INVALID_ARGUMENT;
    if (counter == 4) return NVML_ERROR_NOT_SUPPORTED;
    *v = L->err[counter]; return NVML_SUCCESS;
}

#if FAKE_DRV >= 384
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int count, nvmlFieldValue_t *values) {
    int i;
    ENTER("nvmlDeviceGetFieldValues"); OUT(values);
    for (i = 0; i < count; i++) {
        nvmlFieldValue_t *fv = &values[i];
        fv->timestamp = 0; fv->latencyUsec = 0;
        if (fv->fieldId == 91 && FAKE_DRV >= 415) { /* NVML_FI_DEV_NVLINK_LINK_COUNT */
            if (g->nlinks < 0) { fv->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; continue; }
            fv->valueType = 1; fv->value.ullVal = 0; fv->value.uiVal = (unsigned int)g->nlinks;
            fv->nvmlReturn = NVML_SUCCESS;
        } else if (fv->fieldId == 230 && FAKE_DRV >= 570) {
            /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (field 230 of the R570+ nvml.h); the value is an
             * nvmlDeviceGpuRecoveryAction_t: 0 NONE, 1 GPU_RESET, 2 NODE_REBOOT, 3 DRAIN_P2P,
             * 4 DRAIN_AND_RESET.  Older drivers do not know the field id (INVALID_ARGUMENT below). */
            if (g->recovery_action < 0) { fv->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; continue; }
            fv->valueType = 1; fv->value.ullVal = 0; fv->value.uiVal = (unsigned int)g->recovery_action;
            fv->nvmlReturn = NVML_SUCCESS;
        } else {
            fv->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        }
    }
    return NVML_SUCCESS;
}
#endif

/* ---- pairs ---- */
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t h, nvmlDevice_t h2, int *level) {
    const fake_gpu_t *g2;
    ENTER("nvmlDeviceGetTopologyCommonAncestor"); OUT(level);
    rc_ = enter(h2, "nvmlDeviceGetTopologyCommonAncestor", &g2, 0);
    if (rc_) return rc_;
    *level = FAKE_TOPO[h->gpu][h2->gpu];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t h, nvmlDevice_t h2, int cap, int *status) {
    const fake_gpu_t *g2;
    ENTER("nvmlDeviceGetP2PStatus"); OUT(status);
    rc_ = enter(h2, "nvmlDeviceGetP2PStatus", &g2, 0);
    if (rc_) return rc_;
    if (cap < 0 || cap > 4) return NVML_ERROR_INVALID_ARGUMENT;
    *status = FAKE_P2P[h->gpu][h2->gpu][cap];
    return NVML_SUCCESS;
}
