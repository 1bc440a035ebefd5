/*
 * fdtable.c - the per-fd state table of libgridsplit.so (struct gs_slot and the
 * two-level gs_table of gs_internal.h): allocation of its chunks, a slot's
 * identity check against fds closed behind the library's back, and the slot
 * mutexes after fork(). The fast-path lookups (gs_slot_peek, gs_slot_peek_io) are
 * inline in gs_internal.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "gs_internal.h"

_Atomic(struct gs_slot *) gs_table[GS_MAX_FD >> GS_CHUNK_BITS];

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;

struct gs_slot *gs_slot_get(int fd)
{
    if ((unsigned)fd >= GS_MAX_FD)
        return NULL;
    unsigned ci = (unsigned)fd >> GS_CHUNK_BITS;
    struct gs_slot *c = atomic_load_explicit(&gs_table[ci], memory_order_acquire);
    if (!c) {
        pthread_mutex_lock(&table_mu);
        c = atomic_load_explicit(&gs_table[ci], memory_order_relaxed);
        if (!c) {
            c = calloc(GS_CHUNK, sizeof *c);
            if (c) {
                for (unsigned i = 0; i < GS_CHUNK; i++)
                    pthread_mutex_init(&c[i].mu, NULL);
                atomic_store_explicit(&gs_table[ci], c, memory_order_release);
            }
        }
        pthread_mutex_unlock(&table_mu);
        if (!c)
            return NULL;
    }
    return &c[(unsigned)fd & (GS_CHUNK - 1)];
}

int gs_slot_bind_identity(int fd, struct gs_slot *s)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -1;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    return 0;
}

void gs_slot_clear(struct gs_slot *s)
{
    pthread_mutex_lock(&s->mu);
    atomic_store_explicit(&s->flags, 0, memory_order_release);
    s->phase = GS_P_NONE;
    pthread_mutex_unlock(&s->mu);
}

int gs_slot_valid(int fd, struct gs_slot *s)
{
    int saved = errno;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino;
    errno = saved;
    if (!ok)
        gs_slot_clear(s);
    return ok;
}

/* After fork() only the calling thread exists in the child; a slot mutex held by
 * another thread of the parent at that instant would stay locked forever. */
void gs_table_atfork_child(void)
{
    pthread_mutex_init(&table_mu, NULL);
    for (unsigned ci = 0; ci < (GS_MAX_FD >> GS_CHUNK_BITS); ci++) {
        struct gs_slot *c = atomic_load_explicit(&gs_table[ci], memory_order_relaxed);
        if (c)
            for (unsigned i = 0; i < GS_CHUNK; i++)
                pthread_mutex_init(&c[i].mu, NULL);
    }
}
