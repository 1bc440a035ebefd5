/* pLogP parameter measurement between ranks 0 and 1, in the manner of
 * Kielmann, Bal and Verstoep ("Fast measurement of LogP parameters for
 * message passing platforms", 2000), the tool Barchet-Estefanel and Mounié used for their Fig. 1.
 *
 * For each message size m rank 0 (the driver) measures, with rank 1 as peer:
 *   RTT(m)  ping of m bytes answered by an 8-byte reply;
 *   os(m)   the time MPI_Send(m) keeps the sender busy (a reply follows, so
 *           the next send never queues behind this one);
 *   or(m)   the time MPI_Recv(m) keeps the receiver busy once the message has
 *           had time to arrive (the receiver sleeps 1.5 RTT(m) before it);
 *   g(m)    the gap: n back-to-back MPI_Send(m), one reply, and
 *           g = (T - RTT(0)) / n, with n large enough that the stream lasts
 *           many round trips (the saturation point of the pLogP paper);
 *   L       = RTT(0)/2 - g(0), from pLogP's RTT(0) = 2 (L + g(0)).
 * Every quantity is sampled in batches until the 95 % confidence interval of
 * its median (order statistics, so VM stalls do not widen it as they would a
 * mean's) is within --ci of the median, or --max-time / -r is reached.
 * The sizes given with -s are measured first; then, where linear interpolation
 * between two neighbours mispredicts the size between them (geometric mean) by
 * more than --refine, that size is kept and both halves are refined again, so
 * points accumulate where the curves bend (protocol switches, windows). */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ options */

static double opt_ci = 0.05, opt_max_time = 2.0, opt_refine = 0.10, opt_stream_ms = 0;
static int opt_min_reps = 8, opt_depth = 4;
static const char *const own_flags[] = {"--ci", "--max-time", "--refine", "--stream-ms",
                                        "--min-reps", "--depth", NULL};

/* common.c hands this program's own flags over while it parses the rest. */
static const char *own_flag(const char *flag, const char *v)
{
    static char err[256];
    int integer = strcmp(flag, "--min-reps") == 0 || strcmp(flag, "--depth") == 0;
    char *end;
    double d = strtod(v, &end);
    if (*end || !(d >= 0) || (integer && (d < 1 || d != floor(d) || d > 1e6))) {
        snprintf(err, sizeof err, "%s: invalid value '%s'", flag, v);
        return err;
    }
    if (strcmp(flag, "--ci") == 0)
        opt_ci = d;
    else if (strcmp(flag, "--max-time") == 0)
        opt_max_time = d;
    else if (strcmp(flag, "--refine") == 0)
        opt_refine = d;
    else if (strcmp(flag, "--stream-ms") == 0)
        opt_stream_ms = d;
    else if (strcmp(flag, "--min-reps") == 0)
        opt_min_reps = (int)d;
    else
        opt_depth = (int)d;
    return NULL;
}

static const bench_prog prog = {
    .name = "plogp",
    .summary =
        "Measures pLogP parameters L, os(m), or(m), g(m) between ranks 0 and 1 (others idle).\n"
        "-s gives the base sizes (0 is always added); -r is the most samples per quantity.\n"
        "Own flags: --ci F (95 % CI half-width of the median, relative; default 0.05),\n"
        "  --min-reps N (default 8), --max-time S per quantity and size (default 2),\n"
        "  --refine F (interpolation error that triggers a midpoint; 0 = off; default 0.1),\n"
        "  --depth N (refinement depth, default 4), --stream-ms T (gap stream length, default\n"
        "  max(20, 5 RTT(0))). Output: one JSON object per size, then an \"plogp_L\" line.",
    .min_ranks = 2,
    .own_flags = own_flags,
    .own_flag = own_flag,
};

/* ----------------------------------------------------------- protocol */

enum { CMD_PING = 1, CMD_OS, CMD_OR, CMD_GAP, CMD_DONE };
enum { TAG_CMD = 7001, TAG_DATA, TAG_ACK };

typedef struct {
    int kind;
    int batch;    /* samples in this batch */
    int stream;   /* messages per gap sample */
    double delay; /* or: seconds the receiver waits before MPI_Recv */
    long long size;
} cmd_t;

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

static unsigned char *g_buf;
static size_t g_cap;

static void need_buf(size_t m)
{
    if (m <= g_cap)
        return;
    free(g_buf);
    g_buf = bench_alloc(1, m);
    g_cap = m;
}

/* Rank 1: serve commands until CMD_DONE. */
static void serve(void)
{
    for (;;) {
        cmd_t c;
        MPI_Recv(&c, (int)sizeof c, MPI_BYTE, 0, TAG_CMD, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (c.kind == CMD_DONE)
            return;
        need_buf((size_t)c.size);
        for (int b = 0; b < c.batch; b++) {
            double reply = 0;
            if (c.kind == CMD_GAP) {
                for (int i = 0; i < c.stream; i++)
                    MPI_Recv(g_buf, (int)c.size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (c.kind == CMD_OR) {
                sleep_s(c.delay);
                double t0 = bench_now();
                MPI_Recv(g_buf, (int)c.size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                reply = bench_now() - t0;
            } else {
                MPI_Recv(g_buf, (int)c.size, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
            MPI_Send(&reply, 1, MPI_DOUBLE, 0, TAG_ACK, MPI_COMM_WORLD);
        }
    }
}

/* --------------------------------------------------------- estimates */

typedef struct {
    double med, lo, hi;
    int n, converged, stream;
} est_t;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and its distribution-free 95 % confidence interval: the order
 * statistics n/2 -+ 0.98 sqrt(n) (normal approximation to the binomial). */
static void median_ci(double *v, int n, est_t *e)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    e->n = n;
    e->med = (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    int j = (int)floor(n / 2.0 - 0.98 * sqrt((double)n));
    int k = (int)ceil(n / 2.0 + 0.98 * sqrt((double)n)) - 1;
    if (j < 0)
        j = 0;
    if (k > n - 1)
        k = n - 1;
    e->lo = v[j];
    e->hi = v[k];
}

static double g_rtt0; /* RTT(0) median, subtracted from gap streams */

/* Rank 0: one quantity at one size, sampled until its CI is tight. */
static est_t sample(int kind, size_t m, int stream, double delay, int max_reps)
{
    double *v = bench_alloc((size_t)max_reps, sizeof *v);
    double *w = bench_alloc((size_t)max_reps, sizeof *w);
    est_t e = {0};
    int n = 0;
    double t_start = bench_now();
    need_buf(m);
    while (n < max_reps) {
        int batch = n == 0 ? opt_min_reps : (n < 32 ? 4 : 8);
        if (batch > max_reps - n)
            batch = max_reps - n;
        cmd_t c = {.kind = kind, .batch = batch, .stream = stream, .delay = delay, .size = (long long)m};
        MPI_Send(&c, (int)sizeof c, MPI_BYTE, 1, TAG_CMD, MPI_COMM_WORLD);
        for (int b = 0; b < batch; b++) {
            double reply = 0, t0, t1, t_op = 0;
            t0 = bench_now();
            if (kind == CMD_GAP) {
                for (int i = 0; i < stream; i++)
                    MPI_Send(g_buf, (int)m, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD);
            } else {
                MPI_Send(g_buf, (int)m, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD);
                t_op = bench_now();
            }
            MPI_Recv(&reply, 1, MPI_DOUBLE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            t1 = bench_now();
            switch (kind) {
            case CMD_PING: v[n] = t1 - t0; break;
            case CMD_OS: v[n] = t_op - t0; break;
            case CMD_OR: v[n] = reply; break;
            /* A stream shorter than the median RTT(0) means this stream's own
             * round trip beat the median, not that messages took negative
             * time: the per-message gap is then below resolution, i.e. 0. */
            case CMD_GAP: v[n] = fmax(0.0, (t1 - t0 - g_rtt0) / stream); break;
            }
            n++;
        }
        memcpy(w, v, (size_t)n * sizeof *w);
        median_ci(w, n, &e);
        /* Below a microsecond the VM's timer and scheduler noise dominate:
         * an interval that narrow is as converged as it can get. */
        double half = 0.5 * (e.hi - e.lo);
        e.converged = half <= opt_ci * fabs(e.med) || half <= 1e-6;
        if (e.converged || bench_now() - t_start > opt_max_time)
            break;
    }
    e.stream = stream;
    free(v);
    free(w);
    return e;
}

typedef struct {
    size_t m;
    int refined;
    est_t rtt, os, orr, g;
} point_t;

static point_t measure_size(size_t m, int max_reps)
{
    point_t p = {.m = m};
    p.rtt = sample(CMD_PING, m, 1, 0, max_reps);
    p.os = sample(CMD_OS, m, 1, 0, max_reps);
    p.orr = sample(CMD_OR, m, 1, 1.5 * p.rtt.med + 5e-4, max_reps);
    /* A stream long enough that the fixed cost (one RTT) is a small part
     * of it, estimated from what this size already showed. */
    double est = fmax(fmax(p.os.med, p.orr.med), fmax(0.5 * (p.rtt.med - g_rtt0), 1e-6));
    double target = opt_stream_ms > 0 ? opt_stream_ms * 1e-3 : fmax(0.02, 5 * g_rtt0);
    double n = ceil(target / est);
    int stream = n < 2 ? 2 : n > 2000 ? 2000 : (int)n;
    p.g = sample(CMD_GAP, m, stream, 0, max_reps);
    return p;
}

/* ------------------------------------------------------------- output */

static void json_est(const char *name, const est_t *e)
{
    printf(",\"%s\":{\"median\":%.9g,\"ci_lo\":%.9g,\"ci_hi\":%.9g,\"n\":%d,\"converged\":%s", name,
           e->med, e->lo, e->hi, e->n, e->converged ? "true" : "false");
    if (e->stream > 1)
        printf(",\"stream\":%d", e->stream);
    printf("}");
}

/* {"op":OP,"impl":...,"hosts":[H0,H1] -- the object is left open. */
static void line_start(const char *op, const char *h0, const char *h1)
{
    printf("{\"op\":\"%s\",\"impl\":\"%s\",\"hosts\":[", op, bench_impl());
    bench_json_string(stdout, h0);
    printf(",");
    bench_json_string(stdout, h1);
    printf("]");
}

static void hostname(int rank, char *out, size_t cap)
{
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    if (bench_rank() == rank)
        MPI_Get_processor_name(name, &len);
    MPI_Bcast(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, rank, MPI_COMM_WORLD);
    snprintf(out, cap, "%s", name);
}

static int cmp_point(const void *a, const void *b)
{
    size_t x = ((const point_t *)a)->m, y = ((const point_t *)b)->m;
    return (x > y) - (x < y);
}

#define MAX_POINTS 512

static double interp(const point_t *a, const point_t *b, size_t m, int which)
{
    const est_t *ea = which == 0 ? &a->g : which == 1 ? &a->os : &a->orr;
    const est_t *eb = which == 0 ? &b->g : which == 1 ? &b->os : &b->orr;
    double f = (double)(m - a->m) / (double)(b->m - a->m);
    return ea->med + f * (eb->med - ea->med);
}

/* Does point p (between a and b) bend away from the chord a-b? */
static int bends(const point_t *a, const point_t *p, const point_t *b)
{
    for (int w = 0; w < 3; w++) {
        const est_t *e = w == 0 ? &p->g : w == 1 ? &p->os : &p->orr;
        double lin = interp(a, b, p->m, w);
        double dev = fabs(e->med - lin);
        /* Only a deviation beyond the point's own confidence interval and
         * above 1 % of the one-way latency counts (2 us at least): on a WAN
         * a few us of scheduler noise on a 20 us gap is nothing a model of a
         * 5 ms-latency path can use, and chasing it only costs time. */
        if (dev > opt_refine * fabs(e->med) && dev > (e->hi - e->lo) && dev > fmax(2e-6, 0.005 * g_rtt0))
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_start(&argc, &argv, &prog, &o);
    if (opt_min_reps < 5)
        opt_min_reps = 5; /* the median's CI needs a handful of samples */
    int max_reps = o.reps < opt_min_reps ? opt_min_reps : o.reps;
    char h0[MPI_MAX_PROCESSOR_NAME], h1[MPI_MAX_PROCESSOR_NAME];
    hostname(0, h0, sizeof h0);
    hostname(1, h1, sizeof h1);
    MPI_Barrier(MPI_COMM_WORLD);

    if (bench_rank() == 1) {
        serve();
    } else if (bench_rank() == 0) {
        double t_begin = bench_now();
        static point_t pts[MAX_POINTS];
        int np = 0;
        /* Warm the connection (and its TCP window) up before any timing. */
        for (int i = 0; i < o.warmup; i++)
            sample(CMD_PING, 65536, 1, 0, opt_min_reps);
        g_rtt0 = 0;
        pts[np++] = measure_size(0, max_reps);
        g_rtt0 = pts[0].rtt.med;
        /* g(0) needed RTT(0) first: measure it again now that it is known. */
        pts[0].g = sample(CMD_GAP, 0, pts[0].g.stream, 0, max_reps);
        for (int i = 0; i < o.nsizes && np < MAX_POINTS; i++) {
            int dup = 0;
            for (int k = 0; k < np; k++)
                dup |= pts[k].m == o.sizes[i];
            if (!dup)
                pts[np++] = measure_size(o.sizes[i], max_reps);
        }
        qsort(pts, (size_t)np, sizeof *pts, cmp_point);

        /* Refinement: intervals whose midpoint bends away from the chord
         * are split again, up to --depth levels. */
        if (opt_refine > 0) {
            typedef struct { size_t a, b; int depth; } iv_t;
            static iv_t todo[4 * MAX_POINTS];
            int nt = 0;
            for (int k = 0; k + 1 < np; k++)
                todo[nt++] = (iv_t){pts[k].m, pts[k + 1].m, 1};
            while (nt > 0 && np < MAX_POINTS) {
                iv_t iv = todo[--nt];
                if (iv.a == 0 || iv.b < iv.a + 2)
                    continue; /* no geometric midpoint between 0 and 1, or none at all */
                size_t mid = (size_t)(long long)(0.5 + sqrt((double)iv.a * (double)iv.b));
                if (mid <= iv.a || mid >= iv.b)
                    continue;
                point_t p = measure_size(mid, max_reps);
                p.refined = 1;
                const point_t *pa = NULL, *pb = NULL;
                for (int k = 0; k < np; k++) {
                    if (pts[k].m == iv.a) pa = &pts[k];
                    if (pts[k].m == iv.b) pb = &pts[k];
                }
                int bent = pa && pb && bends(pa, &p, pb);
                pts[np++] = p;
                if (bent && iv.depth < opt_depth && nt + 2 <= 4 * MAX_POINTS) {
                    todo[nt++] = (iv_t){iv.a, mid, iv.depth + 1};
                    todo[nt++] = (iv_t){mid, iv.b, iv.depth + 1};
                }
            }
            qsort(pts, (size_t)np, sizeof *pts, cmp_point);
        }
        /* L comes from RTT(0): measure it again at the end and keep the
         * smaller median, because load from elsewhere only ever adds time and
         * a busy minute at the start would otherwise set L for every model. */
        est_t rtt_end = sample(CMD_PING, 0, 1, 0, max_reps);
        double rtt_start = pts[0].rtt.med;
        if (rtt_end.med < pts[0].rtt.med)
            pts[0].rtt = rtt_end;
        /* g(0) is subtracted from RTT(0)/2, so a busy spell during its
         * stream inflates it and deflates L (a CI run saw L = 3.9 ms on a
         * 5 ms path): it gets the same second chance. */
        g_rtt0 = pts[0].rtt.med;
        est_t g0_end = sample(CMD_GAP, 0, pts[0].g.stream, 0, max_reps);
        if (g0_end.med < pts[0].g.med)
            pts[0].g = g0_end;
        cmd_t done = {.kind = CMD_DONE};
        MPI_Send(&done, (int)sizeof done, MPI_BYTE, 1, TAG_CMD, MPI_COMM_WORLD);

        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        bench_library_version(version, sizeof version);
        for (int k = 0; k < np; k++) {
            line_start("plogp", h0, h1);
            printf(",\"impl_version\":");
            bench_json_string(stdout, version);
            printf(",\"size_bytes\":%zu,\"refined\":%s", pts[k].m, pts[k].refined ? "true" : "false");
            json_est("rtt_s", &pts[k].rtt);
            json_est("os_s", &pts[k].os);
            json_est("or_s", &pts[k].orr);
            json_est("g_s", &pts[k].g);
            printf("}\n");
        }
        double L = 0.5 * pts[0].rtt.med - pts[0].g.med;
        line_start("plogp_L", h0, h1);
        printf(",\"L_s\":%.9g,\"rtt0_s\":%.9g,\"g0_s\":%.9g,\"rtt0_first_s\":%.9g,\"rtt0_last_s\":%.9g,"
               "\"points\":%d,\"ci\":%g,\"elapsed_s\":%.3f}\n",
               L > 0 ? L : 0.5 * pts[0].rtt.med, pts[0].rtt.med, pts[0].g.med, rtt_start,
               rtt_end.med, np, opt_ci, bench_now() - t_begin);
        fflush(stdout);
    }
    free(g_buf);
    return bench_finish(0);
}
