/* W-generic bodies of conv2d and the 2-d pools, included by cpu_conv.c
 * once per working type. The includer defines NN_T, NN_S (see
 * cpu_nn_tmpl.h) and NN_F64, 1 when NN_T is double (the gemm cpu_blas.c calls). No include guard on
 * purpose. */

#define NN_FN(name) NN_CAT(name, NN_S)

/* ---- conv2d ---- */

/* Unfold one group of one image, x [Cg, H, W], into col [K, P]: row
 * (c, i, j) holds x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] for every
 * output position (oh, ow), zero where that falls in the padding. */
static void NN_FN(conv_im2col)(const NN_T *x, NN_T *col, const conv_geom *g, int nt) {
    int64_t kk = g->kh * g->kw, OW = g->ow;
#pragma omp parallel for num_threads(nt) if (g->k * g->p >= CPU_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < g->k; r++) {
        int64_t c = r / kk, i = (r / g->kw) % g->kh, j = r % g->kw;
        const NN_T *xc = x + c * g->h * g->w;
        int64_t woff = j * g->dw - g->pw, lo, hi; /* input column = ow * sw + woff */
        conv_valid_range(woff, g->sw, g->w, OW, &lo, &hi);
        for (int64_t oh = 0; oh < g->oh; oh++) {
            NN_T *d = col + r * g->p + oh * OW;
            int64_t ih = oh * g->sh - g->ph + i * g->dh;
            if (ih < 0 || ih >= g->h) {
                for (int64_t ow = 0; ow < OW; ow++) d[ow] = 0;
                continue;
            }
            const NN_T *xr = xc + ih * g->w;
            for (int64_t ow = 0; ow < lo; ow++) d[ow] = 0;
            if (g->sw == 1) {
#pragma omp simd
                for (int64_t ow = lo; ow < hi; ow++) d[ow] = xr[ow + woff];
            } else {
                int64_t sw = g->sw;
#pragma omp simd
                for (int64_t ow = lo; ow < hi; ow++) d[ow] = xr[ow * sw + woff];
            }
            for (int64_t ow = hi; ow < OW; ow++) d[ow] = 0;
        }
    }
}

/* C[M, N] += A[M, K] @ B[K, N], all row-major and contiguous. */
static void NN_FN(conv_gemm)(int64_t m, int64_t n, int64_t k, const NN_T *a, const NN_T *b, NN_T *c,
                             int nt) {
#if defined(HODU_HAVE_BLAS) && HODU_HAVE_BLAS
    if (cpu_blas_ready()) {
        cpu_blas_gemm(nt, NN_F64, 0, 0, m, n, k, 1, a, k, b, n, 1, c, n, NULL);
        return;
    }
#endif
    HD_UNUSED(nt);
    for (int64_t i = 0; i < m; i++)
        for (int64_t t = 0; t < k; t++) {
            NN_T av = a[i * k + t];
            const NN_T *br = b + t * n;
            NN_T *cr = c + i * n;
#pragma omp simd
            for (int64_t j = 0; j < n; j++) cr[j] += av * br[j];
        }
}

/* Depthwise-style groups (one input channel each): a direct loop reads x
 * once instead of unfolding it kh*kw times. y [Og, P] already holds the
 * bias. */
static void NN_FN(conv_direct1)(const NN_T *x, const NN_T *w, NN_T *y, const conv_geom *g) {
    for (int64_t o = 0; o < g->og; o++) {
        const NN_T *wo = w + o * g->kh * g->kw;
        for (int64_t oh = 0; oh < g->oh; oh++) {
            NN_T *yr = y + o * g->p + oh * g->ow;
            for (int64_t i = 0; i < g->kh; i++) {
                int64_t ih = oh * g->sh - g->ph + i * g->dh;
                if (ih < 0 || ih >= g->h) continue;
                const NN_T *xr = x + ih * g->w;
                for (int64_t j = 0; j < g->kw; j++) {
                    NN_T wv = wo[i * g->kw + j];
                    int64_t woff = j * g->dw - g->pw, lo, hi;
                    conv_valid_range(woff, g->sw, g->w, g->ow, &lo, &hi);
                    int64_t sw = g->sw;
                    if (sw == 1) {
#pragma omp simd
                        for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow + woff];
                    } else {
#pragma omp simd
                        for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * sw + woff];
                    }
                }
            }
        }
    }
}

/* y [N, O, P] <- bias per output channel, or zeros. */
static void NN_FN(conv_fill_bias)(NN_T *y, const NN_T *bias, const conv_geom *g) {
    for (int64_t no = 0; no < g->n * g->o; no++) {
        NN_T v = bias ? bias[no % g->o] : 0;
        NN_T *yr = y + no * g->p;
#pragma omp simd
        for (int64_t q = 0; q < g->p; q++) yr[q] = v;
    }
}

/* The output for every (image, group): bias, then the group's weights
 * [Og, K] times its unfolded input [K, P] (the input itself for a 1x1
 * kernel with unit stride and no padding). col: K * P scratch or NULL. */
static void NN_FN(conv_groups)(const NN_T *x, const NN_T *w, NN_T *y, NN_T *col, const conv_geom *g,
                               int nt) {
    if (g->cg == 1) { /* depthwise: one independent (image, group) per task */
#pragma omp parallel for num_threads(nt) if (g->n * g->o * g->p * g->k >= CPU_PAR_MIN)             \
    schedule(static)
        for (int64_t t = 0; t < g->n * g->groups; t++) {
            int64_t img = t / g->groups, grp = t % g->groups;
            const NN_T *xg = x + (img * g->c + grp) * g->h * g->w, *wg = w + grp * g->og * g->k;
            NN_FN(conv_direct1)(xg, wg, y + (img * g->o + grp * g->og) * g->p, g);
        }
        return;
    }
    for (int64_t img = 0; img < g->n; img++)
        for (int64_t grp = 0; grp < g->groups; grp++) {
            const NN_T *xg = x + (img * g->c + grp * g->cg) * g->h * g->w;
            NN_T *yg = y + (img * g->o + grp * g->og) * g->p;
            if (col) NN_FN(conv_im2col)(xg, col, g, nt);
            NN_FN(conv_gemm)(g->og, g->p, g->k, w + grp * g->og * g->k, col ? col : xg, yg, nt);
        }
}

/* Load x, w[, bias] as contiguous W arrays, then bias and the groups into
 * out (through W scratch for half dtypes). */
static hd_status NN_FN(conv_run)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                                 const conv_geom *g) {
    int own[3] = {0, 0, 0};
    const NN_T *buf[3] = {NULL, NULL, NULL};
    NN_T *y = NULL, *col = NULL;
    size_t colsz = 0;
    hd_status st = HD_OK;
    for (int i = 0; i < nin; i++)
        if (!(buf[i] = NN_FN(hd_cpu_nn_load)(ctx, in[i], &own[i]))) goto fail;
    if (g->k > 0 && g->cg > 1 && !conv_is_pointwise(g)) {
        colsz = (size_t)g->k * (size_t)g->p * sizeof(NN_T);
        if (!(col = hd_ctx_alloc(ctx, colsz))) goto fail;
    }
    if (!(y = NN_FN(hd_cpu_nn_outbuf)(ctx, out))) goto fail;
    NN_FN(conv_fill_bias)(y, nin == 3 ? buf[2] : NULL, g);
    if (g->k > 0) NN_FN(conv_groups)(buf[0], buf[1], y, col, g, ctx->nthreads);
    NN_FN(hd_cpu_nn_finish)(ctx, out, y);
    goto done;
fail:
    st = ctx->status;
done:
    hd_ctx_free(ctx, col, colsz);
    for (int i = 0; i < nin; i++)
        if (own[i]) hd_ctx_free(ctx, (void *)buf[i], (size_t)in[i]->numel * sizeof(NN_T));
    return st;
}

/* ---- pools ---- */

/* One [H, W] plane, an output row at a time: each input row and kernel
 * column of the window is one pass over the output row, so the inner loops
 * run along memory. Max pads with -inf and propagates NaN (as torch); avg
 * counts the padding zeros in the divisor kh * kw (torch's default
 * count_include_pad). */
static void NN_FN(pool_plane)(const NN_T *x, NN_T *y, const pool_geom *g, int max) {
    NN_T inv = (NN_T)(1.0 / (double)(g->kh * g->kw));
    for (int64_t oh = 0; oh < g->oh; oh++) {
        NN_T *yr = y + oh * g->ow;
        int64_t h0 = oh * g->sh - g->ph, h1 = HD_MIN(h0 + g->kh, g->h);
        for (int64_t ow = 0; ow < g->ow; ow++) yr[ow] = max ? -(NN_T)INFINITY : 0;
        for (int64_t h = HD_MAX(h0, 0); h < h1; h++)
            for (int64_t j = 0; j < g->kw; j++) {
                const NN_T *xr = x + h * g->w;
                int64_t woff = j - g->pw, sw = g->sw, lo, hi;
                conv_valid_range(woff, sw, g->w, g->ow, &lo, &hi);
                if (max) {
#pragma omp simd
                    for (int64_t ow = lo; ow < hi; ow++) {
                        NN_T v = xr[ow * sw + woff];
                        yr[ow] = (v > yr[ow] || v != v) ? v : yr[ow];
                    }
                } else {
#pragma omp simd
                    for (int64_t ow = lo; ow < hi; ow++) yr[ow] += xr[ow * sw + woff];
                }
            }
        if (!max) {
#pragma omp simd
            for (int64_t ow = 0; ow < g->ow; ow++) yr[ow] *= inv;
        }
    }
}

/* Every [H, W] plane of x, pooled into out; planes run in parallel. */
static hd_status NN_FN(pool_run)(hd_ctx *ctx, hd_tensor *out, hd_tensor *x, const pool_geom *g,
                                 int max) {
    int owned;
    const NN_T *xs = NN_FN(hd_cpu_nn_load)(ctx, x, &owned);
    NN_T *ys = xs ? NN_FN(hd_cpu_nn_outbuf)(ctx, out) : NULL;
    if (ys) {
        int64_t planes = g->planes, in_sz = g->h * g->w, out_sz = g->oh * g->ow;
#pragma omp parallel for num_threads(ctx->nthreads) if (x->numel >= CPU_PAR_MIN) schedule(static)
        for (int64_t pl = 0; pl < planes; pl++)
            NN_FN(pool_plane)(xs + pl * in_sz, ys + pl * out_sz, g, max);
        NN_FN(hd_cpu_nn_finish)(ctx, out, ys);
    }
    if (owned) hd_ctx_free(ctx, (void *)xs, (size_t)x->numel * sizeof(NN_T));
    return ys ? HD_OK : ctx->status;
}

#undef NN_FN
