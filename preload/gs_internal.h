/*
 * gs_internal.h - declarations shared by the files of libgridsplit.so:
 *   addr.c, nodefile.c, sites.c  the sites of the node file and their addresses
 *   real.c                       handles on the real libc functions
 *   settings.c                   GRIDSPLIT_* variables, the node file on first use, the log
 *   fdtable.c                    the per-fd state table
 *   handshake.c                  the GSq1/GSa1 exchange with the gateway, as a state machine,
 *                                and the failover from one gateway of the site to the next
 *   gateways.c                   which gateway of the own site a flow takes; failed gateways
 *   connect.c                    the connecting side: connect(), getsockopt(SO_ERROR)
 *   io.c                         read/write/send/recv/... wrappers
 *   dup.c                        close(), dup*(), fcntl(F_DUPFD*)
 *   accept.c                     the accepting side: accept(), accept4(), getpeername()
 * Nothing here is exported from the shared object: the library is built with
 * -fvisibility=hidden and only the interposed libc symbols are marked GS_EXPORT.
 *
 * Every wrapper starts with gs_slot_peek(fd), one or two atomic loads, and calls the
 * real function straight away when the fd is not one of ours, which is the case for
 * all fds of a process that redirects nothing.
 */
#ifndef GS_INTERNAL_H
#define GS_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "gridsplit_proto.h"

#define GS_EXPORT __attribute__((visibility("default")))
#define GS_LIKELY(x) __builtin_expect(!!(x), 1)
#define GS_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Milliseconds of CLOCK_MONOTONIC, for the deadlines of bounded waits. */
static inline int64_t gs_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------ addr.c, nodefile.c, sites.c: the sites */

#define GS_MAX_SITES 256
/* Hosts a host rule may name (GRIDSPLIT_SPLIT=hosts:...): a job's root, a few more. */
#define GS_MAX_SPLIT_HOSTS 16
#define GS_SITE_NAME_MAX 65 /* 64 characters, as gridsplitd allows, and a NUL */

/* An IP address in wire form: family GS_FAMILY_V4 (address in a[0..3]) or
 * GS_FAMILY_V6. IPv4-mapped IPv6 addresses are always normalised to V4 so that an
 * AF_INET6 dual-stack socket is classified like an AF_INET one. */
struct gs_addr {
    int family;
    uint8_t a[16];
};

struct gs_prefix {
    struct gs_addr net; /* host bits cleared */
    int len;
};

/* One site line of the node file. */
struct gs_site {
    char name[GS_SITE_NAME_MAX];
    struct gs_prefix subnet;
    struct gs_addr gw; /* host part of gateway_lan */
    uint16_t gw_port;
    int line; /* line in the node file, for messages */
    /* direct_to: comma-separated names of sites this site's connections to (and
     * from) are left direct, not split (the split policy, docs/protocol.md §5). */
    char direct_to[256];
};

/* Gateways of the own site a redirected connect may use (distinct gateway_lan of
 * its lines, in file order); more are ignored (said once in the log). */
#define GS_MAX_GATEWAYS 16

/* How long a gateway that failed is tried last (ms). A dead gateway costs each
 * connect that tries it a refused connect, or a whole handshake timeout when it
 * accepts but does not answer; an MPI job opens most of its connections in a
 * burst at start, which would otherwise pay that once per connection instead of
 * once per process. Short enough that a gateway restarted by systemd (seconds)
 * gets its share of new flows back soon; a gateway tried last is still tried
 * when all the others fail, so nothing is ever refused for being marked. */
#define GS_GW_RETRY_MS 10000

struct gs_config {
    int nsites;
    int own; /* index of the own site in site[], -1 until chosen */
    int routed; /* 0 after "routed no": the sites reach each other only through the gateways */
    /* "lan_timers RTO DELACK" (µs, 0 = Linux's): the LAN timers (settings.c, gs_lan_timers). */
    int lan_rto_min_us, lan_delack_max_us;
    /* Set with the own site (gs_config_pick_site): its gateways, as indices into
     * site[] of the lines that name them, and how many were left out. */
    int ngw;
    int gw_line[GS_MAX_GATEWAYS];
    int gw_ignored;
    /* The host's address in its own site: the interface address that matched the
     * own site's subnet when the site was picked (family 0 if none did), the
     * flow's source in the gateway spread for sockets that are not bound
     * (gateways.c). */
    struct gs_addr own_addr;
    /* The host rule (GRIDSPLIT_SPLIT=hosts:ADDR+...; gs_config_split_mode): when
     * nhosts > 0, a cross-site connection is split only when one of its ends is
     * a listed host: every connection of a listed host, and the connections of
     * other hosts to a listed one (docs/design/host-rule.md). */
    int nhosts;
    int own_is_host;
    struct gs_addr hosts[GS_MAX_SPLIT_HOSTS];
    struct gs_site site[GS_MAX_SITES];
};

/* nodefile.c. Parse a node file's text. On error returns -1 and writes one line
 * into err, "line N: " first when a line is at fault, ending with the fix. */
int gs_config_parse(const char *text, size_t len, struct gs_config *cfg, char *err,
                    size_t errlen);
/* Read path, parse it, pick the own site. */
int gs_config_load(const char *path, const char *site_name, struct gs_config *cfg,
                   char *err, size_t errlen);

/* sites.c. Choose the own site: by name when site_name is non-NULL, else from the
 * host's interface addresses. Returns -1 with a message on failure. */
int gs_config_pick_site(struct gs_config *cfg, const char *site_name, char *err,
                        size_t errlen);
/* Index of the site a connection to dst must be redirected to, or -1 when the
 * connection is left alone (own site, loopback, unknown network, direct pair). */
int gs_config_classify(const struct gs_config *cfg, const struct gs_addr *dst);
/* Non-zero when a is a host of the own site's subnets (loopback only for a site on
 * loopback): a connection to it stays on the site's LAN, where the LAN timers apply
 * (gs_lan_timers). */
int gs_config_in_own_site(const struct gs_config *cfg, const struct gs_addr *a);
/* Non-zero when dst is in no site of the file and not loopback: on an unrouted grid
 * such a destination can be reached only if something outside the grid routes it. */
int gs_config_in_no_site(const struct gs_config *cfg, const struct gs_addr *dst);
/* Apply GRIDSPLIT_SPLIT's value to a loaded config: NULL, "" or "policy" keep the
 * node file's direct_to; "all" clears every direct_to; "hosts:ADDR[+ADDR...]"
 * clears them and sets the host rule, own_is_host from the host's interface
 * addresses and own_addr. Returns -1 with one line in err (config unchanged). */
int gs_config_split_mode(struct gs_config *cfg, const char *mode, char *err, size_t errlen);
/* Non-zero when a is the host part of the own site's gateway_lan. */
int gs_config_is_own_gateway(const struct gs_config *cfg, const struct gs_addr *a);

/* gateways.c: which own-site gateway a flow takes, and the gateways that failed.
 * The spread of a flow: A(src) + A(dst), wrapping in 32 bits, A(x) being the
 * address's last 32 bits read big-endian (IPv4: the whole address, in the first
 * 4 bytes of a[]; IPv6: a[12..15]; 0 when unknown); the gateway is the spread
 * % ngw. Ports play no part: a node pair always takes one gateway. */
uint32_t gs_flow_spread(const struct gs_addr *src, const struct gs_addr *dst);
/* The order in which a connect tries the own gateways (indices 0..ngw-1 into
 * cfg->gw_line): from gateway spread % ngw on, wrapping, those not marked failed
 * first, then the failed ones in the same order. Returns ngw. */
int gs_gw_order(const struct gs_config *cfg, uint32_t spread, uint8_t *order);
/* Gateway i could not be reached or did not reply in time: new connects try it
 * last for GS_GW_RETRY_MS. Returns 1 when it was not marked before (worth a log
 * line). */
int gs_gw_mark_failed(int i);
/* Gateway i answered: it is no longer skipped. */
void gs_gw_mark_alive(int i);
/* "ADDRESS:PORT" of own gateway i. */
void gs_gw_format(const struct gs_config *cfg, int i, char *buf, size_t len);
/* Non-zero for the errnos that say the gateway itself could not be reached or
 * dropped the connection (worth trying another gateway), zero for the others
 * (local errors such as EADDRNOTAVAIL or EISCONN, which another gateway won't fix). */
int gs_gw_errno_fails_over(int err);

/* addr.c */
int gs_prefix_contains(const struct gs_prefix *p, const struct gs_addr *a);
int gs_addr_equal(const struct gs_addr *x, const struct gs_addr *y);
/* "10.1.0.5", "fd00::5" (a v4-mapped v6 address reads as v4); -1 otherwise. */
int gs_parse_ip(const char *s, struct gs_addr *out);
/* "10.1.0.0/24", "fd00::/64" (host bits cleared); -1 if not exactly that form. */
int gs_parse_cidr(const char *s, struct gs_prefix *out);
/* "10.1.0.254:7100", "[fd00::1]:7100" (port 1-65535); -1 if not exactly that form. */
int gs_parse_hostport(const char *s, struct gs_addr *a, uint16_t *port);
/* sockaddr -> gs_addr (+port in host order). Returns -1 if not AF_INET/AF_INET6 or
 * too short. */
int gs_sockaddr_to_addr(const struct sockaddr *sa, socklen_t len, struct gs_addr *out,
                        uint16_t *port);
/* gs_addr+port -> sockaddr of the given socket family (AF_INET or AF_INET6; an IPv4
 * address in an AF_INET6 socket becomes ::ffff:a.b.c.d). Returns the length, or 0
 * when the address cannot be expressed in that family. */
socklen_t gs_addr_to_sockaddr(const struct gs_addr *a, uint16_t port, int sock_family,
                              struct sockaddr_storage *out);
/* Copy a stored sockaddr into a caller's (addr, addrlen) with the kernel's truncation
 * rules: copy min(*addrlen, len) bytes, then set *addrlen to the full length. */
void gs_copy_out_addr(const struct sockaddr_storage *ss, socklen_t len,
                      struct sockaddr *addr, socklen_t *addrlen);
/* "a.b.c.d:port" or "[v6]:port" for log lines. */
void gs_addr_format(const struct gs_addr *a, uint16_t port, char *buf, size_t len);

/* ------------------------------------------------------------------ real.c */

/* Handles on the next definition (normally glibc's) of every interposed function,
 * resolved once with dlsym(RTLD_NEXT). */
struct gs_real {
    int (*connect)(int, const struct sockaddr *, socklen_t);
    int (*accept)(int, struct sockaddr *, socklen_t *);
    int (*accept4)(int, struct sockaddr *, socklen_t *, int);
    int (*getpeername)(int, struct sockaddr *, socklen_t *);
    int (*getsockopt)(int, int, int, void *, socklen_t *);
    int (*close)(int);
    int (*dup)(int);
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*fcntl)(int, int, ...);
    int (*fcntl64)(int, int, ...);
    ssize_t (*read)(int, void *, size_t);
    ssize_t (*write)(int, const void *, size_t);
    ssize_t (*readv)(int, const struct iovec *, int);
    ssize_t (*writev)(int, const struct iovec *, int);
    ssize_t (*send)(int, const void *, size_t, int);
    ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
    ssize_t (*sendmsg)(int, const struct msghdr *, int);
    ssize_t (*recv)(int, void *, size_t, int);
    ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
    ssize_t (*recvmsg)(int, struct msghdr *, int);
    ssize_t (*read_chk)(int, void *, size_t, size_t);
    ssize_t (*recv_chk)(int, void *, size_t, size_t, int);
    ssize_t (*recvfrom_chk)(int, void *, size_t, size_t, int, struct sockaddr *,
                            socklen_t *);
};
extern struct gs_real gs_real;
void gs_resolve_real(void);
/* Normally resolved by the constructor; the check covers calls made by other
 * libraries' constructors that run before ours. */
#define REAL(fn) (GS_LIKELY(gs_real.fn != NULL) ? gs_real.fn : (gs_resolve_real(), gs_real.fn))

/* -------------------------------------------------------------- settings.c */

/* Configuration, loaded on first use; returns NULL when redirection is off. */
const struct gs_config *gs_config(void);

void gs_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int gs_debug;
extern int gs_accept_timeout_ms;
/* Bound on each gateway's try, from the connect to it to its GSa1 reply. */
extern int gs_handshake_timeout_ms;

/* Applies the LAN timers (the node file's lan_timers line; GRIDSPLIT_LAN_RTO_MIN_US and
 * GRIDSPLIT_LAN_DELACK_MAX_US over it) to a TCP socket whose every segment stays on the
 * site's LAN: a relayed connection's (its peer is the site's gateway) or a same-site
 * connection's; best effort. */
void gs_lan_timers(const struct gs_config *cfg, int fd);
/* Non-zero when a LAN timer is set. */
int gs_lan_timers_on(const struct gs_config *cfg);

/* --------------------------------------------------------------- fdtable.c */

/* Per-fd state. The table is two-level: gs_table[fd >> GS_CHUNK_BITS] points to a
 * chunk of GS_CHUNK slots, allocated the first time an fd of that range is
 * redirected or accepted from a gateway. A process that never redirects anything
 * never allocates a chunk, and the fast path of every wrapper is one or two atomic
 * loads. Chunks are never freed, so a slot pointer stays valid for the life of the
 * process even if another thread closes the fd meanwhile. */
#define GS_CHUNK_BITS 10
#define GS_CHUNK (1u << GS_CHUNK_BITS)

#define GS_MAX_FD (1u << 20) /* Linux's default fs.nr_open ceiling */

/* Bits of gs_slot.flags. Zero means "not ours": the wrapper calls libc directly. */
#define GS_F_IO 1   /* handshake pending or failed: I/O calls must go through the gate */
#define GS_F_PEER 2 /* getpeername()/accept() must report slot.peer */

enum gs_phase {
    GS_P_NONE = 0,
    GS_P_LAN,      /* non-blocking connect to the gateway in progress */
    GS_P_REQ,      /* LAN connected, GSq1 (partly) sent */
    GS_P_REPLY,    /* GSq1 sent, waiting for (the rest of) GSa1 */
    GS_P_OK,       /* GSa1 status 0: plain relayed stream from now on */
    GS_P_FAILED,   /* GSa1 error, gateway unreachable or timeout: err holds errno */
    GS_P_ACCEPTED, /* accepted from a gateway: peer holds the GSo1 origin */
};

struct gs_slot {
    _Atomic uint8_t flags;
    uint8_t phase;
    uint8_t req_sent;
    uint8_t rep_got;
    uint8_t err_reported; /* SO_ERROR already returned err once */
    int err;
    dev_t dev; /* identity of the socket, to detect fds closed behind our back */
    ino_t ino;
    pthread_mutex_t mu; /* held only for non-blocking work, never across a wait */
    uint8_t fail_lan; /* the failure was reaching the gateways, not their reply */
    /* Gateways of the own site to try, in order (gs_gw_order), and where we are. */
    uint8_t gw_n;
    uint8_t gw_at;
    uint8_t gw_order[GS_MAX_GATEWAYS];
    uint8_t gw_err[GS_MAX_GATEWAYS]; /* errno of each failed try, for the log */
    int sock_family; /* AF_INET or AF_INET6: how to address the gateways */
    int64_t deadline_ms; /* of the current gateway's try: gs_handshake_timeout_ms */
    struct gs_request req;
    uint8_t rep[sizeof(struct gs_reply)];
    socklen_t peerlen;
    struct sockaddr_storage peer; /* original destination / original source */
};

extern _Atomic(struct gs_slot *) gs_table[GS_MAX_FD >> GS_CHUNK_BITS];

/* Fast path: the slot of fd if it is tracked (any flag), else NULL. */
static inline struct gs_slot *gs_slot_peek(int fd)
{
    if (GS_UNLIKELY((unsigned)fd >= GS_MAX_FD))
        return NULL;
    struct gs_slot *c =
        atomic_load_explicit(&gs_table[(unsigned)fd >> GS_CHUNK_BITS], memory_order_acquire);
    if (GS_LIKELY(c == NULL))
        return NULL;
    struct gs_slot *s = &c[(unsigned)fd & (GS_CHUNK - 1)];
    return atomic_load_explicit(&s->flags, memory_order_acquire) ? s : NULL;
}

/* Fast path of the I/O wrappers and getsockopt(): the slot of fd if its handshake
 * is pending or failed (GS_F_IO), else NULL. */
static inline struct gs_slot *gs_slot_peek_io(int fd)
{
    struct gs_slot *s = gs_slot_peek(fd);
    if (GS_LIKELY(s == NULL))
        return NULL;
    return (atomic_load_explicit(&s->flags, memory_order_acquire) & GS_F_IO) ? s : NULL;
}

/* Slot of fd, allocating its chunk; NULL if fd is out of range or memory is short. */
struct gs_slot *gs_slot_get(int fd);
/* Non-zero if fd still refers to the socket the slot was filled for; otherwise the
 * slot is cleared (the fd was closed by a path we do not see, e.g. fclose or
 * close_range, and the number reused). */
int gs_slot_valid(int fd, struct gs_slot *s);
void gs_slot_clear(struct gs_slot *s);
/* Record the identity of fd in s (caller holds s->mu). */
int gs_slot_bind_identity(int fd, struct gs_slot *s);
/* pthread_atfork child handler: re-initialises the table's and the slots' mutexes. */
void gs_table_atfork_child(void);

/* ------------------------------------------------------------- handshake.c */

/* Results of gs_drive(). */
enum { GS_ADV_DONE = 0, GS_ADV_FAILED = 1, GS_ADV_AGAIN = 2, GS_ADV_INTR = 3 };

/* Start the handshake of a slot whose request, gw_order, gw_n and sock_family are
 * filled: connect fd to the first gateway of gw_order without blocking (blocking
 * sockets get O_NONBLOCK for the duration of the call), going on to the next on
 * an immediate failure. Called with s->mu held. Returns 0 when a connect is in
 * progress, else the errno of the last gateway (the slot is then FAILED). */
int gs_start_locked(int fd, struct gs_slot *s);
/* Dissolve whatever connection fd has (connect(AF_UNSPEC)) and drop its pending
 * error: the socket can be connected again, as after socket(). */
void gs_disconnect(int fd);
/* Drive the handshake. wait_ms: 0 = one non-blocking attempt, > 0 = wait at most
 * that long, blocking in poll() (never spinning). With return_on_intr a signal
 * interrupts the wait and GS_ADV_INTR is returned (the blocking-connect semantics);
 * otherwise the wait resumes. Each gateway's try has its own deadline
 * (gs_handshake_timeout_ms from its connect): when it passes with no reply the
 * next gateway is tried (failover), whoever drives the machine. */
int gs_drive(int fd, struct gs_slot *s, int wait_ms, int return_on_intr);
/* Drive (waiting at most wait_ms) until the request has been sent or the outcome
 * is known; for readers after a failover, which must not wait in poll(POLLIN) for
 * a reply to a request nobody sent. */
int gs_drive_until_sent(int fd, struct gs_slot *s, int wait_ms);
/* Non-zero while a failover's connect to another gateway is in progress: the
 * application already saw its first attempt end (POLLOUT, POLLERR). */
int gs_slot_failing_over(struct gs_slot *s);
/* close() of a pending fd: if its gateway connect already failed, remember the
 * gateway as failed (an application may close on POLLERR without asking why). */
void gs_slot_note_close(int fd, struct gs_slot *s);
/* Mark a pending handshake as timed out (the bound given to gs_drive() expired). */
void gs_fail_timeout(int fd, struct gs_slot *s);
/* Finish the handshake with the default bound, whatever the blocking mode.
 * Returns 0 when established, else an errno. */
int gs_settle(int fd, struct gs_slot *s);
/* The errno of a failed handshake (ECONNRESET if the slot holds none). */
int gs_slot_err(struct gs_slot *s);
/* Non-zero while the connect to the gateway itself is still in progress. */
int gs_slot_lan_pending(struct gs_slot *s);
int gs_fd_nonblocking(int fd);

/* For a pending redirected connect whose LAN connect is done: wait (bounded) for
 * the gateway's reply. Returns 0 if established, else an errno (EINPROGRESS while
 * the connect to the gateway itself is still in progress). errno is preserved. */
int gs_wait_outcome(int fd, struct gs_slot *s);

#endif /* GS_INTERNAL_H */
