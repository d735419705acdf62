/* Times MPI_Allreduce (MPI_FLOAT, MPI_SUM) the way `tpcomm bench` times its
 * all-reduce, so bench/cpu_vs_openmpi.sh can put the two side by side:
 * sizes doubling from MIN to MAX bytes, 5 warm-up calls, then ITERS timed
 * calls (default: 2 GiB of traffic per size, clamped to 20..1000), each timed
 * alone; the row's time is the slowest rank's median. Inputs rotate through
 * up to 4 buffers of random non-zero values; the first call of each size is
 * checked against a double-precision reference.
 *
 * Usage: mpirun -np N allreduce_bench MIN_BYTES MAX_BYTES [ITERS]
 * Prints one JSON object per size on stdout (rank 0). */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;
static float next_value(void) {
    /* xorshift64*: values in [1/64, 1] with a random sign, never zero. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 2685821657736338717ULL;
    float m = 1.0f / 64 + (float)((r >> 11) & 0xffffff) / (float)0xffffff * (1.0f - 1.0f / 64);
    return (r & 1) ? m : -m;
}

static void fill(float *p, size_t n, uint64_t seed) {
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) p[i] = next_value();
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: %s MIN_BYTES MAX_BYTES [ITERS]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    size_t min_b = strtoull(argv[1], NULL, 10), max_b = strtoull(argv[2], NULL, 10);
    long fixed_iters = argc > 3 ? atol(argv[3]) : 0;
    if (min_b < 4 || max_b < min_b) {
        if (rank == 0) fprintf(stderr, "need 4 <= MIN_BYTES <= MAX_BYTES\n");
        MPI_Finalize();
        return 2;
    }
    size_t max_n = max_b / 4;
    int rot_max = 4;
    float *in[4], *out = malloc(max_n * 4), *peer = malloc(max_n * 4);
    double *ref = malloc(max_n * sizeof(double)), *scale = malloc(max_n * sizeof(double));
    for (int k = 0; k < rot_max; k++) in[k] = malloc(max_n * 4);
    double *times = malloc(1000 * sizeof(double));

    for (size_t bytes = min_b;; bytes = bytes * 2 > max_b && bytes < max_b ? max_b : bytes * 2) {
        size_t n = bytes / 4;
        int rot = (int)((256ull << 20) / bytes);
        rot = rot < 2 ? 2 : rot > rot_max ? rot_max : rot;
        for (int k = 0; k < rot; k++) fill(in[k], n, (uint64_t)bytes * 131 + k * 17 + rank);
        /* Check: rebuild every rank's first input for the reference. */
        for (size_t i = 0; i < n; i++) ref[i] = scale[i] = 0;
        for (int r = 0; r < world; r++) {
            fill(peer, n, (uint64_t)bytes * 131 + r);
            for (size_t i = 0; i < n; i++) {
                ref[i] += peer[i];
                scale[i] += fabs(peer[i]);
            }
        }
        MPI_Allreduce(in[0], out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        long wrong = 0;
        double tol = 1.1920929e-7 * (1 + world);
        for (size_t i = 0; i < n; i++)
            if (!(fabs(out[i] - ref[i]) <= tol * scale[i])) wrong++;
        for (int i = 0; i < 5; i++)
            MPI_Allreduce(in[i % rot], out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        long iters = fixed_iters > 0 ? fixed_iters : (long)((2ull << 30) / bytes);
        if (iters < 20) iters = 20;
        if (iters > 1000) iters = 1000;
        for (long i = 0; i < iters; i++) {
            double t0 = MPI_Wtime();
            MPI_Allreduce(in[i % rot], out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            times[i] = (MPI_Wtime() - t0) * 1e6;
        }
        qsort(times, iters, sizeof(double), cmp_double);
        double median = times[iters / 2], slowest;
        long wrong_all;
        MPI_Allreduce(&median, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("{\"bytes\": %zu, \"count\": %zu, \"time_us\": %.3f, \"iters\": %ld, \"wrong\": %ld}\n",
                   bytes, n, slowest, iters, wrong_all);
            fflush(stdout);
        }
        if (bytes >= max_b) break;
    }
    MPI_Finalize();
    return 0;
}
