/*
 * handshake.c - the handshake of a redirected connect with the own site's gateway
 * (docs/protocol.md sections 1-2), as a state machine on the fd's slot:
 * LAN (non-blocking connect to the gateway) -> REQ (GSq1 being sent) -> REPLY
 * (GSa1 being read) -> OK | FAILED. Each step is a non-blocking syscall made under
 * the slot mutex; every wait is a poll() with a deadline, made without the mutex.
 * connect.c starts the machine and reports its outcome to connect() and
 * getsockopt(SO_ERROR); io.c drives it from the I/O wrappers, dup.c before a
 * pending fd is duplicated, accept.c from getpeername().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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

/* The non-blocking send() or recv() of a step failed (errno): EINTR says try again
 * (-1), EAGAIN says wait in poll() for `want`, anything else fails the connection. */
static int step_error_locked(int fd, struct gs_slot *s, short want, short *events,
                             const char *why)
{
    if (errno == EINTR)
        return -1;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        *events = want;
        return GS_ADV_AGAIN;
    }
    fail_locked(fd, s, errno, why);
    return GS_ADV_FAILED;
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
                fail_locked(fd, s, e, "connect to gateway");
                return GS_ADV_FAILED;
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
                fail_locked(fd, s, ECONNRESET, "gateway closed the connection before replying");
                return GS_ADV_FAILED;
            }
            s->rep_got = (uint8_t)(s->rep_got + n);
            if (s->rep_got < sizeof s->rep)
                continue;
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

int gs_drive(int fd, struct gs_slot *s, int wait_ms, int return_on_intr)
{
    int64_t deadline = wait_ms > 0 ? gs_now_ms() + wait_ms : 0;
    for (;;) {
        short events = 0;
        pthread_mutex_lock(&s->mu);
        int r;
        if (!(atomic_load_explicit(&s->flags, memory_order_relaxed) & GS_F_IO))
            r = GS_ADV_DONE; /* finished by another thread, or closed */
        else
            r = step_locked(fd, s, &events);
        pthread_mutex_unlock(&s->mu);
        if (r != GS_ADV_AGAIN || wait_ms <= 0)
            return r;
        int64_t left = deadline - gs_now_ms();
        if (left <= 0)
            return GS_ADV_AGAIN;
        struct pollfd p = {.fd = fd, .events = events};
        if (poll(&p, 1, (int)left) < 0 && errno == EINTR && return_on_intr)
            return GS_ADV_INTR;
    }
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

int gs_fd_nonblocking(int fd)
{
    int fl = REAL(fcntl)(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

int gs_settle(int fd, struct gs_slot *s)
{
    int r = gs_drive(fd, s, gs_handshake_timeout_ms, 0);
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
