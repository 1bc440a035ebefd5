/*
 * handshake.c - the handshake of a redirected connect with the own site's gateway
 * (docs/protocol.md sections 1-2), as a state machine on the fd's slot:
 * LAN (non-blocking connect to the gateway) -> REQ (GSq1 being sent) -> REPLY
 * (GSa1 being read) -> OK | FAILED. Each step is a non-blocking syscall made under
 * the slot mutex; every wait is a poll() with a deadline, made without the mutex.
 * connect.c starts the machine and reports its outcome to connect() and
 * getsockopt(SO_ERROR); io.c drives it from the I/O wrappers, dup.c before a
 * pending fd is duplicated, accept.c from getpeername().
 *
 * A site may have several gateways (gateways.c gives the order to try them in).
 * Each try has its own deadline (gs_handshake_timeout_ms from its connect); when a
 * gateway cannot be reached, drops the connection before replying, or passes its
 * deadline, next_gateway_locked() moves the same socket on to the next one
 * (connect(AF_UNSPEC), then a non-blocking connect), whichever call drives the
 * machine. A GSa1 reply, whatever its status, ends the tries.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "gs_internal.h"

static int status_errno(uint8_t status)
{
    switch (status) {
    case GS_STATUS_OK: return 0;
    case GS_STATUS_REFUSED: return ECONNREFUSED;
    case GS_STATUS_UNREACHABLE: return EHOSTUNREACH;
    case GS_STATUS_FORBIDDEN: return EACCES;
    case GS_STATUS_TIMEOUT: return ETIMEDOUT;
    case GS_STATUS_NO_LINK: return ENETUNREACH;
    case GS_STATUS_BAD_REQUEST: return EPROTO;
    default: return EPROTO; /* unknown status: a newer gateway; fail loudly */
    }
}

static void fail_locked(int fd, struct gs_slot *s, int err, const char *why)
{
    s->phase = GS_P_FAILED;
    s->err = err;
    s->err_reported = 0;
    atomic_store_explicit(&s->flags, GS_F_IO, memory_order_release);
    if (gs_debug)
        gs_log("fd %d: redirected connect failed: %s (%s)", fd, why, strerror(err));
}

/* ------------------------------------------------- gateways: start, failover */

static void req_dst(const struct gs_slot *s, char *buf, size_t len)
{
    struct gs_addr a;
    memset(&a, 0, sizeof a);
    a.family = s->req.family;
    memcpy(a.a, s->req.addr, sizeof a.a);
    gs_addr_format(&a, ntohs(s->req.port_be), buf, len);
}

/* connect() that never blocks: a blocking socket gets O_NONBLOCK for the duration
 * of the call, so that every gateway connect is bounded by the handshake's own
 * deadline and made under the slot mutex without waiting. The flag lives on the
 * open file description, shared with dup()s and fork()ed copies: for those few
 * microseconds only a call that bypasses the library (the gate of io.c holds the
 * slot mutex first) could see it. */
static int connect_nonblocking(int fd, const struct sockaddr *sa, socklen_t len)
{
    int fl = REAL(fcntl)(fd, F_GETFL);
    int toggle = fl >= 0 && !(fl & O_NONBLOCK);
    if (toggle)
        REAL(fcntl)(fd, F_SETFL, fl | O_NONBLOCK);
    int r = REAL(connect)(fd, sa, len);
    int e = errno;
    if (toggle)
        REAL(fcntl)(fd, F_SETFL, fl);
    errno = e;
    return r;
}

void gs_disconnect(int fd)
{
    int saved = errno;
    struct sockaddr sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_family = AF_UNSPEC;
    (void)REAL(connect)(fd, &sa, sizeof sa);
    /* Disconnecting an established or connecting socket leaves ECONNRESET pending. */
    int e = 0;
    socklen_t l = sizeof e;
    (void)REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &e, &l);
    errno = saved;
}

/* Connect fd to gateway gw_order[gw_at] without blocking: 0 when the connect is in
 * progress (its try begins: phase LAN, deadline set), else an errno. EAFNOSUPPORT:
 * an IPv6 gateway cannot be reached from an AF_INET socket. */
static int connect_gw_locked(int fd, struct gs_slot *s, const struct gs_config *cfg)
{
    const struct gs_site *st = &cfg->site[cfg->gw_line[s->gw_order[s->gw_at]]];
    struct sockaddr_storage sa;
    socklen_t len = gs_addr_to_sockaddr(&st->gw, st->gw_port, s->sock_family, &sa);
    if (!len)
        return EAFNOSUPPORT;
    /* A non-blocking connect() on TCP cannot be interrupted; EINTR would mean the
     * attempt goes on, like EINPROGRESS. */
    if (connect_nonblocking(fd, (struct sockaddr *)&sa, len) < 0 && errno != EINPROGRESS &&
        errno != EINTR)
        return errno;
    s->phase = GS_P_LAN;
    s->req_sent = 0;
    s->rep_got = 0;
    s->deadline_ms = gs_now_ms() + gs_handshake_timeout_ms;
    if (gs_debug) {
        char dbuf[64], gbuf[64];
        req_dst(s, dbuf, sizeof dbuf);
        gs_gw_format(cfg, s->gw_order[s->gw_at], gbuf, sizeof gbuf);
        gs_log("fd %d: connect to %s via gateway %s (try %d of %d)", fd, dbuf, gbuf,
               s->gw_at + 1, s->gw_n);
    }
    return 0;
}

/* Every gateway failed: one line naming them all (once per process, every time
 * with GRIDSPLIT_DEBUG), as the single gateway's line always was. */
static void log_all_failed(int fd, const struct gs_slot *s, const struct gs_config *cfg)
{
    static _Atomic int logged;
    if (atomic_exchange(&logged, 1) && !gs_debug)
        return;
    char dbuf[64], gbuf[64], list[400];
    req_dst(s, dbuf, sizeof dbuf);
    if (s->gw_n == 1) {
        gs_gw_format(cfg, s->gw_order[0], gbuf, sizeof gbuf);
        gs_log("cannot reach gateway %s (%s) for a connection to %s", gbuf,
               strerror(s->gw_err[0]), dbuf);
        return;
    }
    size_t n = 0;
    list[0] = 0;
    for (int k = 0; k < s->gw_n && n < sizeof list; k++) {
        gs_gw_format(cfg, s->gw_order[k], gbuf, sizeof gbuf);
        int m = snprintf(list + n, sizeof list - n, "%s%s (%s)", k ? ", " : "", gbuf,
                         s->gw_err[k] ? strerror(s->gw_err[k]) : "not tried");
        if (m < 0)
            break;
        n += (size_t)m;
    }
    (void)fd;
    gs_log("cannot reach any of the %d gateways of site \"%s\" for a connection to %s: %s",
           s->gw_n, cfg->site[cfg->own].name, dbuf, list);
}

/* The try of gateway gw_order[gw_at] failed with err (lan: before the connect to
 * it was established). If err says the gateway failed and another is left, mark
 * it failed and go on to the next one, on the same socket (disconnected with
 * connect(AF_UNSPEC): Linux lets a TCP socket connect again, keeping its options
 * and its bound address). Returns 0 when a new try is in progress, -1 when the
 * slot is FAILED with the last errno. */
static int next_gateway_locked(int fd, struct gs_slot *s, int err, int lan, const char *why)
{
    const struct gs_config *cfg = gs_config();
    for (;;) {
        int skip = err == EAFNOSUPPORT; /* not the gateway's fault: not marked */
        if (skip) {
            err = ENETUNREACH;
            static _Atomic int logged;
            if (cfg && (!atomic_exchange(&logged, 1) || gs_debug)) {
                char gbuf[64];
                gs_gw_format(cfg, s->gw_order[s->gw_at], gbuf, sizeof gbuf);
                gs_log("cannot reach IPv6 gateway %s from an AF_INET socket", gbuf);
            }
        }
        int fo = cfg && (skip || gs_gw_errno_fails_over(err));
        s->gw_err[s->gw_at] = (uint8_t)(err > 0 && err < 256 ? err : EIO);
        int last = s->gw_at + 1 >= s->gw_n;
        if (fo && !skip) {
            char gbuf[64], nbuf[64];
            gs_gw_format(cfg, s->gw_order[s->gw_at], gbuf, sizeof gbuf);
            int fresh = gs_gw_mark_failed(s->gw_order[s->gw_at]);
            if (!last && (fresh || gs_debug)) {
                gs_gw_format(cfg, s->gw_order[s->gw_at + 1], nbuf, sizeof nbuf);
                gs_log("fd %d: gateway %s of site \"%s\" failed (%s: %s); trying gateway %s, "
                       "and %s last for new connections for %d s", fd, gbuf,
                       cfg->site[cfg->own].name, why, strerror(err), nbuf, gbuf,
                       GS_GW_RETRY_MS / 1000);
            }
        }
        if (!fo || last) {
            s->fail_lan = (uint8_t)lan;
            fail_locked(fd, s, err, why);
            if (fo)
                log_all_failed(fd, s, cfg);
            return -1;
        }
        s->gw_at++;
        gs_disconnect(fd);
        err = connect_gw_locked(fd, s, cfg);
        if (err == 0)
            return 0;
        lan = 1;
        why = "connect to gateway";
    }
}

int gs_start_locked(int fd, struct gs_slot *s)
{
    const struct gs_config *cfg = gs_config();
    s->gw_at = 0;
    s->fail_lan = 0;
    memset(s->gw_err, 0, sizeof s->gw_err);
    int e = cfg && s->gw_n ? connect_gw_locked(fd, s, cfg) : ENETUNREACH;
    if (e == 0)
        return 0;
    if (next_gateway_locked(fd, s, e, 1, "connect to gateway") == 0)
        return 0;
    return s->err;
}

/* The non-blocking send() or recv() of a step failed (errno): EINTR says try again
 * (-1), EAGAIN says wait in poll() for `want` (unless this gateway's time is up:
 * then the next one is tried), anything else fails this gateway. */
static int step_error_locked(int fd, struct gs_slot *s, short want, short *events,
                             const char *why)
{
    if (errno == EINTR)
        return -1;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (gs_now_ms() < s->deadline_ms) {
            *events = want;
            return GS_ADV_AGAIN;
        }
        return next_gateway_locked(fd, s, ETIMEDOUT, 0, "no reply from gateway in time") < 0
                   ? GS_ADV_FAILED
                   : -1;
    }
    return next_gateway_locked(fd, s, errno, 0, why) < 0 ? GS_ADV_FAILED : -1;
}

/* Advance the handshake of fd as far as possible without blocking. Called with
 * s->mu held. On GS_ADV_AGAIN, *events says what poll() should wait for. */
static int step_locked(int fd, struct gs_slot *s, short *events)
{
    for (;;) {
        switch (s->phase) {
        case GS_P_LAN: {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int r = poll(&p, 1, 0);
            if (r == 0 && gs_now_ms() >= s->deadline_ms) {
                if (next_gateway_locked(fd, s, ETIMEDOUT, 1, "connect to gateway timed out") < 0)
                    return GS_ADV_FAILED;
                continue;
            }
            if (r == 0 || (r < 0 && errno == EINTR)) {
                *events = POLLOUT;
                return GS_ADV_AGAIN;
            }
            int e = 0;
            socklen_t l = sizeof e;
            if (r < 0)
                e = errno;
            else if (REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
                e = errno;
            else if (!e && !(p.revents & POLLOUT))
                e = ECONNRESET;
            if (e) {
                if (next_gateway_locked(fd, s, e, 1, "connect to gateway") < 0)
                    return GS_ADV_FAILED;
                continue;
            }
            s->phase = GS_P_REQ;
            continue;
        }
        case GS_P_REQ: {
            ssize_t n = REAL(send)(fd, (const uint8_t *)&s->req + s->req_sent,
                                   sizeof s->req - s->req_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0) {
                int r = step_error_locked(fd, s, POLLOUT, events, "sending request to gateway");
                if (r < 0)
                    continue;
                return r;
            }
            s->req_sent = (uint8_t)(s->req_sent + n);
            if (s->req_sent == sizeof s->req)
                s->phase = GS_P_REPLY;
            continue;
        }
        case GS_P_REPLY: {
            /* Read at most what is missing of the 8-byte reply: the bytes after it
             * belong to the application. */
            ssize_t n = REAL(recv)(fd, s->rep + s->rep_got, sizeof s->rep - s->rep_got,
                                   MSG_DONTWAIT);
            if (n < 0) {
                int r = step_error_locked(fd, s, POLLIN, events, "reading gateway reply");
                if (r < 0)
                    continue;
                return r;
            }
            if (n == 0) {
                if (next_gateway_locked(fd, s, ECONNRESET, 0,
                                        "gateway closed the connection before replying") < 0)
                    return GS_ADV_FAILED;
                continue;
            }
            s->rep_got = (uint8_t)(s->rep_got + n);
            if (s->rep_got < sizeof s->rep)
                continue;
            /* The gateway answered: whatever it says, it is alive. */
            gs_gw_mark_alive(s->gw_order[s->gw_at]);
            const struct gs_reply *rep = (const struct gs_reply *)s->rep;
            if (memcmp(rep->magic, GS_MAGIC_REPLY, GS_MAGIC_LEN) != 0) {
                gs_log("fd %d: gateway reply has a bad magic (not GSa1); failing the connection",
                       fd);
                fail_locked(fd, s, EPROTO, "bad reply magic");
                return GS_ADV_FAILED;
            }
            int e = status_errno(rep->status);
            if (e) {
                char why[48];
                snprintf(why, sizeof why, "gateway status %u", (unsigned)rep->status);
                fail_locked(fd, s, e, why);
                return GS_ADV_FAILED;
            }
            s->phase = GS_P_OK;
            /* From here on the fd is a plain stream: I/O wrappers take the fast path
             * again; only getpeername() still looks at the slot. */
            atomic_store_explicit(&s->flags, GS_F_PEER, memory_order_release);
            if (gs_debug)
                gs_log("fd %d: redirected connect established", fd);
            return GS_ADV_DONE;
        }
        case GS_P_FAILED:
            return GS_ADV_FAILED;
        default:
            return GS_ADV_DONE;
        }
    }
}

/* gs_drive(), stopping early (GS_ADV_AGAIN) once the phase reaches `until`. */
static int drive_to(int fd, struct gs_slot *s, int wait_ms, int return_on_intr, int until)
{
    int64_t deadline = wait_ms > 0 ? gs_now_ms() + wait_ms : 0;
    for (;;) {
        short events = 0;
        int64_t try_deadline = 0;
        int reached = 0;
        pthread_mutex_lock(&s->mu);
        int r;
        if (!(atomic_load_explicit(&s->flags, memory_order_relaxed) & GS_F_IO)) {
            r = GS_ADV_DONE; /* finished by another thread, or closed */
        } else {
            r = step_locked(fd, s, &events);
            try_deadline = s->deadline_ms;
            reached = s->phase >= until;
        }
        pthread_mutex_unlock(&s->mu);
        if (r != GS_ADV_AGAIN || wait_ms <= 0 || reached)
            return r;
        int64_t now = gs_now_ms(), left = deadline - now;
        if (left <= 0)
            return GS_ADV_AGAIN;
        /* Wake up when this gateway's time is up, to try the next one. */
        if (try_deadline - now + 1 < left)
            left = try_deadline - now + 1 > 1 ? try_deadline - now + 1 : 1;
        struct pollfd p = {.fd = fd, .events = events};
        if (poll(&p, 1, (int)left) < 0 && errno == EINTR && return_on_intr)
            return GS_ADV_INTR;
    }
}

int gs_drive(int fd, struct gs_slot *s, int wait_ms, int return_on_intr)
{
    return drive_to(fd, s, wait_ms, return_on_intr, GS_P_OK);
}

int gs_drive_until_sent(int fd, struct gs_slot *s, int wait_ms)
{
    return drive_to(fd, s, wait_ms, 0, GS_P_REPLY);
}

void gs_fail_timeout(int fd, struct gs_slot *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->phase != GS_P_OK && s->phase != GS_P_FAILED &&
        (atomic_load_explicit(&s->flags, memory_order_relaxed) & GS_F_IO))
        fail_locked(fd, s, ETIMEDOUT, "no reply from gateway in time");
    pthread_mutex_unlock(&s->mu);
}

int gs_slot_err(struct gs_slot *s)
{
    pthread_mutex_lock(&s->mu);
    int e = s->phase == GS_P_FAILED ? s->err : 0;
    pthread_mutex_unlock(&s->mu);
    return e ? e : ECONNRESET;
}

int gs_slot_lan_pending(struct gs_slot *s)
{
    pthread_mutex_lock(&s->mu);
    int lan = s->phase == GS_P_LAN;
    pthread_mutex_unlock(&s->mu);
    return lan;
}

int gs_slot_failing_over(struct gs_slot *s)
{
    pthread_mutex_lock(&s->mu);
    int r = s->gw_at > 0 && (s->phase == GS_P_LAN || s->phase == GS_P_REQ);
    pthread_mutex_unlock(&s->mu);
    return r;
}

void gs_slot_note_close(int fd, struct gs_slot *s)
{
    int saved = errno;
    pthread_mutex_lock(&s->mu);
    if ((atomic_load_explicit(&s->flags, memory_order_relaxed) & GS_F_IO) &&
        s->phase == GS_P_LAN) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int e = 0;
        socklen_t l = sizeof e;
        if (poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) &&
            REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && gs_gw_errno_fails_over(e))
            gs_gw_mark_failed(s->gw_order[s->gw_at]);
    }
    pthread_mutex_unlock(&s->mu);
    errno = saved;
}

int gs_fd_nonblocking(int fd)
{
    int fl = REAL(fcntl)(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

int gs_settle(int fd, struct gs_slot *s)
{
    /* Unbounded here: each gateway's try has its deadline, and there are few. */
    int r = gs_drive(fd, s, INT_MAX, 0);
    if (r == GS_ADV_AGAIN) {
        gs_fail_timeout(fd, s);
        r = GS_ADV_FAILED;
    }
    return r == GS_ADV_DONE ? 0 : gs_slot_err(s);
}

int gs_wait_outcome(int fd, struct gs_slot *s)
{
    int saved = errno;
    int r = gs_drive(fd, s, 0, 0), e = 0;
    if (r == GS_ADV_AGAIN)
        e = gs_slot_lan_pending(s) ? EINPROGRESS : gs_settle(fd, s);
    else if (r == GS_ADV_FAILED)
        e = gs_slot_err(s);
    errno = saved;
    return e;
}
