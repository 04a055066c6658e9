/* Copying shape ops (concat) and the strided copy the index kernels share. */
#include "cpu_kernels.h"

#include <string.h>

/* Pieces of one run below this many elements are not worth a thread. */
#define COPY_PIECE_MIN 4096

/* A copy after merging dims: the last dim is the run, the others are rows. */
typedef struct {
    int nd;
    int es;
    int64_t shape[HD_MAX_DIMS];
    int64_t ds[HD_MAX_DIMS], ss[HD_MAX_DIMS];
    char *dst;
    const char *src;
} cpu_copy_geom;

/* Drop size-1 dims and merge neighbours that are contiguous in both views,
 * so a contiguous-to-contiguous copy becomes one run. Always leaves at
 * least one dim. */
static void cpu_copy_geom_init(cpu_copy_geom *g, int ndim, const int64_t *shape,
                               const int64_t *dstride, const int64_t *sstride) {
    int k = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (k > 0 && g->ds[k - 1] == dstride[d] * shape[d] &&
            g->ss[k - 1] == sstride[d] * shape[d]) {
            g->shape[k - 1] *= shape[d];
            g->ds[k - 1] = dstride[d];
            g->ss[k - 1] = sstride[d];
            continue;
        }
        g->shape[k] = shape[d];
        g->ds[k] = dstride[d];
        g->ss[k] = sstride[d];
        k++;
    }
    if (k == 0) {
        g->shape[0] = 1;
        g->ds[0] = g->ss[0] = 1;
        k = 1;
    }
    g->nd = k;
}

/* Copy n elements with element strides ds and ss. */
static void cpu_copy_run(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, int es) {
    if (ds == 1 && ss == 1) {
        memcpy(d, s, (size_t)n * (size_t)es);
        return;
    }
    /* memcpy with a constant size compiles to one load and store, and
     * keeps the copy free of aliasing assumptions about the element type. */
    switch (es) {
    case 1:
        for (int64_t i = 0; i < n; i++) d[i * ds] = s[i * ss];
        break;
    case 2:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * ds * 2, s + i * ss * 2, 2);
        break;
    case 4:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * ds * 4, s + i * ss * 4, 4);
        break;
    case 8:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * ds * 8, s + i * ss * 8, 8);
        break;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * ds * es, s + i * ss * es, (size_t)es);
        break;
    }
}

/* Copy piece p (of `pieces` per run) of row r. */
static void cpu_copy_task(const cpu_copy_geom *g, int64_t r, int64_t p, int64_t pieces) {
    int64_t doff = 0, soff = 0;
    for (int k = g->nd - 2; k >= 0; k--) {
        int64_t i = r % g->shape[k];
        r /= g->shape[k];
        doff += i * g->ds[k];
        soff += i * g->ss[k];
    }
    int last = g->nd - 1;
    int64_t len = g->shape[last], plen = (len + pieces - 1) / pieces;
    int64_t start = p * plen, n = HD_MIN(plen, len - start);
    if (n <= 0) return;
    doff += start * g->ds[last];
    soff += start * g->ss[last];
    cpu_copy_run(g->dst + doff * g->es, g->ds[last], g->src + soff * g->es, g->ss[last], n, g->es);
}

void hd_cpu_copy_strided(int nthreads, int es, int ndim, const int64_t *shape, void *dst,
                         const int64_t *dstride, const void *src, const int64_t *sstride) {
    int64_t numel = hd_shape_numel(shape, ndim);
    if (numel <= 0) return;
    cpu_copy_geom g;
    cpu_copy_geom_init(&g, ndim, shape, dstride, sstride);
    g.es = es;
    g.dst = dst;
    g.src = src;
    int64_t len = g.shape[g.nd - 1], rows = numel / len;
    if (nthreads <= 1 || numel < CPU_PAR_MIN) {
        for (int64_t r = 0; r < rows; r++) cpu_copy_task(&g, r, 0, 1);
        return;
    }
    /* Few long runs: split each run so every thread gets work. */
    int64_t pieces = 1;
    if (rows < nthreads) pieces = HD_MAX(1, HD_MIN(nthreads, len / COPY_PIECE_MIN));
    int64_t ntask = rows * pieces;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t t = 0; t < ntask; t++) cpu_copy_task(&g, t / pieces, t % pieces, pieces);
}

/* concat: each input is copied into its slab of the output, a view with the
 * output's strides starting at the input's offset along the axis. */
static hd_status cpu_concat(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                            const hd_attrs *attrs) {
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], out->ndim, &axis)) return ctx->status;
    int es = hd_dtype_size(out->dtype);
    char *base = hd_tensor_data(out);
    int64_t at = 0;
    for (int k = 0; k < nin; k++) {
        const hd_tensor *t = in[k];
        if (t->dtype != out->dtype || t->ndim != out->ndim)
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "concat: input %d is %s with %d dims, want %s "
                            "with %d dims",
                            k, hd_dtype_name(t->dtype), t->ndim, hd_dtype_name(out->dtype),
                            out->ndim);
        char *dst = base + at * out->strides[axis] * es;
        hd_cpu_copy_strided(ctx->nthreads, es, t->ndim, t->shape, dst, out->strides,
                            hd_tensor_data(t), t->strides);
        at += t->shape[axis];
    }
    return HD_OK;
}

hd_status hd_cpu_shape(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                       const hd_attrs *attrs) {
    switch (op) {
    case HD_OP_CONCAT: return cpu_concat(ctx, out, in, nin, attrs);
    default: return hd_error(ctx, HD_ERR_RUNTIME, "%s is not a cpu shape kernel", hd_op_name(op));
    }
}

int hd_cpu_shape_supports(hd_op op, hd_dtype dt) {
    return op == HD_OP_CONCAT && (unsigned)dt < HD_DTYPE_COUNT;
}
