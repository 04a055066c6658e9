/* argsort: the stable order of each line of x along an axis, ascending or
 * descending, as torch.sort(stable=True) and NumPy's stable sort: NaN
 * after every number ascending, before them descending (NaN is the
 * largest); equal elements keep their order. Each line's keys are read
 * once (i64 for integer dtypes, so every value orders exactly; double for
 * floats, which holds each of them exactly), then a bottom-up merge sort
 * of positions. Lines in parallel, each thread with its own buffers. */
#include "cpu_kernels.h"

#include <omp.h>
#include <string.h>

typedef struct {
    int desc, ints;
    const int64_t *ik;
    const double *fk;
} sort_keys;

/* Does position a come strictly before position b? */
static int sort_before(const sort_keys *k, int64_t a, int64_t b) {
    if (k->ints) return k->desc ? k->ik[a] > k->ik[b] : k->ik[a] < k->ik[b];
    double x = k->fk[a], y = k->fk[b];
    if (k->desc) return x > y || (x != x && y == y);
    return x < y || (x == x && y != y);
}

/* Merge the sorted runs src[lo, mid) and src[mid, hi) into dst, the left
 * run's element first among equals. */
static void sort_merge(const sort_keys *k, const int64_t *src, int64_t *dst, int64_t lo,
                       int64_t mid, int64_t hi) {
    int64_t i = lo, j = mid, o = lo;
    while (i < mid && j < hi) dst[o++] = sort_before(k, src[j], src[i]) ? src[j++] : src[i++];
    while (i < mid) dst[o++] = src[i++];
    while (j < hi) dst[o++] = src[j++];
}

/* The sorted positions of n keys into ix (tmp: n more of scratch). */
static void sort_line(const sort_keys *k, int64_t n, int64_t *ix, int64_t *tmp) {
    for (int64_t i = 0; i < n; i++) ix[i] = i;
    int64_t *src = ix, *dst = tmp;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w)
            sort_merge(k, src, dst, lo, HD_MIN(lo + w, n), HD_MIN(lo + 2 * w, n));
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != ix) memcpy(ix, src, (size_t)n * sizeof *ix);
}

/* Element offsets of line l's first element in t: the line's index over
 * the dims other than axis, through t's strides. */
static int64_t sort_line_base(const hd_tensor *t, int axis, int64_t l) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (d == axis) continue;
        off += l % t->shape[d] * t->strides[d];
        l /= t->shape[d];
    }
    return off;
}

static hd_status cpu_argsort(hd_ctx *ctx, hd_tensor *out, const hd_tensor *x,
                             const hd_attrs *attrs) {
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], x->ndim, &axis)) return ctx->status;
    int64_t n = x->ndim ? x->shape[axis] : 1, lines = n ? x->numel / n : 0;
    int64_t xs = x->ndim ? x->strides[axis] : 0, os = out->ndim ? out->strides[axis] : 0;
    if (lines == 0) return HD_OK;
    int nt = x->numel >= CPU_PAR_MIN && lines > 1 ? ctx->nthreads : 1;
    size_t per = (size_t)n * 3 * sizeof(int64_t), bytes = per * (size_t)nt;
    char *work = hd_ctx_alloc(ctx, bytes);
    if (!work) return ctx->status;
    int ints = !hd_dtype_is_float(x->dtype);
    const void *xd = hd_tensor_data(x);
    int64_t *od = hd_tensor_data(out);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t l = 0; l < lines; l++) {
        int64_t *ix = (int64_t *)(work + per * (size_t)omp_get_thread_num()), *tmp = ix + n;
        int64_t *kbuf = tmp + n, xb = sort_line_base(x, axis, l), ob = sort_line_base(out, axis, l);
        sort_keys k = {attrs->ints[1] != 0, ints, kbuf, (const double *)kbuf};
        for (int64_t j = 0; j < n; j++) {
            if (ints)
                kbuf[j] = hd_dtype_load_i64(x->dtype, xd, xb + j * xs);
            else
                ((double *)kbuf)[j] = hd_dtype_load(x->dtype, xd, xb + j * xs);
        }
        sort_line(&k, n, ix, tmp);
        for (int64_t j = 0; j < n; j++) od[ob + j * os] = ix[j];
    }
    hd_ctx_free(ctx, work, bytes);
    return HD_OK;
}

hd_status hd_cpu_sort(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in,
                      const hd_attrs *attrs) {
    if (op != HD_OP_ARGSORT)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s is not a cpu sort kernel", hd_op_name(op));
    return cpu_argsort(ctx, out, in[0], attrs);
}
