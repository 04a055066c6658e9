/* run_op of the CUDA backend: geometry on the host, generated kernels on
 * the device (cuda_src.c), matmul through cuBLAS (cuda_blas.c), and the
 * nn ops without a kernel of their own composed of ones that have one. */
#if HODU_HAVE_CUDA
#include "cuda_int.h"
#include "hd_rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A kernel argument: the element 0 of t, or NULL for an empty tensor
 * (whose storage is a marker in host memory: a kernel never reads it, and
 * a device pointer argument must be one). */
static void *ops_ptr(const hd_tensor *t) {
    if (t->numel == 0) return NULL;
    return (char *)t->storage->data + t->offset * hd_dtype_size(t->dtype);
}

/* Input i, a 0-d host tensor (a number, a cpu scalar) that op's kernel
 * reads as an argument. */
static int ops_host_number(hd_op op, int i, const hd_tensor *t) {
    return t->storage->backend != &hd_cuda_backend && t->ndim == 0 && hd_cuda_takes_number(op, i);
}

/* Inputs that live on the host (Hodu numbers mixed with device tensors)
 * are copied to the device first, except the numbers binary kernels take
 * as arguments; every dev[i] is a reference to unref. */
static hd_status ops_upload(hd_ctx *ctx, hd_op op, int device, hd_tensor *const *in, int nin,
                            hd_tensor **dev) {
    for (int i = 0; i < nin; i++) {
        dev[i] = NULL;
        if (in[i]->storage->backend == &hd_cuda_backend || ops_host_number(op, i, in[i])) {
            dev[i] = hd_tensor_ref(in[i]);
            continue;
        }
        if (hd_tensor_to_device(ctx, in[i], &hd_cuda_backend, device, &dev[i])) {
            for (int k = 0; k < i; k++) hd_tensor_unref(dev[k]);
            return ctx->status;
        }
    }
    return HD_OK;
}

/* ---- elementwise ---- */

typedef struct {
    int64_t n;
    int nd, pad;
    int64_t shape[8], so[8], s0[8], s1[8], s2[8];
} ops_ewgeo;

/* Can dims a (outer) and b (inner) be one dim for every operand? */
static int ew_geo_mergeable(const ops_ewgeo *g, int a, int b) {
    const int64_t *st[4] = {g->so, g->s0, g->s1, g->s2};
    for (int k = 0; k < 4; k++)
        if (st[k][a] != st[k][b] * g->shape[b]) return 0;
    return 1;
}

/* Dims of size 1 dropped and neighbours every operand steps through as one
 * merged: fewer divisions per element; a flat index (nd 0) where all that
 * is left is one dim every read operand (used[k]) and the output walk with
 * stride 1. */
static void ew_geo_collapse(ops_ewgeo *g, const int used[3]) {
    int64_t *st[4] = {g->so, g->s0, g->s1, g->s2};
    int nd = 0;
    for (int d = 0; d < g->nd; d++) {
        if (g->shape[d] == 1) continue;
        if (nd > 0 && ew_geo_mergeable(g, nd - 1, d)) {
            g->shape[nd - 1] *= g->shape[d];
            for (int k = 0; k < 4; k++) st[k][nd - 1] = st[k][d];
            continue;
        }
        g->shape[nd] = g->shape[d];
        for (int k = 0; k < 4; k++) st[k][nd] = st[k][d];
        nd++;
    }
    g->nd = nd;
    int flat = nd == 1 && g->so[0] == 1;
    for (int k = 0; k < 3; k++) flat = flat && (!used[k] || st[k + 1][0] == 1);
    if (flat || g->n <= 1) g->nd = 0;
}

static void ew_geo(ops_ewgeo *g, hd_op op, const hd_tensor *out, hd_tensor *const *in, int nin) {
    memset(g, 0, sizeof *g);
    g->n = out->numel;
    int contiguous = hd_tensor_is_contiguous(out), used[3] = {0, 0, 0};
    int64_t *ss[3] = {g->s0, g->s1, g->s2};
    for (int i = 0; i < nin; i++) {
        if (ops_host_number(op, i, in[i])) continue; /* an argument: no strides */
        used[i] = 1;
        hd_broadcast_strides(in[i], out->shape, out->ndim, ss[i]);
        contiguous = contiguous && in[i]->ndim == out->ndim && hd_tensor_is_contiguous(in[i]) &&
                     !memcmp(in[i]->shape, out->shape, (size_t)out->ndim * sizeof(int64_t));
    }
    if (contiguous) return; /* nd 0: flat indices everywhere */
    g->nd = out->ndim;
    memcpy(g->shape, out->shape, (size_t)out->ndim * sizeof(int64_t));
    memcpy(g->so, out->strides, (size_t)out->ndim * sizeof(int64_t));
    ew_geo_collapse(g, used);
}

/* Threads for an elementwise kernel: one per element, or, where its
 * vector path runs (contiguous float operands, cuda_src.c), one per 16
 * bytes of input: a grid for n elements would leave 3 threads in 4 (f32)
 * with nothing to do. Every loop of the kernel strides over the grid, so
 * where the path does not run after all (misaligned pointers) these
 * threads still cover every element. */
static int64_t ew_threads(hd_op op, hd_dtype idt, const hd_tensor *out, const ops_ewgeo *g) {
    if (g->nd != 0 || op == HD_OP_WHERE || !hd_dtype_is_float(idt) ||
        !hd_dtype_is_float(out->dtype))
        return out->numel;
    int64_t w = 16 / hd_dtype_size(idt);
    return (out->numel + w - 1) / w;
}

/* op's kernel for dtypes (idt, out's) over out and in. */
static hd_status ew_launch(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_dtype idt, hd_tensor *out,
                           hd_tensor *const *in, int nin, double s0, double s1) {
    CUfunction f;
    if (hd_cuda_kernel(ctx, d, op, idt, out->dtype, HD_CUDA_K_MAIN, &f)) return ctx->status;
    ops_ewgeo g;
    ew_geo(&g, op, out, in, nin);
    void *o = ops_ptr(out), *p[3] = {NULL, NULL, NULL};
    for (int i = 0; i < nin; i++) {
        if (!ops_host_number(op, i, in[i])) {
            p[i] = ops_ptr(in[i]);
            continue;
        }
        /* the number's bytes in s0 (where's second value: s1), its
         * pointer NULL (cuda_src.c) */
        double *slot = op == HD_OP_WHERE && i == 2 ? &s1 : &s0;
        memset(slot, 0, sizeof *slot);
        memcpy(slot, hd_tensor_data(in[i]), (size_t)hd_dtype_size(in[i]->dtype));
    }
    void *args[] = {&g, &o, &p[0], &p[1], &p[2], &s0, &s1};
    return hd_cuda_launch(ctx, d, f, ew_threads(op, idt, out, &g), args);
}

static hd_status ops_elementwise(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                                 hd_tensor *const *in, int nin, const hd_attrs *attrs) {
    hd_dtype idt = op == HD_OP_WHERE ? out->dtype : in[0]->dtype;
    if (op == HD_OP_ASSIGN) /* dst view <- src (already of dst's dtype) */
        return ew_launch(ctx, d, HD_OP_COPY, idt, in[0], in + 1, 1, 0, 0);
    double s0 = attrs ? attrs->scalar[0] : 0, s1 = attrs ? attrs->scalar[1] : 0;
    return ew_launch(ctx, d, op, idt, out, in, nin, s0, s1);
}

/* concat: one strided copy per input into its slice of the output. */
static hd_status ops_concat(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *const *in,
                            int nin, const hd_attrs *attrs) {
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], out->ndim, &axis)) return ctx->status;
    int64_t at = 0;
    for (int i = 0; i < nin && !ctx->status; i++) {
        if (in[i]->numel == 0) continue;
        hd_tensor *slice = hd_tensor_view(ctx, out, in[i]->shape, out->strides, out->ndim,
                                          out->offset + at * out->strides[axis]);
        if (!slice) return ctx->status;
        hd_status st = ew_launch(ctx, d, HD_OP_COPY, out->dtype, slice, &in[i], 1, 0, 0);
        hd_tensor_unref(slice);
        if (st) return st;
        at += in[i]->shape[axis];
    }
    return HD_OK;
}

/* ---- reductions ---- */

typedef struct {
    int64_t nout, nred;
    int ond, rnd;
    int64_t oshape[8], ostr[8], rshape[8], rstr[8];
} ops_rgeo;

/* One block per output reads nred elements: for few outputs of many
 * elements that is a handful of the GPU's SMs, so sum / mean / prod / max /
 * min split each output into chunks a block each (hd_cuda_split_chunk),
 * then combine the partials. 0: no split. */
static int64_t ops_reduce_chunk(const hd_cuda_dev *d, hd_op op, const ops_rgeo *g) {
    if (!hd_cuda_reduce_splits(op)) return 0;
    return hd_cuda_split_chunk(g->nout, g->nred, d->resident);
}

static hd_status ops_reduce_launch(hd_ctx *ctx, hd_cuda_dev *d, CUfunction f, int64_t blocks,
                                   void **args) {
    int64_t grid = blocks < 65535 * 16 ? blocks : 65535 * 16;
    return hd_cuda_launch_grid(ctx, d, f, (unsigned)grid, 256, args);
}

/* The second pass of a split reduction: each output's S partials. */
static hd_status ops_reduce_fin(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, const hd_tensor *x,
                                hd_tensor *out, const ops_rgeo *g, void *part, int64_t S) {
    CUfunction f;
    if (hd_cuda_kernel(ctx, d, op, x->dtype, out->dtype, HD_CUDA_K_FIN, &f)) return ctx->status;
    void *o = ops_ptr(out);
    void *args[] = {(void *)g, &o, &part, &S};
    return ops_reduce_launch(ctx, d, f, g->nout, args);
}

static hd_status ops_reduce(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                            hd_tensor *const *in, const hd_attrs *attrs) {
    const hd_tensor *x = in[0];
    unsigned mask = 0;
    for (int i = 0; i < attrs->naxes; i++) {
        int a;
        if (hd_norm_axis(ctx, attrs->axes[i], x->ndim, &a)) return ctx->status;
        mask |= 1u << a;
    }
    if (attrs->naxes == 0) mask = ~0u;
    ops_rgeo g;
    memset(&g, 0, sizeof g);
    g.nout = out->numel;
    g.nred = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (mask & (1u << i)) {
            g.rshape[g.rnd] = x->shape[i];
            g.rstr[g.rnd++] = x->strides[i];
            g.nred *= x->shape[i];
        } else {
            g.oshape[g.ond] = x->shape[i];
            g.ostr[g.ond++] = x->strides[i];
        }
    }
    CUfunction f;
    if (hd_cuda_kernel(ctx, d, op, x->dtype, out->dtype, HD_CUDA_K_MAIN, &f)) return ctx->status;
    void *o = ops_ptr(out), *a = ops_ptr(x), *part = NULL;
    double corr = (double)attrs->ints[0];
    int64_t chunk = ops_reduce_chunk(d, op, &g), parts = 0;
    void *args[] = {&g, &o, &a, &corr, &chunk, &part};
    if (chunk > 0) {
        parts = g.nout * ((g.nred + chunk - 1) / chunk);
        part = (void *)(uintptr_t)hd_cuda_scratch(ctx, out->storage->device, (size_t)parts * 8);
        if (!part) return ctx->status;
    }
    hd_status st = ops_reduce_launch(ctx, d, f, chunk > 0 ? parts : g.nout, args);
    if (!st && chunk > 0) st = ops_reduce_fin(ctx, d, op, x, out, &g, part, parts / g.nout);
    if (part)
        hd_cuda_scratch_free(ctx, out->storage->device, (CUdeviceptr)(uintptr_t)part,
                             (size_t)parts * 8);
    return st;
}

/* ---- rows: softmax family, cumsum and cumprod over attrs->ints[0] ---- */

typedef struct {
    int64_t rows, len;
    int nd, rev; /* rev: cumsum from the last element back */
    int64_t shape[8], sa[8], sb[8], so[8];
    int64_t la, lb, lo;
} ops_rowgeo;

static hd_status ops_rows(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                          hd_tensor *const *in, int nin, const hd_attrs *attrs) {
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], out->ndim, &axis)) return ctx->status;
    ops_rowgeo g;
    memset(&g, 0, sizeof g);
    const hd_tensor *b = nin > 1 ? in[1] : in[0];
    g.len = out->ndim ? out->shape[axis] : 1;
    g.rows = g.len ? out->numel / g.len : 0;
    g.rev = op == HD_OP_CUMSUM && attrs->ints[1];
    for (int i = 0; i < out->ndim; i++) {
        if (i == axis) continue;
        g.shape[g.nd] = out->shape[i];
        g.sa[g.nd] = in[0]->strides[i];
        g.sb[g.nd] = b->strides[i];
        g.so[g.nd++] = out->strides[i];
    }
    if (out->ndim) {
        g.la = in[0]->strides[axis];
        g.lb = b->strides[axis];
        g.lo = out->strides[axis];
    }
    CUfunction f;
    if (hd_cuda_kernel(ctx, d, op, out->dtype, out->dtype, HD_CUDA_K_MAIN, &f)) return ctx->status;
    void *o = ops_ptr(out), *pa = ops_ptr(in[0]), *pb = ops_ptr(b);
    void *args[] = {&g, &o, &pa, &pb};
    int64_t grid = g.rows < 65535 * 16 ? g.rows : 65535 * 16;
    return hd_cuda_launch_grid(ctx, d, f, (unsigned)grid, 256, args);
}

/* ---- argsort: merge passes (cuda_src_more.c), positions ping-ponging
 * between two scratch buffers of rows x len ---- */

typedef struct {
    int64_t rows, len;
    int nd, desc;
    int64_t shape[8], sa[8], so[8];
    int64_t la, lo, w;
    int first, last;
} ops_sortgeo;

static hd_status ops_argsort(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *const *in,
                             const hd_attrs *attrs);

/* The first k positions only (topk's): the whole order into a scratch
 * tensor, then its first k along the axis copied out. */
static hd_status ops_argsort_first(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out,
                                   hd_tensor *const *in, const hd_attrs *attrs) {
    hd_tensor *x = in[0];
    hd_tensor *all =
        hd_tensor_new_on(ctx, &hd_cuda_backend, out->storage->device, HD_I64, x->shape, x->ndim);
    if (!all) return ctx->status;
    hd_attrs at = *attrs;
    at.ints[2] = 0;
    hd_status st = ops_argsort(ctx, d, all, in, &at);
    hd_tensor *first =
        st ? NULL : hd_tensor_view(ctx, all, out->shape, all->strides, all->ndim, all->offset);
    if (!st && !first) st = ctx->status;
    if (!st) st = ew_launch(ctx, d, HD_OP_COPY, HD_I64, out, &first, 1, 0, 0);
    hd_tensor_unref(first);
    hd_tensor_unref(all);
    return st;
}

static hd_status ops_argsort(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *const *in,
                             const hd_attrs *attrs) {
    hd_tensor *x = in[0];
    int axis;
    if (hd_norm_axis(ctx, attrs->ints[0], x->ndim, &axis)) return ctx->status;
    if (x->ndim && out->shape[axis] < x->shape[axis])
        return ops_argsort_first(ctx, d, out, in, attrs);
    ops_sortgeo g;
    memset(&g, 0, sizeof g);
    g.desc = attrs->ints[1] != 0;
    g.len = x->ndim ? x->shape[axis] : 1;
    g.rows = g.len ? x->numel / g.len : 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i == axis) continue;
        g.shape[g.nd] = x->shape[i];
        g.sa[g.nd] = x->strides[i];
        g.so[g.nd++] = out->strides[i];
    }
    g.la = x->ndim ? x->strides[axis] : 0;
    g.lo = out->ndim ? out->strides[axis] : 0;
    if (g.rows == 0) return HD_OK;
    int passes = 1;
    while (passes < 62 && ((int64_t)1 << passes) < g.len) passes++;
    CUfunction f;
    if (hd_cuda_kernel(ctx, d, HD_OP_ARGSORT, x->dtype, HD_I64, HD_CUDA_K_MAIN, &f))
        return ctx->status;
    size_t bytes = (size_t)(g.rows * g.len) * sizeof(int64_t);
    CUdeviceptr buf[2] = {0, 0};
    for (int b = 0; b < 2 && passes > 1; b++)
        if (!(buf[b] = hd_cuda_scratch(ctx, out->storage->device, bytes))) break;
    hd_status st = passes > 1 && (!buf[0] || !buf[1]) ? ctx->status : HD_OK;
    void *o = ops_ptr(out), *pa = ops_ptr(x);
    for (int p = 0; p < passes && !st; p++) {
        g.w = (int64_t)1 << p;
        g.first = p == 0;
        g.last = p == passes - 1;
        void *src = (void *)(uintptr_t)buf[(p + 1) % 2], *dst = (void *)(uintptr_t)buf[p % 2];
        void *args[] = {&g, &o, &pa, &src, &dst};
        st = hd_cuda_launch(ctx, d, f, g.rows * g.len, args);
    }
    for (int b = 0; b < 2; b++)
        if (buf[b]) hd_cuda_scratch_free(ctx, out->storage->device, buf[b], bytes);
    return st;
}

/* ---- creation ---- */

static int ops_arange_exact(hd_dtype dt, double start, double step, int64_t n) {
    return !hd_dtype_is_float(dt) && start == (double)(int64_t)start &&
           step == (double)(int64_t)step &&
           (start < 0 ? -start : start) + (double)n * (step < 0 ? -step : step) <
               4611686018427387904.0;
}

static _Thread_local CUdeviceptr ops_rng_dev;

CUdeviceptr hd_cuda_rng_from(CUdeviceptr kb) {
    CUdeviceptr was = ops_rng_dev;
    ops_rng_dev = kb;
    return was;
}

/* A draw of n numbers: the device's key and base where the cuda compiler
 * wrote them (the kernel's kb_ argument), else the next n of the
 * context's stream (base; the key is the kernel's by value). */
static void *ops_rng_draw(hd_ctx *ctx, int draws, int64_t n, uint64_t *base) {
    if (!draws) return NULL;
    if (ops_rng_dev) return (void *)(uintptr_t)ops_rng_dev;
    *base = hd_rng_reserve(ctx, n);
    return NULL;
}

static hd_status ops_create(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                            const hd_attrs *attrs) {
    int64_t n = out->numel, cols = out->ndim == 2 ? out->shape[1] : 1;
    double s0 = attrs->scalar[0], s1 = attrs->scalar[1], s2 = attrs->scalar[2];
    uint64_t key = ctx->rng_seed, base = 0;
    int exact = op == HD_OP_ARANGE && ops_arange_exact(out->dtype, s0, s2, n);
    if (op == HD_OP_RANDN && !(s1 >= 0))
        return hd_error(ctx, HD_ERR_RUNTIME, "randn: std must be >= 0, got %g", s1);
    if (op == HD_OP_EYE && out->ndim != 2)
        return hd_error(ctx, HD_ERR_RUNTIME, "eye: output must have 2 dims");
    CUfunction f;
    if (hd_cuda_kernel(ctx, d, op, out->dtype, out->dtype, HD_CUDA_K_MAIN, &f)) return ctx->status;
    void *kb = ops_rng_draw(ctx, op == HD_OP_RAND || op == HD_OP_RANDN, n, &base);
    void *o = ops_ptr(out);
    void *args[] = {&n, &o, &s0, &s1, &s2, &key, &base, &cols, &exact, &kb};
    return hd_cuda_launch(ctx, d, f, n, args);
}

/* ---- indexing: indices checked on the host (the cpu's messages) ---- */

/* idx (any int dtype, any device) as a new contiguous i64 host tensor with
 * negative entries wrapped; errors name the first bad index. */
static hd_status ops_host_indices(hd_ctx *ctx, hd_op op, const hd_tensor *idx, int axis,
                                  int64_t size, hd_tensor **out) {
    hd_tensor *h = hd_tensor_to_host(ctx, (hd_tensor *)idx);
    if (!h) return ctx->status;
    hd_tensor *c = NULL;
    hd_status st = h->dtype == HD_I64 ? HD_OK : hd_op_cast(ctx, h, HD_I64, &c);
    if (!st && !c) c = hd_tensor_contiguous(ctx, h);
    hd_tensor_unref(h);
    if (st || !c) return ctx->status;
    int64_t *p = hd_tensor_data(c), lo = 0, hi = 0;
    if (c->numel) hd_i64_range(p, c->numel, &lo, &hi);
    for (int64_t j = 0; j < c->numel && !st; j++) {
        int64_t v = op == HD_OP_ONE_HOT ? p[j] : p[j] < 0 ? p[j] + size : p[j];
        if (v >= 0 && v < size) {
            p[j] = v;
        } else if (op == HD_OP_ONE_HOT) {
            st = hd_error(ctx, HD_ERR_RUNTIME,
                          "one_hot: index %lld is out of range for %lld classes (want 0 to %lld)",
                          (long long)p[j], (long long)size, (long long)size - 1);
        } else {
            st = hd_error(ctx, HD_ERR_RUNTIME,
                          "%s: index %lld is out of range for axis %d of size %lld",
                          op == HD_OP_INDEX_ADD ? "index_add" : "index_select", (long long)p[j],
                          axis, (long long)size);
        }
    }
    if (st) {
        hd_tensor_unref(c);
        return st;
    }
    if (c->numel) hd_tensor_note_range(idx, lo, hi); /* the next check of idx unchanged: none */
    *out = c;
    return HD_OK;
}

/* op's kernel (cuda_src_more.c) over x contiguous as [pre, X, post]
 * (index_select, index_add; NULL for one_hot, with X its classes) and
 * idx, J checked i64 indices in device memory: negative ones count from
 * the end (the kernel wraps them), none is out of range. */
static hd_status index_launch(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_cuda_kvariant v,
                              hd_tensor *out, const hd_tensor *x, const void *idx, int64_t J,
                              int64_t X, int64_t post) {
    const hd_cuda_api *a = hd_cuda_api_get();
    if (op != HD_OP_INDEX_SELECT && /* scatter into zeros */
        hd_cuda_check(
            ctx,
            a->memset_d8((CUdeviceptr)(uintptr_t)ops_ptr(out), 0, hd_tensor_nbytes(out), d->stream),
            "cuMemsetD8Async"))
        return ctx->status;
    CUfunction f;
    hd_dtype dt = x ? x->dtype : HD_I64;
    if (hd_cuda_kernel(ctx, d, op, dt, op == HD_OP_ONE_HOT ? HD_I64 : dt, v, &f))
        return ctx->status;
    int64_t n = op == HD_OP_INDEX_SELECT ? out->numel : op == HD_OP_INDEX_ADD ? x->numel : J;
    void *o = ops_ptr(out), *px = x ? ops_ptr(x) : NULL, *pi = (void *)idx;
    void *args[] = {&n, &o, &px, &pi, op == HD_OP_ONE_HOT ? &X : &J, &X, &post};
    return hd_cuda_launch(ctx, d, f, n, args);
}

static _Thread_local int ops_indices_checked;

int hd_cuda_indices_checked(int on) {
    int was = ops_indices_checked;
    ops_indices_checked = on;
    return was;
}

/* Indices the kernels may read as they are: i64, contiguous, on the
 * device, and already checked by the cuda compiler before the run
 * (hd_cuda_indices_checked). */
static int ops_prechecked(const hd_tensor *idx) {
    return ops_indices_checked && idx->storage->backend == &hd_cuda_backend &&
           idx->dtype == HD_I64 && hd_tensor_is_contiguous(idx);
}

/* i64 indices contiguous on the device whose values are known to lie in
 * [lo, hi] (noted when they came up from the host, were made by randint
 * or were checked, and not written since): read as they are, unchecked. */
static int ops_known(const hd_tensor *idx, int64_t lo, int64_t hi) {
    return idx->storage->backend == &hd_cuda_backend && hd_tensor_is_contiguous(idx) &&
           hd_tensor_known_within(idx, lo, hi);
}

/* The least index op accepts (index_select and index_add count negative
 * ones from the end). */
static int64_t ops_index_lo(hd_op op, int64_t size) {
    return op == HD_OP_ONE_HOT ? 0 : -size;
}

/* The indices are checked on the host (one copy back, so errors are the
 * cpu's and come at once) unless known to be in range (ops_known); i64
 * indices already contiguous on the device are then read where they are,
 * others go up checked. */
static hd_status ops_index(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                           hd_tensor *const *in, const hd_attrs *attrs) {
    const hd_tensor *x = op == HD_OP_ONE_HOT ? NULL : in[0];
    const hd_tensor *idx = op == HD_OP_ONE_HOT ? in[0] : in[1];
    const int64_t *shape = op == HD_OP_INDEX_ADD ? out->shape : x ? x->shape : NULL;
    int nd = op == HD_OP_INDEX_ADD ? out->ndim : x ? x->ndim : 0, axis = 0;
    if (x && hd_norm_axis(ctx, attrs->ints[0], nd, &axis)) return ctx->status;
    int64_t size = x ? shape[axis] : attrs->ints[0], post = 1;
    for (int i = axis + 1; x && i < nd; i++) post *= shape[i];
    hd_tensor *hi = NULL, *di = NULL, *xc = NULL;
    int checked = ops_prechecked(idx) || ops_known(idx, ops_index_lo(op, size), size - 1);
    if (!checked && ops_host_indices(ctx, op, idx, axis, size, &hi)) return ctx->status;
    hd_status st = HD_OK;
    if (checked || (idx->storage->backend == &hd_cuda_backend && idx->dtype == HD_I64 &&
                    hd_tensor_is_contiguous(idx)))
        di = hd_tensor_ref((hd_tensor *)idx);
    else
        st = hd_tensor_to_device(ctx, hi, &hd_cuda_backend, out->storage->device, &di);
    if (!st && x && !(xc = hd_tensor_contiguous(ctx, (hd_tensor *)x))) st = ctx->status;
    if (!st)
        st = index_launch(ctx, d, op, HD_CUDA_K_MAIN, out, xc, ops_ptr(di), idx->numel, size, post);
    hd_tensor_unref(hi);
    hd_tensor_unref(di);
    hd_tensor_unref(xc);
    return st;
}

/* ---- dropout ---- */

static hd_status ops_dropout(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                             hd_tensor *const *in, const hd_attrs *attrs) {
    double p = attrs->scalar[0];
    hd_tensor *x = hd_tensor_contiguous(ctx, in[0]);
    if (!x) return ctx->status;
    hd_status st = HD_OK;
    if (op == HD_OP_DROPOUT && !attrs->ints[0]) { /* not training: a copy, no draw */
        st = ew_launch(ctx, d, HD_OP_COPY, x->dtype, out, &x, 1, 0, 0);
        hd_tensor_unref(x);
        return st;
    }
    uint64_t key = op == HD_OP_DROPOUT ? ctx->rng_seed : (uint64_t)attrs->ints[1];
    CUfunction f;
    st = hd_cuda_kernel(ctx, d, op, x->dtype, x->dtype, HD_CUDA_K_MAIN, &f);
    if (!st) {
        uint64_t base = (uint64_t)attrs->ints[2];
        int64_t n = x->numel;
        void *kb = ops_rng_draw(ctx, op == HD_OP_DROPOUT, n, &base);
        void *o = ops_ptr(out), *px = ops_ptr(x);
        void *args[] = {&n, &o, &px, &p, &key, &base, &kb};
        st = hd_cuda_launch(ctx, d, f, n, args);
    }
    hd_tensor_unref(x);
    return st;
}

/* ---- compositions ---- */

/* out <- t (a strided copy kernel on the device). */
static hd_status ops_into(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *t) {
    return ew_launch(ctx, d, HD_OP_COPY, out->dtype, out, &t, 1, 0, 0);
}

/* r = op(a, b) or op(a) with attributes; steals nothing. */
static hd_tensor *ops_run(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, const hd_attrs *at) {
    hd_tensor *in[2] = {a, b}, *r = NULL;
    if (!a || (hd_op_infos[op].arity == 2 && !b)) return NULL;
    hd_op_run(ctx, op, in, hd_op_infos[op].arity, at, &r);
    return r;
}

static hd_tensor *ops_number(hd_ctx *ctx, double v) {
    return hd_tensor_number(ctx, HD_F64, v);
}

/* mse: mean((a - b)^2). */
static hd_status ops_mse(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *const *in) {
    hd_tensor *df = ops_run(ctx, HD_OP_SUB, in[0], in[1], NULL);
    hd_tensor *sq = ops_run(ctx, HD_OP_MUL, df, df, NULL);
    hd_tensor *m = ops_run(ctx, HD_OP_MEAN, sq, NULL, NULL);
    hd_status st = m ? ops_into(ctx, d, out, m) : ctx->status;
    hd_tensor_unref(df);
    hd_tensor_unref(sq);
    hd_tensor_unref(m);
    return st;
}

/* The causal mask of attention on the device: 0 where query i may attend
 * to key j (j <= i), -inf elsewhere; [L, S] of dtype dt. */
static hd_tensor *ops_causal_mask(hd_ctx *ctx, hd_dtype dt, int64_t l, int64_t s, int device) {
    int64_t shape[2] = {l, s};
    hd_tensor *h = hd_tensor_new(ctx, dt, shape, 2), *m = NULL;
    if (!h) return NULL;
    for (int64_t i = 0; i < l; i++)
        for (int64_t j = 0; j < s; j++)
            hd_dtype_store(dt, h->storage->data, i * s + j, j <= i ? 0.0 : -INFINITY);
    hd_tensor_to_device(ctx, h, &hd_cuda_backend, device, &m);
    hd_tensor_unref(h);
    return m;
}

/* The last two dims of t swapped (a view). */
static hd_tensor *ops_transpose(hd_ctx *ctx, hd_tensor *t) {
    if (!t) return NULL;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int nd = t->ndim;
    at.nshape = nd;
    for (int i = 0; i < nd; i++) at.shape[i] = i;
    at.shape[nd - 1] = nd - 2, at.shape[nd - 2] = nd - 1;
    return ops_run(ctx, HD_OP_PERMUTE, t, NULL, &at);
}

/* attention's weights softmax(scale q k^T + mask) ([..., L, S]; in: q, k
 * and the mask or NULL), of the table's ops. */
static hd_tensor *ops_attention_probs(hd_ctx *ctx, hd_tensor *q, hd_tensor *k, hd_tensor *mask,
                                      const hd_attrs *attrs, int device) {
    int nd = k->ndim;
    hd_tensor *kt = ops_transpose(ctx, k);
    hd_tensor *qk = ops_run(ctx, HD_OP_MATMUL, q, kt, NULL),
              *sc = ops_number(ctx, attrs->scalar[0]);
    hd_tensor *s = ops_run(ctx, HD_OP_MUL, qk, sc, NULL), *sm = NULL, *cm = NULL, *sc2 = NULL;
    hd_tensor *cur = s;
    if (mask) cur = sm = ops_run(ctx, HD_OP_ADD, cur, mask, NULL);
    if (attrs->ints[0] && cur) {
        cm = ops_causal_mask(ctx, cur->dtype, q->shape[nd - 2], k->shape[nd - 2], device);
        cur = sc2 = ops_run(ctx, HD_OP_ADD, cur, cm, NULL);
    }
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = -1;
    hd_tensor *p = ops_run(ctx, HD_OP_SOFTMAX, cur, NULL, &at);
    hd_tensor *all[] = {kt, qk, sc, s, sm, cm, sc2};
    for (int i = 0; i < 7; i++) hd_tensor_unref(all[i]);
    return p;
}

/* attention: softmax(scale q k^T + mask) v, of the table's ops (the cpu's
 * fused kernel keeps no scores; here they are a tensor). */
static hd_status ops_attention(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *const *in,
                               int nin, const hd_attrs *attrs) {
    hd_tensor *p = ops_attention_probs(ctx, in[0], in[1], nin == 4 ? in[3] : NULL, attrs,
                                       out->storage->device);
    hd_tensor *y = ops_run(ctx, HD_OP_MATMUL, p, in[2], NULL);
    hd_status st = y ? ops_into(ctx, d, out, y) : ctx->status;
    hd_tensor_unref(p);
    hd_tensor_unref(y);
    return st;
}

/* attention_bwd (q, k, v, y, g[, mask]) as the gradient rule's
 * composition: p again, dv = p^T g, ds = softmax_bwd(p, g v^T), dq =
 * scale ds k, dk = scale ds^T q, stacked along the rows into out. */
static hd_status ops_attention_bwd(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out,
                                   hd_tensor *const *in, int nin, const hd_attrs *attrs) {
    hd_tensor *q = in[0], *k = in[1], *v = in[2], *g = in[4];
    hd_tensor *p =
        ops_attention_probs(ctx, q, k, nin == 6 ? in[5] : NULL, attrs, out->storage->device);
    hd_tensor *pt = ops_transpose(ctx, p), *vt = ops_transpose(ctx, v);
    hd_tensor *dv = ops_run(ctx, HD_OP_MATMUL, pt, g, NULL);
    hd_tensor *gv = ops_run(ctx, HD_OP_MATMUL, g, vt, NULL);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = -1;
    hd_tensor *ds = ops_run(ctx, HD_OP_SOFTMAX_BWD, p, gv, &at);
    hd_tensor *dst = ops_transpose(ctx, ds), *sc = ops_number(ctx, attrs->scalar[0]);
    hd_tensor *dq0 = ops_run(ctx, HD_OP_MATMUL, ds, k, NULL);
    hd_tensor *dk0 = ops_run(ctx, HD_OP_MATMUL, dst, q, NULL);
    hd_tensor *dq = ops_run(ctx, HD_OP_MUL, dq0, sc, NULL),
              *dk = ops_run(ctx, HD_OP_MUL, dk0, sc, NULL);
    hd_tensor *cat = NULL;
    if (dq && dk && dv) {
        hd_tensor *parts[3] = {dq, dk, dv};
        at.ints[0] = -2;
        hd_op_run(ctx, HD_OP_CONCAT, parts, 3, &at, &cat);
    }
    hd_status st = cat ? ops_into(ctx, d, out, cat) : ctx->status;
    hd_tensor *all[] = {p, pt, vt, dv, gv, ds, dst, sc, dq0, dk0, dq, dk, cat};
    for (int i = 0; i < 13; i++) hd_tensor_unref(all[i]);
    return st;
}

/* cross_entropy's labels (i64) checked on the host against c classes,
 * one copy back, so that errors come at once with the cpu's message; the
 * checked contiguous host copy in *host where asked. */
static hd_status ops_ce_check(hd_ctx *ctx, const hd_tensor *labels, int64_t c, hd_tensor **host) {
    if (labels->dtype != HD_I64)
        return hd_error(ctx, HD_ERR_RUNTIME, "cross_entropy: labels must be i64, got %s",
                        hd_dtype_name(labels->dtype));
    if (!host && ops_known(labels, 0, c - 1)) return HD_OK;
    hd_tensor *h = hd_tensor_to_host(ctx, (hd_tensor *)labels);
    hd_tensor *hc = h ? hd_tensor_contiguous(ctx, h) : NULL;
    hd_tensor_unref(h);
    if (!hc) return ctx->status;
    const int64_t *p = hd_tensor_data(hc);
    int64_t lo = 0, hi = 0;
    if (hc->numel) hd_i64_range(p, hc->numel, &lo, &hi);
    if (hc->numel && lo >= 0 && hi < c) hd_tensor_note_range(labels, lo, hi);
    hd_status st = HD_OK;
    for (int64_t r = 0; r < hc->numel && !st; r++)
        if (p[r] < 0 || p[r] >= c)
            st = hd_error(ctx, HD_ERR_RUNTIME,
                          "cross_entropy: label %lld (sample %lld) is out of range for %lld "
                          "classes",
                          (long long)p[r], (long long)r, (long long)c);
    if (st || !host)
        hd_tensor_unref(hc);
    else
        *host = hc;
    return st;
}

/* The labels as the pick kernel reads them, i64 and contiguous on the
 * device: checked first (ops_ce_check) unless the cuda compiler checked
 * them before its run, then the labels themselves where they are so, else
 * the checked copy sent up. */
static hd_status ops_ce_labels(hd_ctx *ctx, const hd_tensor *x, hd_tensor *labels, int device,
                               hd_tensor **out) {
    if (ops_prechecked(labels) || ops_known(labels, 0, x->shape[x->ndim - 1] - 1)) {
        *out = hd_tensor_ref(labels);
        return HD_OK;
    }
    hd_tensor *hc = NULL;
    hd_status st = ops_ce_check(ctx, labels, x->shape[x->ndim - 1], &hc);
    if (!st && labels->storage->backend == &hd_cuda_backend && hd_tensor_is_contiguous(labels))
        *out = hd_tensor_ref(labels);
    else if (!st)
        st = hd_tensor_to_device(ctx, hc, &hd_cuda_backend, device, out);
    hd_tensor_unref(hc);
    return st;
}

hd_status hd_cuda_check_indices(hd_ctx *ctx, hd_op op, const hd_tensor *idx, int axis,
                                int64_t size) {
    if (op == HD_OP_CROSS_ENTROPY) return ops_ce_check(ctx, idx, size, NULL);
    if (op == HD_OP_CROSS_ENTROPY_BWD) op = HD_OP_ONE_HOT; /* its one_hot's check */
    if (ops_known(idx, ops_index_lo(op, size), size - 1)) return HD_OK;
    hd_tensor *h = NULL;
    hd_status st = ops_host_indices(ctx, op, idx, axis, size, &h);
    hd_tensor_unref(h);
    return st;
}

/* cross_entropy: -mean(log_softmax(x)[r, label[r]]). */
static hd_status ops_cross_entropy(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out,
                                   hd_tensor *const *in) {
    hd_tensor *x = in[0], *lab = NULL;
    if (ops_ce_labels(ctx, x, in[1], out->storage->device, &lab)) return ctx->status;
    int64_t c = x->shape[x->ndim - 1], rows = x->ndim == 2 ? x->shape[0] : 1;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = -1;
    hd_tensor *ls = ops_run(ctx, HD_OP_LOG_SOFTMAX, x, NULL, &at), *pick = NULL;
    if (ls &&
        (pick =
             hd_tensor_new_on(ctx, &hd_cuda_backend, out->storage->device, x->dtype, &rows, 1)) &&
        index_launch(ctx, d, HD_OP_INDEX_SELECT, HD_CUDA_K_PICK, pick, ls, ops_ptr(lab), rows, c,
                     1)) {
        hd_tensor_unref(pick);
        pick = NULL;
    }
    hd_tensor *m = ops_run(ctx, HD_OP_MEAN, pick, NULL, NULL);
    hd_tensor *neg = ops_run(ctx, HD_OP_NEG, m, NULL, NULL);
    hd_status st = neg ? ops_into(ctx, d, out, neg) : ctx->status;
    hd_tensor *all[] = {lab, ls, pick, m, neg};
    for (int i = 0; i < 5; i++) hd_tensor_unref(all[i]);
    return st;
}

/* cross_entropy_bwd: g * (softmax(x) - one_hot(labels)) / N. */
static hd_status ops_cross_entropy_bwd(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out,
                                       hd_tensor *const *in) {
    hd_tensor *x = in[0];
    int64_t c = x->shape[x->ndim - 1], rows = x->ndim == 2 ? x->shape[0] : 1;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = -1;
    hd_tensor *sm = ops_run(ctx, HD_OP_SOFTMAX, x, NULL, &at);
    memset(&at, 0, sizeof at);
    at.ints[0] = c;
    hd_tensor *oh = ops_run(ctx, HD_OP_ONE_HOT, in[1], NULL, &at), *ohf = NULL;
    if (oh) hd_op_cast(ctx, oh, x->dtype, &ohf);
    hd_tensor *df = ops_run(ctx, HD_OP_SUB, sm, ohf, NULL);
    hd_tensor *n = ops_number(ctx, 1.0 / (double)(rows ? rows : 1));
    hd_tensor *gs = ops_run(ctx, HD_OP_MUL, in[2], n, NULL);
    hd_tensor *r = ops_run(ctx, HD_OP_MUL, df, gs, NULL);
    hd_status st = r ? ops_into(ctx, d, out, r) : ctx->status;
    hd_tensor *all[] = {sm, oh, ohf, df, n, gs, r};
    for (int i = 0; i < 7; i++) hd_tensor_unref(all[i]);
    return st;
}

/* ---- conv2d and the pools (cuda_src_more.c): contiguous operands ---- */

typedef struct {
    int64_t n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, cg, og;
} ops_convgeo;

typedef struct {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
} ops_poolgeo;

/* x [n, c, h, w], weight [o, cg, kh, kw], output positions [oh, ow]; the
 * shape rule has checked the attributes (0 dilation or groups: 1). */
static void conv_geo(ops_convgeo *g, const int64_t *x, const int64_t *w, const int64_t *y,
                     const hd_attrs *at) {
    g->n = x[0], g->c = x[1], g->h = x[2], g->w = x[3];
    g->o = w[0], g->cg = w[1], g->kh = w[2], g->kw = w[3];
    g->oh = y[2], g->ow = y[3];
    g->sh = at->ints[0], g->sw = at->ints[1], g->ph = at->ints[2], g->pw = at->ints[3];
    g->dh = at->ints[4] ? at->ints[4] : 1, g->dw = at->ints[5] ? at->ints[5] : 1;
    int64_t groups = at->ints[6] ? at->ints[6] : 1;
    g->og = g->o / groups;
}

/* x [n, c, h, w] pooled to [.., oh, ow] (stride 0: the kernel's size). */
static void pool_geo(ops_poolgeo *g, const int64_t *x, const int64_t *y, const hd_attrs *at) {
    g->planes = x[0] * x[1], g->h = x[2], g->w = x[3], g->oh = y[2], g->ow = y[3];
    g->kh = at->ints[0], g->kw = at->ints[1];
    g->sh = at->ints[2] ? at->ints[2] : g->kh, g->sw = at->ints[3] ? at->ints[3] : g->kw;
    g->ph = at->ints[4], g->pw = at->ints[5];
}

/* Run op's kernel (geo, out, in[0], in[1], in[2]) on contiguous copies of
 * in into out (through a contiguous buffer when out is strided): a thread
 * per output element, or `blocks` blocks of 256 threads. */
static hd_status conv_launch(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                             hd_tensor *const *in, int nin, void *geo, int64_t blocks) {
    hd_tensor *c[3] = {NULL, NULL, NULL}, *y = out;
    hd_status st = HD_OK;
    for (int i = 0; i < nin && !st; i++)
        if (!(c[i] = hd_tensor_contiguous(ctx, in[i]))) st = ctx->status;
    if (!st && !hd_tensor_is_contiguous(out) &&
        !(y = hd_tensor_new_on(ctx, &hd_cuda_backend, out->storage->device, out->dtype, out->shape,
                               out->ndim)))
        st = ctx->status;
    CUfunction f;
    if (!st) st = hd_cuda_kernel(ctx, d, op, out->dtype, out->dtype, HD_CUDA_K_MAIN, &f);
    if (!st && out->numel) {
        void *o = ops_ptr(y), *p[3] = {NULL, NULL, NULL};
        for (int i = 0; i < nin; i++) p[i] = ops_ptr(c[i]);
        void *args[] = {geo, &o, &p[0], &p[1], &p[2]};
        if (blocks > 0)
            st = hd_cuda_launch_grid(
                ctx, d, f, (unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16), 256, args);
        else
            st = hd_cuda_launch(ctx, d, f, out->numel, args);
    }
    if (!st && y != out) st = ops_into(ctx, d, out, y);
    if (y != out) hd_tensor_unref(y);
    for (int i = 0; i < nin; i++) hd_tensor_unref(c[i]);
    return st;
}

static hd_status ops_conv(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                          hd_tensor *const *in, int nin, const hd_attrs *at) {
    ops_convgeo cg;
    ops_poolgeo pg;
    switch (op) {
    case HD_OP_CONV2D: /* x, w[, b] */
        conv_geo(&cg, in[0]->shape, in[1]->shape, out->shape, at);
        return conv_launch(ctx, d, op, out, in, nin, &cg, 0);
    case HD_OP_CONV2D_BWD_INPUT: /* g, w -> dx */
        conv_geo(&cg, out->shape, in[1]->shape, in[0]->shape, at);
        return conv_launch(ctx, d, op, out, in, 2, &cg, 0);
    case HD_OP_CONV2D_BWD_WEIGHT: /* x, g -> dw: a block per weight element */
        conv_geo(&cg, in[0]->shape, out->shape, in[1]->shape, at);
        return conv_launch(ctx, d, op, out, in, 2, &cg, out->numel);
    case HD_OP_MAX_POOL2D:
    case HD_OP_MAX_POOL2D_SEL: /* x, h -> the pooled shape */
    case HD_OP_AVG_POOL2D: pool_geo(&pg, in[0]->shape, out->shape, at); break;
    default: pool_geo(&pg, out->shape, in[nin - 1]->shape, at); break; /* [x,] g -> dx */
    }
    return conv_launch(ctx, d, op, out, in, nin, &pg, 0);
}

/* ---- layer_norm (cuda_src_more.c): a block per row ---- */

typedef struct {
    int64_t rows, d;
    double eps;
} ops_lngeo;

/* layer_norm's weight gradient: the rows' statistics, then a block per
 * column. in: x, g. */
static hd_status ln_dw(hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *out, hd_tensor *const *in,
                       ops_lngeo *g) {
    hd_tensor *x = hd_tensor_contiguous(ctx, in[0]), *gc = hd_tensor_contiguous(ctx, in[1]);
    int64_t n2 = g->rows * 2;
    hd_tensor *st =
        x && gc ? hd_tensor_new_on(ctx, &hd_cuda_backend, out->storage->device, HD_F64, &n2, 1)
                : NULL;
    hd_tensor *y = out;
    if (st && !hd_tensor_is_contiguous(out))
        y = hd_tensor_new_on(ctx, &hd_cuda_backend, out->storage->device, out->dtype, out->shape,
                             out->ndim);
    hd_status r = st && y ? HD_OK : ctx->status;
    CUfunction f1, f2;
    if (!r && g->rows && g->d) {
        void *ps = ops_ptr(st), *px = ops_ptr(x), *pg = ops_ptr(gc), *o = ops_ptr(y);
        void *a1[] = {g, &ps, &px}, *a2[] = {g, &o, &ps, &px, &pg};
        int64_t b1 = g->rows < 65535 * 16 ? g->rows : 65535 * 16;
        int64_t b2 = g->d < 65535 * 16 ? g->d : 65535 * 16;
        hd_dtype dt = out->dtype;
        r = hd_cuda_kernel(ctx, d, HD_OP_LAYER_NORM_BWD, dt, dt, HD_CUDA_K_LN_STATS, &f1) ||
                    hd_cuda_kernel(ctx, d, HD_OP_LAYER_NORM_BWD, dt, dt, HD_CUDA_K_LN_DW, &f2) ||
                    hd_cuda_launch_grid(ctx, d, f1, (unsigned)b1, 256, a1) ||
                    hd_cuda_launch_grid(ctx, d, f2, (unsigned)b2, 256, a2)
                ? ctx->status
                : HD_OK;
    }
    if (!r && y != out) r = ops_into(ctx, d, out, y);
    if (y != out) hd_tensor_unref(y);
    hd_tensor_unref(st);
    hd_tensor_unref(x);
    hd_tensor_unref(gc);
    return r;
}

/* layer_norm over the last ints[0] dims (x[, w, b]); its gradient
 * (x, g[, w]): ints[1] 0 for dx, 1 for dw. */
static hd_status ops_layer_norm(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                                hd_tensor *const *in, int nin, const hd_attrs *at) {
    const hd_tensor *x = in[0];
    int64_t k = at->ints[0] ? at->ints[0] : 1;
    ops_lngeo g;
    g.d = hd_shape_numel(x->shape + x->ndim - k, (int)k);
    g.rows = g.d ? x->numel / g.d : 0;
    g.eps = hd_layer_norm_eps(at);
    if (op == HD_OP_LAYER_NORM_BWD && at->ints[1] == 1) return ln_dw(ctx, d, out, in, &g);
    return conv_launch(ctx, d, op, out, in, nin, &g, g.rows);
}

/* ---- on host copies: linalg (LAPACK) and all_reduce (MPI) ---- */

/* On the host: the inputs are copied down, the cpu kernel computes the
 * result, which is copied back up. The decompositions go this way where
 * cuSOLVER did not open (or a matrix is empty); an all-reduce where NCCL
 * is not used (MPI reads host memory). */
static hd_status ops_on_host(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                             const hd_attrs *attrs) {
    hd_tensor *host[2] = {NULL, NULL}, *y = NULL;
    hd_status st =
        nin > 2 ? hd_error(ctx, HD_ERR_RUNTIME, "%s: too many inputs", hd_op_name(op)) : HD_OK;
    for (int i = 0; i < nin && !st; i++)
        if (!(host[i] = hd_tensor_to_host(ctx, in[i]))) st = ctx->status;
    if (!st && !(y = hd_tensor_new_on(ctx, &hd_cpu_backend, 0, out->dtype, out->shape, out->ndim)))
        st = ctx->status;
    if (!st) st = hd_cpu_backend.run_op(ctx, op, y, host, nin, attrs);
    if (!st) {
        size_t es = hd_dtype_size(out->dtype);
        st = hd_cuda_backend.from_host(ctx, out->storage->device,
                                       (char *)out->storage->data + (size_t)out->offset * es,
                                       hd_tensor_data(y), (size_t)out->numel * es);
    }
    for (int i = 0; i < nin; i++) hd_tensor_unref(host[i]);
    hd_tensor_unref(y);
    return st;
}

/* all_reduce through NCCL (cuda_nccl.c), else on the host (MPI) */
static hd_status ops_all_reduce(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                                const hd_attrs *attrs) {
    hd_tensor *c = hd_tensor_contiguous(ctx, in[0]);
    if (!c) return ctx->status;
    hd_coll coll = {HD_COLL_ALL_REDUCE, c, out, (int)attrs->ints[0], (int)attrs->ints[1], 0};
    int done = 0;
    hd_status st = hd_cuda_collective(ctx, &coll, &done);
    hd_tensor_unref(c);
    if (st || done) return st;
    return ops_on_host(ctx, HD_OP_ALL_REDUCE, out, in, nin, attrs);
}

/* The decompositions through cuSOLVER (cuda_solver.c) on contiguous
 * inputs; without the library (or a handle), or for empty matrices, on
 * the host. */
static hd_status ops_linalg(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                            hd_tensor *const *in, int nin, const hd_attrs *attrs) {
    int empty = out->numel == 0 || nin > 2;
    for (int i = 0; i < nin && !empty; i++) empty = in[i]->numel == 0;
    if (empty || !hd_cuda_solver_ready(ctx, d)) return ops_on_host(ctx, op, out, in, nin, attrs);
    hd_tensor *c[2] = {NULL, NULL};
    hd_status st = HD_OK;
    for (int i = 0; i < nin && !st; i++)
        if (!(c[i] = hd_tensor_contiguous(ctx, in[i]))) st = ctx->status;
    if (!st) st = hd_cuda_linalg(ctx, d, op, out, c, nin, attrs);
    for (int i = 0; i < nin; i++) hd_tensor_unref(c[i]);
    return st;
}

/* ---- dispatch ---- */

static hd_status ops_dispatch(hd_ctx *ctx, hd_cuda_dev *d, hd_op op, hd_tensor *out,
                              hd_tensor *const *in, int nin, const hd_attrs *attrs) {
    switch (op) {
    case HD_OP_CONCAT: return ops_concat(ctx, d, out, in, nin, attrs);
    case HD_OP_MATMUL: return hd_cuda_matmul(ctx, d, out, in[0], in[1]);
    case HD_OP_SOFTMAX:
    case HD_OP_LOG_SOFTMAX:
    case HD_OP_SOFTMAX_BWD:
    case HD_OP_LOG_SOFTMAX_BWD:
    case HD_OP_CUMSUM:
    case HD_OP_CUMPROD:
    case HD_OP_CUMPROD_BWD: return ops_rows(ctx, d, op, out, in, nin, attrs);
    case HD_OP_INDEX_SELECT:
    case HD_OP_INDEX_ADD:
    case HD_OP_ONE_HOT: return ops_index(ctx, d, op, out, in, attrs);
    case HD_OP_ARGSORT: return ops_argsort(ctx, d, out, in, attrs);
    case HD_OP_DROPOUT:
    case HD_OP_DROPOUT_BWD: return ops_dropout(ctx, d, op, out, in, attrs);
    case HD_OP_MSE: return ops_mse(ctx, d, out, in);
    case HD_OP_ATTENTION: return ops_attention(ctx, d, out, in, nin, attrs);
    case HD_OP_ALL_REDUCE: return ops_all_reduce(ctx, out, in, nin, attrs);
    case HD_OP_ATTENTION_BWD: return ops_attention_bwd(ctx, d, out, in, nin, attrs);
    case HD_OP_CROSS_ENTROPY: return ops_cross_entropy(ctx, d, out, in);
    case HD_OP_CROSS_ENTROPY_BWD: return ops_cross_entropy_bwd(ctx, d, out, in);
    case HD_OP_LAYER_NORM:
    case HD_OP_LAYER_NORM_BWD: return ops_layer_norm(ctx, d, op, out, in, nin, attrs);
    default: break;
    }
    if (hd_cuda_is_conv(op)) return ops_conv(ctx, d, op, out, in, nin, attrs);
    switch (hd_op_infos[op].kind) {
    case HD_KIND_CREATE: return ops_create(ctx, d, op, out, attrs);
    case HD_KIND_REDUCE: return ops_reduce(ctx, d, op, out, in, attrs);
    case HD_KIND_UNARY:
    case HD_KIND_BINARY:
    case HD_KIND_COMPARE:
    case HD_KIND_TERNARY:
    case HD_KIND_GRAD:
    case HD_KIND_INDEX: return ops_elementwise(ctx, d, op, out, in, nin, attrs);
    case HD_KIND_LINALG: return ops_linalg(ctx, d, op, out, in, nin, attrs);
    default: return hd_error(ctx, HD_ERR_RUNTIME, "%s has no cuda kernel", hd_op_name(op));
    }
}

hd_status hd_cuda_run_op(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                         const hd_attrs *attrs) {
    enum { MAX_IN = 64 };
    if (nin > MAX_IN) return hd_error(ctx, HD_ERR_RUNTIME, "%s: too many inputs", hd_op_name(op));
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, out->storage->device);
    if (!d) return ctx->status;
    hd_tensor *dev[MAX_IN];
    if (ops_upload(ctx, op, out->storage->device, in, nin, dev)) return ctx->status;
    void *timed = ctx->prof ? hd_cuda_prof_begin(ctx, d, out->storage->device) : NULL;
    hd_status st = ops_dispatch(ctx, d, op, out, dev, nin, attrs);
    hd_cuda_prof_end(ctx, d, timed, op);
    for (int i = 0; i < nin; i++) hd_tensor_unref(dev[i]);
    return st;
}
#endif
