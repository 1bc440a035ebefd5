/* Shared plumbing of the gridsplit MPI benchmarks (gather, pingpong, coll,
 * plogp, collalgo):
 * command line, timing statistics, deterministic payloads and the one-line
 * JSON / OSU-style reports. Kept in one place so that every program measures
 * and reports the same way and their results can be compared line by line. */
#ifndef GRIDSPLIT_MPI_COMMON_H
#define GRIDSPLIT_MPI_COMMON_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* Exit codes are part of the CLI contract (see README.md). */
#define BENCH_EXIT_OK 0
#define BENCH_EXIT_VERIFY 1   /* --check found a corrupted or missing payload */
#define BENCH_EXIT_USAGE 2    /* bad command line */
#define BENCH_EXIT_RESOURCE 3 /* out of memory: the run is aborted */

#define BENCH_MAX_SIZES 64
#define BENCH_DEFAULT_REPS 200 /* Alter and Glück §10.3: 200 consecutive gathers */
#define BENCH_TAG 5000

typedef struct {
    size_t sizes[BENCH_MAX_SIZES]; /* -s: one measurement per entry */
    int nsizes;
    int reps;
    int warmup;
    int osu;
    int check;
    const char *op; /* coll only (-o) */
} bench_opts;

typedef struct {
    const char *name;        /* program name used in messages */
    const char *summary;     /* one line for --help */
    const char *const *ops;  /* NULL-terminated list if the program takes -o */
    const char *default_op;  /* NULL: -o is mandatory when ops != NULL */
    int min_ranks;
    /* Flags the program parses itself, each taking a value (FLAG V or
     * FLAG=V); looked up before the common ones, so a program may take over
     * -o. own_flag() returns NULL when it accepts the value, else the one-line
     * usage error to print. */
    const char *const *own_flags;
    const char *(*own_flag)(const char *flag, const char *value);
} bench_prog;

/* MPI_Init plus command-line parsing. On a usage error rank 0 prints one
 * line to stderr and every rank finalizes and exits 2; --help exits 0. */
void bench_start(int *argc, char ***argv, const bench_prog *prog, bench_opts *o);

/* After bench_start: rank 0 prints "NAME: <message> (try --help)", every
 * rank finalizes and exits 2. For checks that need the parsed options. */
void bench_die_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Parses one size of the -s syntax (digits, optional K/M/G suffix, powers of
 * ten, at most INT_MAX) from s[0..len); 0 on success. */
int bench_parse_size(const char *s, size_t len, size_t *out);

/* CLOCK_MONOTONIC in seconds: shared by every namespace of one machine,
 * which is what collalgo's synchronised start relies on. */
double bench_now(void);

/* "mpich" or "openmpi", fixed when the binary was built. */
const char *bench_impl(void);
/* First line of MPI_Get_library_version, whitespace runs collapsed. */
void bench_library_version(char *out, size_t cap);
/* Writes s as a JSON string literal, quotes included. The result line is one flat
 * object of numbers and a few strings, so printf plus this escaper is all the JSON
 * the programs need; no C JSON library is worth a dependency of every MPI build. */
void bench_json_string(FILE *f, const char *s);

/* Agrees on the verdict across ranks, finalizes and returns the exit code. */
int bench_finish(int local_failures);

/* The whole main() of a benchmark program: start, run_size() for every
 * requested size, finish. Returns the process exit code. */
typedef int (*bench_run_size)(const bench_opts *o, size_t size);
int bench_main(int argc, char **argv, const bench_prog *prog, bench_run_size run_size);

int bench_rank(void);
int bench_size(void);

/* malloc that aborts the whole job (exit 3) instead of returning NULL, and
 * checks nmemb*size for overflow: sizes come from the command line. */
void *bench_alloc(size_t nmemb, size_t size);

/* Payload patterns. Byte i of the stream of rank r at rep k is
 *   (W(r,k,i/8) >> (8*(i%8))) & 0xff,  W(r,k,j) = splitmix64(S(r,k) + j),
 *   S(r,k) = splitmix64((uint64_t)r << 32 | (uint32_t)k).
 * `off` is the position of buf[0] in that stream, so that a block of a
 * scatter/alltoall buffer can be checked on its own. */
void pattern_fill(unsigned char *buf, size_t len, int r, long k, size_t off);
/* Writes the complement of the expected bytes, so a receive that silently
 * did not happen can never pass verification, whatever the size. */
void pattern_poison(unsigned char *buf, size_t len, int r, long k, size_t off);
/* Returns 1 if buf holds the expected bytes. On the first mismatch seen by
 * this process it prints one diagnostic line to stderr (`what` names it). */
int pattern_check(const unsigned char *buf, size_t len, int r, long k, size_t off,
                  const char *what);

/* Fill a send buffer for rep k; honours the --inject-fault test hook. */
void bench_fill_send(unsigned char *buf, size_t len, int r, long k);

typedef struct {
    double total, mean, min, median, max;
} bench_stats;

void bench_stats_compute(const double *samples, int n, bench_stats *s);

typedef struct {
    const char *op;
    const char *timing;   /* how a per-rep sample was taken (README.md) */
    size_t size;
    const double *samples; /* opts->reps timed samples, seconds */
    int bad;               /* this rank's reps that failed --check */
    int with_bandwidth;    /* pingpong: add bandwidth from the median */
} bench_result;

/* Called by every rank: sums the ranks' `bad` counts into the --check
 * verdict, then rank 0 prints one JSON line, or one OSU-style row (header on
 * first call). */
void bench_report(const bench_opts *o, const bench_result *res);

/* Starts the CPU window that bench_report() reports per rank (bench_main
 * calls it before each size; programs with their own loop call it too). */
void bench_cpu_mark(void);

#endif
