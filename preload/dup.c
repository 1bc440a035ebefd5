/*
 * dup.c - close(), dup(), dup2(), dup3() and fcntl(F_DUPFD[_CLOEXEC]) (also fcntl64)
 * keep the per-fd state consistent with the kernel's fd table: a closed number
 * forgets its state before it can be reused, and a duplicate gets the state of
 * the socket it shares (the original peer for getpeername(), or the failure).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>

#include "gs_internal.h"

GS_EXPORT int close(int fd)
{
    struct gs_slot *s = gs_slot_peek(fd);
    /* Forget the state before the number can be reused by another thread. */
    if (GS_UNLIKELY(s != NULL)) {
        /* An application may close on POLLERR without asking why: if the gateway
         * refused, new connects should still skip it. */
        if (atomic_load_explicit(&s->flags, memory_order_acquire) & GS_F_IO)
            gs_slot_note_close(fd, s);
        gs_slot_clear(s);
    }
    return REAL(close)(fd);
}

/* Before duplicating a pending fd, finish its handshake: two fds sharing one socket
 * must not both try to consume the 8-byte reply. */
static void settle_for_dup(int fd, struct gs_slot *s)
{
    int saved = errno;
    if ((atomic_load_explicit(&s->flags, memory_order_acquire) & GS_F_IO) &&
        gs_slot_valid(fd, s))
        (void)gs_settle(fd, s);
    errno = saved;
}

/* What a duplicate shares with its source. The caller holds the mutex of the one
 * of the two that is a slot of the table. */
static void copy_state(struct gs_slot *to, const struct gs_slot *from)
{
    to->phase = from->phase;
    to->err = from->err;
    to->err_reported = from->err_reported;
    to->dev = from->dev;
    to->ino = from->ino;
    to->peerlen = from->peerlen;
    memcpy(&to->peer, &from->peer, sizeof to->peer);
}

/* The new fd refers to the same socket: give it the same state. */
static void copy_slot(int from, int to)
{
    struct gs_slot *s = gs_slot_peek(from);
    struct gs_slot *d = gs_slot_peek(to);
    if (d)
        gs_slot_clear(d);
    if (!s)
        return;
    int saved = errno;
    struct gs_slot tmp;
    pthread_mutex_lock(&s->mu);
    uint8_t flags = atomic_load_explicit(&s->flags, memory_order_relaxed);
    copy_state(&tmp, s);
    pthread_mutex_unlock(&s->mu);
    if (!flags || ((flags & GS_F_IO) && tmp.phase != GS_P_FAILED))
        goto out; /* closed meanwhile, or still pending after the bounded wait */
    d = gs_slot_get(to);
    if (!d)
        goto out;
    pthread_mutex_lock(&d->mu);
    copy_state(d, &tmp);
    atomic_store_explicit(&d->flags, flags, memory_order_release);
    pthread_mutex_unlock(&d->mu);
out:
    errno = saved;
}

/* The result nfd of a real duplication of fd. dup2(fd, fd) duplicates nothing
 * (and dup3(fd, fd) fails), so the state is copied only to another number. */
static int dup_done(int fd, int nfd)
{
    if (nfd >= 0 && nfd != fd)
        copy_slot(fd, nfd);
    return nfd;
}

GS_EXPORT int dup(int fd)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_LIKELY(s == NULL))
        return REAL(dup)(fd);
    settle_for_dup(fd, s);
    return dup_done(fd, REAL(dup)(fd));
}

/* Shared body of dup2() and dup3(); use3 selects the real dup3. A tracked target
 * number is concerned too: its old state must be forgotten. */
static int dup2_common(int fd, int nfd, int flags, int use3)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_LIKELY(s == NULL && gs_slot_peek(nfd) == NULL))
        return use3 ? REAL(dup3)(fd, nfd, flags) : REAL(dup2)(fd, nfd);
    if (s)
        settle_for_dup(fd, s);
    return dup_done(fd, use3 ? REAL(dup3)(fd, nfd, flags) : REAL(dup2)(fd, nfd));
}

GS_EXPORT int dup2(int fd, int nfd)
{
    return dup2_common(fd, nfd, 0, 0);
}

GS_EXPORT int dup3(int fd, int nfd, int flags)
{
    return dup2_common(fd, nfd, flags, 1);
}

/* fcntl is variadic; like glibc itself we fetch the optional argument as a pointer,
 * which carries an int or a pointer unchanged on the LP64 ABIs. Only F_DUPFD and
 * F_DUPFD_CLOEXEC matter to us. Programs built with _FILE_OFFSET_BITS=64 call
 * fcntl64, hence the two entry points. */
static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
    if (GS_LIKELY(cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC))
        return real(fd, cmd, arg);
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_LIKELY(s == NULL))
        return real(fd, cmd, arg);
    settle_for_dup(fd, s);
    return dup_done(fd, real(fd, cmd, arg));
}

GS_EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(REAL(fcntl), fd, cmd, arg);
}

GS_EXPORT int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(REAL(fcntl64), fd, cmd, arg);
}
