/* Type-generic bodies of the backward kernels, included by cpu_grad.c once
 * per type. The includer defines GR_T (float or double), GR_S (the suffix:
 * f32 or f64), GR_DT (its dtype) and GR_F64 (1 for double: the gemm cpu_blas.c
 * calls). No
 * include guard on purpose. */

#define GR_FN(name) GR_CAT(name, GR_S)

/* t (of dtype GR_DT) as a contiguous array: its own data, or a copy that
 * the caller frees with grad_free (*owned set). NULL: out of memory. */
static const GR_T *GR_FN(grad_load)(hd_ctx *ctx, const hd_tensor *t, int *owned) {
    *owned = 0;
    if (hd_tensor_is_contiguous(t)) return (const GR_T *)hd_tensor_data(t);
    GR_T *buf = hd_ctx_alloc(ctx, (size_t)t->numel * sizeof(GR_T));
    if (!buf) return NULL;
    *owned = 1;
    int64_t strides[HD_MAX_DIMS];
    hd_contiguous_strides(t->shape, t->ndim, strides);
    hd_cpu_copy_strided(ctx->nthreads, (int)sizeof(GR_T), t->ndim, t->shape, buf, strides,
                        hd_tensor_data(t), t->strides);
    return buf;
}

static void GR_FN(grad_free)(hd_ctx *ctx, const hd_tensor *t, const GR_T *p, int owned) {
    if (owned) hd_ctx_free(ctx, (void *)p, (size_t)t->numel * sizeof(GR_T));
}

/* C[m, n] = beta C + op(A) op(B), row-major; op transposes when ta / tb. */
static void GR_FN(grad_gemm)(int ta, int tb, int64_t m, int64_t n, int64_t k, const GR_T *a,
                             int64_t lda, const GR_T *b, int64_t ldb, GR_T beta, GR_T *c,
                             int64_t ldc, int nt) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* an empty sum: BLAS rejects the leading dims */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
        return;
    }
#if defined(HODU_HAVE_BLAS) && HODU_HAVE_BLAS
    if (cpu_blas_ready()) {
        cpu_blas_gemm(nt, GR_F64, ta, tb, m, n, k, 1, a, lda, b, ldb, beta, c, ldc, NULL);
        return;
    }
#endif
    HD_UNUSED(nt);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            GR_T s = 0;
            for (int64_t t = 0; t < k; t++)
                s +=
                    (ta ? a[t * lda + i] : a[i * lda + t]) * (tb ? b[j * ldb + t] : b[t * ldb + j]);
            c[i * ldc + j] = (beta == 0 ? 0 : beta * c[i * ldc + j]) + s;
        }
}

/* ---- elementwise ---- */

/* gelu(x) = x Phi(x): gelu'(x) = Phi(x) + x phi(x) */
static void GR_FN(gelu_bwd)(const GR_T *x, const GR_T *g, GR_T *out, int64_t n, int nt) {
#pragma omp parallel for num_threads(nt) if (n >= CPU_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        double cdf = 0.5 * (1.0 + erf(v * 0.70710678118654752440));
        double pdf = 0.39894228040143267794 * exp(-0.5 * v * v);
        out[i] = (GR_T)((double)g[i] * (cdf + v * pdf));
    }
}

/* tanh' and sigmoid' from the result y, operation for operation as the
 * compositions they replace (each product and difference rounded to GR_T),
 * so the gradients keep their bits with one pass and no temporaries */
static void GR_FN(tanh_bwd)(const GR_T *y, const GR_T *g, GR_T *out, int64_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) if (n >= CPU_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        GR_T yy = y[i] * y[i];
        GR_T d = (GR_T)1 - yy;
        out[i] = g[i] * d;
    }
}

static void GR_FN(sigmoid_bwd)(const GR_T *y, const GR_T *g, GR_T *out, int64_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) if (n >= CPU_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        GR_T d = (GR_T)1 - y[i];
        GR_T s = y[i] * d;
        out[i] = g[i] * s;
    }
}

/* Element i was dropped when the i-th uniform of the forward's draw is
 * below p (the dropout kernel's rule: elements 2j and 2j + 1 use block
 * base + j); kept ones scale by 1 / (1 - p). */
static void GR_FN(dropout_bwd)(const GR_T *g, GR_T *out, int64_t n, double p, uint64_t key,
                               uint64_t base, int nt) {
    double keep = 1.0 - p;
    int64_t npairs = (n + 1) / 2;
#pragma omp parallel for num_threads(nt) if (n >= CPU_PAR_MIN / 8) schedule(static)
    for (int64_t j = 0; j < npairs; j++) {
        uint32_t w[4];
        hd_philox4x32(key, base + (uint64_t)j, w);
        for (int64_t i = 2 * j; i < HD_MIN(2 * j + 2, n); i++) {
            float u = (float)(w[2 * (i - 2 * j)] >> 8) * (1.0f / 16777216.0f);
            out[i] = u < p ? (GR_T)0 : (GR_T)((double)g[i] / keep);
        }
    }
}

/* Over [outer, c, inner] blocks: softmax: y (g - sum(g y)); log_softmax:
 * g - exp(y) sum(g); sums over the c axis in double. */
static void GR_FN(softmax_bwd)(const GR_T *y, const GR_T *g, GR_T *out, int64_t outer, int64_t c,
                               int64_t inner, int logsm, int nt) {
#pragma omp parallel for num_threads(nt) if (outer * c * inner >= CPU_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < outer * inner; r++) {
        int64_t o = r / inner, i = r % inner, base = o * c * inner + i;
        double s = 0;
        for (int64_t k = 0; k < c; k++) {
            int64_t j = base + k * inner;
            s += logsm ? (double)g[j] : (double)g[j] * (double)y[j];
        }
        for (int64_t k = 0; k < c; k++) {
            int64_t j = base + k * inner;
            out[j] = logsm ? (GR_T)((double)g[j] - exp((double)y[j]) * s)
                           : (GR_T)((double)y[j] * ((double)g[j] - s));
        }
    }
}

/* rows of c logits: (softmax(row) - one_hot(label)) * scale */
static void GR_FN(ce_bwd)(const GR_T *x, const int64_t *lab, int64_t ls, GR_T *out, int64_t rows,
                          int64_t c, double scale, int nt) {
#pragma omp parallel for num_threads(nt) if (rows * c >= CPU_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const GR_T *xr = x + r * c;
        GR_T *o = out + r * c;
        double m = -INFINITY, s = 0;
        for (int64_t k = 0; k < c; k++) m = HD_MAX(m, (double)xr[k]);
        for (int64_t k = 0; k < c; k++) s += exp((double)xr[k] - m);
        for (int64_t k = 0; k < c; k++) {
            double p = exp((double)xr[k] - m) / s - (k == lab[r * ls] ? 1.0 : 0.0);
            o[k] = (GR_T)(p * scale);
        }
    }
}

/* out [outer, a, inner] (zeroed) += src [outer, j, inner] at rows ix */
static void GR_FN(index_add)(const GR_T *src, const int64_t *ix, GR_T *out, int64_t outer,
                             int64_t a, int64_t nj, int64_t inner, int nt) {
    int par = outer >= nt && outer * nj * inner >= CPU_PAR_MIN;
#pragma omp parallel for num_threads(nt) if (par) schedule(static)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < nj; j++) {
            const GR_T *s = src + (o * nj + j) * inner;
            GR_T *d = out + (o * a + ix[j]) * inner;
            for (int64_t i = 0; i < inner; i++) d[i] += s[i];
        }
}

/* ---- pools ---- */

/* The position in an [h, w] plane of window (oh, ow)'s first maximum (NaN
 * counts as the maximum), as the forward picks it. */
static int64_t GR_FN(max_at)(const GR_T *x, const grad_pool *p, int64_t oh, int64_t ow) {
    int64_t h0 = HD_MAX(oh * p->sh - p->ph, 0), h1 = HD_MIN(oh * p->sh - p->ph + p->kh, p->h);
    int64_t w0 = HD_MAX(ow * p->sw - p->pw, 0), w1 = HD_MIN(ow * p->sw - p->pw + p->kw, p->w);
    GR_T m = -(GR_T)INFINITY;
    int64_t at = h0 * p->w + w0;
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
            GR_T v = x[h * p->w + w];
            if (v > m || v != v) {
                m = v;
                at = h * p->w + w;
            }
        }
    return at;
}

/* One plane: each output's gradient goes to its window's first maximum. */
static void GR_FN(max_pool_plane)(const GR_T *x, const GR_T *g, GR_T *dx, const grad_pool *p) {
    for (int64_t oh = 0; oh < p->oh; oh++)
        for (int64_t ow = 0; ow < p->ow; ow++)
            dx[GR_FN(max_at)(x, p, oh, ow)] += g[oh * p->ow + ow];
}

/* max_pool2d_select: h at each window's first maximum of x */
static void GR_FN(pool_select)(const GR_T *x, const GR_T *h, GR_T *y, const grad_pool *p, int nt) {
    int64_t in_sz = p->h * p->w, out_sz = p->oh * p->ow;
#pragma omp parallel for num_threads(nt) if (p->planes * in_sz >= CPU_PAR_MIN) schedule(static)
    for (int64_t pl = 0; pl < p->planes; pl++)
        for (int64_t oh = 0; oh < p->oh; oh++)
            for (int64_t ow = 0; ow < p->ow; ow++)
                y[pl * out_sz + oh * p->ow + ow] =
                    h[pl * in_sz + GR_FN(max_at)(x + pl * in_sz, p, oh, ow)];
}

/* avg_pool2d divides by kh * kw, padding included (torch's default) */
static void GR_FN(avg_pool_plane)(const GR_T *g, GR_T *dx, const grad_pool *p) {
    double inv = 1.0 / (double)(p->kh * p->kw);
    for (int64_t oh = 0; oh < p->oh; oh++) {
        int64_t h0 = HD_MAX(oh * p->sh - p->ph, 0), h1 = HD_MIN(oh * p->sh - p->ph + p->kh, p->h);
        for (int64_t ow = 0; ow < p->ow; ow++) {
            int64_t w0 = HD_MAX(ow * p->sw - p->pw, 0);
            int64_t w1 = HD_MIN(ow * p->sw - p->pw + p->kw, p->w);
            GR_T v = (GR_T)((double)g[oh * p->ow + ow] * inv);
            for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) dx[h * p->w + w] += v;
        }
    }
}

static void GR_FN(pool_bwd)(const GR_T *x, const GR_T *g, GR_T *dx, const grad_pool *p, int nt) {
    int64_t in_sz = p->h * p->w, out_sz = p->oh * p->ow;
#pragma omp parallel for num_threads(nt) if (p->planes * in_sz >= CPU_PAR_MIN) schedule(static)
    for (int64_t pl = 0; pl < p->planes; pl++) {
        if (x)
            GR_FN(max_pool_plane)(x + pl * in_sz, g + pl * out_sz, dx + pl * in_sz, p);
        else
            GR_FN(avg_pool_plane)(g + pl * out_sz, dx + pl * in_sz, p);
    }
}

/* ---- conv2d ---- */

/* The input column of output column ow for kernel column j, or out of range. */
static inline int64_t GR_FN(conv_col)(const grad_conv *c, int64_t ow, int64_t j) {
    return ow * c->sw - c->pw + j * c->dw;
}

/* Unfold one group of one image x [cg, h, w] into col [k, p] (zeros in the
 * padding), as the forward does. */
static void GR_FN(im2col)(const GR_T *x, GR_T *col, const grad_conv *c, int nt) {
    int64_t kk = c->kh * c->kw;
#pragma omp parallel for num_threads(nt) if (c->k * c->p >= CPU_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < c->k; r++) {
        int64_t ch = r / kk, i = (r / c->kw) % c->kh, j = r % c->kw;
        const GR_T *xc = x + ch * c->h * c->w;
        GR_T *d = col + r * c->p;
        for (int64_t oh = 0; oh < c->oh; oh++) {
            int64_t ih = oh * c->sh - c->ph + i * c->dh;
            for (int64_t ow = 0; ow < c->ow; ow++) {
                int64_t iw = GR_FN(conv_col)(c, ow, j);
                int in = ih >= 0 && ih < c->h && iw >= 0 && iw < c->w;
                d[oh * c->ow + ow] = in ? xc[ih * c->w + iw] : 0;
            }
        }
    }
}

/* The adjoint of im2col: dx [cg, h, w] += col [k, p] folded back. Rows of
 * one channel only touch that channel, so channels run in parallel. */
static void GR_FN(col2im)(const GR_T *col, GR_T *dx, const grad_conv *c, int nt) {
    int64_t kk = c->kh * c->kw;
#pragma omp parallel for num_threads(nt) if (c->k * c->p >= CPU_PAR_MIN) schedule(static)
    for (int64_t ch = 0; ch < c->cg; ch++) {
        GR_T *xc = dx + ch * c->h * c->w;
        for (int64_t t = 0; t < kk; t++) {
            int64_t i = t / c->kw, j = t % c->kw;
            const GR_T *s = col + (ch * kk + t) * c->p;
            for (int64_t oh = 0; oh < c->oh; oh++) {
                int64_t ih = oh * c->sh - c->ph + i * c->dh;
                if (ih < 0 || ih >= c->h) continue;
                for (int64_t ow = 0; ow < c->ow; ow++) {
                    int64_t iw = GR_FN(conv_col)(c, ow, j);
                    if (iw >= 0 && iw < c->w) xc[ih * c->w + iw] += s[oh * c->ow + ow];
                }
            }
        }
    }
}

/* dx [n, c, h, w] (zeroed): per image and group, col = W_g^T G_g, folded
 * back; for a pointwise kernel the product lands in dx directly. */
static void GR_FN(conv_bwd_input)(const GR_T *g, const GR_T *w, GR_T *dx, GR_T *col,
                                  const grad_conv *c, int nt) {
    for (int64_t img = 0; img < c->n; img++)
        for (int64_t grp = 0; grp < c->groups; grp++) {
            const GR_T *gg = g + (img * c->o + grp * c->og) * c->p;
            const GR_T *wg = w + grp * c->og * c->k;
            GR_T *dxg = dx + (img * c->c + grp * c->cg) * c->h * c->w;
            if (!col) {
                GR_FN(grad_gemm)(1, 0, c->k, c->p, c->og, wg, c->k, gg, c->p, 0, dxg, c->p, nt);
                continue;
            }
            GR_FN(grad_gemm)(1, 0, c->k, c->p, c->og, wg, c->k, gg, c->p, 0, col, c->p, nt);
            GR_FN(col2im)(col, dxg, c, nt);
        }
}

/* dw [o, cg, kh, kw] = sum over images of G_g col^T, per group. */
static void GR_FN(conv_bwd_weight)(const GR_T *x, const GR_T *g, GR_T *dw, GR_T *col,
                                   const grad_conv *c, int nt) {
    for (int64_t img = 0; img < c->n; img++)
        for (int64_t grp = 0; grp < c->groups; grp++) {
            const GR_T *xg = x + (img * c->c + grp * c->cg) * c->h * c->w;
            const GR_T *gg = g + (img * c->o + grp * c->og) * c->p;
            if (col) GR_FN(im2col)(xg, col, c, nt);
            GR_FN(grad_gemm)
            (0, 1, c->og, c->k, c->p, gg, c->p, col ? col : xg, c->p, 1, dw + grp * c->og * c->k,
             c->k, nt);
        }
}

/* ---- layer_norm ---- */

/* Mean and 1 / sqrt(biased var + eps) of a row of d, in double, as the
 * forward computes them. */
static void GR_FN(ln_stats)(const GR_T *x, int64_t d, double eps, double *mean, double *rstd) {
    double s = 0, v = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < d; j++) s += x[j];
    double m = s / (double)d;
#pragma omp simd reduction(+ : v)
    for (int64_t j = 0; j < d; j++) v += ((double)x[j] - m) * ((double)x[j] - m);
    *mean = m;
    *rstd = 1.0 / sqrt(v / (double)d + eps);
}

/* One row: dx = rstd (gw - mean(gw)) - (x - mean) rstd^2 mean(gw (x - mean)),
 * gw = g w (w NULL: 1). */
static void GR_FN(ln_dx_row)(const GR_T *x, const GR_T *g, const GR_T *w, GR_T *dx, int64_t d,
                             double eps) {
    double m, rs, a = 0, b = 0;
    GR_FN(ln_stats)(x, d, eps, &m, &rs);
    if (w) {
#pragma omp simd reduction(+ : a, b)
        for (int64_t j = 0; j < d; j++) {
            double gw = (double)g[j] * (double)w[j];
            a += gw;
            b += gw * ((double)x[j] - m);
        }
    } else {
#pragma omp simd reduction(+ : a, b)
        for (int64_t j = 0; j < d; j++) {
            a += g[j];
            b += (double)g[j] * ((double)x[j] - m);
        }
    }
    double c0 = rs * a / (double)d, c1 = rs * rs * rs * b / (double)d;
    if (w) {
#pragma omp simd
        for (int64_t j = 0; j < d; j++)
            dx[j] = (GR_T)(rs * (double)g[j] * (double)w[j] - c0 - ((double)x[j] - m) * c1);
    } else {
#pragma omp simd
        for (int64_t j = 0; j < d; j++)
            dx[j] = (GR_T)(rs * (double)g[j] - c0 - ((double)x[j] - m) * c1);
    }
}

static void GR_FN(ln_bwd_dx)(const GR_T *x, const GR_T *g, const GR_T *w, GR_T *dx, int64_t rows,
                             int64_t d, double eps, int nt) {
#pragma omp parallel for num_threads(nt) if (rows * d >= CPU_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        GR_FN(ln_dx_row)(x + r * d, g + r * d, w, dx + r * d, d, eps);
}

/* dw[j] = sum over rows of g xhat, by blocks of columns (each thread owns
 * its columns, so the sums need no reduction across threads) */
static hd_status GR_FN(ln_bwd_dw)(hd_ctx *ctx, const GR_T *x, const GR_T *g, GR_T *dw, int64_t rows,
                                  int64_t d, double eps) {
    double *st = hd_ctx_alloc(ctx, (size_t)(rows ? rows : 1) * 2 * sizeof(double));
    if (!st) return ctx->status;
    int nt = ctx->nthreads;
#pragma omp parallel for num_threads(nt) if (rows * d >= CPU_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        GR_FN(ln_stats)(x + r * d, d, eps, &st[2 * r], &st[2 * r + 1]);
    enum { BLK = 64 };
    int64_t nblk = (d + BLK - 1) / BLK;
#pragma omp parallel for num_threads(nt) if (rows * d >= CPU_PAR_MIN) schedule(static)
    for (int64_t bk = 0; bk < nblk; bk++) {
        int64_t j0 = bk * BLK, j1 = HD_MIN(j0 + BLK, d);
        double acc[BLK] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const GR_T *xr = x + r * d, *gr = g + r * d;
            double m = st[2 * r], rs = st[2 * r + 1];
            for (int64_t j = j0; j < j1; j++)
                acc[j - j0] += (double)gr[j] * ((double)xr[j] - m) * rs;
        }
        for (int64_t j = j0; j < j1; j++) dw[j] = (GR_T)acc[j - j0];
    }
    hd_ctx_free(ctx, st, (size_t)(rows ? rows : 1) * 2 * sizeof(double));
    return HD_OK;
}

/* ---- entry points: load the inputs, run, free ---- */

static hd_status GR_FN(run_like)(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in,
                                 int nin, const hd_attrs *attrs) {
    int own[2] = {0, 0};
    const GR_T *a = GR_FN(grad_load)(ctx, in[0], &own[0]);
    const GR_T *b = a && nin > 1 ? GR_FN(grad_load)(ctx, in[1], &own[1]) : NULL;
    GR_T *o = hd_tensor_data(out);
    int nt = ctx->nthreads;
    hd_status st = a && (b || nin < 2) ? HD_OK : ctx->status;
    if (!st) {
        grad_axis ax;
        switch (op) {
        case HD_OP_GELU_BWD: GR_FN(gelu_bwd)(a, b, o, out->numel, nt); break;
        case HD_OP_TANH_BWD: GR_FN(tanh_bwd)(a, b, o, out->numel, nt); break;
        case HD_OP_SIGMOID_BWD: GR_FN(sigmoid_bwd)(a, b, o, out->numel, nt); break;
        case HD_OP_DROPOUT_BWD:
            GR_FN(dropout_bwd)
            (a, o, out->numel, attrs->scalar[0], (uint64_t)attrs->ints[1], (uint64_t)attrs->ints[2],
             nt);
            break;
        default:
            grad_axis_make(in[0], attrs, &ax);
            GR_FN(softmax_bwd)(a, b, o, ax.outer, ax.c, ax.inner, op == HD_OP_LOG_SOFTMAX_BWD, nt);
            break;
        }
    }
    if (a) GR_FN(grad_free)(ctx, in[0], a, own[0]);
    if (b) GR_FN(grad_free)(ctx, in[1], b, own[1]);
    return st;
}

static hd_status GR_FN(run_ce)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in) {
    const hd_tensor *y = in[1];
    int64_t c = in[0]->shape[in[0]->ndim - 1], rows = in[0]->ndim == 2 ? in[0]->shape[0] : 1;
    const int64_t *lab = (const int64_t *)y->storage->data + y->offset;
    int64_t ls = y->ndim ? y->strides[0] : 0;
    if (grad_check_labels(ctx, lab, ls, rows, c)) return ctx->status;
    int own;
    const GR_T *x = GR_FN(grad_load)(ctx, in[0], &own);
    if (!x) return ctx->status;
    double scale = rows ? hd_tensor_get(in[2], 0) / (double)rows : 0;
    GR_FN(ce_bwd)(x, lab, ls, hd_tensor_data(out), rows, c, scale, ctx->nthreads);
    GR_FN(grad_free)(ctx, in[0], x, own);
    return HD_OK;
}

static hd_status GR_FN(run_index_add)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in,
                                      const hd_attrs *attrs) {
    grad_index gi;
    if (grad_index_make(ctx, out, in[1], attrs, &gi)) return ctx->status;
    int own;
    const GR_T *src = GR_FN(grad_load)(ctx, in[0], &own);
    if (src) {
        memset(hd_tensor_data(out), 0, hd_tensor_nbytes(out));
        GR_FN(index_add)
        (src, gi.ix, hd_tensor_data(out), gi.outer, gi.a, gi.nj, gi.inner, ctx->nthreads);
        GR_FN(grad_free)(ctx, in[0], src, own);
    }
    hd_ctx_free(ctx, gi.ix, (size_t)(gi.nj ? gi.nj : 1) * sizeof(int64_t));
    return src ? HD_OK : ctx->status;
}

static hd_status GR_FN(run_pool)(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in,
                                 int nin, const hd_attrs *attrs) {
    grad_pool p;
    grad_pool_make(out, in[nin - 1], attrs, &p);
    int own[2] = {0, 0};
    const GR_T *x = op == HD_OP_MAX_POOL2D_BWD ? GR_FN(grad_load)(ctx, in[0], &own[0]) : NULL;
    const GR_T *g = GR_FN(grad_load)(ctx, in[nin - 1], &own[1]);
    hd_status st = g && (x || op != HD_OP_MAX_POOL2D_BWD) ? HD_OK : ctx->status;
    if (!st) {
        memset(hd_tensor_data(out), 0, hd_tensor_nbytes(out));
        GR_FN(pool_bwd)(x, g, hd_tensor_data(out), &p, ctx->nthreads);
    }
    if (x) GR_FN(grad_free)(ctx, in[0], x, own[0]);
    if (g) GR_FN(grad_free)(ctx, in[nin - 1], g, own[1]);
    return st;
}

static hd_status GR_FN(run_select)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in,
                                   const hd_attrs *attrs) {
    grad_pool p;
    grad_pool_make(in[0], out, attrs, &p);
    int own[2] = {0, 0};
    const GR_T *x = GR_FN(grad_load)(ctx, in[0], &own[0]);
    const GR_T *h = x ? GR_FN(grad_load)(ctx, in[1], &own[1]) : NULL;
    if (h) GR_FN(pool_select)(x, h, hd_tensor_data(out), &p, ctx->nthreads);
    if (x) GR_FN(grad_free)(ctx, in[0], x, own[0]);
    if (h) GR_FN(grad_free)(ctx, in[1], h, own[1]);
    return h ? HD_OK : ctx->status;
}

static hd_status GR_FN(run_conv)(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in,
                                 const hd_attrs *attrs) {
    grad_conv c;
    int input = op == HD_OP_CONV2D_BWD_INPUT;
    if (grad_conv_make(ctx, input ? out : in[0], input ? in[1] : out, input ? in[0] : in[1], attrs,
                       &c))
        return ctx->status;
    int own[2] = {0, 0};
    const GR_T *a = GR_FN(grad_load)(ctx, in[0], &own[0]);
    const GR_T *b = a ? GR_FN(grad_load)(ctx, in[1], &own[1]) : NULL;
    size_t colsz = grad_conv_pointwise(&c) ? 0 : (size_t)c.k * (size_t)c.p * sizeof(GR_T);
    GR_T *col = b && colsz ? hd_ctx_alloc(ctx, colsz) : NULL;
    hd_status st = b && (col || !colsz) ? HD_OK : ctx->status;
    if (!st) {
        GR_T *o = hd_tensor_data(out);
        memset(o, 0, hd_tensor_nbytes(out));
        if (input)
            GR_FN(conv_bwd_input)(a, b, o, col, &c, ctx->nthreads);
        else
            GR_FN(conv_bwd_weight)(a, b, o, col, &c, ctx->nthreads);
    }
    hd_ctx_free(ctx, col, colsz);
    if (a) GR_FN(grad_free)(ctx, in[0], a, own[0]);
    if (b) GR_FN(grad_free)(ctx, in[1], b, own[1]);
    return st;
}

static hd_status GR_FN(run_ln)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                               const hd_attrs *attrs) {
    int64_t k = attrs->ints[0] ? attrs->ints[0] : 1, d = 1;
    for (int i = in[0]->ndim - (int)k; i < in[0]->ndim; i++) d *= in[0]->shape[i];
    int64_t rows = d ? in[0]->numel / d : 0;
    double eps = hd_layer_norm_eps(attrs);
    int own[3] = {0, 0, 0};
    const GR_T *buf[3] = {NULL, NULL, NULL};
    hd_status st = HD_OK;
    for (int i = 0; i < nin && !st; i++)
        if (!(buf[i] = GR_FN(grad_load)(ctx, in[i], &own[i]))) st = ctx->status;
    if (!st && attrs->ints[1] == 1)
        st = GR_FN(ln_bwd_dw)(ctx, buf[0], buf[1], hd_tensor_data(out), rows, d, eps);
    else if (!st)
        GR_FN(ln_bwd_dx)(buf[0], buf[1], buf[2], hd_tensor_data(out), rows, d, eps, ctx->nthreads);
    for (int i = 0; i < nin; i++)
        if (buf[i]) GR_FN(grad_free)(ctx, in[i], buf[i], own[i]);
    return st;
}

#undef GR_FN
