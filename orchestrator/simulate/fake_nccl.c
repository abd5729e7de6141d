/* A fake libnccl.so.2 for tests and the demo: the NCCL API subset the nccl probe calls, driven by
 * the `nccl` mapping of one fixture machine (compiled in from a generated header, fake_nccl.py).
 *
 * It runs on top of the fake libcuda.so.1 (fake_cuda.c) as the real NCCL runs on the driver: it
 * dlopens "libcuda.so.1" (the loader hands back the fake the probe already loaded, matched by its
 * soname), retains each device's primary context, allocates its own device buffers there and
 * releases both on destroy/abort, so the fake libcuda's accounting proves a probe cleaned up.
 * What is real: names, signatures and return codes of the NCCL API; collectives really reduce
 * the ranks' buffers (device memory is host memory in the fake); NCCL_DEBUG/NCCL_DEBUG_FILE
 * (%h, %p) and the NCCL_CONF_FILE / ~/.nccl.conf / /etc/nccl.conf loading rules; the transport
 * choice follows CUDA peer access and NCCL_P2P_DISABLE / NCCL_SHM_DISABLE / NCCL_NVLS_ENABLE.
 * What is modelled: time (each collective advances the ranks' stream clocks by latency + bus
 * bytes / bus bandwidth, through fakecuda_collective) and faults: wrong data on one rank, an
 * error code from one call, a hang (streams never complete until ncclCommAbort), an async error,
 * NCCL chatter on stdout, and old versions that lack newer symbols.
 * Counts are written (JSON) to $FAKE_NCCL_REPORT after every change: probes leave with _exit().
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include FAKE_NCCL_FIXTURE /* generated: FXN_* constants */

typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7
} ncclResult_t;
typedef enum { ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
               ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
enum { COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCESCATTER };
enum { T_P2P, T_SHM, T_NET, T_NVLS };

/* ---------------------------------------------------------------- libcuda, as NCCL loads it */

static struct {
    int ok;
    int (*CtxGetCurrent)(void **);
    int (*CtxSetCurrent)(void *);
    int (*PrimaryCtxRetain)(void **, int);
    int (*PrimaryCtxRelease)(int);
    int (*MemAlloc)(uint64_t *, size_t);
    int (*MemFree)(uint64_t);
    int (*DeviceGetCount)(int *);
    int (*CanAccessPeer)(int *, int, int);
    int (*GetPCIBusId)(char *, int, int);
    int (*ptr_device)(const void *, size_t);
    int (*stream_device)(void *);
    int (*collective)(void **, int, double, int);
    void (*release)(void *);
} cu;

static int load_cuda(void)
{
    if (cu.ok) return 1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) return 0;
#define SYM(field, name) do { *(void **)&cu.field = dlsym(h, name); if (!cu.field) return 0; } while (0)
    SYM(CtxGetCurrent, "cuCtxGetCurrent");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(MemFree, "cuMemFree_v2");
    SYM(DeviceGetCount, "cuDeviceGetCount");
    SYM(CanAccessPeer, "cuDeviceCanAccessPeer");
    SYM(GetPCIBusId, "cuDeviceGetPCIBusId");
    SYM(ptr_device, "fakecuda_ptr_device");
    SYM(stream_device, "fakecuda_stream_device");
    SYM(collective, "fakecuda_collective");
    SYM(release, "fakecuda_release");
#undef SYM
    cu.ok = 1;
    return 1;
}

/* ---------------------------------------------------------------- environment and debug log */

static int env_done;
static int debug_level; /* 0 none, 1 VERSION, 2 WARN, 3 INFO, 4 TRACE */
static FILE *debug_file;
static char last_error[1024];

static void set_env_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (line[0] == '#') continue;
        if (n && line[n - 1] == '\n') line[--n] = '\0';
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        setenv(line, eq + 1, 0); /* the environment wins over the files, as in NCCL */
    }
    fclose(f);
}

static void init_env(void)
{
    if (env_done) return;
    env_done = 1;
    const char *conf = getenv("NCCL_CONF_FILE");
    char path[1024];
    if (conf && *conf) {
        set_env_file(conf);
    } else {
        struct passwd *pw = getpwuid(getuid());
        if (pw && pw->pw_dir) {
            snprintf(path, sizeof path, "%s/.nccl.conf", pw->pw_dir);
            set_env_file(path);
        }
    }
    set_env_file("/etc/nccl.conf");
    const char *lvl = getenv("NCCL_DEBUG");
    if (lvl && *lvl) {
        if (!strcasecmp(lvl, "VERSION")) debug_level = 1;
        else if (!strcasecmp(lvl, "WARN")) debug_level = 2;
        else if (!strcasecmp(lvl, "INFO")) debug_level = 3;
        else if (!strcasecmp(lvl, "TRACE")) debug_level = 4;
    }
    debug_file = stdout; /* NCCL's default: its log goes to stdout */
    const char *file = getenv("NCCL_DEBUG_FILE");
    if (debug_level && file && *file) {
        char name[1024], host[256];
        size_t o = 0;
        gethostname(host, sizeof host);
        host[sizeof host - 1] = '\0';
        for (const char *c = file; *c && o + 32 < sizeof name; c++) {
            if (c[0] == '%' && c[1] == 'h') { o += (size_t)snprintf(name + o, sizeof name - o, "%s", host); c++; }
            else if (c[0] == '%' && c[1] == 'p') { o += (size_t)snprintf(name + o, sizeof name - o, "%d", (int)getpid()); c++; }
            else name[o++] = *c;
        }
        name[o] = '\0';
        FILE *f = fopen(name, "w");
        if (f) { setvbuf(f, NULL, _IONBF, 0); debug_file = f; }
    }
}

static void logline(int level, int dev, const char *fmt, ...)
{
    char msg[768], host[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level == 2) snprintf(last_error, sizeof last_error, "%s", msg);
    if (level > debug_level || !debug_file) return;
    /* FAKE_NCCL_HOST / FAKE_NCCL_PID: the demo recorder's stand-ins, so recordings do not differ by
     * the recording machine's name and process ids */
    const char *fh = getenv("FAKE_NCCL_HOST"), *fp = getenv("FAKE_NCCL_PID");
    if (fh && *fh) snprintf(host, sizeof host, "%s", fh);
    else gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    long pid = fp && *fp ? atol(fp) : (long)getpid(), tid = fp && *fp ? atol(fp) : (long)syscall(SYS_gettid);
    fprintf(debug_file, "%s:%ld:%ld [%d] NCCL %s %s\n", host, pid, tid, dev, level == 2 ? "WARN" : "INFO", msg);
}
#define INFO(dev, ...) logline(3, dev, __VA_ARGS__)
#define WARN(dev, ...) logline(2, dev, __VA_ARGS__)

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : dflt; /* empty means unset, as NCCL's parameter loader reads it */
}

/* ---------------------------------------------------------------- communicators */

#define MAX_COMMS 64
#define MAX_OPS 256
#define MAX_STREAMS_PER_COMM 8
typedef struct {
    int kind; const void *send; void *recv; size_t count; int dtype, redop; void *stream;
} op_t;
struct ncclComm {
    int live, rank, nranks, dev, clique, transport, channels;
    void *ctx; uint64_t ibuf;
    op_t q[MAX_OPS]; int qhead, qlen;
    void *streams[MAX_STREAMS_PER_COMM]; int nstreams;
    int async_error, hung;
};
typedef struct ncclComm *ncclComm_t;
static struct ncclComm comms[MAX_COMMS];
static int next_clique = 1, group_depth, n_comms, n_internal, n_collectives, n_hung, n_aborted, n_destroyed;

static void report(void)
{
    const char *path = getenv("FAKE_NCCL_REPORT");
    if (!path || !*path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"machine\": \"%s\", \"version\": %d, \"comms\": %d, \"internal_allocs\": %d, "
               "\"collectives\": %d, \"hung\": %d, \"aborted\": %d, \"destroyed\": %d}\n",
            FXN_MACHINE, FXN_VERSION, n_comms, n_internal, n_collectives, n_hung, n_aborted, n_destroyed);
    fclose(f);
}

static int live_comm(ncclComm_t c) { return c && c >= comms && c < comms + MAX_COMMS && c->live; }

ncclResult_t ncclGetVersion(int *version)
{
    if (!version) return ncclInvalidArgument;
    *version = FXN_VERSION;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

#if FXN_VNUM >= 21300
const char *ncclGetLastError(ncclComm_t comm) { (void)comm; return last_error; }
#endif

static void free_comm(ncclComm_t c)
{
    void *prev = NULL;
    cu.CtxGetCurrent(&prev);
    if (c->ibuf) {
        cu.CtxSetCurrent(c->ctx);
        cu.MemFree(c->ibuf);
        n_internal--;
        c->ibuf = 0;
    }
    cu.CtxSetCurrent(prev); /* the caller's context: it holds its own retain on it */
    cu.PrimaryCtxRelease(c->dev);
    c->live = 0;
    n_comms--;
}

static int pick_transport(int ndev, const int *devs, int *channels)
{
    int p2p_ok = 1;
    for (int i = 0; i < ndev && ndev > 1; i++) {
        int ok = 0;
        cu.CanAccessPeer(&ok, devs[i], devs[(i + 1) % ndev]);
        if (!ok) p2p_ok = 0;
    }
    if (env_int("NCCL_P2P_DISABLE", 0)) p2p_ok = 0;
    int t;
    if (!p2p_ok) {
        t = env_int("NCCL_SHM_DISABLE", 0) ? T_NET : T_SHM;
        *channels = FXN_SHM_CHANNELS;
    } else if (FXN_TRANSPORT == T_NVLS && (ndev < 2 || !env_int("NCCL_NVLS_ENABLE", 1))) {
        t = T_P2P;
        *channels = FXN_CHANNELS;
    } else {
        t = FXN_TRANSPORT;
        *channels = FXN_CHANNELS;
    }
    return t;
}

static const char *via(int t)
{
    switch (t) {
    case T_SHM: return "SHM/direct/direct";
    case T_NET: return "NET/Socket/0";
    default: return "P2P/CUMEM";
    }
}

ncclResult_t ncclCommInitAll(ncclComm_t *out, int ndev, const int *devlist)
{
    init_env();
    if (FXN_STDOUT) {
        printf("[fake-plugin] NCCL net plugin: loaded libnccl-net.so (version %s)\n", FXN_VERSION_STR);
    }
    if (!out || ndev <= 0 || ndev > MAX_COMMS) { WARN(0, "Invalid ndev %d", ndev); return ncclInvalidArgument; }
    if (!load_cuda()) { WARN(0, "Failed to open libcuda.so.1"); return ncclUnhandledCudaError; }
    int count = 0, devs[MAX_COMMS];
    cu.DeviceGetCount(&count);
    for (int i = 0; i < ndev; i++) {
        devs[i] = devlist ? devlist[i] : i;
        if (devs[i] < 0 || devs[i] >= count) {
            WARN(devs[i], "Invalid device %d (%d devices visible)", devs[i], count);
            return ncclInvalidArgument;
        }
        for (int k = 0; k < i; k++)
            if (devs[k] == devs[i]) { WARN(devs[i], "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", k, i, devs[i]); return ncclInvalidUsage; }
    }
    INFO(devs[0], "NCCL version %s+cuda12.2", FXN_VERSION_STR);
    if (FXN_ERROR_CALL == 1) {
        WARN(devs[0], "init.cc:1200 Cuda failure 'fake fixture: injected init failure'");
        return (ncclResult_t)FXN_ERROR_CODE;
    }
    static const char *watched[] = {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_ALGO",
                                    "NCCL_PROTO", "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_MIN_NCHANNELS",
                                    "NCCL_MAX_NCHANNELS", NULL};
    for (int i = 0; watched[i]; i++) {
        const char *v = getenv(watched[i]);
        if (v && *v) INFO(devs[0], "%s set by environment to %s.", watched[i], v);
    }
    int channels = 1;
    int t = pick_transport(ndev, devs, &channels);
    int clique = next_clique++;
    void *prev = NULL;
    cu.CtxGetCurrent(&prev);
    int made = 0;
    for (int r = 0; r < ndev; r++) {
        ncclComm_t c = NULL;
        for (int i = 0; i < MAX_COMMS; i++) if (!comms[i].live) { c = &comms[i]; break; }
        int rc = c ? cu.PrimaryCtxRetain(&c->ctx, devs[r]) : 2;
        if (rc == 0) {
            cu.CtxSetCurrent(c->ctx);
            rc = cu.MemAlloc(&c->ibuf, (size_t)channels * 65536);
            if (rc != 0) { c->ibuf = 0; cu.PrimaryCtxRelease(devs[r]); }
        }
        if (rc != 0) {
            WARN(devs[r], "init.cc:1300 Cuda failure %d on device %d", rc, devs[r]);
            for (int k = 0; k < made; k++) free_comm(out[k]);
            cu.CtxSetCurrent(prev);
            report();
            return ncclUnhandledCudaError;
        }
        memset(c->q, 0, sizeof c->q);
        c->live = 1; c->rank = r; c->nranks = ndev; c->dev = devs[r]; c->clique = clique;
        c->transport = t; c->channels = channels; c->qhead = c->qlen = 0; c->nstreams = 0; c->async_error = 0; c->hung = 0;
        n_comms++; n_internal++;
        out[r] = c;
        made++;
    }
    cu.CtxSetCurrent(prev);
    for (int r = 0; r < ndev; r++) {
        char bus[32] = "";
        cu.GetPCIBusId(bus, sizeof bus, devs[r]);
        if (ndev > 1 && t != T_NVLS) {
            for (int ch = 0; ch < channels; ch++)
                INFO(devs[r], "Channel %02d/0 : %d[%d] -> %d[%d] via %s", ch, r, devs[r], (r + 1) % ndev,
                     devs[(r + 1) % ndev], via(t));
        }
        if (t == T_NVLS) INFO(devs[r], "Connected NVLS tree");
        INFO(devs[r], "%d coll channels, 0 collnet channels, %d nvls channels, %d p2p channels, 1 p2p channels per peer",
             channels, t == T_NVLS ? FXN_NVLS_CHANNELS : 0, channels);
        INFO(devs[r], "comm 0x%lx rank %d nranks %d cudaDev %d nvmlDev %d busId %s commId 0x%x - Init COMPLETE",
             0x55e0c0de0000ul + 0x1000ul * (unsigned long)(out[r] - comms), r, ndev, devs[r], devs[r], bus, 0x5eed0000u + (unsigned)clique);
    }
    report();
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!live_comm(c)) return ncclInvalidArgument;
    while (c->hung) sleep(1); /* the real destroy waits for kernels that never end: only abort helps */
    INFO(c->dev, "comm 0x%lx rank %d nranks %d cudaDev %d - Destroy COMPLETE", 0x55e0c0de0000ul + 0x1000ul * (unsigned long)(c - comms),
         c->rank, c->nranks, c->dev);
    free_comm(c);
    n_destroyed++;
    report();
    return ncclSuccess;
}

#if FXN_VNUM >= 21400
ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    if (!live_comm(c)) return ncclInvalidArgument;
    while (c->hung) sleep(1);
    return ncclSuccess;
}
#endif

#if FXN_VNUM >= 20400
ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!live_comm(c)) return ncclInvalidArgument;
    for (int i = 0; i < c->nstreams; i++) cu.release(c->streams[i]); /* the kernels are told to quit */
    INFO(c->dev, "comm 0x%lx rank %d nranks %d cudaDev %d - Abort COMPLETE", 0x55e0c0de0000ul + 0x1000ul * (unsigned long)(c - comms),
         c->rank, c->nranks, c->dev);
    free_comm(c);
    n_aborted++;
    report();
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
    if (!live_comm(c) || !err) return ncclInvalidArgument;
    *err = (ncclResult_t)c->async_error;
    return ncclSuccess;
}
#endif

ncclResult_t ncclCommCount(const ncclComm_t c, int *n) { if (!live_comm(c) || !n) return ncclInvalidArgument; *n = c->nranks; return ncclSuccess; }
ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *d) { if (!live_comm(c) || !d) return ncclInvalidArgument; *d = c->dev; return ncclSuccess; }
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) { if (!live_comm(c) || !r) return ncclInvalidArgument; *r = c->rank; return ncclSuccess; }

/* ---------------------------------------------------------------- collectives */

static size_t dtype_size(int t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0; /* half types: not modelled by the fake */
    }
}

#define REDUCE(T) do { \
    T *o = (T *)out; const T *x = (const T *)in; \
    for (size_t i = 0; i < n; i++) { \
        switch (redop) { \
        case ncclSum: case ncclAvg: o[i] = (T)(o[i] + x[i]); break; \
        case ncclProd: o[i] = (T)(o[i] * x[i]); break; \
        case ncclMax: if (x[i] > o[i]) o[i] = x[i]; break; \
        case ncclMin: if (x[i] < o[i]) o[i] = x[i]; break; \
        } \
    } } while (0)
#define DIVIDE(T) do { T *o = (T *)out; for (size_t i = 0; i < n; i++) o[i] = (T)(o[i] / (T)nranks); } while (0)

static void reduce_into(void *out, const void *in, size_t n, int dtype, int redop)
{
    switch (dtype) {
    case ncclInt8: REDUCE(int8_t); break;
    case ncclUint8: REDUCE(uint8_t); break;
    case ncclInt32: REDUCE(int32_t); break;
    case ncclUint32: REDUCE(uint32_t); break;
    case ncclInt64: REDUCE(int64_t); break;
    case ncclUint64: REDUCE(uint64_t); break;
    case ncclFloat32: REDUCE(float); break;
    case ncclFloat64: REDUCE(double); break;
    }
}

static void average(void *out, size_t n, int dtype, int nranks)
{
    switch (dtype) {
    case ncclInt8: DIVIDE(int8_t); break;
    case ncclUint8: DIVIDE(uint8_t); break;
    case ncclInt32: DIVIDE(int32_t); break;
    case ncclUint32: DIVIDE(uint32_t); break;
    case ncclInt64: DIVIDE(int64_t); break;
    case ncclUint64: DIVIDE(uint64_t); break;
    case ncclFloat32: DIVIDE(float); break;
    case ncclFloat64: DIVIDE(double); break;
    }
}

static double busbw_for(int t)
{
    switch (t) {
    case T_SHM: return FXN_SHM_BUSBW;
    case T_NET: return FXN_NET_BUSBW;
    case T_P2P: return FXN_TRANSPORT == T_NVLS ? FXN_P2P_BUSBW : FXN_BUSBW;
    default: return FXN_BUSBW;
    }
}

static void remember_stream(ncclComm_t c, void *s)
{
    for (int i = 0; i < c->nstreams; i++) if (c->streams[i] == s) return;
    if (c->nstreams < MAX_STREAMS_PER_COMM) c->streams[c->nstreams++] = s;
}

/* Run the head op of every rank of one clique (all present); returns an NCCL result. */
static ncclResult_t run_clique(ncclComm_t *ranks, int n)
{
    op_t *ops[MAX_COMMS];
    for (int r = 0; r < n; r++) ops[r] = &ranks[r]->q[ranks[r]->qhead];
    op_t *o0 = ops[0];
    size_t es = dtype_size(o0->dtype);
    for (int r = 1; r < n; r++) {
        if (ops[r]->kind != o0->kind || ops[r]->count != o0->count || ops[r]->dtype != o0->dtype || ops[r]->redop != o0->redop) {
            WARN(ranks[r]->dev, "enqueue.cc:1800 Mismatched collective between ranks 0 and %d", r);
            return ncclInvalidUsage;
        }
    }
    size_t in_n = o0->count, out_n = o0->count; /* elements per rank */
    if (o0->kind == COLL_ALLGATHER) out_n = o0->count * (size_t)n;
    if (o0->kind == COLL_REDUCESCATTER) in_n = o0->count * (size_t)n;
    size_t in_b = in_n * es, out_b = out_n * es;
    unsigned char *tmp = malloc(out_b ? out_b : 1);
    if (!tmp) return ncclSystemError;
    if (o0->kind == COLL_ALLREDUCE) {
        memcpy(tmp, ops[0]->send, in_b);
        for (int r = 1; r < n; r++) reduce_into(tmp, ops[r]->send, in_n, o0->dtype, o0->redop);
        if (o0->redop == ncclAvg) average(tmp, in_n, o0->dtype, n);
        for (int r = 0; r < n; r++) memcpy(ops[r]->recv, tmp, out_b);
    } else if (o0->kind == COLL_ALLGATHER) {
        for (int r = 0; r < n; r++) memcpy(tmp + (size_t)r * in_b, ops[r]->send, in_b);
        for (int r = 0; r < n; r++) memcpy(ops[r]->recv, tmp, out_b);
    } else {
        unsigned char *acc = malloc(in_b ? in_b : 1);
        if (!acc) { free(tmp); return ncclSystemError; }
        memcpy(acc, ops[0]->send, in_b);
        for (int r = 1; r < n; r++) reduce_into(acc, ops[r]->send, in_n, o0->dtype, o0->redop);
        if (o0->redop == ncclAvg) average(acc, in_n, o0->dtype, n);
        for (int r = 0; r < n; r++) memcpy(ops[r]->recv, acc + (size_t)r * out_b, out_b);
        free(acc);
    }
    free(tmp);
    if (FXN_WRONG_RANK >= 0 && FXN_WRONG_RANK < n && out_b >= es) {
        unsigned char *p = (unsigned char *)ops[FXN_WRONG_RANK]->recv;
        p[(out_n / 2) * es] ^= 0x5a; /* one element of one rank's result is wrong */
    }
    /* bytes on the bus per rank, as nccl-tests' busbw counts them */
    double nb = (double)n;
    double bytes = (double)(o0->kind == COLL_ALLREDUCE ? in_b : (o0->kind == COLL_ALLGATHER ? out_b : in_b));
    double factor = n > 1 ? (o0->kind == COLL_ALLREDUCE ? 2.0 * (nb - 1) / nb : (nb - 1) / nb) : 0.0;
    double bw = busbw_for(ranks[0]->transport);
    double eff = bw * bytes / (bytes + FXN_HALF_BYTES); /* small messages do not fill the links */
    double ns = FXN_LAT_US * 1e3 + (n > 1 ? (eff > 0 ? bytes * factor / eff : 0.0) : bytes / 1000.0);
    int hang = (FXN_HANG || FXN_ASYNC_ERROR) && n_collectives >= FXN_HANG_AFTER;
    void *streams[MAX_COMMS];
    for (int r = 0; r < n; r++) streams[r] = ops[r]->stream;
    if (cu.collective(streams, n, ns, hang) != 0) return ncclUnhandledCudaError;
    n_collectives++;
    if (hang) {
        n_hung++;
        for (int r = 0; r < n; r++) { ranks[r]->hung = 1; ranks[r]->async_error = FXN_ASYNC_ERROR; }
        if (FXN_ASYNC_ERROR) WARN(ranks[0]->dev, "transport/net_socket.cc:500 Net : Connection closed by remote peer");
    }
    for (int r = 0; r < n; r++) { ranks[r]->qhead = (ranks[r]->qhead + 1) % MAX_OPS; ranks[r]->qlen--; }
    if (FXN_STDOUT) printf("NCCL fake: collective %d done\n", n_collectives);
    report();
    return ncclSuccess;
}

static ncclResult_t progress(void)
{
    for (int i = 0; i < MAX_COMMS; i++) {
        if (!comms[i].live || comms[i].rank != 0) continue;
        ncclComm_t ranks[MAX_COMMS];
        int n = comms[i].nranks, found = 0;
        for (int k = 0; k < MAX_COMMS; k++)
            if (comms[k].live && comms[k].clique == comms[i].clique) { ranks[comms[k].rank] = &comms[k]; found++; }
        if (found != n) continue;
        for (;;) {
            int ready = 1;
            for (int r = 0; r < n; r++) if (ranks[r]->qlen == 0) ready = 0;
            if (!ready) break;
            ncclResult_t rc = run_clique(ranks, n);
            if (rc != ncclSuccess) return rc;
        }
    }
    return ncclSuccess;
}

static ncclResult_t enqueue(int kind, const void *send, void *recv, size_t count, int dtype, int redop,
                            ncclComm_t c, void *stream)
{
    if (!live_comm(c)) return ncclInvalidArgument;
    size_t es = dtype_size(dtype);
    if (!es) { WARN(c->dev, "enqueue.cc:1500 Invalid or unsupported datatype %d", dtype); return ncclInvalidArgument; }
    if (redop < ncclSum || redop > ncclAvg) { WARN(c->dev, "Invalid reduction operation %d", redop); return ncclInvalidArgument; }
    size_t in_b = count * es * (kind == COLL_REDUCESCATTER ? (size_t)c->nranks : 1);
    size_t out_b = count * es * (kind == COLL_ALLGATHER ? (size_t)c->nranks : 1);
    if (count && (cu.ptr_device(send, in_b) != c->dev || cu.ptr_device(recv, out_b) != c->dev)) {
        WARN(c->dev, "enqueue.cc:1520 Invalid buffer pointer: not device memory of CUDA device %d", c->dev);
        return ncclInvalidArgument;
    }
    if (cu.stream_device(stream) != c->dev) {
        WARN(c->dev, "enqueue.cc:1530 Stream does not belong to the communicator's device %d", c->dev);
        return ncclInvalidUsage;
    }
    if (FXN_ERROR_CALL == 2 && kind == COLL_ALLREDUCE) {
        WARN(c->dev, "enqueue.cc:1600 Cuda failure 'fake fixture: injected all_reduce failure'");
        return (ncclResult_t)FXN_ERROR_CODE;
    }
    if (c->qlen == MAX_OPS) return ncclInternalError;
    c->q[(c->qhead + c->qlen) % MAX_OPS] = (op_t){kind, send, recv, count, dtype, redop, stream};
    c->qlen++;
    remember_stream(c, stream);
    return group_depth ? ncclSuccess : progress();
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, void *stream)
{
    return enqueue(COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, void *stream)
{
    return enqueue(COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, void *stream)
{
    return enqueue(COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0) { WARN(0, "group.cc:400 ncclGroupEnd: not in a group call."); return ncclInvalidUsage; }
    if (--group_depth) return ncclSuccess;
    if (FXN_ERROR_CALL == 3) {
        WARN(0, "group.cc:450 fake fixture: injected group launch failure");
        return (ncclResult_t)FXN_ERROR_CODE;
    }
    return progress();
}
