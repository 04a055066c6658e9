/* W-generic body of the fused attention kernel, included by cpu_attention.c
 * once per working type. The includer defines NN_T (float or double), NN_S
 * (f32 or f64), NN_F64 (0 or 1) and NN_EXP. No include guard on purpose. */

#define NN_FN(name) NN_CAT(name, NN_S)

/* c[m, n] = alpha a[m, k] b^T (tb) or a b, + beta c: one thread. */
static void NN_FN(att_gemm)(int tb, int64_t m, int64_t n, int64_t k, NN_T alpha, const NN_T *a,
                            int64_t lda, const NN_T *b, int64_t ldb, NN_T beta, NN_T *c) {
#if defined(HODU_HAVE_BLAS) && HODU_HAVE_BLAS
    if (cpu_blas_ready()) {
        cpu_blas_gemm(1, NN_F64, 0, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, n, NULL);
        return;
    }
#endif
    for (int64_t i = 0; i < m; i++) {
        NN_T *cr = c + i * n;
        if (beta == 0)
            for (int64_t j = 0; j < n; j++) cr[j] = 0;
        if (tb) {
            for (int64_t j = 0; j < n; j++) {
                NN_T s = 0;
                for (int64_t t = 0; t < k; t++) s += a[i * lda + t] * b[j * ldb + t];
                cr[j] += alpha * s;
            }
        } else {
            for (int64_t t = 0; t < k; t++) {
                NN_T av = alpha * a[i * lda + t];
                const NN_T *br = b + t * ldb;
#pragma omp simd
                for (int64_t j = 0; j < n; j++) cr[j] += av * br[j];
            }
        }
    }
}

/* One key block's scores s[nq, nk] (scaled, masked) folded into the
 * running maxima m, sums l and output rows acc[nq, ev]: the online
 * softmax. Rows whose keys so far are all masked keep m = -inf and add
 * nothing. */
static void NN_FN(att_fold)(const att_geom *g, const att_job *j, NN_T *s, int64_t nq, int64_t nk,
                            int64_t q0, int64_t k0, NN_T *m, NN_T *l, NN_T *acc, const NN_T *vb) {
    for (int64_t r = 0; r < nq; r++) {
        NN_T *sr = s + r * nk;
        if (j->mask) {
            const NN_T *mr = (const NN_T *)j->mask + j->mask_off + (q0 + r) * j->mask_ls;
            int64_t ms = j->mask_ss;
#pragma omp simd
            for (int64_t c = 0; c < nk; c++) sr[c] += mr[(k0 + c) * ms];
        }
        int64_t lim =
            g->causal ? HD_MAX(0, HD_MIN(nk, q0 + r + 1 - k0)) : nk; /* k0 + c <= q0 + r */
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
    NN_FN(att_gemm)(0, nq, g->ev, nk, 1, s, nk, vb, g->ev, 1, acc);
}

/* Query rows [q0, q0 + nq) of batch b. scratch: nq * (bk + ev + 2). */
static void NN_FN(att_rows)(const att_geom *g, const att_job *j, int64_t b, int64_t q0, int64_t nq,
                            NN_T *scratch) {
    const NN_T *qb = (const NN_T *)j->q + (b * g->l + q0) * g->e;
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
        NN_FN(att_gemm)(1, nq, nk, g->e, (NN_T)g->scale, qb, g->e, kb + k0 * g->e, g->e, 0, s);
        NN_FN(att_fold)(g, &jb, s, nq, nk, q0, k0, m, l, acc, vb + k0 * g->ev);
    }
    NN_T *o = (NN_T *)j->out + (b * g->l + q0) * g->ev;
    for (int64_t r = 0; r < nq; r++) {
        NN_T inv = l[r] > 0 ? 1 / l[r] : (NN_T)NAN; /* every key masked: NaN, as softmax */
        for (int64_t e = 0; e < g->ev; e++) o[r * g->ev + e] = acc[r * g->ev + e] * inv;
    }
}

/* Load q, k, v and the mask as contiguous W arrays (the mask keeps its
 * broadcast strides), run every (batch, query block) on the context's
 * threads, each with its own scratch. */
static hd_status NN_FN(att_run)(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                                const att_geom *g) {
    int own[4] = {0, 0, 0, 0};
    const NN_T *buf[4] = {NULL, NULL, NULL, NULL};
    NN_T *y = NULL, *scratch = NULL;
    int nt = ctx->nthreads > 0 ? ctx->nthreads : 1;
    int64_t nqb = (g->l + g->bq - 1) / g->bq, tasks = g->batch * nqb;
    size_t per = (size_t)g->bq * (size_t)(g->bk + g->ev + 2);
    size_t ssz = (size_t)nt * per * sizeof(NN_T);
    hd_status st = HD_OK;
    for (int i = 0; i < nin; i++)
        if (!(buf[i] = NN_FN(hd_cpu_nn_load)(ctx, in[i], &own[i]))) goto fail;
    if (!(y = NN_FN(hd_cpu_nn_outbuf)(ctx, out))) goto fail;
    if (!(scratch = hd_ctx_alloc(ctx, ssz))) goto fail;
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
    NN_FN(hd_cpu_nn_finish)(ctx, out, y);
    goto done;
fail:
    st = ctx->status;
done:
    hd_ctx_free(ctx, scratch, ssz);
    for (int i = 0; i < nin; i++)
        if (own[i]) hd_ctx_free(ctx, (void *)buf[i], (size_t)in[i]->numel * sizeof(NN_T));
    return st;
}

#undef NN_FN
