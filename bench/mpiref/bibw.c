/*
 * bibw.c: the Open MPI / MPICH side of rdmabench's bibw row, for
 * bench/compare.sh. OSU's bidirectional bandwidth: each window both ranks
 * post 64 MPI_Irecv and 64 MPI_Isend and wait for all 128; MB/s counts the
 * bytes of both directions. Iterations follow OSU (100 with 10 warm-up, 20
 * with 2 above 8 KiB), capped so that a size takes about -t seconds, as
 * rdmabench does. Output: OSU-style "Size Bandwidth" rows, first size 1 byte.
 *
 *   mpicc -O2 -o bibw bibw.c
 *   mpirun -np 2 ./bibw [-m MAX_BYTES] [-t SECONDS]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static double window_pass(char *s, char *r, int size, int peer)
{
    MPI_Request req[2 * WINDOW];
    double t0 = MPI_Wtime();
    for (int j = 0; j < WINDOW; j++)
        MPI_Irecv(r, size, MPI_CHAR, peer, 200, MPI_COMM_WORLD, &req[j]);
    for (int j = 0; j < WINDOW; j++)
        MPI_Isend(s, size, MPI_CHAR, peer, 200, MPI_COMM_WORLD, &req[WINDOW + j]);
    MPI_Waitall(2 * WINDOW, req, MPI_STATUSES_IGNORE);
    return MPI_Wtime() - t0;
}

int main(int argc, char **argv)
{
    long max = 4L << 20;
    double budget = 0.25;
    int rank, nprocs;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            max = atol(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            budget = atof(argv[++i]);
    }
    if (nprocs != 2) {
        if (rank == 0)
            fprintf(stderr, "bibw: needs exactly 2 ranks, got %d\n", nprocs);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *s = malloc(max), *r = malloc(max);
    if (!s || !r) {
        fprintf(stderr, "bibw: cannot allocate %ld bytes\n", max);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(s, 'a' + rank, max);
    int peer = 1 - rank;
    if (rank == 0)
        printf("# bibw (OSU method, window %d)\n# Size  Bandwidth (MB/s)\n", WINDOW);
    for (long size = 1; size <= max; size *= 2) {
        int iters = size > 8192 ? 20 : 100, skip = size > 8192 ? 2 : 10;
        /* Calibrate on rank 0 from one window, then agree on the count. */
        double one = window_pass(s, r, (int)size, peer);
        int n = iters;
        if (one * iters > budget)
            n = (int)(budget / (one > 0 ? one : 1e-9));
        if (n < 5)
            n = 5;
        MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
        for (int i = 0; i < skip && i < n; i++)
            window_pass(s, r, (int)size, peer);
        if (r[size - 1] != 'a' + peer) {
            fprintf(stderr, "bibw: rank %d: wrong data at size %ld\n", rank, size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t = 0;
        for (int i = 0; i < n; i++)
            t += window_pass(s, r, (int)size, peer);
        if (rank == 0)
            printf("%-10ld %.2f\n", size, 2.0 * size / 1e6 * n * WINDOW / t);
        fflush(stdout);
    }
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
