/* The hand-written gather of Alter and Glück §10.3 (MPI5000 evaluation): the
 * baseline that gridsplit's WAN experiments are compared against. It avoids
 * MPI_Gather on purpose so that no library-specific algorithm (trees,
 * segmentation) hides what the network does: every non-root rank sends its
 * message straight to the root, all at once. */
#include "common.h"

#include <stdlib.h>

static const bench_prog prog = {
    .name = "gather",
    .summary = "Barrier, then every rank Isend()s SIZE bytes to rank 0, which has "
               "Irecv()ed from all\nand Wait()s on each in rank order; timed at "
               "rank 0 from the start of the barrier\nto its last Wait "
               "(MPI5000, Alter and Glück, section 10.3).",
    .min_ranks = 1,
};

/* Returns the number of reps whose payloads failed verification. */
static int run_size(const bench_opts *o, size_t size)
{
    const int rank = bench_rank(), n = bench_size();
    const int total = o->warmup + o->reps;
    int bad = 0;
    double *samples = bench_alloc((size_t)o->reps, sizeof *samples);
    unsigned char *sendbuf = NULL, *recvbuf = NULL;
    MPI_Request *req = NULL;

    if (rank == 0) {
        /* One buffer per source: the seed's listing receives every message
         * into the same buffer, which MPI forbids for concurrent requests
         * and would make --check meaningless. */
        recvbuf = bench_alloc(n > 1 ? (size_t)(n - 1) : 1, size);
        req = bench_alloc(n > 1 ? (size_t)(n - 1) : 1, sizeof *req);
    } else {
        sendbuf = bench_alloc(1, size);
        bench_fill_send(sendbuf, size, rank, 0);
    }

    for (int k = 0; k < total; k++) {
        if (o->check) {
            if (rank == 0)
                for (int src = 1; src < n; src++)
                    pattern_poison(recvbuf + (size_t)(src - 1) * size, size, src, k, 0);
            else
                bench_fill_send(sendbuf, size, rank, k);
        }

        /* The root's clock starts before the barrier, as in the seed's
         * listing: a gather is the barrier that separates it from the
         * previous one plus the transfers, and only that whole has a
         * physical lower bound (the senders may start sending before the
         * root itself leaves the barrier). */
        double t0 = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            for (int src = 1; src < n; src++)
                MPI_Irecv(recvbuf + (size_t)(src - 1) * size, (int)size, MPI_BYTE, src,
                          BENCH_TAG, MPI_COMM_WORLD, &req[src - 1]);
            /* Waiting in rank order, as the seed does: the gather ends with
             * the slowest sender whatever the order, and the total stays
             * comparable with the published numbers. */
            for (int src = 1; src < n; src++)
                MPI_Wait(&req[src - 1], MPI_STATUS_IGNORE);
            double t1 = MPI_Wtime();
            if (k >= o->warmup)
                samples[k - o->warmup] = t1 - t0;
            if (o->check) {
                int ok = 1;
                for (int src = 1; src < n; src++)
                    ok &= pattern_check(recvbuf + (size_t)(src - 1) * size, size, src, k,
                                        0, "receive");
                bad += !ok;
            }
        } else {
            MPI_Request r;
            MPI_Isend(sendbuf, (int)size, MPI_BYTE, 0, BENCH_TAG, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
    }

    bench_result res = {
        .op = "gather",
        .timing = "root",
        .size = size,
        .samples = samples,
        .bad = bad,
    };
    bench_report(o, &res);
    free(samples);
    free(sendbuf);
    free(recvbuf);
    free(req);
    return bad;
}

int main(int argc, char **argv)
{
    return bench_main(argc, argv, &prog, run_size);
}
