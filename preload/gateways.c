/*
 * gateways.c - a site may have several gateway hosts (one node file line each,
 * same site name). Which one a redirected connect takes, and which ones failed:
 *
 * - Spreading. A flow between this node's address in its site and the
 *   destination address takes gateway (A(src) + A(dst)) % ngw, where A(x) is the
 *   address's last 32 bits as a big-endian unsigned integer (IPv4: the whole
 *   address; IPv6: its last 4 bytes), the sum wrapping in 32 bits. Over
 *   consecutive node addresses these sums form a Latin square, so one-to-many,
 *   many-to-one (a gather) and all-to-all between the nodes of two sites spread
 *   evenly over the gateways, where a hash of a job's handful of flows often
 *   does not (results/app/2026-11-26-paper-2gw: a LAMMPS job's three bordeaux
 *   ranks all hashed to one gateway). It is deterministic across processes and
 *   releases, and the tests and docs can compute it. The source is the socket's
 *   bound address if it has one, else the interface address that matched the
 *   own site when it was picked (gs_config.own_addr), else zero (A = 0). Ports
 *   are left out: every connection between two nodes takes the same gateway (a
 *   node's NIC is no faster than a gateway's, so spreading one node pair over
 *   several gains nothing).
 * - Failover. handshake.c tries the gateways in gs_gw_order() until one answers.
 *   A gateway that could not be reached, or did not answer in time, is marked
 *   failed for GS_GW_RETRY_MS in this process, and new connects try it last.
 *
 * The rule is documented in docs/protocol.md §5 and recomputed independently by
 * tests/multigw_test.c; gridsplitd applies the same one to the destination
 * site's gateways (collect/route.rs): change all of them if it changes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "gs_internal.h"

static struct {
    _Atomic int64_t failed_until; /* gs_now_ms() bound; 0 = not marked */
} health[GS_MAX_GATEWAYS];

/* A(x): the address's last 32 bits, big-endian (an IPv4 address sits in the
 * first 4 bytes of its 16); 0 for an unknown address. */
static uint32_t addr_low32(const struct gs_addr *x)
{
    if (!x || (x->family != GS_FAMILY_V4 && x->family != GS_FAMILY_V6))
        return 0;
    const uint8_t *b = x->a + (x->family == GS_FAMILY_V4 ? 0 : 12);
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

uint32_t gs_flow_spread(const struct gs_addr *src, const struct gs_addr *dst)
{
    return addr_low32(src) + addr_low32(dst); /* unsigned: wraps */
}

static int is_failed(int i, int64_t now)
{
    return atomic_load_explicit(&health[i].failed_until, memory_order_relaxed) > now;
}

int gs_gw_order(const struct gs_config *cfg, uint32_t spread, uint8_t *order)
{
    int n = cfg->ngw, k = 0;
    if (n <= 0)
        return 0;
    int start = (int)(spread % (uint32_t)n);
    int64_t now = gs_now_ms();
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < n; j++) {
            int i = (start + j) % n;
            if (is_failed(i, now) == pass)
                order[k++] = (uint8_t)i;
        }
    return n;
}

int gs_gw_mark_failed(int i)
{
    if (i < 0 || i >= GS_MAX_GATEWAYS)
        return 0;
    int64_t now = gs_now_ms();
    int64_t was = atomic_exchange_explicit(&health[i].failed_until, now + GS_GW_RETRY_MS,
                                           memory_order_relaxed);
    return was <= now;
}

void gs_gw_mark_alive(int i)
{
    if (i >= 0 && i < GS_MAX_GATEWAYS &&
        atomic_load_explicit(&health[i].failed_until, memory_order_relaxed))
        atomic_store_explicit(&health[i].failed_until, 0, memory_order_relaxed);
}

void gs_gw_format(const struct gs_config *cfg, int i, char *buf, size_t len)
{
    const struct gs_site *st = &cfg->site[cfg->gw_line[i]];
    gs_addr_format(&st->gw, st->gw_port, buf, len);
}

int gs_gw_errno_fails_over(int err)
{
    switch (err) {
    case ECONNREFUSED: /* nothing listens: gridsplitd is down */
    case EHOSTUNREACH: /* the host is down (no ARP answer) or filtered */
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
    case ETIMEDOUT: /* no SYN-ACK, or no reply in time */
    case ECONNRESET: /* the gateway dropped the connection before replying */
    case ECONNABORTED:
    case EPIPE:
        return 1;
    default:
        return 0;
    }
}
