/*
 * gridsplit.c - core of libgridsplit.so: initialisation, the per-fd state table, and
 * the connecting side. connect() to another site is turned into a connect to the own
 * site's gateway followed by the GSq1/GSa1 exchange of docs/protocol.md; the I/O
 * wrappers (read/write/send/recv/... and getsockopt(SO_ERROR)) finish that exchange
 * for non-blocking sockets, and close()/dup*() keep the per-fd state consistent.
 * The accepting side lives in accept.c.
 *
 * Every wrapper starts with gs_slot_peek(fd), one or two atomic loads, and calls the
 * real function straight away when the fd is not one of ours, which is the case for
 * all fds of a process that redirects nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "gs_internal.h"

struct gs_real gs_real;
_Atomic(struct gs_slot *) gs_table[GS_MAX_FD >> GS_CHUNK_BITS];

int gs_debug;
int gs_accept_timeout_ms = 2000;
/* Bound on the wait for the GSa1 reply when the application gives none (blocking
 * connect without SO_SNDTIMEO, getsockopt(SO_ERROR), first I/O). Linux gives up a
 * blocking connect after ~127 s of SYN retries; the gateway reports TIMEOUT itself
 * well before that, so this bound only matters when the gateway hangs. */
static int gs_handshake_timeout_ms = 130000;
/* LAN timers for relayed connections, whose every segment stays on the site's
 * LAN: with GRIDSPLIT_LAN_RTO_MIN_US=8000 a loss only a timeout recovers costs
 * 8 ms instead of Linux's 200 ms minimum RTO (GRIDSPLIT_LAN_DELACK_MAX_US keeps
 * delayed ACKs under it). Off by default: measured on the paper grid with 12-20
 * senders converging on the gateway, an 8 ms RTO under persistent congestion
 * fired 4-5x as often and each timeout's go-back-N made the congestion worse
 * (split gather efficiency 0.76 -> 0.33); see docs/bench.md. */
static int gs_lan_rto_min_us = 0;
static int gs_lan_delack_max_us = 0;

/* ------------------------------------------------------------ real symbols */

static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void *sym(const char *name, int required)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p && required) {
        /* Nothing sensible can be done without libc's own function. Raw syscall:
         * write() here would be our own wrapper. */
        static const char msg[] = "libgridsplit: dlsym(RTLD_NEXT) failed for a libc "
                                  "function; aborting\n";
        (void)!syscall(SYS_write, 2, msg, sizeof msg - 1);
        abort();
    }
    return p;
}

static void resolve_real_once(void)
{
    struct gs_real r;
    r.connect = sym("connect", 1);
    r.accept = sym("accept", 1);
    r.accept4 = sym("accept4", 1);
    r.getpeername = sym("getpeername", 1);
    r.getsockopt = sym("getsockopt", 1);
    r.close = sym("close", 1);
    r.dup = sym("dup", 1);
    r.dup2 = sym("dup2", 1);
    r.dup3 = sym("dup3", 1);
    r.fcntl = sym("fcntl", 1);
    r.fcntl64 = sym("fcntl64", 0); /* glibc >= 2.28 */
    if (!r.fcntl64)
        r.fcntl64 = r.fcntl;
    r.read = sym("read", 1);
    r.write = sym("write", 1);
    r.readv = sym("readv", 1);
    r.writev = sym("writev", 1);
    r.send = sym("send", 1);
    r.sendto = sym("sendto", 1);
    r.sendmsg = sym("sendmsg", 1);
    r.recv = sym("recv", 1);
    r.recvfrom = sym("recvfrom", 1);
    r.recvmsg = sym("recvmsg", 1);
    r.read_chk = sym("__read_chk", 0);
    r.recv_chk = sym("__recv_chk", 0);
    r.recvfrom_chk = sym("__recvfrom_chk", 0);
    /* Publish field by field; a racing reader that sees a non-NULL pointer sees a
     * complete one (aligned pointer stores are atomic on the supported targets). */
    gs_real = r;
}

void gs_resolve_real(void)
{
    pthread_once(&real_once, resolve_real_once);
}

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
        /* GRIDSPLIT_SPLIT=all: split every cross-site connection, whatever the
         * node file's split policy (direct_to) says; set by `--split=all`. */
        const char *mode = getenv("GRIDSPLIT_SPLIT");
        if (mode && strcmp(mode, "all") == 0) {
            for (int i = 0; i < config.nsites; i++)
                config.site[i].direct_to[0] = 0;
        } else if (mode && *mode && strcmp(mode, "policy") != 0) {
            gs_log("GRIDSPLIT_SPLIT=%s is neither \"all\" nor \"policy\"; following the node file's policy", mode);
        }
        if (gs_debug) {
            const struct gs_site *own = &config.site[config.own];
            char gw[64];
            gs_addr_format(&own->gw, own->gw_port, gw, sizeof gw);
            gs_log("own site \"%s\", gateway %s, %d site line(s) in the node file", own->name, gw,
                   config.nsites);
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

/* --------------------------------------------------------------- fd table */

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;

struct gs_slot *gs_slot_get(int fd)
{
    if ((unsigned)fd >= GS_MAX_FD)
        return NULL;
    unsigned ci = (unsigned)fd >> GS_CHUNK_BITS;
    struct gs_slot *c = atomic_load_explicit(&gs_table[ci], memory_order_acquire);
    if (!c) {
        pthread_mutex_lock(&table_mu);
        c = atomic_load_explicit(&gs_table[ci], memory_order_relaxed);
        if (!c) {
            c = calloc(GS_CHUNK, sizeof *c);
            if (c) {
                for (unsigned i = 0; i < GS_CHUNK; i++)
                    pthread_mutex_init(&c[i].mu, NULL);
                atomic_store_explicit(&gs_table[ci], c, memory_order_release);
            }
        }
        pthread_mutex_unlock(&table_mu);
        if (!c)
            return NULL;
    }
    return &c[(unsigned)fd & (GS_CHUNK - 1)];
}

int gs_slot_bind_identity(int fd, struct gs_slot *s)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -1;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    return 0;
}

void gs_slot_clear(struct gs_slot *s)
{
    pthread_mutex_lock(&s->mu);
    atomic_store_explicit(&s->flags, 0, memory_order_release);
    s->phase = GS_P_NONE;
    pthread_mutex_unlock(&s->mu);
}

int gs_slot_valid(int fd, struct gs_slot *s)
{
    int saved = errno;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino;
    errno = saved;
    if (!ok)
        gs_slot_clear(s);
    return ok;
}

/* After fork() only the calling thread exists in the child; a slot mutex held by
 * another thread of the parent at that instant would stay locked forever. */
static void atfork_child(void)
{
    pthread_mutex_init(&table_mu, NULL);
    for (unsigned ci = 0; ci < (GS_MAX_FD >> GS_CHUNK_BITS); ci++) {
        struct gs_slot *c = atomic_load_explicit(&gs_table[ci], memory_order_relaxed);
        if (c)
            for (unsigned i = 0; i < GS_CHUNK; i++)
                pthread_mutex_init(&c[i].mu, NULL);
    }
}

void gs_copy_out_addr(const struct sockaddr_storage *ss, socklen_t len, struct sockaddr *addr,
                      socklen_t *addrlen)
{
    if (!addr || !addrlen)
        return;
    socklen_t n = *addrlen < len ? *addrlen : len;
    memcpy(addr, ss, n);
    *addrlen = len;
}

/* TCP_RTO_MIN_US and TCP_DELACK_MAX_US arrived in Linux 6.15; older headers lack them. */
#ifndef TCP_RTO_MIN_US
#define TCP_RTO_MIN_US 45
#endif
#ifndef TCP_DELACK_MAX_US
#define TCP_DELACK_MAX_US 46
#endif

void gs_lan_timers(int fd)
{
    static const struct { int opt; const char *env; } opts[] = {
        {TCP_RTO_MIN_US, "GRIDSPLIT_LAN_RTO_MIN_US"},
        {TCP_DELACK_MAX_US, "GRIDSPLIT_LAN_DELACK_MAX_US"},
    };
    int vals[] = {gs_lan_rto_min_us, gs_lan_delack_max_us};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        if (vals[i] <= 0)
            continue;
        if (setsockopt(fd, IPPROTO_TCP, opts[i].opt, &vals[i], sizeof vals[i]) < 0) {
            /* Older kernel or a value under two jiffies: Linux's defaults stay,
             * which is slower after a LAN loss, not wrong. Said once. */
            static _Atomic int logged;
            if (!atomic_exchange(&logged, 1) || gs_debug)
                gs_log("%s=%d refused by the kernel (%s); relayed connections keep its "
                       "default timers (needs Linux 6.15+)", opts[i].env, vals[i], strerror(errno));
        }
    }
}

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
    gs_lan_rto_min_us = env_int("GRIDSPLIT_LAN_RTO_MIN_US", gs_lan_rto_min_us, 0);
    gs_lan_delack_max_us = env_int("GRIDSPLIT_LAN_DELACK_MAX_US", gs_lan_delack_max_us, 0);
    pthread_atfork(NULL, NULL, atfork_child);
}

/* ------------------------------------------------------ handshake machine */

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

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

enum { ADV_DONE = 0, ADV_FAILED = 1, ADV_AGAIN = 2, ADV_INTR = 3 };

static void fail_locked(int fd, struct gs_slot *s, int err, const char *why)
{
    s->phase = GS_P_FAILED;
    s->err = err;
    s->err_reported = 0;
    atomic_store_explicit(&s->flags, GS_F_IO, memory_order_release);
    if (gs_debug)
        gs_log("fd %d: redirected connect failed: %s (%s)", fd, why, strerror(err));
}

/* Advance the handshake of fd as far as possible without blocking. Called with
 * s->mu held. On ADV_AGAIN, *events says what poll() should wait for. */
static int step_locked(int fd, struct gs_slot *s, short *events)
{
    for (;;) {
        switch (s->phase) {
        case GS_P_LAN: {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int r = poll(&p, 1, 0);
            if (r == 0 || (r < 0 && errno == EINTR)) {
                *events = POLLOUT;
                return ADV_AGAIN;
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
                return ADV_FAILED;
            }
            s->phase = GS_P_REQ;
            continue;
        }
        case GS_P_REQ: {
            ssize_t n = REAL(send)(fd, (const uint8_t *)&s->req + s->req_sent,
                                   sizeof s->req - s->req_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    *events = POLLOUT;
                    return ADV_AGAIN;
                }
                fail_locked(fd, s, errno, "sending request to gateway");
                return ADV_FAILED;
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
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    *events = POLLIN;
                    return ADV_AGAIN;
                }
                fail_locked(fd, s, errno, "reading gateway reply");
                return ADV_FAILED;
            }
            if (n == 0) {
                fail_locked(fd, s, ECONNRESET, "gateway closed the connection before replying");
                return ADV_FAILED;
            }
            s->rep_got = (uint8_t)(s->rep_got + n);
            if (s->rep_got < sizeof s->rep)
                continue;
            const struct gs_reply *rep = (const struct gs_reply *)s->rep;
            if (memcmp(rep->magic, GS_MAGIC_REPLY, GS_MAGIC_LEN) != 0) {
                gs_log("fd %d: gateway reply has a bad magic (not GSa1); failing the connection",
                       fd);
                fail_locked(fd, s, EPROTO, "bad reply magic");
                return ADV_FAILED;
            }
            int e = status_errno(rep->status);
            if (e) {
                char why[48];
                snprintf(why, sizeof why, "gateway status %u", (unsigned)rep->status);
                fail_locked(fd, s, e, why);
                return ADV_FAILED;
            }
            s->phase = GS_P_OK;
            /* From here on the fd is a plain stream: I/O wrappers take the fast path
             * again; only getpeername() still looks at the slot. */
            atomic_store_explicit(&s->flags, GS_F_PEER, memory_order_release);
            if (gs_debug)
                gs_log("fd %d: redirected connect established", fd);
            return ADV_DONE;
        }
        case GS_P_FAILED:
            return ADV_FAILED;
        default:
            return ADV_DONE;
        }
    }
}

/* Drive the handshake. wait_ms: 0 = one non-blocking attempt, > 0 = wait at most
 * that long, blocking in poll() (never spinning). With return_on_intr a signal
 * interrupts the wait and ADV_INTR is returned (the blocking-connect semantics);
 * otherwise the wait resumes. */
static int drive(int fd, struct gs_slot *s, int wait_ms, int return_on_intr)
{
    int64_t deadline = wait_ms > 0 ? now_ms() + wait_ms : 0;
    for (;;) {
        short events = 0;
        pthread_mutex_lock(&s->mu);
        int r;
        if (!(atomic_load_explicit(&s->flags, memory_order_relaxed) & GS_F_IO))
            r = ADV_DONE; /* finished by another thread, or closed */
        else
            r = step_locked(fd, s, &events);
        pthread_mutex_unlock(&s->mu);
        if (r != ADV_AGAIN || wait_ms <= 0)
            return r;
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return ADV_AGAIN;
        struct pollfd p = {.fd = fd, .events = events};
        if (poll(&p, 1, (int)left) < 0 && errno == EINTR && return_on_intr)
            return ADV_INTR;
    }
}

/* Mark a pending handshake as timed out (the bound given to drive() expired). */
static void fail_timeout(int fd, struct gs_slot *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->phase != GS_P_OK && s->phase != GS_P_FAILED &&
        (atomic_load_explicit(&s->flags, memory_order_relaxed) & GS_F_IO))
        fail_locked(fd, s, ETIMEDOUT, "no reply from gateway in time");
    pthread_mutex_unlock(&s->mu);
}

static int slot_err(struct gs_slot *s)
{
    pthread_mutex_lock(&s->mu);
    int e = s->phase == GS_P_FAILED ? s->err : 0;
    pthread_mutex_unlock(&s->mu);
    return e ? e : ECONNRESET;
}

static int fd_nonblocking(int fd)
{
    int fl = REAL(fcntl)(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

/* Finish the handshake with the default bound, whatever the blocking mode.
 * Returns 0 when established, else an errno. */
static int settle(int fd, struct gs_slot *s)
{
    int r = drive(fd, s, gs_handshake_timeout_ms, 0);
    if (r == ADV_AGAIN) {
        fail_timeout(fd, s);
        r = ADV_FAILED;
    }
    return r == ADV_DONE ? 0 : slot_err(s);
}

int gs_wait_outcome(int fd, struct gs_slot *s)
{
    int saved = errno;
    int r = drive(fd, s, 0, 0), e = 0;
    if (r == ADV_AGAIN) {
        pthread_mutex_lock(&s->mu);
        int lan = s->phase == GS_P_LAN;
        pthread_mutex_unlock(&s->mu);
        e = lan ? EINPROGRESS : settle(fd, s);
    } else if (r == ADV_FAILED) {
        e = slot_err(s);
    }
    errno = saved;
    return e;
}

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
    int r = drive(fd, s, 0, 0);
    if (r == ADV_AGAIN) {
        int may_eagain = dontwait || fd_nonblocking(fd);
        if (may_eagain && writing) {
            pthread_mutex_lock(&s->mu);
            may_eagain = s->phase == GS_P_LAN;
            pthread_mutex_unlock(&s->mu);
        }
        if (may_eagain) {
            errno = EAGAIN;
            return -1;
        }
        int e = settle(fd, s);
        if (e) {
            errno = e;
            return -1;
        }
        return 0;
    }
    if (r == ADV_FAILED) {
        errno = slot_err(s);
        return -1;
    }
    return 0;
}

static int read_gate(int fd, struct gs_slot *s, int dontwait)
{
    return io_gate(fd, s, dontwait, 0);
}

static int write_gate(int fd, struct gs_slot *s, int dontwait)
{
    return io_gate(fd, s, dontwait, 1);
}

static inline struct gs_slot *peek_io(int fd)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_LIKELY(s == NULL))
        return NULL;
    return (atomic_load_explicit(&s->flags, memory_order_acquire) & GS_F_IO) ? s : NULL;
}

/* ------------------------------------------------------------- connect() */

/* Returns the connect() result for a blocking wait of at most wait_ms (SO_SNDTIMEO
 * when set_timeo, else the default bound). */
static int finish_blocking(int fd, struct gs_slot *s, int wait_ms, int set_timeo)
{
    int r = drive(fd, s, wait_ms, 1);
    if (r == ADV_DONE)
        return 0;
    if (r == ADV_INTR) {
        /* Like the kernel: the connection attempt goes on; a later connect(),
         * getsockopt(SO_ERROR) or I/O call picks it up. */
        errno = EINTR;
        return -1;
    }
    if (r == ADV_AGAIN) {
        if (set_timeo) {
            /* Linux returns EINPROGRESS when SO_SNDTIMEO expires on connect(). */
            errno = EINPROGRESS;
            return -1;
        }
        fail_timeout(fd, s);
    }
    pthread_mutex_lock(&s->mu);
    s->err_reported = 1;
    int e = s->phase == GS_P_FAILED ? s->err : ECONNRESET;
    pthread_mutex_unlock(&s->mu);
    errno = e;
    return -1;
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
        return ms > gs_handshake_timeout_ms ? gs_handshake_timeout_ms : (int)ms;
    }
    return gs_handshake_timeout_ms;
}

/* connect() again on an fd whose redirected connect is pending or failed. Mirrors
 * the kernel: non-blocking -> EALREADY while in progress, 0 once connected (then
 * EISCONN), the error once failed; blocking -> wait for the outcome. */
static int reconnect_pending(int fd, struct gs_slot *s, const struct sockaddr *addr,
                             socklen_t len)
{
    if (fd_nonblocking(fd)) {
        int r = drive(fd, s, 0, 0);
        if (r == ADV_AGAIN) {
            errno = EALREADY;
            return -1;
        }
        if (r == ADV_DONE) {
            /* The kernel socket is still "connecting" in its own book-keeping: its
             * connect() returns 0 this once and EISCONN afterwards, as without us. */
            return REAL(connect)(fd, addr, len);
        }
        pthread_mutex_lock(&s->mu);
        s->err_reported = 1;
        pthread_mutex_unlock(&s->mu);
        errno = slot_err(s);
        return -1;
    }
    int set;
    int ms = sndtimeo_ms(fd, &set);
    return finish_blocking(fd, s, ms, set);
}

static int redirect_connect(int fd, const struct sockaddr *addr, socklen_t len,
                            const struct gs_config *cfg, int site, const struct gs_addr *dst,
                            uint16_t dport)
{
    const struct gs_site *own = &cfg->site[cfg->own];
    struct sockaddr_storage gw;
    socklen_t gwlen = gs_addr_to_sockaddr(&own->gw, own->gw_port, addr->sa_family, &gw);
    char dbuf[64], gbuf[64];
    gs_addr_format(dst, dport, dbuf, sizeof dbuf);
    gs_addr_format(&own->gw, own->gw_port, gbuf, sizeof gbuf);
    if (!gwlen) {
        static _Atomic int logged;
        if (!atomic_exchange(&logged, 1))
            gs_log("cannot reach IPv6 gateway %s from an AF_INET socket (connect to %s)", gbuf,
                   dbuf);
        errno = ENETUNREACH;
        return -1;
    }
    struct gs_slot *s = gs_slot_get(fd);
    if (!s) {
        static _Atomic int logged;
        if (!atomic_exchange(&logged, 1))
            gs_log("fd %d out of the tracked range (or out of memory); connect to %s is "
                   "NOT redirected", fd, dbuf);
        return REAL(connect)(fd, addr, len);
    }

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
    /* getpeername() must show the address the application asked for. */
    s->peerlen = len > sizeof s->peer ? (socklen_t)sizeof s->peer : len;
    memcpy(&s->peer, addr, s->peerlen);
    gs_slot_bind_identity(fd, s);
    atomic_store_explicit(&s->flags, GS_F_IO, memory_order_release);
    pthread_mutex_unlock(&s->mu);

    if (gs_debug)
        gs_log("fd %d: connect to %s (site \"%s\") redirected via gateway %s", fd, dbuf,
               cfg->site[site].name, gbuf);

    gs_lan_timers(fd);
    int nonblock = fd_nonblocking(fd);
    int set = 0;
    int ms = nonblock ? 0 : sndtimeo_ms(fd, &set);
    int64_t t0 = nonblock ? 0 : now_ms();
    int r = REAL(connect)(fd, (struct sockaddr *)&gw, gwlen);
    int e = errno;
    if (r < 0 && e != EINPROGRESS && e != EINTR) {
        /* The gateway itself is unreachable: report that as the connect error. */
        gs_slot_clear(s);
        static _Atomic int logged;
        if (!atomic_exchange(&logged, 1) || gs_debug)
            gs_log("cannot reach gateway %s (%s) for a connection to %s", gbuf, strerror(e),
                   dbuf);
        errno = e;
        return -1;
    }
    if (r < 0 && e == EINTR) {
        errno = EINTR;
        return -1;
    }
    if (nonblock) {
        /* Try to get the request out now; it usually has to wait until the LAN
         * handshake completes, which the next intercepted call notices. */
        int a = drive(fd, s, 0, 0);
        if (a == ADV_FAILED) {
            pthread_mutex_lock(&s->mu);
            s->err_reported = 1;
            pthread_mutex_unlock(&s->mu);
            errno = slot_err(s);
            return -1;
        }
        errno = EINPROGRESS;
        return -1;
    }
    if (r < 0) { /* EINPROGRESS on a blocking socket: SO_SNDTIMEO expired */
        errno = EINPROGRESS;
        return -1;
    }
    int64_t left = ms - (now_ms() - t0);
    if (left < 1)
        left = 1;
    return finish_blocking(fd, s, (int)left, set);
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
        errno = saved;
        return REAL(connect)(fd, addr, len);
    }
    /* Only TCP streams are redirected (not UDP, not SCTP's stream mode). */
    int type = 0, proto = 0;
    socklen_t l = sizeof type;
    if (REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0 || type != SOCK_STREAM) {
        errno = saved;
        return REAL(connect)(fd, addr, len);
    }
    l = sizeof proto;
    if (REAL(getsockopt)(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l) == 0 && proto != IPPROTO_TCP) {
        errno = saved;
        return REAL(connect)(fd, addr, len);
    }
    errno = saved;
    return redirect_connect(fd, addr, len, cfg, site, &dst, dport);
}

/* ------------------------------------------------------ getsockopt(SO_ERROR) */

GS_EXPORT int getsockopt(int fd, int level, int optname, void *val, socklen_t *len)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_LIKELY(s == NULL) || level != SOL_SOCKET || optname != SO_ERROR || !val || !len ||
        *len < (socklen_t)sizeof(int) || !gs_slot_valid(fd, s))
        return REAL(getsockopt)(fd, level, optname, val, len);

    int r = drive(fd, s, 0, 0);
    if (r == ADV_AGAIN) {
        pthread_mutex_lock(&s->mu);
        int lan = s->phase == GS_P_LAN;
        pthread_mutex_unlock(&s->mu);
        if (lan) {
            /* Still connecting to the gateway (the caller did not wait for POLLOUT):
             * the kernel would say 0 too. */
            *(int *)val = 0;
            *len = sizeof(int);
            return 0;
        }
        /* The caller saw POLLOUT and wants the outcome: wait for the reply. This
         * is the one place a non-blocking caller can be held, for one WAN round
         * trip plus the far connect. */
        r = drive(fd, s, gs_handshake_timeout_ms, 0);
        if (r == ADV_AGAIN) {
            fail_timeout(fd, s);
            r = ADV_FAILED;
        }
    }
    int v = 0;
    if (r == ADV_FAILED) {
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

/* ------------------------------------------------------------ I/O wrappers */

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
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && read_gate(fd, s, 0) < 0)
        return -1;
    return io_done(fd, REAL(read)(fd, buf, n));
}

GS_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && read_gate(fd, s, 0) < 0)
        return -1;
    if (REAL(read_chk))
        return io_done(fd, gs_real.read_chk(fd, buf, n, buflen));
    return io_done(fd, REAL(read)(fd, buf, n));
}

GS_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && read_gate(fd, s, 0) < 0)
        return -1;
    return io_done(fd, REAL(readv)(fd, iov, cnt));
}

GS_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && read_gate(fd, s, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(recv)(fd, buf, n, flags));
}

GS_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && read_gate(fd, s, flags & MSG_DONTWAIT) < 0)
        return -1;
    if (REAL(recv_chk))
        return io_done(fd, gs_real.recv_chk(fd, buf, n, buflen, flags));
    return io_done(fd, REAL(recv)(fd, buf, n, flags));
}

GS_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from,
                           socklen_t *fromlen)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && read_gate(fd, s, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(recvfrom)(fd, buf, n, flags, from, fromlen));
}

GS_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                                 struct sockaddr *from, socklen_t *fromlen)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && read_gate(fd, s, flags & MSG_DONTWAIT) < 0)
        return -1;
    if (REAL(recvfrom_chk))
        return io_done(fd, gs_real.recvfrom_chk(fd, buf, n, buflen, flags, from, fromlen));
    return io_done(fd, REAL(recvfrom)(fd, buf, n, flags, from, fromlen));
}

GS_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && read_gate(fd, s, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(recvmsg)(fd, msg, flags));
}

GS_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && write_gate(fd, s, 0) < 0)
        return -1;
    return io_done(fd, REAL(write)(fd, buf, n));
}

GS_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && write_gate(fd, s, 0) < 0)
        return -1;
    return io_done(fd, REAL(writev)(fd, iov, cnt));
}

GS_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && write_gate(fd, s, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(send)(fd, buf, n, flags));
}

GS_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
                         const struct sockaddr *to, socklen_t tolen)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && write_gate(fd, s, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(sendto)(fd, buf, n, flags, to, tolen));
}

GS_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    struct gs_slot *s = peek_io(fd);
    if (GS_UNLIKELY(s != NULL) && write_gate(fd, s, flags & MSG_DONTWAIT) < 0)
        return -1;
    return io_done(fd, REAL(sendmsg)(fd, msg, flags));
}

/* ------------------------------------------------------- close and dup */

GS_EXPORT int close(int fd)
{
    struct gs_slot *s = gs_slot_peek(fd);
    /* Forget the state before the number can be reused by another thread. */
    if (GS_UNLIKELY(s != NULL))
        gs_slot_clear(s);
    return REAL(close)(fd);
}

/* Before duplicating a pending fd, finish its handshake: two fds sharing one socket
 * must not both try to consume the 8-byte reply. */
static void settle_for_dup(int fd, struct gs_slot *s)
{
    int saved = errno;
    if ((atomic_load_explicit(&s->flags, memory_order_acquire) & GS_F_IO) &&
        gs_slot_valid(fd, s))
        (void)settle(fd, s);
    errno = saved;
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
    tmp.phase = s->phase;
    tmp.err = s->err;
    tmp.err_reported = s->err_reported;
    tmp.dev = s->dev;
    tmp.ino = s->ino;
    tmp.peerlen = s->peerlen;
    memcpy(&tmp.peer, &s->peer, sizeof tmp.peer);
    pthread_mutex_unlock(&s->mu);
    if (!flags || ((flags & GS_F_IO) && tmp.phase != GS_P_FAILED))
        goto out; /* closed meanwhile, or still pending after the bounded wait */
    d = gs_slot_get(to);
    if (!d)
        goto out;
    pthread_mutex_lock(&d->mu);
    d->phase = tmp.phase;
    d->err = tmp.err;
    d->err_reported = tmp.err_reported;
    d->dev = tmp.dev;
    d->ino = tmp.ino;
    d->peerlen = tmp.peerlen;
    memcpy(&d->peer, &tmp.peer, sizeof d->peer);
    atomic_store_explicit(&d->flags, flags, memory_order_release);
    pthread_mutex_unlock(&d->mu);
out:
    errno = saved;
}

GS_EXPORT int dup(int fd)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_LIKELY(s == NULL))
        return REAL(dup)(fd);
    settle_for_dup(fd, s);
    int nfd = REAL(dup)(fd);
    if (nfd >= 0)
        copy_slot(fd, nfd);
    return nfd;
}

GS_EXPORT int dup2(int fd, int nfd)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_LIKELY(s == NULL && gs_slot_peek(nfd) == NULL))
        return REAL(dup2)(fd, nfd);
    if (s)
        settle_for_dup(fd, s);
    int r = REAL(dup2)(fd, nfd);
    if (r >= 0 && fd != nfd)
        copy_slot(fd, nfd);
    return r;
}

GS_EXPORT int dup3(int fd, int nfd, int flags)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_LIKELY(s == NULL && gs_slot_peek(nfd) == NULL))
        return REAL(dup3)(fd, nfd, flags);
    if (s)
        settle_for_dup(fd, s);
    int r = REAL(dup3)(fd, nfd, flags);
    if (r >= 0)
        copy_slot(fd, nfd);
    return r;
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
    int nfd = real(fd, cmd, arg);
    if (nfd >= 0)
        copy_slot(fd, nfd);
    return nfd;
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
