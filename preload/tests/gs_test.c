/*
 * gs_test.c - integration tests of libgridsplit.so, run by run_tests.sh on loopback.
 *
 * The same binary plays three roles, chosen by argv[1]:
 *   (none)  the test suite, run with LD_PRELOAD=libgridsplit.so as a node of site
 *           "a" (127.0.1.0/24, gateway 127.0.1.254 = tests/fake_gateway.py);
 *   server  the destination node of site "b" (127.0.2.5): an echo server that
 *           first sends a 64-byte "hello" line telling what accept() and
 *           getpeername() reported for the connection;
 *   probe   a short-lived client started with a broken or missing configuration,
 *           to check the one-line warning and the pass-through.
 * The fake gateway logs every connection it accepts ("CONN") and request ("REQ"),
 * which lets the suite prove which connections went through it and which did not.
 *
 * Every check compares real values (addresses, errnos, bytes); the last line is
 * "N passed, M failed" and the exit status is non-zero on any failure.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testio.h"

#define HELLO_LEN 64

static int failures_in_test;
static const char *test_dir;
static const char *gw_log;
static unsigned short port_accept, port_accept4; /* the site-b server's two listeners */
static pid_t server_pid;

#define CHECK(cond, ...)                                                               \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            failures_in_test++;                                                        \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, "\n");                                                     \
        }                                                                              \
    } while (0)

/* ------------------------------------------------------------------ helpers */

static void fmt_sa(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(buf, len, "%s:%u", ip, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        snprintf(buf, len, "[%s]:%u", ip, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "family%d", sa->sa_family);
    }
}

/* "ip:port" of fd's own address, or of its peer's: the peer goes through the
 * preloaded getpeername(), which must report the destination, not the gateway. */
static void sock_name(int fd, int peer, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int r = peer ? getpeername(fd, (struct sockaddr *)&ss, &sl)
                 : getsockname(fd, (struct sockaddr *)&ss, &sl);
    if (r < 0)
        snprintf(buf, len, "%s: %s", peer ? "getpeername" : "getsockname", strerror(errno));
    else
        fmt_sa((struct sockaddr *)&ss, buf, len);
}

static void local_name(int fd, char *buf, size_t len) { sock_name(fd, 0, buf, len); }
static void peer_name(int fd, char *buf, size_t len) { sock_name(fd, 1, buf, len); }

/* Read the server's hello and check it against the expected source address: what
 * the destination's accept() and getpeername() saw must be the client's own
 * address, never the gateway's. */
static void check_hello(int fd, const char *expect_src)
{
    char hello[HELLO_LEN + 1] = {0};
    int r = read_full(fd, hello, HELLO_LEN);
    CHECK(r == 0, "reading hello: %s", strerror(errno));
    if (r)
        return;
    char want[128];
    snprintf(want, sizeof want, "A=%s P=%s ", expect_src, expect_src);
    CHECK(strncmp(hello, want, strlen(want)) == 0, "hello is '%.*s', want '%s'",
          (int)strcspn(hello, "\n"), hello, want);
}

/* Echo n pseudo-random bytes through fd (the server echoes everything). */
static void check_echo(int fd, size_t n, unsigned seed)
{
    char *out = malloc(n), *in = malloc(n);
    for (size_t i = 0; i < n; i++)
        out[i] = (char)(rand_r(&seed) & 0xff);
    size_t sent = 0, got = 0;
    /* Interleave so that large payloads cannot deadlock on full buffers. */
    while (got < n) {
        if (sent < n) {
            size_t chunk = n - sent < 8192 ? n - sent : 8192;
            int r = write_full(fd, out + sent, chunk);
            CHECK(r == 0, "write: %s", strerror(errno));
            if (r)
                break;
            sent += chunk;
        }
        size_t want = sent - got;
        int r = read_full(fd, in + got, want);
        CHECK(r == 0, "read: %s", strerror(errno));
        if (r)
            break;
        got += want;
    }
    CHECK(got == n && memcmp(in, out, n) == 0, "echoed data differs (%zu/%zu bytes)", got, n);
    free(out);
    free(in);
}

/* Lines of the gateway log that start with prefix. */
static int gw_count(const char *prefix)
{
    FILE *f = fopen(gw_log, "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, prefix, strlen(prefix)) == 0)
            n++;
    fclose(f);
    return n;
}

static int gw_has(const char *text)
{
    FILE *f = fopen(gw_log, "r");
    if (!f)
        return 0;
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

/* A TCP socket bound to 127.0.1.5 (a node of site a), optionally non-blocking. */
static int node_socket(int nonblock)
{
    int fd = socket(AF_INET, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0);
    struct sockaddr_in me = sin4("127.0.1.5", 0);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&me, sizeof me) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Blocking redirected connect to the site-b server; returns the fd or -1. */
static int connect_b(const char *ip, unsigned short port)
{
    int fd = node_socket(0);
    struct sockaddr_in to = sin4(ip, port);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static int wait_pollout(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    return poll(&p, 1, 5000) == 1 && (p.revents & (POLLOUT | POLLERR | POLLHUP));
}

static int so_error(int fd)
{
    int e = -1;
    socklen_t l = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
        return -2;
    return e;
}

/* Build an environment from ours: drop the names in unset[], add the extra ones. */
static char **make_env(const char *const *unset, const char *const *extra)
{
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 16, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int drop = 0;
        for (const char *const *u = unset; u && *u; u++) {
            size_t l = strlen(*u);
            if (strncmp(environ[i], *u, l) == 0 && environ[i][l] == '=')
                drop = 1;
        }
        for (const char *const *x = extra; x && *x; x++) {
            size_t l = strcspn(*x, "=");
            if (strncmp(environ[i], *x, l + 1) == 0)
                drop = 1;
        }
        if (!drop)
            env[k++] = environ[i];
    }
    for (const char *const *x = extra; x && *x; x++)
        env[k++] = (char *)*x;
    env[k] = NULL;
    return env;
}

/* Run this binary with args and env; its stdout and stderr go to files. */
static pid_t spawn_self(char *const argv[], char **env, const char *out_path,
                        const char *err_path)
{
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0)
            _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        execve("/proc/self/exe", argv, env);
        _exit(127);
    }
    return pid;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* ------------------------------------------------------------ server role */

struct conn_arg {
    int fd;
    char hello[HELLO_LEN + 1];
};

static void *echo_thread(void *p)
{
    struct conn_arg *c = p;
    if (write_full(c->fd, c->hello, HELLO_LEN) == 0) {
        char buf[65536];
        for (;;) {
            ssize_t n = read(c->fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0 || write_full(c->fd, buf, (size_t)n) < 0)
                break;
        }
    }
    close(c->fd);
    free(c);
    return NULL;
}

static int listen_on(const char *ip, unsigned short *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = sin4(ip, 0);
    socklen_t l = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 512) < 0)
        return -1;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

static int server_main(const char *port_file)
{
    alarm(300); /* never outlive a stuck test run */
    unsigned short p1, p2;
    int l1 = listen_on("127.0.2.5", &p1), l2 = listen_on("127.0.2.5", &p2);
    if (l1 < 0 || l2 < 0) {
        perror("server listen");
        return 1;
    }
    fcntl(l2, F_SETFL, O_NONBLOCK); /* accept4 path: non-blocking listener */
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%u %u\n", p1, p2);
    fclose(f);
    rename(tmp, port_file);
    for (;;) {
        struct pollfd pf[2] = {{.fd = l1, .events = POLLIN}, {.fd = l2, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (!(pf[i].revents & POLLIN))
                continue;
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            int fd = i == 0 ? accept(l1, (struct sockaddr *)&ss, &sl)
                            : accept4(l2, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0)
                continue; /* e.g. EAGAIN after a dropped bad-header connection */
            if (i == 1) {
                int fl = fcntl(fd, F_GETFL);
                fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
            }
            struct conn_arg *c = calloc(1, sizeof *c);
            c->fd = fd;
            char a[64], p[64];
            fmt_sa((struct sockaddr *)&ss, a, sizeof a);
            peer_name(fd, p, sizeof p);
            char line[160];
            snprintf(line, sizeof line, "A=%s P=%s ", a, p);
            line[HELLO_LEN] = 0;
            memcpy(c->hello, line, strlen(line) + 1);
            memset(c->hello + strlen(c->hello), ' ', HELLO_LEN - strlen(c->hello));
            c->hello[HELLO_LEN - 1] = '\n';
            pthread_t t;
            pthread_create(&t, NULL, echo_thread, c);
            pthread_detach(t);
        }
    }
}

/* ------------------------------------------------------------- probe role */

/* Two direct connects to the site-b server; prints "local hello" per connect. */
static int probe_main(const char *ip, const char *port)
{
    for (int i = 0; i < 2; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in to = sin4(ip, (unsigned short)atoi(port));
        if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
            printf("connect: %s\n", strerror(errno));
            return 1;
        }
        char me[64], hello[HELLO_LEN + 1] = {0};
        local_name(fd, me, sizeof me);
        if (read_full(fd, hello, HELLO_LEN) < 0) {
            printf("hello: %s\n", strerror(errno));
            return 1;
        }
        printf("%s %.*s\n", me, (int)strcspn(hello, "\n"), hello);
        close(fd);
    }
    return 0;
}

/* ------------------------------------------------------------------ tests */

static void test_blocking_redirect(void)
{
    int reqs = gw_count("REQ ");
    int fd = connect_b("127.0.2.5", port_accept);
    CHECK(fd >= 0, "connect: %s", strerror(errno));
    if (fd < 0)
        return;
    char me[64], peer[64], want_req[160];
    local_name(fd, me, sizeof me);
    peer_name(fd, peer, sizeof peer);
    char want_peer[64];
    snprintf(want_peer, sizeof want_peer, "127.0.2.5:%u", port_accept);
    CHECK(strcmp(peer, want_peer) == 0, "client getpeername %s, want %s", peer, want_peer);
    CHECK(strncmp(me, "127.0.1.5:", 10) == 0, "local address %s", me);
    check_hello(fd, me);
    check_echo(fd, 200000, 1);
    CHECK(gw_count("REQ ") == reqs + 1, "gateway saw %d requests, want %d", gw_count("REQ "),
          reqs + 1);
    snprintf(want_req, sizeof want_req, "REQ %s 127.0.2.5:%u", me, port_accept);
    CHECK(gw_has(want_req), "gateway log lacks '%s'", want_req);
    close(fd);
}

static void test_accept4_side(void)
{
    int fd = connect_b("127.0.2.5", port_accept4);
    CHECK(fd >= 0, "connect: %s", strerror(errno));
    if (fd < 0)
        return;
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    check_echo(fd, 1000, 2);
    close(fd);
}

static void test_nonblocking_so_error(void)
{
    int fd = node_socket(1);
    struct sockaddr_in to = sin4("127.0.2.5", port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    CHECK(wait_pollout(fd), "no POLLOUT");
    int e = so_error(fd);
    CHECK(e == 0, "SO_ERROR %d (%s)", e, strerror(e > 0 ? e : 0));
    /* connect() again, as Linux answers after a non-blocking connect: 0 once, then
     * EISCONN */
    r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == 0, "second connect returned %d errno %s", r, strerror(errno));
    r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EISCONN, "third connect returned %d errno %s", r, strerror(errno));
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    check_echo(fd, 100000, 3);
    close(fd);
}

/* Reads before the reply arrived (delayed 300 ms by the gateway, or split in two
 * pieces): EAGAIN first, then the application's first byte is the server's, not a
 * byte of GSa1. */
static void nonblocking_read_first(const char *ip)
{
    int fd = node_socket(1);
    struct sockaddr_in to = sin4(ip, port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    CHECK(wait_pollout(fd), "no POLLOUT");
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    CHECK(n == -1 && errno == EAGAIN, "early recv returned %zd errno %s", n, strerror(errno));
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me); /* read_full polls for POLLIN and retries */
    check_echo(fd, 5000, 4);
    close(fd);
}

static void test_nonblocking_read_delayed(void) { nonblocking_read_first("127.0.2.211"); }
static void test_nonblocking_read_split_reply(void) { nonblocking_read_first("127.0.2.210"); }

static void test_nonblocking_write_first(void)
{
    int fd = node_socket(1);
    struct sockaddr_in to = sin4("127.0.2.211", port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    CHECK(wait_pollout(fd), "no POLLOUT");
    /* No SO_ERROR: the write waits for the reply instead of failing with EAGAIN. */
    ssize_t n = send(fd, "ping", 4, 0);
    CHECK(n == 4, "send returned %zd errno %s", n, strerror(errno));
    char me[64], buf[4];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    CHECK(read_full(fd, buf, 4) == 0 && memcmp(buf, "ping", 4) == 0, "echo of ping");
    close(fd);
}

static void test_refused_blocking(void)
{
    unsigned short dead = free_port("127.0.2.5");
    int fd = connect_b("127.0.2.5", dead);
    CHECK(fd == -1 && errno == ECONNREFUSED, "got fd %d errno %s", fd, strerror(errno));
    if (fd >= 0)
        close(fd);
    static const struct {
        const char *ip;
        int err;
    } cases[] = {
        {"127.0.2.201", ECONNREFUSED}, {"127.0.2.202", EHOSTUNREACH}, {"127.0.2.203", EACCES},
        {"127.0.2.204", ETIMEDOUT},    {"127.0.2.205", ENETUNREACH},  {"127.0.2.206", EPROTO},
        {"127.0.2.212", EPROTO}, /* reply with a bad magic */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fd = connect_b(cases[i].ip, 9);
        CHECK(fd == -1 && errno == cases[i].err, "%s: got fd %d errno %s, want %s", cases[i].ip,
              fd, strerror(errno), strerror(cases[i].err));
        if (fd >= 0)
            close(fd);
    }
}

static void test_refused_nonblocking(void)
{
    unsigned short dead = free_port("127.0.2.5");
    int fd = node_socket(1);
    struct sockaddr_in to = sin4("127.0.2.5", dead);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    CHECK(wait_pollout(fd), "no POLLOUT");
    int e = so_error(fd);
    CHECK(e == ECONNREFUSED, "SO_ERROR %d (%s)", e, strerror(e > 0 ? e : 0));
    e = so_error(fd);
    CHECK(e == 0, "second SO_ERROR %d, want 0 (cleared once read)", e);
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    CHECK(n == -1 && errno == ECONNREFUSED, "recv after refusal: %zd errno %s", n,
          strerror(errno));
    n = send(fd, "x", 1, MSG_NOSIGNAL);
    CHECK(n == -1 && errno == ECONNREFUSED, "send after refusal: %zd errno %s", n,
          strerror(errno));
    char pn[64];
    peer_name(fd, pn, sizeof pn);
    CHECK(strstr(pn, "not connected") != NULL, "getpeername after refusal: %s", pn);
    close(fd);

    /* The connect()-until-EISCONN style: EALREADY/EINPROGRESS..., then the error.
     * The first call may already give the error: on loopback the handshake
     * completes inside connect(), and when the gateway's reply is there by the
     * time the library looks (idle CPUs that poll wake it at once), a
     * non-blocking connect fails at once, as Linux's own may. */
    fd = node_socket(1);
    to = sin4("127.0.2.204", 9);
    r = connect(fd, (struct sockaddr *)&to, sizeof to);
    int last = errno;
    CHECK(r == -1 && (last == EINPROGRESS || last == ETIMEDOUT), "connect returned %d errno %s", r,
          strerror(last));
    for (int i = 0; i < 100 && (last == EINPROGRESS || last == EALREADY); i++) {
        r = connect(fd, (struct sockaddr *)&to, sizeof to);
        last = errno;
        if (r == 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 50);
    }
    CHECK(r == -1 && last == ETIMEDOUT, "repeated connect ended with %d errno %s", r,
          strerror(last));
    close(fd);
}

/* A blocking connect with SO_SNDTIMEO shorter than the (300 ms delayed) reply:
 * EINPROGRESS after about the timeout, as Linux does, and the attempt goes on. */
static void test_sndtimeo(void)
{
    int fd = node_socket(0);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in to = sin4("127.0.2.211", port_accept);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    int e = errno;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK(r == -1 && e == EINPROGRESS, "connect returned %d errno %s", r, strerror(e));
    CHECK(ms >= 90 && ms < 280, "connect took %.0f ms, want about 100", ms);
    int so = so_error(fd);
    CHECK(so == 0, "SO_ERROR after the reply: %d", so);
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    close(fd);
}

/* The connect()-until-connected style on a successful (delayed) connection. */
static void test_connect_again_success(void)
{
    int fd = node_socket(1);
    struct sockaddr_in to = sin4("127.0.2.211", port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    int already = 0, last = 0;
    for (int i = 0; i < 100; i++) {
        r = connect(fd, (struct sockaddr *)&to, sizeof to);
        last = errno;
        if (r == 0 || last != EALREADY)
            break;
        already++;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 50);
    }
    CHECK(r == 0, "repeated connect ended with %d errno %s", r, strerror(last));
    CHECK(already >= 1, "no EALREADY while the reply was delayed");
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    close(fd);
}

static void test_ipv6_dual_stack(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 to;
    memset(&to, 0, sizeof to);
    to.sin6_family = AF_INET6;
    to.sin6_port = htons(port_accept);
    inet_pton(AF_INET6, "::ffff:127.0.2.5", &to.sin6_addr);
    int reqs = gw_count("REQ ");
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == 0, "connect: %s", strerror(errno));
    if (r == 0) {
        char me[64], peer[64], want[64];
        local_name(fd, me, sizeof me);
        peer_name(fd, peer, sizeof peer);
        snprintf(want, sizeof want, "[::ffff:127.0.2.5]:%u", port_accept);
        CHECK(strcmp(peer, want) == 0, "getpeername %s want %s", peer, want);
        /* the server (AF_INET) reports the plain IPv4 form of our address */
        char v4[64];
        snprintf(v4, sizeof v4, "%s", strncmp(me, "[::ffff:", 8) == 0 ? me + 8 : me);
        char *br = strchr(v4, ']');
        if (br)
            memmove(br, br + 1, strlen(br));
        check_hello(fd, v4);
        check_echo(fd, 1000, 5);
        CHECK(gw_count("REQ ") == reqs + 1, "no gateway request for the IPv6 socket");
    }
    close(fd);
}

/* Connections that must not touch the gateway. The closing barrier (a redirected
 * connect, accepted by the gateway after any earlier connection in its queue)
 * makes "the gateway saw exactly one more connection" a complete proof. */
static void test_untouched(void)
{
    int conns = gw_count("CONN ");
    char buf[16];

    /* same site (127.0.1.0/24) and loopback 127.0.0.1 */
    const char *ips[] = {"127.0.1.7", "127.0.0.1"};
    for (int i = 0; i < 2; i++) {
        unsigned short p;
        int l = listen_on(ips[i], &p);
        int c = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in to = sin4(ips[i], p);
        CHECK(connect(c, (struct sockaddr *)&to, sizeof to) == 0, "%s: %s", ips[i], strerror(errno));
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int a = accept(l, (struct sockaddr *)&ss, &sl);
        char seen[64], me[64];
        fmt_sa((struct sockaddr *)&ss, seen, sizeof seen);
        local_name(c, me, sizeof me);
        CHECK(a >= 0 && strcmp(seen, me) == 0, "%s: server saw %s, client is %s", ips[i], seen, me);
        CHECK(write(c, "hi", 2) == 2 && read_full(a, buf, 2) == 0 && memcmp(buf, "hi", 2) == 0,
              "%s: data", ips[i]);
        close(a);
        close(c);
        close(l);
    }

    /* UDP to the other site */
    int us = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in ua = sin4("127.0.2.5", 0);
    socklen_t ul = sizeof ua;
    bind(us, (struct sockaddr *)&ua, sizeof ua);
    getsockname(us, (struct sockaddr *)&ua, &ul);
    int uc = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(connect(uc, (struct sockaddr *)&ua, sizeof ua) == 0, "udp connect: %s", strerror(errno));
    CHECK(send(uc, "dgram", 5, 0) == 5, "udp send: %s", strerror(errno));
    struct sockaddr_storage from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(us, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
    char seen[64], me[64];
    fmt_sa((struct sockaddr *)&from, seen, sizeof seen);
    local_name(uc, me, sizeof me);
    CHECK(n == 5 && memcmp(buf, "dgram", 5) == 0 && strcmp(seen, me) == 0,
          "udp: got %zd bytes from %s (client %s)", n, seen, me);
    close(uc);
    close(us);

    /* Unix sockets: a named one (connect) and a socketpair */
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s/unix.sock", test_dir);
    unlink(sun.sun_path);
    int ul_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(bind(ul_fd, (struct sockaddr *)&sun, sizeof sun) == 0 && listen(ul_fd, 4) == 0,
          "unix listen: %s", strerror(errno));
    int uc_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(connect(uc_fd, (struct sockaddr *)&sun, sizeof sun) == 0, "unix connect: %s",
          strerror(errno));
    int ua_fd = accept(ul_fd, NULL, NULL);
    CHECK(ua_fd >= 0 && write(uc_fd, "unix", 4) == 4 && read_full(ua_fd, buf, 4) == 0 &&
              memcmp(buf, "unix", 4) == 0,
          "unix data");
    close(ua_fd);
    close(uc_fd);
    close(ul_fd);
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0 && send(sp[0], "sp", 2, 0) == 2 &&
              recv(sp[1], buf, 2, 0) == 2 && memcmp(buf, "sp", 2) == 0,
          "socketpair data");
    close(sp[0]);
    close(sp[1]);

    /* barrier */
    int fd = connect_b("127.0.2.5", port_accept);
    CHECK(fd >= 0, "barrier connect: %s", strerror(errno));
    if (fd >= 0) {
        char me2[64];
        local_name(fd, me2, sizeof me2);
        check_hello(fd, me2);
        close(fd);
    }
    CHECK(gw_count("CONN ") == conns + 1, "gateway accepted %d connections, want exactly 1",
          gw_count("CONN ") - conns);
}

static void test_dup(void)
{
    int fd = connect_b("127.0.2.5", port_accept);
    CHECK(fd >= 0, "connect: %s", strerror(errno));
    if (fd < 0)
        return;
    char want[64], p[64], me[64];
    snprintf(want, sizeof want, "127.0.2.5:%u", port_accept);
    int d = dup(fd);
    int d2 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    int d3 = 200;
    CHECK(dup2(fd, d3) == d3, "dup2: %s", strerror(errno));
    close(fd);
    int fds[] = {d, d2, d3};
    for (int i = 0; i < 3; i++) {
        peer_name(fds[i], p, sizeof p);
        CHECK(strcmp(p, want) == 0, "getpeername of duplicate %d: %s", fds[i], p);
    }
    local_name(d, me, sizeof me);
    check_hello(d, me);
    check_echo(d3, 1000, 6);
    close(d);
    close(d2);
    close(d3);

    /* dup2 over a tracked fd forgets the old state */
    int a = connect_b("127.0.2.5", port_accept);
    int sp[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
    dup2(sp[0], a);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int r = getpeername(a, (struct sockaddr *)&ss, &sl);
    CHECK(r == 0 && ss.ss_family == AF_UNIX, "getpeername after dup2 over: %d family %d", r,
          ss.ss_family);
    close(a);
    close(sp[0]);
    close(sp[1]);
}

/* A tracked fd closed behind the library's back (raw syscall, as fclose or
 * close_range would) and reused: the new socket must not inherit the old state. */
static void test_stale_fd(void)
{
    int fd = node_socket(1);
    struct sockaddr_in to = sin4("127.0.2.211", port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect %d %s", r, strerror(errno));
    syscall(SYS_close, fd);
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
    int target = sp[0] == fd ? sp[0] : sp[1] == fd ? sp[1] : -1;
    CHECK(target == fd, "fd %d not reused (%d %d)", fd, sp[0], sp[1]);
    char buf[4];
    int other = target == sp[0] ? sp[1] : sp[0];
    CHECK(send(other, "abc", 3, 0) == 3, "send");
    ssize_t n = recv(target, buf, 3, MSG_DONTWAIT);
    CHECK(n == 3 && memcmp(buf, "abc", 3) == 0, "recv on reused fd: %zd %s", n, strerror(errno));
    close(sp[0]);
    close(sp[1]);
}

/* Connections from the gateway address that do not carry a valid GSo1 header are
 * dropped by the destination's accept(), which then keeps serving good ones. */
static void test_accept_bad_header(void)
{
    for (int i = 0; i < 2; i++) {
        /* raw syscalls: this socket plays a broken gateway, not an application */
        int fd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in from = sin4("127.0.2.254", 0);
        struct sockaddr_in to = sin4("127.0.2.5", i == 0 ? port_accept : port_accept4);
        CHECK(syscall(SYS_bind, fd, &from, sizeof from) == 0, "bind 127.0.2.254");
        CHECK(syscall(SYS_connect, fd, &to, sizeof to) == 0, "raw connect: %s", strerror(errno));
        if (i == 0)
            CHECK(write(fd, "NOT-A-GSo1-HEADER-AT-ALL", 24) == 24, "write junk");
        /* i == 1 sends nothing: the server drops it after its header timeout */
        char buf[HELLO_LEN];
        struct pollfd p = {.fd = fd, .events = POLLIN};
        CHECK(poll(&p, 1, 5000) == 1, "server did not drop the connection");
        ssize_t n = read(fd, buf, sizeof buf);
        CHECK(n == 0 || (n < 0 && errno == ECONNRESET), "read after drop: %zd %s", n,
              strerror(errno));
        close(fd);
    }
    int fd = connect_b("127.0.2.5", port_accept4);
    CHECK(fd >= 0, "good connect after bad ones: %s", strerror(errno));
    if (fd >= 0) {
        char me[64];
        local_name(fd, me, sizeof me);
        check_hello(fd, me);
        close(fd);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/server.err", test_dir);
    char *err = slurp(path);
    int drops = 0;
    for (char *p = err; (p = strstr(p, "dropped a connection")); p++)
        drops++;
    CHECK(drops == 1, "server logged %d drop lines, want exactly 1:\n%s", drops, err);
    free(err);
}

struct thr_arg {
    int id;
    int failures;
};

static void *thread_body(void *p)
{
    struct thr_arg *t = p;
    for (int i = 0; i < 8; i++) {
        int nb = (t->id + i) & 1;
        int fd = node_socket(nb);
        struct sockaddr_in to = sin4("127.0.2.5", (i & 2) ? port_accept4 : port_accept);
        int r = connect(fd, (struct sockaddr *)&to, sizeof to);
        if (nb) {
            if (r != -1 || errno != EINPROGRESS || !wait_pollout(fd) || so_error(fd) != 0)
                r = -1;
            else
                r = 0;
        }
        char me[64], hello[HELLO_LEN + 1] = {0}, want[200];
        local_name(fd, me, sizeof me);
        snprintf(want, sizeof want, "A=%s P=%s ", me, me);
        if (r < 0 || read_full(fd, hello, HELLO_LEN) < 0 || strncmp(hello, want, strlen(want))) {
            t->failures++;
            fprintf(stderr, "  thread %d conn %d: r=%d errno=%s hello=%.30s\n", t->id, i, r,
                    strerror(errno), hello);
        } else {
            char out[4096], in[4096];
            for (size_t k = 0; k < sizeof out; k++)
                out[k] = (char)(t->id * 31 + i * 7 + k);
            if (write_full(fd, out, sizeof out) < 0 || read_full(fd, in, sizeof in) < 0 ||
                memcmp(in, out, sizeof in) != 0)
                t->failures++;
        }
        close(fd);
    }
    return NULL;
}

static void test_threads(void)
{
    enum { N = 16 };
    pthread_t th[N];
    struct thr_arg args[N];
    int reqs = gw_count("REQ ");
    for (int i = 0; i < N; i++) {
        args[i] = (struct thr_arg){.id = i};
        pthread_create(&th[i], NULL, thread_body, &args[i]);
    }
    int fails = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        fails += args[i].failures;
    }
    CHECK(fails == 0, "%d of %d threaded connections failed", fails, N * 8);
    CHECK(gw_count("REQ ") == reqs + N * 8, "gateway saw %d requests, want %d",
          gw_count("REQ ") - reqs, N * 8);
}

static void test_fork(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        failures_in_test = 0;
        int fd = connect_b("127.0.2.5", port_accept);
        if (fd < 0)
            _exit(2);
        char me[64];
        local_name(fd, me, sizeof me);
        check_hello(fd, me);
        check_echo(fd, 10000, 7);
        close(fd);
        _exit(failures_in_test ? 1 : 0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "child status %#x", st);
}

/* The gateway resets an established relayed connection (it gave up on the
 * flow): the process must end with status 75 and one line saying why, not get
 * an error its MPI library may answer by waiting forever. In a child, whose
 * stderr goes to a file. */
static void test_relay_lost_exits(void)
{
    char errpath[512];
    snprintf(errpath, sizeof errpath, "%s/relay-lost.err", test_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (e < 0 || dup2(e, 2) < 0)
            _exit(2);
        int fd = connect_b("127.0.2.213", port_accept);
        if (fd < 0)
            _exit(3);
        char buf[64];
        for (;;) {
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0)
                _exit(n == 0 ? 4 : 5); /* EOF, or an error the library let through */
        }
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 75,
          "child status %#x, want exit 75", st);
    char *e = slurp(errpath);
    CHECK(count_lines(e) == 1 && strstr(e, "127.0.2.213") && strstr(e, "Connection reset by peer") &&
              strstr(e, "status 75"),
          "stderr should be one line naming the connection and the reset, got:\n%s", e);
    free(e);
}

/* Run the probe with a given environment and check: exit 0 (it connected
 * directly), its connections went direct (hello shows its own address), and its
 * stderr is exactly one line containing want. */
static void run_probe(const char *name, const char *const *unset, const char *const *extra,
                      const char *want)
{
    char out[512], err[512], port[16];
    snprintf(out, sizeof out, "%s/probe-%s.out", test_dir, name);
    snprintf(err, sizeof err, "%s/probe-%s.err", test_dir, name);
    snprintf(port, sizeof port, "%u", port_accept);
    char *argv[] = {"gs_test", "probe", "127.0.2.5", port, NULL};
    char **env = make_env(unset, extra);
    pid_t pid = spawn_self(argv, env, out, err);
    free(env);
    int st = 0;
    waitpid(pid, &st, 0);
    char *o = slurp(out), *e = slurp(err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: probe status %#x, out: %s", name, st, o);
    /* each output line: "<local> A=<local> P=<local>" */
    int lines = 0;
    for (char *l = o; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        char me[64], want_hello[240];
        if (sscanf(l, "%63s", me) != 1)
            break;
        snprintf(want_hello, sizeof want_hello, "%s A=%s P=%s ", me, me, me);
        CHECK(strncmp(l, want_hello, strlen(want_hello)) == 0, "%s: not direct: %.120s", name, l);
        lines++;
    }
    CHECK(lines == 2, "%s: %d probe lines", name, lines);
    CHECK(count_lines(e) == 1 && strstr(e, want) && strstr(e, "libgridsplit"),
          "%s: stderr should be one line containing '%s', got:\n%s", name, want, e);
    free(o);
    free(e);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_bad_config(void)
{
    int conns = gw_count("CONN ");
    char bad[512], cfg_env[600], toml[512], toml_env[600], auto_cfg[512], auto_env[600];
    snprintf(bad, sizeof bad, "%s/bad.conf", test_dir);
    write_file(bad, "# a broken site line\n"
                    "gridsplit-nodes 1\n"
                    "\n"
                    "site a 10.1.0/24 127.0.1.254:7100\n");
    snprintf(cfg_env, sizeof cfg_env, "GRIDSPLIT_CONFIG=%s", bad);
    /* The gateway's TOML config given to the nodes by mistake. */
    snprintf(toml, sizeof toml, "%s/gridsplit.toml", test_dir);
    write_file(toml, "# gridsplitd config for site a\n"
                     "[gateway]\n"
                     "site = \"a\"\n"
                     "\n"
                     "[[site]]\n"
                     "name = \"a\"\n"
                     "subnet = \"127.0.1.0/24\"\n"
                     "gateway_lan = \"127.0.1.254:7100\"\n");
    snprintf(toml_env, sizeof toml_env, "GRIDSPLIT_CONFIG=%s", toml);
    const char *unset_cfg[] = {"GRIDSPLIT_CONFIG", NULL};
    run_probe("unset", unset_cfg, NULL, "GRIDSPLIT_CONFIG is not set; connections are NOT redirected");
    const char *missing[] = {"GRIDSPLIT_CONFIG=/nonexistent/nodes.conf", NULL};
    run_probe("missing", NULL, missing, "/nonexistent/nodes.conf: No such file or directory");
    const char *badenv[] = {cfg_env, NULL};
    run_probe("bad", NULL, badenv,
              "line 4: subnet \"10.1.0/24\" is not a CIDR prefix; connections are NOT redirected");
    const char *tomlenv[] = {toml_env, NULL};
    run_probe("toml", NULL, tomlenv,
              "gridsplit.toml: line 2: this is a TOML file (a gateway's config?), not a node file; give "
              "GRIDSPLIT_CONFIG the node file written by `gridsplit gateway nodes-config`; connections are NOT "
              "redirected");
    const char *site[] = {"GRIDSPLIT_SITE=nosuch", NULL};
    run_probe("site", NULL, site, "GRIDSPLIT_SITE=nosuch names no site of the node file");

    /* Own site from the interface addresses: 127.0.0.1 (on lo) lies in "home". */
    snprintf(auto_cfg, sizeof auto_cfg, "%s/auto.conf", test_dir);
    write_file(auto_cfg, "gridsplit-nodes 1\n"
                         "site home 127.0.0.0/24 127.0.0.1:9\n"
                         "site far 127.0.2.0/24 127.0.2.254:9\n");
    snprintf(auto_env, sizeof auto_env, "GRIDSPLIT_CONFIG=%s", auto_cfg);
    const char *unset_site[] = {"GRIDSPLIT_SITE", NULL};
    const char *autox[] = {auto_env, "GRIDSPLIT_DEBUG=1", NULL};
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/probe-auto.out", test_dir);
    snprintf(err, sizeof err, "%s/probe-auto.err", test_dir);
    char *argv[] = {"gs_test", "probe", "127.0.0.1", "9", NULL};
    char **env = make_env(unset_site, autox);
    pid_t pid = spawn_self(argv, env, out, err);
    free(env);
    waitpid(pid, NULL, 0);
    char *e = slurp(err);
    CHECK(strstr(e, "own site \"home\"") != NULL, "auto-detected site: stderr:\n%s", e);
    free(e);

    /* barrier: none of the probes reached the gateway */
    int fd = connect_b("127.0.2.5", port_accept);
    CHECK(fd >= 0, "barrier: %s", strerror(errno));
    if (fd >= 0)
        close(fd);
    CHECK(gw_count("CONN ") == conns + 1, "gateway saw %d connections, want exactly 1",
          gw_count("CONN ") - conns);
}

/* ------------------------------------------------------------------- main */

static int start_server(void)
{
    char port_file[512], out[512], err[512];
    snprintf(port_file, sizeof port_file, "%s/server.ports", test_dir);
    snprintf(out, sizeof out, "%s/server.out", test_dir);
    snprintf(err, sizeof err, "%s/server.err", test_dir);
    unlink(port_file);
    char *argv[] = {"gs_test", "server", port_file, NULL};
    const char *extra[] = {"GRIDSPLIT_SITE=b", "GRIDSPLIT_ACCEPT_TIMEOUT_MS=500", NULL};
    char **env = make_env(NULL, extra);
    server_pid = spawn_self(argv, env, out, err);
    free(env);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            unsigned a = 0, b = 0;
            int ok = fscanf(f, "%u %u", &a, &b) == 2;
            fclose(f);
            if (ok) {
                port_accept = (unsigned short)a;
                port_accept4 = (unsigned short)b;
                return 0;
            }
        }
        usleep(10000);
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "server") == 0)
        return server_main(argv[2]);
    if (argc == 4 && strcmp(argv[1], "probe") == 0)
        return probe_main(argv[2], argv[3]);

    signal(SIGPIPE, SIG_IGN);
    alarm(240);
    test_dir = getenv("GS_TEST_DIR");
    gw_log = getenv("GS_GW_LOG");
    if (!test_dir || !gw_log || !getenv("LD_PRELOAD")) {
        fprintf(stderr, "run me through run_tests.sh (GS_TEST_DIR, GS_GW_LOG, LD_PRELOAD)\n");
        return 2;
    }
    if (start_server() < 0) {
        fprintf(stderr, "server did not start\n");
        if (server_pid > 0)
            kill(server_pid, SIGTERM);
        return 1;
    }

    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"blocking connect redirected, accept()/getpeername() see the origin", test_blocking_redirect},
        {"accept4() on a non-blocking listener sees the origin", test_accept4_side},
        {"non-blocking connect: EINPROGRESS, POLLOUT, SO_ERROR 0, data", test_nonblocking_so_error},
        {"non-blocking: read before the (delayed) reply gives EAGAIN", test_nonblocking_read_delayed},
        {"non-blocking: reply split in two segments", test_nonblocking_read_split_reply},
        {"non-blocking: write before SO_ERROR waits for the reply", test_nonblocking_write_first},
        {"refusal and every status -> errno (blocking)", test_refused_blocking},
        {"refusal via SO_ERROR, read, send, connect-again (non-blocking)", test_refused_nonblocking},
        {"non-blocking connect() repeated until connected", test_connect_again_success},
        {"blocking connect honours SO_SNDTIMEO (EINPROGRESS)", test_sndtimeo},
        {"AF_INET6 dual-stack socket to a v4-mapped address", test_ipv6_dual_stack},
        {"same-site, 127.0.0.1, UDP, Unix sockets untouched", test_untouched},
        {"dup/dup2/F_DUPFD keep the original peer", test_dup},
        {"fd closed behind our back and reused", test_stale_fd},
        {"bad origin header dropped, accepting goes on", test_accept_bad_header},
        {"16 threads x 8 concurrent connects", test_threads},
        {"fork: child connects", test_fork},
        {"a relayed connection reset by the gateway ends the process (75)", test_relay_lost_exits},
        {"missing/bad config: one stderr line, pass-through", test_bad_config},
    };
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        failures_in_test = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        printf("%s %s (%.0f ms)\n", failures_in_test ? "FAIL" : "ok  ", tests[i].name, ms);
        fflush(stdout);
        if (failures_in_test)
            failed++;
        else
            passed++;
    }
    kill(server_pid, SIGTERM);
    waitpid(server_pid, NULL, 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
