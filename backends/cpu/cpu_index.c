/* Indexing kernels: index_select (gather along one axis), one_hot, and
 * assign (the in-place write behind x[i] = v). */
#include "cpu_kernels.h"

#include <omp.h>
#include <string.h>

/* Copy the i64 index tensor idx into a new contiguous buffer of idx->numel
 * values (*buf, freed by the caller with hd_ctx_free(n * 8)). */
static hd_status cpu_index_load(hd_ctx *ctx, const hd_tensor *idx, int64_t **buf) {
    if (idx->dtype != HD_I64)
        return hd_error(ctx, HD_ERR_RUNTIME, "indices must be i64 here, got %s",
                        hd_dtype_name(idx->dtype));
    *buf = hd_ctx_alloc(ctx, (size_t)idx->numel * sizeof(int64_t));
    if (!*buf) return ctx->status;
    int64_t strides[HD_MAX_DIMS];
    hd_contiguous_strides(idx->shape, idx->ndim, strides);
    hd_cpu_copy_strided(1, 8, idx->ndim, idx->shape, *buf, strides, hd_tensor_data(idx),
                        idx->strides);
    return HD_OK;
}

/* Turn negative indices into positions from the end; the first index
 * outside [-size, size) is an error that names it. */
static hd_status cpu_index_normalise(hd_ctx *ctx, int64_t *ix, int64_t n, int axis, int64_t size) {
    for (int64_t j = 0; j < n; j++) {
        int64_t v = ix[j] < 0 ? ix[j] + size : ix[j];
        if (v < 0 || v >= size)
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "index_select: index %lld is out of range for axis %d of size %lld",
                            (long long)ix[j], axis, (long long)size);
        ix[j] = v;
    }
    return HD_OK;
}

/* The geometry every gathered slab shares: x without its axis, and where
 * that lands in the output (whose idx dims sit where the axis was). */
typedef struct {
    int nd, es;
    int64_t shape[HD_MAX_DIMS], xs[HD_MAX_DIMS], os[HD_MAX_DIMS];
    int64_t inner; /* elements after the axis: output distance between slabs */
} cpu_gather_geom;

static void cpu_gather_geom_init(cpu_gather_geom *g, const hd_tensor *x, const hd_tensor *out,
                                 int axis, int idx_ndim) {
    g->nd = 0;
    g->es = hd_dtype_size(x->dtype);
    g->inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d == axis) continue;
        int od = d < axis ? d : d - 1 + idx_ndim;
        g->shape[g->nd] = x->shape[d];
        g->xs[g->nd] = x->strides[d];
        g->os[g->nd] = out->strides[od];
        g->nd++;
        if (d > axis) g->inner *= x->shape[d];
    }
}

/* o[j os] = x[ix[j] xs] for elements of es bytes: a loop of loads and
 * stores (a copy call per element cost 20 ns: take_along_axis and sort
 * gather single elements of x flattened). */
#define CPU_GATHER_LOOP(T)                                                                         \
    for (int64_t j = 0; j < n; j++) ((T *)o)[j * os] = ((const T *)x)[ix[j] * xs]
static void cpu_gather_elems(int es, char *o, int64_t os, const char *x, int64_t xs,
                             const int64_t *ix, int64_t n, int nt) {
    if (nt > 1) {
#pragma omp parallel num_threads(nt)
        {
            int64_t t = omp_get_thread_num(), m = omp_get_num_threads();
            int64_t lo = n * t / m, hi = n * (t + 1) / m;
            cpu_gather_elems(es, o + lo * os * es, os, x, xs, ix + lo, hi - lo, 1);
        }
        return;
    }
    switch (es) {
    case 1: CPU_GATHER_LOOP(uint8_t); break;
    case 2: CPU_GATHER_LOOP(uint16_t); break;
    case 4: CPU_GATHER_LOOP(uint32_t); break;
    case 8: CPU_GATHER_LOOP(uint64_t); break;
    default:
        for (int64_t j = 0; j < n; j++) memcpy(o + j * os * es, x + ix[j] * xs * es, (size_t)es);
    }
}

/* out[..., j, ...] = x[..., ix[j], ...] for every flat index position j:
 * one strided copy per j, run in parallel over j when there are many. */
static hd_status cpu_index_select(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in,
                                  const hd_attrs *attrs) {
    const hd_tensor *x = in[0], *idx = in[1];
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], x->ndim, &axis)) return ctx->status;
    int64_t *ix = NULL, n = idx->numel;
    if (cpu_index_load(ctx, idx, &ix)) return ctx->status;
    hd_status st = cpu_index_normalise(ctx, ix, n, axis, x->shape[axis]);
    if (st) goto done;
    cpu_gather_geom g;
    cpu_gather_geom_init(&g, x, out, axis, idx->ndim);
    const char *xb = hd_tensor_data(x);
    char *ob = hd_tensor_data(out);
    int64_t xstride = x->strides[axis];
    int many = out->numel >= CPU_PAR_MIN && n >= ctx->nthreads && ctx->nthreads > 1;
    int inner_threads = many ? 1 : ctx->nthreads;
    if (hd_shape_numel(g.shape, g.nd) == 1) { /* slabs of one element: x[i] of a 1-D x */
        cpu_gather_elems(g.es, ob, g.inner, xb, xstride, ix, n, many ? ctx->nthreads : 1);
        goto done;
    }
#pragma omp parallel for num_threads(ctx->nthreads) if (many) schedule(static)
    for (int64_t j = 0; j < n; j++)
        hd_cpu_copy_strided(inner_threads, g.es, g.nd, g.shape, ob + j * g.inner * g.es, g.os,
                            xb + ix[j] * xstride * g.es, g.xs);
done:
    hd_ctx_free(ctx, ix, (size_t)n * sizeof(int64_t));
    return st;
}

/* out[..., c] = (idx[...] == c); every index must be in [0, classes). */
static hd_status cpu_one_hot(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in,
                             const hd_attrs *attrs) {
    const hd_tensor *idx = in[0];
    int64_t classes = attrs->ints[0], n = idx->numel;
    if (out->dtype != HD_I64 || out->shape[out->ndim - 1] != classes)
        return hd_error(ctx, HD_ERR_RUNTIME, "one_hot: output must be i64 with %lld classes",
                        (long long)classes);
    int64_t *ix = NULL;
    if (cpu_index_load(ctx, idx, &ix)) return ctx->status;
    hd_status st = HD_OK;
    for (int64_t j = 0; j < n && !st; j++)
        if (ix[j] < 0 || ix[j] >= classes)
            st = hd_error(ctx, HD_ERR_RUNTIME,
                          "one_hot: index %lld is out of range for %lld classes (want 0 to %lld)",
                          (long long)ix[j], (long long)classes, (long long)classes - 1);
    if (!st) {
        int64_t *o = hd_tensor_data(out);
        memset(o, 0, hd_tensor_nbytes(out));
        for (int64_t j = 0; j < n; j++) o[j * classes + ix[j]] = 1;
    }
    hd_ctx_free(ctx, ix, (size_t)n * sizeof(int64_t));
    return st;
}

/* First and one-past-last byte a view can touch in its storage. */
static void cpu_view_extent(const hd_tensor *t, int64_t *lo, int64_t *hi) {
    int64_t a = t->offset, b = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        int64_t span = (t->shape[d] - 1) * t->strides[d];
        if (span < 0)
            a += span;
        else
            b += span;
    }
    int es = hd_dtype_size(t->dtype);
    *lo = a * es;
    *hi = (b + 1) * es;
}

static int cpu_views_overlap(const hd_tensor *a, const hd_tensor *b) {
    if (a->storage != b->storage || a->numel == 0 || b->numel == 0) return 0;
    int64_t alo, ahi, blo, bhi;
    cpu_view_extent(a, &alo, &ahi);
    cpu_view_extent(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

/* A destination where two positions share one element (an expanded view)
 * has no well-defined result; refuse it as PyTorch does. */
static hd_status cpu_assign_check_dst(hd_ctx *ctx, const hd_tensor *dst) {
    for (int d = 0; d < dst->ndim; d++)
        if (dst->strides[d] == 0 && dst->shape[d] > 1) {
            char sa[128];
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "assign: the destination %s is a broadcast view (dim %d repeats one "
                            "element); clone it before writing",
                            hd_shape_str(dst->shape, dst->ndim, sa, sizeof sa), d);
        }
    return HD_OK;
}

/* dst (in[0], also out) <- src (in[1], broadcast to dst's shape), in
 * place. A source sharing memory with the destination is first copied to
 * a temporary, so the result is as if every element were read first. */
static hd_status cpu_assign(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in) {
    hd_tensor *dst = in[0], *src = in[1], *tmp = NULL;
    if (out != dst || src->dtype != dst->dtype)
        return hd_error(ctx, HD_ERR_RUNTIME, "assign: source %s must match destination %s",
                        hd_dtype_name(src->dtype), hd_dtype_name(dst->dtype));
    if (cpu_assign_check_dst(ctx, dst)) return ctx->status;
    int es = hd_dtype_size(dst->dtype);
    if (cpu_views_overlap(dst, src)) {
        tmp = hd_tensor_new(ctx, src->dtype, src->shape, src->ndim);
        if (!tmp) return ctx->status;
        hd_cpu_copy_strided(ctx->nthreads, es, src->ndim, src->shape, hd_tensor_data(tmp),
                            tmp->strides, hd_tensor_data(src), src->strides);
        src = tmp;
    }
    int64_t sstrides[HD_MAX_DIMS];
    hd_broadcast_strides(src, dst->shape, dst->ndim, sstrides);
    hd_cpu_copy_strided(ctx->nthreads, es, dst->ndim, dst->shape, hd_tensor_data(dst), dst->strides,
                        hd_tensor_data(src), sstrides);
    hd_tensor_unref(tmp);
    return HD_OK;
}

hd_status hd_cpu_index(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                       const hd_attrs *attrs) {
    HD_UNUSED(nin);
    switch (op) {
    case HD_OP_INDEX_SELECT: return cpu_index_select(ctx, out, in, attrs);
    case HD_OP_ONE_HOT: return cpu_one_hot(ctx, out, in, attrs);
    case HD_OP_ASSIGN: return cpu_assign(ctx, out, in);
    case HD_OP_ARGSORT: return hd_cpu_sort(ctx, op, out, in, attrs);
    default: return hd_error(ctx, HD_ERR_RUNTIME, "%s is not a cpu index kernel", hd_op_name(op));
    }
}

int hd_cpu_index_supports(hd_op op, hd_dtype dt) {
    if ((unsigned)dt >= HD_DTYPE_COUNT) return 0;
    return op == HD_OP_INDEX_SELECT || op == HD_OP_ONE_HOT || op == HD_OP_ASSIGN ||
           op == HD_OP_ARGSORT;
}
