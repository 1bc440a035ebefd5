/*
 * multigw_test.c - tests of a site with several gateways (issue 21): flows spread
 * over the own site's gateways by the documented node-pair rule, and a connect fails over
 * to the next gateway when one is down or hung. Run by run_tests.sh on loopback.
 *
 * The binary (this file and multigw_main.c) plays two roles:
 *   (no argument)      the orchestrator (multigw_main.c), NOT preloaded: it runs
 *                      the destination server of site "b" (any 127.x address, port
 *                      MG_DST_PORT:
 *                      reads the 24-byte GSo1 header, sends "hi!", then echoes),
 *                      writes one node file per scenario, and runs each scenario
 *                      in a fresh process (the library reads its node file, and
 *                      keeps its failed-gateway marks, once per process);
 *   client SCENARIO    one scenario (this file), under LD_PRELOAD=libgridsplit.so.
 * run_tests.sh starts three fake gateways (tests/fake_gateway.py) for site "a":
 * MG_GW1 and MG_GW2 relay, MG_GWH accepts and reads requests but never replies.
 * Each logs "REQ node_ip:node_port dst_ip:dst_port" per request, which tells the
 * clients which gateway carried each of their connections. "Closed" gateways are
 * ports nothing listens on (connect refused).
 *
 * The gateway a flow must take is computed here independently of the library,
 * from the rule as docs/protocol.md §5 documents it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "multigw.h"

static int failures; /* counted by CHECK (testio.h) */

/* ------------------------------------------ the documented gateway spread */

/* The gateway is (A(src) + A(dst)) % n, A(x) being the IPv4 address read as a
 * big-endian 32-bit unsigned integer (0 when src is unknown), the sum wrapping in
 * 32 bits; the port plays no part (docs/protocol.md §5). */
static uint32_t a32(const char *ip)
{
    struct in_addr a = {0};
    if (ip && *ip)
        inet_pton(AF_INET, ip, &a);
    return ntohl(a.s_addr);
}

static int expected_gw(const char *src, const char *dst, int n)
{
    return (int)((uint32_t)(a32(src) + a32(dst)) % (uint32_t)n);
}

/* ------------------------------------------------------------ client side */

static unsigned short dst_port;
static int ngw;
static const char *gw_log[8]; /* log of each gateway line of the node file; "-" = none */
static int up_line = 1;       /* the gateway line that relays in the failover scenarios */
static int first_try_fails;   /* this connect's first gateway is down (sleepsoerror) */

/* Which gateway line carried the connection of fd: the one whose log has a REQ
 * from fd's local address. -1 if none. */
static int carried_by(int fd)
{
    struct sockaddr_in me;
    socklen_t l = sizeof me;
    if (getsockname(fd, (struct sockaddr *)&me, &l) < 0)
        return -1;
    char ip[INET_ADDRSTRLEN], want[64];
    inet_ntop(AF_INET, &me.sin_addr, ip, sizeof ip);
    snprintf(want, sizeof want, "REQ %s:%u ", ip, ntohs(me.sin_port));
    for (int i = 0; i < ngw; i++)
        if (strcmp(gw_log[i], "-") != 0 && log_count(gw_log[i], want) > 0)
            return i;
    return -1;
}

/* The relayed stream is clean: the server's "hi!" first, then an echo. */
static void check_stream(int fd, const char *what)
{
    char buf[8] = {0};
    int r = read_full(fd, buf, 3);
    CHECK(r == 0 && memcmp(buf, "hi!", 3) == 0, "%s: greeting '%.3s' (%s)", what, buf,
          r ? strerror(errno) : "ok");
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    poll(&p, 1, 5000);
    CHECK(send(fd, "ping", 4, 0) == 4, "%s: send: %s", what, strerror(errno));
    memset(buf, 0, sizeof buf);
    r = read_full(fd, buf, 4);
    CHECK(r == 0 && memcmp(buf, "ping", 4) == 0, "%s: echo '%.4s' (%s)", what, buf,
          r ? strerror(errno) : "ok");
}

/* A blocking connect from src (NULL: unbound) to dst; returns the fd or -1. */
static int connect_blocking(const char *src, const char *dst, double *ms)
{
    int fd = node_socket(src, 0);
    struct sockaddr_in to = sin4(dst, dst_port);
    double t0 = now_ms();
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    int e = errno;
    if (ms)
        *ms = now_ms() - t0;
    if (r < 0) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* The first 127.0.2.x destination (from x = first on) whose flow from src goes
 * to gateway line k. */
static void dst_for(const char *src, int k, int first, char *dst, size_t len)
{
    for (int x = first; x < 250; x++) {
        snprintf(dst, len, "127.0.2.%d", x);
        if (expected_gw(src, dst, ngw) == k)
            return;
    }
}

#define SRC "127.0.1.10"

/* Flows spread over both gateways as the rule says, and stay there: to
 * consecutive destinations they alternate, so each gateway takes exactly half. */
static void scenario_spread(void)
{
    enum { N = 24 };
    int first[N], used[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) {
            char dst[32];
            snprintf(dst, sizeof dst, "127.0.2.%d", 10 + i);
            int fd = connect_blocking(SRC, dst, NULL);
            CHECK(fd >= 0, "connect to %s: %s", dst, strerror(errno));
            if (fd < 0)
                continue;
            int g = carried_by(fd);
            int want = expected_gw(SRC, dst, ngw);
            CHECK(g == want, "round %d: flow %s -> %s:%u took gateway line %d, the rule says %d",
                  round, SRC, dst, dst_port, g, want);
            if (round == 0) {
                first[i] = g;
                if (g >= 0 && g < 2)
                    used[g]++;
            } else {
                CHECK(g == first[i], "the same flow to %s took gateway %d, then %d", dst, first[i], g);
            }
            check_stream(fd, dst);
            close(fd);
        }
    }
    CHECK(used[0] == N / 2 && used[1] == N / 2, "%d flows: %d on gateway 1, %d on gateway 2", N,
          used[0], used[1]);

    /* A gather: many nodes (sources) to one root, again half and half. */
    int gused[2] = {0, 0};
    for (int i = 0; i < N; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.1.%d", 20 + i);
        int fd = connect_blocking(src, "127.0.2.5", NULL);
        CHECK(fd >= 0, "connect from %s: %s", src, strerror(errno));
        if (fd < 0)
            continue;
        int g = carried_by(fd);
        int want = expected_gw(src, "127.0.2.5", ngw);
        CHECK(g == want, "gather from %s took gateway line %d, the rule says %d", src, g, want);
        if (g >= 0 && g < 2)
            gused[g]++;
        close(fd);
    }
    CHECK(gused[0] == N / 2 && gused[1] == N / 2, "gather of %d: %d on gateway 1, %d on gateway 2",
          N, gused[0], gused[1]);
}

/* Unbound sockets: the flow's source is the interface address that matched the
 * own site (127.0.0.1, site "a" being 127.0.0.0/8 here). */
static void scenario_autosrc(void)
{
    int used[2] = {0, 0};
    for (int i = 0; i < 16; i++) {
        char dst[32];
        snprintf(dst, sizeof dst, "127.0.2.%d", 40 + i);
        int fd = connect_blocking(NULL, dst, NULL);
        CHECK(fd >= 0, "connect to %s: %s", dst, strerror(errno));
        if (fd < 0)
            continue;
        int g = carried_by(fd), want = expected_gw("127.0.0.1", dst, ngw);
        CHECK(g == want, "unbound flow to %s took gateway line %d, the rule from 127.0.0.1 says %d",
              dst, g, want);
        if (g >= 0 && g < 2)
            used[g]++;
        close(fd);
    }
    CHECK(used[0] == 8 && used[1] == 8, "16 flows: %d and %d", used[0], used[1]);
}

/* Gateway line 0 is down or hung, line 1 relays. mode: "block", "soerror",
 * "again" (connect() until connected), "readfirst". */
static void failover_connect(const char *mode, const char *dst, double *ms)
{
    int nb = strcmp(mode, "block") != 0;
    int fd = node_socket(SRC, nb);
    struct sockaddr_in to = sin4(dst, dst_port);
    double t0 = now_ms();
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    int e = errno;
    if (!nb) {
        CHECK(r == 0, "blocking connect to %s: %s", dst, strerror(e));
    } else {
        CHECK(r == -1 && e == EINPROGRESS, "non-blocking connect: %d %s", r, strerror(e));
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        CHECK(poll(&p, 1, 5000) == 1, "no POLLOUT");
        if (strcmp(mode, "soerror") == 0 || strcmp(mode, "sleepsoerror") == 0) {
            int so = -1;
            socklen_t l = sizeof so;
            if (strcmp(mode, "sleepsoerror") == 0) {
                usleep(500000); /* past the first gateway's deadline */
                t0 += 500;
            }
            double t1 = now_ms();
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &l);
            CHECK(so == 0, "SO_ERROR %d (%s)", so, strerror(so));
            /* It says 0 only once connected: here after the second gateway's
             * timeout, not while the connect to it is still in progress. */
            CHECK(strcmp(mode, "sleepsoerror") != 0 || !first_try_fails || now_ms() - t1 >= 380,
                  "SO_ERROR said 0 after %.0f ms, before the failover was over", now_ms() - t1);
        } else if (strcmp(mode, "again") == 0) {
            for (int i = 0; i < 200; i++) {
                r = connect(fd, (struct sockaddr *)&to, sizeof to);
                e = errno;
                if (r == 0 || (e != EALREADY && e != EINPROGRESS))
                    break;
                /* POLLOUT means "connected to the gateway": wait for the reply
                 * (POLLIN), as gs_test's connect-again test does. */
                struct pollfd q = {.fd = fd, .events = POLLIN};
                poll(&q, 1, 50);
            }
            CHECK(r == 0 || e == EISCONN, "connect() again ended with %d %s", r, strerror(e));
        }
        /* "readfirst": check_stream's read is the first call after POLLOUT. */
        if (strcmp(mode, "sleepread") == 0) {
            usleep(500000);
            t0 += 500; /* *ms counts the library's time, not the sleep */
        }
    }
    if (r == 0 || nb) {
        char peer[64] = "?";
        struct sockaddr_in pa;
        socklen_t pl = sizeof pa;
        check_stream(fd, mode);
        *ms = now_ms() - t0;
        if (getpeername(fd, (struct sockaddr *)&pa, &pl) == 0)
            inet_ntop(AF_INET, &pa.sin_addr, peer, sizeof peer);
        CHECK(strcmp(peer, dst) == 0, "getpeername %s, want %s", peer, dst);
        int g = carried_by(fd);
        CHECK(g == up_line, "%s: connection carried by gateway line %d, want %d (the one up)", mode,
              g, up_line);
    }
    close(fd);
}

/* Line 0 refuses (nothing listens): the connect goes through line 1. */
static void scenario_refused(const char *mode)
{
    char dst[32];
    double ms;
    dst_for(SRC, 0, 10, dst, sizeof dst);
    failover_connect(mode, dst, &ms);
    /* The refused gateway is now tried last: the next flow it would carry goes
     * straight to line 1 (the debug log says which gateway came first). */
    dst_for(SRC, 0, atoi(strrchr(dst, '.') + 1) + 1, dst, sizeof dst);
    failover_connect(mode, dst, &ms);
}

/* Line 0 accepts and never replies (GRIDSPLIT_TIMEOUT_MS=400): the connect fails
 * over after the timeout; the next one skips the hung gateway, without waiting. */
static void scenario_hung(const char *mode)
{
    char dst[32];
    double ms;
    int reqs = log_count(gw_log[0], "REQ ");
    dst_for(SRC, 0, 10, dst, sizeof dst);
    failover_connect(mode, dst, &ms);
    CHECK(ms >= 380 && ms < 3000, "%s: failover took %.0f ms, want about the 400 ms timeout",
          mode, ms);
    CHECK(log_count(gw_log[0], "REQ ") == reqs + 1, "the hung gateway saw %d requests, want 1",
          log_count(gw_log[0], "REQ ") - reqs);
    dst_for(SRC, 0, atoi(strrchr(dst, '.') + 1) + 1, dst, sizeof dst);
    failover_connect(mode, dst, &ms);
    CHECK(ms < 200, "%s: connect after a failover took %.0f ms: the hung gateway was not skipped",
          mode, ms);
    CHECK(log_count(gw_log[0], "REQ ") == reqs + 1, "the hung gateway saw %d requests, want 1",
          log_count(gw_log[0], "REQ ") - reqs);
}

/* Line 0 refuses, from 8 threads at once (blocking and non-blocking sockets
 * alternating): every connect gets through line 1. */
static void *refused_thread(void *arg)
{
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < 4; i++) {
        char dst[32];
        double ms;
        snprintf(dst, sizeof dst, "127.0.2.%d", 100 + t * 4 + i);
        failover_connect((t + i) % 2 ? "soerror" : "block", dst, &ms);
    }
    return NULL;
}

static void scenario_refused_threads(void)
{
    pthread_t th[8];
    for (int t = 0; t < 8; t++)
        pthread_create(&th[t], NULL, refused_thread, (void *)(intptr_t)t);
    for (int t = 0; t < 8; t++)
        pthread_join(th[t], NULL);
}

/* Line 0 never replies, line 1 drops SYNs (a listener whose backlog is full: the
 * connect to it stays in progress), line 2 relays (GRIDSPLIT_TIMEOUT_MS=400): each
 * of the first two times out in turn and line 2 carries the connection.
 * "sleepread": the reader sleeps past the first deadline, so its read() fails over
 * to line 1, still connecting; it then waits in poll(POLLIN), so the library must
 * have got the request out to line 2 before answering EAGAIN, or nobody would.
 * "sleepsoerror": likewise, getsockopt(SO_ERROR) fails over to line 1 and must
 * wait for the outcome rather than say 0 while that connect is in progress. */
static void scenario_slow(const char *mode)
{
    char dst[32];
    double ms;
    dst_for(SRC, 0, 10, dst, sizeof dst);
    first_try_fails = 1;
    failover_connect(mode, dst, &ms);
    first_try_fails = 0;
    /* Blocking: two timeouts. sleep*: the first passed during the sleep. */
    double want = strcmp(mode, "block") == 0 ? 780 : 380;
    CHECK(ms >= want && ms < 3000, "%s: took %.0f ms, want at least %.0f (400 ms timeouts)", mode,
          ms, want);
    dst_for(SRC, 1, 10, dst, sizeof dst);
    failover_connect(mode, dst, &ms);
    CHECK(ms < 200, "%s: connect after the failovers took %.0f ms: failed gateways not skipped",
          mode, ms);
}

/* Every gateway refuses: the connect fails as with one gateway (ECONNREFUSED),
 * and the one stderr line names both (checked by the orchestrator). */
static void scenario_allfail(void)
{
    double ms;
    int fd = connect_blocking(SRC, "127.0.2.30", &ms);
    int e = errno;
    CHECK(fd < 0 && e == ECONNREFUSED, "blocking connect: fd %d, %s", fd, strerror(e));
    fd = node_socket(SRC, 1);
    struct sockaddr_in to = sin4("127.0.2.31", dst_port);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    e = errno;
    if (r < 0 && e == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, 5000);
        socklen_t l = sizeof e;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
    }
    CHECK(e == ECONNREFUSED, "non-blocking connect: %s", strerror(e));
    close(fd);
}

int mg_client_main(const char *scenario)
{
    const char *p = getenv("MG_DST_PORT"), *logs = getenv("MG_LOGS");
    if (!p || !logs || !getenv("LD_PRELOAD")) {
        fprintf(stderr, "client: run by the orchestrator\n");
        return 2;
    }
    dst_port = (unsigned short)atoi(p);
    if (getenv("MG_UP"))
        up_line = atoi(getenv("MG_UP"));
    char *l = strdup(logs), *save = NULL;
    for (char *t = strtok_r(l, ",", &save); t && ngw < 8; t = strtok_r(NULL, ",", &save))
        gw_log[ngw++] = t;
    if (strcmp(scenario, "spread") == 0)
        scenario_spread();
    else if (strcmp(scenario, "autosrc") == 0)
        scenario_autosrc();
    else if (strcmp(scenario, "refused-threads") == 0)
        scenario_refused_threads();
    else if (strncmp(scenario, "refused-", 8) == 0)
        scenario_refused(scenario + 8);
    else if (strncmp(scenario, "hung-", 5) == 0)
        scenario_hung(scenario + 5);
    else if (strncmp(scenario, "slow-", 5) == 0)
        scenario_slow(scenario + 5);
    else if (strcmp(scenario, "allfail") == 0)
        scenario_allfail();
    else
        return 2;
    return failures ? 1 : 0;
}
