/* Few-row f32 products (cpu_rows.h). */
#include "cpu_rows.h"

#include "hd_base.h"

#include <math.h>
#include <omp.h>

#if defined(__FMA__)
#include <immintrin.h>
#endif

typedef float gemm_v8 __attribute__((vector_size(32)));
typedef float gemm_v8u __attribute__((vector_size(32), aligned(4))); /* unaligned access */

#if defined(__FMA__)
static inline gemm_v8 gemm_fma8(gemm_v8 x, gemm_v8 y, gemm_v8 acc) {
    return (gemm_v8)_mm256_fmadd_ps((__m256)x, (__m256)y, (__m256)acc);
}
static inline float gemm_fma1(float x, float y, float acc) {
    return fmaf(x, y, acc);
}
#else
static inline gemm_v8 gemm_fma8(gemm_v8 x, gemm_v8 y, gemm_v8 acc) {
    return x * y + acc;
}
static inline float gemm_fma1(float x, float y, float acc) {
    return x * y + acc;
}
#endif

static inline gemm_v8 gemm_splat(float x) {
    return (gemm_v8){x, x, x, x, x, x, x, x};
}

/* ---- few rows: b row-major (axpy form) ---- */

/* C[0..MR, j0 .. j0 + 8 NV) with MR * NV accumulators in registers while k
 * walks down b's rows. MR and NV are constants where it is inlined. */
static inline __attribute__((always_inline)) void gemm_axpy_block(const hd_rows_job *j, int64_t j0,
                                                                  int MR, int NV) {
    gemm_v8 acc[HD_ROWS_M][8];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) acc[r][v] = gemm_splat(0.0f);
    const float *bp = j->b + j0, *ap = j->a;
    for (int64_t k0 = 0; k0 < j->k; k0 += HD_INTERRUPT_CHUNK) {
        if (k0 && hd_stop_now(j->stop)) return;
        for (int64_t k = k0, k1 = HD_MIN(j->k, k0 + HD_INTERRUPT_CHUNK); k < k1;
             k++, bp += j->brs, ap += j->acs) {
            gemm_v8 w[8];
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) w[v] = *(const gemm_v8u *)(bp + 8 * v);
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) {
                gemm_v8 x = gemm_splat(ap[r * j->ars]);
#pragma GCC unroll 8
                for (int v = 0; v < NV; v++) acc[r][v] = gemm_fma8(x, w[v], acc[r][v]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) *(gemm_v8u *)(j->c + r * j->n + j0 + 8 * v) = acc[r][v];
}

/* Column col of C for every row, any strides: four partial sums over k. */
static void gemm_column(const hd_rows_job *j, int64_t col) {
    for (int64_t r = 0; r < j->m; r++) {
        const float *ap = j->a + r * j->ars, *bp = j->b + col * j->bcs;
        float s[4] = {0, 0, 0, 0};
        int64_t k = 0;
        while (k + 4 <= j->k) {
            if (k && hd_stop_now(j->stop)) return;
            for (int64_t k1 = HD_MIN(j->k, k + HD_INTERRUPT_CHUNK); k + 4 <= k1; k += 4)
                for (int q = 0; q < 4; q++)
                    s[q] = gemm_fma1(ap[(k + q) * j->acs], bp[(k + q) * j->brs], s[q]);
        }
        for (; k < j->k; k++) s[0] = gemm_fma1(ap[k * j->acs], bp[k * j->brs], s[0]);
        j->c[r * j->n + col] = (s[0] + s[1]) + (s[2] + s[3]);
    }
}

/* Columns [c0, c1) of C, b row-major (bcs == 1): blocks of 8 NV columns
 * (NV by rows: 8 accumulators in all), then 8, then one at a time. */
#define GEMM_AXPY(NAME, MR, NV)                                                                    \
    static void NAME(const hd_rows_job *j, int64_t c0, int64_t c1) {                               \
        int64_t c = c0;                                                                            \
        for (; c + 8 * (NV) <= c1; c += 8 * (NV)) gemm_axpy_block(j, c, MR, NV);                   \
        for (; c + 8 <= c1; c += 8) gemm_axpy_block(j, c, MR, 1);                                  \
        for (; c < c1; c++) gemm_column(j, c);                                                     \
    }
GEMM_AXPY(gemm_axpy1, 1, 8)
GEMM_AXPY(gemm_axpy2, 2, 4)
GEMM_AXPY(gemm_axpy3, 3, 2)
GEMM_AXPY(gemm_axpy4, 4, 2)

/* ---- few rows: b transposed (dot form) ---- */

static inline float gemm_hsum(gemm_v8 v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/* C[0..MR, c .. c + NC) as dot products of a's rows (acs == 1) with b's
 * columns (brs == 1): 8 lanes per pair, then the tail of k. */
static inline __attribute__((always_inline)) void gemm_dot_block(const hd_rows_job *j, int64_t c,
                                                                 int MR, int NC) {
    gemm_v8 acc[HD_ROWS_M][4];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int q = 0; q < NC; q++) acc[r][q] = gemm_splat(0.0f);
    const float *bp = j->b + c * j->bcs;
    int64_t k = 0;
    while (k + 8 <= j->k) {
        if (k && hd_stop_now(j->stop)) return;
        for (int64_t k1 = HD_MIN(j->k, k + HD_INTERRUPT_CHUNK); k + 8 <= k1; k += 8) {
            gemm_v8 x[HD_ROWS_M];
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) x[r] = *(const gemm_v8u *)(j->a + r * j->ars + k);
#pragma GCC unroll 8
            for (int q = 0; q < NC; q++) {
                gemm_v8 w = *(const gemm_v8u *)(bp + q * j->bcs + k);
#pragma GCC unroll 8
                for (int r = 0; r < MR; r++) acc[r][q] = gemm_fma8(x[r], w, acc[r][q]);
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int q = 0; q < NC; q++) {
            float s = gemm_hsum(acc[r][q]);
            for (int64_t kk = k; kk < j->k; kk++)
                s = gemm_fma1(j->a[r * j->ars + kk], bp[q * j->bcs + kk], s);
            j->c[r * j->n + c + q] = s;
        }
}

#define GEMM_DOT(NAME, MR, NC)                                                                     \
    static void NAME(const hd_rows_job *j, int64_t c0, int64_t c1) {                               \
        int64_t c = c0;                                                                            \
        for (; c + (NC) <= c1; c += (NC)) gemm_dot_block(j, c, MR, NC);                            \
        for (; c < c1; c++) gemm_dot_block(j, c, MR, 1);                                           \
    }
GEMM_DOT(gemm_dot1, 1, 4)
GEMM_DOT(gemm_dot2, 2, 4)
GEMM_DOT(gemm_dot3, 3, 2)
GEMM_DOT(gemm_dot4, 4, 2)

hd_rows_fn hd_cpu_rows_fn(const hd_rows_job *j) {
    static const hd_rows_fn axpy[HD_ROWS_M] = {gemm_axpy1, gemm_axpy2, gemm_axpy3, gemm_axpy4};
    static const hd_rows_fn dot[HD_ROWS_M] = {gemm_dot1, gemm_dot2, gemm_dot3, gemm_dot4};
    if (j->m < 1 || j->m > HD_ROWS_M) return NULL;
    if (j->bcs == 1 || j->n < 8) return axpy[j->m - 1];
    if (j->brs == 1 && (j->acs == 1 || j->k == 1)) return dot[j->m - 1];
    return NULL;
}

int hd_cpu_rows_threads(const hd_rows_job *j, int nt) {
    double mnk = (double)j->m * (double)j->n * (double)j->k;
    if (mnk < HD_ROWS_PAR || j->n < 32) return 1;
    return nt < 1 ? 1 : nt;
}

int64_t hd_cpu_rows_part(int64_t n, int t, int nt, int64_t align) {
    if (t >= nt) return n;
    int64_t q = n / nt, r = n % nt;
    int64_t lo = q * t + (t < r ? t : r);
    return lo - lo % align;
}

void hd_cpu_rows_run(const hd_rows_job *j, hd_rows_fn f, int nt) {
    if (nt <= 1) {
        f(j, 0, j->n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t c0 = hd_cpu_rows_part(j->n, t, T, 16), c1 = hd_cpu_rows_part(j->n, t + 1, T, 16);
        if (c0 < c1) f(j, c0, c1);
    }
}
