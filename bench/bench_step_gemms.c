/* How far the training step of bench/train/mlp_step.hodu (MLP
 * 512-256-128-2, batch 64, SGD) can go on one core: its seven products,
 * with the shapes and transpositions the step passes to sgemm, timed
 * through OpenBLAS alone (the library Hodu opened, with the kernels it
 * chose; nothing else of Hodu), beside this core's f32 FMA peak (a loop of
 * independent FMAs, 16 wide with AVX-512, else 8). The step cannot take
 * less than its products' time at that peak; bench/bench_train_step.sh
 * times the step. Each product is also timed as Hodu runs it
 * (cpu_blas_gemm on one thread: oneDNN's sgemm for the larger ones where
 * it is installed, docs/runtime.md "Which gemm"). Best of 9 rounds.
 * Usage: bench_step_gemms (one thread, as Hodu keeps its libraries). */
#include "cpu_blas.h"
#include "hd_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(HODU_HAVE_BLAS) && (defined(__x86_64__) || defined(__i386__))
#include <cblas.h>
#include <immintrin.h>

static double step_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static __typeof__(cblas_sgemm) *step_sgemm;

/* Seconds for n rounds of 12 independent FMA chains of the vector type
 * STEP_V (twelve in registers cover the FMA latency of two pipes), best of
 * 9; STEP_SET1, STEP_FMADD and STEP_FIRST are its intrinsics. */
#define STEP_FMA12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define STEP_DECL(i)  STEP_V a##i = STEP_SET1((float)(i));
#define STEP_FMA(i)   a##i = STEP_FMADD(a##i, m, c);
#define STEP_SUM(i)   *sink += STEP_FIRST(a##i);
#define STEP_FMA_SECONDS(NAME, TARGET)                                                             \
    __attribute__((target(TARGET))) static double NAME(long n, float *sink) {                      \
        double best = 1e9;                                                                         \
        for (int r = 0; r < 9; r++) {                                                              \
            STEP_V m = STEP_SET1(0.999999f), c = STEP_SET1(1e-7f);                                 \
            STEP_FMA12(STEP_DECL)                                                                  \
            double t = step_now();                                                                 \
            for (long k = 0; k < n; k++) {                                                         \
                STEP_FMA12(STEP_FMA)                                                               \
            }                                                                                      \
            t = step_now() - t;                                                                    \
            if (t < best) best = t;                                                                \
            STEP_FMA12(STEP_SUM)                                                                   \
        }                                                                                          \
        return best;                                                                               \
    }
/* 8 wide (16 FLOPs a chain) */
#define STEP_V     __m256
#define STEP_SET1  _mm256_set1_ps
#define STEP_FMADD _mm256_fmadd_ps
#define STEP_FIRST _mm256_cvtss_f32
STEP_FMA_SECONDS(step_fma_seconds, "avx2,fma")
#undef STEP_V
#undef STEP_SET1
#undef STEP_FMADD
#undef STEP_FIRST
/* 16 wide (32 FLOPs a chain) */
#define STEP_V     __m512
#define STEP_SET1  _mm512_set1_ps
#define STEP_FMADD _mm512_fmadd_ps
#define STEP_FIRST _mm512_reduce_add_ps
STEP_FMA_SECONDS(step_fma512_seconds, "avx512f")

/* FLOP/s of one core at its widest FMA. */
static double step_peak(float *sink) {
    long n = 20000000;
    if (__builtin_cpu_supports("avx512f"))
        return 12.0 * 32.0 * (double)n / step_fma512_seconds(n, sink);
    return 12.0 * 16.0 * (double)n / step_fma_seconds(n, sink);
}

typedef struct step_gemm {
    int ta, tb, m, n, k;
    const char *what;
} step_gemm;

static const step_gemm step_gemms[] = {
    {0, 1, 64, 256, 512, "layer 1: x @ W1^T"}, {0, 1, 64, 128, 256, "layer 2: h1 @ W2^T"},
    {0, 1, 64, 2, 128, "layer 3: h2 @ W3^T"},  {0, 0, 64, 128, 2, "dh2 = dz3 @ W3"},
    {0, 0, 64, 256, 128, "dh1 = dz2 @ W2"},    {1, 0, 128, 256, 64, "dW2 = dz2^T @ h1"},
    {1, 0, 256, 512, 64, "dW1 = dz1^T @ x"},
};
#define STEP_NGEMMS ((int)(sizeof step_gemms / sizeof step_gemms[0]))

static float *step_rand(long n) {
    float *p = malloc((size_t)n * sizeof *p);
    for (long i = 0; p && i < n; i++) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return p;
}

/* Seconds for one product, best of 9 rounds of reps calls: through
 * OpenBLAS's cblas_sgemm, or (hodu) as Hodu runs it on one thread. */
static double step_gemm_seconds(const step_gemm *g, int hodu) {
    float *a = step_rand((long)g->m * g->k), *b = step_rand((long)g->k * g->n);
    float *c = malloc((size_t)g->m * (size_t)g->n * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_step_gemms: out of memory\n");
        exit(1);
    }
    int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
    double flops = 2.0 * g->m * g->n * g->k, best = 1e9;
    int reps = (int)(2e8 / flops) + 1;
    for (int r = 0; r < 9; r++) {
        double t = step_now();
        if (hodu)
            for (int i = 0; i < reps; i++)
                cpu_blas_gemm(1, 0, g->ta, g->tb, g->m, g->n, g->k, 1.0, a, lda, b, ldb, 0.0, c,
                              g->n, NULL);
        else
            for (int i = 0; i < reps; i++)
                step_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                           g->tb ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, 1.0f, a, lda, b,
                           ldb, 0.0f, c, g->n);
        t = (step_now() - t) / reps;
        if (t < best) best = t;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

int main(void) {
    float sink = 0;
    *(void **)&step_sgemm = cpu_blas_symbol("cblas_sgemm");
    if (!step_sgemm) {
        fprintf(stderr, "bench_step_gemms: no OpenBLAS: %s\n", cpu_blas_why());
        return 1;
    }
    double peak = step_peak(&sink);
    printf("f32 FMA peak, one core (%s): %.1f GFLOP/s%s; OpenBLAS's %s kernels\n",
           __builtin_cpu_supports("avx512f") ? "AVX-512" : "AVX2", peak * 1e-9,
           sink == 12345 ? " " : "", cpu_blas_core());
    double total = 0, total_hodu = 0, flops = 0;
    printf("  %-20s %-19s  %-30s  %s (%s)\n", "product", "shape", "OpenBLAS", "as Hodu runs it",
           cpu_blas_gemm_name());
    for (int i = 0; i < STEP_NGEMMS; i++) {
        const step_gemm *g = &step_gemms[i];
        double t = step_gemm_seconds(g, 0), th = step_gemm_seconds(g, 1);
        double f = 2.0 * g->m * g->n * g->k;
        total += t, total_hodu += th, flops += f;
        printf("  %-20s %c%c %4d x %4d x %4d: %8.1f us (%3.0f%% of peak)  %8.1f us (%3.0f%%)\n",
               g->what, g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n, g->k, t * 1e6,
               100.0 * f / t / peak, th * 1e6, 100.0 * f / th / peak);
    }
    printf("the step's products: %.2f MFLOP, %.1f us through OpenBLAS (%.0f%% of peak), %.1f us "
           "as Hodu runs them (%.0f%%); %.1f us at the peak\n",
           flops * 1e-6, total * 1e6, 100.0 * flops / total / peak, total_hodu * 1e6,
           100.0 * flops / total_hodu / peak, flops / peak * 1e6);
    return 0;
}

#else

int main(void) {
    printf("bench_step_gemms: needs OpenBLAS and an x86 CPU\n");
    return 0;
}

#endif
