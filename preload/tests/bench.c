/*
 * bench.c - cost of libgridsplit on calls it does not redirect.
 *
 * Syscall time (hundreds of ns) varies more between runs than the wrapper costs,
 * so comparing two processes (with and without LD_PRELOAD) only bounds the
 * overhead. This program therefore also measures inside one process: it resolves
 * libc's own send/recv/getsockopt with dlopen("libc.so.6") and alternates batches
 * that call libc directly with batches that call the plain symbols (which resolve
 * to libgridsplit's wrappers when it is preloaded), keeping the fastest batch of
 * each. The difference is the wrapper's fast path. run_bench.sh runs it with and
 * without LD_PRELOAD.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);
typedef int (*gso_fn)(int, int, int, void *, socklen_t *);

static int sp[2];

/* ns per call of a batch of n send+recv pairs */
static double batch_sr(send_fn s, recv_fn r, long n)
{
    char c = 'x';
    double t0 = now();
    for (long i = 0; i < n; i++)
        if (s(sp[0], &c, 1, 0) != 1 || r(sp[1], &c, 1, 0) != 1)
            exit(1);
    return (now() - t0) * 1e9 / (2.0 * n);
}

static double batch_gso(gso_fn g, long n)
{
    int type;
    socklen_t l = sizeof type;
    double t0 = now();
    for (long i = 0; i < n; i++)
        if (g(sp[0], SOL_SOCKET, SO_TYPE, &type, &l) != 0)
            exit(1);
    return (now() - t0) * 1e9 / n;
}

int main(int argc, char **argv)
{
    long total = argc > 1 ? atol(argv[1]) : 10000000;
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (!libc || socketpair(AF_UNIX, SOCK_STREAM, 0, sp) < 0)
        return 1;
    send_fn libc_send = (send_fn)dlsym(libc, "send");
    recv_fn libc_recv = (recv_fn)dlsym(libc, "recv");
    gso_fn libc_gso = (gso_fn)dlsym(libc, "getsockopt");
    /* volatile: keep the compiler from calling libc's send directly */
    send_fn volatile sym_send = send;
    recv_fn volatile sym_recv = recv;
    gso_fn volatile sym_gso = getsockopt;
    const int wrapped = (void *)sym_send != (void *)libc_send;

    const long batch = 100000;
    double best_sr[2] = {1e9, 1e9}, best_g[2] = {1e9, 1e9}, sum_sr[2] = {0, 0};
    long rounds = total / batch / 2;
    if (rounds < 1)
        rounds = 1;
    for (long k = 0; k < rounds; k++) {
        double a = batch_sr(libc_send, libc_recv, batch);
        double b = batch_sr(sym_send, sym_recv, batch);
        double c = batch_gso(libc_gso, batch);
        double d = batch_gso(sym_gso, batch);
        sum_sr[0] += a;
        sum_sr[1] += b;
        if (a < best_sr[0]) best_sr[0] = a;
        if (b < best_sr[1]) best_sr[1] = b;
        if (c < best_g[0]) best_g[0] = c;
        if (d < best_g[1]) best_g[1] = d;
    }
    printf("%s: %ld send()+%ld recv() per path\n", wrapped ? "preloaded" : "not preloaded",
           rounds * batch, rounds * batch);
    printf("  send/recv  libc direct %.1f ns/call (mean %.1f), through symbol %.1f ns/call "
           "(mean %.1f): overhead %+.1f ns (best), %+.1f ns (mean)\n",
           best_sr[0], sum_sr[0] / rounds, best_sr[1], sum_sr[1] / rounds,
           best_sr[1] - best_sr[0], (sum_sr[1] - sum_sr[0]) / rounds);
    printf("  getsockopt libc direct %.1f ns/call, through symbol %.1f ns/call: overhead %+.1f ns\n",
           best_g[0], best_g[1], best_g[1] - best_g[0]);
    return 0;
}
