/*
 * relaybench.c - the two ends of the relay benchmark (python -m gridsplit.bench.relay):
 * a server and the clients that measure a TCP path, whatever relays sit on it.
 *
 *   relaybench server IP PORT [--gso1]
 *   relaybench ping   IP PORT [--bind IP] [--count N] [--warmup N] [--size B] [--gsq1] [--raw]
 *   relaybench stream IP PORT [--bind IP] [--seconds S] [--block B] [--gsq1]
 *   relaybench relay  IP PORT --to IP:PORT
 *
 * Written in C with blocking sockets and one thread per connection so that the
 * measuring ends add as little as possible of their own to the numbers: a
 * round trip here is one send() and one recv() per side, nothing else. The
 * client is an ordinary program, so libgridsplit.so can be preloaded into it
 * (the realistic gridsplitd path); --gsq1 / --gso1 speak the LAN formats of
 * docs/protocol.md themselves for when it is not.
 *
 * `relay` is the floor the benchmark compares relays with: the least a user-space
 * TCP relay can do, two blocking threads per connection each doing recv() then
 * send(), no event loop, no framing. What it adds per hop is the cost of the two
 * extra sockets and process wake-ups themselves on this machine.
 *
 * Each connection starts with one byte naming the test ('P' ping-pong, 'S'
 * stream), so one server process serves both tests. Results go to stdout as one
 * JSON object; errors to stderr with exit status 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "relaybench: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static struct sockaddr_in sockaddr_of(const char *ip, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
        fprintf(stderr, "relaybench: bad IPv4 address %s\n", ip);
        exit(1);
    }
    return a;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---------------------------------------------------------------- server */

static int g_gso1;

static void *serve_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char mode;
    nodelay(fd);
    if (g_gso1) {
        /* Relayed without libgridsplit.so in this process: drop the GSo1 header. */
        char origin[24];
        if (read_full(fd, origin, sizeof origin) < 0 || memcmp(origin, "GSo1", 4) != 0)
            goto out;
    }
    if (read_full(fd, &mode, 1) < 0)
        goto out;
    if (mode == 'P') {
        /* Echo messages of the size announced in the first 4 bytes. */
        uint32_t size_be;
        if (read_full(fd, &size_be, 4) < 0)
            goto out;
        uint32_t size = ntohl(size_be);
        if (size == 0 || size > (1u << 20))
            goto out;
        char *buf = malloc(size);
        while (buf && read_full(fd, buf, size) == 0 && write_full(fd, buf, size) == 0) {
        }
        free(buf);
    } else if (mode == 'S') {
        /* Sink until EOF, then report the byte count so the client knows all arrived. */
        size_t cap = 1 << 20;
        char *buf = malloc(cap);
        uint64_t total = 0;
        ssize_t k;
        while (buf && ((k = recv(fd, buf, cap, 0)) > 0 || (k < 0 && errno == EINTR)))
            if (k > 0)
                total += (uint64_t)k;
        free(buf);
        uint64_t be = ((uint64_t)htonl((uint32_t)total) << 32) | htonl((uint32_t)(total >> 32));
        write_full(fd, &be, 8);
    }
out:
    close(fd);
    return NULL;
}

static _Noreturn void cmd_server(const char *ip, int port)
{
    struct sockaddr_in a = sockaddr_of(ip, port);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (l < 0)
        die("socket");
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind");
    if (listen(l, 128) < 0)
        die("listen");
    for (;;) {
        int fd = accept(l, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            die("accept");
        }
        pthread_t t;
        if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd) != 0)
            die("pthread_create");
        pthread_detach(t);
    }
}

/* ---------------------------------------------------------------- floor relay */

struct pipe_arg {
    int from, to;
};

static void *pump(void *arg)
{
    struct pipe_arg *p = arg;
    size_t cap = 256 * 1024;
    char *buf = malloc(cap);
    ssize_t k;
    while (buf && ((k = recv(p->from, buf, cap, 0)) > 0 || (k < 0 && errno == EINTR)))
        if (k > 0 && write_full(p->to, buf, (size_t)k) < 0)
            break;
    /* Pass the half-close on; the other direction may still be running. */
    shutdown(p->to, SHUT_WR);
    free(buf);
    return NULL;
}

static void *relay_conn(void *arg)
{
    struct pipe_arg *up = arg, down = {up->to, up->from};
    pthread_t t;
    if (pthread_create(&t, NULL, pump, &down) != 0)
        die("pthread_create");
    pump(up);
    pthread_join(t, NULL);
    close(up->from);
    close(up->to);
    free(up);
    return NULL;
}

static _Noreturn void cmd_relay(const char *ip, int port, const char *to)
{
    char tip[64];
    int tport;
    if (!to || sscanf(to, "%63[0-9.]:%d", tip, &tport) != 2) {
        fprintf(stderr, "relaybench: relay needs --to IP:PORT\n");
        exit(2);
    }
    struct sockaddr_in a = sockaddr_of(ip, port), dst = sockaddr_of(tip, tport);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (l < 0)
        die("socket");
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 128) < 0)
        die("bind/listen");
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            die("accept");
        }
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&dst, sizeof dst) < 0) {
            close(c);
            if (s >= 0)
                close(s);
            continue;
        }
        nodelay(c);
        nodelay(s);
        struct pipe_arg *p = malloc(sizeof *p);
        pthread_t t;
        if (!p)
            die("malloc");
        p->from = c, p->to = s;
        if (pthread_create(&t, NULL, relay_conn, p) != 0)
            die("pthread_create");
        pthread_detach(t);
    }
}

/* ---------------------------------------------------------------- clients */

struct client_opts {
    const char *ip, *bind_ip;
    int port, gsq1;
};

static int client_connect(const struct client_opts *o)
{
    struct sockaddr_in dst = sockaddr_of(o->ip, o->port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    if (o->bind_ip) {
        /* The gateway admits only sources inside its own site's subnet. */
        struct sockaddr_in b = sockaddr_of(o->bind_ip, 0);
        if (bind(fd, (struct sockaddr *)&b, sizeof b) < 0)
            die("bind");
    }
    nodelay(fd);
    if (o->gsq1) {
        /* Manual mode: o->ip:port is the site gateway; the real destination comes
         * from RELAYBENCH_DST=IP:PORT (without libgridsplit.so to do it for us). */
        const char *d = getenv("RELAYBENCH_DST");
        char dip[64];
        int dport;
        if (!d || sscanf(d, "%63[0-9.]:%d", dip, &dport) != 2) {
            fprintf(stderr, "relaybench: --gsq1 needs RELAYBENCH_DST=IP:PORT\n");
            exit(1);
        }
        struct sockaddr_in real = sockaddr_of(dip, dport);
        if (connect(fd, (struct sockaddr *)&dst, sizeof dst) < 0)
            die("connect (gateway)");
        unsigned char req[24] = {'G', 'S', 'q', '1', 1, 4};
        memcpy(req + 6, &real.sin_port, 2);
        memcpy(req + 8, &real.sin_addr, 4);
        unsigned char rep[8];
        if (write_full(fd, req, sizeof req) < 0 || read_full(fd, rep, sizeof rep) < 0)
            die("GSq1 exchange");
        if (memcmp(rep, "GSa1", 4) != 0 || rep[4] != 0) {
            fprintf(stderr, "relaybench: gateway refused the flow (status %d)\n", rep[4]);
            exit(1);
        }
        return fd;
    }
    if (connect(fd, (struct sockaddr *)&dst, sizeof dst) < 0)
        die("connect");
    return fd;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *sorted, long n, double p)
{
    long i = (long)(p / 100.0 * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static int cmd_ping(const struct client_opts *o, long count, long warmup, uint32_t size, int raw)
{
    int fd = client_connect(o);
    char hello[5] = {'P'};
    uint32_t be = htonl(size);
    memcpy(hello + 1, &be, 4);
    if (write_full(fd, hello, sizeof hello) < 0)
        die("send");
    char *buf = calloc(1, size);
    double *rtt = malloc(sizeof(double) * (size_t)count);
    if (!buf || !rtt)
        die("malloc");
    double t_start = now();
    for (long i = -warmup; i < count; i++) {
        double t0 = now();
        if (write_full(fd, buf, size) < 0 || read_full(fd, buf, size) < 0)
            die("ping-pong");
        if (i >= 0)
            rtt[i] = (now() - t0) * 1e6;
    }
    double elapsed = now() - t_start;
    close(fd);
    if (raw) {
        /* Every sample, in order: the caller pools interleaved short runs. */
        printf("{\"test\": \"ping\", \"size\": %u, \"count\": %ld, \"warmup\": %ld, "
               "\"seconds\": %.4f, \"samples_us\": [",
               size, count, warmup, elapsed);
        for (long i = 0; i < count; i++)
            printf("%s%.3f", i ? "," : "", rtt[i]);
        printf("]}\n");
        return 0;
    }
    double sum = 0;
    for (long i = 0; i < count; i++)
        sum += rtt[i];
    qsort(rtt, (size_t)count, sizeof(double), cmp_double);
    printf("{\"test\": \"ping\", \"size\": %u, \"count\": %ld, \"warmup\": %ld, "
           "\"seconds\": %.4f, \"rtt_us\": {\"min\": %.3f, \"median\": %.3f, "
           "\"mean\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"p999\": %.3f, \"max\": %.3f}}\n",
           size, count, warmup, elapsed, rtt[0], pct(rtt, count, 50), sum / count,
           pct(rtt, count, 90), pct(rtt, count, 99), pct(rtt, count, 99.9), rtt[count - 1]);
    return 0;
}

static int cmd_stream(const struct client_opts *o, double seconds, size_t block)
{
    int fd = client_connect(o);
    char *buf = malloc(block);
    if (!buf)
        die("malloc");
    /* Not all zeroes, in case anything on the path ever compresses. */
    for (size_t i = 0; i < block; i++)
        buf[i] = (char)(i * 131 + 7);
    buf[0] = 'S';
    if (write_full(fd, buf, 1) < 0)
        die("send");
    uint64_t sent = 0;
    double t0 = now(), end = t0 + seconds;
    while (now() < end) {
        if (write_full(fd, buf, block) < 0)
            die("stream");
        sent += block;
    }
    /* The clock stops when the server has received everything, not when the last
     * byte left our socket buffer: bytes buffered in the relays count as in flight. */
    shutdown(fd, SHUT_WR);
    uint64_t be;
    if (read_full(fd, &be, 8) < 0)
        die("stream result");
    double elapsed = now() - t0;
    uint64_t got = ((uint64_t)ntohl((uint32_t)be) << 32) | ntohl((uint32_t)(be >> 32));
    close(fd);
    if (got != sent) {
        fprintf(stderr, "relaybench: server received %llu of %llu bytes\n",
                (unsigned long long)got, (unsigned long long)sent);
        return 1;
    }
    printf("{\"test\": \"stream\", \"block\": %zu, \"bytes\": %llu, \"seconds\": %.4f, "
           "\"gbps\": %.4f}\n",
           block, (unsigned long long)got, elapsed, got * 8.0 / elapsed / 1e9);
    return 0;
}

static _Noreturn void usage(void)
{
    fprintf(stderr,
            "usage: relaybench server IP PORT [--gso1]\n"
            "       relaybench ping   IP PORT [--bind IP] [--count N] [--warmup N] [--size B] [--gsq1] [--raw]\n"
            "       relaybench stream IP PORT [--bind IP] [--seconds S] [--block B] [--gsq1]\n"
            "       relaybench relay  IP PORT --to IP:PORT\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 4)
        usage();
    struct client_opts o = {.ip = argv[2], .port = atoi(argv[3])};
    long count = 20000, warmup = 2000;
    uint32_t size = 8;
    double seconds = 5;
    size_t block = 256 * 1024;
    const char *to = NULL;
    int raw = 0;
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--gso1"))
            g_gso1 = 1;
        else if (!strcmp(a, "--gsq1"))
            o.gsq1 = 1;
        else if (!strcmp(a, "--raw"))
            raw = 1;
        else if (!v)
            usage();
        else if (!strcmp(a, "--to"))
            to = v, i++;
        else if (!strcmp(a, "--bind"))
            o.bind_ip = v, i++;
        else if (!strcmp(a, "--count"))
            count = atol(v), i++;
        else if (!strcmp(a, "--warmup"))
            warmup = atol(v), i++;
        else if (!strcmp(a, "--size"))
            size = (uint32_t)atol(v), i++;
        else if (!strcmp(a, "--seconds"))
            seconds = atof(v), i++;
        else if (!strcmp(a, "--block"))
            block = (size_t)atol(v), i++;
        else
            usage();
    }
    if (count < 1 || size < 1 || size > (1u << 20) || block < 1)
        usage();
    if (!strcmp(argv[1], "server"))
        cmd_server(o.ip, o.port);
    if (!strcmp(argv[1], "relay"))
        cmd_relay(o.ip, o.port, to);
    if (!strcmp(argv[1], "ping"))
        return cmd_ping(&o, count, warmup, size, raw);
    if (!strcmp(argv[1], "stream"))
        return cmd_stream(&o, seconds, block);
    usage();
}
