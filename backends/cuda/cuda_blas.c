/* matmul through cuBLAS: numpy.matmul semantics (1-D operands, batched and
 * broadcast), as one GEMM (strided-batched for a batch). Row-major C = A B
 * is computed as column-major C^T = B^T A^T. Operands are read where they
 * are when their rows or columns are contiguous and their batches one
 * stride apart (nn.Linear's weight.T, the gradients' transposes, slices);
 * others are copied contiguous first. f32 computes in f32 (no TF32, so results
 * match the cpu to 1e-5); f16 and bf16 accumulate in f32 on tensor cores;
 * f64 in f64. Integer dtypes run a generated kernel over the same
 * operands (wrapping sums, as the cpu). */
#if HODU_HAVE_CUDA
#include "cuda_int.h"

#include <string.h>

/* The handle's own workspace (PyTorch's sizes: 32 MiB from Hopper on,
 * 4 MiB before). Without one, cuBLAS allocates its own outside a capture
 * and, inside one, falls back to algorithms that need none: a captured
 * 256x1024x1024 f32 product ran without split-K, several times slower
 * than the same product eagerly, and summed in another order. */
static void blas_workspace(const hd_cuda_api *a, hd_cuda_dev *d) {
    size_t n = (size_t)(d->arch >= 90 ? 32 : 4) << 20;
    if (!a->blas_set_workspace || a->mem_alloc(&d->blas_ws, n) != CUDA_SUCCESS) {
        d->blas_ws = 0;
        return;
    }
    if (a->blas_set_workspace(d->blas, (void *)(uintptr_t)d->blas_ws, n) != CUBLAS_STATUS_SUCCESS) {
        a->mem_free(d->blas_ws);
        d->blas_ws = 0;
    }
}

static hd_status blas_handle(hd_ctx *ctx, hd_cuda_dev *d) {
    const hd_cuda_api *a = hd_cuda_api_get();
    if (d->blas) return HD_OK;
    if (!a->blas_ok) return hd_error(ctx, HD_ERR_RUNTIME, "cuda: matmul needs %s", a->blas_error);
    if (a->blas_create(&d->blas) != CUBLAS_STATUS_SUCCESS) {
        d->blas = NULL;
        return hd_error(ctx, HD_ERR_RUNTIME, "cuda: cublasCreate failed");
    }
    a->blas_set_stream(d->blas, d->stream);
    blas_workspace(a, d);
    return HD_OK;
}

/* An operand as cuBLAS reads it: the matrix [rows, cols] of batch q at
 * p + q * stride, its rows contiguous (trans 0: column-major, that is
 * row-major [rows, cols] read as its transpose) or its columns (trans 1),
 * ld apart. */
typedef struct {
    const void *p;
    int trans;
    long long ld, stride;
} blas_view;

/* The stride of t's batch q over the output's first nbatch dims, where
 * q -> q * stride holds for every batch (0: broadcast); -1 where it does
 * not. */
static long long blas_batch_stride(const hd_tensor *t, const hd_tensor *out, int nbatch) {
    int tb = t->ndim - 2; /* t's own batch dims, aligned right with out's */
    long long s = -1, span = 1;
    for (int i = nbatch - 1; i >= 0; i--) {
        int j = i - (nbatch - tb);
        int64_t n = out->shape[i], st = j >= 0 && t->shape[j] == n ? t->strides[j] : 0;
        if (n == 1) continue;
        if (s < 0) s = st;
        if (st != s * span) return -1;
        span *= n;
    }
    return s < 0 ? 0 : s;
}

/* Can cuBLAS read t (rows x cols per batch) where it is, with no copy:
 * rows or columns contiguous (a transposed view, a slice of a wider
 * matrix), one stride between batches? Fills v. 1-D operands are
 * [1, k] for a and [k, 1] for b. */
static int blas_in_place(const hd_tensor *t, const hd_tensor *out, int nbatch, int64_t rows,
                         int64_t cols, blas_view *v) {
    int64_t rs = t->strides[t->ndim > 1 ? t->ndim - 2 : 0], cs = t->strides[t->ndim - 1];
    /* the stride past a single row or column is never used: the one that
     * lets the other layout through */
    if (rows == 1) rs = cs == 1 ? cols : 1;
    if (cols == 1) cs = rs == 1 ? rows : 1;
    v->stride = t->ndim <= 2 ? 0 : blas_batch_stride(t, out, nbatch);
    v->p = hd_tensor_data(t);
    if (v->stride < 0) return 0;
    if (cs == 1 && rs >= cols && rs <= INT32_MAX) {
        v->trans = 0, v->ld = rs;
        return 1;
    }
    if (rs == 1 && cs >= rows && cs <= INT32_MAX) {
        v->trans = 1, v->ld = cs;
        return 1;
    }
    return 0;
}

/* An operand as [batch..., rows, cols] (batch: the output's first nbatch
 * dims), contiguous, with its batch stride: 0 when it has no batch dims of
 * its own (broadcast over the batch). */
static hd_status blas_operand(hd_ctx *ctx, hd_tensor *t, const hd_tensor *out, int nbatch,
                              int64_t rows, int64_t cols, hd_tensor **c, long long *stride) {
    int64_t shape[HD_MAX_DIMS];
    int nd = 0;
    if (t->ndim <= 2) {
        shape[nd++] = rows;
        shape[nd++] = cols;
        *stride = 0;
    } else {
        for (int i = 0; i < nbatch; i++) shape[nd++] = out->shape[i];
        shape[nd++] = rows;
        shape[nd++] = cols;
        *stride = (long long)(rows * cols);
    }
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = nd;
    memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
    hd_tensor *v = NULL;
    /* 1-D operands first become [1, K] / [K, 1] */
    hd_attrs rs;
    memset(&rs, 0, sizeof rs);
    hd_tensor *base = t;
    if (t->ndim == 1) {
        rs.nshape = 2;
        rs.shape[0] = rows;
        rs.shape[1] = cols;
        if (hd_op_run(ctx, HD_OP_RESHAPE, &t, 1, &rs, &v)) return ctx->status;
        base = v;
    }
    hd_tensor *e = NULL;
    hd_status st = hd_op_run(ctx, HD_OP_EXPAND, &base, 1, &at, &e);
    hd_tensor_unref(v);
    if (st) return st;
    *c = hd_tensor_contiguous(ctx, e);
    hd_tensor_unref(e);
    return *c ? HD_OK : ctx->status;
}

/* Integer products: the generated kernel (cuda_src_more.c) over the
 * contiguous operands. */
static hd_status blas_int(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, const hd_tensor *ca,
                          const hd_tensor *cb, int64_t geo[6]) {
    CUfunction f;
    if (hd_cuda_kernel(ctx, d, HD_OP_MATMUL, out->dtype, out->dtype, HD_CUDA_K_MAIN, &f))
        return ctx->status;
    void *o = hd_tensor_data(out), *pa = hd_tensor_data(ca), *pb = hd_tensor_data(cb);
    void *args[] = {geo, &o, &pa, &pb};
    return hd_cuda_launch(ctx, d, f, out->numel, args);
}

/* An operand cuBLAS reads in place (v), or else a contiguous copy (*c,
 * unreferenced by the caller). Integer products always take the copy. */
static hd_status blas_prepare(hd_ctx *ctx, hd_tensor *t, const hd_tensor *out, int nbatch,
                              int64_t rows, int64_t cols, int ints, blas_view *v, hd_tensor **c) {
    if (!ints && blas_in_place(t, out, nbatch, rows, cols, v)) return HD_OK;
    if (blas_operand(ctx, t, out, nbatch, rows, cols, c, &v->stride)) return ctx->status;
    v->p = hd_tensor_data(*c), v->trans = 0, v->ld = cols;
    return HD_OK;
}

/* Row-major C = A B as column-major C^T = B^T A^T: B first. One matrix
 * goes to cublasGemmEx, the entry point a program calling cuBLAS for one
 * product uses, and gets its kernels; a batch to the strided-batched one. */
static hd_status blas_gemm(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, const blas_view *va,
                           const blas_view *vb, int64_t M, int64_t N, int64_t K, int64_t batch) {
    const hd_cuda_api *api = hd_cuda_api_get();
    cudaDataType ty = out->dtype == HD_F64    ? CUDA_R_64F
                      : out->dtype == HD_F16  ? CUDA_R_16F
                      : out->dtype == HD_BF16 ? CUDA_R_16BF
                                              : CUDA_R_32F;
    cublasComputeType_t ct = out->dtype == HD_F64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    float one = 1, zero = 0;
    double one64 = 1, zero64 = 0;
    const void *alpha = out->dtype == HD_F64 ? (const void *)&one64 : (const void *)&one;
    const void *beta = out->dtype == HD_F64 ? (const void *)&zero64 : (const void *)&zero;
    cublasOperation_t ta = vb->trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = va->trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    int one_matrix = batch == 1 && api->blas_gemm;
    cublasStatus_t r;
    if (one_matrix)
        r = api->blas_gemm(d->blas, ta, tb, (int)N, (int)M, (int)K, alpha, vb->p, ty, (int)vb->ld,
                           va->p, ty, (int)va->ld, beta, hd_tensor_data(out), ty, (int)N, ct,
                           CUBLAS_GEMM_DEFAULT);
    else
        r = api->blas_gemm_strided(d->blas, ta, tb, (int)N, (int)M, (int)K, alpha, vb->p, ty,
                                   (int)vb->ld, vb->stride, va->p, ty, (int)va->ld, va->stride,
                                   beta, hd_tensor_data(out), ty, (int)N, (long long)(M * N),
                                   (int)batch, ct, CUBLAS_GEMM_DEFAULT);
    if (r != CUBLAS_STATUS_SUCCESS)
        return hd_error(ctx, HD_ERR_RUNTIME, "cuda: %s failed (%d)",
                        one_matrix ? "cublasGemmEx" : "cublasGemmStridedBatchedEx", (int)r);
    return HD_OK;
}

hd_status hd_cuda_matmul(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *a, hd_tensor *b) {
    int ints = !hd_dtype_is_float(out->dtype);
    if (!ints && blas_handle(ctx, d)) return ctx->status;
    int64_t M = a->ndim == 1 ? 1 : a->shape[a->ndim - 2], K = a->shape[a->ndim - 1];
    int64_t N = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return hd_error(ctx, HD_ERR_RUNTIME, "matmul: dims past 2^31 are not supported on cuda");
    int64_t mn = M * N, batch = mn > 0 ? out->numel / mn : 0;
    if (batch == 0) return HD_OK;
    if (K == 0) /* empty sum: zeros */
        return hd_cuda_check(
            ctx,
            hd_cuda_api_get()->memset_d8((CUdeviceptr)(uintptr_t)hd_tensor_data(out), 0,
                                         hd_tensor_nbytes(out), d->stream),
            "cuMemsetD8Async");
    hd_tensor *ca = NULL, *cb = NULL;
    blas_view va, vb;
    /* the output's batch dims: those before the matrix dims a and b add */
    int nbatch = out->ndim - (a->ndim >= 2) - (b->ndim >= 2);
    hd_status st = blas_prepare(ctx, a, out, nbatch, M, K, ints, &va, &ca);
    if (!st) st = blas_prepare(ctx, b, out, nbatch, K, N, ints, &vb, &cb);
    if (!st && ints) {
        int64_t geo[6] = {batch, M, N, K, va.stride, vb.stride};
        st = blas_int(ctx, d, out, ca, cb, geo);
    } else if (!st) {
        st = blas_gemm(ctx, d, out, &va, &vb, M, N, K, batch);
    }
    hd_tensor_unref(ca);
    hd_tensor_unref(cb);
    return st;
}
#endif
