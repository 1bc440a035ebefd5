/*
 * sites.c - what libgridsplit.so does with the sites of its node file (read by
 * nodefile.c): choose the own site, and classify a destination address as
 * another site's (redirect through the own gateway) or not (leave alone).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <string.h>

#include "gs_internal.h"


static int is_loopback(const struct gs_addr *a)
{
    if (a->family == GS_FAMILY_V4)
        return a->a[0] == 127;
    static const uint8_t one[16] = {[15] = 1};
    return memcmp(a->a, one, 16) == 0;
}

/* A subnet that lies wholly inside loopback space: only test configurations use
 * these, and they are the only way a loopback destination gets redirected. */
static int prefix_is_loopback(const struct gs_prefix *p)
{
    if (p->net.family == GS_FAMILY_V4)
        return p->len >= 8 && p->net.a[0] == 127;
    return p->len == 128 && is_loopback(&p->net);
}

/* Non-zero when `name` is one of the comma-separated site names in `list`. */
static int list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p; p += *p == ',') {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len;
    }
    return 0;
}

/* The split policy: connections between sites a and b stay direct when either
 * site's line (any of them: a site may have several) lists the other. */
static int pair_is_direct(const struct gs_config *cfg, const char *a, const char *b)
{
    for (int i = 0; i < cfg->nsites; i++) {
        const struct gs_site *st = &cfg->site[i];
        if ((strcmp(st->name, a) == 0 && list_has(st->direct_to, b)) ||
            (strcmp(st->name, b) == 0 && list_has(st->direct_to, a)))
            return 1;
    }
    return 0;
}

/* Lines i and j are of the same site (a site may have several lines). */
static int same_site(const struct gs_config *cfg, int i, int j)
{
    return i == j || strcmp(cfg->site[i].name, cfg->site[j].name) == 0;
}

/* The site whose subnet holds a (longest prefix wins), or -1. */
static int site_of(const struct gs_config *cfg, const struct gs_addr *a)
{
    int best = -1, bestlen = -1;
    for (int i = 0; i < cfg->nsites; i++) {
        const struct gs_site *st = &cfg->site[i];
        if (st->subnet.len > bestlen && gs_prefix_contains(&st->subnet, a)) {
            best = i;
            bestlen = st->subnet.len;
        }
    }
    return best;
}

int gs_config_in_no_site(const struct gs_config *cfg, const struct gs_addr *dst)
{
    return !is_loopback(dst) && site_of(cfg, dst) < 0;
}

int gs_config_in_own_site(const struct gs_config *cfg, const struct gs_addr *a)
{
    int i = site_of(cfg, a);
    /* Loopback only where the site itself lives on loopback (as classify has it). */
    return i >= 0 && cfg->own >= 0 && same_site(cfg, i, cfg->own) &&
           (!is_loopback(a) || prefix_is_loopback(&cfg->site[i].subnet));
}

static int listed_host(const struct gs_config *cfg, const struct gs_addr *a)
{
    for (int i = 0; i < cfg->nhosts; i++)
        if (gs_addr_equal(&cfg->hosts[i], a))
            return 1;
    return 0;
}

int gs_config_classify(const struct gs_config *cfg, const struct gs_addr *dst)
{
    int best = site_of(cfg, dst);
    /* Any line of the own site is the own site (a site may have several). */
    if (best < 0 || (cfg->own >= 0 && same_site(cfg, best, cfg->own)))
        return -1;
    /* The own gateways are never redirected to themselves, whatever the subnets say. */
    if (gs_config_is_own_gateway(cfg, dst))
        return -1;
    /* 127.0.0.1 and friends stay local unless a site explicitly lives on loopback. */
    if (is_loopback(dst) && !prefix_is_loopback(&cfg->site[best].subnet))
        return -1;
    if (cfg->own >= 0 && pair_is_direct(cfg, cfg->site[cfg->own].name, cfg->site[best].name))
        return -1;
    if (cfg->nhosts && !cfg->own_is_host && !listed_host(cfg, dst))
        return -1; /* the host rule: neither end is a listed host */
    return best;
}

int gs_config_is_own_gateway(const struct gs_config *cfg, const struct gs_addr *a)
{
    if (cfg->own < 0)
        return 0;
    /* Several lines may share a site name (one per gateway of a site). */
    const char *own = cfg->site[cfg->own].name;
    for (int i = 0; i < cfg->nsites; i++)
        if (strcmp(cfg->site[i].name, own) == 0 && gs_addr_equal(&cfg->site[i].gw, a))
            return 1;
    return 0;
}

/* ------------------------------------------------------------ own site */

/* The own site's gateways: the distinct gateway_lan of its lines, in file order
 * (a site with two subnets behind one gateway has it twice). */
static void own_gateways(struct gs_config *cfg)
{
    cfg->ngw = cfg->gw_ignored = 0;
    for (int i = 0; i < cfg->nsites; i++) {
        if (!same_site(cfg, i, cfg->own))
            continue;
        int dup = 0;
        for (int k = 0; k < cfg->ngw && !dup; k++) {
            const struct gs_site *o = &cfg->site[cfg->gw_line[k]];
            dup = o->gw_port == cfg->site[i].gw_port && gs_addr_equal(&o->gw, &cfg->site[i].gw);
        }
        if (dup)
            continue;
        if (cfg->ngw == GS_MAX_GATEWAYS)
            cfg->gw_ignored++;
        else
            cfg->gw_line[cfg->ngw++] = i;
    }
}

/* The site line whose subnet holds interface address i (its address in *a), or -1. */
static int ifa_site(const struct gs_config *cfg, const struct ifaddrs *i, struct gs_addr *a)
{
    if (!i->ifa_addr ||
        gs_sockaddr_to_addr(i->ifa_addr, sizeof(struct sockaddr_storage), a, NULL) < 0)
        return -1;
    return site_of(cfg, a);
}

/* The first interface address inside a subnet of the own site (family 0 if none):
 * the node's address in its site, the flows' source when the gateway spread
 * picks one of several gateways (gateways.c). */
static void own_address(struct gs_config *cfg, struct ifaddrs *ifs)
{
    memset(&cfg->own_addr, 0, sizeof cfg->own_addr);
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        struct gs_addr a;
        int best = ifa_site(cfg, i, &a);
        if (best >= 0 && same_site(cfg, best, cfg->own)) {
            cfg->own_addr = a;
            return;
        }
    }
}

static void own_site_chosen(struct gs_config *cfg, struct ifaddrs *ifs)
{
    own_gateways(cfg);
    own_address(cfg, ifs);
}

int gs_config_pick_site(struct gs_config *cfg, const char *site_name, char *err,
                        size_t errlen)
{
    int own = -1;
    if (site_name) {
        for (int i = 0; i < cfg->nsites && own < 0; i++)
            if (strcmp(cfg->site[i].name, site_name) == 0)
                own = i;
        if (own < 0) {
            snprintf(err, errlen, "GRIDSPLIT_SITE=%s names no site of the node file", site_name);
            return -1;
        }
        cfg->own = own;
        /* The interfaces are read only for the node's own address here: without
         * one the gateway spread takes 0 for the source, which is still stable. */
        struct ifaddrs *ifs = NULL;
        if (getifaddrs(&ifs) < 0)
            ifs = NULL;
        own_site_chosen(cfg, ifs);
        if (ifs)
            freeifaddrs(ifs);
        return 0;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0) {
        snprintf(err, errlen, "getifaddrs: %s; set GRIDSPLIT_SITE", strerror(errno));
        return -1;
    }
    int other = -1;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        struct gs_addr a;
        int best = ifa_site(cfg, i, &a);
        if (best < 0)
            continue;
        if (own < 0)
            own = best;
        else if (strcmp(cfg->site[best].name, cfg->site[own].name) != 0)
            other = best;
    }
    if (own >= 0 && other < 0) {
        cfg->own = own;
        own_site_chosen(cfg, ifs);
    }
    freeifaddrs(ifs);
    if (own < 0) {
        snprintf(err, errlen, "no address of this host is inside a site's subnet; set GRIDSPLIT_SITE");
        return -1;
    }
    if (other >= 0) {
        snprintf(err, errlen, "this host has addresses in sites \"%s\" and \"%s\"; set GRIDSPLIT_SITE",
                 cfg->site[own].name, cfg->site[other].name);
        return -1;
    }
    cfg->own = own;
    return 0;
}

/* ------------------------------------------------------------ split mode */

/* Whether this host is one the host rule lists: its site address (own_addr), or
 * any address of its interfaces (a root reached by another of its addresses). */
static int own_is_listed(const struct gs_config *cfg)
{
    if (cfg->own_addr.family && listed_host(cfg, &cfg->own_addr))
        return 1;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0)
        return 0;
    int found = 0;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        struct gs_addr a;
        found = i->ifa_addr &&
                gs_sockaddr_to_addr(i->ifa_addr, sizeof(struct sockaddr_storage), &a, NULL) == 0 &&
                listed_host(cfg, &a);
    }
    freeifaddrs(ifs);
    return found;
}

int gs_config_split_mode(struct gs_config *cfg, const char *mode, char *err, size_t errlen)
{
    if (!mode || !*mode || strcmp(mode, "policy") == 0)
        return 0;
    struct gs_addr hosts[GS_MAX_SPLIT_HOSTS];
    int n = 0;
    if (strncmp(mode, "hosts:", 6) == 0) {
        const char *p = mode + 6;
        do {
            size_t len = strcspn(p, "+");
            char one[64];
            if (len == 0 || len >= sizeof one) {
                snprintf(err, errlen, "GRIDSPLIT_SPLIT=%.100s: an empty or overlong address in the host list; "
                         "give hosts:ADDR[+ADDR...] (IP addresses)", mode);
                return -1;
            }
            memcpy(one, p, len);
            one[len] = 0;
            if (n == GS_MAX_SPLIT_HOSTS) {
                snprintf(err, errlen, "GRIDSPLIT_SPLIT: more than %d hosts; name the job's root host(s) only",
                         GS_MAX_SPLIT_HOSTS);
                return -1;
            }
            if (gs_parse_ip(one, &hosts[n++]) < 0) {
                snprintf(err, errlen, "GRIDSPLIT_SPLIT: \"%s\" is not an IP address; give hosts:ADDR[+ADDR...]",
                         one);
                return -1;
            }
            p += len;
        } while (*p++ == '+');
    } else if (strcmp(mode, "all") != 0) {
        snprintf(err, errlen, "GRIDSPLIT_SPLIT=%.100s is none of policy, all, hosts:ADDR[+ADDR...]", mode);
        return -1;
    }
    for (int i = 0; i < cfg->nsites; i++)
        cfg->site[i].direct_to[0] = 0;
    memcpy(cfg->hosts, hosts, (size_t)n * sizeof hosts[0]);
    cfg->nhosts = n;
    cfg->own_is_host = n && own_is_listed(cfg);
    return 0;
}
