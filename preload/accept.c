/*
 * accept.c - the accepting side of libgridsplit.so. A connection relayed from
 * another site reaches this node from the own site's gateway (the remote gateway
 * of docs/protocol.md section 3), which first sends a 24-byte GSo1 header naming
 * the original source. accept()/accept4() consume that header and report the
 * original address, and getpeername() keeps reporting it, so that applications
 * that check who connected (Open MPI's TCP BTL matches the source address against
 * the peer's published addresses) see the real peer and not the gateway.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "gs_internal.h"

/* Read exactly sizeof(struct gs_origin) bytes, whatever the fd's blocking mode,
 * within gs_accept_timeout_ms. The gateway sends the header right after its
 * connect, so on a LAN it is normally already there. Returns 0, or -1 with a reason. */
static int read_origin(int fd, struct gs_origin *o, const char **why)
{
    uint8_t *p = (uint8_t *)o;
    size_t got = 0;
    int64_t deadline = gs_now_ms() + gs_accept_timeout_ms;
    while (got < sizeof *o) {
        ssize_t n = REAL(recv)(fd, p + got, sizeof *o - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0) {
            *why = "connection closed before the full header";
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            *why = strerror(errno);
            return -1;
        }
        int64_t left = deadline - gs_now_ms();
        if (left <= 0) {
            *why = "timed out waiting for the header";
            return -1;
        }
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        (void)poll(&pf, 1, (int)left);
    }
    if (memcmp(o->magic, GS_MAGIC_ORIGIN, GS_MAGIC_LEN) != 0) {
        *why = "bad magic (not GSo1)";
        return -1;
    }
    if (o->version != GS_PROTO_VERSION) {
        *why = "unsupported version";
        return -1;
    }
    if (o->family != GS_FAMILY_V4 && o->family != GS_FAMILY_V6) {
        *why = "bad address family";
        return -1;
    }
    return 0;
}

/* Shared body of accept() and accept4(). use4 selects the real accept4. */
static int accept_common(int lfd, struct sockaddr *addr, socklen_t *addrlen, int flags, int use4)
{
    /* addr without addrlen is the caller's EFAULT to get; don't paper over it. */
    if (addr && !addrlen)
        return use4 ? REAL(accept4)(lfd, addr, addrlen, flags) : REAL(accept)(lfd, addr, addrlen);
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = use4 ? REAL(accept4)(lfd, (struct sockaddr *)&ss, &sl, flags)
                      : REAL(accept)(lfd, (struct sockaddr *)&ss, &sl);
        if (fd < 0)
            return fd;
        if (GS_LIKELY(ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) {
            gs_copy_out_addr(&ss, sl, addr, addrlen);
            return fd;
        }
        int saved = errno;
        struct gs_addr peer;
        const struct gs_config *cfg = gs_config();
        int have_peer = cfg && gs_sockaddr_to_addr((struct sockaddr *)&ss, sl, &peer, NULL) == 0;
        if (!have_peer || !gs_config_is_own_gateway(cfg, &peer)) {
            /* A direct connection (same site, or not through gridsplit). */
            struct gs_slot *old = gs_slot_peek(fd);
            if (old)
                gs_slot_clear(old); /* stale state of a number closed behind our back */
            if (have_peer && gs_lan_timers_on(cfg) && gs_config_in_own_site(cfg, &peer))
                gs_lan_timers(cfg, fd); /* a same-site connection: its segments stay on the LAN */
            errno = saved;
            gs_copy_out_addr(&ss, sl, addr, addrlen);
            return fd;
        }

        struct gs_origin o;
        const char *why = NULL;
        if (read_origin(fd, &o, &why) < 0) {
            /* Never hand a half-read stream to the application: drop it and go on
             * accepting (on a non-blocking listener the next accept may well say
             * EAGAIN, which is then what the caller gets). */
            static _Atomic int logged;
            if (!atomic_exchange(&logged, 1) || gs_debug)
                gs_log("dropped a connection from the gateway: origin header: %s "
                       "(further such drops are not logged)", why);
            REAL(close)(fd);
            errno = saved;
            continue;
        }
        struct gs_addr orig;
        memset(&orig, 0, sizeof orig);
        orig.family = o.family;
        memcpy(orig.a, o.addr, o.family == GS_FAMILY_V4 ? 4 : 16);
        uint16_t oport = ntohs(o.port_be);
        struct sockaddr_storage os;
        /* Same family as the kernel would have used: an AF_INET6 listener reports an
         * IPv4 origin as ::ffff:a.b.c.d. An IPv6 origin on an AF_INET listener can
         * only be reported as a sockaddr_in6. */
        socklen_t ol = gs_addr_to_sockaddr(&orig, oport, ss.ss_family, &os);
        if (!ol)
            ol = gs_addr_to_sockaddr(&orig, oport, AF_INET6, &os);

        gs_lan_timers(cfg, fd);
        struct gs_slot *s = gs_slot_get(fd);
        if (s) {
            pthread_mutex_lock(&s->mu);
            s->phase = GS_P_ACCEPTED;
            s->err = 0;
            s->peerlen = ol;
            memcpy(&s->peer, &os, sizeof os);
            gs_slot_bind_identity(fd, s);
            atomic_store_explicit(&s->flags, GS_F_PEER, memory_order_release);
            pthread_mutex_unlock(&s->mu);
        }
        if (gs_debug) {
            char b[64];
            gs_addr_format(&orig, oport, b, sizeof b);
            gs_log("fd %d: accepted relayed connection from %s", fd, b);
        }
        errno = saved;
        gs_copy_out_addr(&os, ol, addr, addrlen);
        return fd;
    }
}

GS_EXPORT int accept(int lfd, struct sockaddr *addr, socklen_t *addrlen)
{
    return accept_common(lfd, addr, addrlen, 0, 0);
}

GS_EXPORT int accept4(int lfd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
    return accept_common(lfd, addr, addrlen, flags, 1);
}

GS_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_LIKELY(s == NULL) || !addr || !addrlen || !gs_slot_valid(fd, s))
        return REAL(getpeername)(fd, addr, addrlen);
    /* Some programs test a non-blocking connect with getpeername() after POLLOUT
     * instead of SO_ERROR: they get the same (bounded) wait for the reply. */
    if (atomic_load_explicit(&s->flags, memory_order_acquire) & GS_F_IO)
        gs_wait_outcome(fd, s);
    pthread_mutex_lock(&s->mu);
    uint8_t flags = atomic_load_explicit(&s->flags, memory_order_relaxed);
    int ok = (flags & GS_F_PEER) && (s->phase == GS_P_OK || s->phase == GS_P_ACCEPTED);
    struct sockaddr_storage ss;
    socklen_t len = s->peerlen;
    memcpy(&ss, &s->peer, sizeof ss);
    pthread_mutex_unlock(&s->mu);
    if (!ok) {
        if (!flags)
            return REAL(getpeername)(fd, addr, addrlen);
        /* Redirected connect not (yet) established: not connected to the peer. */
        errno = ENOTCONN;
        return -1;
    }
    gs_copy_out_addr(&ss, len, addr, addrlen);
    return 0;
}
