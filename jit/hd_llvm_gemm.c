/* The llvm compiler's matmul: what hd_main calls for a gemm step, a 2-D
 * f32 matmul (a 1-D or 2-D, b 2-D; hd_plan.c), together with the
 * elementwise kernel after it (bias, activation, residual) as its
 * epilogue.
 *
 *  - Few rows (m <= GEMM_SMALL_M: batch-1 inference, where the product is
 *    a matrix-vector one): vector loops of our own over the weights, no
 *    call into OpenBLAS (whose gemv and small gemm pay set-up and
 *    threading decisions per call). b row-major: blocks of columns kept in
 *    registers while k runs down the rows (axpy form); b transposed (a
 *    Linear layer's [out, in] weight): dot products along its rows. Sums
 *    are f32 with FMA where the build has it, so the last bits differ from
 *    OpenBLAS's.
 *  - Else OpenBLAS sgemm, one call per thread: the context's threads
 *    (OpenMP) each multiply a block of columns with OpenBLAS on one
 *    thread, so no OpenBLAS thread ever waits beside an OpenMP one; then,
 *    in the same parallel region, each runs the epilogue on a block of
 *    the output's rows while the product is still in cache.
 *  - Operands BLAS cannot read (neither stride 1) run the cpu kernel, then
 *    the epilogue.
 *
 * The epilogue is a generated kernel hd_k<i>(slots, begin, end) whose
 * outermost loop of `range` units walks the output's elements or rows in
 * order, so any split of [0, range) is valid once the product is done. */
#include "hd_llvm.h"

#include "cpu_blas.h"

#if HODU_HAVE_LLVM

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#ifdef HODU_HAVE_BLAS
#include <cblas.h>
#endif

#if defined(__FMA__)
#include <immintrin.h>
#endif

/* Rows up to which the own vector loops run instead of sgemm. */
#define GEMM_SMALL_M 4
/* m * n * k from which the product is split across threads (about 10 us
 * of work on one core): below, waking a second thread costs more than it
 * saves as soon as another process wants the core (the d2l MLP's first
 * layer, 2^17, ran 5-16 us on 2 threads of a busy 2-core machine against
 * 8 us on one). */
#define GEMM_SMALL_PAR (1 << 20)
#define GEMM_PAR       CPU_BLAS_PAR
/* Elements from which an epilogue run alone is split (as hd_main does). */
#define GEMM_EPI_PAR (1 << 16)

typedef float gemm_v8 __attribute__((vector_size(32)));
typedef float gemm_v8u __attribute__((vector_size(32), aligned(4))); /* unaligned access */

/* One product C[m, n] = A[m, k] B[k, n]; strides in elements, C
 * contiguous. */
typedef struct gemm_job {
    const float *a, *b;
    float *c;
    int64_t m, n, k;
    int64_t ars, acs, brs, bcs;
} gemm_job;

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
static inline __attribute__((always_inline)) void gemm_axpy_block(const gemm_job *j, int64_t j0,
                                                                  int MR, int NV) {
    gemm_v8 acc[GEMM_SMALL_M][8];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) acc[r][v] = gemm_splat(0.0f);
    const float *bp = j->b + j0, *ap = j->a;
    for (int64_t k = 0; k < j->k; k++, bp += j->brs, ap += j->acs) {
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
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) *(gemm_v8u *)(j->c + r * j->n + j0 + 8 * v) = acc[r][v];
}

/* Column col of C for every row, any strides: four partial sums over k. */
static void gemm_column(const gemm_job *j, int64_t col) {
    for (int64_t r = 0; r < j->m; r++) {
        const float *ap = j->a + r * j->ars, *bp = j->b + col * j->bcs;
        float s[4] = {0, 0, 0, 0};
        int64_t k = 0;
        for (; k + 4 <= j->k; k += 4)
            for (int q = 0; q < 4; q++)
                s[q] = gemm_fma1(ap[(k + q) * j->acs], bp[(k + q) * j->brs], s[q]);
        for (; k < j->k; k++) s[0] = gemm_fma1(ap[k * j->acs], bp[k * j->brs], s[0]);
        j->c[r * j->n + col] = (s[0] + s[1]) + (s[2] + s[3]);
    }
}

/* Columns [c0, c1) of C, b row-major (bcs == 1): blocks of 8 NV columns
 * (NV by rows: 8 accumulators in all), then 8, then one at a time. */
#define GEMM_AXPY(NAME, MR, NV)                                                                    \
    static void NAME(const gemm_job *j, int64_t c0, int64_t c1) {                                  \
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
static inline __attribute__((always_inline)) void gemm_dot_block(const gemm_job *j, int64_t c,
                                                                 int MR, int NC) {
    gemm_v8 acc[GEMM_SMALL_M][4];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int q = 0; q < NC; q++) acc[r][q] = gemm_splat(0.0f);
    const float *bp = j->b + c * j->bcs;
    int64_t k = 0;
    for (; k + 8 <= j->k; k += 8) {
        gemm_v8 x[GEMM_SMALL_M];
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) x[r] = *(const gemm_v8u *)(j->a + r * j->ars + k);
#pragma GCC unroll 8
        for (int q = 0; q < NC; q++) {
            gemm_v8 w = *(const gemm_v8u *)(bp + q * j->bcs + k);
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) acc[r][q] = gemm_fma8(x[r], w, acc[r][q]);
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
    static void NAME(const gemm_job *j, int64_t c0, int64_t c1) {                                  \
        int64_t c = c0;                                                                            \
        for (; c + (NC) <= c1; c += (NC)) gemm_dot_block(j, c, MR, NC);                            \
        for (; c < c1; c++) gemm_dot_block(j, c, MR, 1);                                           \
    }
GEMM_DOT(gemm_dot1, 1, 4)
GEMM_DOT(gemm_dot2, 2, 4)
GEMM_DOT(gemm_dot3, 3, 2)
GEMM_DOT(gemm_dot4, 4, 2)

typedef void (*gemm_cols_fn)(const gemm_job *j, int64_t c0, int64_t c1);

/* The vector loops for j, or NULL when they do not apply. */
static gemm_cols_fn gemm_small_fn(const gemm_job *j) {
    static const gemm_cols_fn axpy[GEMM_SMALL_M] = {gemm_axpy1, gemm_axpy2, gemm_axpy3, gemm_axpy4};
    static const gemm_cols_fn dot[GEMM_SMALL_M] = {gemm_dot1, gemm_dot2, gemm_dot3, gemm_dot4};
    if (j->m < 1 || j->m > GEMM_SMALL_M) return NULL;
    if (j->bcs == 1 || j->n < 8) return axpy[j->m - 1];
    if (j->brs == 1 && (j->acs == 1 || j->k == 1)) return dot[j->m - 1];
    return NULL;
}

/* ---- threads ---- */

/* Start of part t of nt of [0, n), a multiple of align (but the ends). */
static int64_t gemm_part(int64_t n, int t, int nt, int64_t align) {
    if (t >= nt) return n;
    int64_t q = n / nt, r = n % nt;
    int64_t lo = q * t + (t < r ? t : r);
    return lo - lo % align;
}

/* The epilogue's part t of nt (after the whole product is done). */
static void gemm_epi_part(hd_llvm_kernel_fn epi, void **slots, int64_t range, int64_t align, int t,
                          int nt) {
    int64_t lo = gemm_part(range, t, nt, align), hi = gemm_part(range, t + 1, nt, align);
    if (lo < hi) epi(slots, lo, hi);
}

/* Units of the epilogue's range are elements when it covers them all in
 * one loop (split on 16-element boundaries), else rows. */
static int64_t gemm_epi_align(const gemm_job *j, int64_t range) {
    return range == j->m * j->n ? 16 : 1;
}

/* The epilogue alone, split across threads when it is large. */
static void gemm_epilogue(hd_llvm_rt *rt, const gemm_job *j, hd_llvm_kernel_fn epi, void **slots,
                          int64_t range) {
    if (!epi || range <= 0) return;
    if (j->m * j->n >= GEMM_EPI_PAR && range >= 2)
        hd_llvm_rt_parallel(rt, epi, slots, range, gemm_epi_align(j, range));
    else
        epi(slots, 0, range);
}

/* f(columns) over nt threads, 16-column parts, then the epilogue split
 * the same way, in one parallel region. */
static void gemm_threads(const gemm_job *j, int nt,
                         void (*f)(const gemm_job *, int64_t, int64_t, const void *),
                         const void *ud, hd_llvm_kernel_fn epi, void **slots, int64_t range) {
    int64_t align = gemm_epi_align(j, range);
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t c0 = gemm_part(j->n, t, T, 16), c1 = gemm_part(j->n, t + 1, T, 16);
        if (c0 < c1) f(j, c0, c1, ud);
        if (epi && range > 0) {
#pragma omp barrier
            gemm_epi_part(epi, slots, range, align, t, T);
        }
    }
}

static int gemm_nthreads(const hd_llvm_rt *rt, const gemm_job *j, double min) {
    double mnk = (double)j->m * (double)j->n * (double)j->k;
    int nt = rt->ctx->nthreads;
    if (mnk < min || j->n < 32) return 1;
    return nt < 1 ? 1 : nt;
}

static void gemm_small_cols(const gemm_job *j, int64_t c0, int64_t c1, const void *ud) {
    gemm_cols_fn f;
    memcpy(&f, ud, sizeof f);
    f(j, c0, c1);
}

/* ---- sgemm ---- */

#ifdef HODU_HAVE_BLAS

/* BLAS's reading of an operand of r x c with strides rs, cs: 0 if it needs
 * a copy (neither stride is 1, or a leading dimension out of range). */
static int gemm_layout(int64_t r, int64_t c, int64_t rs, int64_t cs, enum CBLAS_TRANSPOSE *tr,
                       int64_t *ld) {
    if ((c == 1 || cs == 1) && (r == 1 || rs >= HD_MAX(1, c))) {
        *tr = CblasNoTrans;
        *ld = r == 1 ? HD_MAX(1, c) : rs;
    } else if ((r == 1 || rs == 1) && (c == 1 || cs >= HD_MAX(1, r))) {
        *tr = CblasTrans;
        *ld = c == 1 ? HD_MAX(1, r) : cs;
    } else {
        return 0;
    }
    return *ld <= INT_MAX;
}

typedef struct gemm_blas {
    enum CBLAS_TRANSPOSE ta, tb;
    int lda, ldb;
} gemm_blas;

static int gemm_blas_init(const gemm_job *j, gemm_blas *bl) {
    int64_t lda, ldb;
    if (j->m > INT_MAX || j->n > INT_MAX || j->k > INT_MAX) return 0;
    if (!gemm_layout(j->m, j->k, j->ars, j->acs, &bl->ta, &lda) ||
        !gemm_layout(j->k, j->n, j->brs, j->bcs, &bl->tb, &ldb))
        return 0;
    bl->lda = (int)lda;
    bl->ldb = (int)ldb;
    return 1;
}

static void gemm_blas_cols(const gemm_job *j, int64_t c0, int64_t c1, const void *ud) {
    const gemm_blas *bl = ud;
    cblas_sgemm(CblasRowMajor, bl->ta, bl->tb, (int)j->m, (int)(c1 - c0), (int)j->k, 1.0f, j->a,
                bl->lda, j->b + c0 * j->bcs, bl->ldb, 0.0f, j->c + c0, (int)j->n);
}

/* sgemm on one thread per part of the columns; 0 if BLAS cannot read the
 * operands. */
static int gemm_run_blas(hd_llvm_rt *rt, const gemm_job *j, hd_llvm_kernel_fn epi, void **slots,
                         int64_t range) {
    gemm_blas bl;
    if (!gemm_blas_init(j, &bl)) return 0;
    cpu_blas_init();
    int nt = gemm_nthreads(rt, j, GEMM_PAR);
    if (nt > 1) {
        gemm_threads(j, nt, gemm_blas_cols, &bl, epi, slots, range);
        return 1;
    }
    gemm_blas_cols(j, 0, j->n, &bl);
    gemm_epilogue(rt, j, epi, slots, range);
    return 1;
}

#else

static int gemm_run_blas(hd_llvm_rt *rt, const gemm_job *j, hd_llvm_kernel_fn epi, void **slots,
                         int64_t range) {
    HD_UNUSED(rt), HD_UNUSED(j), HD_UNUSED(epi), HD_UNUSED(slots), HD_UNUSED(range);
    return 0;
}

#endif

/* ---- entry ---- */

static void gemm_job_init(gemm_job *j, const hd_tensor *a, const hd_tensor *b, hd_tensor *c) {
    j->a = hd_tensor_data(a);
    j->b = hd_tensor_data(b);
    j->c = hd_tensor_data(c);
    j->m = a->ndim == 2 ? a->shape[0] : 1;
    j->k = a->shape[a->ndim - 1];
    j->n = b->shape[1];
    j->acs = a->strides[a->ndim - 1];
    j->ars = a->ndim == 2 ? a->strides[0] : j->k;
    j->brs = b->strides[0];
    j->bcs = b->strides[1];
}

/* The vector loops, on threads when the product is large enough. */
static void gemm_run_small(hd_llvm_rt *rt, const gemm_job *j, gemm_cols_fn f, hd_llvm_kernel_fn epi,
                           void **slots, int64_t range) {
    int nt = gemm_nthreads(rt, j, GEMM_SMALL_PAR);
    if (nt > 1) {
        gemm_threads(j, nt, gemm_small_cols, &f, epi, slots, range);
        return;
    }
    f(j, 0, j->n);
    gemm_epilogue(rt, j, epi, slots, range);
}

int32_t hd_llvm_rt_gemm(void *p, int32_t node, hd_llvm_kernel_fn epi, void **slots, int64_t range) {
    hd_llvm_rt *rt = p;
    const hd_ir_node *n = &rt->g->nodes[node];
    hd_tensor **in = rt->node_in[node];
    gemm_job j;
    gemm_job_init(&j, in[0], in[1], rt->vals[n->out]);
    gemm_cols_fn small = gemm_small_fn(&j);
    if (j.k == 0) {
        memset(j.c, 0, (size_t)(j.m * j.n) * sizeof(float));
        gemm_epilogue(rt, &j, epi, slots, range);
    } else if (small) {
        gemm_run_small(rt, &j, small, epi, slots, range);
    } else if (!gemm_run_blas(rt, &j, epi, slots, range)) {
        int32_t st = hd_llvm_rt_node(rt, node);
        if (st) return st;
        gemm_epilogue(rt, &j, epi, slots, range);
    }
    return 0;
}

#endif /* HODU_HAVE_LLVM */
