/* The llvm compiler's matmul: what hd_main calls for a gemm step, a 2-D
 * f32 matmul (a 1-D or 2-D, b 2-D; hd_plan.c), together with the
 * elementwise kernel after it (bias, activation, residual) as its
 * epilogue.
 *
 *  - Few rows (m <= HD_ROWS_M: batch-1 inference, where the product is
 *    a matrix-vector one): the vector loops of backends/cpu/cpu_rows.c,
 *    which the eager matmul runs too (the same bits), no call into
 *    OpenBLAS.
 *  - Else OpenBLAS sgemm, one call per thread: the context's threads
 *    (OpenMP) each multiply a block of rows or columns with OpenBLAS on
 *    one thread, split as the eager matmul splits (cpu_blas_split_of),
 *    so no OpenBLAS thread ever waits beside an OpenMP one; then, in the
 *    same parallel region, each runs the epilogue on a block of the
 *    output's rows while the product is still in cache.
 *  - Operands BLAS cannot read (neither stride 1) run the cpu kernel, then
 *    the epilogue.
 *
 * The epilogue is a generated kernel hd_k<i>(slots, begin, end) whose
 * outermost loop of `range` units walks the output's elements or rows in
 * order, so any split of [0, range) is valid once the product is done. */
#include "hd_llvm.h"

#include "cpu_blas.h"
#include "cpu_rows.h"

#if HODU_HAVE_LLVM

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#ifdef HODU_HAVE_BLAS
#include <cblas.h>
#endif

/* Elements from which an epilogue run alone is split (as hd_main does). */
#define GEMM_EPI_PAR (1 << 16)

/* ---- threads ---- */

typedef hd_rows_job gemm_job;
#define gemm_part hd_cpu_rows_part

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

/* f(part) over nt threads, parts of 16 columns (or rows: split), then
 * the epilogue split its own way, in one parallel region. */
static void gemm_threads(const gemm_job *j, int nt, cpu_blas_split split,
                         void (*f)(const gemm_job *, int64_t, int64_t, const void *),
                         const void *ud, hd_llvm_kernel_fn epi, void **slots, int64_t range) {
    int64_t align = gemm_epi_align(j, range), len = split == CPU_BLAS_SPLIT_ROWS ? j->m : j->n;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t c0 = cpu_blas_part(len, t, T), c1 = cpu_blas_part(len, t + 1, T);
        if (c0 < c1) f(j, c0, c1, ud);
        if (epi && range > 0) {
#pragma omp barrier
            gemm_epi_part(epi, slots, range, align, t, T);
        }
    }
}

static void gemm_small_cols(const gemm_job *j, int64_t c0, int64_t c1, const void *ud) {
    hd_rows_fn f;
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
    cpu_blas_args args;
    cpu_blas_split split;
} gemm_blas;

static int gemm_blas_init(const gemm_job *j, gemm_blas *bl) {
    enum CBLAS_TRANSPOSE ta, tb;
    int64_t lda, ldb;
    if (j->m > INT_MAX || j->n > INT_MAX || j->k > INT_MAX) return 0;
    if (!gemm_layout(j->m, j->k, j->ars, j->acs, &ta, &lda) ||
        !gemm_layout(j->k, j->n, j->brs, j->bcs, &tb, &ldb))
        return 0;
    cpu_blas_args g = {.ta = ta == CblasTrans,
                       .tb = tb == CblasTrans,
                       .m = j->m,
                       .n = j->n,
                       .k = j->k,
                       .alpha = 1.0,
                       .a = j->a,
                       .lda = lda,
                       .b = j->b,
                       .ldb = ldb,
                       .c = j->c,
                       .ldc = j->n};
    cpu_blas_choose(&g);
    bl->args = g;
    return 1;
}

static void gemm_blas_part(const gemm_job *j, int64_t lo, int64_t hi, const void *ud) {
    const gemm_blas *bl = ud;
    HD_UNUSED(j);
    cpu_blas_gemm_part(&bl->args, bl->split, lo, hi);
}

/* sgemm on one thread per part of the rows or columns, split as eager's
 * cpu_blas_gemm splits (cpu_blas_split_of); 0 if BLAS cannot read the
 * operands. */
static int gemm_run_blas(hd_llvm_rt *rt, const gemm_job *j, hd_llvm_kernel_fn epi, void **slots,
                         int64_t range) {
    gemm_blas bl;
    if (!cpu_blas_ready() || !gemm_blas_init(j, &bl)) return 0;
    if (cpu_blas_matvec(&bl.args)) { /* as the eager matmul does */
        gemm_epilogue(rt, j, epi, slots, range);
        return 1;
    }
    int nt = rt->ctx->nthreads;
    bl.split = cpu_blas_split_of(nt, j->m, j->n, j->k);
    if (bl.split != CPU_BLAS_SPLIT_NONE) {
        gemm_threads(j, nt, bl.split, gemm_blas_part, &bl, epi, slots, range);
        return 1;
    }
    cpu_blas_gemm_part(&bl.args, CPU_BLAS_SPLIT_COLS, 0, j->n);
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
static void gemm_run_small(hd_llvm_rt *rt, const gemm_job *j, hd_rows_fn f, hd_llvm_kernel_fn epi,
                           void **slots, int64_t range) {
    int nt = hd_cpu_rows_threads(j, rt->ctx->nthreads);
    if (nt > 1) {
        gemm_threads(j, nt, CPU_BLAS_SPLIT_COLS, gemm_small_cols, &f, epi, slots, range);
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
    j.stop = &rt->ctx->stop;
    hd_rows_fn small = hd_cpu_rows_fn(&j);
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
    if (hd_ctx_interrupted(rt->ctx)) return (int32_t)hd_ctx_stop_error(rt->ctx);
    return 0;
}

#endif /* HODU_HAVE_LLVM */
