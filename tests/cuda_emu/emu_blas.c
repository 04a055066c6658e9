/* The emulated cuBLAS: cublasGemmEx and cublasGemmStridedBatchedEx,
 * column-major, from their documented definitions (sums in double). */
#define _GNU_SOURCE
#include "emu_int.h"
#include "hd_dtype.h"

#include <stdlib.h>

static double gemm_load(const void *p, int type, long long i) {
    switch (type) {
    case DT_R_32F: return ((const float *)p)[i];
    case DT_R_64F: return ((const double *)p)[i];
    case DT_R_16F: return hd_f16_to_f32(((const uint16_t *)p)[i]);
    default: return hd_bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

static void gemm_store(void *p, int type, long long i, double v) {
    switch (type) {
    case DT_R_32F: ((float *)p)[i] = (float)v; break;
    case DT_R_64F: ((double *)p)[i] = v; break;
    case DT_R_16F: ((uint16_t *)p)[i] = hd_f32_to_f16((float)v); break;
    default: ((uint16_t *)p)[i] = hd_f32_to_bf16((float)v); break;
    }
}

/* C = alpha op(A) op(B) + beta C, column-major, per batch. */
void emu_gemm_run(const emu_gemm *g) {
    const char *a = emu_mem_host((uintptr_t)g->a), *b = emu_mem_host((uintptr_t)g->b);
    void *c = emu_mem_host((uintptr_t)g->c);
    for (int q = 0; q < g->batch; q++) {
        long long oa = q * g->sa, ob = q * g->sb, oc = q * g->sc;
        for (int j = 0; j < g->n; j++)
            for (int i = 0; i < g->m; i++) {
                double s = 0;
                for (int l = 0; l < g->k; l++) {
                    double x = gemm_load(
                        a, g->type,
                        oa + (g->ta ? l + (long long)i * g->lda : i + (long long)l * g->lda));
                    double y = gemm_load(
                        b, g->type,
                        ob + (g->tb ? j + (long long)l * g->ldb : l + (long long)j * g->ldb));
                    s += x * y;
                }
                long long ci = oc + i + (long long)j * g->ldc;
                double old = g->beta != 0 ? g->beta * gemm_load(c, g->type, ci) : 0;
                gemm_store(c, g->type, ci, g->alpha * s + old);
            }
    }
}

typedef struct emu_blas {
    emu_stream *stream;
    CUdeviceptr ws; /* the workspace set, checked to be device memory */
    size_t ws_size;
} emu_blas;

EMU_EXPORT int cublasCreate_v2(emu_blas **h) {
    *h = calloc(1, sizeof **h);
    return *h ? BLAS_SUCCESS : 3 /* CUBLAS_STATUS_ALLOC_FAILED */;
}
EMU_EXPORT int cublasDestroy_v2(emu_blas *h) {
    free(h);
    return BLAS_SUCCESS;
}
EMU_EXPORT int cublasSetStream_v2(emu_blas *h, emu_stream *s) {
    h->stream = s;
    return BLAS_SUCCESS;
}
EMU_EXPORT int cublasSetWorkspace_v2(emu_blas *h, void *ws, size_t n) {
    EMU_COUNT(cublasSetWorkspace_v2);
    if (!h || (n && !emu_mem_valid((CUdeviceptr)(uintptr_t)ws, n))) return BLAS_INVALID_VALUE;
    h->ws = (CUdeviceptr)(uintptr_t)ws;
    h->ws_size = n;
    return BLAS_SUCCESS;
}

static size_t type_size(int t) {
    return t == DT_R_64F ? 8 : t == DT_R_32F ? 4 : 2;
}

/* Is an operand of rows x cols (leading dimension ld) per batch inside
 * device memory? */
static int gemm_operand_ok(const void *p, int type, int rows, int cols, int ld, long long stride,
                           int batch) {
    if (ld < rows || ld < 1) return 0;
    size_t last = (size_t)((long long)(batch - 1) * stride + (long long)(cols - 1) * ld + rows);
    return emu_mem_valid((CUdeviceptr)(uintptr_t)p, last * type_size(type));
}

/* Both entry points: checked as cuBLAS documents them, then a node on
 * the handle's stream. */
static int gemm_submit(emu_blas *h, const char *what, int ta, int tb, int m, int n, int k,
                       const void *alpha, const void *A, int at, int lda, long long sa,
                       const void *B, int bt, int ldb, long long sb, const void *beta, void *C,
                       int ct, int ldc, long long sc, int batch, int compute) {
    if (!h) return 1;
    if (at != bt || at != ct || m < 0 || n < 0 || k < 0 || batch < 0 || ta > 1 || tb > 1)
        return BLAS_INVALID_VALUE;
    if (at != DT_R_32F && at != DT_R_64F && at != DT_R_16F && at != DT_R_16BF)
        return BLAS_NOT_SUPPORTED;
    if ((compute == 70) != (at == DT_R_64F)) return BLAS_NOT_SUPPORTED; /* 64F with f64 only */
    if (emu_mem_host_arg_bad(alpha, what) || emu_mem_host_arg_bad(beta, what))
        return BLAS_INVALID_VALUE; /* the handle's pointer mode is host */
    if (!m || !n || !batch) return BLAS_SUCCESS;
    if (!gemm_operand_ok(A, at, ta ? k : m, ta ? m : k, lda, sa, batch) ||
        !gemm_operand_ok(B, bt, tb ? n : k, tb ? k : n, ldb, sb, batch) ||
        !gemm_operand_ok(C, ct, m, n, ldc, sc, batch))
        return BLAS_INVALID_VALUE;
    uintptr_t ops[3] = {(uintptr_t)A, (uintptr_t)B, (uintptr_t)C};
    if (!emu_dev_ptrs_ok(ops, 3, emu_stream_dev(h->stream), what))
        return 14; /* CUBLAS_STATUS_INTERNAL_ERROR */
    emu_node *node = emu_node_new(NODE_GEMM);
    if (!node) return 3;
    emu_gemm *g = &node->gemm;
    *g = (emu_gemm){ta, tb, m, n, k, at, compute, 0, 0, A, B, C, lda, ldb, ldc, batch, sa, sb, sc};
    g->alpha = at == DT_R_64F ? *(const double *)alpha : *(const float *)alpha;
    g->beta = at == DT_R_64F ? *(const double *)beta : *(const float *)beta;
    return emu_stream_submit(h->stream, node) == CUDA_SUCCESS ? BLAS_SUCCESS : 13;
}

EMU_EXPORT int cublasGemmStridedBatchedEx(emu_blas *h, int ta, int tb, int m, int n, int k,
                                          const void *alpha, const void *A, int at, int lda,
                                          long long sa, const void *B, int bt, int ldb,
                                          long long sb, const void *beta, void *C, int ct, int ldc,
                                          long long sc, int batch, int compute, int algo) {
    EMU_COUNT(cublasGemmStridedBatchedEx);
    (void)algo;
    return gemm_submit(h, "cublasGemmStridedBatchedEx", ta, tb, m, n, k, alpha, A, at, lda, sa, B,
                       bt, ldb, sb, beta, C, ct, ldc, sc, batch, compute);
}

EMU_EXPORT int cublasGemmEx(emu_blas *h, int ta, int tb, int m, int n, int k, const void *alpha,
                            const void *A, int at, int lda, const void *B, int bt, int ldb,
                            const void *beta, void *C, int ct, int ldc, int compute, int algo) {
    EMU_COUNT(cublasGemmEx);
    (void)algo;
    return gemm_submit(h, "cublasGemmEx", ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0,
                       beta, C, ct, ldc, 0, 1, compute);
}
