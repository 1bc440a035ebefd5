/*
 * gs_process_test.c - gs_test's tests of the process around the connections (see
 * gs_test.c): 16 threads connecting at once, a forked child, a relayed connection
 * the gateway resets (the process ends with status 75), a missing or bad
 * configuration (one stderr line, connections pass through untouched), and LAN
 * timers the kernel refuses (one line per process for a bad value, none for a
 * kernel that lacks them).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gs_test.h"

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
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
        int fd = node_socket(NODE_IP, nb);
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

void test_threads(void)
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

void test_fork(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        failures = 0;
        int fd = connect_b("127.0.2.5", port_accept);
        if (fd < 0)
            _exit(2);
        char me[64];
        local_name(fd, me, sizeof me);
        check_hello(fd, me);
        check_echo(fd, 10000, 7);
        close(fd);
        _exit(failures ? 1 : 0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "child status %#x", st);
}

/* The gateway resets an established relayed connection (it gave up on the
 * flow): the process must end with status 75 and one line saying why, not get
 * an error its MPI library may answer by waiting forever. In a child, whose
 * stderr goes to a file. */
void test_relay_lost_exits(void)
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

void test_bad_config(void)
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

/* ------------------------------------------------------------- LAN timers */

/* Makes this process's kernel answer setsockopt(IPPROTO_TCP, TCP_RTO_MIN_US or
 * TCP_DELACK_MAX_US) with ENOPROTOOPT, exactly as a kernel before 6.15 does: this
 * machine's kernel has the options, so an old kernel's answer is the only way to
 * reach the library's handling of it here. */
static int act_as_old_kernel(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setsockopt, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 45 /* TCP_RTO_MIN_US */, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOPROTOOPT),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    /* 45 and 46 are the highest TCP options this kernel knows; >= 45 covers both. */
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

/* The "timers" role: three same-site connections (each gets the node file's LAN
 * timers on both ends), optionally on an "old kernel". Prints "ok" and exits 0. */
int timers_probe_main(const char *mode)
{
    if (strcmp(mode, "old-kernel") == 0 && act_as_old_kernel() != 0) {
        printf("seccomp: %s\n", strerror(errno));
        return 1;
    }
    unsigned short p;
    int l = listen_on(NODE_IP, &p);
    for (int i = 0; i < 3; i++) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in to = sin4(NODE_IP, p);
        if (l < 0 || connect(c, (struct sockaddr *)&to, sizeof to) != 0) {
            printf("connect: %s\n", strerror(errno));
            return 1;
        }
        int a = accept(l, NULL, NULL);
        close(a);
        close(c);
    }
    printf("ok\n");
    return 0;
}

static char *run_timers_probe(const char *name, const char *mode, const char *const *extra)
{
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/timers-%s.out", test_dir, name);
    snprintf(err, sizeof err, "%s/timers-%s.err", test_dir, name);
    char *argv[] = {"gs_test", "timers", (char *)mode, NULL};
    char **env = make_env(NULL, extra);
    pid_t pid = spawn_self(argv, env, out, err);
    free(env);
    int st = 0;
    waitpid(pid, &st, 0);
    char *o = slurp(out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strcmp(o, "ok\n") == 0, "%s: status %#x, out: %s", name,
          st, o);
    free(o);
    return slurp(err);
}

void test_lan_timers_refused(void)
{
    /* 1000 us is under two jiffies at any HZ up to 1000: the kernel says EINVAL.
     * One line for the process, not one per connection. */
    const char *small[] = {"GRIDSPLIT_LAN_RTO_MIN_US=1000", "GRIDSPLIT_LAN_DELACK_MAX_US=0", NULL};
    char *e = run_timers_probe("einval", "plain", small);
    CHECK(count_lines(e) == 1 && strstr(e, "LAN minimum RTO of 1000 us refused by the kernel") &&
              strstr(e, "lan_rto_min_us"),
          "a refused value: want one line, got:\n%s", e);
    free(e);
    /* A kernel without the options: every rank of a job would say so; silent. */
    e = run_timers_probe("old", "old-kernel", NULL);
    CHECK(count_lines(e) == 0, "a kernel without the options: want no stderr, got:\n%s", e);
    free(e);
    const char *debug[] = {"GRIDSPLIT_DEBUG=1", NULL};
    e = run_timers_probe("old-debug", "old-kernel", debug);
    CHECK(strstr(e, "LAN minimum RTO: the kernel lacks the option (needs Linux 6.15+)") != NULL,
          "a kernel without the options, GRIDSPLIT_DEBUG=1: want the reason, got:\n%s", e);
    free(e);
}
