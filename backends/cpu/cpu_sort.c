/* argsort: the stable order of each line of x along an axis, ascending or
 * descending, as torch.sort(stable=True) and NumPy's stable sort: NaN
 * after every number ascending, before them descending (NaN is the
 * largest); equal elements keep their order. Each line's values are read
 * once into (key, position) pairs whose unsigned keys order as the values
 * do (sort_key_float, sort_key_int; descending: the keys inverted, so a
 * stable ascending sort of them keeps equal elements in order), then
 * sorted by insertion in runs of SORT_RUN and merged bottom-up. Lines in
 * parallel, each thread with its own buffers. */
#include "cpu_kernels.h"

#include <omp.h>
#include <string.h>

typedef struct {
    uint64_t key;
    int64_t ix;
} sort_item;

/* Floats: -0 as +0 and every NaN one key above +inf, so that they compare
 * equal among themselves as the values do; negatives' bits inverted,
 * positives' sign bit set. The key of a double holds every f16, bf16, f32
 * and f64 value exactly. */
static uint64_t sort_key_float(double x) {
    if (x != x) return UINT64_MAX;
    if (x == 0) x = 0.0;
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u >> 63 ? ~u : u | (1ull << 63);
}

/* Integers: the sign bit flipped (two's complement order as unsigned). */
static uint64_t sort_key_int(int64_t v) {
    return (uint64_t)v ^ (1ull << 63);
}

#define SORT_RUN 16
/* The first k positions by insertion up to this k (topk's); a whole sort
 * above. */
#define SORT_FIRST_MAX 64

/* Runs of SORT_RUN items sorted in place by insertion (stable). */
static void sort_runs(sort_item *a, int64_t n) {
    for (int64_t lo = 0; lo < n; lo += SORT_RUN) {
        int64_t hi = HD_MIN(lo + SORT_RUN, n);
        for (int64_t i = lo + 1; i < hi; i++) {
            sort_item v = a[i];
            int64_t j = i;
            for (; j > lo && a[j - 1].key > v.key; j--) a[j] = a[j - 1];
            a[j] = v;
        }
    }
}

/* Merge the sorted runs src[lo, mid) and src[mid, hi) into dst, the left
 * run's item first among equals. The item taken is chosen by a select, not
 * a branch: on random keys a branch is mispredicted half the time (it was
 * 40% of argsort's time). */
static void sort_merge(const sort_item *src, sort_item *dst, int64_t lo, int64_t mid, int64_t hi) {
    int64_t i = lo, j = mid, o = lo;
    while (i < mid && j < hi) {
        int right = src[j].key < src[i].key;
        const sort_item *t = right ? &src[j] : &src[i];
        dst[o++] = *t;
        j += right;
        i += !right;
    }
    while (i < mid) dst[o++] = src[i++];
    while (j < hi) dst[o++] = src[j++];
}

/* The first k (< n) items of a sorted, by a stable insertion into a
 * buffer of k: an item goes in only below the last kept one (equal keys:
 * the earlier item stays), which is rare past the first k when k is small
 * next to n. Returns where they are (tmp). */
static sort_item *sort_first(const sort_item *a, sort_item *tmp, int64_t n, int64_t k) {
    int64_t m = 0;
    for (int64_t j = 0; j < n; j++) {
        if (m == k && a[j].key >= tmp[k - 1].key) continue;
        int64_t i = m < k ? m++ : k - 1;
        for (; i > 0 && tmp[i - 1].key > a[j].key; i--) tmp[i] = tmp[i - 1];
        tmp[i] = a[j];
    }
    return tmp;
}

/* Sorts the n items of a (tmp: n more of scratch); returns where they are. */
static sort_item *sort_line(sort_item *a, sort_item *tmp, int64_t n) {
    sort_runs(a, n);
    sort_item *src = a, *dst = tmp;
    for (int64_t w = SORT_RUN; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w)
            sort_merge(src, dst, lo, HD_MIN(lo + w, n), HD_MIN(lo + 2 * w, n));
        sort_item *t = src;
        src = dst;
        dst = t;
    }
    return src;
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
    int64_t k = out->ndim ? out->shape[axis] : 1; /* topk: the first k only */
    if (lines == 0 || k == 0) return HD_OK;
    int nt = x->numel >= CPU_PAR_MIN && lines > 1 ? ctx->nthreads : 1;
    size_t per = (size_t)n * 2 * sizeof(sort_item), bytes = per * (size_t)nt;
    char *work = hd_ctx_alloc(ctx, bytes);
    if (!work) return ctx->status;
    int ints = !hd_dtype_is_float(x->dtype);
    uint64_t flip = attrs->ints[1] != 0 ? UINT64_MAX : 0; /* descending */
    const void *xd = hd_tensor_data(x);
    int64_t *od = hd_tensor_data(out);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t l = 0; l < lines; l++) {
        sort_item *a = (sort_item *)(work + per * (size_t)omp_get_thread_num()), *tmp = a + n;
        int64_t xb = sort_line_base(x, axis, l), ob = sort_line_base(out, axis, l);
        for (int64_t j = 0; j < n; j++) {
            uint64_t key = ints ? sort_key_int(hd_dtype_load_i64(x->dtype, xd, xb + j * xs))
                                : sort_key_float(hd_dtype_load(x->dtype, xd, xb + j * xs));
            a[j] = (sort_item){key ^ flip, j};
        }
        const sort_item *r =
            k < n && k <= SORT_FIRST_MAX ? sort_first(a, tmp, n, k) : sort_line(a, tmp, n);
        for (int64_t j = 0; j < k; j++) od[ob + j * os] = r[j].ix;
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
