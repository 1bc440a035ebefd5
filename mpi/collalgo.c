/* The collective algorithms modelled by Barchet-Estefanel and Mounié (Tables 1-3), written on MPI
 * point-to-point so that what `gridsplit model` predicts is exactly what runs:
 * no library algorithm selection, protocol switch or segmentation of its own
 * hides between the model and the measurement. Root is rank 0.
 *
 *   broadcast (Table 1): flat, flat rendezvous, segmented flat, chain, chain
 *     rendezvous, segmented chain (pipeline), binary, binomial, binomial
 *     rendezvous, segmented binomial;
 *   scatter and gather (Table 2): flat, chain, binomial;
 *   all-to-all (Table 3, Fig. 8): direct exchange, and the rotated variant.
 *
 * "Rendezvous" is the seed's explicit handshake: a 1-byte request to send, a
 * 1-byte clearance, then the data (2 g(1) + 3 L per edge beyond the data).
 * Sends are blocking MPI_Send as in the pLogP measurement (plogp.c), so the
 * gap g(m) measured there is the cost of each send here; pipelined
 * (segmented) algorithms use MPI_Isend so that forwarding segment k overlaps
 * receiving k+1, which is what their models assume.
 *
 * Timing (--timing): "sync" (default) starts every rank at the same instant
 * of a shared clock (rank 0 picks a start time a margin ahead and broadcasts
 * it; all sleep until then) and a sample is the latest end minus that start.
 * It needs ranks that share CLOCK_MONOTONIC, as every namespace of the lab
 * does. "barrier" is coll.c's: the slowest rank's time from the end of a
 * barrier, for ranks on separate machines; it under-counts by the barrier's
 * exit skew, which across a WAN is up to one latency. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const ops[] = {
    "bcast_flat", "bcast_flat_rdv", "bcast_seg_flat", "bcast_chain", "bcast_chain_rdv",
    "bcast_seg_chain", "bcast_binary", "bcast_binomial", "bcast_binomial_rdv", "bcast_seg_binomial",
    "scatter_flat", "scatter_chain", "scatter_binomial",
    "gather_flat", "gather_chain", "gather_binomial",
    "alltoall_direct", "alltoall_rotated", NULL};

#define MAX_ALGOS 32
static const char *opt_algos[MAX_ALGOS];
static int opt_nalgos;
static size_t opt_seg[BENCH_MAX_SIZES];
static int opt_nseg;
static int opt_sync = 1;
static double opt_margin = -1;

static const char *const own_flags[] = {"-o", "--op", "--seg", "--timing", "--margin-ms", NULL};

/* common.c hands these over while it parses the rest; -o is ours because
 * it takes a list, where common.c's takes one name. */
static const char *own_flag(const char *flag, const char *v)
{
    static char err[256];
    if (strcmp(flag, "--seg") == 0) {
        const char *p = v;
        opt_nseg = 0;
        for (;;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            size_t *seg = &opt_seg[opt_nseg];
            if (opt_nseg == BENCH_MAX_SIZES || bench_parse_size(p, len, seg) != 0 || *seg == 0) {
                snprintf(err, sizeof err, "--seg: invalid segment size list '%s' "
                         "(positive byte counts, K/M/G suffixes)", v);
                return err;
            }
            opt_nseg++;
            if (!comma)
                return NULL;
            p = comma + 1;
        }
    }
    if (strcmp(flag, "--timing") == 0) {
        if (strcmp(v, "sync") != 0 && strcmp(v, "barrier") != 0) {
            snprintf(err, sizeof err, "--timing: '%s' is neither sync nor barrier", v);
            return err;
        }
        opt_sync = strcmp(v, "sync") == 0;
        return NULL;
    }
    if (strcmp(flag, "--margin-ms") == 0) {
        char *end;
        opt_margin = strtod(v, &end) * 1e-3;
        if (*end || !(opt_margin >= 0)) {
            snprintf(err, sizeof err, "--margin-ms: invalid value '%s'", v);
            return err;
        }
        return NULL;
    }
    /* -o, --op: a comma-separated list of names from ops[] */
    const char *tok = v;
    for (;;) {
        size_t len = strcspn(tok, ",");
        const char *const *p = ops;
        while (*p && !(strlen(*p) == len && strncmp(*p, tok, len) == 0))
            p++;
        if (!*p) {
            snprintf(err, sizeof err, "-o: unknown algorithm '%.*s'", (int)len, tok);
            return err;
        }
        if (opt_nalgos == MAX_ALGOS) {
            snprintf(err, sizeof err, "-o: more than %d algorithms", MAX_ALGOS);
            return err;
        }
        opt_algos[opt_nalgos++] = *p;
        if (!tok[len])
            return NULL;
        tok += len + 1;
    }
}

static const bench_prog prog = {
    .name = "collalgo",
    .summary =
        "The collective algorithms of Barchet-Estefanel and Mounié Tables 1-3 on MPI point-to-point, root 0.\n"
        "SIZE is m of the tables: bytes per rank (scatter, gather, alltoall: per rank pair).\n"
        "Own flags: -o takes a comma-separated list of algorithms, run one after the other;\n"
        "  --seg LIST segment size per -s entry (one value: for all; default SIZE) for the\n"
        "  bcast_seg_* algorithms; --timing sync|barrier (default sync, see mpi/README.md);\n"
        "  --margin-ms T start margin for sync (default: 2x a measured barrier + 1 ms).",
    .ops = ops,
    .default_op = "bcast_binomial",
    .min_ranks = 1,
    .own_flags = own_flags,
    .own_flag = own_flag,
};

/* ------------------------------------------------------------ helpers */

enum { TAG_DATA = 8001, TAG_RTS, TAG_CTS };

static void sleep_until(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_nsec = 999999999L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
}

static void send_(const void *b, size_t n, int to) { MPI_Send(b, (int)n, MPI_BYTE, to, TAG_DATA, MPI_COMM_WORLD); }
static void recv_(void *b, size_t n, int from)
{
    MPI_Recv(b, (int)n, MPI_BYTE, from, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/* The seed's rendezvous: request, clearance, data. */
static void rdv_send(const void *b, size_t n, int to)
{
    char x = 0;
    MPI_Send(&x, 1, MPI_BYTE, to, TAG_RTS, MPI_COMM_WORLD);
    MPI_Recv(&x, 1, MPI_BYTE, to, TAG_CTS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    send_(b, n, to);
}
static void rdv_recv(void *b, size_t n, int from)
{
    char x = 0;
    MPI_Recv(&x, 1, MPI_BYTE, from, TAG_RTS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(&x, 1, MPI_BYTE, from, TAG_CTS, MPI_COMM_WORLD);
    recv_(b, n, from);
}

/* Binomial tree rooted at 0 (MPICH's shape): parent = r minus its lowest set
 * bit; children r + 2^j for 2^j below that bit, largest subtree first. */
static int binomial_parent(int r, int *mask_out)
{
    int mask = 1;
    while (mask < bench_size()) {
        if (r & mask) {
            *mask_out = mask;
            return r - mask;
        }
        mask <<= 1;
    }
    *mask_out = mask;
    return -1;
}

/* ---------------------------------------------------------- broadcast */

static MPI_Request *g_req;
static MPI_Status *g_st;
static int g_nreq_cap;

static MPI_Request *reqs(int n)
{
    if (n > g_nreq_cap) {
        free(g_req);
        free(g_st);
        g_req = bench_alloc((size_t)n, sizeof *g_req);
        g_st = bench_alloc((size_t)n, sizeof *g_st);
        g_nreq_cap = n;
    }
    return g_req;
}

/* A real status array: GCC's -Wstringop-overflow misreads MPICH's
 * MPI_STATUSES_IGNORE constant as a zero-sized array under -Werror. */
static void waitall_(int n, MPI_Request *rq) { MPI_Waitall(n, rq, g_st); }

static size_t nseg(size_t m, size_t s) { return m == 0 ? 1 : (m + s - 1) / s; }
static size_t seglen(size_t m, size_t s, size_t i) { return m == 0 ? 0 : (i + 1) * s <= m ? s : m - i * s; }

/* Segmented pipeline from `parent` to `children`: every segment is received
 * (receives pre-posted) and forwarded as soon as it is complete. */
static void seg_forward(unsigned char *buf, size_t m, size_t s, int parent, const int *children, int nch)
{
    size_t k = nseg(m, s);
    MPI_Request *rr = reqs((int)(k * (size_t)(nch + 1)));
    MPI_Request *sr = rr + k;
    int ns = 0;
    if (parent >= 0)
        for (size_t i = 0; i < k; i++)
            MPI_Irecv(buf + i * s, (int)seglen(m, s, i), MPI_BYTE, parent, TAG_DATA, MPI_COMM_WORLD, &rr[i]);
    for (size_t i = 0; i < k; i++) {
        if (parent >= 0)
            MPI_Wait(&rr[i], MPI_STATUS_IGNORE);
        for (int c = 0; c < nch; c++)
            MPI_Isend(buf + i * s, (int)seglen(m, s, i), MPI_BYTE, children[c], TAG_DATA, MPI_COMM_WORLD, &sr[ns++]);
    }
    waitall_(ns, sr);
}

static void bcast(const char *algo, unsigned char *buf, size_t m, size_t s)
{
    const int r = bench_rank(), P = bench_size();
    if (strcmp(algo, "bcast_flat") == 0 || strcmp(algo, "bcast_flat_rdv") == 0) {
        int rdv = strcmp(algo, "bcast_flat_rdv") == 0;
        if (r == 0) {
            for (int d = 1; d < P; d++)
                rdv ? rdv_send(buf, m, d) : send_(buf, m, d);
        } else {
            rdv ? rdv_recv(buf, m, 0) : recv_(buf, m, 0);
        }
    } else if (strcmp(algo, "bcast_seg_flat") == 0) {
        /* Table 1: (P-1) x g(s) x k: the root sends every segment to every
         * child, one child after the other. */
        size_t k = nseg(m, s);
        if (r == 0) {
            for (int d = 1; d < P; d++)
                for (size_t i = 0; i < k; i++)
                    send_(buf + i * s, seglen(m, s, i), d);
        } else {
            for (size_t i = 0; i < k; i++)
                recv_(buf + i * s, seglen(m, s, i), 0);
        }
    } else if (strcmp(algo, "bcast_chain") == 0 || strcmp(algo, "bcast_chain_rdv") == 0) {
        int rdv = strcmp(algo, "bcast_chain_rdv") == 0;
        if (r > 0)
            rdv ? rdv_recv(buf, m, r - 1) : recv_(buf, m, r - 1);
        if (r < P - 1)
            rdv ? rdv_send(buf, m, r + 1) : send_(buf, m, r + 1);
    } else if (strcmp(algo, "bcast_seg_chain") == 0) {
        int child = r + 1;
        seg_forward(buf, m, s, r > 0 ? r - 1 : -1, &child, r < P - 1 ? 1 : 0);
    } else if (strcmp(algo, "bcast_binary") == 0) {
        if (r > 0)
            recv_(buf, m, (r - 1) / 2);
        for (int c = 2 * r + 1; c <= 2 * r + 2 && c < P; c++)
            send_(buf, m, c);
    } else { /* binomial, binomial_rdv, seg_binomial */
        int rdv = strcmp(algo, "bcast_binomial_rdv") == 0;
        int seg = strcmp(algo, "bcast_seg_binomial") == 0;
        int mask, parent = binomial_parent(r, &mask);
        int children[32], nch = 0;
        for (mask >>= 1; mask > 0; mask >>= 1)
            if (r + mask < P)
                children[nch++] = r + mask;
        if (seg) {
            seg_forward(buf, m, s, parent, children, nch);
            return;
        }
        if (parent >= 0)
            rdv ? rdv_recv(buf, m, parent) : recv_(buf, m, parent);
        for (int c = 0; c < nch; c++)
            rdv ? rdv_send(buf, m, children[c]) : send_(buf, m, children[c]);
    }
}

/* ------------------------------------------------- scatter and gather */

/* Every rank holds a P x m buffer indexed by destination/source rank, so
 * that the blocks forwarded by chains and trees stay contiguous. */
static void scatter(const char *algo, unsigned char *buf, size_t m)
{
    const int r = bench_rank(), P = bench_size();
    if (strcmp(algo, "scatter_flat") == 0) {
        if (r == 0)
            for (int d = 1; d < P; d++)
                send_(buf + (size_t)d * m, m, d);
        else
            recv_(buf + (size_t)r * m, m, 0);
    } else if (strcmp(algo, "scatter_chain") == 0) {
        /* Rank r receives blocks r..P-1 and forwards r+1..P-1. */
        if (r > 0)
            recv_(buf + (size_t)r * m, (size_t)(P - r) * m, r - 1);
        if (r < P - 1)
            send_(buf + (size_t)(r + 1) * m, (size_t)(P - r - 1) * m, r + 1);
    } else { /* binomial: each child gets its whole subtree's blocks */
        int mask, parent = binomial_parent(r, &mask);
        if (parent >= 0) {
            int cnt = mask < P - r ? mask : P - r;
            recv_(buf + (size_t)r * m, (size_t)cnt * m, parent);
        }
        for (mask >>= 1; mask > 0; mask >>= 1)
            if (r + mask < P) {
                int c = r + mask, cnt = mask < P - c ? mask : P - c;
                send_(buf + (size_t)c * m, (size_t)cnt * m, c);
            }
    }
}

static void gather(const char *algo, unsigned char *buf, size_t m)
{
    const int r = bench_rank(), P = bench_size();
    if (strcmp(algo, "gather_flat") == 0) {
        /* The MPI5000 gather: the root posts every receive, all send at once. */
        if (r == 0) {
            MPI_Request *rq = reqs(P);
            for (int s = 1; s < P; s++)
                MPI_Irecv(buf + (size_t)s * m, (int)m, MPI_BYTE, s, TAG_DATA, MPI_COMM_WORLD, &rq[s - 1]);
            waitall_(P - 1, rq);
        } else {
            send_(buf + (size_t)r * m, m, 0);
        }
    } else if (strcmp(algo, "gather_chain") == 0) {
        /* Rank r receives blocks r+1..P-1 from r+1 and sends r..P-1 to r-1. */
        if (r < P - 1)
            recv_(buf + (size_t)(r + 1) * m, (size_t)(P - r - 1) * m, r + 1);
        if (r > 0)
            send_(buf + (size_t)r * m, (size_t)(P - r) * m, r - 1);
    } else { /* binomial, the mirror of the scatter */
        int mask = 1;
        while (mask < P) {
            if (r & mask) {
                int cnt = mask < P - r ? mask : P - r;
                send_(buf + (size_t)r * m, (size_t)cnt * m, r - mask);
                break;
            }
            if (r + mask < P) {
                int c = r + mask, cnt = mask < P - c ? mask : P - c;
                recv_(buf + (size_t)c * m, (size_t)cnt * m, c);
            }
            mask <<= 1;
        }
    }
}

static void alltoall(const char *algo, const unsigned char *sb, unsigned char *rb, size_t m)
{
    const int r = bench_rank(), P = bench_size();
    int rot = strcmp(algo, "alltoall_rotated") == 0;
    MPI_Request *rq = reqs(2 * P);
    int n = 0;
    /* Direct exchange (Barchet-Estefanel and Mounié §5): every send and receive is started at
     * once; "direct" has every rank send in the same order 0..P-1 (the
     * receiver-overload case of Fig. 8), "rotated" starts at r+1. */
    for (int i = 1; i < P; i++) {
        int from = rot ? (r - i + P) % P : (i - 1 < r ? i - 1 : i);
        MPI_Irecv(rb + (size_t)from * m, (int)m, MPI_BYTE, from, TAG_DATA, MPI_COMM_WORLD, &rq[n++]);
    }
    for (int i = 1; i < P; i++) {
        int to = rot ? (r + i) % P : (i - 1 < r ? i - 1 : i);
        MPI_Isend(sb + (size_t)to * m, (int)m, MPI_BYTE, to, TAG_DATA, MPI_COMM_WORLD, &rq[n++]);
    }
    waitall_(n, rq);
    memcpy(rb + (size_t)r * m, sb + (size_t)r * m, m);
}

/* ------------------------------------------------------------ running */

typedef enum { K_BCAST, K_SCATTER, K_GATHER, K_ALLTOALL } kind_t;

static kind_t kind_of(const char *a)
{
    return strncmp(a, "bcast", 5) == 0     ? K_BCAST
           : strncmp(a, "scatter", 7) == 0 ? K_SCATTER
           : strncmp(a, "gather", 6) == 0  ? K_GATHER
                                           : K_ALLTOALL;
}

/* Payload layout (as coll.c): bcast carries root's stream; scatter block d
 * is root's stream at offset d*m; gather block s is rank s's stream;
 * alltoall block d of rank s is s's stream at offset d*m. */
static void prepare(kind_t k, unsigned char *sb, unsigned char *rb, size_t m, long rep)
{
    const int r = bench_rank(), P = bench_size();
    const size_t all = (size_t)P * m;
    switch (k) {
    case K_BCAST:
        r == 0 ? bench_fill_send(rb, m, 0, rep) : pattern_poison(rb, m, 0, rep, 0);
        break;
    case K_SCATTER:
        r == 0 ? bench_fill_send(rb, all, 0, rep) : pattern_poison(rb, all, 0, rep, 0);
        break;
    case K_GATHER:
        for (int s = 0; s < P; s++)
            s == r ? bench_fill_send(rb + (size_t)s * m, m, s, rep)
                   : pattern_poison(rb + (size_t)s * m, m, s, rep, 0);
        break;
    case K_ALLTOALL:
        bench_fill_send(sb, all, r, rep);
        for (int s = 0; s < P; s++)
            pattern_poison(rb + (size_t)s * m, m, s, rep, (size_t)r * m);
        break;
    }
}

static int verify(kind_t k, const unsigned char *rb, size_t m, long rep, const char *algo)
{
    const int r = bench_rank(), P = bench_size();
    int ok = 1;
    switch (k) {
    case K_BCAST: ok = pattern_check(rb, m, 0, rep, 0, algo); break;
    case K_SCATTER: ok = pattern_check(rb + (size_t)r * m, m, 0, rep, (size_t)r * m, algo); break;
    case K_GATHER:
        if (r == 0)
            for (int s = 0; s < P; s++)
                ok &= pattern_check(rb + (size_t)s * m, m, s, rep, 0, algo);
        break;
    case K_ALLTOALL:
        for (int s = 0; s < P; s++)
            ok &= pattern_check(rb + (size_t)s * m, m, s, rep, (size_t)r * m, algo);
        break;
    }
    return ok;
}

static double g_margin;

static int run(const bench_opts *o, const char *algo, size_t m, size_t seg)
{
    const int r = bench_rank(), P = bench_size();
    const kind_t k = kind_of(algo);
    const int total = o->warmup + o->reps;
    unsigned char *sb = k == K_ALLTOALL ? bench_alloc((size_t)P, m) : NULL;
    unsigned char *rb = bench_alloc(k == K_BCAST ? 1 : (size_t)P, m);
    double *t_start = bench_alloc((size_t)o->reps, sizeof *t_start);
    double *t_end = bench_alloc((size_t)o->reps, sizeof *t_end);
    double *t_max = bench_alloc((size_t)o->reps, sizeof *t_max);
    int bad = 0;

    bench_cpu_mark();
    prepare(k, sb, rb, m, 0);
    for (int rep = 0; rep < total; rep++) {
        if (o->check)
            prepare(k, sb, rb, m, rep);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0;
        if (opt_sync) {
            t0 = bench_now() + g_margin;
            MPI_Bcast(&t0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            sleep_until(t0);
        } else {
            t0 = bench_now();
        }
        switch (k) {
        case K_BCAST: bcast(algo, rb, m, seg); break;
        case K_SCATTER: scatter(algo, rb, m); break;
        case K_GATHER: gather(algo, rb, m); break;
        case K_ALLTOALL: alltoall(algo, sb, rb, m); break;
        }
        double t1 = bench_now();
        if (rep >= o->warmup) {
            t_start[rep - o->warmup] = t0;
            t_end[rep - o->warmup] = opt_sync ? t1 : t1 - t0;
        }
        if (o->check)
            bad += !verify(k, rb, m, rep, algo);
    }
    /* sync: latest end minus the common start; barrier: longest duration. */
    MPI_Reduce(t_end, t_max, o->reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (r == 0 && opt_sync)
        for (int i = 0; i < o->reps; i++)
            t_max[i] -= t_start[i];
    bench_result res = {
        .op = algo,
        .timing = opt_sync ? "sync_start" : "max_over_ranks",
        .size = m,
        .samples = t_max,
        .bad = bad,
    };
    bench_report(o, &res);
    free(sb);
    free(rb);
    free(t_start);
    free(t_end);
    free(t_max);
    return bad;
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_start(&argc, &argv, &prog, &o);
    if (opt_nseg > 1 && opt_nseg != o.nsizes)
        bench_die_usage("--seg: %d segment sizes for %d message sizes (give one, or one per size)",
                        opt_nseg, o.nsizes);
    if (opt_nalgos == 0)
        opt_algos[opt_nalgos++] = prog.default_op;
    if (opt_sync) {
        /* The start must lie beyond the broadcast of the start time on every
         * rank: twice the slowest of a few barrier + bcast rounds, plus 1 ms
         * for wake-up jitter, unless given. */
        double worst = 0;
        for (int i = 0; i < 5; i++) {
            double t = bench_now(), x = t;
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Bcast(&x, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            double d = bench_now() - t;
            MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (d > worst)
                worst = d;
        }
        g_margin = opt_margin >= 0 ? opt_margin : 2 * worst + 1e-3;
    }
    int bad = 0;
    for (int a = 0; a < opt_nalgos; a++)
        for (int i = 0; i < o.nsizes; i++) {
            size_t seg = opt_nseg == 0 ? o.sizes[i] : opt_seg[opt_nseg == 1 ? 0 : i];
            if (seg == 0)
                seg = 1;
            bad += run(&o, opt_algos[a], o.sizes[i], seg);
        }
    free(g_req);
    free(g_st);
    return bench_finish(bad);
}
