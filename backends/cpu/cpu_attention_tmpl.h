/* W-generic body of the fused attention kernel, included by cpu_attention.c
 * once per working type. The includer defines NN_T (float or double), NN_S
 * (f32 or f64), NN_F64 (0 or 1) and NN_EXP. No include guard on purpose. */

#define NN_FN(name) NN_CAT(name, NN_S)

/* c[m, n] = alpha op(a) op(b) + beta c, where op(a) is a[m, k] or, with
 * ta, a[k, m] transposed (op(b) likewise: b[k, n] or b[n, k]); nt threads. */
static void NN_FN(att_gemm)(int nt, int ta, int tb, int64_t m, int64_t n, int64_t k, NN_T alpha,
                            const NN_T *a, int64_t lda, const NN_T *b, int64_t ldb, NN_T beta,
                            NN_T *c) {
#if defined(HODU_HAVE_BLAS) && HODU_HAVE_BLAS
    if (cpu_blas_ready()) {
        cpu_blas_gemm(nt, NN_F64, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, n, NULL);
        return;
    }
#endif
    for (int64_t i = 0; i < m; i++) {
        NN_T *cr = c + i * n;
        for (int64_t j = 0; j < n; j++) cr[j] = beta == 0 ? 0 : beta * cr[j];
        for (int64_t t = 0; t < k; t++) {
            NN_T av = alpha * (ta ? a[t * lda + i] : a[i * lda + t]);
            if (tb) {
                for (int64_t j = 0; j < n; j++) cr[j] += av * b[j * ldb + t];
            } else {
                const NN_T *br = b + t * ldb;
#pragma omp simd
                for (int64_t j = 0; j < n; j++) cr[j] += av * br[j];
            }
        }
    }
}

/* s[nq, nk] = the scores of query rows [q0, q0 + nq) against keys [k0,
 * k0 + nk) of one batch (qb, kb its first rows), scaled and masked (keys
 * past a row's causal limit, att_lim, are left as they come). */
static void NN_FN(att_scores)(const att_geom *g, const att_job *j, const NN_T *qb, const NN_T *kb,
                              NN_T *s, int64_t nq, int64_t nk, int64_t q0, int64_t k0, int nt) {
    const NN_T *qr = qb + q0 * g->e, *kr = kb + k0 * g->e;
    NN_FN(att_gemm)(nt, 0, 1, nq, nk, g->e, (NN_T)g->scale, qr, g->e, kr, g->e, 0, s);
    if (!j->mask) return;
    for (int64_t r = 0; r < nq; r++) {
        NN_T *sr = s + r * nk;
        const NN_T *mr = (const NN_T *)j->mask + j->mask_off + (q0 + r) * j->mask_ls;
        int64_t ms = j->mask_ss;
#pragma omp simd
        for (int64_t c = 0; c < nk; c++) sr[c] += mr[(k0 + c) * ms];
    }
}

/* One key block's scores s[nq, nk] (att_scores) folded into the
 * running maxima m, sums l and output rows acc[nq, ev]: the online
 * softmax. Rows whose keys so far are all masked keep m = -inf and add
 * nothing. */
static void NN_FN(att_fold)(const att_geom *g, NN_T *s, int64_t nq, int64_t nk, int64_t q0,
                            int64_t k0, NN_T *m, NN_T *l, NN_T *acc, const NN_T *vb) {
    for (int64_t r = 0; r < nq; r++) {
        NN_T *sr = s + r * nk;
        int64_t lim = att_lim(g, nk, q0 + r, k0);
        NN_T mx = -(NN_T)INFINITY;
#pragma omp simd reduction(max : mx)
        for (int64_t c = 0; c < lim; c++) mx = sr[c] > mx ? sr[c] : mx;
        NN_T mnew = m[r] > mx ? m[r] : mx;
        if (mnew == -(NN_T)INFINITY) { /* nothing to attend to yet */
            memset(sr, 0, (size_t)nk * sizeof *sr);
            continue;
        }
        NN_T corr = NN_EXP(m[r] - mnew), sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < lim; c++) {
            NN_T e = NN_EXP(sr[c] - mnew);
            sr[c] = e;
            sum += e;
        }
        if (lim < nk) memset(sr + lim, 0, (size_t)(nk - lim) * sizeof *sr);
        l[r] = l[r] * corr + sum;
        m[r] = mnew;
        if (corr != 1) {
            NN_T *ar = acc + r * g->ev;
#pragma omp simd
            for (int64_t e = 0; e < g->ev; e++) ar[e] *= corr;
        }
    }
    NN_FN(att_gemm)(1, 0, 0, nq, g->ev, nk, 1, s, nk, vb, g->ev, 1, acc);
}

/* Query rows [q0, q0 + nq) of batch b. scratch: nq * (bk + ev + 2). */
static void NN_FN(att_rows)(const att_geom *g, const att_job *j, int64_t b, int64_t q0, int64_t nq,
                            NN_T *scratch) {
    const NN_T *qb = (const NN_T *)j->q + b * g->l * g->e;
    const NN_T *kb = (const NN_T *)j->k + b * g->s * g->e;
    const NN_T *vb = (const NN_T *)j->v + b * g->s * g->ev;
    NN_T *s = scratch, *acc = s + nq * g->bk, *m = acc + nq * g->ev, *l = m + nq;
    for (int64_t r = 0; r < nq; r++) m[r] = -(NN_T)INFINITY, l[r] = 0;
    for (int64_t i = 0; i < nq * g->ev; i++) acc[i] = 0;
    att_job jb = *j;
    jb.mask_off = j->mask ? att_mask_batch(j, b) : 0;
    int64_t kend = g->causal ? HD_MIN(g->s, q0 + nq) : g->s;
    for (int64_t k0 = 0; k0 < kend; k0 += g->bk) {
        int64_t nk = HD_MIN(g->bk, kend - k0);
        NN_FN(att_scores)(g, &jb, qb, kb, s, nq, nk, q0, k0, 1);
        NN_FN(att_fold)(g, s, nq, nk, q0, k0, m, l, acc, vb + k0 * g->ev);
    }
    NN_T *o = (NN_T *)j->out + (b * g->l + q0) * g->ev;
    for (int64_t r = 0; r < nq; r++) {
        NN_T inv = l[r] > 0 ? 1 / l[r] : (NN_T)NAN; /* every key masked: NaN, as softmax */
        for (int64_t e = 0; e < g->ev; e++) o[r * g->ev + e] = acc[r * g->ev + e] * inv;
    }
}

/* ---- the backward: attention_bwd ---- */

/* lse[r] = log sum exp of the scores of rows [q0, q0 + nq) over keys [0,
 * kend) (NaN for a row with no key to attend to); s, l: scratch. */
static void NN_FN(att_lse)(const att_geom *g, const att_job *j, const NN_T *qb, const NN_T *kb,
                           NN_T *s, int64_t nq, int64_t q0, int64_t kend, NN_T *lse, NN_T *l,
                           int nt) {
    for (int64_t r = 0; r < nq; r++) lse[r] = -(NN_T)INFINITY, l[r] = 0;
    for (int64_t k0 = 0; k0 < kend; k0 += g->bk) {
        int64_t nk = HD_MIN(g->bk, kend - k0);
        NN_FN(att_scores)(g, j, qb, kb, s, nq, nk, q0, k0, nt);
        for (int64_t r = 0; r < nq; r++) {
            const NN_T *sr = s + r * nk;
            int64_t lim = att_lim(g, nk, q0 + r, k0);
            NN_T mx = -(NN_T)INFINITY, sum = 0;
#pragma omp simd reduction(max : mx)
            for (int64_t c = 0; c < lim; c++) mx = sr[c] > mx ? sr[c] : mx;
            NN_T mnew = lse[r] > mx ? lse[r] : mx;
            if (mnew == -(NN_T)INFINITY) continue;
#pragma omp simd reduction(+ : sum)
            for (int64_t c = 0; c < lim; c++) sum += NN_EXP(sr[c] - mnew);
            l[r] = l[r] * NN_EXP(lse[r] - mnew) + sum;
            lse[r] = mnew;
        }
    }
    for (int64_t r = 0; r < nq; r++)
        lse[r] = l[r] > 0 ? (NN_T)((double)lse[r] + log((double)l[r])) : (NN_T)NAN;
}

/* One key block of the gradients of rows [q0, q0 + nq): p = exp(s - lse)
 * (0 past the causal limit), dv += p^T g, ds = p (g v^T - dd), dq +=
 * scale ds k, dk += scale ds^T q. s, dp: [nq, nk] scratch. */
static void NN_FN(att_bwd_keys)(const att_geom *g, const att_job *j, const att_bwd_rows *w,
                                int64_t k0, int64_t nk, NN_T *s, NN_T *dp, int nt) {
    int64_t e = g->e, nq = w->nq, q0 = w->q0;
    const NN_T *lse = w->lse, *dd = w->dd, *gq = (const NN_T *)w->g + q0 * e;
    NN_FN(att_scores)(g, j, w->q, w->k, s, nq, nk, q0, k0, nt);
    for (int64_t r = 0; r < nq; r++) {
        NN_T *sr = s + r * nk, lr = lse[r];
        int64_t lim = att_lim(g, nk, q0 + r, k0);
#pragma omp simd
        for (int64_t c = 0; c < lim; c++) sr[c] = NN_EXP(sr[c] - lr);
        for (int64_t c = lim; c < nk; c++) sr[c] = 0;
    }
    NN_T *dv = (NN_T *)w->dv + k0 * e, *dk = (NN_T *)w->dk + k0 * e;
    NN_FN(att_gemm)(nt, 1, 0, nk, e, nq, 1, s, nk, gq, e, 1, dv);
    NN_FN(att_gemm)(nt, 0, 1, nq, nk, e, 1, gq, e, (const NN_T *)w->v + k0 * e, e, 0, dp);
    for (int64_t r = 0; r < nq; r++) {
        NN_T *sr = s + r * nk, d = dd[r];
        const NN_T *pr = dp + r * nk;
#pragma omp simd
        for (int64_t c = 0; c < nk; c++) sr[c] *= pr[c] - d;
    }
    NN_T sc = (NN_T)g->scale, *dq = (NN_T *)w->dq + q0 * e;
    const NN_T *kr = (const NN_T *)w->k + k0 * e, *qr = (const NN_T *)w->q + q0 * e;
    NN_FN(att_gemm)(nt, 0, 0, nq, e, nk, sc, s, nk, kr, e, 1, dq);
    NN_FN(att_gemm)(nt, 1, 0, nk, e, nq, sc, s, nk, qr, e, 1, dk);
}

/* The gradients of batch b into its part of the output (zeroed): dq [L,
 * E], dk [S, E], dv [S, E]. Per block of query rows: their log sum exps
 * (one pass over the keys), dd = rowsum(g y), then the key blocks. A row
 * with no key to attend to makes dk and dv NaN, as the composition's
 * NaN softmax row does. scratch: 2 bq bk + 3 bq. */
static void NN_FN(att_bwd_batch)(const att_geom *g, const att_job *j, int64_t b, NN_T *scratch,
                                 int nt) {
    int64_t e = g->e, nl = g->l, ns = g->s;
    att_bwd_rows w;
    w.q = (const NN_T *)j->q + b * nl * e, w.k = (const NN_T *)j->k + b * ns * e;
    w.v = (const NN_T *)j->v + b * ns * e, w.g = (const NN_T *)j->go + b * nl * e;
    const NN_T *yb = (const NN_T *)j->y + b * nl * e;
    NN_T *dq = (NN_T *)j->out + b * (nl + 2 * ns) * e, *dk = dq + nl * e, *dv = dk + ns * e;
    w.dq = dq, w.dk = dk, w.dv = dv;
    NN_T *s = scratch, *dp = s + g->bq * g->bk, *lse = dp + g->bq * g->bk, *l = lse + g->bq;
    NN_T *dd = l + g->bq;
    w.lse = lse, w.dd = dd;
    att_job jb = *j;
    jb.mask_off = j->mask ? att_mask_batch(j, b) : 0;
    int poison = 0;
    for (int64_t q0 = 0; q0 < nl; q0 += g->bq) {
        int64_t nq = HD_MIN(g->bq, nl - q0), kend = g->causal ? HD_MIN(ns, q0 + nq) : ns;
        w.q0 = q0, w.nq = nq;
        NN_FN(att_lse)(g, &jb, w.q, w.k, s, nq, q0, kend, lse, l, nt);
        for (int64_t r = 0; r < nq; r++) {
            const NN_T *gr = (const NN_T *)w.g + (q0 + r) * e, *yr = yb + (q0 + r) * e;
            NN_T d = 0;
#pragma omp simd reduction(+ : d)
            for (int64_t c = 0; c < e; c++) d += gr[c] * yr[c];
            dd[r] = d;
            poison |= isnan(lse[r]);
        }
        for (int64_t k0 = 0; k0 < kend; k0 += g->bk)
            NN_FN(att_bwd_keys)(g, &jb, &w, k0, HD_MIN(g->bk, kend - k0), s, dp, nt);
    }
    if (poison)
        for (int64_t i = 0; i < 2 * ns * e; i++) dk[i] = (NN_T)NAN;
}

/* The inputs as contiguous W arrays (buf; own[i]: a copy to free; the
 * mask keeps its broadcast strides), the output's buffer *y and ssz bytes
 * of *scratch. On an error, what was taken is given back. */
static hd_status NN_FN(att_open)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                                 const NN_T **buf, int *own, NN_T **y, NN_T **scratch, size_t ssz) {
    for (int i = 0; i < nin; i++) buf[i] = NULL, own[i] = 0;
    *scratch = NULL;
    for (int i = 0; i < nin; i++)
        if (!(buf[i] = NN_FN(hd_cpu_nn_load)(ctx, in[i], &own[i]))) goto fail;
    if (!(*y = NN_FN(hd_cpu_nn_outbuf)(ctx, out))) goto fail;
    if (!(*scratch = hd_ctx_alloc(ctx, ssz))) {
        if (*y != (NN_T *)hd_tensor_data(out)) /* hd_cpu_nn_outbuf's own buffer */
            hd_ctx_free(ctx, *y, (size_t)out->numel * sizeof(NN_T));
        goto fail;
    }
    return HD_OK;
fail:
    for (int i = 0; i < nin; i++)
        if (own[i]) hd_ctx_free(ctx, (void *)buf[i], (size_t)in[i]->numel * sizeof(NN_T));
    return ctx->status;
}

/* The result into out (hd_cpu_nn_finish), and what att_open took back. */
static void NN_FN(att_close)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                             const NN_T **buf, const int *own, NN_T *y, NN_T *scratch, size_t ssz) {
    NN_FN(hd_cpu_nn_finish)(ctx, out, y);
    hd_ctx_free(ctx, scratch, ssz);
    for (int i = 0; i < nin; i++)
        if (own[i]) hd_ctx_free(ctx, (void *)buf[i], (size_t)in[i]->numel * sizeof(NN_T));
}

/* attention_bwd: q, k, v, y, g and the mask loaded as for the forward;
 * batches on the context's threads, or (fewer batches than threads) one
 * after another with the threads in each product. */
static hd_status NN_FN(att_bwd_run)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                                    const att_geom *g) {
    int own[6];
    const NN_T *buf[6];
    NN_T *y = NULL, *scratch = NULL;
    int nt = ctx->nthreads > 0 ? ctx->nthreads : 1;
    int outer = g->batch >= nt && g->work >= CPU_PAR_MIN;
    size_t per = (size_t)g->bq * (size_t)(2 * g->bk + 3);
    size_t ssz = (size_t)(outer ? nt : 1) * per * sizeof(NN_T);
    if (NN_FN(att_open)(ctx, out, in, nin, buf, own, &y, &scratch, ssz)) return ctx->status;
    memset(y, 0, (size_t)out->numel * sizeof *y);
    att_job j;
    memset(&j, 0, sizeof j);
    j.q = buf[0], j.k = buf[1], j.v = buf[2], j.y = buf[3], j.go = buf[4], j.out = y;
    j.mask = nin == 6 ? buf[5] : NULL;
    if (nin == 6) att_mask_strides(g, in[5], &j);
    if (outer) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t b = 0; b < g->batch; b++)
            NN_FN(att_bwd_batch)(g, &j, b, scratch + (size_t)omp_get_thread_num() * per, 1);
    } else {
        for (int64_t b = 0; b < g->batch; b++) NN_FN(att_bwd_batch)(g, &j, b, scratch, nt);
    }
    NN_FN(att_close)(ctx, out, in, nin, buf, own, y, scratch, ssz);
    return HD_OK;
}

/* Load q, k, v and the mask (att_open), run every (batch, query block) on
 * the context's threads, each with its own scratch. */
static hd_status NN_FN(att_run)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                                const att_geom *g) {
    int own[4];
    const NN_T *buf[4];
    NN_T *y = NULL, *scratch = NULL;
    int nt = ctx->nthreads > 0 ? ctx->nthreads : 1;
    int64_t nqb = (g->l + g->bq - 1) / g->bq, tasks = g->batch * nqb;
    size_t per = (size_t)g->bq * (size_t)(g->bk + g->ev + 2);
    size_t ssz = (size_t)nt * per * sizeof(NN_T);
    if (NN_FN(att_open)(ctx, out, in, nin, buf, own, &y, &scratch, ssz)) return ctx->status;
    att_job j;
    memset(&j, 0, sizeof j);
    j.q = buf[0], j.k = buf[1], j.v = buf[2], j.mask = nin == 4 ? buf[3] : NULL, j.out = y;
    if (nin == 4) att_mask_strides(g, in[3], &j);
#pragma omp parallel for num_threads(nt) if (tasks > 1 && g->work >= CPU_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t b = t / nqb, q0 = (t % nqb) * g->bq;
        NN_T *mine = scratch + (size_t)omp_get_thread_num() * per;
        NN_FN(att_rows)(g, &j, b, q0, HD_MIN(g->bq, g->l - q0), mine);
    }
    NN_FN(att_close)(ctx, out, in, nin, buf, own, y, scratch, ssz);
    return HD_OK;
}

#undef NN_FN
