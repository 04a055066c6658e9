/* Matmul (kind MATMUL) with numpy.matmul semantics: the shape rule has
 * already decided the output shape (1-D a: a row, 1-D b: a column, both
 * dropped from the output; batch dims broadcast) and cast both inputs to the
 * output dtype.
 *
 * f32 products of at most 4 rows (one batch) run cpu_rows.c's vector loops,
 * as the llvm compiler's do (the same bits). Other f32/f64 go to OpenBLAS
 * (sgemm/dgemm, or gemv when one side is a vector).
 * Views are passed as they are when BLAS can read them: a matrix whose
 * column stride is 1 (row-major, ld = row stride) or whose row stride is 1
 * (the transposed flag, ld = column stride). Other views are copied to
 * contiguous buffers first, once for all batches; batch dims that are
 * broadcast (stride 0) are not copied out, every batch reads the same matrix.
 * f16/bf16 are converted to f32 buffers per batch, multiplied by sgemm, and
 * converted back. Integer dtypes use a plain loop accumulating in 64 bits
 * that wraps like the output type; without BLAS (-DHODU_BLAS=OFF) f32/f64 use
 * the same blocked loop.
 *
 * Threads: OpenBLAS runs on one thread (cpu_blas.c); a large gemm is split
 * into blocks of columns or rows over the context's OpenMP threads, many
 * small batched gemms are spread over batches. The plain loops are spread
 * over (batch, row block) pairs. */
#include "cpu_kernels.h"

#include "cpu_blas.h"
#include "cpu_rows.h"

#include <limits.h>
#include <omp.h>
#include <string.h>

#ifdef HODU_HAVE_BLAS
#include <cblas.h>
#endif

enum { MM_ROWS = 4, MM_COLS = 256 };

/* Below this m*n*k a gemm runs on one thread (cpu_blas.c): batches of such
 * gemms are spread over threads instead. */
#define MM_SMALL_GEMM CPU_BLAS_PAR

/* One operand: a matrix of rows x cols with strides rs, cs (elements), and
 * for each output batch dim its stride (0 when broadcast). */
typedef struct {
    const char *data;
    int64_t rows, cols, rs, cs;
    int64_t bstride[HD_MAX_DIMS];
} mm_operand;

typedef struct {
    hd_dtype dt;
    int es;
    int nb; /* batch dims */
    int64_t bshape[HD_MAX_DIMS];
    int64_t nbatch;
    int64_t m, n, k;
    mm_operand a, b;
    char *out;           /* contiguous [batch..., m, n] */
    const hd_stop *stop; /* looked at between batches, pieces and chunks of k */
} mm_job;

/* Storage offsets of batch bi in a and b. */
static void mm_batch_offsets(const mm_job *j, int64_t bi, int64_t *oa, int64_t *ob) {
    *oa = *ob = 0;
    for (int d = j->nb - 1; d >= 0; d--) {
        int64_t i = bi % j->bshape[d];
        bi /= j->bshape[d];
        *oa += i * j->a.bstride[d];
        *ob += i * j->b.bstride[d];
    }
}

/* Describe input t as an operand; vec_row: a 1-D t is a row (else a column). */
static void mm_operand_init(mm_operand *op, const hd_tensor *t, int vec_row, const int64_t *bshape,
                            int nb) {
    int nd = t->ndim;
    memset(op, 0, sizeof *op);
    op->data = hd_tensor_data(t);
    if (nd == 1) {
        op->rows = vec_row ? 1 : t->shape[0];
        op->cols = vec_row ? t->shape[0] : 1;
        op->rs = vec_row ? 0 : t->strides[0];
        op->cs = vec_row ? t->strides[0] : 0;
        return;
    }
    op->rows = t->shape[nd - 2];
    op->cols = t->shape[nd - 1];
    op->rs = t->strides[nd - 2];
    op->cs = t->strides[nd - 1];
    int tb = nd - 2; /* t's batch dims, right-aligned to the output's */
    for (int d = 0; d < nb; d++) {
        int e = d - (nb - tb);
        op->bstride[d] = (e < 0 || (t->shape[e] == 1 && bshape[d] != 1)) ? 0 : t->strides[e];
    }
}

static void mm_job_init(mm_job *j, hd_tensor *out, hd_tensor *a, hd_tensor *b) {
    memset(j, 0, sizeof *j);
    j->dt = out->dtype;
    j->es = hd_dtype_size(out->dtype);
    j->nb = out->ndim - (a->ndim > 1) - (b->ndim > 1);
    memcpy(j->bshape, out->shape, (size_t)j->nb * sizeof(int64_t));
    j->nbatch = hd_shape_numel(j->bshape, j->nb);
    mm_operand_init(&j->a, a, 1, j->bshape, j->nb);
    mm_operand_init(&j->b, b, 0, j->bshape, j->nb);
    j->m = j->a.rows;
    j->k = j->a.cols;
    j->n = j->b.cols;
    j->out = hd_tensor_data(out);
}

/* ---- plain loops (integers, and floats without BLAS) ---- */

/* Rows [i0, i1) of one batch: C[i, :] = sum_k A[i, k] * B[k, :], in blocks of
 * MM_ROWS rows and MM_COLS columns so that a block of B rows is reused. ACC is
 * the accumulator type (uint64_t for integers, so overflow wraps). */
#define MM_LOOP(NAME, T, ACC, CVT)                                                                 \
    static void NAME(const mm_job *j, const char *pa, const char *pb, char *pc, int64_t i0,        \
                     int64_t i1) {                                                                 \
        const T *A = (const T *)pa, *B = (const T *)pb;                                            \
        T *C = (T *)pc;                                                                            \
        int64_t ars = j->a.rs, acs = j->a.cs, brs = j->b.rs, bcs = j->b.cs, n = j->n;              \
        ACC acc[MM_ROWS][MM_COLS];                                                                 \
        for (int64_t i = i0; i < i1; i += MM_ROWS) {                                               \
            int ni = (int)HD_MIN(MM_ROWS, i1 - i);                                                 \
            for (int64_t jb = 0; jb < n; jb += MM_COLS) {                                          \
                int nj = (int)HD_MIN(MM_COLS, n - jb);                                             \
                for (int r = 0; r < ni; r++)                                                       \
                    for (int c = 0; c < nj; c++) acc[r][c] = 0;                                    \
                for (int64_t k = 0; k < j->k; k++) {                                               \
                    if (!(k % HD_INTERRUPT_CHUNK) && k && hd_stop_now(j->stop)) return;            \
                    const T *brow = B + k * brs + jb * bcs;                                        \
                    for (int r = 0; r < ni; r++) {                                                 \
                        ACC av = CVT(A[(i + r) * ars + k * acs]);                                  \
                        ACC *ar = acc[r];                                                          \
                        if (bcs == 1) {                                                            \
                            _Pragma("omp simd") for (int c = 0; c < nj; c++) ar[c] +=              \
                                av * CVT(brow[c]);                                                 \
                        } else                                                                     \
                            for (int c = 0; c < nj; c++) ar[c] += av * CVT(brow[c * bcs]);         \
                    }                                                                              \
                }                                                                                  \
                for (int r = 0; r < ni; r++)                                                       \
                    for (int c = 0; c < nj; c++) C[(i + r) * n + jb + c] = (T)acc[r][c];           \
            }                                                                                      \
        }                                                                                          \
    }

#define MM_SAME(x) (x)
#define MM_WRAP(x) ((uint64_t)(int64_t)(x))
MM_LOOP(mm_loop_f32, float, float, MM_SAME)
MM_LOOP(mm_loop_f64, double, double, MM_SAME)
MM_LOOP(mm_loop_i8, int8_t, uint64_t, MM_WRAP)
MM_LOOP(mm_loop_u8, uint8_t, uint64_t, MM_WRAP)
MM_LOOP(mm_loop_i32, int32_t, uint64_t, MM_WRAP)
MM_LOOP(mm_loop_i64, int64_t, uint64_t, MM_WRAP)

typedef void (*mm_loop_fn)(const mm_job *, const char *, const char *, char *, int64_t, int64_t);

static mm_loop_fn mm_loop_for(hd_dtype dt) {
    switch (dt) {
    case HD_F32: return mm_loop_f32;
    case HD_F64: return mm_loop_f64;
    case HD_I8: return mm_loop_i8;
    case HD_U8: return mm_loop_u8;
    case HD_I32: return mm_loop_i32;
    case HD_I64: return mm_loop_i64;
    default: return NULL;
    }
}

static int mm_threads(hd_ctx *ctx, double flops) {
    if (flops < (double)CPU_PAR_MIN * 16) return 1;
    return HD_MAX(ctx->nthreads, 1);
}

/* The plain loops over work items (batch, block of MM_ROWS rows). */
static hd_status mm_plain(hd_ctx *ctx, const mm_job *j) {
    mm_loop_fn f = mm_loop_for(j->dt);
    if (!f)
        return hd_error(ctx, HD_ERR_RUNTIME, "matmul: no cpu loop for %s", hd_dtype_name(j->dt));
    int64_t blocks = (j->m + MM_ROWS - 1) / MM_ROWS, items = j->nbatch * blocks;
    int nt = mm_threads(ctx, (double)j->nbatch * j->m * j->n * j->k);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t it = 0; it < items; it++) {
        if (hd_stop_now(j->stop)) continue;
        int64_t bi = it / blocks, i0 = (it % blocks) * MM_ROWS, oa, ob;
        mm_batch_offsets(j, bi, &oa, &ob);
        f(j, j->a.data + oa * j->es, j->b.data + ob * j->es, j->out + bi * j->m * j->n * j->es, i0,
          HD_MIN(i0 + MM_ROWS, j->m));
    }
    return HD_OK;
}

/* ---- BLAS: operand copies, layouts, gemm and gemv ---- */

#ifdef HODU_HAVE_BLAS

/* Copy every distinct matrix of op (its batch dims that are not broadcast)
 * into one contiguous buffer and point op at it. *buf receives the buffer,
 * *nbytes its size, for the caller to free. */
static hd_status mm_compact(hd_ctx *ctx, const mm_job *j, mm_operand *op, char **buf,
                            size_t *nbytes) {
    int64_t cshape[HD_MAX_DIMS], cstride[HD_MAX_DIMS], mat = op->rows * op->cols, ncopy = 1;
    for (int d = j->nb - 1; d >= 0; d--) {
        cshape[d] = op->bstride[d] ? j->bshape[d] : 1;
        cstride[d] = op->bstride[d] ? ncopy * mat : 0;
        ncopy *= cshape[d];
    }
    size_t n;
    if (!hd_mul_overflow((size_t)(ncopy * mat), (size_t)j->es, &n))
        return hd_error(ctx, HD_ERR_MEMORY, "out of memory: matmul operand copy too large");
    char *dst = hd_ctx_alloc(ctx, n);
    if (!dst) return ctx->status;
    int es = j->es;
    for (int64_t c = 0; c < ncopy; c++) {
        int64_t off = 0, rem = c;
        for (int d = j->nb - 1; d >= 0; d--) {
            off += (rem % cshape[d]) * op->bstride[d];
            rem /= cshape[d];
        }
        const char *src = op->data + off * es;
        char *q = dst + (size_t)(c * mat) * (size_t)es;
        for (int64_t r = 0; r < op->rows; r++)
            for (int64_t col = 0; col < op->cols; col++)
                memcpy(q + (r * op->cols + col) * es, src + (r * op->rs + col * op->cs) * es,
                       (size_t)es);
    }
    op->data = dst;
    op->rs = op->cols;
    op->cs = 1;
    memcpy(op->bstride, cstride, sizeof cstride);
    *buf = dst;
    *nbytes = n;
    return HD_OK;
}

/* How BLAS reads op: 1 and the transpose flag and leading dimension, or 0
 * if the strides need a copy. A dim of size 1 may have any stride. */
static int mm_layout(const mm_operand *op, enum CBLAS_TRANSPOSE *tr, int64_t *ld) {
    int64_t r = op->rows, c = op->cols;
    if ((c == 1 || op->cs == 1) && (r == 1 || op->rs >= HD_MAX(1, c))) {
        *tr = CblasNoTrans;
        *ld = r == 1 ? HD_MAX(1, c) : op->rs;
    } else if ((r == 1 || op->rs == 1) && (c == 1 || op->cs >= HD_MAX(1, r))) {
        *tr = CblasTrans;
        *ld = c == 1 ? HD_MAX(1, r) : op->cs;
    } else {
        return 0;
    }
    return *ld <= INT_MAX;
}

/* One batch: C (m x n, contiguous) = A B, through gemv when a side is a
 * vector (b a column: y = A x; a a row: y = B^T x), else gemm. */
static void mm_blas_one(const mm_job *j, int nt, enum CBLAS_TRANSPOSE ta, int lda,
                        enum CBLAS_TRANSPOSE tb, int ldb, const char *pa, const char *pb,
                        char *pc) {
    int m = (int)j->m, n = (int)j->n, k = (int)j->k, f64 = j->dt == HD_F64;
    cpu_blas_args g = {
        f64, ta == CblasTrans, tb == CblasTrans, m, n, k, 1.0, pa, lda, pb, ldb, 0.0, pc, n, 0};
    if (cpu_blas_matvec(&g)) return;
    cpu_blas_gemm(nt, f64, ta == CblasTrans, tb == CblasTrans, m, n, k, 1.0, pa, lda, pb, ldb, 0.0,
                  pc, n, j->stop);
}

static void mm_blas_batch(const mm_job *j, int nt, int64_t bi, enum CBLAS_TRANSPOSE ta, int lda,
                          enum CBLAS_TRANSPOSE tb, int ldb) {
    int64_t oa, ob;
    mm_batch_offsets(j, bi, &oa, &ob);
    mm_blas_one(j, nt, ta, lda, tb, ldb, j->a.data + oa * j->es, j->b.data + ob * j->es,
                j->out + bi * j->m * j->n * j->es);
}

/* f32/f64 through BLAS; operands BLAS cannot read are copied first. */
static hd_status mm_blas(hd_ctx *ctx, mm_job *j) {
    if (j->m > INT_MAX || j->n > INT_MAX || j->k > INT_MAX) return mm_plain(ctx, j);
    char *buf[2] = {NULL, NULL};
    size_t nbytes[2] = {0, 0};
    enum CBLAS_TRANSPOSE ta, tb;
    int64_t lda, ldb;
    hd_status st = HD_OK;
    if (!mm_layout(&j->a, &ta, &lda)) {
        if ((st = mm_compact(ctx, j, &j->a, &buf[0], &nbytes[0]))) goto done;
        mm_layout(&j->a, &ta, &lda);
    }
    if (!mm_layout(&j->b, &tb, &ldb)) {
        if ((st = mm_compact(ctx, j, &j->b, &buf[1], &nbytes[1]))) goto done;
        mm_layout(&j->b, &tb, &ldb);
    }
    double mnk = (double)j->m * j->n * j->k;
    /* many small products: one per thread; else each product split */
    int nt = mnk < MM_SMALL_GEMM && j->nbatch > 1 ? mm_threads(ctx, mnk * j->nbatch) : 1;
    if (nt > 1) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t bi = 0; bi < j->nbatch; bi++)
            if (!hd_stop_now(j->stop)) mm_blas_batch(j, 1, bi, ta, (int)lda, tb, (int)ldb);
    } else {
        for (int64_t bi = 0; bi < j->nbatch && !hd_stop_now(j->stop); bi++)
            mm_blas_batch(j, HD_MAX(ctx->nthreads, 1), bi, ta, (int)lda, tb, (int)ldb);
    }
done:
    for (int i = 0; i < 2; i++)
        if (buf[i]) hd_ctx_free(ctx, buf[i], nbytes[i]);
    return st;
}
#endif

/* ---- f16 / bf16 ---- */

/* Convert the rows x cols matrix at p (strides rs, cs) to contiguous f32. */
static void mm_to_f32(hd_dtype dt, const mm_operand *op, const char *p, float *dst) {
    const uint16_t *h = (const uint16_t *)p;
    for (int64_t r = 0; r < op->rows; r++)
        for (int64_t c = 0; c < op->cols; c++) {
            uint16_t v = h[r * op->rs + c * op->cs];
            dst[r * op->cols + c] = dt == HD_F16 ? hd_f16_to_f32(v) : hd_bf16_to_f32(v);
        }
}

/* C = A B for contiguous f32 buffers (one batch). */
static hd_status mm_f32_contig(hd_ctx *ctx, const mm_job *j, const float *a, const float *b,
                               float *c) {
    mm_job s = *j;
    s.dt = HD_F32;
    s.es = 4;
    s.nb = 0;
    s.nbatch = 1;
    s.a.data = (const char *)a;
    s.a.rs = j->k, s.a.cs = 1;
    s.b.data = (const char *)b;
    s.b.rs = j->n, s.b.cs = 1;
    s.out = (char *)c;
#ifdef HODU_HAVE_BLAS
    if (cpu_blas_ready()) return mm_blas(ctx, &s);
#endif
    return mm_plain(ctx, &s);
}

/* Half types: per batch, convert to f32 (a batch that reads the same matrix
 * as the previous one reuses it), multiply in f32, convert back. */
static hd_status mm_half(hd_ctx *ctx, const mm_job *j) {
    size_t na = (size_t)(j->m * j->k), nbb = (size_t)(j->k * j->n), nc = (size_t)(j->m * j->n);
    size_t total = (na + nbb + nc) * sizeof(float);
    float *fa = hd_ctx_alloc(ctx, total);
    if (!fa) return ctx->status;
    float *fb = fa + na, *fc = fb + nbb;
    int64_t last_a = -1, last_b = -1;
    hd_status st = HD_OK;
    for (int64_t bi = 0; bi < j->nbatch && !st && !hd_stop_now(j->stop); bi++) {
        int64_t oa, ob;
        mm_batch_offsets(j, bi, &oa, &ob);
        if (oa != last_a) mm_to_f32(j->dt, &j->a, j->a.data + oa * 2, fa);
        if (ob != last_b) mm_to_f32(j->dt, &j->b, j->b.data + ob * 2, fb);
        last_a = oa, last_b = ob;
        st = mm_f32_contig(ctx, j, fa, fb, fc);
        uint16_t *dst = (uint16_t *)j->out + bi * (int64_t)nc;
        for (size_t i = 0; i < nc && !st; i++)
            dst[i] = j->dt == HD_F16 ? hd_f32_to_f16(fc[i]) : hd_f32_to_bf16(fc[i]);
    }
    hd_ctx_free(ctx, fa, total);
    return st;
}

/* One f32 product of few rows through cpu_rows (the llvm compiler's gemm
 * steps run the same loops): 1 if done, 0 if it does not apply. */
static int mm_rows(hd_ctx *ctx, const mm_job *j) {
    if (j->dt != HD_F32 || j->nbatch != 1 || j->m > HD_ROWS_M) return 0;
    hd_rows_job r = {(const float *)j->a.data,
                     (const float *)j->b.data,
                     (float *)j->out,
                     j->m,
                     j->n,
                     j->k,
                     j->a.rs,
                     j->a.cs,
                     j->b.rs,
                     j->b.cs,
                     j->stop};
    hd_rows_fn f = hd_cpu_rows_fn(&r);
    if (!f) return 0;
    hd_cpu_rows_run(&r, f, hd_cpu_rows_threads(&r, ctx->nthreads));
    return 1;
}

hd_status hd_cpu_matmul(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs) {
    HD_UNUSED(op);
    HD_UNUSED(nin);
    HD_UNUSED(attrs);
    mm_job j;
    mm_job_init(&j, out, in[0], in[1]);
    j.stop = &ctx->stop;
    if (j.k == 0) { /* empty sums: zeros (all-zero bytes in every dtype) */
        memset(j.out, 0, hd_tensor_nbytes(out));
        return HD_OK;
    }
    hd_status st;
    if (mm_rows(ctx, &j))
        st = HD_OK;
    else if (j.dt == HD_F16 || j.dt == HD_BF16)
        st = mm_half(ctx, &j);
#ifdef HODU_HAVE_BLAS
    else if ((j.dt == HD_F32 || j.dt == HD_F64) && cpu_blas_ready())
        st = mm_blas(ctx, &j);
#endif
    else
        st = mm_plain(ctx, &j);
    /* a stopped product is unfinished: the op fails */
    if (!st && hd_ctx_interrupted(ctx)) st = hd_ctx_stop_error(ctx);
    return st;
}

int hd_cpu_matmul_supports(hd_op op, hd_dtype dt) {
    return op == HD_OP_MATMUL && (unsigned)dt < HD_DTYPE_COUNT && dt != HD_BOOL;
}
