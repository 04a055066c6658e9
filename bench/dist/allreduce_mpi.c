/* Open MPI's own MPI_Allreduce at the sizes of allreduce.hodu, timed the
 * same way (best of 3 passes of reps calls, in place), for the same table.
 * Built by bench/bench_dist.sh with mpicc. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, ws;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    const long sizes[] = {256, 4096, 65536, 1048576, 4194304, 16777216};
    for (int s = 0; s < 6; s++) {
        long n = sizes[s];
        float *t = malloc((size_t)n * sizeof *t);
        for (long i = 0; i < n; i++) t[i] = 1.0f;
        long reps = (long)(2e7 / (double)n);
        if (reps < 3) reps = 3;
        double best = 1e9;
        for (int k = 0; k < 3; k++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long i = 0; i < reps; i++)
                MPI_Allreduce(MPI_IN_PLACE, t, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double dt = (MPI_Wtime() - t0) / (double)reps;
            if (dt < best) best = dt;
        }
        double bytes = (double)n * 4, busbw = 2.0 * (ws - 1) / ws * bytes / best / 1e9;
        if (rank == 0) printf("mpi  %.0f bytes %.1f us %.2f GB/s\n", bytes, best * 1e6, busbw);
        free(t);
    }
    MPI_Finalize();
    return 0;
}
