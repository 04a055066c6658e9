/* matmul through cuBLAS: numpy.matmul semantics (1-D operands, batched and
 * broadcast), as one strided-batched GEMM. Row-major C = A B is computed
 * as column-major C^T = B^T A^T. f32 computes in f32 (no TF32, so results
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

hd_status hd_cuda_matmul(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *a, hd_tensor *b) {
    int ints = !hd_dtype_is_float(out->dtype);
    if (!ints && blas_handle(ctx, d)) return ctx->status;
    int64_t M = a->ndim == 1 ? 1 : a->shape[a->ndim - 2], K = a->shape[a->ndim - 1];
    int64_t N = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return hd_error(ctx, HD_ERR_RUNTIME, "matmul: dims past 2^31 are not supported on cuda");
    int64_t mn = M * N, batch = mn > 0 ? out->numel / mn : 0;
    hd_tensor *ca = NULL, *cb = NULL;
    long long sa = 0, sb = 0;
    /* the output's batch dims: those before the matrix dims a and b add */
    int nbatch = out->ndim - (a->ndim >= 2) - (b->ndim >= 2);
    hd_status st = blas_operand(ctx, a, out, nbatch, M, K, &ca, &sa);
    if (!st) st = blas_operand(ctx, b, out, nbatch, K, N, &cb, &sb);
    cudaDataType ty = out->dtype == HD_F64    ? CUDA_R_64F
                      : out->dtype == HD_F16  ? CUDA_R_16F
                      : out->dtype == HD_BF16 ? CUDA_R_16BF
                                              : CUDA_R_32F;
    cublasComputeType_t ct = out->dtype == HD_F64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    float one = 1, zero = 0;
    double one64 = 1, zero64 = 0;
    const void *alpha = out->dtype == HD_F64 ? (const void *)&one64 : (const void *)&one;
    const void *beta = out->dtype == HD_F64 ? (const void *)&zero64 : (const void *)&zero;
    if (!st && batch > 0 && K == 0) { /* empty sum: zeros */
        st = hd_cuda_check(ctx,
                           hd_cuda_api_get()->memset_d8((CUdeviceptr)(uintptr_t)hd_tensor_data(out),
                                                        0, hd_tensor_nbytes(out), d->stream),
                           "cuMemsetD8Async");
    } else if (!st && batch > 0 && ints) {
        int64_t geo[6] = {batch, M, N, K, sa, sb};
        st = blas_int(ctx, d, out, ca, cb, geo);
    } else if (!st && batch > 0) {
        const void *pa = hd_tensor_data(ca), *pb = hd_tensor_data(cb);
        cublasStatus_t r = hd_cuda_api_get()->blas_gemm_strided(
            d->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, alpha, pb, ty, (int)N, sb,
            pa, ty, (int)K, sa, beta, hd_tensor_data(out), ty, (int)N, (long long)(M * N),
            (int)batch, ct, CUBLAS_GEMM_DEFAULT);
        if (r != CUBLAS_STATUS_SUCCESS)
            st = hd_error(ctx, HD_ERR_RUNTIME, "cuda: cublasGemmStridedBatchedEx failed (%d)",
                          (int)r);
    }
    hd_tensor_unref(ca);
    hd_tensor_unref(cb);
    return st;
}
#endif
