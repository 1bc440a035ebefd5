/*
 * nodefile.c - reads the node file (GRIDSPLIT_CONFIG): the sites whose connections
 * libgridsplit.so steers through the gateways (docs/protocol.md section 5).
 * `gridsplit gateway nodes-config` writes it from the topology:
 *
 *   # comments (lines whose first non-blank character is '#') and blank lines anywhere
 *   gridsplit-nodes 1
 *   routed no
 *   lan_timers 5000 5000
 *   site west 10.71.2.0/24 10.71.2.254:7100
 *   site east 10.71.1.0/24 10.71.1.254:7100 direct_to=west,north
 *
 * The header names the format's version; then one line per site: its name (1-64
 * of [A-Za-z0-9_-], as gridsplitd requires), subnet (CIDR), gateway_lan
 * (ADDRESS:PORT, [v6]:PORT) and optionally the sites its connections stay direct
 * with (the split policy). Several lines may share a name, one per gateway.
 * `routed no` (optional, before the sites) says the sites' subnets are not routed
 * to each other ([addressing] routed = false): connect.c then names, on stderr, a
 * destination that is in no site, since nothing but the gateways could carry it.
 * `lan_timers RTO_MIN_US DELACK_MAX_US` (optional, before the sites; [gateways]
 * lan_rto_min_us) sets the LAN timers of the ranks' LAN connections (settings.c).
 *
 * Why a line format of our own rather than the gateway's TOML file: nodes need
 * four values per site, which gridsplit itself writes. Reading them out of TOML
 * took a hand-written parser (about 400 lines) that had to skip every TOML
 * construct of the tables the gateway owns, because Debian packages no C TOML
 * library, only C++ ones (cpptoml, toml11, toml++), and loading libstdc++, its
 * exceptions and static constructors into every MPI process through LD_PRELOAD
 * is a risk a library that must stay invisible should not take. Here each line is
 * copied into a bounded buffer and split on blanks; every field is checked with
 * inet_pton-based parsers (addr.c). Anything else, a gateway TOML file included,
 * is refused with its line number and the fix. gridsplitd keeps its TOML config.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_internal.h"

#define HEADER "gridsplit-nodes"
#define VERSION "1"
#define SITE_LINE "site NAME SUBNET GATEWAY_LAN [direct_to=SITE,...]"
#define FIX "give GRIDSPLIT_CONFIG the node file written by `gridsplit gateway nodes-config`"
/* Longest line, newline excluded: a site line with a full direct_to list fits. */
#define LINE_MAX_BYTES 511
#define MAX_FIELDS 5

static int fail(char *err, size_t errlen, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int line, const char *fmt, ...)
{
    int n = line ? snprintf(err, errlen, "line %d: ", line) : 0;
    if (n < 0 || (size_t)n >= errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int header_line(char **f, int nf, int line, char *err, size_t errlen)
{
    if (nf == 2 && strcmp(f[0], HEADER) == 0 && strcmp(f[1], VERSION) == 0)
        return 0;
    if (f[0][0] == '[' || strchr(f[0], '=') || (nf > 1 && f[1][0] == '='))
        return fail(err, errlen, line, "this is a TOML file (a gateway's config?), not a node file; " FIX);
    if (nf == 2 && strcmp(f[0], HEADER) == 0)
        return fail(err, errlen, line,
                    "node file version %.16s; this libgridsplit.so reads version " VERSION
                    ": rebuild the library, or regenerate the file with the gridsplit it comes with",
                    f[1]);
    return fail(err, errlen, line, "expected the header \"" HEADER " " VERSION "\"; " FIX);
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= GS_SITE_NAME_MAX)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-')
            return 0;
    return 1;
}

static int routed_line(struct gs_config *cfg, char **f, int nf, int line, char *err, size_t errlen)
{
    if (nf != 2 || (strcmp(f[1], "yes") != 0 && strcmp(f[1], "no") != 0))
        return fail(err, errlen, line, "expected \"routed yes\" or \"routed no\"");
    if (cfg->nsites)
        return fail(err, errlen, line, "\"routed\" comes before the site lines");
    cfg->routed = strcmp(f[1], "yes") == 0;
    return 0;
}

/* Microseconds of a LAN timer: 0 (Linux's) or 2000-200000, as the topology bounds them
 * (topology_file.lan_timer: Linux refuses less than two jiffies). */
static int timer_us(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || (v != 0 && (v < 2000 || v > 200000)))
        return -1;
    *out = (int)v;
    return 0;
}

static int lan_timers_line(struct gs_config *cfg, char **f, int nf, int line, char *err, size_t errlen)
{
    if (nf != 3 || timer_us(f[1], &cfg->lan_rto_min_us) < 0 || timer_us(f[2], &cfg->lan_delack_max_us) < 0)
        return fail(err, errlen, line, "expected \"lan_timers RTO_MIN_US DELACK_MAX_US\", each 0 or 2000-200000");
    if (cfg->nsites)
        return fail(err, errlen, line, "\"lan_timers\" comes before the site lines");
    return 0;
}

static int site_line(struct gs_config *cfg, char **f, int nf, int line, char *err, size_t errlen)
{
    if (strcmp(f[0], "routed") == 0)
        return routed_line(cfg, f, nf, line, err, errlen);
    if (strcmp(f[0], "lan_timers") == 0)
        return lan_timers_line(cfg, f, nf, line, err, errlen);
    if (strcmp(f[0], "site") != 0)
        return fail(err, errlen, line, "unknown entry \"%.64s\"; expected: " SITE_LINE, f[0]);
    if (nf < 4)
        return fail(err, errlen, line, "a site line needs a name, a subnet and a gateway: " SITE_LINE);
    if (cfg->nsites == GS_MAX_SITES)
        return fail(err, errlen, line, "more than %d site lines", GS_MAX_SITES);
    struct gs_site *st = &cfg->site[cfg->nsites];
    memset(st, 0, sizeof *st);
    st->line = line;
    if (!valid_name(f[1]))
        return fail(err, errlen, line, "site name \"%.64s\" is not 1-%d characters of [A-Za-z0-9_-]",
                    f[1], GS_SITE_NAME_MAX - 1);
    strcpy(st->name, f[1]);
    if (gs_parse_cidr(f[2], &st->subnet) < 0)
        return fail(err, errlen, line, "subnet \"%.64s\" is not a CIDR prefix", f[2]);
    if (gs_parse_hostport(f[3], &st->gw, &st->gw_port) < 0)
        return fail(err, errlen, line, "gateway_lan \"%.64s\" is not ADDRESS:PORT", f[3]);
    if (nf > 4) {
        if (strncmp(f[4], "direct_to=", 10) != 0)
            return fail(err, errlen, line, "unexpected \"%.64s\" after the gateway: " SITE_LINE, f[4]);
        if (nf > 5)
            return fail(err, errlen, line, "unexpected \"%.64s\" after direct_to: " SITE_LINE, f[5]);
        const char *list = f[4] + 10;
        if (!*list)
            return fail(err, errlen, line, "direct_to= names no site (leave it out instead)");
        if (strlen(list) >= sizeof st->direct_to)
            return fail(err, errlen, line, "direct_to is longer than %zu bytes", sizeof st->direct_to - 1);
        strcpy(st->direct_to, list);
    }
    cfg->nsites++;
    return 0;
}

/* Every name in a direct_to list must be a site of the file: a typo would
 * otherwise silently split what the policy meant to leave direct. */
static int check_direct_to(const struct gs_config *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < cfg->nsites; i++) {
        for (const char *p = cfg->site[i].direct_to; *p; p += *p == ',') {
            size_t len = strcspn(p, ",");
            int known = 0;
            for (int k = 0; k < cfg->nsites && !known; k++)
                known = strlen(cfg->site[k].name) == len && strncmp(cfg->site[k].name, p, len) == 0;
            if (len && !known) /* empty names (",,") are skipped, as gridsplitd does */
                return fail(err, errlen, cfg->site[i].line, "direct_to names \"%.*s\", which is no site of this file",
                            (int)(len > 64 ? 64 : len), p);
            p += len;
        }
    }
    return 0;
}

int gs_config_parse(const char *text, size_t len, struct gs_config *cfg, char *err,
                    size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->own = -1;
    cfg->routed = 1;
    err[0] = 0;
    int line = 0, have_header = 0;
    for (const char *p = text, *end = text + len; p < end;) {
        const char *start = p, *nl = memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end;
        p = nl ? nl + 1 : end;
        line++;
        while (start < eol && (*start == ' ' || *start == '\t'))
            start++;
        if (start < eol && *start == '#')
            continue; /* a comment, of any length */
        char buf[LINE_MAX_BYTES + 1];
        size_t n = (size_t)(eol - start);
        if (n > LINE_MAX_BYTES)
            return fail(err, errlen, line, "longer than %d bytes", LINE_MAX_BYTES);
        memcpy(buf, start, n);
        buf[n] = 0;

        char *f[MAX_FIELDS + 1], *save = NULL;
        int nf = 0;
        for (char *t = strtok_r(buf, " \t\r", &save); t && nf <= MAX_FIELDS; t = strtok_r(NULL, " \t\r", &save))
            f[nf++] = t;
        if (nf == 0)
            continue;
        if (have_header ? site_line(cfg, f, nf, line, err, errlen) < 0
                        : header_line(f, nf, line, err, errlen) < 0)
            return -1;
        have_header = 1;
    }
    if (!have_header)
        return fail(err, errlen, 0, "no \"" HEADER " " VERSION "\" header (empty file?); " FIX);
    if (cfg->nsites == 0)
        return fail(err, errlen, 0, "no site line; " FIX);
    return check_direct_to(cfg, err, errlen);
}

int gs_config_load(const char *path, const char *site_name, struct gs_config *cfg,
                   char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "%s", strerror(errno));
        return -1;
    }
    /* The generated file is a few kB; 1 MiB is a sanity bound, not a format limit. */
    enum { MAX = 1 << 20 };
    char *buf = malloc(MAX);
    if (!buf) {
        fclose(f);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t n = fread(buf, 1, MAX, f);
    int rd_err = ferror(f);
    int more = !rd_err && n == MAX && fgetc(f) != EOF;
    fclose(f);
    int r;
    if (rd_err) {
        snprintf(err, errlen, "read error");
        r = -1;
    } else if (more) {
        snprintf(err, errlen, "file larger than 1 MiB");
        r = -1;
    } else if (memchr(buf, 0, n)) {
        snprintf(err, errlen, "file contains a NUL byte");
        r = -1;
    } else {
        r = gs_config_parse(buf, n, cfg, err, errlen);
        if (r == 0)
            r = gs_config_pick_site(cfg, site_name, err, errlen);
    }
    free(buf);
    return r;
}
