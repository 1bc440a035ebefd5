/*
 * gateways.c - a site may have several gateway hosts (one node file line each,
 * same site name). Which one a redirected connect takes, and which ones failed:
 *
 * - Spreading. A flow (this node's address in its site, destination address,
 *   destination port) is hashed with FNV-1a and takes gateway hash % ngw, so a
 *   given flow always takes the same gateway and the flows of a gather from many
 *   nodes to one root spread over the gateways. The source is the socket's bound
 *   address if it has one, else the interface address that matched the own site
 *   when it was picked (gs_config.own_addr), else zero. The source port is left
 *   out on purpose: it changes with every connect.
 * - Failover. handshake.c tries the gateways in gs_gw_order() until one answers.
 *   A gateway that could not be reached, or did not answer in time, is marked
 *   failed for GS_GW_RETRY_MS in this process, and new connects try it last.
 *
 * The hash is documented in docs/protocol.md §5 and recomputed independently by
 * tests/multigw_test.c: change both if it changes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "gs_internal.h"

static struct {
    _Atomic int64_t failed_until; /* gs_now_ms() bound; 0 = not marked */
} health[GS_MAX_GATEWAYS];

uint32_t gs_flow_hash(const struct gs_addr *src, const struct gs_addr *dst, uint16_t dport)
{
    uint8_t key[34];
    memset(key, 0, sizeof key);
    if (src && (src->family == GS_FAMILY_V4 || src->family == GS_FAMILY_V6))
        memcpy(key, src->a, src->family == GS_FAMILY_V4 ? 4 : 16);
    memcpy(key + 16, dst->a, dst->family == GS_FAMILY_V4 ? 4 : 16);
    key[32] = (uint8_t)(dport >> 8);
    key[33] = (uint8_t)dport;
    uint32_t h = 2166136261u; /* FNV-1a offset basis */
    for (size_t i = 0; i < sizeof key; i++) {
        h ^= key[i];
        h *= 16777619u; /* FNV prime */
    }
    /* FNV-1a's low bits mix poorly (bit 0 is the parity of the key bytes' bit 0):
     * fold the high half in before the modulo. */
    return h ^ (h >> 16);
}

static int is_failed(int i, int64_t now)
{
    return atomic_load_explicit(&health[i].failed_until, memory_order_relaxed) > now;
}

int gs_gw_order(const struct gs_config *cfg, uint32_t hash, uint8_t *order)
{
    int n = cfg->ngw, k = 0;
    if (n <= 0)
        return 0;
    int start = (int)(hash % (uint32_t)n);
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
