/* testio.h - small socket helpers shared by the preload test programs. */
#ifndef GS_TESTIO_H
#define GS_TESTIO_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>

static inline struct sockaddr_in sin4(const char *ip, unsigned short port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
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
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 5000) == 0) {
                errno = ETIMEDOUT;
                return -1;
            }
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
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 5000) == 0) {
                errno = ETIMEDOUT;
                return -1;
            }
        } else {
            return -1;
        }
    }
    return 0;
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

#endif
