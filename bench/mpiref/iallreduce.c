/*
 * iallreduce.c: the Open MPI / MPICH side of rdmabench's iallreduce row,
 * with OSU's non-blocking collective method (osu_iallreduce): per size,
 * t_pure is MPI_Iallreduce + MPI_Wait alone; then as many calls each
 * start the MPI_Iallreduce, compute (a busy loop) for the rank's t_pure and
 * MPI_Wait. Every call is timed on its own and followed by an untimed
 * barrier, as rdmabench's collective rows are. Overall, Compute and Pure
 * are per-call means averaged over ranks, and
 *   overlap % = max(0, 100 * (1 - (Overall - Compute) / Pure)).
 * float elements, MPI_SUM, sizes 4 bytes to -m MAX in powers of two.
 * Iterations follow OSU (1000/100 warm-up, 100/10 above 8 KiB), capped so
 * that a size's t_pure loop takes about -t seconds (at least 5). With -w,
 * each size first runs about that many seconds of plain calls, as
 * rdmabench's --warmup-budget does (and mpibench's -w).
 *
 *   mpicc -O2 -o iallreduce iallreduce.c
 *   mpirun -np 2 ./iallreduce [-m MAX_BYTES] [-t SECONDS] [-w SECONDS]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;

/* busy computes for about d seconds and returns how long it took. */
static double busy(double d)
{
    double t0 = MPI_Wtime();
    uint64_t x = sink | 1;
    while (MPI_Wtime() - t0 < d)
        for (int i = 0; i < 256; i++)
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    sink = x;
    return MPI_Wtime() - t0;
}

/* one call: start, compute for d (if > 0), wait; returns call and compute time. */
static void call(float *s, float *r, int n, double d, double *total, double *comp)
{
    MPI_Request req;
    double t0 = MPI_Wtime(), tc = 0;
    MPI_Iallreduce(s, r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    if (d > 0)
        tc = busy(d);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    *total += MPI_Wtime() - t0;
    *comp += tc;
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    long max = 1L << 20;
    double budget = 0.25, warm = 0;
    int rank, nprocs;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m"))
            max = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-t"))
            budget = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-w"))
            warm = atof(argv[i + 1]);
    }
    float *s = calloc(max / 4 + 1, 4), *r = calloc(max / 4 + 1, 4);
    /* Values in every page of the send buffer, as rdmabench's has: read
     * untouched, calloc's pages would all be the kernel's one zero page,
     * which stays in the cache whatever the size. */
    for (long i = 0; i < max / 4 + 1; i++)
        s[i] = (float)(i % 13 + rank);
    if (rank == 0)
        printf("# %-10s %18s %17s %17s %11s %11s\n", "Size", "Overall(us)", "Compute(us)", "Pure Comm.(us)", "Overlap(%)", "Iters");
    for (long size = 4; size <= max; size *= 2) {
        int n = size / 4, iters = size > 8192 ? 100 : 1000, skip = size > 8192 ? 10 : 100;
        double tot = 0, comp = 0, dummy0 = 0;
        /* calibrate: a few calls set the count so that the pure loop fits the budget */
        for (int i = 0; i < 5; i++)
            call(s, r, n, 0, &tot, &comp);
        double per[1] = {tot / 5};
        MPI_Bcast(per, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        /* every rank makes the same number of warm-up calls (rank 0's estimate) */
        for (long i = 0, w = per[0] > 0 ? (long)(warm / per[0]) : 0; i < w; i++)
            call(s, r, n, 0, &dummy0, &dummy0);
        if (per[0] * iters > budget)
            iters = (int)(budget / per[0]);
        if (iters < 5)
            iters = 5;
        if (skip > iters / 10 + 1)
            skip = iters / 10 + 1;
        double pure = 0, total = 0, compute = 0, dummy = 0;
        for (int i = 0; i < skip; i++)
            call(s, r, n, 0, &dummy, &dummy);
        for (int i = 0; i < iters; i++)
            call(s, r, n, 0, &pure, &dummy);
        pure /= iters;
        for (int i = 0; i < skip; i++)
            call(s, r, n, pure, &dummy, &dummy);
        for (int i = 0; i < iters; i++)
            call(s, r, n, pure, &total, &compute);
        double mine[3] = {total / iters * 1e6, compute / iters * 1e6, pure * 1e6}, sum[3];
        MPI_Reduce(mine, sum, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double o = sum[0] / nprocs, c = sum[1] / nprocs, p = sum[2] / nprocs;
            double ov = p > 0 ? 100 * (1 - (o - c) / p) : 0;
            printf("%-12ld %18.2f %17.2f %17.2f %11.2f %11d\n", size, o, c, p, ov < 0 ? 0 : ov, iters);
            fflush(stdout);
        }
    }
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
