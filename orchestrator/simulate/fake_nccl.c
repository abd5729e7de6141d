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
 *
 * Across hosts (ncclGetUniqueId, ncclCommInitRank): rank 0's process listens on its host's address
 * (the simulated fabric's host.conf beside the library's path, fake_fabric.h) and its id carries
 * that address; every process connects there, says which ranks it drives (one or several GPUs,
 * inside a group) and on which HCA (NCCL_IB_HCA, else the GPU's own rail), and gets the table of
 * every process back.  The processes then form a ring over their rail addresses and the
 * collectives really move the data around it (reduce-scatter then all-gather, as NCCL's ring
 * does): every byte of every rank's result comes over TCP from the other hosts.  Time is modelled
 * from the slowest link of the ring (line rate x the scenario's factors for that pair), and the
 * channel lines name NET/IB/<rail>[/GDRDMA] (no GDRDMA on a host without GPUDirect RDMA, which also
 * runs slower), or NET/Socket when NCCL_IB_DISABLE is set.
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
#include <arpa/inet.h>
#include <errno.h>
#include <libgen.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include FAKE_NCCL_FIXTURE /* generated: FXN_* constants */
#include "fake_fabric.h"

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
    int (*current_device)(void);
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
    SYM(current_device, "fakecuda_current_device");
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
    int net;        /* the cross-host clique it belongs to (net_cliques[net - 1]); 0: a local one */
    int pending;    /* ncclCommInitRank inside a group: bootstrapped at ncclGroupEnd */
    char hca[64];   /* the HCA this rank sends through */
};
typedef struct ncclComm *ncclComm_t;
static struct ncclComm comms[MAX_COMMS];
static int next_clique = 1, group_depth, n_comms, n_internal, n_collectives, n_hung, n_aborted, n_destroyed;

static void net_release(int net);

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
    int net = c->net;
    c->net = 0;
    net_release(net);
}

static int pick_transport(int ndev, const int *devs, int *channels)
{
    /* NCCL searches its rings over the links there are (a DGX-1's hybrid cube mesh has no
     * peer access between some neighbours in device order): P2P when every GPU reaches as many
     * peers as a ring needs (two, one of two GPUs), else through host memory. */
    int p2p_ok = 1;
    int need = ndev > 2 ? 2 : 1;
    for (int i = 0; i < ndev && ndev > 1; i++) {
        int peers = 0;
        for (int j = 0; j < ndev; j++) {
            int ok = 0;
            if (j != i) cu.CanAccessPeer(&ok, devs[i], devs[j]);
            peers += ok ? 1 : 0;
        }
        if (peers < need) p2p_ok = 0;
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

/* ---------------------------------------------------------------- communicators across hosts */

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
#define MAX_PROCS 512
#define MAX_NET 8
#define NET_TIMEOUT_MS 30000

typedef struct { char host[128], addr[64], hca[64]; int port, first_rank, nlocal; } proc_t;
typedef struct {
    int live, nranks, nprocs, me, send_fd, recv_fd, socket;
    proc_t procs[MAX_PROCS];
    double gbytes; /* the ring's slowest link, GB/s */
} net_t;
static net_t net_cliques[MAX_NET];
static int fab_state = -1; /* -1 not read, 0 not a simulated host, 1 read */
static int root_fd = -1;
static unsigned char root_key[14];

static int fab_load(void)
{
    if (fab_state >= 0) return fab_state;
    Dl_info info;
    char buf[PATH_MAX];
    fab_state = 0;
    if (dladdr((void *)&fab_load, &info) && info.dli_fname) {
        snprintf(buf, sizeof buf, "%s", info.dli_fname); /* <root>/usr/lib/libnccl.so.2, as dlopened */
        fab_state = read_conf_in(dirname(buf));
    }
    return fab_state;
}

static const char *rail_addr(const char *hca)
{
    rail_t *r = hca && *hca ? my_rail(hca) : NULL;
    if (r) return r->addr;
    return me.nrails ? me.rails[0].addr : "127.0.0.1";
}

static double rail_gbps(const char *hca)
{
    rail_t *r = my_rail(hca);
    return r ? r->gbps : 400.0;
}

static void msec_timeouts(int fd, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int listen_on(const char *addr, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {0};
    socklen_t len = sizeof a;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    a.sin_family = AF_INET;
    inet_pton(AF_INET, addr, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 128) || getsockname(fd, (struct sockaddr *)&a, &len)) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int dial(const char *from, const char *addr, int port, int ms)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in me_a = {0}, to = {0};
        me_a.sin_family = to.sin_family = AF_INET;
        inet_pton(AF_INET, from, &me_a.sin_addr);
        inet_pton(AF_INET, addr, &to.sin_addr);
        to.sin_port = htons((uint16_t)port);
        if (bind(fd, (struct sockaddr *)&me_a, sizeof me_a) == 0 && connect(fd, (struct sockaddr *)&to, sizeof to) == 0) {
            msec_timeouts(fd, NET_TIMEOUT_MS);
            return fd;
        }
        close(fd);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 > ms) return -1;
        usleep(20000);
    }
}

static int send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) { ssize_t k = send(fd, c, n, MSG_NOSIGNAL); if (k <= 0) return -1; c += k; n -= (size_t)k; }
    return 0;
}

static int recv_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) { char c; if (recv(fd, &c, 1, 0) != 1) return -1; if (c == '\n') break; buf[n++] = c; }
    buf[n] = '\0';
    return 0;
}

/* Send `sn` bytes to one socket while receiving `rn` from another, never blocking on either (both
 * neighbours of a ring do the same at once). */
static int exchange(int sfd, const void *sbuf, size_t sn, int rfd, void *rbuf, size_t rn)
{
    const char *s = sbuf;
    char *r = rbuf;
    while (sn || rn) {
        struct pollfd p[2];
        int k = 0, si = -1, ri = -1;
        if (sn) { p[k].fd = sfd; p[k].events = POLLOUT; si = k++; }
        if (rn) { p[k].fd = rfd; p[k].events = POLLIN; ri = k++; }
        int rc = poll(p, (nfds_t)k, NET_TIMEOUT_MS);
        if (rc <= 0) return -1;
        if (si >= 0 && (p[si].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t n = send(sfd, s, sn, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
            if (n > 0) { s += n; sn -= (size_t)n; }
        }
        if (ri >= 0 && (p[ri].revents & (POLLIN | POLLERR | POLLHUP))) {
            ssize_t n = recv(rfd, r, rn, MSG_DONTWAIT);
            if (n == 0) return -1;
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
            if (n > 0) { r += n; rn -= (size_t)n; }
        }
    }
    return 0;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    init_env();
    if (!id) return ncclInvalidArgument;
    fab_load();
    const char *addr = rail_addr(NULL);
    int port = 0;
    if (root_fd >= 0) close(root_fd);
    root_fd = listen_on(addr, &port);
    if (root_fd < 0) { WARN(0, "bootstrap.cc:100 Bootstrap : unable to listen on %s (%s)", addr, strerror(errno)); return ncclSystemError; }
    memset(id, 0, sizeof *id);
    struct in_addr ip;
    inet_pton(AF_INET, addr, &ip);
    unsigned long nonce = (unsigned long)getpid() * 2654435761ul ^ (unsigned long)time(NULL);
    memcpy(id->internal, "FKNC", 4);
    memcpy(id->internal + 4, &ip, 4);
    uint16_t p16 = htons((uint16_t)(forges_id(me.host) ? 1 : port)); /* port 1: nobody's bootstrap */
    memcpy(id->internal + 8, &p16, 2);
    memcpy(id->internal + 10, &nonce, 4);
    memcpy(root_key, id->internal, sizeof root_key);
    INFO(0, "Bootstrap : Using %s:%d", addr, port);
    return ncclSuccess;
}

static const char *hca_for(int dev)
{
    static char buf[64];
    const char *env = getenv("NCCL_IB_HCA");
    if (env && *env) {
        const char *e = env[0] == '=' || env[0] == '^' ? env + 1 : env;
        size_t n = strcspn(e, ":,");
        snprintf(buf, sizeof buf, "%.*s", (int)n, e);
        return buf;
    }
    if (me.nrails) return me.rails[dev % me.nrails].hca;
    snprintf(buf, sizeof buf, "mlx5_%d", dev);
    return buf;
}

static int rail_index(const char *hca)
{
    const char *u = strrchr(hca, '_');
    return u ? atoi(u + 1) : 0;
}

/* The ring's slowest link in GB/s: each process's j-th rank meets the next process's j-th rank. */
static double ring_gbytes(net_t *n)
{
    double best = 1e30;
    for (int i = 0; i < n->nprocs && n->nprocs > 1; i++) {
        proc_t *a = &n->procs[i], *b = &n->procs[(i + 1) % n->nprocs];
        double line = rail_gbps(a->hca) < rail_gbps(b->hca) ? rail_gbps(a->hca) : rail_gbps(b->hca);
        double g = line / 8.0 * 0.92 * pair_factor(a->host, a->hca, b->host, b->hca);
        if (!has_gdr(a->host) || !has_gdr(b->host)) g *= 0.7; /* staged through host memory */
        if (g < best) best = g;
    }
    return best < 1e29 ? best : 0.0;
}

static int cmp_proc(const void *x, const void *y) { return ((const proc_t *)x)->first_rank - ((const proc_t *)y)->first_rank; }

/* Bootstrap the pending communicators of this process (all with the same id): the table of every
 * process from rank 0's root, then the ring.  Returns the net clique index (1-based) or 0. */
static int net_bootstrap(ncclComm_t *mine, int nmine, int nranks, const ncclUniqueId *id)
{
    fab_load();
    int slot = -1;
    for (int i = 0; i < MAX_NET; i++) if (!net_cliques[i].live) { slot = i; break; }
    if (slot < 0) { WARN(0, "init.cc:50 too many communicators across hosts"); return 0; }
    net_t *n = &net_cliques[slot];
    memset(n, 0, sizeof *n);
    n->send_fd = n->recv_fd = -1;
    n->nranks = nranks;
    n->socket = env_int("NCCL_IB_DISABLE", 0);
    if (memcmp(id->internal, "FKNC", 4)) { WARN(0, "bootstrap.cc:120 Invalid ncclUniqueId"); return 0; }
    char root_addr[64];
    inet_ntop(AF_INET, id->internal + 4, root_addr, sizeof root_addr);
    uint16_t p16;
    memcpy(&p16, id->internal + 8, 2);
    int root_port = ntohs(p16);
    const char *hca = mine[0]->hca;
    int data_port = 0, data_fd = listen_on(rail_addr(hca), &data_port);
    if (data_fd < 0) { WARN(0, "bootstrap.cc:130 cannot listen on %s", rail_addr(hca)); return 0; }
    char hello[1024];
    int first = mine[0]->rank;
    for (int i = 1; i < nmine; i++) if (mine[i]->rank < first) first = mine[i]->rank;
    snprintf(hello, sizeof hello, "%s %s %s %d %d %d\n", me.host[0] ? me.host : "localhost", rail_addr(hca), hca,
             data_port, first, nmine);
    char table[MAX_PROCS][256];
    int ntable = 0, got = 0;
    int is_root = root_fd >= 0 && !memcmp(id->internal, root_key, sizeof root_key);
    if (is_root) {
        int peers[MAX_PROCS], npeers = 0;
        snprintf(table[ntable++], sizeof table[0], "%s", hello);
        got = nmine;
        while (got < nranks && ntable < MAX_PROCS) {
            struct pollfd p = {root_fd, POLLIN, 0};
            if (poll(&p, 1, NET_TIMEOUT_MS) <= 0) { WARN(0, "bootstrap.cc:200 Bootstrap : %d of %d ranks arrived", got, nranks); goto fail; }
            int c = accept(root_fd, NULL, NULL);
            if (c < 0) continue;
            msec_timeouts(c, NET_TIMEOUT_MS);
            char line[256];
            if (recv_line(c, line, sizeof line)) { close(c); continue; }
            char h[128], a[64], hc[64];
            int dp, fr, nl;
            if (sscanf(line, "%127s %63s %63s %d %d %d", h, a, hc, &dp, &fr, &nl) != 6) { close(c); continue; }
            snprintf(table[ntable++], sizeof table[0], "%s\n", line);
            peers[npeers++] = c;
            got += nl;
        }
        for (int i = 0; i < npeers; i++) {
            for (int t = 0; t < ntable; t++) send_all(peers[i], table[t], strlen(table[t]));
            send_all(peers[i], "END\n", 4);
            close(peers[i]);
        }
        close(root_fd);
        root_fd = -1;
    } else {
        int c = dial(rail_addr(hca), root_addr, root_port, NET_TIMEOUT_MS);
        if (c < 0) { WARN(0, "bootstrap.cc:220 Bootstrap : connect to %s:%d failed", root_addr, root_port); goto fail; }
        send_all(c, hello, strlen(hello));
        char line[256];
        while (!recv_line(c, line, sizeof line) && strcmp(line, "END") && ntable < MAX_PROCS)
            snprintf(table[ntable++], sizeof table[0], "%s", line);
        close(c);
    }
    for (int t = 0; t < ntable; t++) {
        proc_t *p = &n->procs[n->nprocs];
        if (sscanf(table[t], "%127s %63s %63s %d %d %d", p->host, p->addr, p->hca, &p->port, &p->first_rank, &p->nlocal) == 6)
            n->nprocs++;
    }
    qsort(n->procs, (size_t)n->nprocs, sizeof n->procs[0], cmp_proc);
    n->me = -1;
    for (int i = 0; i < n->nprocs; i++) if (n->procs[i].first_rank == first) n->me = i;
    if (n->me < 0 || n->nprocs < 1) { WARN(0, "bootstrap.cc:240 Bootstrap : incomplete table"); goto fail; }
    if (n->nprocs > 1) {
        proc_t *next = &n->procs[(n->me + 1) % n->nprocs];
        n->send_fd = dial(rail_addr(hca), next->addr, next->port, NET_TIMEOUT_MS);
        struct pollfd p = {data_fd, POLLIN, 0};
        if (n->send_fd < 0 || poll(&p, 1, NET_TIMEOUT_MS) <= 0 || (n->recv_fd = accept(data_fd, NULL, NULL)) < 0) {
            WARN(0, "transport/net_ib.cc:600 NET/IB : ring connection to %s failed", next->host);
            goto fail;
        }
        msec_timeouts(n->recv_fd, NET_TIMEOUT_MS);
    }
    close(data_fd);
    n->gbytes = ring_gbytes(n);
    n->live = 1;
    return slot + 1;
fail:
    close(data_fd);
    if (n->send_fd >= 0) close(n->send_fd);
    if (n->recv_fd >= 0) close(n->recv_fd);
    return 0;
}

static ncclComm_t new_comm(int dev)
{
    ncclComm_t c = NULL;
    for (int i = 0; i < MAX_COMMS; i++) if (!comms[i].live && !comms[i].pending) { c = &comms[i]; break; }
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    if (cu.PrimaryCtxRetain(&c->ctx, dev) != 0) return NULL;
    void *prev = NULL;
    cu.CtxGetCurrent(&prev);
    cu.CtxSetCurrent(c->ctx);
    if (cu.MemAlloc(&c->ibuf, 65536) != 0) { c->ibuf = 0; cu.CtxSetCurrent(prev); cu.PrimaryCtxRelease(dev); return NULL; }
    cu.CtxSetCurrent(prev);
    c->dev = dev;
    return c;
}

static struct { ncclComm_t c; int nranks; ncclUniqueId id; } pending_init[MAX_COMMS];
static int n_pending;

static ncclResult_t finish_init(void)
{
    if (!n_pending) return ncclSuccess;
    ncclComm_t mine[MAX_COMMS];
    for (int i = 0; i < n_pending; i++) mine[i] = pending_init[i].c;
    int nmine = n_pending, nranks = pending_init[0].nranks;
    ncclUniqueId id = pending_init[0].id;
    n_pending = 0;
    int net = net_bootstrap(mine, nmine, nranks, &id);
    if (!net) {
        for (int i = 0; i < nmine; i++) { mine[i]->pending = 0; mine[i]->live = 1; n_comms++; free_comm(mine[i]); }
        report();
        return ncclSystemError;
    }
    net_t *n = &net_cliques[net - 1];
    INFO(mine[0]->dev, "NCCL version %s+cuda12.2", FXN_VERSION_STR);
    static const char *watched[] = {"NCCL_IB_HCA", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", NULL};
    for (int i = 0; watched[i]; i++) {
        const char *v = getenv(watched[i]);
        if (v && *v) INFO(mine[0]->dev, "%s set by environment to %s.", watched[i], v);
    }
    int gdr = has_gdr(me.host);
    for (int i = 0; i < nmine; i++) {
        ncclComm_t c = mine[i];
        c->pending = 0;
        c->live = 1;
        c->nranks = nranks;
        c->net = net;
        c->clique = 1000 + net;
        c->transport = T_NET;
        c->channels = 2;
        n_comms++;
        n_internal++;
        int next = (c->rank + 1) % nranks;
        char via_buf[64];
        if (n->socket) snprintf(via_buf, sizeof via_buf, "NET/Socket/%d", rail_index(c->hca));
        else snprintf(via_buf, sizeof via_buf, "NET/IB/%d%s", rail_index(c->hca), gdr ? "/GDRDMA" : "");
        for (int ch = 0; ch < 2 && n->nprocs > 1; ch++)
            INFO(c->dev, "Channel %02d/0 : %d[%d] -> %d[%d] [send] via %s", ch, c->rank, c->dev, next, next % 8, via_buf);
        INFO(c->dev, "2 coll channels, 0 collnet channels, 0 nvls channels, 2 p2p channels, 1 p2p channels per peer");
        INFO(c->dev, "comm 0x%lx rank %d nranks %d cudaDev %d nvmlDev %d - Init COMPLETE",
             0x55e0c0de0000ul + 0x1000ul * (unsigned long)(c - comms), c->rank, nranks, c->dev, c->dev);
    }
    report();
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
    init_env();
    fab_load();
    if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    if (!load_cuda()) { WARN(0, "Failed to open libcuda.so.1"); return ncclUnhandledCudaError; }
    int dev = cu.current_device();
    if (dev < 0) dev = 0;
    ncclComm_t c = new_comm(dev);
    if (!c) { WARN(dev, "init.cc:1300 Cuda failure on device %d", dev); return ncclUnhandledCudaError; }
    c->rank = rank;
    c->pending = 1;
    snprintf(c->hca, sizeof c->hca, "%s", hca_for(dev));
    if (n_pending >= MAX_COMMS) return ncclInternalError;
    pending_init[n_pending].c = c;
    pending_init[n_pending].nranks = nranks;
    pending_init[n_pending].id = id;
    n_pending++;
    *out = c;
    return group_depth ? ncclSuccess : finish_init();
}

static void net_release(int net)
{
    if (net <= 0) return;
    for (int i = 0; i < MAX_COMMS; i++) if (comms[i].live && comms[i].net == net) return;
    net_t *n = &net_cliques[net - 1];
    if (n->send_fd >= 0) close(n->send_fd);
    if (n->recv_fd >= 0) close(n->recv_fd);
    n->live = 0;
}

/* One collective over the ring of processes: the local ranks' part first, then reduce-scatter and
 * all-gather around the ring (all-gather alone for all_gather), then every local rank's result. */
static ncclResult_t run_net_clique(ncclComm_t *ranks, int nl)
{
    net_t *n = &net_cliques[ranks[0]->net - 1];
    op_t *ops[MAX_COMMS];
    for (int r = 0; r < nl; r++) ops[r] = &ranks[r]->q[ranks[r]->qhead];
    op_t *o0 = ops[0];
    size_t es = dtype_size(o0->dtype);
    for (int r = 1; r < nl; r++)
        if (ops[r]->kind != o0->kind || ops[r]->count != o0->count || ops[r]->dtype != o0->dtype) return ncclInvalidUsage;
    int N = n->nranks, P = n->nprocs, me_i = n->me;
    size_t cnt = o0->count;
    ncclResult_t rc = ncclSuccess;
    if (o0->kind == COLL_ALLGATHER) {
        size_t total = (size_t)N * cnt * es;
        unsigned char *out = malloc(total ? total : 1);
        if (!out) return ncclSystemError;
        for (int r = 0; r < nl; r++) memcpy(out + (size_t)ranks[r]->rank * cnt * es, ops[r]->send, cnt * es);
        for (int step = 0; step < P - 1; step++) {
            int sp = ((me_i - step) % P + P) % P, rp = ((me_i - step - 1) % P + P) % P;
            size_t soff = (size_t)n->procs[sp].first_rank * cnt * es, roff = (size_t)n->procs[rp].first_rank * cnt * es;
            size_t rlen = (size_t)n->procs[rp].nlocal * cnt * es, slen = (size_t)n->procs[sp].nlocal * cnt * es;
            if (exchange(n->send_fd, out + soff, slen, n->recv_fd, out + roff, rlen)) { rc = ncclRemoteError; break; }
        }
        if (rc == ncclSuccess) for (int r = 0; r < nl; r++) memcpy(ops[r]->recv, out, total);
        free(out);
    } else {
        size_t in_n = o0->kind == COLL_REDUCESCATTER ? cnt * (size_t)N : cnt;
        size_t nbytes = in_n * es > 0 ? in_n * es : 1;
        unsigned char *acc = malloc(nbytes), *tmp = malloc(nbytes);
        if (!acc || !tmp) { free(acc); free(tmp); return ncclSystemError; }
        memcpy(acc, ops[0]->send, in_n * es);
        for (int r = 1; r < nl; r++) reduce_into(acc, ops[r]->send, in_n, o0->dtype, o0->redop);
        size_t seg = (in_n + (size_t)P - 1) / (size_t)P;
#define SEG_OFF(k) ((size_t)(k) * seg < in_n ? (size_t)(k) * seg : in_n)
#define SEG_LEN(k) (SEG_OFF((k) + 1) - SEG_OFF(k))
        for (int step = 0; step < P - 1 && rc == ncclSuccess; step++) { /* reduce-scatter */
            int sk = ((me_i - step) % P + P) % P, rk = ((me_i - step - 1) % P + P) % P;
            if (exchange(n->send_fd, acc + SEG_OFF(sk) * es, SEG_LEN(sk) * es, n->recv_fd, tmp, SEG_LEN(rk) * es)) rc = ncclRemoteError;
            else reduce_into(acc + SEG_OFF(rk) * es, tmp, SEG_LEN(rk), o0->dtype, o0->redop);
        }
        for (int step = 0; step < P - 1 && rc == ncclSuccess; step++) { /* all-gather */
            int sk = ((me_i + 1 - step) % P + P) % P, rk = ((me_i - step) % P + P) % P;
            if (exchange(n->send_fd, acc + SEG_OFF(sk) * es, SEG_LEN(sk) * es, n->recv_fd, acc + SEG_OFF(rk) * es, SEG_LEN(rk) * es))
                rc = ncclRemoteError;
        }
#undef SEG_OFF
#undef SEG_LEN
        if (rc == ncclSuccess) {
            if (o0->redop == ncclAvg) average(acc, in_n, o0->dtype, N);
            for (int r = 0; r < nl; r++) {
                if (o0->kind == COLL_ALLREDUCE) memcpy(ops[r]->recv, acc, in_n * es);
                else memcpy(ops[r]->recv, acc + (size_t)ranks[r]->rank * cnt * es, cnt * es);
            }
        }
        free(acc);
        free(tmp);
    }
    if (rc != ncclSuccess) {
        WARN(ranks[0]->dev, "transport/net_ib.cc:1200 NET/IB : connection to a peer closed or timed out");
        for (int r = 0; r < nl; r++) ranks[r]->async_error = ncclRemoteError;
        return rc;
    }
    double nb = (double)N, bytes = (double)cnt * (double)es * (o0->kind == COLL_ALLGATHER ? nb : 1.0);
    double factor = N > 1 ? (o0->kind == COLL_ALLREDUCE ? 2.0 * (nb - 1) / nb : (nb - 1) / nb) : 0.0;
    double bw = n->socket ? 1.2 : n->gbytes;
    double eff = bw * bytes / (bytes + FXN_HALF_BYTES);
    double ns = FXN_LAT_US * 1e3 * (N > 1 ? 2.0 : 1.0) + (eff > 0 ? bytes * factor / eff : 0.0);
    void *streams[MAX_COMMS];
    for (int r = 0; r < nl; r++) streams[r] = ops[r]->stream;
    if (cu.collective(streams, nl, ns, 0) != 0) return ncclUnhandledCudaError;
    n_collectives++;
    for (int r = 0; r < nl; r++) { ranks[r]->qhead = (ranks[r]->qhead + 1) % MAX_OPS; ranks[r]->qlen--; }
    report();
    return ncclSuccess;
}

static ncclResult_t progress(void)
{
    for (int net = 1; net <= MAX_NET; net++) { /* the cross-host ones: every local rank queued */
        ncclComm_t ranks[MAX_COMMS];
        int nl = 0;
        for (int k = 0; k < MAX_COMMS; k++) if (comms[k].live && comms[k].net == net) ranks[nl++] = &comms[k];
        while (nl) {
            int ready = 1;
            for (int r = 0; r < nl; r++) if (ranks[r]->qlen == 0) ready = 0;
            if (!ready) break;
            ncclResult_t rc = run_net_clique(ranks, nl);
            if (rc != ncclSuccess) return rc;
        }
    }
    for (int i = 0; i < MAX_COMMS; i++) {
        if (!comms[i].live || comms[i].rank != 0 || comms[i].net) continue;
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
    if (n_pending) return finish_init();
    if (FXN_ERROR_CALL == 3) {
        WARN(0, "group.cc:450 fake fixture: injected group launch failure");
        return (ncclResult_t)FXN_ERROR_CODE;
    }
    return progress();
}
