/* Implementation of the shared benchmark plumbing declared in common.h.
 * Everything that decides how a number is produced or printed lives here so
 * the programs cannot drift apart. */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include "common.h"

#include <sys/resource.h>
#include <time.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The implementation is fixed when the binary is built, so record it from
 * the headers rather than guessing from the runtime version string. */
#if defined(OMPI_MAJOR_VERSION)
#define BENCH_IMPL "openmpi"
#elif defined(MPICH_VERSION)
#define BENCH_IMPL "mpich"
#else
#define BENCH_IMPL "unknown"
#endif

static const bench_prog *g_prog;
static int g_rank, g_size;
/* Set by --finalize-stagger and --inject-fault (usage() says what they do). */
static long g_finalize_stagger_ms = 50;
static int g_inject_fault;

int bench_rank(void) { return g_rank; }
int bench_size(void) { return g_size; }

/* ---------------------------------------------------------------- CLI */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s [-s SIZE[,SIZE...]] [-r REPS] [-w WARMUP] [--osu] [--check]%s\n"
            "%s\n"
            "  -s, --size LIST   message size(s) in bytes; suffix K=1e3, M=1e6, G=1e9\n"
            "                    (powers of ten); one measurement per entry "
            "(default 100K)\n"
            "  -r, --reps N      timed repetitions per size (default %d)\n"
            "  -w, --warmup N    untimed repetitions before them (default 0)\n",
            g_prog->name, g_prog->ops ? " -o OP" : "", g_prog->summary,
            BENCH_DEFAULT_REPS);
    if (g_prog->ops) {
        fprintf(f, "  -o, --op OP       one of:");
        for (const char *const *p = g_prog->ops; *p; p++)
            fprintf(f, " %s", *p);
        fprintf(f, "%s%s%s\n", g_prog->default_op ? " (default " : "",
                g_prog->default_op ? g_prog->default_op : "",
                g_prog->default_op ? ")" : "");
    }
    fprintf(f,
            "      --osu         OSU-Micro-Benchmarks-style columns instead of JSON\n"
            "      --check       fill rank/rep-dependent payloads and verify them;\n"
            "                    exit 1 if any payload is wrong\n"
            "      --finalize-stagger MS\n"
            "                    MPICH builds: enter MPI_Finalize in rank order, MS ms\n"
            "                    apart (default 50; 0: all at once; docs/lab.md)\n"
            "      --inject-fault\n"
            "                    test hook: flip one byte of the payload sent at\n"
            "                    rep 0, so that --check must fail (make test)\n"
            "  -h, --help        this text\n");
}

/* Usage errors are detected identically on every rank (same argv), so only
 * rank 0 speaks and everyone leaves cleanly with the same code. */
void bench_die_usage(const char *fmt, ...)
{
    if (g_rank == 0) {
        va_list ap;
        fprintf(stderr, "%s: ", g_prog->name);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, " (try --help)\n");
    }
    MPI_Finalize();
    exit(BENCH_EXIT_USAGE);
}

int bench_parse_size(const char *s, size_t len, size_t *out)
{
    if (len == 0 || !isdigit((unsigned char)s[0]))
        return -1;
    unsigned long long v = 0;
    size_t i = 0;
    for (; i < len && isdigit((unsigned char)s[i]); i++) {
        if (v > (ULLONG_MAX - 9) / 10)
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    unsigned long long mult = 1;
    if (i < len) {
        switch (s[i]) {
        case 'K': case 'k': mult = 1000ULL; break;
        case 'M': case 'm': mult = 1000000ULL; break;
        case 'G': case 'g': mult = 1000000000ULL; break;
        default: return -1;
        }
        i++;
    }
    if (i != len || (v != 0 && mult > ULLONG_MAX / v))
        return -1;
    v *= mult;
    /* MPI counts are ints and every program sends `size` MPI_BYTEs. */
    if (v > (unsigned long long)INT_MAX)
        return -1;
    *out = (size_t)v;
    return 0;
}

static void parse_sizes(const char *arg, bench_opts *o)
{
    o->nsizes = 0;
    const char *p = arg;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (o->nsizes == BENCH_MAX_SIZES)
            bench_die_usage("-s: more than %d sizes", BENCH_MAX_SIZES);
        if (bench_parse_size(p, len, &o->sizes[o->nsizes]) != 0)
            bench_die_usage("-s: invalid size '%.*s' in '%s' (expected bytes with an "
                      "optional K/M/G suffix, powers of ten, at most %d)",
                      (int)len, p, arg, INT_MAX);
        o->nsizes++;
        if (!comma)
            break;
        p = comma + 1;
    }
}

static int parse_int(const char *flag, const char *arg, int min)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (!isdigit((unsigned char)arg[0]) || *end || errno || v < min || v > INT_MAX)
        bench_die_usage("%s: invalid value '%s' (expected an integer >= %d)", flag, arg, min);
    return (int)v;
}

/* Matches "-x VALUE", "--long VALUE" and "--long=VALUE". */
static const char *opt_value(int argc, char **argv, int *i, const char *sflag,
                             const char *lflag)
{
    const char *a = argv[*i];
    size_t ll = strlen(lflag);
    if (strcmp(a, sflag) == 0 || strcmp(a, lflag) == 0) {
        if (*i + 1 >= argc)
            bench_die_usage("%s needs a value", a);
        return argv[++*i];
    }
    if (strncmp(a, lflag, ll) == 0 && a[ll] == '=')
        return a + ll + 1;
    return NULL;
}

/* By hand rather than with getopt_long: each program adds flags of its own at
 * run time (bench_prog.own_flags, looked up first so that one may take over -o),
 * and every rank must reach the same verdict on the same argv without printing;
 * the loop below is shorter than merging per-program option tables. */
static void parse_args(int argc, char **argv, bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->sizes[0] = 100000;
    o->nsizes = 1;
    o->reps = BENCH_DEFAULT_REPS;
    o->op = g_prog->default_op;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        const char *const *own = g_prog->own_flags;
        while (own && *own && !(v = opt_value(argc, argv, &i, *own, *own)))
            own++;
        if (own && *own) {
            const char *err = g_prog->own_flag(*own, v);
            if (err)
                bench_die_usage("%s", err);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (g_rank == 0)
                usage(stdout);
            MPI_Finalize();
            exit(BENCH_EXIT_OK);
        } else if (strcmp(a, "--osu") == 0) {
            o->osu = 1;
        } else if (strcmp(a, "--check") == 0) {
            o->check = 1;
        } else if (strcmp(a, "--inject-fault") == 0) {
            g_inject_fault = 1;
        } else if ((v = opt_value(argc, argv, &i, "--finalize-stagger", "--finalize-stagger"))) {
            g_finalize_stagger_ms = parse_int("--finalize-stagger", v, 0);
        } else if ((v = opt_value(argc, argv, &i, "-s", "--size"))) {
            parse_sizes(v, o);
        } else if ((v = opt_value(argc, argv, &i, "-r", "--reps"))) {
            o->reps = parse_int("-r", v, 1);
        } else if ((v = opt_value(argc, argv, &i, "-w", "--warmup"))) {
            o->warmup = parse_int("-w", v, 0);
        } else if (g_prog->ops && (v = opt_value(argc, argv, &i, "-o", "--op"))) {
            const char *const *p = g_prog->ops;
            while (*p && strcmp(*p, v) != 0)
                p++;
            if (!*p)
                bench_die_usage("-o: unknown operation '%s'", v);
            o->op = *p;
        } else {
            bench_die_usage("unknown argument '%s'", a);
        }
    }
    if (g_prog->ops && !o->op)
        bench_die_usage("-o OP is required");
    if ((long long)o->reps + o->warmup > INT_MAX)
        bench_die_usage("-r plus -w is too large");
}

void bench_start(int *argc, char ***argv, const bench_prog *prog, bench_opts *o)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_prog = prog;
    parse_args(*argc, *argv, o);
    if (g_size < prog->min_ranks)
        bench_die_usage("needs at least %d MPI ranks, got %d", prog->min_ranks, g_size);
}

/* Debian's MPICH 4.0.2 (ch4:ucx) can hang in MPI_Finalize: each rank closes
 * its UCX endpoints, progresses only until its own close completes, then waits
 * in the PMI barrier without progress; a peer whose close-flush arrived too late
 * is never acknowledged and spins forever (fixed upstream by pmodels/mpich
 * PR #6596). It happens with and without gridsplit, more often under load.
 * Entering finalize in rank order, a few ms apart, makes every rank send its own
 * close-flush before it can see a later rank's, which avoids the bad ordering.
 * --finalize-stagger sets the spacing (0 disables it). */
static void finalize_in_rank_order(void)
{
#if defined(MPICH_VERSION)
    const long ms = g_finalize_stagger_ms;
    if (ms > 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        struct timespec ts = {.tv_sec = (g_rank * ms) / 1000, .tv_nsec = ((g_rank * ms) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
#endif
    MPI_Finalize();
}

int bench_finish(int local_failures)
{
    int any = 0;
    MPI_Allreduce(&local_failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    finalize_in_rank_order();
    return any ? BENCH_EXIT_VERIFY : BENCH_EXIT_OK;
}

/* ------------------------------------------------------------- CPU use */

/* Process CPU time (all threads, so MPI progress threads count) and wall time
 * at the last bench_cpu_mark(); bench_report() reports the difference per
 * rank, which is how `gridsplit bench` measures node CPU (Alter and Glück Figs 11-13)
 * without sampling from outside a process that may be gone by then. */
static double g_mark_wall, g_mark_user, g_mark_sys;

static double tv_s(struct timeval tv) { return (double)tv.tv_sec + tv.tv_usec / 1e6; }

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void cpu_now(double *wall, double *user, double *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *wall = bench_now();
    *user = tv_s(ru.ru_utime);
    *sys = tv_s(ru.ru_stime);
}

void bench_cpu_mark(void) { cpu_now(&g_mark_wall, &g_mark_user, &g_mark_sys); }

int bench_main(int argc, char **argv, const bench_prog *prog, bench_run_size run_size)
{
    bench_opts o;
    bench_start(&argc, &argv, prog, &o);
    int bad = 0;
    for (int i = 0; i < o.nsizes; i++) {
        bench_cpu_mark();
        bad += run_size(&o, o.sizes[i]);
    }
    return bench_finish(bad);
}

void *bench_alloc(size_t nmemb, size_t size)
{
    if (size != 0 && nmemb > SIZE_MAX / size) {
        fprintf(stderr, "%s: rank %d: buffer of %zu x %zu bytes overflows\n",
                g_prog->name, g_rank, nmemb, size);
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_RESOURCE);
    }
    size_t n = nmemb * size;
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "%s: rank %d: cannot allocate %zu bytes\n", g_prog->name,
                g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_RESOURCE);
    }
    /* Touch every page now so first-touch faults are not timed in rep 0. */
    memset(p, 0, n ? n : 1);
    return p;
}

/* ----------------------------------------------------------- payloads */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static uint64_t stream_seed(int r, long k)
{
    return splitmix64(((uint64_t)(uint32_t)r << 32) | (uint32_t)k);
}

/* Byte-at-a-time over a word generator: simple and byte-order independent;
 * it only runs outside the timed regions. */
#define PATTERN_LOOP(BODY)                                                      \
    do {                                                                        \
        uint64_t seed_ = stream_seed(r, k);                                     \
        size_t pos_ = off;                                                      \
        uint64_t w_ = splitmix64(seed_ + (pos_ >> 3));                          \
        for (size_t i = 0; i < len; i++, pos_++) {                              \
            if (i && (pos_ & 7) == 0)                                           \
                w_ = splitmix64(seed_ + (pos_ >> 3));                           \
            unsigned char want = (unsigned char)(w_ >> (8 * (pos_ & 7)));      \
            BODY;                                                               \
        }                                                                       \
    } while (0)

void pattern_fill(unsigned char *buf, size_t len, int r, long k, size_t off)
{
    PATTERN_LOOP(buf[i] = want);
}

void pattern_poison(unsigned char *buf, size_t len, int r, long k, size_t off)
{
    PATTERN_LOOP(buf[i] = (unsigned char)~want);
}

static int g_reported_mismatch;

int pattern_check(const unsigned char *buf, size_t len, int r, long k, size_t off,
                  const char *what)
{
    int ok = 1;
    PATTERN_LOOP(if (buf[i] != want) {
        ok = 0;
        if (!g_reported_mismatch) {
            g_reported_mismatch = 1;
            fprintf(stderr,
                    "%s: rank %d: %s: payload of rank %d rep %ld wrong at byte "
                    "%zu (got 0x%02x, want 0x%02x)\n",
                    g_prog->name, g_rank, what, r, k, off + i, buf[i], want);
        }
        break;
    });
    return ok;
}

void bench_fill_send(unsigned char *buf, size_t len, int r, long k)
{
    pattern_fill(buf, len, r, k, 0);
    /* Test hook (--inject-fault): lets `make test` prove that --check really
     * detects a corrupted payload end to end, through the MPI library. */
    if (g_inject_fault && k == 0 && len > 0)
        buf[len / 2] ^= 0x5a;
}

/* -------------------------------------------------------- statistics */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_stats_compute(const double *samples, int n, bench_stats *s)
{
    double *v = bench_alloc((size_t)n, sizeof *v);
    s->total = 0;
    for (int i = 0; i < n; i++) {
        v[i] = samples[i];
        s->total += samples[i];
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    s->mean = s->total / n;
    s->min = v[0];
    s->max = v[n - 1];
    s->median = (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    free(v);
}

/* ------------------------------------------------------------ output */

/* First line of MPI_Get_library_version with whitespace runs collapsed:
 * MPICH returns a whole multi-line build report, Open MPI a single line. */
void bench_library_version(char *out, size_t cap)
{
    char raw[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(raw, &len);
    size_t o = 0;
    int pending_space = 0;
    for (int i = 0; i < len && raw[i] && raw[i] != '\n' && raw[i] != '\r'; i++) {
        if (isspace((unsigned char)raw[i])) {
            pending_space = o > 0;
            continue;
        }
        if (pending_space && o + 1 < cap)
            out[o++] = ' ';
        pending_space = 0;
        if (o + 1 < cap)
            out[o++] = raw[i];
    }
    out[o] = '\0';
}

const char *bench_impl(void) { return BENCH_IMPL; }

void bench_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

#define HOST_LEN 64

/* Collective: every rank's CPU use since its mark goes to rank 0. */
static void cpu_gather(double **cpu, char **hosts)
{
    double now[3], mine[3];
    cpu_now(&now[0], &now[1], &now[2]);
    mine[0] = now[0] - g_mark_wall;
    mine[1] = now[1] - g_mark_user;
    mine[2] = now[2] - g_mark_sys;
    char host[HOST_LEN] = {0};
    int len = 0;
    char full[MPI_MAX_PROCESSOR_NAME];
    MPI_Get_processor_name(full, &len);
    /* Lab host names are short; a longer name is cut, which only labels it. */
    memcpy(host, full, (size_t)(len < HOST_LEN - 1 ? len : HOST_LEN - 1));
    if (g_rank == 0) {
        *cpu = bench_alloc((size_t)g_size * 3, sizeof **cpu);
        *hosts = bench_alloc((size_t)g_size, HOST_LEN);
    }
    MPI_Gather(mine, 3, MPI_DOUBLE, g_rank == 0 ? *cpu : NULL, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(host, HOST_LEN, MPI_CHAR, g_rank == 0 ? *hosts : NULL, HOST_LEN, MPI_CHAR, 0,
               MPI_COMM_WORLD);
}

void bench_report(const bench_opts *o, const bench_result *res)
{
    static int header_done;
    /* Every rank's verdict has to reach the reporting rank. */
    int all_bad = 0;
    MPI_Reduce(&res->bad, &all_bad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    const int verified = o->check ? all_bad == 0 : -1;
    double *cpu = NULL;
    char *hosts = NULL;
    cpu_gather(&cpu, &hosts);
    if (g_rank != 0)
        return;
    bench_stats st;
    bench_stats_compute(res->samples, o->reps, &st);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    bench_library_version(version, sizeof version);
    /* A median of 0 s only happens below timer resolution: no bandwidth. */
    int have_bw = res->with_bandwidth && (st.median > 0 || res->size == 0);
    double bw_mbps = res->size == 0 ? 0.0 : (double)res->size / st.median / 1e6;

    if (o->osu) {
        if (!header_done) {
            header_done = 1;
            printf("# gridsplit %s (%s: %s), %d ranks, %d reps, %d warmup, timing=%s\n",
                   res->op, BENCH_IMPL, version, g_size, o->reps, o->warmup,
                   res->timing);
            /* OSU's own column order (its -f output) comes first, so tools
             * that read columns by position keep working; extras go last. */
            printf("# %-10s%18s%18s%18s%12s%18s%s%s\n", "Size", "Avg Latency(us)",
                   "Min Latency(us)", "Max Latency(us)", "Iterations",
                   "Med Latency(us)", res->with_bandwidth ? "   Bandwidth(MB/s)" : "",
                   o->check ? "     Check" : "");
        }
        printf("%-12zu%18.2f%18.2f%18.2f%12d%18.2f", res->size, st.mean * 1e6,
               st.min * 1e6, st.max * 1e6, o->reps, st.median * 1e6);
        if (res->with_bandwidth) {
            if (have_bw)
                printf("%18.2f", bw_mbps);
            else
                printf("%18s", "-");
        }
        if (o->check)
            printf("%10s", verified ? "pass" : "FAIL");
        printf("\n");
    } else {
        printf("{\"op\":");
        bench_json_string(stdout, res->op);
        printf(",\"impl\":\"%s\",\"impl_version\":", BENCH_IMPL);
        bench_json_string(stdout, version);
        printf(",\"ranks\":%d,\"size_bytes\":%zu,\"reps\":%d,\"warmup\":%d,"
               "\"timing\":\"%s\",\"total_s\":%.9g,\"mean_s\":%.9g,\"min_s\":%.9g,"
               "\"median_s\":%.9g,\"max_s\":%.9g",
               g_size, res->size, o->reps, o->warmup, res->timing, st.total, st.mean,
               st.min, st.median, st.max);
        if (res->with_bandwidth) {
            if (have_bw)
                printf(",\"bandwidth_MBps\":%.9g", bw_mbps);
            else
                printf(",\"bandwidth_MBps\":null");
        }
        printf(",\"verified\":%s,\"cpu\":[",
               verified < 0 ? "null" : verified ? "true" : "false");
        for (int r = 0; r < g_size; r++) {
            printf("%s{\"rank\":%d,\"host\":", r ? "," : "", r);
            bench_json_string(stdout, hosts + (size_t)r * HOST_LEN);
            printf(",\"wall_s\":%.6f,\"user_s\":%.6f,\"sys_s\":%.6f}", cpu[3 * r],
                   cpu[3 * r + 1], cpu[3 * r + 2]);
        }
        printf("]}\n");
    }
    fflush(stdout);
    free(cpu);
    free(hosts);
}
