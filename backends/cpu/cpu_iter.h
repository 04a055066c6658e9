/* cpu_iter: a strided N-d iterator for CPU kernels.
 *
 * Operand 0 is the output (any strides, usually contiguous), operands 1..
 * are inputs broadcast to the output's shape (hd_broadcast_strides). Dims of
 * size 1 are dropped and neighbouring dims that are contiguous in every
 * operand are merged, so a contiguous op is one flat run and a transposed
 * or broadcast one has as few dims as its geometry allows. The innermost
 * dim is handed to a 1-D callback with per-operand strides; the outer dims
 * are walked as an odometer. Large iterations are split into chunks of the
 * flat output index and run on OpenMP threads. */
#ifndef HD_CPU_ITER_H
#define HD_CPU_ITER_H

#include "cpu_kernels.h"

#define HD_CPU_ITER_MAX_OPS 4

typedef struct {
    int nop;       /* operands; 0 is the output */
    int ndim;      /* dims after merging, >= 1; the last is the inner one */
    int64_t numel; /* elements of the output */
    int64_t shape[HD_MAX_DIMS];
    int64_t stride[HD_CPU_ITER_MAX_OPS][HD_MAX_DIMS]; /* in elements */
    char *base[HD_CPU_ITER_MAX_OPS];                  /* element 0 of each operand */
    int elsize[HD_CPU_ITER_MAX_OPS];
} hd_cpu_iter;

/* One inner run of n elements: ptr[k] is operand k's first element and
 * stride[k] its step in elements (0 for a broadcast operand). */
typedef void (*hd_cpu_iter_fn)(char *const *ptr, const int64_t *stride, int64_t n, void *ud);

/* The first input that cannot be read with out's shape by broadcasting,
 * or -1 if all can. */
static inline int hd_cpu_iter_mismatch(const hd_tensor *out, hd_tensor *const *in, int nin) {
    for (int k = 0; k < nin; k++) {
        const hd_tensor *t = in[k];
        int lead = out->ndim - t->ndim;
        if (lead < 0) return k;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] != 1 && t->shape[d] != out->shape[lead + d]) return k;
    }
    return -1;
}

/* Set up the iteration of out and nin (< HD_CPU_ITER_MAX_OPS) inputs that
 * broadcast to out's shape (check with hd_cpu_iter_mismatch). */
static inline void hd_cpu_iter_init(hd_cpu_iter *it, hd_tensor *out, hd_tensor *const *in,
                                    int nin) {
    int nd = out->ndim, nop = nin + 1;
    int64_t st[HD_CPU_ITER_MAX_OPS][HD_MAX_DIMS];
    for (int d = 0; d < nd; d++) st[0][d] = out->strides[d];
    for (int k = 0; k < nin; k++) hd_broadcast_strides(in[k], out->shape, nd, st[k + 1]);
    it->nop = nop;
    it->numel = out->numel;
    it->base[0] = hd_tensor_data(out);
    it->elsize[0] = hd_dtype_size(out->dtype);
    for (int k = 0; k < nin; k++) {
        it->base[k + 1] = hd_tensor_data(in[k]);
        it->elsize[k + 1] = hd_dtype_size(in[k]->dtype);
    }
    /* Walk from the innermost dim outwards, building merged dims in reverse:
     * dim d joins the current group when, for every operand, stepping d once
     * is the same as stepping over the whole group. */
    int64_t shape[HD_MAX_DIMS], cs[HD_CPU_ITER_MAX_OPS][HD_MAX_DIMS];
    int m = 0;
    for (int d = nd - 1; d >= 0; d--) {
        if (out->shape[d] == 1) continue;
        int merge = m > 0;
        for (int k = 0; merge && k < nop; k++)
            if (st[k][d] != cs[k][m - 1] * shape[m - 1]) merge = 0;
        if (merge) {
            shape[m - 1] *= out->shape[d];
            continue;
        }
        shape[m] = out->shape[d];
        for (int k = 0; k < nop; k++) cs[k][m] = st[k][d];
        m++;
    }
    if (m == 0) { /* one element: call it a contiguous run of 1 */
        shape[0] = 1;
        for (int k = 0; k < nop; k++) cs[k][0] = 1;
        m = 1;
    }
    it->ndim = m;
    for (int i = 0; i < m; i++) {
        it->shape[i] = shape[m - 1 - i];
        for (int k = 0; k < nop; k++) it->stride[k][i] = cs[k][m - 1 - i];
    }
}

/* Call fn on the inner runs covering flat output positions [start, end). */
static inline void hd_cpu_iter_range(const hd_cpu_iter *it, int64_t start, int64_t end,
                                     hd_cpu_iter_fn fn, void *ud) {
    int nd = it->ndim, inner = nd - 1, nop = it->nop;
    int64_t idx[HD_MAX_DIMS], r = start, inner_stride[HD_CPU_ITER_MAX_OPS];
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = r % it->shape[d];
        r /= it->shape[d];
    }
    for (int k = 0; k < nop; k++) inner_stride[k] = it->stride[k][inner];
    while (start < end) {
        int64_t n = HD_MIN(it->shape[inner] - idx[inner], end - start);
        char *ptr[HD_CPU_ITER_MAX_OPS];
        for (int k = 0; k < nop; k++) {
            int64_t off = 0;
            for (int d = 0; d < nd; d++) off += idx[d] * it->stride[k][d];
            ptr[k] = it->base[k] + off * it->elsize[k];
        }
        fn(ptr, inner_stride, n, ud);
        start += n;
        idx[inner] = 0;
        for (int d = inner - 1; d >= 0; d--) {
            if (++idx[d] < it->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* Run the whole iteration: one thread below CPU_PAR_MIN elements, else up
 * to nthreads threads, each on a contiguous chunk of the flat output (chunk
 * starts rounded to 64 elements so threads do not share cache lines). The
 * callback must be safe to run concurrently on disjoint ranges. */
static inline void hd_cpu_iter_run(const hd_cpu_iter *it, int nthreads, hd_cpu_iter_fn fn,
                                   void *ud) {
    int64_t n = it->numel;
    if (n <= 0) return;
    int64_t most = n / (CPU_PAR_MIN / 2); /* at least CPU_PAR_MIN / 2 elements a thread */
    int nt = nthreads < 1 ? 1 : nthreads;
    if (n < CPU_PAR_MIN) nt = 1;
    if (nt > most) nt = (int)(most > 0 ? most : 1);
    if (nt <= 1) {
        hd_cpu_iter_range(it, 0, n, fn, ud);
        return;
    }
    int64_t chunk = ((n + nt - 1) / nt + 63) & ~(int64_t)63;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t s = t * chunk, e = HD_MIN(s + chunk, n);
        if (s < e) hd_cpu_iter_range(it, s, e, fn, ud);
    }
}

#endif
