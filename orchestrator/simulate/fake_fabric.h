/* The simulated fabric, shared by the fake perftest and the fake libnccl.so.2 (simulate/fabric.py
 * writes both files): a host's fake-fabric/host.conf (its name, rails, addresses, LIDs, line rates,
 * whether its perftest was built with CUDA) and the scenario file it names (faults by host, HCA,
 * pair and rail; hosts without GPUDirect RDMA).  Everything here is static: each fake includes it.
 */
#ifndef FAKE_FABRIC_H
#define FAKE_FABRIC_H
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RAILS 16
#define MAX_RULES 256

typedef struct { char hca[64], addr[64], gid[80]; int lid; double gbps; } rail_t;
/* peermem: a peer-memory module is loaded (else GPU memory registers only through DMA-BUF) */
static struct { char host[128], scenario[PATH_MAX]; rail_t rails[MAX_RAILS]; int nrails, cuda, peermem; } me = {.peermem = 1};
typedef struct { char kind[16], a[128], b[128], hca[64]; double factor; } rule_t;
static rule_t rules[MAX_RULES];
static int nrules;
static double base_lat_us = 1.9;
static unsigned seed = 1;

/* Read <dir>/../../fake-fabric/host.conf, `dir` being where the fake was found (<root>/usr/bin or
 * <root>/usr/lib); 0 when there is none (not a simulated host). */
static int read_conf_in(const char *dir)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/../../fake-fabric/host.conf", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char k[32], a[256], b[128], c[128], d[128];
        int n = sscanf(line, "%31s %255s %127s %127s %127s", k, a, b, c, d);
        if (n < 2) continue;
        if (!strcmp(k, "host")) snprintf(me.host, sizeof me.host, "%s", a);
        else if (!strcmp(k, "scenario")) snprintf(me.scenario, sizeof me.scenario, "%s", a);
        else if (!strcmp(k, "cuda")) me.cuda = atoi(a);
        else if (!strcmp(k, "peermem")) me.peermem = atoi(a);
        else if (!strcmp(k, "rail") && n >= 5 && me.nrails < MAX_RAILS) {
            rail_t *r = &me.rails[me.nrails++];
            snprintf(r->hca, sizeof r->hca, "%s", a);
            snprintf(r->addr, sizeof r->addr, "%s", b);
            r->lid = (int)strtol(c, NULL, 0);
            r->gbps = atof(d);
        }
    }
    fclose(f);
    if (!me.scenario[0]) return 1;
    f = fopen(me.scenario, "r");
    if (!f) return 1; /* a healthy fabric */
    while (fgets(line, sizeof line, f) && nrules < MAX_RULES) {
        rule_t r;
        memset(&r, 0, sizeof r);
        char f1[128] = "", f2[128] = "", f3[128] = "", f4[64] = "";
        int n = sscanf(line, "%15s %127s %127s %127s %63s", r.kind, f1, f2, f3, f4);
        if (n < 2 || r.kind[0] == '#') continue;
        if (!strcmp(r.kind, "seed")) { seed = (unsigned)strtoul(f1, NULL, 10); continue; }
        if (!strcmp(r.kind, "latency_us")) { base_lat_us = atof(f1); continue; }
        if (!strcmp(r.kind, "host") && n >= 3) { snprintf(r.a, sizeof r.a, "%s", f1); r.factor = atof(f2); }
        else if (!strcmp(r.kind, "hca") && n >= 4) { snprintf(r.a, sizeof r.a, "%s", f1); snprintf(r.hca, sizeof r.hca, "%s", f2); r.factor = atof(f3); }
        else if (!strcmp(r.kind, "rail") && n >= 3) { snprintf(r.hca, sizeof r.hca, "%s", f1); r.factor = atof(f2); }
        else if (!strcmp(r.kind, "pair") && n >= 5) { snprintf(r.a, sizeof r.a, "%s", f1); snprintf(r.b, sizeof r.b, "%s", f2); snprintf(r.hca, sizeof r.hca, "%s", f3); r.factor = atof(f4); }
        else if (!strcmp(r.kind, "nogdr")) { snprintf(r.a, sizeof r.a, "%s", f1); }
        else if (!strcmp(r.kind, "forgeid")) { snprintf(r.a, sizeof r.a, "%s", f1); }
        else continue;
        rules[nrules++] = r;
    }
    fclose(f);
    return 1;
}

static rail_t *my_rail(const char *hca)
{
    for (int i = 0; i < me.nrails; i++) if (!strcmp(me.rails[i].hca, hca)) return &me.rails[i];
    return NULL;
}

static int has_gdr(const char *host)
{
    for (int i = 0; i < nrules; i++) if (!strcmp(rules[i].kind, "nogdr") && !strcmp(rules[i].a, host)) return 0;
    return 1;
}

/* A hostile host: the ncclUniqueId it hands out names a port nobody listens on (a forged id). */
static inline int forges_id(const char *host)
{
    for (int i = 0; i < nrules; i++) if (!strcmp(rules[i].kind, "forgeid") && !strcmp(rules[i].a, host)) return 1;
    return 0;
}

/* The product of every factor that applies to this pair on this rail. */
static double pair_factor(const char *a, const char *ahca, const char *b, const char *bhca)
{
    double f = 1.0;
    for (int i = 0; i < nrules; i++) {
        rule_t *r = &rules[i];
        if (!strcmp(r->kind, "host") && (!strcmp(r->a, a) || !strcmp(r->a, b))) f *= r->factor;
        else if (!strcmp(r->kind, "hca") && ((!strcmp(r->a, a) && !strcmp(r->hca, ahca)) ||
                                              (!strcmp(r->a, b) && !strcmp(r->hca, bhca)))) f *= r->factor;
        else if (!strcmp(r->kind, "rail") && (!strcmp(r->hca, ahca) || !strcmp(r->hca, bhca))) f *= r->factor;
        else if (!strcmp(r->kind, "pair") && !strcmp(r->hca, ahca) && !strcmp(r->hca, bhca) &&
                 ((!strcmp(r->a, a) && !strcmp(r->b, b)) || (!strcmp(r->a, b) && !strcmp(r->b, a)))) f *= r->factor;
    }
    return f;
}

/* A deterministic noise in [-spread, +spread] for this pair and test. */
static double noise(const char *a, const char *b, const char *hca, const char *tool, double spread)
{
    unsigned h = 2166136261u ^ seed;
    const char *parts[] = {a, b, hca, tool};
    for (int p = 0; p < 4; p++)
        for (const char *c = parts[p]; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
    return ((double)(h % 20001) / 10000.0 - 1.0) * spread;
}

#endif
