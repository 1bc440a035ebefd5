/*
 * config_test.c - unit tests of config.c (the TOML-subset parser, own-site choice
 * and destination classification), linked directly against config.c so no
 * LD_PRELOAD is involved. Error messages are checked verbatim where users will
 * read them, line numbers included.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

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
    "# header comment\n"
    "[gateway]\n"
    "site = \"a\"\n"
    "note = \"not a [[site]] header # nor a comment\"\n"
    "peers = [\n"
    "  [\"b\", \"10.71.2.254:7200\"],  # nested\n"
    "  [ \"c\", 'x]' ],\n"
    "]\n"
    "motd = \"\"\"\n"
    "[[site]]\n"
    "name = \"evil\" \\\"\"\"\n"
    "\"\"\"\n"
    "raw = '''\n"
    "[[site]]'''\n"
    "[limits]\n"
    "buffers = { lan = 262144, wan = 4194304 }\n"
    "[[site]]\n"
    "name = \"bordeaux\"\n"
    "subnet = \"10.71.1.0/24\"\n"
    "gateway_lan = \"10.71.1.254:7100\"   # where nodes send connect requests\n"
    "gateway_wan = \"10.71.1.254:7200\"\n"
    "nodes = [1, 2,\n"
    "   3]\n"
    "\n"
    "[[site]]\n"
    "  name = 'lyon'\n"
    "  subnet = \"10.71.2.7/24\"\n" /* host bits: cleared */
    "  gateway_lan = \"[fd00::2]:7100\"\n"
    "[[site.extra]]\n"
    "name = \"not a site\"\n"
    "[site]\n"
    "name = \"not a site either\"\n"
    "[[site]]\n"
    "name = \"w\\u0069de\"\n"
    "subnet = \"0.0.0.0/0\"\n"
    "[[link]]\n"
    "sites = [\"bordeaux\", \"lyon\"]\n";

static void test_full(void)
{
    CHECK(parse(full) == 0, "parse: %s", err);
    CHECK(cfg.nsites == 3, "nsites %d", cfg.nsites);
    if (cfg.nsites != 3)
        return;
    CHECK(strcmp(cfg.site[0].name, "bordeaux") == 0, "%s", cfg.site[0].name);
    CHECK(strcmp(cfg.site[1].name, "lyon") == 0, "%s", cfg.site[1].name);
    CHECK(strcmp(cfg.site[2].name, "wide") == 0, "%s", cfg.site[2].name);
    CHECK(cfg.site[0].has_gw && cfg.site[0].gw_port == 7100, "gw port %u", cfg.site[0].gw_port);
    CHECK(cfg.site[1].subnet.len == 24 && cfg.site[1].subnet.net.a[3] == 0, "lyon subnet");
    CHECK(cfg.site[1].gw.family == GS_FAMILY_V6 && cfg.site[1].gw.a[15] == 2, "v6 gateway");
    CHECK(!cfg.site[2].has_gw, "wide has no gateway");
    CHECK(cfg.site[0].line == 17, "bordeaux header line %d", cfg.site[0].line);

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
              strcmp(err, "GRIDSPLIT_SITE=nowhere names no [[site]]") == 0,
          "%s", err);
    CHECK(gs_config_pick_site(&cfg, "wide", err, sizeof err) == -1 &&
              strcmp(err, "line 33: own site \"wide\" has no gateway_lan") == 0,
          "%s", err);
}

static void test_loopback_sites(void)
{
    CHECK(parse("[[site]]\nname=\"a\"\nsubnet=\"127.0.1.0/24\"\ngateway_lan=\"127.0.1.254:1\"\n"
                "[[site]]\nname=\"b\"\nsubnet=\"127.0.2.0/24\"\n") == 0,
          "%s", err);
    CHECK(gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(classify("127.0.2.5") == 1, "a loopback site is redirected");
    CHECK(classify("127.0.0.1") == -1, "127.0.0.1 is in no site");
    CHECK(classify("127.0.1.9") == -1, "own loopback site");
}

static void test_errors(void)
{
    expect_error("[[site]]\nname = \"a\"\nsubnet = \"10.1.0/24\"\n",
                 "line 3: subnet \"10.1.0/24\" is not a CIDR prefix");
    expect_error("[[site]]\nname = \"a\"\nsubnet = \"10.1.0.0/33\"\n",
                 "line 3: subnet \"10.1.0.0/33\" is not a CIDR prefix");
    expect_error("[[site]]\nname = \"a\"\nsubnet = \"10.1.0.0\"\n",
                 "line 3: subnet \"10.1.0.0\" is not a CIDR prefix");
    expect_error("[[site]]\nname = \"a\"\nsubnet = \"10.1.0.0/24\"\ngateway_lan = \"10.1.0.254\"\n",
                 "line 4: gateway_lan \"10.1.0.254\" is not ADDRESS:PORT");
    expect_error("[[site]]\nname = \"a\"\nsubnet = \"10.1.0.0/24\"\ngateway_lan = \"fd00::1:7100\"\n",
                 "line 4: gateway_lan \"fd00::1:7100\" is not ADDRESS:PORT");
    expect_error("[[site]]\nname = \"a\"\nsubnet = \"10.1.0.0/24\"\ngateway_lan = \"10.1.0.1:0\"\n",
                 "line 4: gateway_lan \"10.1.0.1:0\" is not ADDRESS:PORT");
    expect_error("[x]\ny = 1\n\n[[site]]\nsubnet = \"10.1.0.0/24\"\n[[site]]\nname=\"b\"\n",
                 "line 4: [[site]] table has no name");
    expect_error("[[site]]\nname = \"a\"\n", "line 1: [[site]] \"a\" has no subnet");
    expect_error("[[site]]\nname = \"a\"\nname = \"b\"\n",
                 "line 3: duplicate key \"name\" in [[site]] table");
    expect_error("[[site]]\nname = \"a\nsubnet = \"10.1.0.0/24\"\n", "line 2: unterminated string");
    expect_error("[[site]]\nname = \"a\"\nsubnet 10.1.0.0/24\n",
                 "line 3: expected 'key = value' in [[site]] table");
    expect_error("[[site]]\nname = \"a\"\nsubnet = 10.1.0.0/24\n", "line 3: subnet must be a string");
    expect_error("[[site]]\nname = \"a\" extra\n", "line 2: unexpected text after value");
    expect_error("[[site]]\nname =\n", "line 2: missing value for key \"name\"");
    expect_error("[[site]]\nname = \"a\\q\"\n", "line 2: invalid escape \\q in string");
    expect_error("[wan]\npeers = [\n  \"a\",\n", "line 2: unterminated array or inline table");
    expect_error("[wan]\nx = \"\"\"\nabc\n", "line 2: unterminated multi-line string");
    expect_error("[[site]\nname = \"a\"\n", "line 1: malformed table header");
    expect_error("[gateway]\nsite = \"a\"\n", "no [[site]] table");
    expect_error("", "no [[site]] table");
    /* Lines outside [[site]] tables that are not key = value are not ours to judge. */
    CHECK(parse("[gateway]\nthis is not toml\n[[site]]\nname=\"a\"\nsubnet=\"10.0.0.0/8\"\n") == 0,
          "lenient outside [[site]]: %s", err);
}

/* The split policy: a pair listed in either site's direct_to stays direct, from
 * both ends; other pairs are still split; an unknown name is an error. */
static void test_direct_to(void)
{
    const char *three = "[[site]]\nname=\"a\"\nsubnet=\"10.1.0.0/16\"\ngateway_lan=\"10.1.0.254:1\"\n"
                        "direct_to = \"b\"\n"
                        "[[site]]\nname=\"b\"\nsubnet=\"10.2.0.0/16\"\ngateway_lan=\"10.2.0.254:1\"\n"
                        "[[site]]\nname=\"c\"\nsubnet=\"10.3.0.0/16\"\ngateway_lan=\"10.3.0.254:1\"\n";
    CHECK(parse(three) == 0, "%s", err);
    CHECK(gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(classify("10.2.0.5") == -1, "a -> b is direct");
    CHECK(classify("10.3.0.5") == 2, "a -> c is split");
    CHECK(parse(three) == 0, "%s", err);
    CHECK(gs_config_pick_site(&cfg, "b", err, sizeof err) == 0, "%s", err);
    CHECK(classify("10.1.0.5") == -1, "b -> a is direct too (listed on a's side)");
    CHECK(classify("10.3.0.5") == 2, "b -> c is split");
    CHECK(parse("[[site]]\nname=\"a\"\nsubnet=\"10.1.0.0/16\"\ngateway_lan=\"10.1.0.254:1\"\n"
                "direct_to = \"c, b\"\n"
                "[[site]]\nname=\"b\"\nsubnet=\"10.2.0.0/16\"\n"
                "[[site]]\nname=\"c\"\nsubnet=\"10.3.0.0/16\"\n") == 0, "%s", err);
    CHECK(gs_config_pick_site(&cfg, "a", err, sizeof err) == 0, "%s", err);
    CHECK(classify("10.2.0.5") == -1 && classify("10.3.0.5") == -1, "a list of two");
    expect_error("[[site]]\nname=\"a\"\nsubnet=\"10.1.0.0/16\"\ndirect_to = \"bb\"\n"
                 "[[site]]\nname=\"b\"\nsubnet=\"10.2.0.0/16\"\n",
                 "line 4: direct_to names \"bb\", which is no [[site]] of this file");
}

int main(void)
{
    test_full();
    test_direct_to();
    test_loopback_sites();
    test_errors();
    printf("config_test: %d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
