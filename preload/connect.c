/*
 * connect.c - the connecting side of libgridsplit.so. connect() to another site is
 * turned into a connect to one of the own site's gateways (chosen by the node
 * pair, gateways.c; the next one on failure, handshake.c) followed by the GSq1/GSa1
 * exchange of docs/protocol.md (handshake.c); a blocking connect() waits for the
 * reply, a non-blocking one returns EINPROGRESS and the exchange is finished by
 * later calls on the fd. getsockopt(SO_ERROR), which applications call after
 * POLLOUT, reports the outcome as the kernel would.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/time.h>

#include "gs_internal.h"

/* connect() fails with the outcome of the handshake, which counts as reported:
 * getsockopt(SO_ERROR) says 0 afterwards, as the kernel clears sk_err. */
static int report_failure(struct gs_slot *s)
{
    pthread_mutex_lock(&s->mu);
    s->err_reported = 1;
    int e = s->phase == GS_P_FAILED ? s->err : 0;
    pthread_mutex_unlock(&s->mu);
    errno = e ? e : ECONNRESET;
    return -1;
}

/* Returns the connect() result for a blocking wait of at most wait_ms (SO_SNDTIMEO
 * when set_timeo, else the default bound). */
static int finish_blocking(int fd, struct gs_slot *s, int wait_ms, int set_timeo)
{
    int r = gs_drive(fd, s, wait_ms, 1);
    if (r == GS_ADV_DONE)
        return 0;
    if (r == GS_ADV_INTR) {
        /* Like the kernel: the connection attempt goes on; a later connect(),
         * getsockopt(SO_ERROR) or I/O call picks it up. */
        errno = EINTR;
        return -1;
    }
    if (r == GS_ADV_AGAIN) {
        if (set_timeo) {
            /* Linux returns EINPROGRESS when SO_SNDTIMEO expires on connect(). */
            errno = EINPROGRESS;
            return -1;
        }
        gs_fail_timeout(fd, s);
    }
    pthread_mutex_lock(&s->mu);
    int unreached = s->phase == GS_P_FAILED && s->fail_lan;
    int e = s->err;
    pthread_mutex_unlock(&s->mu);
    if (unreached) {
        /* No gateway could be reached: as when the kernel's own connect fails,
         * the socket is left unconnected and untracked, free for another
         * connect(). */
        gs_slot_clear(s);
        gs_disconnect(fd);
        errno = e;
        return -1;
    }
    return report_failure(s);
}

static int sndtimeo_ms(int fd, int *is_set)
{
    struct timeval tv = {0, 0};
    socklen_t l = sizeof tv;
    *is_set = 0;
    if (REAL(getsockopt)(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) == 0 &&
        (tv.tv_sec || tv.tv_usec)) {
        *is_set = 1;
        int64_t ms = (int64_t)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
        return ms > INT_MAX ? INT_MAX : (int)ms;
    }
    /* Unbounded: each gateway's try ends at its own deadline (handshake.c). */
    return INT_MAX;
}

/* connect() again on an fd whose redirected connect is pending or failed. Mirrors
 * the kernel: non-blocking -> EALREADY while in progress, 0 once connected (then
 * EISCONN), the error once failed; blocking -> wait for the outcome. */
static int reconnect_pending(int fd, struct gs_slot *s, const struct sockaddr *addr,
                             socklen_t len)
{
    if (gs_fd_nonblocking(fd)) {
        int r = gs_drive(fd, s, 0, 0);
        if (r == GS_ADV_AGAIN) {
            errno = EALREADY;
            return -1;
        }
        if (r == GS_ADV_DONE) {
            /* The kernel socket is still "connecting" in its own book-keeping: its
             * connect() returns 0 this once and EISCONN afterwards, as without us. */
            return REAL(connect)(fd, addr, len);
        }
        return report_failure(s);
    }
    int set;
    int ms = sndtimeo_ms(fd, &set);
    return finish_blocking(fd, s, ms, set);
}

/* The flow's source for the gateway spread: the socket's bound address if it has
 * one, else the node's address in its site (gs_config.own_addr). */
static void flow_source(int fd, const struct gs_config *cfg, struct gs_addr *src)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    static const uint8_t zero[16];
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
        gs_sockaddr_to_addr((struct sockaddr *)&ss, sl, src, NULL) == 0 &&
        memcmp(src->a, zero, sizeof zero) != 0)
        return;
    *src = cfg->own_addr;
}

static int redirect_connect(int fd, const struct sockaddr *addr, socklen_t len,
                            const struct gs_config *cfg, int site, const struct gs_addr *dst,
                            uint16_t dport)
{
    char dbuf[64];
    gs_addr_format(dst, dport, dbuf, sizeof dbuf);
    struct gs_slot *s = gs_slot_get(fd);
    if (!s) {
        static _Atomic int logged;
        if (!atomic_exchange(&logged, 1))
            gs_log("fd %d out of the tracked range (or out of memory); connect to %s is "
                   "NOT redirected", fd, dbuf);
        return REAL(connect)(fd, addr, len);
    }
    int saved = errno;
    struct gs_addr src;
    flow_source(fd, cfg, &src);
    uint32_t spread = gs_flow_spread(&src, dst);
    gs_lan_timers(cfg, fd);
    int nonblock = gs_fd_nonblocking(fd);
    int set = 0;
    int ms = nonblock ? 0 : sndtimeo_ms(fd, &set);

    pthread_mutex_lock(&s->mu);
    memset(&s->req, 0, sizeof s->req);
    memcpy(s->req.magic, GS_MAGIC_REQUEST, GS_MAGIC_LEN);
    s->req.version = GS_PROTO_VERSION;
    s->req.family = (uint8_t)dst->family;
    s->req.port_be = htons(dport);
    memcpy(s->req.addr, dst->a, dst->family == GS_FAMILY_V4 ? 4 : 16);
    s->req_sent = 0;
    s->rep_got = 0;
    s->err = 0;
    s->err_reported = 0;
    s->phase = GS_P_LAN;
    s->sock_family = addr->sa_family;
    s->gw_n = (uint8_t)gs_gw_order(cfg, spread, s->gw_order);
    /* getpeername() must show the address the application asked for. */
    s->peerlen = len > sizeof s->peer ? (socklen_t)sizeof s->peer : len;
    memcpy(&s->peer, addr, s->peerlen);
    gs_slot_bind_identity(fd, s);
    atomic_store_explicit(&s->flags, GS_F_IO, memory_order_release);
    if (gs_debug) {
        char gbuf[64], sbuf[64] = "none";
        gs_gw_format(cfg, s->gw_order[0], gbuf, sizeof gbuf);
        if (src.family) {
            gs_addr_format(&src, 0, sbuf, sizeof sbuf);
            *strrchr(sbuf, ':') = 0; /* no port */
        }
        unsigned pick = (unsigned)(spread % (uint32_t)cfg->ngw);
        gs_log("fd %d: connect to %s (site \"%s\") redirected via gateway %s (source %s, "
               "spread %08x, picks gateway %u of %d%s)", fd, dbuf, cfg->site[site].name, gbuf,
               sbuf, (unsigned)spread, pick + 1, cfg->ngw,
               s->gw_order[0] != pick ? ", which failed lately: tried last" : "");
    }
    /* Connects without blocking, whatever the socket's mode: the wait, if any, is
     * finish_blocking()'s, so that every gateway's try has the same deadline. */
    int e = gs_start_locked(fd, s);
    pthread_mutex_unlock(&s->mu);
    if (e) {
        /* No gateway can be reached (or the socket cannot connect at all, e.g.
         * EISCONN): that is the connect error, and the socket is left as the
         * kernel leaves one whose connect failed at once. */
        gs_slot_clear(s);
        errno = e;
        return -1;
    }
    errno = saved;
    if (nonblock) {
        /* Try to get the request out now; it usually has to wait until the LAN
         * handshake completes, which the next intercepted call notices. */
        if (gs_drive(fd, s, 0, 0) == GS_ADV_FAILED)
            return report_failure(s);
        errno = EINPROGRESS;
        return -1;
    }
    return finish_blocking(fd, s, ms, set);
}

/* On an unrouted grid a destination in no site of the node file (a site left out of
 * the topology, or refused for an overlapping address plan) is reachable only if
 * something outside the grid routes it: say so on stderr, then let the kernel try,
 * so the connection succeeds or fails as it would without us. At most a few lines
 * per process, whatever the number of such connects. */
static void name_unknown_destination(const struct gs_addr *dst, uint16_t dport)
{
    static _Atomic int told;
    if (atomic_fetch_add_explicit(&told, 1, memory_order_relaxed) >= 3)
        return;
    char dbuf[64];
    gs_addr_format(dst, dport, dbuf, sizeof dbuf);
    gs_log("connect to %s: the address is in no site of the node file, and the sites are not routed to "
           "each other (routed no), so only a route outside the grid can carry it; if it belongs to a site, "
           "add the site to the topology and rewrite the node file (gridsplit gateway nodes-config)", dbuf);
}

/* A TCP stream socket (not UDP, not SCTP's stream mode). */
static int is_tcp_stream(int fd)
{
    int type = 0, proto = 0;
    socklen_t l = sizeof type;
    if (REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0 || type != SOCK_STREAM)
        return 0;
    l = sizeof proto;
    return REAL(getsockopt)(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l) < 0 || proto == IPPROTO_TCP;
}

GS_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_UNLIKELY(s != NULL) && gs_slot_valid(fd, s)) {
        if (addr && len >= sizeof(sa_family_t) && addr->sa_family == AF_UNSPEC) {
            gs_slot_clear(s); /* dissolving the association: forget ours */
            return REAL(connect)(fd, addr, len);
        }
        if (atomic_load_explicit(&s->flags, memory_order_acquire) & GS_F_IO)
            return reconnect_pending(fd, s, addr, len);
        return REAL(connect)(fd, addr, len); /* established: EISCONN from the kernel */
    }
    if (GS_LIKELY(!addr || len < sizeof(sa_family_t) ||
                  (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)))
        return REAL(connect)(fd, addr, len);

    struct gs_addr dst;
    uint16_t dport;
    if (gs_sockaddr_to_addr(addr, len, &dst, &dport) < 0)
        return REAL(connect)(fd, addr, len);
    int saved = errno;
    const struct gs_config *cfg = gs_config();
    int site = cfg ? gs_config_classify(cfg, &dst) : -1;
    if (site < 0) {
        if (cfg && !cfg->routed && gs_config_in_no_site(cfg, &dst))
            name_unknown_destination(&dst, dport);
        else if (cfg && gs_lan_timers_on(cfg) && gs_config_in_own_site(cfg, &dst) && is_tcp_stream(fd))
            gs_lan_timers(cfg, fd); /* a same-site connection: its segments stay on the LAN */
        errno = saved;
        return REAL(connect)(fd, addr, len);
    }
    /* Only TCP streams are redirected (not UDP, not SCTP's stream mode). */
    if (!is_tcp_stream(fd)) {
        errno = saved;
        return REAL(connect)(fd, addr, len);
    }
    errno = saved;
    return redirect_connect(fd, addr, len, cfg, site, &dst, dport);
}

/* ------------------------------------------------------ getsockopt(SO_ERROR) */

GS_EXPORT int getsockopt(int fd, int level, int optname, void *val, socklen_t *len)
{
    struct gs_slot *s = gs_slot_peek_io(fd);
    if (GS_LIKELY(s == NULL) || level != SOL_SOCKET || optname != SO_ERROR || !val || !len ||
        *len < (socklen_t)sizeof(int) || !gs_slot_valid(fd, s))
        return REAL(getsockopt)(fd, level, optname, val, len);

    int r = gs_drive(fd, s, 0, 0);
    if (r == GS_ADV_AGAIN) {
        if (gs_slot_lan_pending(s) && !gs_slot_failing_over(s)) {
            /* Still connecting to the gateway (the caller did not wait for POLLOUT):
             * the kernel would say 0 too. After a failover the caller did see its
             * first try end (POLLOUT or POLLERR): it waits for the outcome below. */
            *(int *)val = 0;
            *len = sizeof(int);
            return 0;
        }
        /* The caller saw POLLOUT and wants the outcome: wait for the reply. This
         * is the one place a non-blocking caller can be held, for one WAN round
         * trip plus the far connect. */
        r = gs_settle(fd, s) ? GS_ADV_FAILED : GS_ADV_DONE;
    }
    int v = 0;
    if (r == GS_ADV_FAILED) {
        pthread_mutex_lock(&s->mu);
        if (s->phase == GS_P_FAILED && !s->err_reported) {
            v = s->err; /* reported once, as the kernel clears sk_err on read */
            s->err_reported = 1;
        }
        pthread_mutex_unlock(&s->mu);
    }
    *(int *)val = v;
    *len = sizeof(int);
    return 0;
}
