/* delayproxy: a TCP proxy that gives every connection a round-trip time, for the fleet benchmark.
 *
 *   delayproxy --upstream-port SSHD_PORT --rtt-ms 100 [--port 0] [--bind 0.0.0.0] [--upstream-host ADDR]
 *
 * The kernel here has no netem qdisc, so the delay comes from user space.  One process, one epoll
 * loop, no threads.  It listens on BIND:PORT (PORT 0: any free port, printed on stdout as the
 * first line) and forwards each accepted connection to the address the client dialed (so
 * 127.0.x.y:PORT goes to 127.0.x.y:SSHD_PORT and sshd sees one server address per simulated host),
 * or to --upstream-host.
 *
 * The delay model: every byte takes RTT/2 in each direction (a chunk read at t is written to the
 * other side at t + RTT/2, in order); a new connection reaches the upstream one RTT after it was
 * accepted (the TCP handshake the client's connect() would have waited for); an end of stream
 * (FIN) travels like data, after the bytes before it, and becomes shutdown(SHUT_WR) on the other
 * side, so half-closed connections stay half-closed; a reset or a refused upstream closes both
 * sides at once.  Since the delay is the same for every chunk of a direction, due times are in
 * arrival order, and one FIFO per kind of event (data, connect) is the whole timer queue.
 * Bandwidth is not limited.  A direction holding more than 4 MiB (in flight + unwritten) stops
 * reading its source until it drains, as a TCP window would.
 *
 * SIGTERM/SIGINT: exit, printing "delayproxy: C connections, U bytes up, D bytes down" on stderr.
 * Built by bench/delayproxy.py (gcc -O2); tests/bench/test_delay_proxy.py checks the model.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (64 * 1024)
#define LIMIT (4 * 1024 * 1024)

typedef struct chunk {
    struct chunk *next;
    size_t len, off;
    char data[];
} chunk;

struct conn;

typedef struct endpoint {
    struct conn *c;
    int fd;
    int idx;            /* 0: the client, 1: the upstream */
    int registered;     /* in the epoll set */
    uint32_t interest;
} endpoint;

/* direction i: read from ep[i], written to ep[1 - i] */
typedef struct dir {
    chunk *head, *tail; /* due, not yet (fully) written */
    size_t pending;     /* bytes in head..tail */
    size_t inflight;    /* bytes read, not yet due */
    int reading;        /* 0 while over LIMIT */
    int eof_seen;       /* read() gave 0 */
    int eof_due;        /* the EOF's delay is over */
    int eof_done;       /* shutdown(SHUT_WR) done on the destination */
} dir;

typedef struct conn {
    endpoint ep[2];
    dir d[2];
    int connecting, connected, dead, buried;
    int refs;           /* queued events pointing here */
    struct sockaddr_in up;
    struct conn *next_grave;
} conn;

typedef struct event {
    struct event *next;
    int64_t due;
    conn *c;
    int dir;            /* -1: the upstream connect */
    chunk *ch;          /* NULL: end of stream */
} event;

typedef struct fifo {
    event *head, *tail;
} fifo;

static int ep_fd;
static int64_t half_ns, rtt_ns;
static fifo data_q, connect_q;
static volatile sig_atomic_t stopping;
static unsigned long long n_conns, bytes_dir[2];
static char buf[CHUNK];

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void push(fifo *q, int64_t due, conn *c, int d, chunk *ch) {
    event *e = malloc(sizeof *e);
    if (!e) { perror("delayproxy: malloc"); exit(1); }
    e->next = NULL; e->due = due; e->c = c; e->dir = d; e->ch = ch;
    if (q->tail) q->tail->next = e; else q->head = e;
    q->tail = e;
    c->refs++;
}

static event *pop_due(fifo *q, int64_t now) {
    event *e = q->head;
    if (!e || e->due > now) return NULL;
    q->head = e->next;
    if (!q->head) q->tail = NULL;
    return e;
}

static void set_interest(endpoint *p) {
    conn *c = p->c;
    if (p->fd < 0) return;
    uint32_t want = 0;
    dir *rd = &c->d[p->idx], *wr = &c->d[1 - p->idx];
    int usable = p->idx == 0 || c->connected;
    if (usable && rd->reading && !rd->eof_seen) want |= EPOLLIN;
    if (usable && wr->head) want |= EPOLLOUT;
    if (p->idx == 1 && c->connecting) want |= EPOLLOUT;  /* connect() completion */
    /* Nothing wanted: leave the epoll set, so a hung-up socket cannot wake us in a loop. */
    if (!want) {
        if (p->registered) { epoll_ctl(ep_fd, EPOLL_CTL_DEL, p->fd, NULL); p->registered = 0; }
        return;
    }
    if (p->registered && want == p->interest) return;
    struct epoll_event ev = {.events = want, .data.ptr = p};
    epoll_ctl(ep_fd, p->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, p->fd, &ev);
    p->registered = 1;
    p->interest = want;
}

static void free_chunks(dir *d) {
    chunk *ch = d->head;
    while (ch) { chunk *n = ch->next; free(ch); ch = n; }
    d->head = d->tail = NULL;
}

/* A dead connection is freed once no event points at it, and only between two epoll batches:
 * the batch being handled may still name its endpoints. */
static conn *graveyard;

static void release(conn *c) {
    if (c->dead && c->refs == 0 && !c->buried) {
        c->buried = 1;
        c->next_grave = graveyard;
        graveyard = c;
    }
}

static void bury(void) {
    while (graveyard) {
        conn *c = graveyard;
        graveyard = c->next_grave;
        free(c);
    }
}

/* Close both sides; reset: with RST (an error on one side becomes an error on the other). */
static void finish(conn *c, int reset) {
    if (c->dead) return;
    for (int i = 0; i < 2; i++) {
        endpoint *p = &c->ep[i];
        if (p->fd < 0) continue;
        if (p->registered) epoll_ctl(ep_fd, EPOLL_CTL_DEL, p->fd, NULL);
        if (reset) {
            struct linger lg = {1, 0};
            setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        close(p->fd);
        p->fd = -1;
    }
    free_chunks(&c->d[0]);
    free_chunks(&c->d[1]);
    c->dead = 1;
    release(c);
}

static void flush(conn *c, int d) {
    dir *x = &c->d[d];
    endpoint *dst = &c->ep[1 - d];
    if (d == 0 && !c->connected) return;
    while (x->head) {
        chunk *ch = x->head;
        ssize_t n = write(dst->fd, ch->data + ch->off, ch->len - ch->off);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) break;
            finish(c, 1);
            return;
        }
        ch->off += (size_t)n;
        x->pending -= (size_t)n;
        bytes_dir[d] += (unsigned long long)n;
        if (ch->off < ch->len) break;
        x->head = ch->next;
        if (!x->head) x->tail = NULL;
        free(ch);
    }
    if (!x->head && x->eof_due && !x->eof_done) {
        shutdown(dst->fd, SHUT_WR);
        x->eof_done = 1;
    }
    if (!x->reading && x->inflight + x->pending < LIMIT / 2) x->reading = 1;
    if (c->d[0].eof_done && c->d[1].eof_done) {
        finish(c, 0);
        return;
    }
    set_interest(&c->ep[0]);
    set_interest(&c->ep[1]);
}

static void on_readable(endpoint *p) {
    conn *c = p->c;
    dir *x = &c->d[p->idx];
    ssize_t n = read(p->fd, buf, sizeof buf);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        finish(c, 1);
        return;
    }
    if (n == 0) {
        x->eof_seen = 1;
        push(&data_q, now_ns() + half_ns, c, p->idx, NULL);
    } else {
        chunk *ch = malloc(sizeof *ch + (size_t)n);
        if (!ch) { perror("delayproxy: malloc"); exit(1); }
        ch->next = NULL; ch->len = (size_t)n; ch->off = 0;
        memcpy(ch->data, buf, (size_t)n);
        x->inflight += (size_t)n;
        if (x->inflight + x->pending > LIMIT) x->reading = 0;
        push(&data_q, now_ns() + half_ns, c, p->idx, ch);
    }
    set_interest(p);
}

static void nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void start_connect(conn *c) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { finish(c, 1); return; }
    c->ep[1].fd = fd;
    nodelay(fd);
    if (connect(fd, (struct sockaddr *)&c->up, sizeof c->up) == 0) {
        c->connected = 1;
    } else if (errno == EINPROGRESS) {
        c->connecting = 1;
    } else {
        finish(c, 1);
        return;
    }
    if (c->connected) flush(c, 0);
    if (!c->dead) { set_interest(&c->ep[0]); set_interest(&c->ep[1]); }
}

static void on_connected(conn *c) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->ep[1].fd, SOL_SOCKET, SO_ERROR, &err, &len);
    c->connecting = 0;
    if (err) { finish(c, 1); return; }
    c->connected = 1;
    flush(c, 0);
    if (!c->dead) { set_interest(&c->ep[0]); set_interest(&c->ep[1]); }
}

static void on_accept(int lfd, const struct sockaddr_in *fixed, int up_port) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) perror("delayproxy: accept");
            return;
        }
        conn *c = calloc(1, sizeof *c);
        if (!c) { perror("delayproxy: calloc"); exit(1); }
        nodelay(fd);
        socklen_t len = sizeof c->up;
        if (fixed) c->up = *fixed;
        else getsockname(fd, (struct sockaddr *)&c->up, &len);  /* the address the client dialed */
        c->up.sin_port = htons((uint16_t)up_port);
        for (int i = 0; i < 2; i++) {
            c->ep[i].c = c; c->ep[i].idx = i; c->ep[i].fd = -1;
            c->d[i].reading = 1;
        }
        c->ep[0].fd = fd;
        n_conns++;
        set_interest(&c->ep[0]);
        push(&connect_q, now_ns() + rtt_ns, c, -1, NULL);
    }
}

static void run_due(void) {
    int64_t now = now_ns();
    event *e;
    while ((e = pop_due(&connect_q, now))) {
        conn *c = e->c;
        c->refs--;
        free(e);
        if (c->dead) release(c);
        else start_connect(c);
    }
    while ((e = pop_due(&data_q, now))) {
        conn *c = e->c;
        int d = e->dir;
        chunk *ch = e->ch;
        c->refs--;
        free(e);
        if (c->dead) {
            free(ch);
            release(c);
            continue;
        }
        dir *x = &c->d[d];
        if (ch) {
            x->inflight -= ch->len;
            x->pending += ch->len;
            if (x->tail) x->tail->next = ch; else x->head = ch;
            x->tail = ch;
        } else {
            x->eof_due = 1;
        }
        flush(c, d);
    }
}

static int wait_ms(void) {
    int64_t next = -1;
    if (connect_q.head) next = connect_q.head->due;
    if (data_q.head && (next < 0 || data_q.head->due < next)) next = data_q.head->due;
    if (next < 0) return -1;
    int64_t left = next - now_ns();
    if (left <= 0) return 0;
    return (int)((left + 999999) / 1000000);  /* round up: never early */
}

static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

static void usage(void) {
    fprintf(stderr, "usage: delayproxy --upstream-port PORT --rtt-ms MS [--port PORT] [--bind ADDR] "
                    "[--upstream-host ADDR]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *bind_addr = "0.0.0.0", *up_host = NULL;
    int port = 0, up_port = 0;
    double rtt_ms = -1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--port")) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bind")) bind_addr = argv[++i];
        else if (!strcmp(argv[i], "--upstream-port")) up_port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--upstream-host")) up_host = argv[++i];
        else if (!strcmp(argv[i], "--rtt-ms")) rtt_ms = atof(argv[++i]);
        else usage();
    }
    if (up_port <= 0 || rtt_ms < 0) usage();
    rtt_ns = (int64_t)(rtt_ms * 1e6);
    half_ns = rtt_ns / 2;

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;  /* no SA_RESTART: epoll_wait returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct sockaddr_in fixed = {0}, addr = {0};
    if (up_host) {
        fixed.sin_family = AF_INET;
        if (inet_pton(AF_INET, up_host, &fixed.sin_addr) != 1) usage();
    }
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, bind_addr, &addr.sin_addr) != 1) usage();
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 4096) < 0) {
        perror("delayproxy: bind/listen");
        return 1;
    }
    socklen_t alen = sizeof addr;
    getsockname(lfd, (struct sockaddr *)&addr, &alen);
    printf("%d\n", ntohs(addr.sin_port));
    fflush(stdout);

    ep_fd = epoll_create1(EPOLL_CLOEXEC);
    endpoint listener = {.fd = lfd, .idx = -1};
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listener};
    epoll_ctl(ep_fd, EPOLL_CTL_ADD, lfd, &lev);

    struct epoll_event evs[256];
    while (!stopping) {
        int n = epoll_wait(ep_fd, evs, 256, wait_ms());
        if (n < 0 && errno != EINTR) { perror("delayproxy: epoll_wait"); return 1; }
        for (int i = 0; i < n; i++) {
            endpoint *p = evs[i].data.ptr;
            if (p == &listener) {
                on_accept(lfd, up_host ? &fixed : NULL, up_port);
                continue;
            }
            conn *c = p->c;
            if (c->dead || p->fd < 0) continue;  /* closed earlier in this batch */
            uint32_t e = evs[i].events;
            if (p->idx == 1 && c->connecting) {
                if (e & (EPOLLOUT | EPOLLERR | EPOLLHUP)) on_connected(c);
                continue;
            }
            if (e & EPOLLERR) { finish(c, 1); continue; }
            if (e & (EPOLLIN | EPOLLHUP)) {
                if (p->interest & EPOLLIN) on_readable(p);
                else set_interest(p);
            }
            if (!c->dead && p->fd >= 0 && (e & EPOLLOUT)) flush(c, 1 - p->idx);
        }
        run_due();
        bury();
    }
    fprintf(stderr, "delayproxy: %llu connections, %llu bytes up, %llu bytes down\n", n_conns, bytes_dir[0],
            bytes_dir[1]);
    return 0;
}
