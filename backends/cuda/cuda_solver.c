/* The linalg ops (hd_ops.def) through cuSOLVER's dense routines, opened at
 * run time like cuBLAS (cuda_loader.c): the factorisations run on the
 * device, one matrix of the batch per call, in stream order with the rest
 * of the work. Where the library is missing, or a matrix is empty,
 * cuda_ops.c runs the cpu's LAPACK kernels on host copies instead.
 *
 * cuSOLVER is column-major, as LAPACK, and the same reading as the cpu
 * kernels' (cpu_linalg_tmpl.h) holds: a row-major buffer read column-major
 * is its transpose. So inv and det factorise the buffer as it comes, the
 * symmetric routines read the row-major lower triangle as the column-major
 * upper one, and qr and svd work on column-major copies. One small module
 * (sol_src) moves matrices between the layouts on the device (la_copy, a
 * strided copy that may keep one triangle), makes identities and reduces
 * the LU factors to det and slogdet, so nothing but the info words (one
 * int per matrix, read once per op) comes back to the host. */
#if HODU_HAVE_CUDA
#include "cuda_int.h"
#include "hd_backend.h"

#include <stdio.h>
#include <string.h>

static const char sol_src[] =
    "template <class T>\n"
    "__device__ void la_copy_t(T *y, const T *c, long long rows, long long cols,\n"
    "    long long batch, long long ys, long long yi, long long yj, long long cs,\n"
    "    long long ci, long long cj, int mask) {\n"
    "  long long per = rows * cols, n = per * batch;\n"
    "  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n;\n"
    "       t += (long long)gridDim.x * blockDim.x) {\n"
    "    long long b = t / per, r = t % per, i = r / cols, j = r % cols;\n"
    "    int keep = mask == 0 || (mask == 1 ? j <= i : j >= i);\n"
    "    y[b * ys + i * yi + j * yj] = keep ? c[b * cs + i * ci + j * cj] : (T)0;\n"
    "  }\n"
    "}\n"
    "template <class T>\n"
    "__device__ void la_eye_t(T *y, long long n, long long batch) {\n"
    "  long long per = n * n, total = per * batch;\n"
    "  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;\n"
    "       t += (long long)gridDim.x * blockDim.x)\n"
    "    y[t] = (t % per) % (n + 1) == 0 ? (T)1 : (T)0;\n"
    "}\n"
    "template <class T>\n"
    "__device__ void la_det_t(T *y, const T *lu, const int *ipiv, long long n,\n"
    "    long long batch, int slog) {\n"
    "  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < batch;\n"
    "       b += (long long)gridDim.x * blockDim.x) {\n"
    "    const T *a = lu + b * n * n;\n"
    "    const int *p = ipiv + b * n;\n"
    "    double prod = 1.0, logabs = 0.0;\n"
    "    int odd = 0, zero = 0;\n"
    "    for (long long i = 0; i < n; i++) {\n"
    "      double u = (double)a[i * n + i];\n"
    "      odd ^= (p[i] != i + 1) ^ (u < 0);\n"
    "      zero |= u == 0;\n"
    "      prod *= fabs(u);\n"
    "      logabs += log(fabs(u));\n"
    "    }\n"
    "    double sign = zero ? 0.0 : odd ? -1.0 : 1.0;\n"
    "    if (slog) {\n"
    "      y[2 * b] = (T)sign;\n"
    "      y[2 * b + 1] = (T)logabs;\n"
    "    } else {\n"
    "      y[b] = (T)(sign * prod);\n"
    "    }\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void la_copy_f32(float *y, const float *c, long long rows,\n"
    "    long long cols, long long batch, long long ys, long long yi, long long yj,\n"
    "    long long cs, long long ci, long long cj, int mask) {\n"
    "  la_copy_t(y, c, rows, cols, batch, ys, yi, yj, cs, ci, cj, mask);\n"
    "}\n"
    "extern \"C\" __global__ void la_copy_f64(double *y, const double *c, long long rows,\n"
    "    long long cols, long long batch, long long ys, long long yi, long long yj,\n"
    "    long long cs, long long ci, long long cj, int mask) {\n"
    "  la_copy_t(y, c, rows, cols, batch, ys, yi, yj, cs, ci, cj, mask);\n"
    "}\n"
    "extern \"C\" __global__ void la_eye_f32(float *y, long long n, long long batch) {\n"
    "  la_eye_t(y, n, batch);\n"
    "}\n"
    "extern \"C\" __global__ void la_eye_f64(double *y, long long n, long long batch) {\n"
    "  la_eye_t(y, n, batch);\n"
    "}\n"
    "extern \"C\" __global__ void la_det_f32(float *y, const float *lu, const int *ipiv,\n"
    "    long long n, long long batch, int slog) {\n"
    "  la_det_t(y, lu, ipiv, n, batch, slog);\n"
    "}\n"
    "extern \"C\" __global__ void la_det_f64(double *y, const double *lu, const int *ipiv,\n"
    "    long long n, long long batch, int slog) {\n"
    "  la_det_t(y, lu, ipiv, n, batch, slog);\n"
    "}\n";

#define SOL_SCRATCH_MAX 8

typedef struct sol_job {
    hd_ctx *ctx;
    hd_cuda_dev *d;
    int device;
    const hd_cuda_solver_fns *f;
    hd_op op;
    int f64;
    size_t es;              /* element size */
    int64_t m, n, k, batch; /* matrices m x n; solve's right-hand sides */
    int64_t outlen;         /* result elements per matrix */
    int full;
    CUdeviceptr info;  /* one int per matrix: the factorisation's */
    CUdeviceptr info2; /* one int: getrs' and orgqr's (argument checks) */
    CUdeviceptr scratch[SOL_SCRATCH_MAX];
    size_t sizes[SOL_SCRATCH_MAX];
    int nscratch;
} sol_job;

static CUdeviceptr sol_alloc(sol_job *j, size_t nbytes) {
    if (j->nscratch == SOL_SCRATCH_MAX) {
        hd_error(j->ctx, HD_ERR_RUNTIME, "internal error: %s needs more scratch",
                 hd_op_name(j->op));
        return 0;
    }
    nbytes = nbytes ? nbytes : 1;
    CUdeviceptr p = hd_cuda_scratch(j->ctx, j->device, nbytes);
    if (p) {
        j->scratch[j->nscratch] = p;
        j->sizes[j->nscratch++] = nbytes;
    }
    return p;
}

static void sol_release(sol_job *j) {
    for (int i = 0; i < j->nscratch; i++)
        hd_cuda_scratch_free(j->ctx, j->device, j->scratch[i], j->sizes[i]);
    j->nscratch = 0;
}

/* The address of element e of t's buffer (t contiguous). */
static CUdeviceptr sol_at(const hd_tensor *t, int64_t e) {
    return (CUdeviceptr)(uintptr_t)hd_tensor_data(t) + (CUdeviceptr)e * hd_dtype_size(t->dtype);
}

static hd_status sol_status(sol_job *j, cusolverStatus_t r, const char *what) {
    if (r == CUSOLVER_STATUS_SUCCESS) return HD_OK;
    return hd_error(j->ctx, r == 2 ? HD_ERR_MEMORY : HD_ERR_RUNTIME,
                    "cuda: %s: cusolverDn%c%s failed (status %d)", hd_op_name(j->op),
                    j->f64 ? 'D' : 'S', what, (int)r);
}

static hd_status sol_handle(hd_ctx *ctx, hd_cuda_dev *d);

int hd_cuda_solver_ready(hd_ctx *ctx, hd_cuda_dev *d) {
    if (d->solver) return 1;
    if (d->solver_failed || !hd_cuda_api_get()->sol_ok) return 0;
    if (sol_handle(ctx, d)) {
        hd_error_clear(ctx);
        d->solver_failed = 1;
    }
    return d->solver != NULL;
}

static hd_status sol_handle(hd_ctx *ctx, hd_cuda_dev *d) {
    const hd_cuda_api *a = hd_cuda_api_get();
    if (d->solver) return HD_OK;
    cusolverStatus_t r = a->sol_create(&d->solver);
    if (r != CUSOLVER_STATUS_SUCCESS) {
        d->solver = NULL;
        return hd_error(ctx, r == 2 ? HD_ERR_MEMORY : HD_ERR_RUNTIME,
                        "cuda: cusolverDnCreate failed (status %d)", (int)r);
    }
    if (a->sol_set_stream(d->solver, d->stream) != CUSOLVER_STATUS_SUCCESS) {
        a->sol_destroy(d->solver);
        d->solver = NULL;
        return hd_error(ctx, HD_ERR_RUNTIME, "cuda: cusolverDnSetStream failed");
    }
    return HD_OK;
}

/* ---- the helper kernels ---- */

static hd_status sol_fn(sol_job *j, const char *base, CUfunction *f) {
    char name[32];
    snprintf(name, sizeof name, "%s_%s", base, j->f64 ? "f64" : "f32");
    return hd_cuda_function_src(j->ctx, j->d, sol_src, sizeof sol_src - 1, name, f);
}

/* A strided copy of a matrix per batch entry: y[b ys + i yi + j yj] =
 * c[b cs + i ci + j cj] for i < rows, j < cols (mask 1: only j <= i, 2:
 * only j >= i; 0 elsewhere). Strides in elements. */
typedef struct sol_geo {
    long long rows, cols, ys, yi, yj, cs, ci, cj;
    int mask;
} sol_geo;

static hd_status sol_copy(sol_job *j, CUdeviceptr y, CUdeviceptr c, sol_geo g) {
    CUfunction f;
    if (sol_fn(j, "la_copy", &f)) return j->ctx->status;
    long long batch = j->batch;
    void *args[] = {&y,    &c,    &g.rows, &g.cols, &batch, &g.ys,
                    &g.yi, &g.yj, &g.cs,   &g.ci,   &g.cj,  &g.mask};
    return hd_cuda_launch(j->ctx, j->d, f, j->batch * g.rows * g.cols, args);
}

static hd_status sol_dtod(sol_job *j, CUdeviceptr dst, CUdeviceptr src, size_t n) {
    return hd_cuda_check(j->ctx, hd_cuda_api_get()->memcpy_dtod(dst, src, n, j->d->stream),
                         "cuMemcpyDtoDAsync");
}

/* The first matrix whose info is not 0, as the cpu kernels report it; and
 * getrs' or orgqr's argument check. */
static hd_status sol_infos(sol_job *j, int positive_ok) {
    size_t n = (size_t)j->batch * sizeof(int);
    int *h = hd_ctx_alloc(j->ctx, n), extra = 0;
    if (!h) return j->ctx->status;
    hd_status st = hd_cuda_backend.to_host(j->ctx, j->device, h, (void *)(uintptr_t)j->info, n);
    if (!st && j->info2)
        st = hd_cuda_backend.to_host(j->ctx, j->device, &extra, (void *)(uintptr_t)j->info2,
                                     sizeof extra);
    for (int64_t b = 0; b < j->batch && !st; b++)
        if (h[b] < 0 || (h[b] > 0 && !positive_ok))
            st = hd_linalg_fail(j->ctx, j->op, j->batch, b, h[b]);
    if (!st && extra) st = hd_linalg_fail(j->ctx, j->op, j->batch, 0, extra < 0 ? extra : -extra);
    hd_ctx_free(j->ctx, h, n);
    return st;
}

/* ---- LU: inv, det, slogdet, solve ---- */

/* The LU factors of each matrix of a (the buffer as it comes: A^T read
 * column-major) in place, the pivots into ipiv. */
static hd_status sol_getrf(sol_job *j, CUdeviceptr a, CUdeviceptr ipiv) {
    int n = (int)j->n, lw = 0;
    cusolverDnHandle_t h = j->d->solver;
    if (sol_status(j, j->f->getrf_bs(h, n, n, (void *)(uintptr_t)a, n, &lw), "getrf_bufferSize"))
        return j->ctx->status;
    CUdeviceptr work = sol_alloc(j, (size_t)lw * j->es);
    if (!work) return j->ctx->status;
    for (int64_t b = 0; b < j->batch; b++) {
        void *ab = (void *)(uintptr_t)(a + (CUdeviceptr)(b * j->n * j->n) * j->es);
        int *pb = (int *)(uintptr_t)(ipiv + (CUdeviceptr)(b * j->n) * sizeof(int));
        int *ib = (int *)(uintptr_t)(j->info + (CUdeviceptr)b * sizeof(int));
        if (sol_status(j, j->f->getrf(h, n, n, ab, n, (void *)(uintptr_t)work, pb, ib), "getrf"))
            return j->ctx->status;
    }
    return HD_OK;
}

/* X = op(LU)^-1 X per matrix: x's matrices column-major, n x nrhs. */
static hd_status sol_getrs(sol_job *j, CUdeviceptr a, CUdeviceptr ipiv, cublasOperation_t t,
                           CUdeviceptr x, int64_t nrhs) {
    int n = (int)j->n;
    for (int64_t b = 0; b < j->batch; b++) {
        const void *ab = (const void *)(uintptr_t)(a + (CUdeviceptr)(b * j->n * j->n) * j->es);
        const int *pb = (const int *)(uintptr_t)(ipiv + (CUdeviceptr)(b * j->n) * sizeof(int));
        void *xb = (void *)(uintptr_t)(x + (CUdeviceptr)(b * j->n * nrhs) * j->es);
        if (sol_status(j,
                       j->f->getrs(j->d->solver, t, n, (int)nrhs, ab, n, pb, xb, n,
                                   (int *)(uintptr_t)j->info2),
                       "getrs"))
            return j->ctx->status;
    }
    return HD_OK;
}

/* a scratch copy of A's matrices and room for their pivots */
static hd_status sol_lu(sol_job *j, const hd_tensor *A, CUdeviceptr *a, CUdeviceptr *ipiv) {
    size_t nb = (size_t)(j->batch * j->n * j->n) * j->es;
    if (!(*a = sol_alloc(j, nb)) || !(*ipiv = sol_alloc(j, (size_t)(j->batch * j->n) * 4)) ||
        sol_dtod(j, *a, sol_at(A, 0), nb))
        return j->ctx->status;
    return sol_getrf(j, *a, *ipiv);
}

static hd_status sol_inv(sol_job *j, const hd_tensor *A, hd_tensor *out) {
    CUdeviceptr a, ipiv, y = sol_at(out, 0);
    CUfunction eye;
    if (sol_lu(j, A, &a, &ipiv) || sol_fn(j, "la_eye", &eye)) return j->ctx->status;
    long long n = j->n, batch = j->batch;
    void *args[] = {&y, &n, &batch};
    if (hd_cuda_launch(j->ctx, j->d, eye, j->batch * j->n * j->n, args) ||
        sol_getrs(j, a, ipiv, CUBLAS_OP_N, y, j->n)) /* inv(A^T) = inv(A)^T */
        return j->ctx->status;
    return sol_infos(j, 0);
}

static hd_status sol_det(sol_job *j, const hd_tensor *A, hd_tensor *out) {
    CUdeviceptr a, ipiv, y = sol_at(out, 0);
    CUfunction det;
    if (sol_lu(j, A, &a, &ipiv) || sol_fn(j, "la_det", &det)) return j->ctx->status;
    long long n = j->n, batch = j->batch;
    int slog = j->op == HD_OP_LINALG_SLOGDET;
    void *args[] = {&y, &a, &ipiv, &n, &batch, &slog};
    if (hd_cuda_launch(j->ctx, j->d, det, j->batch, args)) return j->ctx->status;
    return sol_infos(j, 1); /* a zero pivot: det 0 */
}

/* X = A^-1 B: the LU of A^T (the buffer as it comes), solved transposed,
 * on a column-major copy of B */
static hd_status sol_solve(sol_job *j, const hd_tensor *A, const hd_tensor *B, hd_tensor *out) {
    CUdeviceptr a, ipiv, x;
    long long n = j->n, k = j->k;
    if (sol_lu(j, A, &a, &ipiv) || !(x = sol_alloc(j, (size_t)(j->batch * n * k) * j->es)) ||
        sol_copy(j, x, sol_at(B, 0), (sol_geo){n, k, n * k, 1, n, n * k, k, 1, 0}) ||
        sol_getrs(j, a, ipiv, CUBLAS_OP_T, x, k) ||
        sol_copy(j, sol_at(out, 0), x, (sol_geo){n, k, n * k, k, 1, n * k, 1, n, 0}))
        return j->ctx->status;
    return sol_infos(j, 0);
}

/* ---- cholesky, eigh ---- */

static hd_status sol_cholesky(sol_job *j, const hd_tensor *A, hd_tensor *out) {
    int n = (int)j->n, lw = 0;
    cusolverDnHandle_t h = j->d->solver;
    CUdeviceptr y = sol_at(out, 0), work;
    if (sol_dtod(j, y, sol_at(A, 0), (size_t)(j->batch * j->n * j->n) * j->es) ||
        sol_status(j, j->f->potrf_bs(h, CUBLAS_FILL_MODE_UPPER, n, (void *)(uintptr_t)y, n, &lw),
                   "potrf_bufferSize") ||
        !(work = sol_alloc(j, (size_t)lw * j->es)))
        return j->ctx->status;
    for (int64_t b = 0; b < j->batch; b++) {
        void *yb = (void *)(uintptr_t)(y + (CUdeviceptr)(b * j->n * j->n) * j->es);
        int *ib = (int *)(uintptr_t)(j->info + (CUdeviceptr)b * sizeof(int));
        if (sol_status(
                j,
                j->f->potrf(h, CUBLAS_FILL_MODE_UPPER, n, yb, n, (void *)(uintptr_t)work, lw, ib),
                "potrf"))
            return j->ctx->status;
    }
    long long nn = j->n;
    if (sol_copy(j, y, y, (sol_geo){nn, nn, nn * nn, nn, 1, nn * nn, nn, 1, 1})) /* tril */
        return j->ctx->status;
    return sol_infos(j, 0);
}

static hd_status sol_eigh(sol_job *j, const hd_tensor *A, hd_tensor *out) {
    int n = (int)j->n, lw = 0;
    cusolverDnHandle_t h = j->d->solver;
    size_t nb = (size_t)(j->batch * j->n * j->n) * j->es;
    CUdeviceptr a = sol_alloc(j, nb), work, y = sol_at(out, 0);
    if (!a || sol_dtod(j, a, sol_at(A, 0), nb) ||
        sol_status(j,
                   j->f->syevd_bs(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n,
                                  (void *)(uintptr_t)a, n, (void *)(uintptr_t)y, &lw),
                   "syevd_bufferSize") ||
        !(work = sol_alloc(j, (size_t)lw * j->es)))
        return j->ctx->status;
    for (int64_t b = 0; b < j->batch; b++) {
        void *ab = (void *)(uintptr_t)(a + (CUdeviceptr)(b * j->n * j->n) * j->es);
        void *wb = (void *)(uintptr_t)(y + (CUdeviceptr)(b * j->outlen) * j->es);
        int *ib = (int *)(uintptr_t)(j->info + (CUdeviceptr)b * sizeof(int));
        if (sol_status(j,
                       j->f->syevd(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n, ab, n,
                                   wb, (void *)(uintptr_t)work, lw, ib),
                       "syevd"))
            return j->ctx->status;
    }
    /* vector j is column j of the column-major result */
    long long nn = j->n, ol = j->outlen;
    if (sol_copy(j, y + (CUdeviceptr)nn * j->es, a,
                 (sol_geo){nn, nn, ol, nn, 1, nn * nn, 1, nn, 0}))
        return j->ctx->status;
    return sol_infos(j, 0);
}

/* ---- qr, svd: on column-major copies ---- */

/* Q [m, qc] and R [qc, n]: qc = k (reduced) or m (complete) */
static hd_status sol_qr(sol_job *j, const hd_tensor *A, hd_tensor *out) {
    int m = (int)j->m, n = (int)j->n, k = (int)HD_MIN(m, n), qc = j->full ? m : k;
    int lw1 = 0, lw2 = 0;
    long long cst = (long long)m * HD_MAX(n, qc), ol = j->outlen;
    cusolverDnHandle_t h = j->d->solver;
    CUdeviceptr c = sol_alloc(j, (size_t)(j->batch * cst) * j->es), work;
    CUdeviceptr tau = sol_alloc(j, (size_t)(j->batch * k) * j->es), y = sol_at(out, 0);
    if (!c || !tau ||
        sol_copy(j, c, sol_at(A, 0), (sol_geo){m, n, cst, 1, m, (long long)m * n, n, 1, 0}) ||
        sol_status(j, j->f->geqrf_bs(h, m, n, (void *)(uintptr_t)c, m, &lw1), "geqrf_bufferSize") ||
        sol_status(
            j, j->f->orgqr_bs(h, m, qc, k, (void *)(uintptr_t)c, m, (void *)(uintptr_t)tau, &lw2),
            "orgqr_bufferSize") ||
        !(work = sol_alloc(j, (size_t)HD_MAX(lw1, lw2) * j->es)))
        return j->ctx->status;
    int lw = HD_MAX(lw1, lw2);
    for (int64_t b = 0; b < j->batch; b++) {
        void *cb = (void *)(uintptr_t)(c + (CUdeviceptr)(b * cst) * j->es);
        void *tb = (void *)(uintptr_t)(tau + (CUdeviceptr)(b * k) * j->es);
        int *ib = (int *)(uintptr_t)(j->info + (CUdeviceptr)b * sizeof(int));
        if (sol_status(j, j->f->geqrf(h, m, n, cb, m, tb, (void *)(uintptr_t)work, lw, ib),
                       "geqrf"))
            return j->ctx->status;
    }
    /* R: the upper triangle of the first qc rows (rows past m stay 0) */
    if (sol_copy(j, y + (CUdeviceptr)((int64_t)m * qc) * j->es, c,
                 (sol_geo){qc, n, ol, n, 1, cst, 1, m, 2}))
        return j->ctx->status;
    for (int64_t b = 0; b < j->batch; b++) {
        void *cb = (void *)(uintptr_t)(c + (CUdeviceptr)(b * cst) * j->es);
        void *tb = (void *)(uintptr_t)(tau + (CUdeviceptr)(b * k) * j->es);
        if (sol_status(j,
                       j->f->orgqr(h, m, qc, k, cb, m, tb, (void *)(uintptr_t)work, lw,
                                   (int *)(uintptr_t)j->info2),
                       "orgqr"))
            return j->ctx->status;
    }
    if (sol_copy(j, y, c, (sol_geo){m, qc, ol, qc, 1, cst, 1, m, 0})) return j->ctx->status;
    return sol_infos(j, 0);
}

/* gesvd needs rows >= cols. With m >= n it factorises a column-major copy
 * of A; else the buffer as it comes, which read column-major is A^T (n x
 * m): A^T = U' S V'^T gives A's U = V' and Vh = U'^T. */
static hd_status sol_svd(sol_job *j, const hd_tensor *A, hd_tensor *out) {
    long long m = j->m, n = j->n, k = HD_MIN(m, n), ol = j->outlen;
    long long cu = j->full ? m : k, rv = j->full ? n : k;
    int tall = m >= n;
    long long rows = tall ? m : n, cols = tall ? n : m; /* what gesvd sees */
    long long ucols = j->full ? rows : cols;            /* its U: rows x ucols */
    signed char job = j->full ? 'A' : 'S';
    int lw = 0;
    cusolverDnHandle_t h = j->d->solver;
    CUdeviceptr y = sol_at(out, 0), work, rwork;
    CUdeviceptr c = sol_alloc(j, (size_t)(j->batch * m * n) * j->es);
    CUdeviceptr u = sol_alloc(j, (size_t)(j->batch * rows * ucols) * j->es);
    CUdeviceptr vt = sol_alloc(j, (size_t)(j->batch * cols * cols) * j->es);
    if (!c || !u || !vt || !(rwork = sol_alloc(j, (size_t)(j->batch * k) * j->es)) ||
        (tall ? sol_copy(j, c, sol_at(A, 0), (sol_geo){m, n, m * n, 1, m, m * n, n, 1, 0})
              : sol_dtod(j, c, sol_at(A, 0), (size_t)(j->batch * m * n) * j->es)) ||
        sol_status(j, j->f->gesvd_bs(h, (int)rows, (int)cols, &lw), "gesvd_bufferSize") ||
        !(work = sol_alloc(j, (size_t)lw * j->es)))
        return j->ctx->status;
    for (int64_t b = 0; b < j->batch; b++) {
        CUdeviceptr sb = y + (CUdeviceptr)(b * ol + m * cu) * j->es;
        if (sol_status(j,
                       j->f->gesvd(h, job, job, (int)rows, (int)cols,
                                   (void *)(uintptr_t)(c + (CUdeviceptr)(b * m * n) * j->es),
                                   (int)rows, (void *)(uintptr_t)sb,
                                   (void *)(uintptr_t)(u + (CUdeviceptr)(b * rows * ucols) * j->es),
                                   (int)rows,
                                   (void *)(uintptr_t)(vt + (CUdeviceptr)(b * cols * cols) * j->es),
                                   (int)cols, (void *)(uintptr_t)work, lw,
                                   (void *)(uintptr_t)(rwork + (CUdeviceptr)(b * k) * j->es),
                                   (int *)(uintptr_t)(j->info + (CUdeviceptr)b * sizeof(int))),
                       "gesvd"))
            return j->ctx->status;
    }
    CUdeviceptr vh = y + (CUdeviceptr)(m * cu + k) * j->es;
    hd_status st = tall ? sol_copy(j, y, u, (sol_geo){m, cu, ol, cu, 1, rows * ucols, 1, m, 0})
                        : sol_copy(j, y, vt, (sol_geo){m, cu, ol, cu, 1, cols * cols, cols, 1, 0});
    if (!st)
        st = tall ? sol_copy(j, vh, vt, (sol_geo){rv, n, ol, n, 1, cols * cols, 1, cols, 0})
                  : sol_copy(j, vh, u, (sol_geo){rv, n, ol, n, 1, rows * ucols, rows, 1, 0});
    return st ? st : sol_infos(j, 0);
}

/* ---- dispatch ---- */

static hd_status sol_run(sol_job *j, hd_tensor *const *in, hd_tensor *out) {
    switch (j->op) {
    case HD_OP_LINALG_INV: return sol_inv(j, in[0], out);
    case HD_OP_LINALG_DET:
    case HD_OP_LINALG_SLOGDET: return sol_det(j, in[0], out);
    case HD_OP_LINALG_SOLVE: return sol_solve(j, in[0], in[1], out);
    case HD_OP_LINALG_CHOLESKY: return sol_cholesky(j, in[0], out);
    case HD_OP_LINALG_EIGH: return sol_eigh(j, in[0], out);
    case HD_OP_LINALG_QR: return sol_qr(j, in[0], out);
    case HD_OP_LINALG_SVD: return sol_svd(j, in[0], out);
    default: return hd_error(j->ctx, HD_ERR_RUNTIME, "%s is not a linalg op", hd_op_name(j->op));
    }
}

hd_status hd_cuda_linalg(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                         hd_tensor *const *in, int nin, const hd_attrs *attrs) {
    const hd_tensor *a = in[0];
    if (!d->solver)
        return hd_error(ctx, HD_ERR_RUNTIME, "internal error: %s: no cuSOLVER handle",
                        hd_op_name(op));
    sol_job j;
    memset(&j, 0, sizeof j);
    j.ctx = ctx, j.d = d, j.device = out->storage->device, j.op = op;
    j.f64 = out->dtype == HD_F64;
    j.f = &hd_cuda_api_get()->sol[j.f64];
    j.es = hd_dtype_size(out->dtype);
    j.m = a->shape[a->ndim - 2], j.n = a->shape[a->ndim - 1];
    j.k = op == HD_OP_LINALG_SOLVE && nin > 1 ? in[1]->shape[in[1]->ndim - 1] : 0;
    j.full = attrs && attrs->ints[0] != 0;
    j.batch = hd_shape_numel(a->shape, a->ndim - 2);
    j.outlen = j.batch ? out->numel / j.batch : 0;
    hd_status st = (j.info = sol_alloc(&j, (size_t)j.batch * sizeof(int))) &&
                           (j.info2 = sol_alloc(&j, sizeof(int)))
                       ? HD_OK
                       : ctx->status;
    if (!st) /* both read back whatever ran: zero first */
        st = hd_cuda_check(
            ctx, hd_cuda_api_get()->memset_d8(j.info, 0, (size_t)j.batch * sizeof(int), d->stream),
            "cuMemsetD8Async");
    if (!st)
        st = hd_cuda_check(ctx, hd_cuda_api_get()->memset_d8(j.info2, 0, sizeof(int), d->stream),
                           "cuMemsetD8Async");
    if (!st) st = sol_run(&j, in, out);
    sol_release(&j);
    return st;
}
#endif
