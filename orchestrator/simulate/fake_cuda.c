/* A fake libcuda.so.1 for tests and the demo: the CUDA driver API subset the p2p probe calls,
 * driven by one fixture machine (compiled in from a generated header, see fake_cuda.py).
 *
 * What is real: device memory is host memory, so every copy really moves bytes and the probe's
 * verification really runs; allocations, streams, events, modules and retained contexts are
 * counted, and the counts are written (JSON) to $FAKE_CUDA_REPORT after every change, because
 * the probe leaves with os._exit() and destructors never run.
 * What is modelled: time.  Each stream has a virtual clock; an operation advances it by
 * latency + bytes / rate, the rate taken from the fixture.  A launched fp_spin holds its stream
 * (and streams that wait on its events) until the host writes the flag, then the held work runs
 * as one concurrent batch, which is where contention (shared host uplink, bidirectional pairs)
 * is applied.  Nothing sleeps: this fake tests control flow and judgement, never bandwidth
 * accuracy.
 * It also exports the NVML calls the probe's busy-GPU guard uses (busy GPUs and NVLink P2P
 * status from the same fixture), so the guard can be tested with this one library.
 * The fake libnccl.so.2 (fake_nccl.c) finds this library as the real NCCL finds libcuda
 * (dlopen of "libcuda.so.1", which names the loaded fake by its soname) and drives it through the
 * public API plus the fakecuda_* calls at the end: what a real NCCL kernel does to a stream (take
 * time, or never finish) has no driver API of its own.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include FAKE_CUDA_FIXTURE /* generated: FX_* constants and arrays */

typedef int CUresult;
typedef uint64_t CUdeviceptr;

enum {
    OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100,
    INVALID_DEVICE = 101, INVALID_CONTEXT = 201, PEER_UNSUPPORTED = 217, UNSUPPORTED_PTX = 222,
    INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600, ILLEGAL_ADDRESS = 700,
    PEER_ALREADY = 704, PEER_NOT_ENABLED = 705, TOO_MANY_PEERS = 711, LAUNCH_FAILED = 719
};

/* ---------------------------------------------------------------- bookkeeping and report */

typedef struct { uintptr_t p; size_t n; int dev; int live; } alloc_t; /* dev -1: pinned host */
typedef struct { int dev; int retained; int peer[FX_NMAX]; int npeers; } ctx_t;
typedef struct { int live; int dev; } module_t;
typedef struct { int kind; module_t *mod; } func_t;
enum { OP_COPY, OP_MEMSET, OP_SPIN, OP_KCOPY, OP_RECORD, OP_WAIT };
typedef struct event event_t;
typedef struct { int kind; uintptr_t dst, src; size_t n; int value; event_t *ev; int dev; } op_t;
typedef struct { int live; int dev; double t; int held; op_t *q; int qlen, qcap; int hung; } stream_t;
/* stuck_on: the hung stream this event was recorded on; it completes only if that stream is released */
struct event { int live; int recorded; int pending; double t; void *stuck_on; };

#define MAX_ALLOCS 4096
#define MAX_STREAMS 256
#define MAX_EVENTS 1024
#define MAX_MODULES 64
static alloc_t allocs[MAX_ALLOCS];
static ctx_t ctxs[FX_NMAX];
static module_t modules[MAX_MODULES];
static stream_t streams[MAX_STREAMS];
static event_t events[MAX_EVENTS];
static func_t funcs[MAX_MODULES][2];
static ctx_t *cur;
static int initialised;
static int sticky; /* a launch failure poisons every later call, as on a real context */
static double gclock; /* ns: the latest time the host has observed */
static int hold_active; static uintptr_t hold_flag; static double hold_timeout;
static long long peak_device_bytes, device_bytes;
static long long n_dev_allocs, n_host_allocs, n_streams, n_events, n_modules, n_retained;
static long long n_copies, n_kernels;

static void report(void)
{
    const char *path = getenv("FAKE_CUDA_REPORT");
    if (!path || !*path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"machine\": \"%s\", \"device_allocs\": %lld, \"device_bytes\": %lld, "
               "\"peak_device_bytes\": %lld, \"host_allocs\": %lld, \"streams\": %lld, "
               "\"events\": %lld, \"modules\": %lld, \"retained_contexts\": %lld, "
               "\"copies\": %lld, \"kernels\": %lld}\n",
            FX_MACHINE, n_dev_allocs, device_bytes, peak_device_bytes, n_host_allocs, n_streams,
            n_events, n_modules, n_retained, n_copies, n_kernels);
    fclose(f);
}

static alloc_t *find_alloc(uintptr_t p, size_t n)
{
    for (int i = 0; i < MAX_ALLOCS; i++) {
        alloc_t *a = &allocs[i];
        if (a->live && p >= a->p && p + n <= a->p + a->n) return a;
    }
    return NULL;
}

static int dev_of(uintptr_t p, size_t n, int *dev)
{
    alloc_t *a = find_alloc(p, n ? n : 1);
    if (!a) return 0;
    *dev = a->dev;
    return 1;
}

static CUresult new_alloc(void **out, size_t n, int dev)
{
    if (n == 0) return INVALID_VALUE;
    if (dev >= 0 && (dev == FX_OOM_GPU || device_bytes + (long long)n > FX_MEM_BYTES * FX_NMAX))
        return OUT_OF_MEMORY;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocs[i].live) {
            size_t rounded = (n + 255) & ~(size_t)255;
            void *p = aligned_alloc(256, rounded);
            if (!p) return OUT_OF_MEMORY;
            allocs[i] = (alloc_t){(uintptr_t)p, n, dev, 1};
            *out = p;
            if (dev >= 0) {
                n_dev_allocs++;
                device_bytes += (long long)n;
                if (device_bytes > peak_device_bytes) peak_device_bytes = device_bytes;
            } else {
                n_host_allocs++;
            }
            report();
            return OK;
        }
    }
    return OUT_OF_MEMORY;
}

static CUresult free_alloc(uintptr_t p, int want_host)
{
    for (int i = 0; i < MAX_ALLOCS; i++) {
        alloc_t *a = &allocs[i];
        if (a->live && a->p == p && (a->dev < 0) == want_host) {
            a->live = 0;
            free((void *)a->p);
            if (want_host) n_host_allocs--;
            else { n_dev_allocs--; device_bytes -= (long long)a->n; }
            report();
            return sticky ? sticky : OK;
        }
    }
    return INVALID_VALUE;
}

#define NEED_INIT() do { if (!initialised) return NOT_INITIALIZED; } while (0)
#define NEED_CTX() do { NEED_INIT(); if (sticky) return sticky; if (!cur) return INVALID_CONTEXT; } while (0)
#define NEED_DEV(d) do { NEED_INIT(); if ((d) < 0 || (d) >= FX_NDEV) return INVALID_DEVICE; } while (0)

/* ---------------------------------------------------------------- the timing model */

static int peer_enabled(int a, int b) { return ctxs[a].peer[b] || ctxs[b].peer[a]; }

/* ns one operation takes; `conc_host` = streams doing host copies at once, `bidir` = the
 * reverse direction of this peer copy runs in the same batch. */
static double op_ns(const op_t *op, int sdev, int conc_host, int bidir)
{
    double gbps, lat_us;
    int sd = -1, dd = -1;
    if (op->kind == OP_MEMSET) return (double)op->n / FX_LOCAL_CE[sdev];
    dev_of(op->src, op->n, &sd);
    dev_of(op->dst, op->n, &dd);
    if (op->kind == OP_KCOPY) {
        lat_us = 1.0;
        if (sd == sdev && dd == sdev) gbps = FX_LOCAL_SM[sdev];
        else if (dd == sdev && sd >= 0) { gbps = FX_SM_GBPS[sd][sdev]; lat_us = FX_LAT_US[sd][sdev]; }
        else if (sd == sdev && dd >= 0) { gbps = FX_SM_GBPS[sdev][dd]; lat_us = FX_LAT_US[sdev][dd]; }
        else gbps = FX_H2D[sdev];
    } else if (sd < 0 && dd >= 0) {
        gbps = FX_H2D[dd]; lat_us = FX_HOST_LAT_US;
        if (conc_host > 1 && FX_HOST_AGG > 0 && FX_HOST_AGG / conc_host < gbps) gbps = FX_HOST_AGG / conc_host;
    } else if (dd < 0 && sd >= 0) {
        gbps = FX_D2H[sd]; lat_us = FX_HOST_LAT_US;
        if (conc_host > 1 && FX_HOST_AGG > 0 && FX_HOST_AGG / conc_host < gbps) gbps = FX_HOST_AGG / conc_host;
    } else if (sd >= 0 && sd == dd) {
        gbps = FX_LOCAL_CE[sd]; lat_us = 1.0;
    } else if (sd >= 0 && dd >= 0) {
        if (peer_enabled(sd, dd)) {
            gbps = bidir ? FX_BIDIR_GBPS[sd][dd] / 2.0 : FX_CE_GBPS[sd][dd];
            lat_us = FX_LAT_US[sd][dd];
        } else {
            gbps = bidir ? FX_STAGED_BIDIR / 2.0 : FX_STAGED_GBPS;
            lat_us = FX_STAGED_LAT_US;
        }
    } else {
        gbps = 20.0; lat_us = FX_HOST_LAT_US; /* host to host through pinned memory */
    }
    /* A copy takes at least its latency; beyond that the link's rate decides (bytes / (GB/s)
     * = ns).  Back-to-back large copies pipeline their setup, so latency is not added on top. */
    double ns = (double)op->n / gbps;
    return ns > lat_us * 1e3 ? ns : lat_us * 1e3;
}

static void exec_op(stream_t *s, op_t *op, int conc_host, int bidir)
{
    switch (op->kind) {
    case OP_RECORD:
        op->ev->t = s->t; op->ev->pending = 0; op->ev->recorded = 1;
        return;
    case OP_WAIT:
        if (op->ev->t > s->t) s->t = op->ev->t;
        return;
    case OP_SPIN:
        /* released when the host wrote the flag; a spin that times out costs its timeout */
        s->t += 2000.0 + (*(volatile uint32_t *)op->src ? 0.0 : (double)op->n);
        n_kernels++;
        return;
    case OP_MEMSET:
        memset((void *)op->dst, op->value, op->n);
        s->t += op_ns(op, s->dev, conc_host, bidir);
        return;
    case OP_KCOPY:
        n_kernels++;
        if (FX_LAUNCH_FAILURE) { sticky = LAUNCH_FAILED; return; }
        /* fall through: the kernel copies like the copy engine, at the SM rate */
    case OP_COPY: {
        int sd = -2, dd = -2;
        dev_of(op->src, op->n, &sd);
        dev_of(op->dst, op->n, &dd);
        if (op->kind == OP_KCOPY) {
            int remote = (sd >= 0 && sd != s->dev) ? sd : ((dd >= 0 && dd != s->dev) ? dd : -1);
            if (remote >= 0 && !ctxs[s->dev].peer[remote]) { sticky = ILLEGAL_ADDRESS; return; }
        }
        memmove((void *)op->dst, (const void *)op->src, op->n);
        if (sd >= 0 && dd >= 0 && sd != dd && FX_CORRUPT[sd][dd] && op->n > 0)
            ((unsigned char *)op->dst)[op->n / 2] ^= 0x5a; /* the silent P2P corruption fault */
        s->t += op_ns(op, s->dev, conc_host, bidir);
        n_copies++;
        report();
        return;
    }
    }
}

static void enqueue(stream_t *s, op_t op)
{
    if (s->hung) {
        if (op.kind == OP_RECORD) { op.ev->pending = 1; op.ev->recorded = 1; op.ev->stuck_on = s; }
        return;
    }
    if (!s->held) {
        if (s->t < gclock) s->t = gclock;
        exec_op(s, &op, 1, 0);
        return;
    }
    if (s->qlen == s->qcap) {
        s->qcap = s->qcap ? s->qcap * 2 : 64;
        s->q = realloc(s->q, sizeof(op_t) * (size_t)s->qcap);
    }
    s->q[s->qlen++] = op;
}

static int is_host_copy(const op_t *op)
{
    int sd = -2, dd = -2;
    if (op->kind != OP_COPY) return 0;
    dev_of(op->src, op->n, &sd);
    dev_of(op->dst, op->n, &dd);
    return (sd < 0) != (dd < 0);
}

static int reverse_in_batch(const op_t *op)
{
    int sd = -2, dd = -2;
    if (op->kind != OP_COPY && op->kind != OP_KCOPY) return 0;
    dev_of(op->src, op->n, &sd);
    dev_of(op->dst, op->n, &dd);
    if (sd < 0 || dd < 0 || sd == dd) return 0;
    for (int i = 0; i < MAX_STREAMS; i++) {
        stream_t *s = &streams[i];
        if (!s->live || !s->held) continue;
        for (int k = 0; k < s->qlen; k++) {
            int a = -2, b = -2;
            if (s->q[k].kind != op->kind) continue;
            dev_of(s->q[k].src, s->q[k].n, &a);
            dev_of(s->q[k].dst, s->q[k].n, &b);
            if (a == dd && b == sd) return 1;
        }
    }
    return 0;
}

/* Run everything held behind a spin kernel as one concurrent batch. */
static void drain(void)
{
    if (!hold_active) return;
    double t0 = gclock;
    int conc_host = 0;
    for (int i = 0; i < MAX_STREAMS; i++) {
        stream_t *s = &streams[i];
        if (!s->live || !s->held) continue;
        if (s->t > t0) t0 = s->t;
        for (int k = 0; k < s->qlen; k++)
            if (is_host_copy(&s->q[k])) { conc_host++; break; }
    }
    int *heads = calloc(MAX_STREAMS, sizeof(int));
    int *bidir = NULL;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (streams[i].live && streams[i].held) streams[i].t = t0;
    int progress = 1;
    while (progress) {
        progress = 0;
        for (int i = 0; i < MAX_STREAMS; i++) {
            stream_t *s = &streams[i];
            if (!s->live || !s->held) continue;
            while (heads[i] < s->qlen) {
                op_t *op = &s->q[heads[i]];
                if (op->kind == OP_WAIT && op->ev->pending) break;
                exec_op(s, op, conc_host, reverse_in_batch(op));
                heads[i]++;
                progress = 1;
            }
        }
    }
    for (int i = 0; i < MAX_STREAMS; i++) {
        stream_t *s = &streams[i];
        if (!s->live || !s->held) continue;
        for (int k = heads[i]; k < s->qlen; k++) /* a wait that can never be met: skip it */
            if (s->q[k].kind != OP_WAIT) exec_op(s, &s->q[k], conc_host, 0);
        s->qlen = 0;
        s->held = 0;
    }
    free(heads);
    free(bidir);
    hold_active = 0;
}

static void observe(double t) { if (t > gclock) gclock = t; }

/* A stream behind a kernel that never finishes: the real driver blocks in the kernel's wait
 * forever, and so does the fake (a probe must poll cuStreamQuery instead). */
static void block_while_hung(volatile int *hung)
{
    while (*hung) sleep(1);
}

/* ---------------------------------------------------------------- init, devices */

CUresult cuInit(unsigned int flags)
{
    if (flags != 0) return INVALID_VALUE;
    report();
    if (FX_INIT_ERROR) return FX_INIT_ERROR;
    initialised = 1;
    for (int d = 0; d < FX_NMAX; d++) ctxs[d].dev = d;
    report();
    return OK;
}

CUresult cuDriverGetVersion(int *v) { if (!v) return INVALID_VALUE; *v = FX_DRIVER_VERSION; return OK; }
CUresult cuDeviceGetCount(int *n) { NEED_INIT(); if (!n) return INVALID_VALUE; *n = FX_NDEV; return OK; }
CUresult cuDeviceGet(int *d, int ordinal) { NEED_DEV(ordinal); *d = ordinal; return OK; }

CUresult cuDeviceGetName(char *name, int len, int d)
{
    NEED_DEV(d);
    if (!name || len <= 0) return INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", FX_NAME[d]);
    return OK;
}

CUresult cuDeviceGetPCIBusId(char *bus, int len, int d)
{
    NEED_DEV(d);
    if (!bus || len < 13) return INVALID_VALUE;
    /* the real driver answers upper-case hex; the probe must normalise */
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%s", FX_BUS[d]);
    for (char *c = tmp; *c; c++) if (*c >= 'a' && *c <= 'f') *c = (char)(*c - 32);
    snprintf(bus, (size_t)len, "%s", tmp);
    return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int d) { NEED_DEV(d); *bytes = (size_t)FX_MEM_BYTES; return OK; }

CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
    NEED_DEV(d);
    switch (attr) {
    case 1: *v = 1024; break;                     /* max threads per block */
    case 13: *v = FX_CLOCK_KHZ; break;
    case 16: *v = FX_SM_COUNT[d]; break;
    case 19: *v = 1; break;                       /* can map host memory */
    case 40: *v = 2; break;                       /* async engines */
    case 41: *v = 1; break;                       /* unified addressing */
    case 75: *v = FX_CC_MAJOR; break;
    case 76: *v = FX_CC_MINOR; break;
    case 124:                                     /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, cuda.h 11.7+ */
        if (FX_DRIVER_VERSION < 11070) return INVALID_VALUE;
        *v = FX_DMABUF[d]; break;
    default: return INVALID_VALUE;
    }
    return OK;
}

CUresult cuDeviceCanAccessPeer(int *ok, int a, int b)
{
    NEED_DEV(a); NEED_DEV(b);
    *ok = (a != b) && FX_PEER[a][b];
    return OK;
}

CUresult cuDeviceGetP2PAttribute(int *v, int attr, int a, int b)
{
    NEED_DEV(a); NEED_DEV(b);
    if (a == b) return INVALID_DEVICE;
    switch (attr) {
    case 1: *v = FX_RANK[a][b]; break;
    case 2: case 3: case 4: *v = FX_PEER[a][b]; break;
    default: return INVALID_VALUE;
    }
    return OK;
}

CUresult cuGetErrorName(CUresult e, const char **s)
{
    switch (e) {
    case OK: *s = "CUDA_SUCCESS"; return OK;
    case OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return OK;
    case PEER_UNSUPPORTED: *s = "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"; return OK;
    case LAUNCH_FAILED: *s = "CUDA_ERROR_LAUNCH_FAILED"; return OK;
    default: *s = NULL; return INVALID_VALUE; /* the probe carries its own table for the rest */
    }
}

/* ---------------------------------------------------------------- contexts */

CUresult cuDevicePrimaryCtxRetain(void **pctx, int d)
{
    NEED_DEV(d);
    if (d == FX_FAIL_GPU) return FX_FAIL_CODE; /* a GPU that fell off the bus or is unavailable */
    ctxs[d].retained++;
    n_retained++;
    *pctx = &ctxs[d];
    report();
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(int d)
{
    NEED_DEV(d);
    if (ctxs[d].retained <= 0) return INVALID_CONTEXT;
    ctxs[d].retained--;
    n_retained--;
    if (ctxs[d].retained == 0) { memset(ctxs[d].peer, 0, sizeof ctxs[d].peer); ctxs[d].npeers = 0; }
    if (cur == &ctxs[d] && ctxs[d].retained == 0) cur = NULL;
    report();
    return sticky ? sticky : OK;
}

static ctx_t *as_ctx(void *c)
{
    for (int d = 0; d < FX_NDEV; d++) if (c == &ctxs[d] && ctxs[d].retained > 0) return &ctxs[d];
    return NULL;
}

CUresult cuCtxSetCurrent(void *c)
{
    NEED_INIT();
    if (!c) { cur = NULL; return OK; }
    ctx_t *x = as_ctx(c);
    if (!x) return INVALID_CONTEXT;
    cur = x;
    return OK;
}

CUresult cuCtxGetCurrent(void **c) { NEED_INIT(); *c = cur; return OK; }

CUresult cuCtxSynchronize(void)
{
    NEED_INIT();
    if (!cur) return INVALID_CONTEXT;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (streams[i].live && streams[i].dev == cur->dev) block_while_hung(&streams[i].hung);
    drain();
    for (int i = 0; i < MAX_STREAMS; i++)
        if (streams[i].live && streams[i].dev == cur->dev) observe(streams[i].t);
    return sticky;
}

CUresult cuCtxEnablePeerAccess(void *peer, unsigned int flags)
{
    NEED_CTX();
    ctx_t *p = as_ctx(peer);
    if (flags != 0) return INVALID_VALUE;
    if (!p || p == cur) return INVALID_CONTEXT;
    if (!FX_PEER[cur->dev][p->dev]) return PEER_UNSUPPORTED;
    if (cur->peer[p->dev]) return PEER_ALREADY;
    if (FX_MAX_PEERS > 0 && cur->npeers >= FX_MAX_PEERS) return TOO_MANY_PEERS;
    cur->peer[p->dev] = 1;
    cur->npeers++;
    return OK;
}

CUresult cuCtxDisablePeerAccess(void *peer)
{
    NEED_CTX();
    ctx_t *p = as_ctx(peer);
    if (!p) return INVALID_CONTEXT;
    if (!cur->peer[p->dev]) return PEER_NOT_ENABLED;
    cur->peer[p->dev] = 0;
    cur->npeers--;
    return OK;
}

/* ---------------------------------------------------------------- memory */

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    NEED_CTX();
    void *q;
    CUresult r = new_alloc(&q, n, cur->dev);
    if (r == OK) *p = (CUdeviceptr)(uintptr_t)q;
    return r;
}

CUresult cuMemFree_v2(CUdeviceptr p) { NEED_INIT(); return free_alloc((uintptr_t)p, 0); }

CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
    NEED_CTX();
    (void)flags;
    return new_alloc(p, n, -1);
}

CUresult cuMemAllocHost_v2(void **p, size_t n) { return cuMemHostAlloc(p, n, 0); }
CUresult cuMemFreeHost(void *p) { NEED_INIT(); return free_alloc((uintptr_t)p, 1); }

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags)
{
    NEED_CTX();
    if (flags != 0) return INVALID_VALUE;
    alloc_t *a = find_alloc((uintptr_t)p, 1);
    if (!a || a->dev >= 0) return INVALID_VALUE;
    *d = (CUdeviceptr)(uintptr_t)p;
    return OK;
}

CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    NEED_CTX();
    *total = (size_t)FX_MEM_BYTES;
    *free_b = (size_t)FX_MEM_BYTES;
    return OK;
}

static stream_t *as_stream(void *h)
{
    stream_t *s = (stream_t *)h;
    if (s < streams || s >= streams + MAX_STREAMS || !s->live) return NULL;
    return s;
}

static CUresult copy_op(uintptr_t dst, uintptr_t src, size_t n, void *hs)
{
    NEED_CTX();
    stream_t *s = as_stream(hs);
    int d;
    if (!s) return INVALID_HANDLE;
    if (!dev_of(dst, n, &d) || !dev_of(src, n, &d)) return INVALID_VALUE;
    enqueue(s, (op_t){OP_COPY, dst, src, n, 0, NULL, s->dev});
    return OK;
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) { return copy_op(dst, src, n, s); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) { return copy_op(dst, (uintptr_t)src, n, s); }
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) { return copy_op((uintptr_t)dst, src, n, s); }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) { return copy_op(dst, src, n, s); }

CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n, void *s)
{
    int dd, sd;
    NEED_CTX();
    if (!as_ctx(dctx) || !as_ctx(sctx)) return INVALID_CONTEXT;
    if (!dev_of(dst, n, &dd) || dd != ((ctx_t *)dctx)->dev) return INVALID_VALUE;
    if (!dev_of(src, n, &sd) || sd != ((ctx_t *)sctx)->dev) return INVALID_VALUE;
    return copy_op(dst, src, n, s);
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *hs)
{
    NEED_CTX();
    stream_t *s = as_stream(hs);
    int d;
    if (!s) return INVALID_HANDLE;
    if (!dev_of(dst, n, &d)) return INVALID_VALUE;
    enqueue(s, (op_t){OP_MEMSET, dst, 0, n, v, NULL, s->dev});
    return OK;
}

/* ---------------------------------------------------------------- streams and events */

CUresult cuStreamCreate(void **ph, unsigned int flags)
{
    NEED_CTX();
    (void)flags;
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (!streams[i].live) {
            streams[i] = (stream_t){1, cur->dev, gclock, 0, NULL, 0, 0, 0};
            *ph = &streams[i];
            n_streams++;
            report();
            return OK;
        }
    }
    return OUT_OF_MEMORY;
}

CUresult cuStreamDestroy_v2(void *h)
{
    NEED_INIT();
    stream_t *s = as_stream(h);
    if (!s) return INVALID_HANDLE;
    if (s->held) drain();
    free(s->q);
    memset(s, 0, sizeof *s);
    n_streams--;
    report();
    return sticky;
}

CUresult cuStreamQuery(void *h)
{
    NEED_INIT();
    stream_t *s = as_stream(h);
    if (!s) return INVALID_HANDLE;
    if (s->hung || s->held) return NOT_READY;
    return sticky;
}

CUresult cuStreamSynchronize(void *h)
{
    NEED_INIT();
    stream_t *s = as_stream(h);
    if (!s) return INVALID_HANDLE;
    block_while_hung(&s->hung);
    drain();
    observe(s->t);
    return sticky;
}

CUresult cuEventCreate(void **ph, unsigned int flags)
{
    NEED_CTX();
    (void)flags;
    for (int i = 0; i < MAX_EVENTS; i++) {
        if (!events[i].live) {
            events[i] = (event_t){1, 0, 0, 0.0, NULL};
            *ph = &events[i];
            n_events++;
            report();
            return OK;
        }
    }
    return OUT_OF_MEMORY;
}

static event_t *as_event(void *h)
{
    event_t *e = (event_t *)h;
    if (e < events || e >= events + MAX_EVENTS || !e->live) return NULL;
    return e;
}

CUresult cuEventDestroy_v2(void *h)
{
    NEED_INIT();
    event_t *e = as_event(h);
    if (!e) return INVALID_HANDLE;
    e->live = 0;
    n_events--;
    report();
    return sticky;
}

CUresult cuEventRecord(void *he, void *hs)
{
    NEED_CTX();
    event_t *e = as_event(he);
    stream_t *s = as_stream(hs);
    if (!e || !s) return INVALID_HANDLE;
    if (s->held) e->pending = 1;
    enqueue(s, (op_t){OP_RECORD, 0, 0, 0, 0, e, s->dev});
    return OK;
}

CUresult cuStreamWaitEvent(void *hs, void *he, unsigned int flags)
{
    NEED_CTX();
    stream_t *s = as_stream(hs);
    event_t *e = as_event(he);
    if (!e || !s || flags != 0) return INVALID_HANDLE;
    if (e->pending) s->held = 1; /* waiting on held work holds this stream too */
    enqueue(s, (op_t){OP_WAIT, 0, 0, 0, 0, e, s->dev});
    return OK;
}

CUresult cuEventSynchronize(void *he)
{
    NEED_INIT();
    event_t *e = as_event(he);
    if (!e) return INVALID_HANDLE;
    if (e->stuck_on) block_while_hung(&((stream_t *)e->stuck_on)->hung);
    drain();
    observe(e->t);
    return sticky;
}

CUresult cuEventQuery(void *he)
{
    event_t *e = as_event(he);
    if (!e) return INVALID_HANDLE;
    if (e->stuck_on) return NOT_READY;
    if (e->pending) drain();
    return sticky ? sticky : (e->pending ? NOT_READY : OK);
}

CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b)
{
    NEED_INIT();
    event_t *x = as_event(a), *y = as_event(b);
    if (!x || !y || !x->recorded || !y->recorded) return INVALID_HANDLE;
    if (x->pending || y->pending) return NOT_READY;
    *ms = (float)((y->t - x->t) / 1e6);
    return sticky;
}

CUresult cuEventElapsedTime(float *ms, void *a, void *b) { return cuEventElapsedTime_v2(ms, a, b); }

/* ---------------------------------------------------------------- modules and kernels */

static void put_log(unsigned int n, const int *opt, void **val, int which, const char *text)
{
    for (unsigned int i = 0; i + 1 < n; i++) {
        if (opt[i] == which) {
            for (unsigned int k = 0; k < n; k++) {
                if (opt[k] == which + 1) {
                    size_t cap = (size_t)(uintptr_t)val[k];
                    if (cap && val[i]) snprintf((char *)val[i], cap, "%s", text);
                    val[k] = (void *)(uintptr_t)strlen(text);
                }
            }
        }
    }
}

CUresult cuModuleLoadDataEx(void **pm, const void *image, unsigned int n, int *opt, void **val)
{
    NEED_CTX();
    const char *ptx = (const char *)image;
    const char *v = ptx ? strstr(ptx, ".version ") : NULL;
    if (!v || !strstr(ptx, ".entry fp_spin") || !strstr(ptx, ".entry fp_copy")) {
        put_log(n, opt, val, 5, "ptxas fatal: fake JIT expects the probe's fp_spin/fp_copy module");
        return 218; /* INVALID_PTX */
    }
    int major = atoi(v + 9), minor = 0;
    const char *dot = strchr(v + 9, '.');
    if (dot) minor = atoi(dot + 1);
    if (major * 10 + minor > FX_PTX_MAX) {
        char msg[160];
        snprintf(msg, sizeof msg, "ptxas application ptx input, line 1; fatal : Unsupported .version %d.%d; current version is '%d.%d'",
                 major, minor, FX_PTX_MAX / 10, FX_PTX_MAX % 10);
        put_log(n, opt, val, 5, msg);
        return UNSUPPORTED_PTX;
    }
    for (int i = 0; i < MAX_MODULES; i++) {
        if (!modules[i].live) {
            modules[i] = (module_t){1, cur->dev};
            funcs[i][0] = (func_t){OP_SPIN, &modules[i]};
            funcs[i][1] = (func_t){OP_KCOPY, &modules[i]};
            *pm = &modules[i];
            n_modules++;
            put_log(n, opt, val, 3, "fake JIT: 2 entries");
            report();
            return OK;
        }
    }
    return OUT_OF_MEMORY;
}

CUresult cuModuleLoadData(void **pm, const void *image) { return cuModuleLoadDataEx(pm, image, 0, NULL, NULL); }

static int module_index(void *m)
{
    module_t *x = (module_t *)m;
    if (x < modules || x >= modules + MAX_MODULES || !x->live) return -1;
    return (int)(x - modules);
}

CUresult cuModuleGetFunction(void **pf, void *m, const char *name)
{
    NEED_CTX();
    int i = module_index(m);
    if (i < 0) return INVALID_HANDLE;
    if (strcmp(name, "fp_spin") == 0) *pf = &funcs[i][0];
    else if (strcmp(name, "fp_copy") == 0) *pf = &funcs[i][1];
    else return NOT_FOUND;
    return OK;
}

CUresult cuModuleUnload(void *m)
{
    NEED_INIT();
    int i = module_index(m);
    if (i < 0) return INVALID_HANDLE;
    modules[i].live = 0;
    n_modules--;
    report();
    return sticky;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, void *hs, void **params, void **extra)
{
    NEED_CTX();
    func_t *fn = (func_t *)f;
    stream_t *s = as_stream(hs);
    (void)shmem;
    if (!fn || !fn->mod || !fn->mod->live) return INVALID_HANDLE;
    if (!s || s->dev != fn->mod->dev) return INVALID_HANDLE;
    if (!params || extra) return INVALID_VALUE;
    if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return INVALID_VALUE;
    if (fn->kind == OP_SPIN) {
        uint64_t flag = *(uint64_t *)params[0], timeout = *(uint64_t *)params[1];
        int d;
        if (!dev_of((uintptr_t)flag, 4, &d) || d >= 0) return INVALID_VALUE;
        s->held = 1;
        hold_active = 1;
        hold_flag = (uintptr_t)flag;
        hold_timeout = (double)timeout;
        enqueue(s, (op_t){OP_SPIN, 0, (uintptr_t)flag, (size_t)timeout, 0, NULL, s->dev});
        return OK;
    }
    uint64_t dst = *(uint64_t *)params[0], src = *(uint64_t *)params[1], n = *(uint64_t *)params[2];
    int d;
    if (!dev_of((uintptr_t)dst, (size_t)n * 16, &d) || !dev_of((uintptr_t)src, (size_t)n * 16, &d))
        return INVALID_VALUE;
    enqueue(s, (op_t){OP_KCOPY, (uintptr_t)dst, (uintptr_t)src, (size_t)n * 16, 0, NULL, s->dev});
    return OK;
}

/* ---------------------------------------------------------------- NVML subset (busy guard) */

static int nvml_handles[FX_NMAX];

int nvmlInit_v2(void) { return FX_INIT_ERROR == NO_DEVICE ? 0 : (FX_INIT_ERROR ? 9 : 0); }
int nvmlShutdown(void) { return 0; }

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **h)
{
    for (int d = 0; d < FX_NDEV; d++) {
        if (strcasecmp(bus, FX_BUS[d]) == 0) { nvml_handles[d] = d; *h = &nvml_handles[d]; return 0; }
    }
    return 6; /* NVML_ERROR_NOT_FOUND */
}

int nvmlDeviceGetMigMode(void *h, unsigned int *current, unsigned int *pending)
{
    int d = (int)((int *)h - nvml_handles);
    if (d < 0 || d >= FX_NDEV || !current || !pending) return 2;
    if (FX_MIG < 0) return 3; /* NVML_ERROR_NOT_SUPPORTED: a GPU without MIG */
    *current = *pending = (unsigned int)FX_MIG;
    return 0;
}

int nvmlDeviceGetVirtualizationMode(void *h, unsigned int *mode)
{
    int d = (int)((int *)h - nvml_handles);
    if (d < 0 || d >= FX_NDEV || !mode) return 2;
    *mode = (unsigned int)FX_VIRT_MODE;
    return 0;
}

typedef struct { unsigned int pid; unsigned long long mem; unsigned int gi, ci; } nvml_proc_t;

int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned int *count, nvml_proc_t *infos)
{
    int d = (int)((int *)h - nvml_handles);
    if (d < 0 || d >= FX_NDEV || !count) return 2; /* INVALID_ARGUMENT */
    unsigned int have = FX_BUSY[d] ? 1u : 0u;
    if (*count < have) { *count = have; return 7; } /* INSUFFICIENT_SIZE */
    if (have && infos) infos[0] = (nvml_proc_t){4242u + (unsigned)d, 1ull << 30, 0xffffffffu, 0xffffffffu};
    *count = have;
    return 0;
}

int nvmlDeviceGetP2PStatus(void *h1, void *h2, int idx, int *status)
{
    int a = (int)((int *)h1 - nvml_handles), b = (int)((int *)h2 - nvml_handles);
    if (a < 0 || a >= FX_NDEV || b < 0 || b >= FX_NDEV || !status) return 2;
    if (idx == 2) *status = FX_NVLINK[a][b] ? 0 : 5; /* NVLINK: OK or NOT_SUPPORTED */
    else *status = FX_PEER[a][b] ? 0 : 5;
    return 0;
}

/* What the p2p probe reads while it loads a GPU: the SM clock (NVML_CLOCK_SM = 1), the power draw
 * in mW and the GPU temperature (NVML_TEMPERATURE_GPU = 0), from the fixture's load_* figures. */
int nvmlDeviceGetClockInfo(void *h, int type, unsigned int *mhz)
{
    int d = (int)((int *)h - nvml_handles);
    if (d < 0 || d >= FX_NDEV || !mhz) return 2;
    if (type != 1) return 3;
    *mhz = FX_LOAD_CLOCK[d];
    return 0;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned int *mw)
{
    int d = (int)((int *)h - nvml_handles);
    if (d < 0 || d >= FX_NDEV || !mw) return 2;
    *mw = FX_LOAD_POWER_MW[d];
    return 0;
}

int nvmlDeviceGetTemperature(void *h, int sensor, unsigned int *c)
{
    int d = (int)((int *)h - nvml_handles);
    if (d < 0 || d >= FX_NDEV || !c) return 2;
    if (sensor != 0) return 3;
    *c = FX_LOAD_TEMP[d];
    return 0;
}

/* ---------------------------------------------------------------- for the fake libnccl.so.2 only */

/* The device a pointer's allocation lives on (>= 0), -1 pinned host memory, -2 not allocated. */
int fakecuda_ptr_device(const void *p, size_t n)
{
    int d;
    return dev_of((uintptr_t)p, n, &d) ? d : -2;
}

/* The device of the current context (what cudaGetDevice answers), -1 without one. */
int fakecuda_current_device(void) { return cur ? (int)(cur - ctxs) : -1; }

int fakecuda_stream_device(void *h)
{
    stream_t *s = as_stream(h);
    return s ? s->dev : -1;
}

/* One collective over n streams, as NCCL's kernels run it: every rank starts when the last one
 * arrives and all finish `ns` later; with `hang` they never finish (the stream stays not-ready
 * and work queued behind it never runs) until fakecuda_release() - what ncclCommAbort does. */
int fakecuda_collective(void **hs, int n, double ns, int hang)
{
    double t0 = gclock;
    for (int i = 0; i < n; i++) {
        stream_t *s = as_stream(hs[i]);
        if (!s || s->held) return INVALID_HANDLE;
        if (s->t > t0) t0 = s->t;
    }
    for (int i = 0; i < n; i++) {
        stream_t *s = as_stream(hs[i]);
        if (s->hung) continue;
        s->t = t0 + ns;
        if (hang) s->hung = 1;
    }
    n_kernels += n;
    report();
    return OK;
}

void fakecuda_release(void *h)
{
    stream_t *s = as_stream(h);
    if (!s || !s->hung) return;
    s->hung = 0;
    for (int i = 0; i < MAX_EVENTS; i++) {
        if (events[i].live && events[i].stuck_on == s) {
            events[i].stuck_on = NULL;
            events[i].pending = 0;
            events[i].t = s->t;
        }
    }
}
