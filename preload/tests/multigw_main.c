/*
 * multigw_main.c - the orchestrator of multigw_test (see multigw_test.c), not
 * preloaded: the destination server of site "b", the gateways that refuse or drop
 * SYNs, one node file and one fresh preloaded process per scenario, and the
 * checks of what the library said on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "multigw.h"

static void *serve_conn(void *arg)
{
    int c = (int)(intptr_t)arg;
    char buf[4096];
    size_t got = 0;
    while (got < 24) { /* the GSo1 origin header */
        ssize_t n = read(c, buf, 24 - got);
        if (n <= 0)
            goto out;
        got += (size_t)n;
    }
    if (write(c, "hi!", 3) != 3)
        goto out;
    for (;;) {
        ssize_t n = read(c, buf, sizeof buf);
        if (n <= 0 || write(c, buf, (size_t)n) != n)
            break;
    }
out:
    close(c);
    return NULL;
}

static void *server_thread(void *arg)
{
    int l = (int)(intptr_t)arg;
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0)
            continue;
        pthread_t t;
        if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)c) == 0)
            pthread_detach(t);
        else
            close(c);
    }
    return NULL;
}

/* A gateway whose SYNs are dropped: a listener with a full backlog (Linux drops
 * the SYN, no RST), so connects to it stay in progress. */
static unsigned short blackhole(const char *ip)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = sin4(ip, 0);
    socklen_t al = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 0) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0)
        return 0;
    for (int i = 0; i < 2; i++) { /* never accepted */
        int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(c, (struct sockaddr *)&a, sizeof a);
    }
    usleep(20000);
    return ntohs(a.sin_port);
}

static const char *dir;

/* Runs `self client SCENARIO` under LD_PRELOAD with a node file of the given site
 * lines (site a's gateways, then site b) and the logs of site a's gateway lines.
 * Returns the child's stderr (to free); *status its exit status. */
static char *run_client(const char *self, const char *scenario, const char *sitea_subnet,
                        const char *gws[], const char *logs, const char *extra_env,
                        int *status)
{
    char conf[512], errp[512], text[2048];
    snprintf(conf, sizeof conf, "%s/mg-%s.conf", dir, scenario);
    snprintf(errp, sizeof errp, "%s/mg-%s.err", dir, scenario);
    int n = snprintf(text, sizeof text, "gridsplit-nodes 1\n");
    for (int i = 0; gws[i]; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "site a %s %s\n", sitea_subnet, gws[i]);
    snprintf(text + n, sizeof text - (size_t)n, "site b 127.0.2.0/24 127.0.2.254:7100\n");
    FILE *f = fopen(conf, "w");
    fputs(text, f);
    fclose(f);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        setenv("LD_PRELOAD", getenv("MG_LIB"), 1);
        setenv("GRIDSPLIT_CONFIG", conf, 1);
        setenv("MG_LOGS", logs, 1);
        unsetenv("GRIDSPLIT_SITE");
        unsetenv("GRIDSPLIT_DEBUG");
        unsetenv("GRIDSPLIT_TIMEOUT_MS");
        if (strcmp(sitea_subnet, "127.0.0.0/8") != 0)
            setenv("GRIDSPLIT_SITE", "a", 1);
        char env[256];
        snprintf(env, sizeof env, "%s", extra_env ? extra_env : "");
        char *save = NULL;
        for (char *t = strtok_r(env, " ", &save); t; t = strtok_r(NULL, " ", &save))
            putenv(strdup(t));
        execl(self, self, "client", scenario, (char *)NULL);
        _exit(127);
    }
    /* A scenario that hangs (a failover that never happens) is killed after 20 s
     * and fails, rather than holding up the suite. */
    int st = 0;
    for (int i = 0; i < 2000 && waitpid(pid, &st, WNOHANG) == 0; i++)
        usleep(10000);
    if (waitpid(pid, &st, WNOHANG) == 0) {
        fprintf(stderr, "  FAIL scenario %s still running after 20 s: killed\n", scenario);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return slurp(errp);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "client") == 0)
        return mg_client_main(argv[2]);
    signal(SIGPIPE, SIG_IGN);
    alarm(300);
    dir = getenv("GS_TEST_DIR");
    const char *gw1 = getenv("MG_GW1"), *gw2 = getenv("MG_GW2"), *gwh = getenv("MG_GWH");
    const char *log1 = getenv("MG_LOG1"), *log2 = getenv("MG_LOG2"), *logh = getenv("MG_LOGH");
    if (!dir || !gw1 || !gw2 || !gwh || !log1 || !log2 || !logh || !getenv("MG_LIB") ||
        getenv("LD_PRELOAD")) {
        fprintf(stderr, "run me through run_tests.sh (not preloaded; MG_* set)\n");
        return 2;
    }
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = sin4("0.0.0.0", 0);
    socklen_t al = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 256) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0) {
        perror("destination server");
        return 1;
    }
    char port_env[32];
    snprintf(port_env, sizeof port_env, "%u", ntohs(a.sin_port));
    setenv("MG_DST_PORT", port_env, 1);
    pthread_t t;
    pthread_create(&t, NULL, server_thread, (void *)(intptr_t)l);

    char closed1[64], closed2[64], logs12[1024], logsc2[1024], logsh2[1024], logscc[64];
    char black[64], logscb2[1024];
    snprintf(black, sizeof black, "127.0.1.249:%u", blackhole("127.0.1.249"));
    snprintf(logscb2, sizeof logscb2, "%s,-,%s", logh, log2);
    snprintf(closed1, sizeof closed1, "127.0.1.251:%u", free_port("127.0.1.251"));
    snprintf(closed2, sizeof closed2, "127.0.1.250:%u", free_port("127.0.1.250"));
    snprintf(logs12, sizeof logs12, "%s,%s", log1, log2);
    snprintf(logsc2, sizeof logsc2, "-,%s", log2);
    snprintf(logsh2, sizeof logsh2, "%s,%s", logh, log2);
    snprintf(logscc, sizeof logscc, "-,-");
    const char *two[] = {gw1, gw2, NULL};
    const char *refused[] = {closed1, gw2, NULL};
    const char *hung[] = {gwh, gw2, NULL};
    const char *none[] = {closed1, closed2, NULL};
    const char *slow[] = {gwh, black, gw2, NULL};

    static const struct {
        const char *scenario, *name;
        int which; /* 0 two, 1 refused, 2 hung, 3 none, 4 slow */
        const char *env;
    } tests[] = {
        {"spread", "two gateways: flows spread by node pair as documented, the same flow the same gateway", 0,
         "GRIDSPLIT_DEBUG=1"},
        {"autosrc", "unbound sockets spread from the interface address of the own site", 0, NULL},
        {"refused-block", "first gateway refused: blocking connect through the second, then skips it", 1,
         "GRIDSPLIT_DEBUG=1"},
        {"refused-soerror", "first gateway refused: non-blocking connect, POLLOUT, SO_ERROR 0", 1, NULL},
        {"refused-again", "first gateway refused: non-blocking connect() until connected", 1, NULL},
        {"refused-threads", "first gateway refused: 8 threads x 4 connects, all through the second", 1,
         NULL},
        {"refused-readfirst", "first gateway refused: non-blocking, read first after POLLOUT", 1, NULL},
        {"hung-block", "first gateway hung: blocking connect fails over after the timeout, then skips it", 2,
         "GRIDSPLIT_TIMEOUT_MS=400"},
        {"hung-soerror", "first gateway hung: non-blocking SO_ERROR fails over after the timeout", 2,
         "GRIDSPLIT_TIMEOUT_MS=400"},
        {"slow-block", "hung, then SYNs dropped: blocking connect through the third after two timeouts",
         4, "GRIDSPLIT_TIMEOUT_MS=400 MG_UP=2"},
        {"slow-sleepread", "hung, then SYNs dropped: a reader in poll(POLLIN) gets through", 4,
         "GRIDSPLIT_TIMEOUT_MS=400 MG_UP=2"},
        {"slow-sleepsoerror", "hung, then SYNs dropped: SO_ERROR waits through the failover", 4,
         "GRIDSPLIT_TIMEOUT_MS=400 MG_UP=2"},
        {"allfail", "every gateway refused: ECONNREFUSED as with one, one line naming both", 3, NULL},
    };
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int w = tests[i].which;
        const char **gws = w == 0 ? two : w == 1 ? refused : w == 2 ? hung : w == 3 ? none : slow;
        const char *logs = w == 0 ? logs12 : w == 1 ? logsc2 : w == 2 ? logsh2 : w == 3 ? logscc
                                                                               : logscb2;
        const char *subnet = strcmp(tests[i].scenario, "autosrc") == 0 ? "127.0.0.0/8" : "127.0.1.0/24";
        double t0 = now_ms();
        int st;
        char *err = run_client(argv[0], tests[i].scenario, subnet, gws, logs, tests[i].env, &st);
        int bad = st != 0;
        char want[256];
        if (strcmp(tests[i].scenario, "spread") == 0) {
            for (int g = 0; g < 2; g++) {
                snprintf(want, sizeof want, "redirected via gateway %s ", gws[g]);
                if (!strstr(err, want)) {
                    fprintf(stderr, "  FAIL debug log never names gateway %s as chosen\n", gws[g]);
                    bad = 1;
                }
            }
        }
        if (strcmp(tests[i].scenario, "refused-block") == 0) {
            /* The refused gateway is named once as failed, and the next flow that
             * that would take it starts with the other one. */
            snprintf(want, sizeof want, "gateway %s of site \"a\" failed (connect to gateway: "
                     "Connection refused); trying gateway %s", closed1, gw2);
            int lines = 0;
            for (const char *q = err; (q = strstr(q, want)) != NULL; q++)
                lines++;
            if (lines != 1) {
                fprintf(stderr, "  FAIL %d failover lines '%s', want 1 (the second flow must "
                        "skip the refused gateway)\n", lines, want);
                bad = 1;
            }
        }
        if (strcmp(tests[i].scenario, "allfail") == 0) {
            snprintf(want, sizeof want, "cannot reach any of the 2 gateways of site \"a\" for a "
                     "connection to 127.0.2.30:%s: ", port_env);
            char *line = strstr(err, want);
            char w1[96], w2[96];
            snprintf(w1, sizeof w1, "%s (Connection refused)", closed1);
            snprintf(w2, sizeof w2, "%s (Connection refused)", closed2);
            if (!line || !strstr(line, w1) || !strstr(line, w2)) {
                fprintf(stderr, "  FAIL no line naming both gateways ('%s...')\n", want);
                bad = 1;
            }
        }
        if (bad)
            fprintf(stderr, "  client stderr (exit %d):\n%s", st, err);
        free(err);
        printf("%s %s (%.0f ms)\n", bad ? "FAIL" : "ok  ", tests[i].name, now_ms() - t0);
        fflush(stdout);
        bad ? failed++ : passed++;
    }
    printf("multigw: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
