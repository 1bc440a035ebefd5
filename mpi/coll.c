/* The MPI library's own collectives (scatter, bcast, alltoall, and MPI_Gather
 * as gather_mpi), measured the same way as the hand-written gather: they show
 * what the libraries' tuned algorithms do on the same network, the
 * comparison point for gather.c and for the gridsplit gateways. Beside them,
 * halo: the neighbour exchange of a 1-D periodic domain decomposition (each
 * rank swaps SIZE bytes with the ranks on either side, as a stencil code's
 * ghost cells), the pattern of LAMMPS-like applications. */
#include "common.h"

#include <stdlib.h>
#include <string.h>

static const char *const ops[] = {"scatter", "bcast", "alltoall", "gather_mpi", "halo", NULL};

static const bench_prog prog = {
    .name = "coll",
    .summary = "Barrier, then one library collective with root 0 and SIZE bytes per "
               "rank pair\n(bcast: SIZE bytes in all; halo: SIZE bytes to and from each "
               "ring neighbour). A sample is the slowest "
               "rank's time from the end\nof the barrier to the return of the "
               "collective.",
    .ops = ops,
    .min_ranks = 1,
};

typedef enum { OP_SCATTER, OP_BCAST, OP_ALLTOALL, OP_GATHER, OP_HALO } op_kind;

static op_kind kind_of(const char *op)
{
    if (strcmp(op, "scatter") == 0)
        return OP_SCATTER;
    if (strcmp(op, "bcast") == 0)
        return OP_BCAST;
    if (strcmp(op, "alltoall") == 0)
        return OP_ALLTOALL;
    if (strcmp(op, "halo") == 0)
        return OP_HALO;
    return OP_GATHER;
}

/* Stream layout shared by sender and checker (see README.md):
 *  scatter   root's stream, block d (offset d*size) goes to rank d
 *  bcast     root's stream, bytes [0, size)
 *  alltoall  stream of rank s, block d (offset d*size) goes to rank d
 *  gather    stream of rank s, bytes [0, size), lands in root block s
 *  halo      stream of rank s: block 0 goes to its left neighbour (landing in
 *            that rank's block 1), block 1 to its right (landing in block 0) */
static int left_of(int rank, int n) { return (rank + n - 1) % n; }
static int right_of(int rank, int n) { return (rank + 1) % n; }

static void prepare(op_kind kind, unsigned char *sb, unsigned char *rb, size_t size,
                    int rank, int n, long k, int fill_send)
{
    const size_t nsz = (size_t)n * size;
    switch (kind) {
    case OP_SCATTER:
        if (rank == 0 && fill_send)
            bench_fill_send(sb, nsz, 0, k);
        pattern_poison(rb, size, 0, k, (size_t)rank * size);
        break;
    case OP_BCAST:
        if (rank == 0) {
            if (fill_send)
                bench_fill_send(rb, size, 0, k);
        } else {
            pattern_poison(rb, size, 0, k, 0);
        }
        break;
    case OP_ALLTOALL:
        if (fill_send)
            bench_fill_send(sb, nsz, rank, k);
        for (int s = 0; s < n; s++)
            pattern_poison(rb + (size_t)s * size, size, s, k, (size_t)rank * size);
        break;
    case OP_GATHER:
        if (fill_send)
            bench_fill_send(sb, size, rank, k);
        if (rank == 0)
            for (int s = 0; s < n; s++)
                pattern_poison(rb + (size_t)s * size, size, s, k, 0);
        break;
    case OP_HALO:
        if (fill_send)
            bench_fill_send(sb, 2 * size, rank, k);
        pattern_poison(rb, size, left_of(rank, n), k, size);
        pattern_poison(rb + size, size, right_of(rank, n), k, 0);
        break;
    }
}

static int verify(op_kind kind, const unsigned char *rb, size_t size, int rank, int n,
                  long k, const char *op)
{
    int ok = 1;
    switch (kind) {
    case OP_SCATTER:
        ok = pattern_check(rb, size, 0, k, (size_t)rank * size, op);
        break;
    case OP_BCAST:
        ok = pattern_check(rb, size, 0, k, 0, op);
        break;
    case OP_ALLTOALL:
        for (int s = 0; s < n; s++)
            ok &= pattern_check(rb + (size_t)s * size, size, s, k,
                                (size_t)rank * size, op);
        break;
    case OP_GATHER:
        if (rank == 0)
            for (int s = 0; s < n; s++)
                ok &= pattern_check(rb + (size_t)s * size, size, s, k, 0, op);
        break;
    case OP_HALO:
        ok &= pattern_check(rb, size, left_of(rank, n), k, size, op);
        ok &= pattern_check(rb + size, size, right_of(rank, n), k, 0, op);
        break;
    }
    return ok;
}

static int run_size(const bench_opts *o, size_t size)
{
    const int rank = bench_rank(), n = bench_size();
    const int total = o->warmup + o->reps;
    const op_kind kind = kind_of(o->op);
    const int cnt = (int)size;
    int bad = 0;
    double *mine = bench_alloc((size_t)o->reps, sizeof *mine);
    double *slowest = bench_alloc((size_t)o->reps, sizeof *slowest);

    /* Buffers are counted in blocks of SIZE bytes; only those a rank really
     * uses are n blocks long, so that large runs fit in memory. */
    size_t send_blocks = 1, recv_blocks = 1;
    switch (kind) {
    case OP_SCATTER: send_blocks = rank == 0 ? (size_t)n : 0; break;
    case OP_BCAST: send_blocks = 0; break; /* bcast works in place in rb */
    case OP_ALLTOALL: send_blocks = recv_blocks = (size_t)n; break;
    case OP_GATHER: recv_blocks = rank == 0 ? (size_t)n : 0; break;
    case OP_HALO: send_blocks = recv_blocks = 2; break;
    }
    unsigned char *sb = bench_alloc(send_blocks, size);
    unsigned char *rb = bench_alloc(recv_blocks, size);

    prepare(kind, sb, rb, size, rank, n, 0, 1);
    for (int k = 0; k < total; k++) {
        /* Without --check the payload of rep 0 is simply sent again: filling
         * buffers every rep would only slow the run down. Bcast overwrites
         * its buffer on non-roots, which is harmless then. */
        if (o->check)
            prepare(kind, sb, rb, size, rank, n, k, 1);

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        switch (kind) {
        case OP_SCATTER:
            MPI_Scatter(sb, cnt, MPI_BYTE, rb, cnt, MPI_BYTE, 0, MPI_COMM_WORLD);
            break;
        case OP_BCAST:
            MPI_Bcast(rb, cnt, MPI_BYTE, 0, MPI_COMM_WORLD);
            break;
        case OP_ALLTOALL:
            MPI_Alltoall(sb, cnt, MPI_BYTE, rb, cnt, MPI_BYTE, MPI_COMM_WORLD);
            break;
        case OP_GATHER:
            MPI_Gather(sb, cnt, MPI_BYTE, rb, cnt, MPI_BYTE, 0, MPI_COMM_WORLD);
            break;
        case OP_HALO: {
            /* Both shifts in flight at once, as a stencil code posts its ghost exchange. */
            const int l = left_of(rank, n), r = right_of(rank, n);
            MPI_Request q[4];
            MPI_Status st[4]; /* not MPI_STATUSES_IGNORE: GCC misreads MPICH's (MPI_Status *)1 as a buffer */
            MPI_Irecv(rb, cnt, MPI_BYTE, l, 1, MPI_COMM_WORLD, &q[0]);
            MPI_Irecv(rb + size, cnt, MPI_BYTE, r, 0, MPI_COMM_WORLD, &q[1]);
            MPI_Isend(sb, cnt, MPI_BYTE, l, 0, MPI_COMM_WORLD, &q[2]);
            MPI_Isend(sb + size, cnt, MPI_BYTE, r, 1, MPI_COMM_WORLD, &q[3]);
            MPI_Waitall(4, q, st);
            break;
        }
        }
        double t1 = MPI_Wtime();
        if (k >= o->warmup)
            mine[k - o->warmup] = t1 - t0;
        if (o->check)
            bad += !verify(kind, rb, size, rank, n, k, o->op);
    }

    /* Clocks of different hosts are not comparable, durations are: the
     * slowest rank's duration bounds when the collective was complete
     * everywhere. Reduced once after the loop to keep it out of the timing. */
    MPI_Reduce(mine, slowest, o->reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    bench_result res = {
        .op = o->op,
        .timing = "max_over_ranks",
        .size = size,
        .samples = slowest,
        .bad = bad,
    };
    bench_report(o, &res);
    free(mine);
    free(slowest);
    free(sb);
    free(rb);
    return bad;
}

int main(int argc, char **argv)
{
    return bench_main(argc, argv, &prog, run_size);
}
