/* apptoy: a tiny MPI "application" with a known pass/fail line, for `gridsplit
 * bench app`'s tests (tests/test_app.py) and as an example of an app it reads.
 *
 * Each of -r rounds (default 20) exchanges -s doubles (default 20000) with both
 * ring neighbours and sums a checksum with MPI_Allreduce; rank 0 then checks
 * the sum against the closed form and prints
 *     apptoy: time T s
 *     apptoy: check PASSED        (or: apptoy: check FAILED, exit 1)
 * --fail corrupts one value on the last rank, so the check fails; --hang makes
 * rank 0 wait for a message nobody sends (the run never ends). It links
 * common.c only because mpi/Makefile builds every program that way. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rounds = 20, fail = 0, hang = 0;
    long n = 20000;
    MPI_Init(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--fail")) fail = 1;
        else if (!strcmp(argv[i], "--hang")) hang = 1;
        else {
            fprintf(stderr, "apptoy: usage: apptoy [-r ROUNDS] [-s DOUBLES] [--fail] [--hang]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (rounds < 1 || n < 1) {
        fprintf(stderr, "apptoy: -r and -s take whole numbers of 1 or more\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double *out = malloc(n * sizeof *out), *left = malloc(n * sizeof *left), *right = malloc(n * sizeof *right);
    if (!out || !left || !right) {
        fprintf(stderr, "apptoy: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    int l = (rank + size - 1) % size, r = (rank + 1) % size;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), total = 0;
    for (int k = 0; k < rounds; k++) {
        for (long i = 0; i < n; i++) out[i] = rank + k;
        if (fail && rank == size - 1 && k == rounds - 1) out[n - 1] += 1;
        MPI_Sendrecv(out, (int)n, MPI_DOUBLE, r, 1, left, (int)n, MPI_DOUBLE, l, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(out, (int)n, MPI_DOUBLE, l, 2, right, (int)n, MPI_DOUBLE, r, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double local = 0, sum = 0;
        for (long i = 0; i < n; i++) local += left[i] + right[i];
        MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        total += sum;
    }
    if (hang && rank == 0) {
        int x;
        MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    double t = MPI_Wtime() - t0;
    int ok = 1;
    if (rank == 0) {
        /* Every rank's value reaches two neighbours each round: 2 n (sum of ranks + size k) per round. */
        double expect = 0;
        for (int k = 0; k < rounds; k++) expect += 2.0 * n * (size * (size - 1) / 2.0 + (double)size * k);
        ok = total == expect;
        printf("apptoy: %d ranks, %d rounds of %ld doubles\napptoy: time %.6f s\napptoy: check %s\n", size, rounds,
               n, t, ok ? "PASSED" : "FAILED");
        fflush(stdout);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(out);
    free(left);
    free(right);
    MPI_Finalize();
    return ok ? 0 : 1;
}
