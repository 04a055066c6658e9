/* W-generic bodies of the row-wise nn kernels, included by cpu_nn.c once
 * per working type. The includer defines:
 *   NN_T    the working type (float or double)
 *   NN_S    the suffix of the instance (f32 or f64)
 *   NN_DT   the dtype of NN_T (HD_F32 or HD_F64)
 *   NN_EXP, NN_LOG  exp and log for NN_T
 * See cpu_nn.h for what the working type is. No include guard on purpose. */

#define NN_FN(name) NN_CAT(name, NN_S)

/* ---- buffers ---- */

/* n elements of dtype dt at element offset off of data, stride apart. */
static void NN_FN(nn_read_run)(hd_dtype dt, const void *data, int64_t off, int64_t stride,
                               int64_t n, NN_T *dst) {
    switch (dt) {
    case HD_F16: {
        const uint16_t *p = (const uint16_t *)data + off;
        if (stride == 1) {
#pragma omp simd
            for (int64_t i = 0; i < n; i++) dst[i] = (NN_T)nn_f16_to_f32(p[i]);
        } else {
            for (int64_t i = 0; i < n; i++) dst[i] = (NN_T)nn_f16_to_f32(p[i * stride]);
        }
        break;
    }
    case HD_BF16: {
        const uint16_t *p = (const uint16_t *)data + off;
        if (stride == 1) {
#pragma omp simd
            for (int64_t i = 0; i < n; i++) dst[i] = (NN_T)hd_bf16_to_f32(p[i]);
        } else {
            for (int64_t i = 0; i < n; i++) dst[i] = (NN_T)hd_bf16_to_f32(p[i * stride]);
        }
        break;
    }
    case HD_F32: {
        const float *p = (const float *)data + off;
        if (stride == 1)
            for (int64_t i = 0; i < n; i++) dst[i] = (NN_T)p[i];
        else
            for (int64_t i = 0; i < n; i++) dst[i] = (NN_T)p[i * stride];
        break;
    }
    case HD_F64: {
        const double *p = (const double *)data + off;
        if (stride == 1)
            for (int64_t i = 0; i < n; i++) dst[i] = (NN_T)p[i];
        else
            for (int64_t i = 0; i < n; i++) dst[i] = (NN_T)p[i * stride];
        break;
    }
    default: /* plans cast nn inputs to float dtypes; kept for completeness */
        for (int64_t i = 0; i < n; i++) dst[i] = (NN_T)hd_dtype_load(dt, data, off + i * stride);
        break;
    }
}

void NN_FN(hd_cpu_nn_read)(const hd_tensor *t, int64_t i0, int64_t n, NN_T *dst) {
    const void *data = t->storage->data;
    if (t->ndim == 0) {
        if (n > 0) NN_FN(nn_read_run)(t->dtype, data, t->offset, 0, 1, dst);
        return;
    }
    int64_t idx[HD_MAX_DIMS], off = t->offset, rem = i0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = rem % t->shape[d];
        rem /= t->shape[d];
        off += idx[d] * t->strides[d];
    }
    int last = t->ndim - 1;
    while (n > 0) {
        int64_t run = HD_MIN(t->shape[last] - idx[last], n);
        NN_FN(nn_read_run)(t->dtype, data, off, t->strides[last], run, dst);
        dst += run;
        n -= run;
        off += run * t->strides[last];
        idx[last] += run;
        for (int d = last; d > 0 && idx[d] == t->shape[d]; d--) { /* carry */
            off += t->strides[d - 1] - idx[d] * t->strides[d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

const NN_T *NN_FN(hd_cpu_nn_load)(hd_ctx *ctx, const hd_tensor *t, int *owned) {
    *owned = 0;
    if (t->dtype == NN_DT && hd_tensor_is_contiguous(t)) return (const NN_T *)hd_tensor_data(t);
    NN_T *buf = hd_ctx_alloc(ctx, (size_t)t->numel * sizeof(NN_T));
    if (!buf) return NULL;
    *owned = 1;
    int64_t numel = t->numel, nblocks = (numel + NN_BLOCK - 1) / NN_BLOCK;
#pragma omp parallel for num_threads(ctx->nthreads) if (numel >= CPU_PAR_MIN) schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t i0 = b * NN_BLOCK;
        NN_FN(hd_cpu_nn_read)(t, i0, HD_MIN(NN_BLOCK, numel - i0), buf + i0);
    }
    return buf;
}

NN_T *NN_FN(hd_cpu_nn_outbuf)(hd_ctx *ctx, hd_tensor *out) {
    if (out->dtype == NN_DT) return (NN_T *)hd_tensor_data(out);
    return hd_ctx_alloc(ctx, (size_t)out->numel * sizeof(NN_T));
}

void NN_FN(hd_cpu_nn_finish)(hd_ctx *ctx, hd_tensor *out, NN_T *buf) {
    if (!buf || buf == (NN_T *)hd_tensor_data(out)) return;
    int64_t n = out->numel;
    uint16_t *h = hd_tensor_data(out);
    switch (out->dtype) {
    case HD_F16:
#pragma omp parallel for simd num_threads(ctx->nthreads) if (n >= CPU_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) h[i] = nn_f32_to_f16((float)buf[i]);
        break;
    case HD_BF16:
#pragma omp parallel for simd num_threads(ctx->nthreads) if (n >= CPU_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) h[i] = nn_f32_to_bf16((float)buf[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) hd_dtype_store(out->dtype, hd_tensor_data(out), i, buf[i]);
        break;
    }
    hd_ctx_free(ctx, buf, (size_t)n * sizeof(NN_T));
}

/* ---- softmax, log_softmax ---- */

/* Rows of n contiguous elements (the axis is the last one). y may be x. A
 * row of all -inf gives NaN (-inf - -inf), as torch does. */
static void NN_FN(nn_softmax_rows)(const NN_T *x, NN_T *y, int64_t rows, int64_t n, int logsm,
                                   int nt) {
#pragma omp parallel for num_threads(nt) if (rows * n >= CPU_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const NN_T *xr = x + r * n;
        NN_T *yr = y + r * n;
        NN_T m = -(NN_T)INFINITY;
#pragma omp simd reduction(max : m)
        for (int64_t j = 0; j < n; j++) m = xr[j] > m ? xr[j] : m;
        double s = 0;
        if (logsm) {
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < n; j++) s += NN_EXP(xr[j] - m);
            NN_T ls = (NN_T)NN_LOG((NN_T)s);
#pragma omp simd
            for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - m) - ls;
        } else {
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < n; j++) {
                NN_T e = NN_EXP(xr[j] - m);
                yr[j] = e;
                s += e;
            }
            NN_T inv = (NN_T)(1.0 / s);
#pragma omp simd
            for (int64_t j = 0; j < n; j++) yr[j] *= inv;
        }
    }
}

#define NN_TILE 64

/* The axis has n elements inner apart: [outer, n, inner] blocks, taken in
 * tiles of NN_TILE columns so each column's max and sum stay in registers
 * and the inner loops run over contiguous memory. y may be x. */
static void NN_FN(nn_softmax_cols)(const NN_T *x, NN_T *y, int64_t outer, int64_t n, int64_t inner,
                                   int logsm, int nt) {
    int64_t ntile = (inner + NN_TILE - 1) / NN_TILE;
#pragma omp parallel for num_threads(nt) if (outer * n * inner >= CPU_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < outer * ntile; t++) {
        int64_t o = t / ntile, c0 = (t % ntile) * NN_TILE, w = HD_MIN(NN_TILE, inner - c0);
        const NN_T *xb = x + o * n * inner + c0;
        NN_T *yb = y + o * n * inner + c0;
        NN_T m[NN_TILE], f[NN_TILE];
        double s[NN_TILE];
        for (int64_t k = 0; k < w; k++) m[k] = -(NN_T)INFINITY, s[k] = 0;
        for (int64_t j = 0; j < n; j++) {
            const NN_T *xj = xb + j * inner;
#pragma omp simd
            for (int64_t k = 0; k < w; k++) m[k] = xj[k] > m[k] ? xj[k] : m[k];
        }
        for (int64_t j = 0; j < n; j++) {
            const NN_T *xj = xb + j * inner;
            NN_T *yj = yb + j * inner;
            if (logsm) {
#pragma omp simd
                for (int64_t k = 0; k < w; k++) s[k] += NN_EXP(xj[k] - m[k]);
            } else {
#pragma omp simd
                for (int64_t k = 0; k < w; k++) {
                    NN_T e = NN_EXP(xj[k] - m[k]);
                    yj[k] = e;
                    s[k] += e;
                }
            }
        }
        for (int64_t k = 0; k < w; k++)
            f[k] = logsm ? (NN_T)NN_LOG((NN_T)s[k]) : (NN_T)(1.0 / s[k]);
        for (int64_t j = 0; j < n; j++) {
            const NN_T *xj = xb + j * inner;
            NN_T *yj = yb + j * inner;
            if (logsm) {
#pragma omp simd
                for (int64_t k = 0; k < w; k++) yj[k] = (xj[k] - m[k]) - f[k];
            } else {
#pragma omp simd
                for (int64_t k = 0; k < w; k++) yj[k] *= f[k];
            }
        }
    }
}

/* softmax (logsm 0) or log_softmax (1) of x along axis into out: the
 * contiguous-row kernel when the axis is the last dim, else the tiled one. */
static hd_status NN_FN(nn_softmax)(hd_ctx *ctx, hd_tensor *out, hd_tensor *x, int axis, int logsm) {
    int64_t outer = 1, n = 1, inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis) outer *= x->shape[d];
        if (d == axis) n = x->shape[d];
        if (d > axis) inner *= x->shape[d];
    }
    int owned;
    const NN_T *xs = NN_FN(hd_cpu_nn_load)(ctx, x, &owned);
    NN_T *ys = NULL;
    if (owned && out->dtype != NN_DT) { /* a converted copy: compute in place, finish frees it */
        ys = (NN_T *)xs;
        owned = 0;
    } else if (xs) {
        ys = NN_FN(hd_cpu_nn_outbuf)(ctx, out);
    }
    if (!ys) goto done;
    if (inner == 1)
        NN_FN(nn_softmax_rows)(xs, ys, outer, n, logsm, ctx->nthreads);
    else
        NN_FN(nn_softmax_cols)(xs, ys, outer, n, inner, logsm, ctx->nthreads);
    NN_FN(hd_cpu_nn_finish)(ctx, out, ys);
done:
    if (owned) hd_ctx_free(ctx, (void *)xs, (size_t)x->numel * sizeof(NN_T));
    return ys ? HD_OK : ctx->status;
}

/* ---- cumsum, cumprod ---- */

#define NN_SCAN_W    64 /* lines of one block, side by side in memory when inner > 1 */
#define NN_SCAN_ROWS 8  /* lines of one block when they are rows (inner == 1) */

/* Running sums (prod 0) or products (prod 1) along the n elements of w
 * lines, line t's element j at base + t ls + j es, from the last element
 * back where rev: accumulated in double, each result rounded once. The w
 * lines' chains of additions run side by side: one line alone waits on
 * each addition's latency. */
static void NN_FN(nn_scan_block)(const NN_T *x, NN_T *y, int64_t n, int64_t base, int64_t ls,
                                 int64_t es, int64_t w, int rev, int prod) {
    double acc[NN_SCAN_W];
    for (int64_t t = 0; t < w; t++) acc[t] = prod ? 1.0 : 0.0;
    for (int64_t k = 0; k < n; k++) {
        int64_t at = base + (rev ? n - 1 - k : k) * es;
        if (prod)
            for (int64_t t = 0; t < w; t++)
                y[at + t * ls] = (NN_T)(acc[t] *= (double)x[at + t * ls]);
        else
            for (int64_t t = 0; t < w; t++)
                y[at + t * ls] = (NN_T)(acc[t] += (double)x[at + t * ls]);
    }
}

/* The gradient of cumprod for lines [i0, i0 + w) of block o: with
 * S_i = g_i + x_{i+1} S_{i+1} (S_{n-1} = g_{n-1}) and P_i the product of
 * x_0 .. x_{i-1}, d/dx_i sum_j g_j cumprod(x)_j = P_i S_i: no division, so
 * zeros in x are exact. S goes through y (as NN_T) between the passes. */
static void NN_FN(nn_cumprod_bwd_block)(const NN_T *x, const NN_T *g, NN_T *y, int64_t n,
                                        int64_t inner, int64_t o, int64_t i0, int64_t w) {
    double acc[NN_SCAN_W];
    for (int64_t t = 0; t < w; t++) acc[t] = 0.0;
    for (int64_t j = n - 1; j >= 0; j--) {
        int64_t at = (o * n + j) * inner + i0, next = at + inner;
        for (int64_t t = 0; t < w; t++) {
            acc[t] = (double)g[at + t] + (j + 1 < n ? (double)x[next + t] * acc[t] : 0.0);
            y[at + t] = (NN_T)acc[t];
        }
    }
    for (int64_t t = 0; t < w; t++) acc[t] = 1.0;
    for (int64_t j = 0; j < n; j++) {
        int64_t at = (o * n + j) * inner + i0;
        for (int64_t t = 0; t < w; t++) {
            y[at + t] = (NN_T)(acc[t] * (double)y[at + t]);
            acc[t] *= (double)x[at + t];
        }
    }
}

/* cumsum (op CUMSUM, rev from ints[1]), cumprod, or cumprod's gradient
 * (in[1] is g) of in[0] along axis into out; blocks of lines in parallel. */
static hd_status NN_FN(nn_scan)(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in,
                                int axis, int rev) {
    const hd_tensor *x = in[0];
    int64_t outer = 1, n = 1, inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis) outer *= x->shape[d];
        if (d == axis) n = x->shape[d];
        if (d > axis) inner *= x->shape[d];
    }
    int owned[2] = {0, 0}, nin = op == HD_OP_CUMPROD_BWD ? 2 : 1;
    const NN_T *xs[2] = {NULL, NULL};
    for (int i = 0; i < nin; i++) xs[i] = NN_FN(hd_cpu_nn_load)(ctx, in[i], &owned[i]);
    NN_T *ys = xs[0] && xs[nin - 1] ? NN_FN(hd_cpu_nn_outbuf)(ctx, out) : NULL;
    /* lines of contiguous elements (the last axis) go NN_SCAN_ROWS at a time */
    int rows = inner == 1 && op != HD_OP_CUMPROD_BWD, prod = op == HD_OP_CUMPROD;
    int64_t per = rows ? 1 : (inner + NN_SCAN_W - 1) / NN_SCAN_W;
    int64_t nblocks = rows ? (outer + NN_SCAN_ROWS - 1) / NN_SCAN_ROWS : outer * per;
    if (ys) {
#pragma omp parallel for num_threads(ctx->nthreads) if (x->numel >= CPU_PAR_MIN) schedule(static)
        for (int64_t b = 0; b < nblocks; b++) {
            if (rows) {
                int64_t o = b * NN_SCAN_ROWS, w = HD_MIN(NN_SCAN_ROWS, outer - o);
                NN_FN(nn_scan_block)(xs[0], ys, n, o * n, n, 1, w, rev, prod);
                continue;
            }
            int64_t o = b / per, i0 = b % per * NN_SCAN_W, w = HD_MIN(NN_SCAN_W, inner - i0);
            if (op == HD_OP_CUMPROD_BWD)
                NN_FN(nn_cumprod_bwd_block)(xs[0], xs[1], ys, n, inner, o, i0, w);
            else
                NN_FN(nn_scan_block)(xs[0], ys, n, o * n * inner + i0, 1, inner, w, rev, prod);
        }
        NN_FN(hd_cpu_nn_finish)(ctx, out, ys);
    }
    for (int i = 0; i < nin; i++)
        if (owned[i]) hd_ctx_free(ctx, (void *)xs[i], (size_t)in[i]->numel * sizeof(NN_T));
    return ys ? HD_OK : ctx->status;
}

/* ---- cross_entropy ---- */

/* -log_softmax(x)[label] for one row of c logits: max(x) - x[label] +
 * log(sum exp(x - max)), summed in double. */
static double NN_FN(nn_ce_row)(const NN_T *x, int64_t c, int64_t label) {
    NN_T m = -(NN_T)INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < c; j++) m = x[j] > m ? x[j] : m;
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < c; j++) s += NN_EXP(x[j] - m);
    return ((double)m - (double)x[label]) + log(s);
}

/* Per-row losses into loss[0..rows); labels were checked by the caller. */
static hd_status NN_FN(nn_ce_rows)(hd_ctx *ctx, const hd_tensor *logits, const int64_t *labels,
                                   int64_t lstride, int64_t rows, int64_t c, double *loss) {
    int owned;
    const NN_T *x = NN_FN(hd_cpu_nn_load)(ctx, logits, &owned);
    if (!x) return ctx->status;
#pragma omp parallel for num_threads(ctx->nthreads) if (rows * c >= CPU_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        loss[r] = NN_FN(nn_ce_row)(x + r * c, c, labels[r * lstride]);
    if (owned) hd_ctx_free(ctx, (void *)x, (size_t)logits->numel * sizeof(NN_T));
    return HD_OK;
}

/* ---- dropout ---- */

/* Training: element i (flat, row-major) is dropped when the i-th uniform of
 * a fresh draw of numel values is < p, else scaled to x / (1 - p), computed
 * in double so survivors are x / (1 - p) correctly rounded. Not training:
 * a copy, and no draw. */
static hd_status NN_FN(nn_dropout)(hd_ctx *ctx, hd_tensor *out, hd_tensor *x, double p,
                                   int training) {
    NN_T *y = NN_FN(hd_cpu_nn_outbuf)(ctx, out);
    if (!y) return ctx->status;
    int64_t n = x->numel, nblocks = (n + NN_BLOCK - 1) / NN_BLOCK;
#pragma omp parallel for num_threads(ctx->nthreads) if (n >= CPU_PAR_MIN) schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t i0 = b * NN_BLOCK;
        NN_FN(hd_cpu_nn_read)(x, i0, HD_MIN(NN_BLOCK, n - i0), y + i0);
    }
    if (training) {
        uint64_t key = ctx->rng_seed, base = hd_rng_reserve(ctx, n);
        double keep = 1.0 - p;
        int64_t npairs = (n + 1) / 2;
#pragma omp parallel for num_threads(ctx->nthreads) if (n >= CPU_PAR_MIN / 8) schedule(static)
        for (int64_t j = 0; j < npairs; j++) {
            float u[2];
            nn_uniform_pair(key, base, j, u);
            for (int64_t i = 2 * j; i < HD_MIN(2 * j + 2, n); i++)
                y[i] = u[i - 2 * j] < p ? (NN_T)0 : (NN_T)((double)y[i] / keep);
        }
    }
    NN_FN(hd_cpu_nn_finish)(ctx, out, y);
    return HD_OK;
}

/* ---- layer_norm ---- */

/* Rows of d elements: (x - mean) / sqrt(var + eps) [* w + b], mean and the
 * biased variance (two passes) in double. w and b are NULL together. */
static void NN_FN(nn_layer_norm_rows)(const NN_T *x, const NN_T *w, const NN_T *b, NN_T *y,
                                      int64_t rows, int64_t d, double eps, int nt) {
#pragma omp parallel for num_threads(nt) if (rows * d >= CPU_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const NN_T *xr = x + r * d;
        NN_T *yr = y + r * d;
        double s = 0, v = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < d; j++) s += xr[j];
        double mean = s / (double)d;
#pragma omp simd reduction(+ : v)
        for (int64_t j = 0; j < d; j++) v += ((double)xr[j] - mean) * ((double)xr[j] - mean);
        NN_T mu = (NN_T)mean, rs = (NN_T)(1.0 / sqrt(v / (double)d + eps));
        if (w) {
#pragma omp simd
            for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - mu) * rs * w[j] + b[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - mu) * rs;
        }
    }
}

/* layer_norm of in[0] over its last k dims, with in[1], in[2] as weight
 * and bias when nin == 3. */
static hd_status NN_FN(nn_layer_norm)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                                      int64_t k, double eps) {
    const hd_tensor *x = in[0];
    int64_t d = hd_shape_numel(x->shape + x->ndim - k, (int)k), rows = d ? x->numel / d : 0;
    int own[3] = {0, 0, 0};
    const NN_T *buf[3] = {NULL, NULL, NULL};
    NN_T *y = NULL;
    for (int i = 0; i < nin; i++)
        if (!(buf[i] = NN_FN(hd_cpu_nn_load)(ctx, in[i], &own[i]))) goto done;
    if (own[0] && out->dtype != NN_DT) { /* a converted copy: normalise in place */
        y = (NN_T *)buf[0];
        own[0] = 0;
    } else if (!(y = NN_FN(hd_cpu_nn_outbuf)(ctx, out))) {
        goto done;
    }
    NN_FN(nn_layer_norm_rows)(buf[0], buf[1], buf[2], y, rows, d, eps, ctx->nthreads);
    NN_FN(hd_cpu_nn_finish)(ctx, out, y);
done:
    for (int i = 0; i < nin; i++)
        if (own[i]) hd_ctx_free(ctx, (void *)buf[i], (size_t)in[i]->numel * sizeof(NN_T));
    return y ? HD_OK : ctx->status;
}

#undef NN_FN
