/* f32 matmul throughput: square n x n matmuls through hd_op_run (which
 * allocates its output each time) against cblas_sgemm called directly on the
 * same data in the same run. Best of several repetitions, interleaved so that
 * both see the same machine state. Usage: bench_matmul [n ...] (default 256
 * 1024 2048). HODU_NUM_THREADS sets the threads of both. */
#include "hd_op.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef HODU_HAVE_BLAS
#include "cpu_blas.h"

#include <cblas.h>

/* cblas_sgemm of the OpenBLAS Hodu opened (with the kernels it chose:
 * docs/runtime.md), not a second one linked here. */
static __typeof__(cblas_sgemm) *bench_sgemm;
static void (*bench_blas_threads)(int);

static int bench_blas_open(void) {
    *(void **)&bench_sgemm = cpu_blas_symbol("cblas_sgemm");
    *(void **)&bench_blas_threads = cpu_blas_symbol("openblas_set_num_threads");
    return bench_sgemm && bench_blas_threads;
}
#endif

static double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void bench_fill(hd_tensor *t, uint64_t seed) {
    float *p = hd_tensor_data(t);
    for (int64_t i = 0; i < t->numel; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((seed >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* Seconds for one hd_op_run matmul, or a negative value on error. */
static double bench_hodu(hd_ctx *ctx, hd_tensor *a, hd_tensor *b) {
    hd_tensor *c = NULL;
    double t0 = bench_now();
    hd_status st = hd_op_binary(ctx, HD_OP_MATMUL, a, b, &c);
    double t = bench_now() - t0;
    hd_tensor_unref(c);
    if (st) {
        fprintf(stderr, "bench_matmul: %s\n", hd_error_message(ctx));
        return -1;
    }
    return t;
}

static int bench_size(hd_ctx *ctx, int n) {
    int64_t shape[2] = {n, n};
    hd_tensor *a = hd_tensor_new(ctx, HD_F32, shape, 2), *b = hd_tensor_new(ctx, HD_F32, shape, 2);
    hd_tensor *c = hd_tensor_new(ctx, HD_F32, shape, 2);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_matmul: %s\n", hd_error_message(ctx));
        hd_tensor_unref(a);
        hd_tensor_unref(b);
        hd_tensor_unref(c);
        return 1;
    }
    bench_fill(a, 1);
    bench_fill(b, 2);
    double flop = 2.0 * n * n * n;
    int reps = flop < 1e8 ? 50 : flop < 4e9 ? 10 : 5;
    double best_h = 1e30;
#ifdef HODU_HAVE_BLAS
    double best_b = 1e30;
#endif
    int err = 0;
    for (int r = -1; r < reps && !err; r++) { /* r == -1: warm-up */
        double th = bench_hodu(ctx, a, b);
        err = th < 0;
        if (r >= 0 && th < best_h) best_h = th;
#ifdef HODU_HAVE_BLAS
        /* OpenBLAS's own threads for the direct call; Hodu keeps it on
         * one (docs/runtime.md) and splits the product itself */
        bench_blas_threads(ctx->nthreads);
        double t0 = bench_now();
        bench_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, hd_tensor_data(a), n,
                    hd_tensor_data(b), n, 0.0f, hd_tensor_data(c), n);
        double tb = bench_now() - t0;
        bench_blas_threads(1);
        if (r >= 0 && tb < best_b) best_b = tb;
#endif
    }
#ifdef HODU_HAVE_BLAS
    if (!err)
        printf("%5d  %9.1f  %9.1f  %9.1f%%\n", n, flop / best_h * 1e-9, flop / best_b * 1e-9,
               100.0 * best_b / best_h);
#else
    if (!err) printf("%5d  %9.1f  (no BLAS in this build)\n", n, flop / best_h * 1e-9);
#endif
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    hd_tensor_unref(c);
    return err;
}

int main(int argc, char **argv) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    static const int defaults[] = {256, 1024, 2048};
#ifdef HODU_HAVE_BLAS
    if (!bench_blas_open()) {
        fprintf(stderr, "bench_matmul: no OpenBLAS: %s\n", cpu_blas_why());
        return 1;
    }
    printf("f32 matmul, %d threads, best of several runs; OpenBLAS's %s kernels, gemm %s\n",
           ctx.nthreads, cpu_blas_core(), cpu_blas_gemm_name());
#else
    printf("f32 matmul, %d threads, best of several runs\n", ctx.nthreads);
#endif
    printf("    n  hodu GF/s sgemm GF/s  hodu/sgemm\n");
    int err = 0;
    if (argc > 1)
        for (int i = 1; i < argc && !err; i++) err = bench_size(&ctx, atoi(argv[i]));
    else
        for (int i = 0; i < 3 && !err; i++) err = bench_size(&ctx, defaults[i]);
    return err;
}
