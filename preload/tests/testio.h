/* testio.h - small helpers shared by the preload test programs (gs_test and
 * multigw_test): the CHECK macro, sockets, reads and writes, clocks and files. */
#ifndef GS_TESTIO_H
#define GS_TESTIO_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* CHECK(cond, fmt, ...): when cond is false, count a failure in the program's
 * int `failures` (atomically: threads check too) and print where and why. */
#define CHECK(cond, ...)                                                               \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);                       \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, "\n");                                                     \
        }                                                                              \
    } while (0)

static inline struct sockaddr_in sin4(const char *ip, unsigned short port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

/* Wait up to 5 s for `events` on fd; 0 when ready, else -1 with ETIMEDOUT. */
static inline int wait_fd(int fd, short events)
{
    struct pollfd p = {.fd = fd, .events = events};
    if (poll(&p, 1, 5000) == 0) {
        errno = ETIMEDOUT;
        return -1;
    }
    return 0;
}

/* Read exactly n bytes, polling (5 s per wait) if the fd is non-blocking. */
static inline int read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r > 0) {
            got += (size_t)r;
        } else if (r == 0) {
            errno = ECONNRESET;
            return -1;
        } else if (errno == EAGAIN || errno == EINTR) {
            if (wait_fd(fd, POLLIN) < 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Write all n bytes, polling (5 s per wait) if the fd is non-blocking. */
static inline int write_full(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, (const char *)buf + done, n - done);
        if (r > 0) {
            done += (size_t)r;
        } else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(fd, POLLOUT) < 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* A TCP socket, bound to bind_ip (port 0) unless it is NULL, optionally
 * non-blocking; -1 if the bind fails. */
static inline int node_socket(const char *bind_ip, int nonblock)
{
    int fd = socket(AF_INET, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd >= 0 && bind_ip) {
        struct sockaddr_in a = sin4(bind_ip, 0);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* A port on ip with nobody listening (bound then released). */
static inline unsigned short free_port(const char *ip)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = sin4(ip, 0);
    socklen_t l = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static inline double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The first 64 KiB of a file as a string to free ("" if it cannot be read). */
static inline char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, 1 << 16);
    if (f) {
        size_t n = fread(buf, 1, (1 << 16) - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

/* How many lines of a (gateway) log start with prefix; -1 if it cannot be read. */
static inline int log_count(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    fclose(f);
    return n;
}

#endif
