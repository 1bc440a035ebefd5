/*
 * io.c - the I/O wrappers of libgridsplit.so (read, write, send, recv and their
 * variants). On an fd whose redirected connect is pending or failed they go through
 * a gate that finishes the handshake first (handshake.c), so the application never
 * sees the gateway's reply bytes; on every other fd they cost one or two atomic
 * loads (gs_slot_peek_io) before the real call. An established relayed connection
 * that is reset ends the process (relay_lost).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "gs_internal.h"

/* Exit status of a process whose relayed connection was lost (relay_lost). */
#define GS_EXIT_RELAY_LOST 75

/* Gate in front of I/O calls on a pending or failed fd. Returns 0 when the real
 * call may proceed, else -1 with errno set.
 *
 * Reads on a non-blocking fd answer EAGAIN until the reply is in: the reply's
 * arrival makes the fd readable again, so a poll()-driven caller is woken up and
 * retries. Writes may only answer EAGAIN while the LAN connect itself is still
 * in progress (POLLOUT not yet set, as for any connecting socket); once it is
 * done POLLOUT is signalled, so EAGAIN would make a poll()-driven caller spin
 * until the reply comes, and the call waits (bounded) for the reply instead. */
static int io_gate(int fd, struct gs_slot *s, int dontwait, int writing)
{
    if (!gs_slot_valid(fd, s))
        return 0;
    int r = gs_drive(fd, s, 0, 0);
    if (r == GS_ADV_AGAIN) {
        int may_eagain = dontwait || gs_fd_nonblocking(fd);
        if (may_eagain && writing)
            may_eagain = gs_slot_lan_pending(s);
        if (may_eagain && !writing && gs_slot_failing_over(s)) {
            /* The first gateway failed and the caller saw that try end: it may now
             * wait in poll(POLLIN) for the reply, so the request to the next
             * gateway must be on its way first (the write side waits for POLLOUT,
             * which the connect to the next gateway raises by itself). */
            r = gs_drive_until_sent(fd, s, INT_MAX);
            if (r == GS_ADV_DONE)
                return 0;
            if (r == GS_ADV_FAILED) {
                errno = gs_slot_err(s);
                return -1;
            }
        }
        if (may_eagain) {
            errno = EAGAIN;
            return -1;
        }
        int e = gs_settle(fd, s);
        if (e) {
            errno = e;
            return -1;
        }
        return 0;
    }
    if (r == GS_ADV_FAILED) {
        errno = gs_slot_err(s);
        return -1;
    }
    return 0;
}

/* The start of every read (write) wrapper: the fast path when the fd is not pending
 * (gs_slot_peek_io), else the gate. Returns 0 when the real call may proceed, else
 * -1 with errno set. */
static inline int read_gate(int fd, int dontwait)
{
    struct gs_slot *s = gs_slot_peek_io(fd);
    return GS_UNLIKELY(s != NULL) ? io_gate(fd, s, dontwait, 0) : 0;
}

static inline int write_gate(int fd, int dontwait)
{
    struct gs_slot *s = gs_slot_peek_io(fd);
    return GS_UNLIKELY(s != NULL) ? io_gate(fd, s, dontwait, 1) : 0;
}

/* A relayed connection was reset under the application (ECONNRESET, or EPIPE
 * once the reset arrived). The gateways reset a relayed connection when the far
 * application reset its end (as direct TCP would), when their WAN link stayed
 * down past its outage limit, or when a gateway died. MPI libraries do not
 * survive a lost connection, and some wait forever for the messages it carried
 * (Open MPI's TCP BTL reports a closed endpoint to its PML only if it still had
 * fragments to send there, open-mpi/ompi PR #5892; everything a rank wrote was
 * already accepted by the gateway). So the process ends here, with one line
 * saying why, and the launcher ends the job with an error instead of a hang
 * (docs/design/wan-sessions.md, "When flows are reset"). Only established
 * relayed connections (GS_F_PEER) are concerned; others keep their errors. */
static void relay_lost(int fd, int err)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (s == NULL || !(atomic_load_explicit(&s->flags, memory_order_acquire) & GS_F_PEER))
        return;
    char peer[INET6_ADDRSTRLEN + 8] = "?";
    struct gs_addr a;
    uint16_t port;
    if (gs_sockaddr_to_addr((const struct sockaddr *)&s->peer, s->peerlen, &a, &port) == 0)
        gs_addr_format(&a, port, peer, sizeof peer);
    gs_log("relayed connection with %s (fd %d) lost: %s. The gateways gave up on it (WAN link down "
           "past its outage limit, or a gateway failed), or the far process reset it. Exiting with "
           "status %d so that the MPI job fails instead of waiting for messages that were lost.",
           peer, fd, strerror(err), GS_EXIT_RELAY_LOST);
    _exit(GS_EXIT_RELAY_LOST);
}

/* The result of a real I/O call on fd, after relay_lost() had its look. */
static inline ssize_t io_done(int fd, ssize_t r)
{
    if (GS_UNLIKELY(r < 0) && (errno == ECONNRESET || errno == EPIPE))
        relay_lost(fd, errno);
    return r;
}

GS_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
    if (read_gate(fd, 0) < 0)
        return -1;
    return io_done(fd, REAL(read)(fd, buf, n));
}

GS_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    if (read_gate(fd, 0) < 0)
        return -1;
    if (REAL(read_chk))
        return io_done(fd, gs_real.read_chk(fd, buf, n, buflen));
    return io_done(fd, REAL(read)(fd, buf, n));
}

GS_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    if (read_gate(fd, 0) < 0)
        return -1;
    return io_done(fd, REAL(readv)(fd, iov, cnt));
}

GS_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    if (read_gate(fd, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(recv)(fd, buf, n, flags));
}

GS_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    if (read_gate(fd, flags & MSG_DONTWAIT) < 0)
        return -1;
    if (REAL(recv_chk))
        return io_done(fd, gs_real.recv_chk(fd, buf, n, buflen, flags));
    return io_done(fd, REAL(recv)(fd, buf, n, flags));
}

GS_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from,
                           socklen_t *fromlen)
{
    if (read_gate(fd, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(recvfrom)(fd, buf, n, flags, from, fromlen));
}

GS_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                                 struct sockaddr *from, socklen_t *fromlen)
{
    if (read_gate(fd, flags & MSG_DONTWAIT) < 0)
        return -1;
    if (REAL(recvfrom_chk))
        return io_done(fd, gs_real.recvfrom_chk(fd, buf, n, buflen, flags, from, fromlen));
    return io_done(fd, REAL(recvfrom)(fd, buf, n, flags, from, fromlen));
}

GS_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    if (read_gate(fd, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(recvmsg)(fd, msg, flags));
}

GS_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    if (write_gate(fd, 0) < 0)
        return -1;
    return io_done(fd, REAL(write)(fd, buf, n));
}

GS_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    if (write_gate(fd, 0) < 0)
        return -1;
    return io_done(fd, REAL(writev)(fd, iov, cnt));
}

GS_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    if (write_gate(fd, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(send)(fd, buf, n, flags));
}

GS_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
                         const struct sockaddr *to, socklen_t tolen)
{
    if (write_gate(fd, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(sendto)(fd, buf, n, flags, to, tolen));
}

GS_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (write_gate(fd, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(sendmsg)(fd, msg, flags));
}
