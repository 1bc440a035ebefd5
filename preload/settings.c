/*
 * settings.c - what a process's environment tells libgridsplit.so, and its log line.
 * The constructor reads the GRIDSPLIT_* tuning variables (debug, timeouts, LAN
 * timers); the node file (GRIDSPLIT_CONFIG, GRIDSPLIT_SITE, GRIDSPLIT_SPLIT) is read
 * on first use instead, so that processes that never open an inter-site socket
 * stay silent. gs_lan_timers() applies the LAN timers to a LAN connection's socket
 * (relayed, or within the site), on the connecting (connect.c) and the accepting
 * side (accept.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_internal.h"

int gs_debug;
int gs_accept_timeout_ms = 2000;
/* Bound on each gateway's try, from the connect to it to its GSa1 reply; when it
 * passes, the next gateway of the site is tried (handshake.c). Linux gives up a
 * blocking connect after ~127 s of SYN retries; the gateway reports TIMEOUT itself
 * well before that, so this bound only matters when the gateway hangs or its
 * host drops SYNs. */
int gs_handshake_timeout_ms = 130000;
/* LAN timers for the connections whose every segment stays on the site's LAN
 * (relayed ones, to or from the site's gateway, and those within the site): with an
 * 8 ms minimum RTO a loss only a timeout recovers costs 8 ms instead of Linux's
 * 200 ms, and so does a lost last segment of a message, which Linux probes after
 * two RTTs plus that minimum (its tail-loss probe with one segment in flight); the
 * delayed-ACK bound keeps ACKs under it (docs/design/lan-legs.md). The node file's
 * `lan_timers` line sets them ([gateways] lan_rto_min_us); GRIDSPLIT_LAN_RTO_MIN_US
 * and GRIDSPLIT_LAN_DELACK_MAX_US, when set, take their place (-1: not set). */
static int gs_lan_rto_min_us = -1;
static int gs_lan_delack_max_us = -1;

/* ---------------------------------------------------------------- logging */

void gs_log(const char *fmt, ...)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "libgridsplit[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    int saved = errno;
    (void)!REAL(write)(2, buf, len);
    errno = saved;
}

/* ----------------------------------------------------------- configuration */

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static struct gs_config config;
static int config_ok;

static void load_config_once(void)
{
    int saved = errno;
    char err[400];
    const char *path = getenv("GRIDSPLIT_CONFIG");
    const char *site = getenv("GRIDSPLIT_SITE");
    if (site && !*site)
        site = NULL;
    if (!path || !*path) {
        gs_log("GRIDSPLIT_CONFIG is not set; connections are NOT redirected");
    } else if (gs_config_load(path, site, &config, err, sizeof err) < 0) {
        gs_log("GRIDSPLIT_CONFIG=%s: %s; connections are NOT redirected", path, err);
    } else {
        config_ok = 1;
        /* GRIDSPLIT_SPLIT (set by `--split`): all, or the host rule, over the node
         * file's split policy (direct_to). A bad value keeps the policy, said once. */
        if (gs_config_split_mode(&config, getenv("GRIDSPLIT_SPLIT"), err, sizeof err) < 0)
            gs_log("%s; following the node file's policy", err);
        if (config.gw_ignored)
            gs_log("site \"%s\" has %d gateways in the node file; only the first %d are used",
                   config.site[config.own].name, config.ngw + config.gw_ignored, GS_MAX_GATEWAYS);
        if (gs_debug) {
            char gws[300] = "", me[64] = "none";
            size_t n = 0;
            for (int i = 0; i < config.ngw && n < sizeof gws; i++) {
                char gw[64];
                gs_gw_format(&config, i, gw, sizeof gw);
                int m = snprintf(gws + n, sizeof gws - n, "%s%s", i ? ", " : "", gw);
                n += m > 0 ? (size_t)m : 0;
            }
            if (config.own_addr.family) {
                gs_addr_format(&config.own_addr, 0, me, sizeof me);
                *strrchr(me, ':') = 0; /* no port */
            }
            /* The start of the line is the one-gateway format tests/test_split.py knows. */
            gs_log("own site \"%s\", gateway%s %s, %d site line(s) in the node file; own address "
                   "%s (unbound sockets' source in the choice of gateway)%s",
                   config.site[config.own].name, config.ngw > 1 ? "s" : "", gws, config.nsites, me,
                   config.ngw > 1 ? "; flows spread over the gateways by node pair" : "");
            if (config.nhosts)
                gs_log("host rule: %d listed host(s); this host is %s, so %s", config.nhosts,
                       config.own_is_host ? "one" : "not one",
                       config.own_is_host ? "all its cross-site connections are split"
                                          : "only its connections to a listed host are split");
        }
    }
    errno = saved;
}

/* Loaded on first use rather than in the constructor, so that the processes of a
 * job script that never open an inter-site socket (shells, sed, ...) stay silent. */
const struct gs_config *gs_config(void)
{
    pthread_once(&config_once, load_config_once);
    return config_ok ? &config : NULL;
}

/* -------------------------------------------------------------- LAN timers */

/* TCP_RTO_MIN_US and TCP_DELACK_MAX_US arrived in Linux 6.15; older headers lack them. */
#ifndef TCP_RTO_MIN_US
#define TCP_RTO_MIN_US 45
#endif
#ifndef TCP_DELACK_MAX_US
#define TCP_DELACK_MAX_US 46
#endif

static void lan_timer_values(const struct gs_config *cfg, int vals[2])
{
    vals[0] = gs_lan_rto_min_us >= 0 ? gs_lan_rto_min_us : cfg->lan_rto_min_us;
    vals[1] = gs_lan_delack_max_us >= 0 ? gs_lan_delack_max_us : cfg->lan_delack_max_us;
}

int gs_lan_timers_on(const struct gs_config *cfg)
{
    int vals[2];
    lan_timer_values(cfg, vals);
    return vals[0] > 0 || vals[1] > 0;
}

void gs_lan_timers(const struct gs_config *cfg, int fd)
{
    static const struct { int opt; const char *name; } opts[] = {
        {TCP_RTO_MIN_US, "LAN minimum RTO"},
        {TCP_DELACK_MAX_US, "LAN delayed-ACK bound"},
    };
    /* Set once a kernel has said it does not know the options: the rest of the
     * process's connections skip the two system calls. */
    static _Atomic int kernel_lacks;
    int vals[2];
    lan_timer_values(cfg, vals);
    for (size_t i = 0; i < sizeof opts / sizeof opts[0] && !kernel_lacks; i++) {
        if (vals[i] <= 0)
            continue;
        if (setsockopt(fd, IPPROTO_TCP, opts[i].opt, &vals[i], sizeof vals[i]) == 0)
            continue;
        /* Linux's defaults stay, which is slower after a LAN loss, not wrong.
         * ENOPROTOOPT is a kernel before 6.15: nothing a rank can change, and
         * every rank of a job would print it, so it is said under
         * GRIDSPLIT_DEBUG only; `gridsplit run` says it once for the job
         * (python/gridsplit/launch.py). Any other refusal (EINVAL: a value
         * under two jiffies, e.g. on a HZ=100 kernel) is the config's, said
         * once per process. */
        int err = errno;
        static _Atomic int logged;
        if (err == ENOPROTOOPT) {
            kernel_lacks = 1;
            if (gs_debug)
                gs_log("%s: the kernel lacks the option (needs Linux 6.15+); LAN connections "
                       "keep its default timers", opts[i].name);
        } else if (!atomic_exchange(&logged, 1) || gs_debug) {
            gs_log("%s of %d us refused by the kernel (%s); LAN connections keep its "
                   "default timers (a value under two jiffies? [gateways] lan_rto_min_us)",
                   opts[i].name, vals[i], strerror(err));
        }
    }
}

/* ------------------------------------------------------------- constructor */

static int env_int(const char *name, int def, int min)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < min || x > 24L * 3600 * 1000)
        return def;
    return (int)x;
}

__attribute__((constructor)) static void gs_init(void)
{
    gs_resolve_real();
    const char *d = getenv("GRIDSPLIT_DEBUG");
    gs_debug = d && *d && strcmp(d, "0") != 0;
    gs_handshake_timeout_ms = env_int("GRIDSPLIT_TIMEOUT_MS", gs_handshake_timeout_ms, 1);
    gs_accept_timeout_ms = env_int("GRIDSPLIT_ACCEPT_TIMEOUT_MS", gs_accept_timeout_ms, 1);
    gs_lan_rto_min_us = env_int("GRIDSPLIT_LAN_RTO_MIN_US", -1, 0);
    gs_lan_delack_max_us = env_int("GRIDSPLIT_LAN_DELACK_MAX_US", -1, 0);
    pthread_atfork(NULL, NULL, gs_table_atfork_child);
}
