/*
 * gs_socket_test.c - gs_test's tests of the sockets the library must leave alone
 * or keep straight (see gs_test.c): same-site, loopback, UDP and Unix sockets
 * never touch the gateway; dup/dup2/F_DUPFD keep the original peer; an fd closed
 * behind the library's back and reused starts clean; connections with a bad
 * origin header are dropped by accept(), which keeps serving good ones.
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
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "gs_test.h"

/* Connections that must not touch the gateway. The closing barrier (a redirected
 * connect, accepted by the gateway after any earlier connection in its queue)
 * makes "the gateway saw exactly one more connection" a complete proof. */
/* The LAN minimum RTO the kernel holds for a socket, in µs (-1: this kernel has no
 * TCP_RTO_MIN_US, Linux < 6.15). */
static int rto_min_us(int fd)
{
    int v = 0;
    socklen_t l = sizeof v;
    return getsockopt(fd, IPPROTO_TCP, 45 /* TCP_RTO_MIN_US */, &v, &l) == 0 ? v : -1;
}

void test_untouched(void)
{
    int conns = gw_count("CONN ");
    char buf[16];

    /* same site (127.0.1.0/24) and loopback 127.0.0.1 */
    const char *ips[] = {"127.0.1.7", "127.0.0.1"};
    for (int i = 0; i < 2; i++) {
        unsigned short p;
        int l = listen_on(ips[i], &p);
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (i == 0) { /* from this node's own address, as a node of a real site connects */
            struct sockaddr_in me4 = sin4(NODE_IP, 0);
            CHECK(bind(c, (struct sockaddr *)&me4, sizeof me4) == 0, "bind %s: %s", NODE_IP, strerror(errno));
        }
        struct sockaddr_in to = sin4(ips[i], p);
        CHECK(connect(c, (struct sockaddr *)&to, sizeof to) == 0, "%s: %s", ips[i], strerror(errno));
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int a = accept(l, (struct sockaddr *)&ss, &sl);
        char seen[64], me[64];
        fmt_sa((struct sockaddr *)&ss, seen, sizeof seen);
        local_name(c, me, sizeof me);
        CHECK(a >= 0 && strcmp(seen, me) == 0, "%s: server saw %s, client is %s", ips[i], seen, me);
        CHECK(write(c, "hi", 2) == 2 && read_full(a, buf, 2) == 0 && memcmp(buf, "hi", 2) == 0,
              "%s: data", ips[i]);
        /* The node file's lan_timers (5000 µs, run_tests.sh) on both ends of the same-site
         * connection, rounded up to whole jiffies by the kernel; Linux's 200 ms elsewhere. */
        int rc = rto_min_us(c), ra = rto_min_us(a);
        if (rc >= 0) {
            int same = i == 0;
            CHECK(same ? (rc >= 5000 && rc < 200000 && ra == rc) : (rc == 200000 && ra == 200000),
                  "%s: minimum RTO %d us (client), %d us (server), want %s", ips[i], rc, ra,
                  same ? "the node file's 5000, rounded up" : "Linux's 200000");
        }
        close(a);
        close(c);
        close(l);
    }

    /* UDP to the other site */
    int us = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in ua = sin4("127.0.2.5", 0);
    socklen_t ul = sizeof ua;
    bind(us, (struct sockaddr *)&ua, sizeof ua);
    getsockname(us, (struct sockaddr *)&ua, &ul);
    int uc = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(connect(uc, (struct sockaddr *)&ua, sizeof ua) == 0, "udp connect: %s", strerror(errno));
    CHECK(send(uc, "dgram", 5, 0) == 5, "udp send: %s", strerror(errno));
    struct sockaddr_storage from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(us, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
    char seen[64], me[64];
    fmt_sa((struct sockaddr *)&from, seen, sizeof seen);
    local_name(uc, me, sizeof me);
    CHECK(n == 5 && memcmp(buf, "dgram", 5) == 0 && strcmp(seen, me) == 0,
          "udp: got %zd bytes from %s (client %s)", n, seen, me);
    close(uc);
    close(us);

    /* Unix sockets: a named one (connect) and a socketpair */
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s/unix.sock", test_dir);
    unlink(sun.sun_path);
    int ul_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(bind(ul_fd, (struct sockaddr *)&sun, sizeof sun) == 0 && listen(ul_fd, 4) == 0,
          "unix listen: %s", strerror(errno));
    int uc_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(connect(uc_fd, (struct sockaddr *)&sun, sizeof sun) == 0, "unix connect: %s",
          strerror(errno));
    int ua_fd = accept(ul_fd, NULL, NULL);
    CHECK(ua_fd >= 0 && write(uc_fd, "unix", 4) == 4 && read_full(ua_fd, buf, 4) == 0 &&
              memcmp(buf, "unix", 4) == 0,
          "unix data");
    close(ua_fd);
    close(uc_fd);
    close(ul_fd);
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0 && send(sp[0], "sp", 2, 0) == 2 &&
              recv(sp[1], buf, 2, 0) == 2 && memcmp(buf, "sp", 2) == 0,
          "socketpair data");
    close(sp[0]);
    close(sp[1]);

    /* barrier */
    int fd = connect_b("127.0.2.5", port_accept);
    CHECK(fd >= 0, "barrier connect: %s", strerror(errno));
    if (fd >= 0) {
        char me2[64];
        local_name(fd, me2, sizeof me2);
        check_hello(fd, me2);
        close(fd);
    }
    CHECK(gw_count("CONN ") == conns + 1, "gateway accepted %d connections, want exactly 1",
          gw_count("CONN ") - conns);
}

void test_dup(void)
{
    int fd = connect_b("127.0.2.5", port_accept);
    CHECK(fd >= 0, "connect: %s", strerror(errno));
    if (fd < 0)
        return;
    char want[64], p[64], me[64];
    snprintf(want, sizeof want, "127.0.2.5:%u", port_accept);
    int d = dup(fd);
    int d2 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    int d3 = 200;
    CHECK(dup2(fd, d3) == d3, "dup2: %s", strerror(errno));
    close(fd);
    int fds[] = {d, d2, d3};
    for (int i = 0; i < 3; i++) {
        peer_name(fds[i], p, sizeof p);
        CHECK(strcmp(p, want) == 0, "getpeername of duplicate %d: %s", fds[i], p);
    }
    local_name(d, me, sizeof me);
    check_hello(d, me);
    check_echo(d3, 1000, 6);
    close(d);
    close(d2);
    close(d3);

    /* dup2 over a tracked fd forgets the old state */
    int a = connect_b("127.0.2.5", port_accept);
    int sp[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
    dup2(sp[0], a);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int r = getpeername(a, (struct sockaddr *)&ss, &sl);
    CHECK(r == 0 && ss.ss_family == AF_UNIX, "getpeername after dup2 over: %d family %d", r,
          ss.ss_family);
    close(a);
    close(sp[0]);
    close(sp[1]);
}

/* A tracked fd closed behind the library's back (raw syscall, as fclose or
 * close_range would) and reused: the new socket must not inherit the old state. */
void test_stale_fd(void)
{
    int fd = node_socket(NODE_IP, 1);
    struct sockaddr_in to = sin4("127.0.2.211", port_accept);
    int r = connect(fd, (struct sockaddr *)&to, sizeof to);
    CHECK(r == -1 && errno == EINPROGRESS, "connect %d %s", r, strerror(errno));
    syscall(SYS_close, fd);
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
    int target = sp[0] == fd ? sp[0] : sp[1] == fd ? sp[1] : -1;
    CHECK(target == fd, "fd %d not reused (%d %d)", fd, sp[0], sp[1]);
    char buf[4];
    int other = target == sp[0] ? sp[1] : sp[0];
    CHECK(send(other, "abc", 3, 0) == 3, "send");
    ssize_t n = recv(target, buf, 3, MSG_DONTWAIT);
    CHECK(n == 3 && memcmp(buf, "abc", 3) == 0, "recv on reused fd: %zd %s", n, strerror(errno));
    close(sp[0]);
    close(sp[1]);
}

/* Connections from the gateway address that do not carry a valid GSo1 header are
 * dropped by the destination's accept(), which then keeps serving good ones. */
void test_accept_bad_header(void)
{
    for (int i = 0; i < 2; i++) {
        /* raw syscalls: this socket plays a broken gateway, not an application */
        int fd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in from = sin4("127.0.2.254", 0);
        struct sockaddr_in to = sin4("127.0.2.5", i == 0 ? port_accept : port_accept4);
        CHECK(syscall(SYS_bind, fd, &from, sizeof from) == 0, "bind 127.0.2.254");
        CHECK(syscall(SYS_connect, fd, &to, sizeof to) == 0, "raw connect: %s", strerror(errno));
        if (i == 0)
            CHECK(write(fd, "NOT-A-GSo1-HEADER-AT-ALL", 24) == 24, "write junk");
        /* i == 1 sends nothing: the server drops it after its header timeout */
        char buf[HELLO_LEN];
        struct pollfd p = {.fd = fd, .events = POLLIN};
        CHECK(poll(&p, 1, 5000) == 1, "server did not drop the connection");
        ssize_t n = read(fd, buf, sizeof buf);
        CHECK(n == 0 || (n < 0 && errno == ECONNRESET), "read after drop: %zd %s", n,
              strerror(errno));
        close(fd);
    }
    int fd = connect_b("127.0.2.5", port_accept4);
    CHECK(fd >= 0, "good connect after bad ones: %s", strerror(errno));
    if (fd >= 0) {
        char me[64];
        local_name(fd, me, sizeof me);
        check_hello(fd, me);
        close(fd);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/server.err", test_dir);
    char *err = slurp(path);
    int drops = 0;
    for (char *p = err; (p = strstr(p, "dropped a connection")); p++)
        drops++;
    CHECK(drops == 1, "server logged %d drop lines, want exactly 1:\n%s", drops, err);
    free(err);
}
