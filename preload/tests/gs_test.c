/*
 * gs_test.c - integration tests of libgridsplit.so, run by run_tests.sh on loopback:
 * the harness and the runner. The tests themselves are in gs_connect_test.c,
 * gs_socket_test.c and gs_process_test.c (see gs_test.h).
 *
 * The same binary plays three roles, chosen by argv[1]:
 *   (none)  the test suite, run with LD_PRELOAD=libgridsplit.so as a node of site
 *           "a" (127.0.1.0/24, gateway 127.0.1.254 = tests/fake_gateway.py);
 *   server  the destination node of site "b" (127.0.2.5): an echo server that
 *           first sends a 64-byte "hello" line telling what accept() and
 *           getpeername() reported for the connection;
 *   probe   a short-lived client started with a broken or missing configuration,
 *           to check the one-line warning and the pass-through;
 *   timers  a short-lived process whose same-site connections get LAN timers its
 *           kernel refuses, to check what it says.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gs_test.h"

int failures;
const char *test_dir;
const char *gw_log;
unsigned short port_accept, port_accept4;
static pid_t server_pid;

/* ------------------------------------------------------------------ helpers */

void fmt_sa(const struct sockaddr *sa, char *buf, size_t len)
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

void local_name(int fd, char *buf, size_t len) { sock_name(fd, 0, buf, len); }
void peer_name(int fd, char *buf, size_t len) { sock_name(fd, 1, buf, len); }

/* Read the server's hello and check it against the expected source address: what
 * the destination's accept() and getpeername() saw must be the client's own
 * address, never the gateway's. */
void check_hello(int fd, const char *expect_src)
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
void check_echo(int fd, size_t n, unsigned seed)
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
int gw_count(const char *prefix) { return log_count(gw_log, prefix); }

int gw_has(const char *text)
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

/* Blocking redirected connect to the site-b server; returns the fd or -1. */
int connect_b(const char *ip, unsigned short port)
{
    int fd = node_socket(NODE_IP, 0);
    struct sockaddr_in to = sin4(ip, port);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int wait_pollout(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    return poll(&p, 1, 5000) == 1 && (p.revents & (POLLOUT | POLLERR | POLLHUP));
}

int so_error(int fd)
{
    int e = -1;
    socklen_t l = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
        return -2;
    return e;
}

/* Build an environment from ours: drop the names in unset[], add the extra ones. */
char **make_env(const char *const *unset, const char *const *extra)
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
pid_t spawn_self(char *const argv[], char **env, const char *out_path, const char *err_path)
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

int listen_on(const char *ip, unsigned short *port)
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
    if (argc == 3 && strcmp(argv[1], "timers") == 0)
        return timers_probe_main(argv[2]);

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
        {"LAN timers refused: one line per process; none for a kernel without them", test_lan_timers_refused},
    };
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        failures = 0;
        double t0 = now_ms();
        tests[i].fn();
        printf("%s %s (%.0f ms)\n", failures ? "FAIL" : "ok  ", tests[i].name, now_ms() - t0);
        fflush(stdout);
        if (failures)
            failed++;
        else
            passed++;
    }
    kill(server_pid, SIGTERM);
    waitpid(server_pid, NULL, 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
