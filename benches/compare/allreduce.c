/* MPI_Allreduce (f32 sum, MPI_COMM_WORLD) timed at 1 MiB .. 256 MiB: the MPI library's own
 * figure beside examples/allreduce_bench.rs (docs/distributed.md). Prints one line per size:
 * "mpi-c <bytes> <median seconds> <algorithm bandwidth GB/s>" on rank 0.
 * Build: mpicc -O2 -o /tmp/allreduce_c benches/compare/allreduce.c
 * (benches/compare/allreduce.sh builds both and alternates them.)
 * Run:   mpirun --allow-run-as-root -np 2 /tmp/allreduce_c [repeats] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int repeats = argc > 1 ? atoi(argv[1]) : 10;
    if (repeats < 1 || repeats > 1000) repeats = 10;
    double *times = malloc(sizeof(double) * repeats);
    for (size_t bytes = 1 << 20; bytes <= (size_t)256 << 20; bytes *= 4) {
        size_t n = bytes / sizeof(float);
        float *send = malloc(bytes), *recv = malloc(bytes);
        if (!send || !recv || !times) MPI_Abort(MPI_COMM_WORLD, 1);
        for (size_t i = 0; i < n; i++) send[i] = (float)(i % 7) + rank;
        MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
        for (int r = 0; r < repeats; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            times[r] = MPI_Wtime() - t;
        }
        /* The slowest rank's time per repeat: the collective is done when all are. */
        MPI_Allreduce(MPI_IN_PLACE, times, repeats, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        qsort(times, repeats, sizeof(double), cmp);
        double med = times[repeats / 2];
        if (rank == 0) printf("mpi-c %zu %.6f %.3f\n", bytes, med, bytes / med / 1e9);
        if (recv[1] != (float)(size + size * (size - 1) / 2)) fprintf(stderr, "rank %d: wrong sum\n", rank);
        free(send);
        free(recv);
    }
    free(times);
    MPI_Finalize();
    return 0;
}
