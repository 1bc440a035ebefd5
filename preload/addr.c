/*
 * addr.c - IP addresses of libgridsplit.so: conversions between sockaddrs and the
 * library's gs_addr, log formatting, and the textual forms the node file uses
 * (CIDR prefixes and ADDRESS:PORT). Parsing is strict: inet_pton only, no host
 * names, no shorthand such as "10.1.0".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "gs_internal.h"


int gs_prefix_contains(const struct gs_prefix *p, const struct gs_addr *a)
{
    if (p->net.family != a->family)
        return 0;
    int full = p->len / 8, rest = p->len % 8;
    if (memcmp(p->net.a, a->a, (size_t)full) != 0)
        return 0;
    if (rest) {
        uint8_t mask = (uint8_t)(0xff << (8 - rest));
        if ((p->net.a[full] & mask) != (a->a[full] & mask))
            return 0;
    }
    return 1;
}

int gs_addr_equal(const struct gs_addr *x, const struct gs_addr *y)
{
    size_t n = x->family == GS_FAMILY_V4 ? 4 : 16;
    return x->family == y->family && memcmp(x->a, y->a, n) == 0;
}

int gs_sockaddr_to_addr(const struct sockaddr *sa, socklen_t len, struct gs_addr *out,
                        uint16_t *port)
{
    memset(out, 0, sizeof *out);
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        out->family = GS_FAMILY_V4;
        memcpy(out->a, &in->sin_addr, 4);
        if (port)
            *port = ntohs(in->sin_port);
        return 0;
    }
    if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            out->family = GS_FAMILY_V4;
            memcpy(out->a, &in6->sin6_addr.s6_addr[12], 4);
        } else {
            out->family = GS_FAMILY_V6;
            memcpy(out->a, &in6->sin6_addr, 16);
        }
        if (port)
            *port = ntohs(in6->sin6_port);
        return 0;
    }
    return -1;
}

socklen_t gs_addr_to_sockaddr(const struct gs_addr *a, uint16_t port, int sock_family,
                              struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    if (sock_family == AF_INET) {
        if (a->family != GS_FAMILY_V4)
            return 0;
        struct sockaddr_in *in = (struct sockaddr_in *)out;
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        memcpy(&in->sin_addr, a->a, 4);
        return sizeof *in;
    }
    if (sock_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        if (a->family == GS_FAMILY_V4) {
            in6->sin6_addr.s6_addr[10] = 0xff;
            in6->sin6_addr.s6_addr[11] = 0xff;
            memcpy(&in6->sin6_addr.s6_addr[12], a->a, 4);
        } else {
            memcpy(&in6->sin6_addr, a->a, 16);
        }
        return sizeof *in6;
    }
    return 0;
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

void gs_addr_format(const struct gs_addr *a, uint16_t port, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (a->family == GS_FAMILY_V4) {
        inet_ntop(AF_INET, a->a, ip, sizeof ip);
        snprintf(buf, len, "%s:%u", ip, (unsigned)port);
    } else {
        inet_ntop(AF_INET6, a->a, ip, sizeof ip);
        snprintf(buf, len, "[%s]:%u", ip, (unsigned)port);
    }
}

int gs_parse_ip(const char *s, struct gs_addr *out)
{
    memset(out, 0, sizeof *out);
    if (strchr(s, ':')) {
        struct in6_addr a6;
        if (inet_pton(AF_INET6, s, &a6) != 1)
            return -1;
        if (IN6_IS_ADDR_V4MAPPED(&a6)) {
            out->family = GS_FAMILY_V4;
            memcpy(out->a, &a6.s6_addr[12], 4);
        } else {
            out->family = GS_FAMILY_V6;
            memcpy(out->a, &a6, 16);
        }
        return 0;
    }
    /* inet_pton(AF_INET) only accepts the full dotted quad, so "10.1.0" fails. */
    struct in_addr a4;
    if (inet_pton(AF_INET, s, &a4) != 1)
        return -1;
    out->family = GS_FAMILY_V4;
    memcpy(out->a, &a4, 4);
    return 0;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    if (!*s || strlen(s) > 10)
        return -1;
    unsigned long v = 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s))
            return -1;
        v = v * 10 + (unsigned long)(*s - '0');
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

int gs_parse_cidr(const char *s, struct gs_prefix *out)
{
    char buf[128];
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    char *slash = strchr(buf, '/');
    if (!slash || strchr(slash + 1, '/'))
        return -1;
    *slash = 0;
    if (gs_parse_ip(buf, &out->net) < 0)
        return -1;
    unsigned long len;
    if (parse_uint(slash + 1, out->net.family == GS_FAMILY_V4 ? 32 : 128, &len) < 0)
        return -1;
    out->len = (int)len;
    /* Clear host bits, so "10.1.0.7/24" means the network 10.1.0.0/24. */
    for (int i = 0; i < 16; i++) {
        int bits = out->len - i * 8;
        if (bits <= 0)
            out->net.a[i] = 0;
        else if (bits < 8)
            out->net.a[i] &= (uint8_t)(0xff << (8 - bits));
    }
    return 0;
}

int gs_parse_hostport(const char *s, struct gs_addr *a, uint16_t *port)
{
    char buf[128];
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    char *host = buf, *p;
    if (buf[0] == '[') {
        char *close = strchr(buf, ']');
        if (!close || close[1] != ':')
            return -1;
        *close = 0;
        host = buf + 1;
        p = close + 2;
        if (!strchr(host, ':'))
            return -1; /* brackets are for IPv6 only */
    } else {
        char *colon = strrchr(buf, ':');
        if (!colon || colon != strchr(buf, ':'))
            return -1; /* missing port, or bare IPv6 without brackets */
        *colon = 0;
        p = colon + 1;
    }
    unsigned long v;
    if (gs_parse_ip(host, a) < 0 || parse_uint(p, 65535, &v) < 0 || v == 0)
        return -1;
    *port = (uint16_t)v;
    return 0;
}
