/*
 * gs_process_test.c - gs_test's tests of the process around the connections (see
 * gs_test.c): 16 threads connecting at once, a forked child, a relayed connection
 * the gateway resets (the process ends with status 75), and a missing or bad
 * configuration (one stderr line, connections pass through untouched).
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
#include <sys/socket.h>
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
