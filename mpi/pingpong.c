/* Point-to-point ping-pong between ranks 0 and 1: gives the one-way latency
 * and bandwidth of the path under test, the baseline needed to tell a slow
 * gather caused by congestion from one caused by a slow link. Any further
 * ranks only take part in start-up and shutdown. */
#include "common.h"

#include <stdlib.h>

static const bench_prog prog = {
    .name = "pingpong",
    .summary = "Rank 0 sends SIZE bytes to rank 1, which sends SIZE bytes back; "
               "one sample is\nhalf the round trip measured at rank 0. "
               "Bandwidth is SIZE / median one-way time.",
    .min_ranks = 2,
};

static int run_size(const bench_opts *o, size_t size)
{
    const int rank = bench_rank();
    const int total = o->warmup + o->reps;
    int bad = 0;
    double *samples = bench_alloc((size_t)o->reps, sizeof *samples);
    unsigned char *sendbuf = bench_alloc(1, size);
    unsigned char *recvbuf = bench_alloc(1, size);
    const int peer = rank == 0 ? 1 : 0;

    if (rank <= 1)
        bench_fill_send(sendbuf, size, rank, 0);
    /* Start both sides together so rep 0 is not charged for the other
     * side's set-up. No barrier per rep: the exchange synchronises itself. */
    MPI_Barrier(MPI_COMM_WORLD);

    for (int k = 0; k < total && rank <= 1; k++) {
        if (o->check) {
            bench_fill_send(sendbuf, size, rank, k);
            pattern_poison(recvbuf, size, peer, k, 0);
        }
        if (rank == 0) {
            double t0 = MPI_Wtime();
            MPI_Send(sendbuf, (int)size, MPI_BYTE, 1, BENCH_TAG, MPI_COMM_WORLD);
            MPI_Recv(recvbuf, (int)size, MPI_BYTE, 1, BENCH_TAG, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            double t1 = MPI_Wtime();
            if (k >= o->warmup)
                samples[k - o->warmup] = (t1 - t0) / 2;
        } else {
            MPI_Recv(recvbuf, (int)size, MPI_BYTE, 0, BENCH_TAG, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            MPI_Send(sendbuf, (int)size, MPI_BYTE, 0, BENCH_TAG, MPI_COMM_WORLD);
        }
        if (o->check)
            bad += !pattern_check(recvbuf, size, peer, k, 0, "receive");
    }

    bench_result res = {
        .op = "pingpong",
        .timing = "rtt_half",
        .size = size,
        .samples = samples,
        .bad = bad,
        .with_bandwidth = 1,
    };
    bench_report(o, &res);
    free(samples);
    free(sendbuf);
    free(recvbuf);
    return bad;
}

int main(int argc, char **argv)
{
    return bench_main(argc, argv, &prog, run_size);
}
