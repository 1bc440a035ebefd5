/*
 * real.c - the handles on the real libc functions that libgridsplit.so interposes
 * (struct gs_real, the REAL() macro of gs_internal.h). Each is resolved once with
 * dlsym(RTLD_NEXT), so the library's own wrappers always reach the next definition
 * (normally glibc's) and never themselves.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gs_internal.h"

struct gs_real gs_real;

static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void *sym(const char *name, int required)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p && required) {
        /* Nothing sensible can be done without libc's own function. Raw syscall:
         * write() here would be our own wrapper. */
        static const char msg[] = "libgridsplit: dlsym(RTLD_NEXT) failed for a libc "
                                  "function; aborting\n";
        (void)!syscall(SYS_write, 2, msg, sizeof msg - 1);
        abort();
    }
    return p;
}

static void resolve_real_once(void)
{
    struct gs_real r;
    r.connect = sym("connect", 1);
    r.accept = sym("accept", 1);
    r.accept4 = sym("accept4", 1);
    r.getpeername = sym("getpeername", 1);
    r.getsockopt = sym("getsockopt", 1);
    r.close = sym("close", 1);
    r.dup = sym("dup", 1);
    r.dup2 = sym("dup2", 1);
    r.dup3 = sym("dup3", 1);
    r.fcntl = sym("fcntl", 1);
    r.fcntl64 = sym("fcntl64", 0); /* glibc >= 2.28 */
    if (!r.fcntl64)
        r.fcntl64 = r.fcntl;
    r.read = sym("read", 1);
    r.write = sym("write", 1);
    r.readv = sym("readv", 1);
    r.writev = sym("writev", 1);
    r.send = sym("send", 1);
    r.sendto = sym("sendto", 1);
    r.sendmsg = sym("sendmsg", 1);
    r.recv = sym("recv", 1);
    r.recvfrom = sym("recvfrom", 1);
    r.recvmsg = sym("recvmsg", 1);
    r.read_chk = sym("__read_chk", 0);
    r.recv_chk = sym("__recv_chk", 0);
    r.recvfrom_chk = sym("__recvfrom_chk", 0);
    /* Publish field by field; a racing reader that sees a non-NULL pointer sees a
     * complete one (aligned pointer stores are atomic on the supported targets). */
    gs_real = r;
}

void gs_resolve_real(void)
{
    pthread_once(&real_once, resolve_real_once);
}
