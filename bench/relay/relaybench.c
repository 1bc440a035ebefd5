/*
 * relaybench.c - the two ends of the relay benchmark (python -m gridsplit.bench.relay):
 * a server and the clients that measure a TCP path, whatever relays sit on it.
 *
 *   relaybench server IP PORT [--gso1]
 *   relaybench ping   IP PORT [--bind IP] [--count N] [--warmup N] [--size B] [--gsq1 IP:PORT] [--raw]
 *   relaybench stream IP PORT [--bind IP] [--seconds S] [--block B] [--gsq1 IP:PORT]
 *   relaybench relay  IP PORT --to IP:PORT
 *   relaybench erelay IP PORT --to IP:PORT [--spin]
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
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
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

/* Receives (sending == 0) or sends all n bytes of buf, retrying after EINTR;
 * 0 when done, -1 on an error or when the peer closed first. */
static int xfer_full(int fd, char *p, size_t n, int sending)
{
    while (n > 0) {
        ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int read_full(int fd, void *buf, size_t n)
{
    return xfer_full(fd, buf, n, 0);
}

static int write_full(int fd, const void *buf, size_t n)
{
    /* send() only reads the buffer: the cast drops const for the shared loop. */
    return xfer_full(fd, (char *)buf, n, 1);
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

static void fcntl_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        die("fcntl");
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

/* Accepts one client on `l` and connects to `dst` for it, both sockets with
 * TCP_NODELAY. The connect blocks: set-up is not what is measured. Returns 0 with
 * *c and *s set, or -1 when this client is to be skipped. */
static int accept_pair(int l, const struct sockaddr_in *dst, int *c, int *s)
{
    *c = accept(l, NULL, NULL);
    if (*c < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
            return -1;
        die("accept");
    }
    *s = socket(AF_INET, SOCK_STREAM, 0);
    if (*s < 0 || connect(*s, (const struct sockaddr *)dst, sizeof *dst) < 0) {
        close(*c);
        if (*s >= 0)
            close(*s);
        return -1;
    }
    nodelay(*c);
    nodelay(*s);
    return 0;
}

/* A relay's listener on ip:port and, from --to IP:PORT, where it relays to. */
static int relay_setup(const char *cmd, const char *ip, int port, const char *to, int type,
                       struct sockaddr_in *dst)
{
    char tip[64];
    int tport;
    if (!to || sscanf(to, "%63[0-9.]:%d", tip, &tport) != 2) {
        fprintf(stderr, "relaybench: %s needs --to IP:PORT\n", cmd);
        exit(2);
    }
    struct sockaddr_in a = sockaddr_of(ip, port);
    *dst = sockaddr_of(tip, tport);
    int l = socket(AF_INET, type, 0), one = 1;
    if (l < 0)
        die("socket");
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 128) < 0)
        die("bind/listen");
    return l;
}

static _Noreturn void cmd_relay(const char *ip, int port, const char *to)
{
    struct sockaddr_in dst;
    int l = relay_setup("relay", ip, port, to, SOCK_STREAM, &dst);
    for (;;) {
        int c, s;
        if (accept_pair(l, &dst, &c, &s) < 0)
            continue;
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

/* ---------------------------------------------------------------- epoll floor */

/*
 * `erelay` is the other shape of minimal relay: one thread, one epoll set for all
 * connections (level-triggered), and on each readiness recv() then send() at once
 * in the same wake-up -- HAProxy's shape without anything else HAProxy does. With
 * `--spin` it never sleeps (epoll_wait with a zero timeout): the busy-polling
 * variant, which shows what latency is left once no wake-up is needed, and what it
 * costs (a whole CPU per relay, whether traffic flows or not).
 */
struct half {
    int fd;            /* the socket this side reads */
    struct half *peer; /* the other side: where its bytes go */
    char *buf;         /* bytes read and not yet written to peer->fd */
    size_t len, off;
    int eof;
    uint32_t armed; /* events registered for fd, to skip epoll_ctl when unchanged */
};

#define EBUF (256 * 1024)

static void e_close(int ep, struct half *h)
{
    struct half *o = h->peer;
    epoll_ctl(ep, EPOLL_CTL_DEL, h->fd, NULL);
    epoll_ctl(ep, EPOLL_CTL_DEL, o->fd, NULL);
    close(h->fd);
    close(o->fd);
    free(h->buf);
    free(o->buf);
    free(h);
    free(o);
}

/* What `h` waits for: input while its buffer is empty, output to nobody (its
 * peer's socket is watched for EPOLLOUT by the peer's own registration). */
static void e_arm(int ep, struct half *h)
{
    struct epoll_event ev = {.data.ptr = h};
    if (h->len == h->off && !h->eof)
        ev.events |= EPOLLIN;
    if (h->peer->len != h->peer->off)
        ev.events |= EPOLLOUT;
    if (ev.events != h->armed) {
        epoll_ctl(ep, EPOLL_CTL_MOD, h->fd, &ev);
        h->armed = ev.events;
    }
}

/* Moves what `h` has (or can read now) to its peer; returns -1 when the pair is done. */
static int e_pump(int ep, struct half *h)
{
    struct half *o = h->peer;
    for (;;) {
        if (h->len == h->off) {
            if (h->eof)
                break;
            ssize_t k = recv(h->fd, h->buf, EBUF, MSG_DONTWAIT);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0 && errno == EAGAIN)
                break;
            if (k <= 0) {
                h->eof = 1;
                shutdown(o->fd, SHUT_WR);
                if (k < 0 || o->eof)
                    return -1;
                break;
            }
            h->len = (size_t)k, h->off = 0;
        }
        ssize_t w = send(o->fd, h->buf + h->off, h->len - h->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        if (w < 0)
            return -1;
        h->off += (size_t)w;
        if (h->off < h->len)
            break;
        h->len = h->off = 0;
    }
    e_arm(ep, h);
    e_arm(ep, o);
    return 0;
}

static _Noreturn void cmd_erelay(const char *ip, int port, const char *to, int spin)
{
    struct sockaddr_in dst;
    int l = relay_setup("erelay", ip, port, to, SOCK_STREAM | SOCK_NONBLOCK, &dst);
    int ep = epoll_create1(0);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &lev) < 0)
        die("epoll");
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, spin ? 0 : -1);
        if (n < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < n; i++) {
            struct half *h = evs[i].data.ptr;
            if (!h) {
                int c, s;
                if (accept_pair(l, &dst, &c, &s) < 0)
                    continue;
                fcntl_nonblock(c);
                fcntl_nonblock(s);
                struct half *x = calloc(1, sizeof *x), *y = calloc(1, sizeof *y);
                if (!x || !y || !(x->buf = malloc(EBUF)) || !(y->buf = malloc(EBUF)))
                    die("malloc");
                x->fd = c, y->fd = s, x->peer = y, y->peer = x;
                x->armed = y->armed = EPOLLIN;
                struct epoll_event ex = {.events = EPOLLIN, .data.ptr = x};
                struct epoll_event ey = {.events = EPOLLIN, .data.ptr = y};
                epoll_ctl(ep, EPOLL_CTL_ADD, c, &ex);
                epoll_ctl(ep, EPOLL_CTL_ADD, s, &ey);
                continue;
            }
            /* EPOLLOUT on h->fd means h's peer can flush into it: pump the peer. */
            if ((evs[i].events & EPOLLOUT) && e_pump(ep, h->peer) < 0) {
                e_close(ep, h);
                /* Later events in this batch may name the freed pair. */
                break;
            }
            if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && e_pump(ep, h) < 0) {
                e_close(ep, h);
                break;
            }
        }
    }
}

/* ---------------------------------------------------------------- clients */

struct client_opts {
    const char *ip, *bind_ip;
    int port;
    const char *gsq1; /* --gsq1 IP:PORT: the real destination, asked of the gateway at IP:PORT */
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
        /* Manual mode: o->ip:port is the site gateway; the real destination is
         * --gsq1's IP:PORT (without libgridsplit.so to do it for us). */
        char dip[64];
        int dport;
        if (sscanf(o->gsq1, "%63[0-9.]:%d", dip, &dport) != 2) {
            fprintf(stderr, "relaybench: --gsq1 needs the real destination as IP:PORT, got '%s'\n", o->gsq1);
            exit(2);
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
            "       relaybench ping   IP PORT [--bind IP] [--count N] [--warmup N] [--size B] [--gsq1 IP:PORT] [--raw]\n"
            "       relaybench stream IP PORT [--bind IP] [--seconds S] [--block B] [--gsq1 IP:PORT]\n"
            "       relaybench relay  IP PORT --to IP:PORT\n"
            "       relaybench erelay IP PORT --to IP:PORT [--spin]\n");
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
    int raw = 0, spin = 0;
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--gso1"))
            g_gso1 = 1;
        else if (!strcmp(a, "--raw"))
            raw = 1;
        else if (!strcmp(a, "--spin"))
            spin = 1;
        else if (!v)
            usage();
        else if (!strcmp(a, "--to"))
            to = v, i++;
        else if (!strcmp(a, "--gsq1"))
            o.gsq1 = v, i++;
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
    if (!strcmp(argv[1], "erelay"))
        cmd_erelay(o.ip, o.port, to, spin);
    if (!strcmp(argv[1], "ping"))
        return cmd_ping(&o, count, warmup, size, raw);
    if (!strcmp(argv[1], "stream"))
        return cmd_stream(&o, seconds, block);
    usage();
}
