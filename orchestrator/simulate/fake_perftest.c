/* A fake perftest (ib_write_bw, ib_write_lat, ib_send_bw, ib_send_lat, ib_read_bw) for tests and the demo.
 *
 * One binary, named by argv[0] like the real tools, installed (as links) in a simulated host's tree:
 * <root>/usr/bin/ib_write_bw.  It reads <root>/fake-fabric/host.conf (the host's name, its rails'
 * addresses, LIDs and line rates, whether it was "built with CUDA") and the scenario file that
 * conf names (faults per host, HCA, pair and rail), then behaves as the real tool on the wire:
 * the server listens on its rail's address (the real one listens on every address; simulated hosts
 * share one machine), the client connects from its own rail's address, and the bytes really move:
 * size x iterations in the bandwidth tests (capped at 1 MiB), `iterations` ping-pongs of `size`
 * bytes in the latency tests, every byte of a known pattern checked on the other side.  What is
 * modelled is the figure printed: the line rate times the scenario's factors for this pair, with a
 * little seeded noise, and a latency that grows as the link slows.  The output is perftest's own
 * layout (banner, settings, addresses, table), so the fabric probe and the parser read it as real.
 * A client whose server is not listening yet fails as the real one does ("Couldn't connect to").
 * --use_cuda on a host without GPUDirect RDMA fails at memory registration ("Couldn't allocate MR"), and so
 * does it without --use_cuda_dmabuf on a host whose conf says no peer-memory module is loaded.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake_fabric.h"

#define MAX_MOVE (1u << 20) /* bytes really moved per bandwidth test, at most: the figure is modelled */
#define DASH "---------------------------------------------------------------------------------------"

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    exit(1);
}

static void read_conf(const char *argv0)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", argv0);
    if (!read_conf_in(dirname(buf))) die("fake perftest: no fake-fabric/host.conf beside %s (not a simulated host)\n", argv0);
}

/* ------------------------------------------------------------------------------ options */

static struct {
    const char *tool, *dev, *server;
    int ib_port, port, iters, duration, report_gbits, bidir, gid, qps, use_cuda, dmabuf, size_all;
    long size;
} opt = {NULL, NULL, NULL, 1, 18515, 0, 0, 0, 0, -1, 1, -1, 0, 0, 65536};

static int is_lat(void) { return strstr(opt.tool, "_lat") != NULL; }

static void usage(void)
{
    printf("Usage:\n  %s            start a server and wait for connection\n  %s <host>     connect to server at <host>\n\n", opt.tool, opt.tool);
    printf("Options:\n  -d, --ib-dev=<dev>  Use IB device <dev> (default first device found)\n"
           "  -p, --port=<port>  Listen on/connect to port <port> (default 18515)\n"
           "  -s, --size=<size>  Size of message to exchange (default 65536)\n"
           "  -n, --iters=<iters>  Number of exchanges (at least 5, default 1000)\n");
    if (me.cuda) printf("  --use_cuda=<cuda device id> Use CUDA specific device for GPUDirect RDMA testing\n"
                        "  --use_cuda_dmabuf Use CUDA DMA-BUF for GPUDirect RDMA testing\n");
}

static void parse(int argc, char **argv)
{
    char *b = strrchr(argv[0], '/');
    opt.tool = b ? b + 1 : argv[0];
    for (int i = 1; i < argc; i++) {
        char *a = argv[i], *v = NULL;
        if (!strcmp(a, "--")) {  /* getopt's end of options, as perftest's parser: one server name may follow */
            if (i + 2 < argc) die(" Invalid Command line. Please check command rerun \n");
            if (i + 1 < argc) opt.server = argv[i + 1];
            break;
        }
        char key[64];
        snprintf(key, sizeof key, "%s", a);
        char *eq = strchr(key, '=');
        if (eq) { *eq = '\0'; v = a + (eq - key) + 1; }
#define NEXT() (v ? v : (i + 1 < argc ? argv[++i] : (die(" Invalid Command or flag.\n"), "")))
        if (!strcmp(key, "-d") || !strcmp(key, "--ib-dev")) opt.dev = NEXT();
        else if (!strcmp(key, "-i") || !strcmp(key, "--ib-port")) opt.ib_port = atoi(NEXT());
        else if (!strcmp(key, "-p") || !strcmp(key, "--port")) opt.port = atoi(NEXT());
        else if (!strcmp(key, "-s") || !strcmp(key, "--size")) opt.size = atol(NEXT());
        else if (!strcmp(key, "-n") || !strcmp(key, "--iters")) opt.iters = atoi(NEXT());
        else if (!strcmp(key, "-D") || !strcmp(key, "--duration")) opt.duration = atoi(NEXT());
        else if (!strcmp(key, "-x") || !strcmp(key, "--gid-index")) opt.gid = atoi(NEXT());
        else if (!strcmp(key, "-q") || !strcmp(key, "--qp")) opt.qps = atoi(NEXT());
        else if (!strcmp(key, "--use_cuda")) { if (!me.cuda) die(" Invalid Command or flag.\n"); opt.use_cuda = atoi(NEXT()); }
        else if (!strcmp(key, "--use_cuda_dmabuf")) { if (!me.cuda) die(" Invalid Command or flag.\n"); opt.dmabuf = 1; }
        else if (!strcmp(key, "--report_gbits")) opt.report_gbits = 1;
        else if (!strcmp(key, "-b") || !strcmp(key, "--bidirectional")) opt.bidir = 1;
        else if (!strcmp(key, "-a") || !strcmp(key, "--all")) opt.size_all = 1;
        else if (!strcmp(key, "-F") || !strcmp(key, "--CPU-freq") || !strcmp(key, "-R") || !strcmp(key, "--rdma_cm")) ;
        else if (!strcmp(key, "-h") || !strcmp(key, "--help")) { usage(); exit(0); }
        else if (a[0] == '-') die(" Invalid Command or flag.\n Please check command line and run again.\n");
        else opt.server = a;
#undef NEXT
    }
    if (!opt.iters) opt.iters = is_lat() ? 1000 : 5000;
    if (opt.size < 1) opt.size = 1;
}

/* ------------------------------------------------------------------------------ the wire */

static int send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) { ssize_t k = send(fd, c, n, MSG_NOSIGNAL); if (k <= 0) return -1; c += k; n -= (size_t)k; }
    return 0;
}

static int recv_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) { ssize_t k = recv(fd, c, n, 0); if (k <= 0) return -1; c += k; n -= (size_t)k; }
    return 0;
}

static int recv_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) { char c; if (recv(fd, &c, 1, 0) != 1) return -1; if (c == '\n') break; buf[n++] = c; }
    buf[n] = '\0';
    return 0;
}

static void fill(unsigned char *buf, size_t n, size_t off) { for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)((off + i) * 31u + 7u); }
static size_t check(const unsigned char *buf, size_t n, size_t off)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) if (buf[i] != (unsigned char)((off + i) * 31u + 7u)) bad++;
    return bad;
}

/* ------------------------------------------------------------------------------ output */

static const char *title(void)
{
    static char t[96];
    const char *op = strstr(opt.tool, "write") ? "RDMA_Write" : strstr(opt.tool, "read") ? "RDMA_Read" : "Send";
    snprintf(t, sizeof t, "%s %s%s", op, !is_lat() && opt.bidir ? "Bidirectional " : "", is_lat() ? "Latency Test" : "BW Test");
    return t;
}

static void banner(rail_t *r)
{
    printf("%s\n                    %s\n", DASH, title());
    printf(" Dual-port       : OFF\t\tDevice         : %s\n", r->hca);
    printf(" Number of qps   : %d\t\tTransport type : IB\n", opt.qps);
    printf(" Connection type : RC\t\tUsing SRQ      : OFF\n PCIe relax order: ON\n ibv_wr* API     : ON\n");
    printf(" TX depth        : %d\n", is_lat() ? 1 : 128);
    if (!is_lat()) printf(" CQ Moderation   : 100\n");
    printf(" Mtu             : 4096[B]\n Link type       : IB\n Max inline data : %d[B]\n", is_lat() ? 220 : 0);
    printf(" rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n%s\n", DASH);
}

static void addresses(int lid, int peer_lid)
{
    printf(" local address: LID %#04x QPN 0x%04x PSN 0x%06x RKey 0x%06x VAddr 0x%014lx\n", lid, 0x100 + opt.port % 97,
           (unsigned)(lid * 7919) & 0xffffff, 0x1fff00u, 0x7f0000000000ul + (unsigned long)lid * 4096ul);
    printf(" remote address: LID %#04x QPN 0x%04x PSN 0x%06x RKey 0x%06x VAddr 0x%014lx\n%s\n", peer_lid,
           0x100 + (opt.port + 1) % 97, (unsigned)(peer_lid * 7919) & 0xffffff, 0x1fff00u,
           0x7f0000000000ul + (unsigned long)peer_lid * 4096ul, DASH);
}

static void bw_table(double gbps)
{
    double shown = opt.report_gbits ? gbps : gbps * 1e9 / 8.0 / 1048576.0;
    double rate = gbps * 1e9 / 8.0 / (double)opt.size / 1e6;
    printf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n",
           opt.report_gbits ? "Gb/sec" : "MiB/sec", opt.report_gbits ? "Gb/sec" : "MiB/sec");
    printf(" %-10ld %-10d       %.2f             %.2f  \t\t   %.6f\n%s\n", opt.size, opt.iters, shown * 1.0004, shown, rate, DASH);
}

static void lat_table(double typical)
{
    printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n");
    printf(" %-7ld %-7d       %.2f           %.2f         %.2f     \t       %.2f        \t%.2f   \t\t%.2f    \t%.2f   \n%s\n",
           opt.size, opt.iters, typical * 0.96, typical * 2.9, typical, typical * 1.01, typical * 0.05, typical * 1.09,
           typical * 2.9, DASH);
}

/* ------------------------------------------------------------------------------ the test */

struct peer { char host[128], hca[64]; int lid; double gbps; };

static double model_gbps(rail_t *r, struct peer *p, int server)
{
    const char *a = server ? p->host : me.host, *ah = server ? p->hca : r->hca;   /* client first: both agree */
    const char *b = server ? me.host : p->host, *bh = server ? r->hca : p->hca;
    double f = pair_factor(a, ah, b, bh);
    double line = p->gbps > 0 && p->gbps < r->gbps ? p->gbps : r->gbps;   /* the slower port sets the link */
    return line * 0.965 * f * (1.0 + noise(a, b, ah, opt.tool, 0.006));
}

static double model_lat(rail_t *r, struct peer *p, int server)
{
    const char *a = server ? p->host : me.host, *ah = server ? p->hca : r->hca;
    const char *b = server ? me.host : p->host, *bh = server ? r->hca : p->hca;
    double f = pair_factor(a, ah, b, bh);
    return base_lat_us / sqrt(f) * (1.0 + noise(a, b, ah, opt.tool, 0.02));
}

/* Bandwidth tests: the client streams size x iters bytes (bounded), the server checks them. */
static int move_bytes(int fd, int sending)
{
    size_t total = (size_t)opt.size * (size_t)opt.iters;
    if (total > MAX_MOVE) total = MAX_MOVE;
    unsigned char *buf = malloc(65536);
    if (!buf) return -1;
    size_t off = 0, bad = 0;
    while (off < total) {
        size_t n = total - off < 65536 ? total - off : 65536;
        if (sending) { fill(buf, n, off); if (send_all(fd, buf, n)) { free(buf); return -1; } }
        else { if (recv_all(fd, buf, n)) { free(buf); return -1; } bad += check(buf, n, off); }
        off += n;
    }
    free(buf);
    return bad ? -2 : 0;
}

/* Latency tests: iters ping-pongs of `size` bytes (bounded to 64 KiB each). */
static int ping_pong(int fd, int client)
{
    size_t n = opt.size > 65536 ? 65536 : (size_t)opt.size;
    unsigned char *buf = malloc(n);
    if (!buf) return -1;
    for (int i = 0; i < opt.iters; i++) {
        if (client) { fill(buf, n, (size_t)i); if (send_all(fd, buf, n) || recv_all(fd, buf, n)) goto fail; }
        else { if (recv_all(fd, buf, n)) goto fail; if (check(buf, n, (size_t)i)) { free(buf); return -2; } if (send_all(fd, buf, n)) goto fail; }
    }
    free(buf);
    return 0;
fail:
    free(buf);
    return -1;
}

static int gdr_check(void)
{
    /* without a peer-memory module GPU memory registers only through DMA-BUF, as on a real host */
    if ((opt.use_cuda >= 0 || opt.dmabuf) && (!has_gdr(me.host) || (!opt.dmabuf && !me.peermem))) {
        fprintf(stderr, "Couldn't allocate MR\n Couldn't create IB resources\n");
        return -1;
    }
    if (opt.use_cuda >= 0) printf("initializing CUDA\nUsing cuda device %d\nallocated %ld bytes of GPU buffer\n", opt.use_cuda, opt.size * 2);
    return 0;
}

static int run(rail_t *r)
{
    int server = opt.server == NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in me_addr = {0}, to = {0};
    me_addr.sin_family = AF_INET;
    inet_pton(AF_INET, r->addr, &me_addr.sin_addr);
    if (gdr_check()) return 1;
    if (server) {
        me_addr.sin_port = htons((uint16_t)opt.port);
        if (bind(fd, (struct sockaddr *)&me_addr, sizeof me_addr) || listen(fd, 1)) {
            fprintf(stderr, " Couldn't bind to %s:%d (%s)\n Couldn't listen to port %d\n", r->addr, opt.port, strerror(errno), opt.port);
            return 1;
        }
        printf("\n************************************\n* Waiting for client to connect... *\n************************************\n");
        fflush(stdout);
        int c = accept(fd, NULL, NULL);
        close(fd);
        if (c < 0) return 1;
        fd = c;
    } else {
        if (bind(fd, (struct sockaddr *)&me_addr, sizeof me_addr)) { fprintf(stderr, "Couldn't bind %s\n", r->addr); return 1; }
        to.sin_family = AF_INET;
        to.sin_port = htons((uint16_t)opt.port);
        if (inet_pton(AF_INET, opt.server, &to.sin_addr) != 1 || connect(fd, (struct sockaddr *)&to, sizeof to)) {
            fprintf(stderr, "Couldn't connect to %s:%d\nUnable to open file descriptor for socket connection Unable to init the socket connection\n",
                    opt.server, opt.port);
            return 1;
        }
    }
    /* who is on the other end: host, HCA, LID (perftest swaps LIDs and QPNs here) */
    char hello[256], got[256];
    struct peer p;
    snprintf(hello, sizeof hello, "FAKEPERF %s %s %d %s %ld %d %.1f\n", me.host, r->hca, r->lid, opt.tool, opt.size, opt.iters, r->gbps);
    if (send_all(fd, hello, strlen(hello)) || recv_line(fd, got, sizeof got)) { fprintf(stderr, " Failed to exchange data between server and clients\n"); return 1; }
    char ptool[64];
    long psize = 0;
    int piters = 0;
    if (sscanf(got, "FAKEPERF %127s %63s %d %63s %ld %d %lf", p.host, p.hca, &p.lid, ptool, &psize, &piters, &p.gbps) != 7 ||
        strcmp(ptool, opt.tool) || psize != opt.size || piters != opt.iters) {
        fprintf(stderr, " Failed to exchange data between server and clients (the two sides differ: %s)\n", got);
        return 1;
    }
    banner(r);
    addresses(r->lid, p.lid);
    int rc = is_lat() ? ping_pong(fd, !server) : move_bytes(fd, !server);
    if (rc == -2) { fprintf(stderr, " Completion with error: data check failed\n"); return 1; }
    if (rc) { fprintf(stderr, " Problems with warm up\n"); return 1; }
    /* the client sends its figure so both sides print the same result, as perftest's do */
    double v = 0;
    if (!server) {
        v = is_lat() ? model_lat(r, &p, 0) : model_gbps(r, &p, 0);
        char res[64];
        snprintf(res, sizeof res, "%.6f\n", v);
        send_all(fd, res, strlen(res));
    } else {
        char res[64];
        if (recv_line(fd, res, sizeof res)) { fprintf(stderr, " Failed to exchange data between server and clients\n"); return 1; }
        v = atof(res);
    }
    if (is_lat()) lat_table(v); else bw_table(v);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    read_conf(argv[0]);
    parse(argc, argv);
    rail_t *r = opt.dev ? my_rail(opt.dev) : (me.nrails ? &me.rails[0] : NULL);
    if (!r) {
        fprintf(stderr, " IB device %s not found\n Unable to find the Infiniband/RoCE device\n", opt.dev ? opt.dev : "(any)");
        return 1;
    }
    return run(r);
}
