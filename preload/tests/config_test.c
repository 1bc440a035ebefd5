/*
 * config_test.c - unit tests of the node file reader (nodefile.c), own-site choice
 * and destination classification (sites.c), linked directly against them so no
 * LD_PRELOAD is involved. Error messages are checked verbatim where users will
 * read them, line numbers included.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_internal.h"

static int checks, failures;

#define CHECK(cond, ...)                                                               \
    do {                                                                               \
        checks++;                                                                      \
        if (!(cond)) {                                                                 \
            failures++;                                                                \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);            \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, "\n");                                                     \
        }                                                                              \
    } while (0)

static struct gs_config cfg;
static char err[512];

static int parse(const char *text)
{
    return gs_config_parse(text, strlen(text), &cfg, err, sizeof err);
}

static struct gs_addr ip(const char *s)
{
    struct gs_addr a;
    memset(&a, 0, sizeof a);
    if (strchr(s, ':')) {
        a.family = GS_FAMILY_V6;
        inet_pton(AF_INET6, s, a.a);
    } else {
        a.family = GS_FAMILY_V4;
        inet_pton(AF_INET, s, a.a);
    }
    return a;
}

static int classify(const char *s)
{
    struct gs_addr a = ip(s);
    return gs_config_classify(&cfg, &a);
}

static void expect_error(const char *text, const char *want)
{
    int r = parse(text);
    CHECK(r == -1 && strcmp(err, want) == 0, "want error '%s', got r=%d '%s'", want, r, err);
}

static const char full[] =
    "# gridsplit node file\n"
    "\n"
    "gridsplit-nodes 1\n"
    "# site NAME SUBNET GATEWAY_LAN [direct_to=SITE,...]\n"
    "site bordeaux 10.71.1.0/24 10.71.1.254:7100\n"
    "   # an indented comment, and a blank line with blanks:\n"
    " \t \n"
    "\tsite  lyon\t10.71.2.7/24   [fd00::2]:7100\r\n" /* host bits: cleared; CRLF */
    "site wide 0.0.0.0/0 10.99.0.254:7100\n";

static void test_full(void)
{
    CHECK(parse(full) == 0, "parse: %s", err);
    CHECK(cfg.nsites == 3, "nsites %d", cfg.nsites);
    if (cfg.nsites != 3)
        return;
    CHECK(strcmp(cfg.site[0].name, "bordeaux") == 0, "%s", cfg.site[0].name);
    CHECK(strcmp(cfg.site[1].name, "lyon") == 0, "%s", cfg.site[1].name);
    CHECK(strcmp(cfg.site[2].name, "wide") == 0, "%s", cfg.site[2].name);
    CHECK(cfg.site[0].gw_port == 7100, "gw port %u", cfg.site[0].gw_port);
    CHECK(cfg.site[1].subnet.len == 24 && cfg.site[1].subnet.net.a[3] == 0, "lyon subnet");
    CHECK(cfg.site[1].gw.family == GS_FAMILY_V6 && cfg.site[1].gw.a[15] == 2, "v6 gateway");
    CHECK(cfg.site[0].line == 5 && cfg.site[1].line == 8, "lines %d %d", cfg.site[0].line, cfg.site[1].line);

    CHECK(gs_config_pick_site(&cfg, "bordeaux", err, sizeof err) == 0, "%s", err);
    CHECK(cfg.own == 0, "own %d", cfg.own);
    CHECK(classify("10.71.2.5") == 1, "other site");
    CHECK(classify("10.71.2.200") == 1, "other site, host bits of the config ignored");
    CHECK(classify("10.71.1.5") == -1, "own site");
    CHECK(classify("10.71.1.254") == -1, "own gateway");
    CHECK(classify("127.0.0.1") == -1, "loopback stays local even inside 0.0.0.0/0");
    CHECK(classify("::1") == -1, "v6 loopback");
    CHECK(classify("8.8.8.8") == 2, "catch-all site");
    CHECK(classify("fd00::5") == -1, "unknown v6 net");
    struct gs_addr g = ip("10.71.1.254"), h = ip("10.71.2.254");
    CHECK(gs_config_is_own_gateway(&cfg, &g), "own gateway recognised");
    CHECK(!gs_config_is_own_gateway(&cfg, &h), "other gateway is not ours");

    CHECK(gs_config_pick_site(&cfg, "nowhere", err, sizeof err) == -1 &&
              strcmp(err, "GRIDSPLIT_SITE=nowhere names no site of the node file") == 0,
          "%s", err);
}

/* Several lines may share a site name, one per gateway: all are the own site's. */
static void test_site_with_two_gateways(void)
{
    CHECK(parse("gridsplit-nodes 1\nsite a 10.1.0.0/16 10.1.0.254:7100\nsite b 10.2.0.0/16 10.2.0.254:7100\n"
                "site a 10.1.0.0/16 10.1.0.253:7100\n") == 0,
          "%s", err);
    CHECK(gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    struct gs_addr g1 = ip("10.1.0.254"), g2 = ip("10.1.0.253"), g3 = ip("10.2.0.254");
    CHECK(gs_config_is_own_gateway(&cfg, &g1) && gs_config_is_own_gateway(&cfg, &g2), "both gateways of a");
    CHECK(!gs_config_is_own_gateway(&cfg, &g3), "b's gateway is not a's");
}

/* The own site's gateways, as connect() uses them (gateways.c): the distinct
 * gateway_lan of its lines in file order; every line of the own site is own
 * (a second subnet is not redirected), and no own gateway is redirected. */
static void test_own_gateways(void)
{
    CHECK(parse("gridsplit-nodes 1\n"
                "site a 10.1.0.0/16 10.1.0.254:7100\n"
                "site b 10.2.0.0/16 10.2.0.254:7100\n"
                "site a 10.1.0.0/16 10.2.0.253:7100\n" /* in b's subnet: never redirected */
                "site a 10.3.0.0/16 10.1.0.254:7100\n" /* a second subnet behind the first gateway */
                "site a 10.1.0.0/16 10.1.0.254:7101\n") == 0,
          "%s", err);
    CHECK(gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(cfg.ngw == 3 && cfg.gw_line[0] == 0 && cfg.gw_line[1] == 2 && cfg.gw_line[2] == 4,
          "ngw %d, lines %d %d %d", cfg.ngw, cfg.gw_line[0], cfg.gw_line[1], cfg.gw_line[2]);
    CHECK(classify("10.3.0.7") == -1, "a's second subnet is a's: not redirected");
    CHECK(classify("10.2.0.253") == -1, "a's second gateway is not redirected");
    CHECK(classify("10.2.0.7") == 1, "b is redirected: %d", classify("10.2.0.7"));
    /* Where the LAN timers apply to a connection that is not relayed: the own site's
     * subnets (both of a's); not b's, not loopback. */
    struct gs_addr a1 = ip("10.1.0.7"), a2 = ip("10.3.0.7"), b1 = ip("10.2.0.7"), lo = ip("127.0.0.1");
    CHECK(gs_config_in_own_site(&cfg, &a1) && gs_config_in_own_site(&cfg, &a2), "a's hosts are a's LAN");
    CHECK(!gs_config_in_own_site(&cfg, &b1) && !gs_config_in_own_site(&cfg, &lo), "b's host, loopback: not a's LAN");
    CHECK(parse("gridsplit-nodes 1\nsite b 10.2.0.0/16 10.2.0.254:7100\n"
                "site a 10.1.0.0/16 10.1.0.254:7100\n") == 0, "%s", err);
    CHECK(gs_config_pick_site(&cfg, "b", err, sizeof err) == 0, "%s", err);
    CHECK(cfg.ngw == 1 && cfg.gw_line[0] == 0, "one gateway: ngw %d", cfg.ngw);
}

/* "routed no": the sites reach each other only through the gateways; a destination
 * in no site (and not loopback) is then named by connect(). */
static void test_routed(void)
{
    CHECK(parse("gridsplit-nodes 1\nsite a 10.1.0.0/16 10.1.0.254:7100\n") == 0 && cfg.routed == 1, "routed by default");
    CHECK(parse("gridsplit-nodes 1\nrouted no\nsite a 10.1.0.0/16 10.1.0.254:7100\nsite b 10.2.0.0/16 10.2.0.254:7100\n") == 0,
          "%s", err);
    CHECK(cfg.routed == 0, "routed no");
    struct gs_addr out = ip("10.9.0.1"), in = ip("10.2.0.7"), lo = ip("127.0.0.1");
    CHECK(gs_config_in_no_site(&cfg, &out) && !gs_config_in_no_site(&cfg, &in) && !gs_config_in_no_site(&cfg, &lo),
          "in no site: only addresses outside every subnet and loopback");
    expect_error("gridsplit-nodes 1\nrouted maybe\nsite a 10.1.0.0/16 10.1.0.254:7100\n",
                 "line 2: expected \"routed yes\" or \"routed no\"");
    expect_error("gridsplit-nodes 1\nsite a 10.1.0.0/16 10.1.0.254:7100\nrouted no\n",
                 "line 3: \"routed\" comes before the site lines");
}

/* "lan_timers RTO DELACK": the LAN timers, in µs, 0 or 2000-200000, before the sites. */
static void test_lan_timers(void)
{
    CHECK(parse("gridsplit-nodes 1\nsite a 10.1.0.0/16 10.1.0.254:7100\n") == 0 &&
              cfg.lan_rto_min_us == 0 && cfg.lan_delack_max_us == 0, "no timers by default");
    CHECK(parse("gridsplit-nodes 1\nlan_timers 5000 8000\nsite a 10.1.0.0/16 10.1.0.254:7100\n") == 0, "%s", err);
    CHECK(cfg.lan_rto_min_us == 5000 && cfg.lan_delack_max_us == 8000, "timers %d %d", cfg.lan_rto_min_us,
          cfg.lan_delack_max_us);
    const char *bad[] = {"lan_timers 5000", "lan_timers 1000 5000", "lan_timers 5000 300000", "lan_timers x 5000",
                         "lan_timers 5000 5000 5000", "lan_timers -5000 5000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[160];
        snprintf(text, sizeof text, "gridsplit-nodes 1\n%s\nsite a 10.1.0.0/16 10.1.0.254:7100\n", bad[i]);
        expect_error(text, "line 2: expected \"lan_timers RTO_MIN_US DELACK_MAX_US\", each 0 or 2000-200000");
    }
    expect_error("gridsplit-nodes 1\nsite a 10.1.0.0/16 10.1.0.254:7100\nlan_timers 5000 5000\n",
                 "line 3: \"lan_timers\" comes before the site lines");
}

static void test_loopback_sites(void)
{
    CHECK(parse("gridsplit-nodes 1\nsite a 127.0.1.0/24 127.0.1.254:1\nsite b 127.0.2.0/24 127.0.2.254:1\n") == 0,
          "%s", err);
    CHECK(gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(classify("127.0.2.5") == 1, "a loopback site is redirected");
    CHECK(classify("127.0.0.1") == -1, "127.0.0.1 is in no site");
    CHECK(classify("127.0.1.9") == -1, "own loopback site");
}

#define FIX "give GRIDSPLIT_CONFIG the node file written by `gridsplit gateway nodes-config`"
#define USAGE "site NAME SUBNET GATEWAY_LAN [direct_to=SITE,...]"
#define H "gridsplit-nodes 1\n"

static void test_errors(void)
{
    /* The file gridsplitd reads: refused with the fix, whatever comes first. */
    expect_error("# gridsplitd config for site a\n[gateway]\nsite = \"a\"\n",
                 "line 2: this is a TOML file (a gateway's config?), not a node file; " FIX);
    expect_error("[[site]]\nname = \"a\"\nsubnet = \"10.1.0.0/24\"\n",
                 "line 1: this is a TOML file (a gateway's config?), not a node file; " FIX);
    expect_error("title = \"x\"\n", "line 1: this is a TOML file (a gateway's config?), not a node file; " FIX);
    expect_error("gridsplit-nodes 2\nsite a 10.1.0.0/24 10.1.0.254:7100\n",
                 "line 1: node file version 2; this libgridsplit.so reads version 1: rebuild the library, or "
                 "regenerate the file with the gridsplit it comes with");
    expect_error("site a 10.1.0.0/24 10.1.0.254:7100\n",
                 "line 1: expected the header \"gridsplit-nodes 1\"; " FIX);
    expect_error("", "no \"gridsplit-nodes 1\" header (empty file?); " FIX);
    expect_error("# only a comment\n\n", "no \"gridsplit-nodes 1\" header (empty file?); " FIX);
    expect_error(H, "no site line; " FIX);
    expect_error(H "[[site]]\n", "line 2: unknown entry \"[[site]]\"; expected: " USAGE);
    expect_error(H "gridsplit-nodes 1\n", "line 2: unknown entry \"gridsplit-nodes\"; expected: " USAGE);

    /* Site lines. */
    expect_error(H "site a 10.1.0/24 10.1.0.254:7100\n", "line 2: subnet \"10.1.0/24\" is not a CIDR prefix");
    expect_error(H "site a 10.1.0.0/33 10.1.0.254:7100\n", "line 2: subnet \"10.1.0.0/33\" is not a CIDR prefix");
    expect_error(H "site a 10.1.0.0 10.1.0.254:7100\n", "line 2: subnet \"10.1.0.0\" is not a CIDR prefix");
    expect_error(H "site a 10.1.0.0/24 10.1.0.254\n", "line 2: gateway_lan \"10.1.0.254\" is not ADDRESS:PORT");
    expect_error(H "site a 10.1.0.0/24 fd00::1:7100\n", "line 2: gateway_lan \"fd00::1:7100\" is not ADDRESS:PORT");
    expect_error(H "site a 10.1.0.0/24 10.1.0.1:0\n", "line 2: gateway_lan \"10.1.0.1:0\" is not ADDRESS:PORT");
    expect_error(H "site a 10.1.0.0/24 gw.example:7100\n",
                 "line 2: gateway_lan \"gw.example:7100\" is not ADDRESS:PORT");
    expect_error(H "site a 10.1.0.0/24\n", "line 2: a site line needs a name, a subnet and a gateway: " USAGE);
    expect_error(H "site\n", "line 2: a site line needs a name, a subnet and a gateway: " USAGE);
    expect_error(H "site \"a\" 10.1.0.0/24 10.1.0.254:7100\n",
                 "line 2: site name \"\"a\"\" is not 1-64 characters of [A-Za-z0-9_-]");
    expect_error(H "site a,b 10.1.0.0/24 10.1.0.254:7100\n",
                 "line 2: site name \"a,b\" is not 1-64 characters of [A-Za-z0-9_-]");
    expect_error(H "site a 10.1.0.0/24 10.1.0.254:7100 extra\n",
                 "line 2: unexpected \"extra\" after the gateway: " USAGE);
    expect_error(H "site a 10.1.0.0/24 10.1.0.254:7100 direct_to=a more\n",
                 "line 2: unexpected \"more\" after direct_to: " USAGE);
    expect_error(H "site a 10.1.0.0/24 10.1.0.254:7100 # trailing comment\n",
                 "line 2: unexpected \"#\" after the gateway: " USAGE);
    expect_error(H "site a 10.1.0.0/24 10.1.0.254:7100 direct_to=\n",
                 "line 2: direct_to= names no site (leave it out instead)");
    expect_error(H "name = \"a\"\n", "line 2: unknown entry \"name\"; expected: " USAGE);

    /* Bounds: a 64-character name is fine, 65 is not; a line of 512 bytes is too long, a comment is not. */
    char text[2048];
    snprintf(text, sizeof text, H "site %s 10.1.0.0/24 10.1.0.254:7100\n", "a123456789b123456789c123456789d123456789e123456789f123456789wxyz");
    CHECK(parse(text) == 0, "64-character name: %s", err);
    snprintf(text, sizeof text, H "site %s 10.1.0.0/24 10.1.0.254:7100\n", "a123456789b123456789c123456789d123456789e123456789f123456789vwxyz");
    CHECK(parse(text) == -1 && strstr(err, "line 2: site name \"a123") && strstr(err, "is not 1-64 characters"),
          "65-character name: %s", err);
    memset(text, 0, sizeof text);
    strcpy(text, H "#");
    memset(text + strlen(text), 'x', 1000);
    strcat(text, "\nsite a 10.1.0.0/24 10.1.0.254:7100\n");
    CHECK(parse(text) == 0, "long comment: %s", err);
    memset(text, 0, sizeof text);
    strcpy(text, H "site a 10.1.0.0/24 10.1.0.254:7100 direct_to=a");
    memset(text + strlen(text), ',', 512 - strlen(text) + strlen(H));
    strcat(text, "\n");
    expect_error(text, "line 2: longer than 511 bytes");
    char *many = malloc((GS_MAX_SITES + 2) * 48);
    strcpy(many, H);
    for (int i = 0; i <= GS_MAX_SITES; i++)
        sprintf(many + strlen(many), "site s%d 10.%d.%d.0/24 10.%d.%d.254:7100\n", i, i / 200, i % 200, i / 200, i % 200);
    expect_error(many, "line 258: more than 256 site lines");
    free(many);
}

static void test_load(void)
{
    char path[] = "/tmp/gridsplit-config-test.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0)
        return;
    static const char text[] = "gridsplit-nodes 1\nsite a 10.1.0.0/24 10.1.0.254:7100\0site b\n";
    CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1), "write");
    close(fd);
    CHECK(gs_config_load(path, "a", &cfg, err, sizeof err) == -1 && strcmp(err, "file contains a NUL byte") == 0,
          "%s", err);
    FILE *f = fopen(path, "w");
    fputs("gridsplit-nodes 1\nsite a 10.1.0.0/24 10.1.0.254:7100\n", f);
    fclose(f);
    CHECK(gs_config_load(path, "a", &cfg, err, sizeof err) == 0 && cfg.own == 0, "%s", err);
    CHECK(gs_config_load(path, "b", &cfg, err, sizeof err) == -1 &&
              strcmp(err, "GRIDSPLIT_SITE=b names no site of the node file") == 0,
          "%s", err);
    unlink(path);
    CHECK(gs_config_load(path, "a", &cfg, err, sizeof err) == -1 && strcmp(err, "No such file or directory") == 0,
          "%s", err);
}

/* The split policy: a pair listed in either site's direct_to stays direct, from
 * both ends; other pairs are still split; an unknown name is an error. */
static void test_direct_to(void)
{
    const char *three = H "site a 10.1.0.0/16 10.1.0.254:1 direct_to=b\n"
                          "site b 10.2.0.0/16 10.2.0.254:1\n"
                          "site c 10.3.0.0/16 10.3.0.254:1\n";
    CHECK(parse(three) == 0, "%s", err);
    CHECK(gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(classify("10.2.0.5") == -1, "a -> b is direct");
    CHECK(classify("10.3.0.5") == 2, "a -> c is split");
    CHECK(parse(three) == 0, "%s", err);
    CHECK(gs_config_pick_site(&cfg, "b", err, sizeof err) == 0, "%s", err);
    CHECK(classify("10.1.0.5") == -1, "b -> a is direct too (listed on a's side)");
    CHECK(classify("10.3.0.5") == 2, "b -> c is split");
    CHECK(parse(H "site a 10.1.0.0/16 10.1.0.254:1 direct_to=c,b\n"
                  "site b 10.2.0.0/16 10.2.0.254:1\n"
                  "site c 10.3.0.0/16 10.3.0.254:1\n") == 0, "%s", err);
    CHECK(gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(classify("10.2.0.5") == -1 && classify("10.3.0.5") == -1, "a list of two");
    CHECK(parse(H "site a 10.1.0.0/16 10.1.0.254:1 direct_to=bb\nsite bb 10.2.0.0/16 10.2.0.254:1\n"
                  "site b 10.3.0.0/16 10.3.0.254:1\n") == 0, "%s", err);
    CHECK(gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(classify("10.2.0.5") == -1 && classify("10.3.0.5") == 2, "bb is not b");
    expect_error(H "site a 10.1.0.0/16 10.1.0.254:1 direct_to=bb\nsite b 10.2.0.0/16 10.2.0.254:1\n",
                 "line 2: direct_to names \"bb\", which is no site of this file");
    expect_error(H "site a 10.1.0.0/16 10.1.0.254:1 direct_to=b,,x\nsite b 10.2.0.0/16 10.2.0.254:1\n",
                 "line 2: direct_to names \"x\", which is no site of this file");
}

/* GRIDSPLIT_SPLIT over the node file: all clears direct_to; the host rule splits a
 * connection only when one of its ends is listed; bad values leave the config alone. */
static void test_split_mode(void)
{
    const char *three = H "site a 10.1.0.0/16 10.1.0.254:1 direct_to=b\n"
                          "site b 10.2.0.0/16 10.2.0.254:1\n"
                          "site c 10.3.0.0/16 10.3.0.254:1\n";
    CHECK(parse(three) == 0 && gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(gs_config_split_mode(&cfg, "policy", err, sizeof err) == 0 && classify("10.2.0.5") == -1, "policy keeps a-b direct");
    CHECK(gs_config_split_mode(&cfg, "all", err, sizeof err) == 0 && classify("10.2.0.5") == 1, "all splits a-b");

    /* A host that is not listed: only its connections to listed hosts are split. */
    CHECK(parse(three) == 0 && gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    cfg.own_addr = ip("10.1.0.7");
    CHECK(gs_config_split_mode(&cfg, "hosts:10.2.0.1+10.3.0.9", err, sizeof err) == 0, "%s", err);
    CHECK(cfg.nhosts == 2 && !cfg.own_is_host, "two hosts, not this one");
    CHECK(classify("10.2.0.1") == 1, "to a listed host of b: split (direct_to=b no longer applies)");
    CHECK(classify("10.2.0.5") == -1, "to another host of b: direct");
    CHECK(classify("10.3.0.9") == 2 && classify("10.3.0.8") == -1, "c: only the listed host");
    CHECK(classify("10.1.0.9") == -1, "own site: never");

    /* The listed host itself: every cross-site connection is split. */
    CHECK(parse(three) == 0 && gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    cfg.own_addr = ip("10.1.0.7");
    CHECK(gs_config_split_mode(&cfg, "hosts:10.1.0.7", err, sizeof err) == 0 && cfg.own_is_host, "%s", err);
    CHECK(classify("10.2.0.5") == 1 && classify("10.3.0.8") == 2, "the root splits to every site");
    CHECK(classify("10.1.0.9") == -1, "not within its own site");

    /* Bad values: one line each, and the node file's policy stays. */
    CHECK(parse(three) == 0 && gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(gs_config_split_mode(&cfg, "hosts:10.2.0.1+east-1", err, sizeof err) == -1 &&
              strcmp(err, "GRIDSPLIT_SPLIT: \"east-1\" is not an IP address; give hosts:ADDR[+ADDR...]") == 0,
          "%s", err);
    CHECK(gs_config_split_mode(&cfg, "hosts:", err, sizeof err) == -1 && strstr(err, "an empty or overlong address"),
          "%s", err);
    CHECK(gs_config_split_mode(&cfg, "hosts:10.2.0.1+", err, sizeof err) == -1, "trailing comma");
    CHECK(gs_config_split_mode(&cfg, "some", err, sizeof err) == -1 &&
              strcmp(err, "GRIDSPLIT_SPLIT=some is none of policy, all, hosts:ADDR[+ADDR...]") == 0, "%s", err);
    CHECK(cfg.nhosts == 0 && classify("10.2.0.5") == -1 && classify("10.3.0.5") == 2, "policy unchanged");
    char many[400] = "hosts:";
    for (int i = 0; i <= GS_MAX_SPLIT_HOSTS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s10.2.0.%d", i ? "+" : "", i + 1);
    CHECK(gs_config_split_mode(&cfg, many, err, sizeof err) == -1 && strstr(err, "more than 16 hosts"), "%s", err);
    CHECK(gs_config_split_mode(&cfg, "hosts:fd00::1+10.2.0.3", err, sizeof err) == 0 && cfg.nhosts == 2, "%s", err);
    CHECK(classify("10.2.0.3") == 1, "v6 and v4 in one list");
}

int main(void)
{
    test_full();
    test_site_with_two_gateways();
    test_own_gateways();
    test_direct_to();
    test_split_mode();
    test_loopback_sites();
    test_routed();
    test_lan_timers();
    test_errors();
    test_load();
    printf("config_test: %d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
