/*
 * gs_connect_test.c - gs_test's tests of the connect paths (see gs_test.c): a
 * blocking connect redirected through the gateway and what the destination's
 * accept()/accept4() see; non-blocking connects (EINPROGRESS, POLLOUT, SO_ERROR,
 * reads and writes before the gateway's reply, connect() again); refusals and
 * every gateway status as an errno; SO_SNDTIMEO; an IPv6 dual-stack socket.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "gs_test.h"

void test_blocking_redirect(void)
{
    int reqs = gw_count("REQ ");
    int fd = connect_b("127.0.2.5", port_accept);
    CHECK(fd >= 0, "connect: %s", strerror(errno));
    if (fd < 0)
        return;
    char me[64], peer[64], want_req[160];
    local_name(fd, me, sizeof me);
    peer_name(fd, peer, sizeof peer);
    char want_peer[64];
    snprintf(want_peer, sizeof want_peer, "127.0.2.5:%u", port_accept);
    CHECK(strcmp(peer, want_peer) == 0, "client getpeername %s, want %s", peer, want_peer);
    CHECK(strncmp(me, "127.0.1.5:", 10) == 0, "local address %s", me);
    check_hello(fd, me);
    check_echo(fd, 200000, 1);
    CHECK(gw_count("REQ ") == reqs + 1, "gateway saw %d requests, want %d", gw_count("REQ "),
          reqs + 1);
    snprintf(want_req, sizeof want_req, "REQ %s 127.0.2.5:%u", me, port_accept);
    CHECK(gw_has(want_req), "gateway log lacks '%s'", want_req);
    close(fd);
}

void test_accept4_side(void)
{
    int fd = connect_b("127.0.2.5", port_accept4);
    CHECK(fd >= 0, "connect: %s", strerror(errno));
    if (fd < 0)
        return;
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    check_echo(fd, 1000, 2);
    close(fd);
}

void test_nonblocking_so_error(void)
{
    int fd = node_socket(NODE_IP, 1);
    struct sockaddr_in to = sin4("127.0.2.5", port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    CHECK(wait_pollout(fd), "no POLLOUT");
    int e = so_error(fd);
    CHECK(e == 0, "SO_ERROR %d (%s)", e, strerror(e > 0 ? e : 0));
    /* connect() again, as Linux answers after a non-blocking connect: 0 once, then
     * EISCONN */
    r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == 0, "second connect returned %d errno %s", r, strerror(errno));
    r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EISCONN, "third connect returned %d errno %s", r, strerror(errno));
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    check_echo(fd, 100000, 3);
    close(fd);
}

/* Reads before the reply arrived (delayed 300 ms by the gateway, or split in two
 * pieces): EAGAIN first, then the application's first byte is the server's, not a
 * byte of GSa1. */
static void nonblocking_read_first(const char *ip)
{
    int fd = node_socket(NODE_IP, 1);
    struct sockaddr_in to = sin4(ip, port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    CHECK(wait_pollout(fd), "no POLLOUT");
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    CHECK(n == -1 && errno == EAGAIN, "early recv returned %zd errno %s", n, strerror(errno));
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me); /* read_full polls for POLLIN and retries */
    check_echo(fd, 5000, 4);
    close(fd);
}

void test_nonblocking_read_delayed(void) { nonblocking_read_first("127.0.2.211"); }
void test_nonblocking_read_split_reply(void) { nonblocking_read_first("127.0.2.210"); }

void test_nonblocking_write_first(void)
{
    int fd = node_socket(NODE_IP, 1);
    struct sockaddr_in to = sin4("127.0.2.211", port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    CHECK(wait_pollout(fd), "no POLLOUT");
    /* No SO_ERROR: the write waits for the reply instead of failing with EAGAIN. */
    ssize_t n = send(fd, "ping", 4, 0);
    CHECK(n == 4, "send returned %zd errno %s", n, strerror(errno));
    char me[64], buf[4];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    CHECK(read_full(fd, buf, 4) == 0 && memcmp(buf, "ping", 4) == 0, "echo of ping");
    close(fd);
}

void test_refused_blocking(void)
{
    unsigned short dead = free_port("127.0.2.5");
    int fd = connect_b("127.0.2.5", dead);
    CHECK(fd == -1 && errno == ECONNREFUSED, "got fd %d errno %s", fd, strerror(errno));
    if (fd >= 0)
        close(fd);
    static const struct {
        const char *ip;
        int err;
    } cases[] = {
        {"127.0.2.201", ECONNREFUSED}, {"127.0.2.202", EHOSTUNREACH}, {"127.0.2.203", EACCES},
        {"127.0.2.204", ETIMEDOUT},    {"127.0.2.205", ENETUNREACH},  {"127.0.2.206", EPROTO},
        {"127.0.2.212", EPROTO}, /* reply with a bad magic */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fd = connect_b(cases[i].ip, 9);
        CHECK(fd == -1 && errno == cases[i].err, "%s: got fd %d errno %s, want %s", cases[i].ip,
              fd, strerror(errno), strerror(cases[i].err));
        if (fd >= 0)
            close(fd);
    }
}

void test_refused_nonblocking(void)
{
    unsigned short dead = free_port("127.0.2.5");
    int fd = node_socket(NODE_IP, 1);
    struct sockaddr_in to = sin4("127.0.2.5", dead);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    CHECK(wait_pollout(fd), "no POLLOUT");
    int e = so_error(fd);
    CHECK(e == ECONNREFUSED, "SO_ERROR %d (%s)", e, strerror(e > 0 ? e : 0));
    e = so_error(fd);
    CHECK(e == 0, "second SO_ERROR %d, want 0 (cleared once read)", e);
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    CHECK(n == -1 && errno == ECONNREFUSED, "recv after refusal: %zd errno %s", n,
          strerror(errno));
    n = send(fd, "x", 1, MSG_NOSIGNAL);
    CHECK(n == -1 && errno == ECONNREFUSED, "send after refusal: %zd errno %s", n,
          strerror(errno));
    char pn[64];
    peer_name(fd, pn, sizeof pn);
    CHECK(strstr(pn, "not connected") != NULL, "getpeername after refusal: %s", pn);
    close(fd);

    /* The connect()-until-EISCONN style: EALREADY/EINPROGRESS..., then the error.
     * The first call may already give the error: on loopback the handshake
     * completes inside connect(), and when the gateway's reply is there by the
     * time the library looks (idle CPUs that poll wake it at once), a
     * non-blocking connect fails at once, as Linux's own may. */
    fd = node_socket(NODE_IP, 1);
    to = sin4("127.0.2.204", 9);
    r = connect(fd, (struct sockaddr *)&to, sizeof to);
    int last = errno;
    CHECK(r == -1 && (last == EINPROGRESS || last == ETIMEDOUT), "connect returned %d errno %s", r,
          strerror(last));
    for (int i = 0; i < 100 && (last == EINPROGRESS || last == EALREADY); i++) {
        r = connect(fd, (struct sockaddr *)&to, sizeof to);
        last = errno;
        if (r == 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 50);
    }
    CHECK(r == -1 && last == ETIMEDOUT, "repeated connect ended with %d errno %s", r,
          strerror(last));
    close(fd);
}

/* A blocking connect with SO_SNDTIMEO shorter than the (300 ms delayed) reply:
 * EINPROGRESS after about the timeout, as Linux does, and the attempt goes on. */
void test_sndtimeo(void)
{
    int fd = node_socket(NODE_IP, 0);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in to = sin4("127.0.2.211", port_accept);
    double t0 = now_ms();
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    int e = errno;
    double ms = now_ms() - t0;
    CHECK(r == -1 && e == EINPROGRESS, "connect returned %d errno %s", r, strerror(e));
    CHECK(ms >= 90 && ms < 280, "connect took %.0f ms, want about 100", ms);
    int so = so_error(fd);
    CHECK(so == 0, "SO_ERROR after the reply: %d", so);
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    close(fd);
}

/* The connect()-until-connected style on a successful (delayed) connection. */
void test_connect_again_success(void)
{
    int fd = node_socket(NODE_IP, 1);
    struct sockaddr_in to = sin4("127.0.2.211", port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect returned %d errno %s", r, strerror(errno));
    int already = 0, last = 0;
    for (int i = 0; i < 100; i++) {
        r = connect(fd, (struct sockaddr *)&to, sizeof to);
        last = errno;
        if (r == 0 || last != EALREADY)
            break;
        already++;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 50);
    }
    CHECK(r == 0, "repeated connect ended with %d errno %s", r, strerror(last));
    CHECK(already >= 1, "no EALREADY while the reply was delayed");
    char me[64];
    local_name(fd, me, sizeof me);
    check_hello(fd, me);
    close(fd);
}

void test_ipv6_dual_stack(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 to;
    memset(&to, 0, sizeof to);
    to.sin6_family = AF_INET6;
    to.sin6_port = htons(port_accept);
    inet_pton(AF_INET6, "::ffff:127.0.2.5", &to.sin6_addr);
    int reqs = gw_count("REQ ");
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == 0, "connect: %s", strerror(errno));
    if (r == 0) {
        char me[64], peer[64], want[64];
        local_name(fd, me, sizeof me);
        peer_name(fd, peer, sizeof peer);
        snprintf(want, sizeof want, "[::ffff:127.0.2.5]:%u", port_accept);
        CHECK(strcmp(peer, want) == 0, "getpeername %s want %s", peer, want);
        /* the server (AF_INET) reports the plain IPv4 form of our address */
        char v4[64];
        snprintf(v4, sizeof v4, "%s", strncmp(me, "[::ffff:", 8) == 0 ? me + 8 : me);
        char *br = strchr(v4, ']');
        if (br)
            memmove(br, br + 1, strlen(br));
        check_hello(fd, v4);
        check_echo(fd, 1000, 5);
        CHECK(gw_count("REQ ") == reqs + 1, "no gateway request for the IPv6 socket");
    }
    close(fd);
}
