/*
 * put.c: the Open MPI / MPICH side of rdmabench's put_latency and put_bw
 * rows. OSU's one-sided method with flush synchronisation: rank 0 locks
 * rank 1's window (MPI_Win_allocate memory) once, then per iteration
 * latency: one MPI_Put and MPI_Win_flush, reporting the time per pair
 *          (not halved);
 * bw:      64 MPI_Puts and one MPI_Win_flush, MB/s = size*64*iters/time.
 * All Puts of a window go to displacement 0, as rdmabench's do. Rank 1
 * takes no part until the closing barrier. Iterations follow OSU (latency
 * 10000/100 warm-up, 1000/10 above 8 KiB; bw 100/10, 20/2), capped so that
 * a size takes about -t seconds. Output: OSU-style rows, first size 1 byte.
 *
 *   mpicc -O2 -o put put.c
 *   mpirun -np 2 ./put latency|bw [-m MAX_BYTES] [-t SECONDS]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

/* pass times n iterations of `puts` Puts of size bytes and one flush. */
static double pass(char *s, int size, int puts, int n, MPI_Win win)
{
    double t0 = MPI_Wtime();
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < puts; j++)
            MPI_Put(s, size, MPI_CHAR, 1, 0, size, MPI_CHAR, win);
        MPI_Win_flush(1, win);
    }
    return MPI_Wtime() - t0;
}

int main(int argc, char **argv)
{
    long max = 4L << 20;
    double budget = 0.25;
    int rank, nprocs, bw = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 2 || (strcmp(argv[1], "latency") && strcmp(argv[1], "bw"))) {
        if (rank == 0)
            fprintf(stderr, "usage: put latency|bw [-m MAX_BYTES] [-t SECONDS]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    bw = !strcmp(argv[1], "bw");
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            max = atol(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            budget = atof(argv[++i]);
    }
    if (nprocs != 2) {
        if (rank == 0)
            fprintf(stderr, "put: needs exactly 2 ranks, got %d\n", nprocs);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *base, *s = malloc(max);
    MPI_Win win;
    MPI_Win_allocate(max, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    if (!s) {
        fprintf(stderr, "put: cannot allocate %ld bytes\n", max);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(s, 'a', max);
    memset(base, 0, max);
    MPI_Barrier(MPI_COMM_WORLD);
    int puts = bw ? WINDOW : 1;
    if (rank == 0) {
        printf("# put %s (OSU method, flush synchronisation%s)\n# Size  %s\n", argv[1],
               bw ? ", window 64" : "", bw ? "Bandwidth (MB/s)" : "Latency (us)");
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (long size = 1; size <= max; size *= 2) {
            int large = size > 8192;
            int iters = bw ? (large ? 20 : 100) : (large ? 1000 : 10000);
            int skip = bw ? (large ? 2 : 10) : (large ? 10 : 100);
            double one = pass(s, (int)size, puts, 1, win);
            int n = iters;
            if (one * iters > budget)
                n = (int)(budget / (one > 0 ? one : 1e-9));
            if (n < 5)
                n = 5;
            pass(s, (int)size, puts, skip < n ? skip : n, win);
            double t = pass(s, (int)size, puts, n, win);
            if (bw)
                printf("%-10ld %.2f\n", size, size / 1e6 * n * WINDOW / t);
            else
                printf("%-10ld %.2f\n", size, t * 1e6 / n);
            fflush(stdout);
        }
        MPI_Win_unlock(1, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1 && base[0] != 'a') {
        fprintf(stderr, "put: rank 1: the window's first byte is %d, not 'a'\n", base[0]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Win_free(&win);
    free(s);
    MPI_Finalize();
    return 0;
}
