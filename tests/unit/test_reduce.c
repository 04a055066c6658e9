/* Reductions: every op in every dtype it takes, over single axes, negative
 * axes, axis lists and all axes, with and without keepdim, on contiguous
 * tensors and on permuted, step-sliced and expanded views, against a plain
 * reference loop in double (int64 for integer results) that walks the index
 * by hand. Then numerics (long f32 sums, f16 accumulation, stable
 * logsumexp), NaN and infinity rules, var/std corrections, zero-size and 0-d
 * tensors, the threaded paths, errors and allocation failures. */
#include "hd_test.h"
#include "hd_op.h"

#include <stdint.h>

static const hd_dtype all_dtypes[] = {HD_F16, HD_BF16, HD_F32, HD_F64, HD_I8,
                                      HD_U8,  HD_I32,  HD_I64, HD_BOOL};
static const hd_dtype float_dtypes[] = {HD_F16, HD_BF16, HD_F32, HD_F64};
static const hd_dtype sum_dtypes[] = {HD_F16, HD_BF16, HD_F32, HD_F64, HD_I64};

/* ---- data ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Uniform in [lo, hi). */
static double rng_uniform(double lo, double hi) {
    return lo + (hi - lo) * (double)(rng_next() >> 11) / 9007199254740992.0;
}

/* A value for element i of a test tensor; prod wants values near 1. */
static void fill_value(hd_tensor *t, int64_t i, hd_op op) {
    void *p = t->storage->data;
    switch (t->dtype) {
    case HD_I8: hd_dtype_store(t->dtype, p, i, (double)(int)(rng_next() % 41) - 20); break;
    case HD_U8: hd_dtype_store(t->dtype, p, i, (double)(rng_next() % 41)); break;
    case HD_I32: hd_dtype_store(t->dtype, p, i, (double)(int)(rng_next() % 2001) - 1000); break;
    case HD_I64:
        /* large enough that double would lose them; small ranges give ties */
        ((int64_t *)p)[i] = op == HD_OP_PROD   ? (int64_t)(rng_next() % 7) - 3
                            : (rng_next() & 1) ? (int64_t)(rng_next() % 5) - 2
                                               : (INT64_C(1) << 60) + (int64_t)(rng_next() % 9);
        break;
    case HD_BOOL: hd_dtype_store(t->dtype, p, i, (double)(rng_next() & 1)); break;
    default:
        hd_dtype_store(t->dtype, p, i,
                       op == HD_OP_PROD ? rng_uniform(0.5, 1.5) : rng_uniform(-2.0, 2.0));
        break;
    }
}

static hd_tensor *make_filled(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd, hd_op op) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    if (!t) return NULL;
    for (int64_t i = 0; i < t->numel; i++) fill_value(t, i, op);
    return t;
}

static hd_tensor *from_f32(hd_ctx *ctx, const float *v, const int64_t *shape, int nd) {
    return hd_tensor_from_data(ctx, HD_F32, shape, nd, v);
}

/* Layouts a test tensor of a given logical shape can have. */
enum { LAY_CONTIG, LAY_PERMUTED, LAY_SLICED, LAY_EXPANDED, LAY_COUNT };
static const char *lay_names[] = {"contiguous", "permuted", "sliced", "expanded"};

/* A tensor of logical shape `shape` (nd >= 1) in the given layout, made with
 * the view ops through hd_op_run. */
static hd_tensor *make_layout(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd, int lay,
                              hd_op op) {
    int64_t bs[HD_MAX_DIMS];
    hd_attrs at = {0};
    hd_tensor *base, *v = NULL;
    switch (lay) {
    case LAY_PERMUTED: /* base is the shape rotated left; permute rotates back */
        for (int i = 0; i < nd; i++) bs[i] = shape[(i + 1) % nd];
        base = make_filled(ctx, dt, bs, nd, op);
        at.nshape = nd;
        for (int i = 0; i < nd; i++) at.shape[i] = (i + nd - 1) % nd;
        CHECK(hd_op_run(ctx, HD_OP_PERMUTE, &base, 1, &at, &v) == HD_OK);
        break;
    case LAY_SLICED: /* base[:, ..., 1::2]: odd positions of a longer last dim */
        memcpy(bs, shape, (size_t)nd * sizeof *bs);
        bs[nd - 1] = 2 * shape[nd - 1] + 1;
        base = make_filled(ctx, dt, bs, nd, op);
        for (int i = 0; i < nd; i++) at.start[i] = 0, at.step[i] = 1, at.len[i] = shape[i];
        at.start[nd - 1] = 1, at.step[nd - 1] = 2;
        CHECK(hd_op_run(ctx, HD_OP_SLICE, &base, 1, &at, &v) == HD_OK);
        break;
    case LAY_EXPANDED: /* dim 0 broadcast from size 1 */
        memcpy(bs, shape, (size_t)nd * sizeof *bs);
        bs[0] = 1;
        base = make_filled(ctx, dt, bs, nd, op);
        at.nshape = nd;
        memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
        CHECK(hd_op_run(ctx, HD_OP_EXPAND, &base, 1, &at, &v) == HD_OK);
        break;
    default: return make_filled(ctx, dt, shape, nd, op);
    }
    hd_tensor_unref(base);
    return v;
}

/* ---- reference ---- */

typedef struct {
    int64_t shape[HD_MAX_DIMS];
    int ndim;
    int64_t numel;
    double *f;   /* float results */
    int64_t *i;  /* integer results (exact) */
    double *mag; /* sums: the sum of |x|, which bounds the rounding error */
    int isint;
} ref_out;

static unsigned axes_mask(const hd_attrs *at, int nd) {
    if (at->naxes == 0) return nd ? (1u << nd) - 1 : 0;
    unsigned m = 0;
    for (int k = 0; k < at->naxes; k++)
        m |= 1u << (at->axes[k] < 0 ? at->axes[k] + nd : at->axes[k]);
    return nd ? m : 0;
}

static int ref_int_result(hd_op op, hd_dtype dt) {
    if (op == HD_OP_ARGMAX || op == HD_OP_ARGMIN) return 1;
    if (op == HD_OP_SUM || op == HD_OP_PROD || op == HD_OP_MAX || op == HD_OP_MIN)
        return !hd_dtype_is_float(dt);
    return 0;
}

/* The reduction of n values (in the reduced dims' row-major order). */
static void ref_one(hd_op op, int isint, const double *v, const int64_t *iv, int64_t n,
                    int64_t corr, double *rf, int64_t *ri) {
    double s = 0, m;
    uint64_t u;
    int64_t best = -1;
    switch (op) {
    case HD_OP_SUM:
    case HD_OP_PROD:
        if (isint) {
            u = op == HD_OP_SUM ? 0 : 1;
            for (int64_t k = 0; k < n; k++)
                u = op == HD_OP_SUM ? u + (uint64_t)iv[k] : u * (uint64_t)iv[k];
            *ri = (int64_t)u;
            return;
        }
        s = op == HD_OP_SUM ? 0 : 1;
        for (int64_t k = 0; k < n; k++) s = op == HD_OP_SUM ? s + v[k] : s * v[k];
        *rf = s;
        return;
    case HD_OP_MEAN:
        for (int64_t k = 0; k < n; k++) s += v[k];
        *rf = n ? s / (double)n : NAN;
        return;
    case HD_OP_VAR:
    case HD_OP_STD: {
        for (int64_t k = 0; k < n; k++) s += v[k];
        double mean = s / (double)n, m2 = 0;
        for (int64_t k = 0; k < n; k++) m2 += (v[k] - mean) * (v[k] - mean);
        double div = (double)n - (double)corr;
        double r = n == 0 ? NAN : div > 0 ? m2 / div : m2 > 0 ? INFINITY : NAN;
        *rf = op == HD_OP_STD ? sqrt(r) : r;
        return;
    }
    case HD_OP_MAX:
    case HD_OP_MIN:
    case HD_OP_ARGMAX:
    case HD_OP_ARGMIN: {
        int ismax = op == HD_OP_MAX || op == HD_OP_ARGMAX;
        for (int64_t k = 0; k < n; k++) {
            if (!isint && isnan(v[k])) {
                best = k;
                break;
            }
            int better = best < 0 || (isint ? (ismax ? iv[k] > iv[best] : iv[k] < iv[best])
                                            : (ismax ? v[k] > v[best] : v[k] < v[best]));
            if (better) best = k;
        }
        if (op == HD_OP_ARGMAX || op == HD_OP_ARGMIN)
            *ri = best;
        else if (isint)
            *ri = iv[best];
        else
            *rf = v[best];
        return;
    }
    case HD_OP_LOGSUMEXP:
        m = -INFINITY;
        for (int64_t k = 0; k < n; k++) {
            if (isnan(v[k])) {
                *rf = NAN;
                return;
            }
            if (v[k] > m) m = v[k];
        }
        if (isinf(m)) {
            *rf = m;
            return;
        }
        for (int64_t k = 0; k < n; k++) s += exp(v[k] - m);
        *rf = m + log(s);
        return;
    default: return;
    }
}

/* Expected result of op(x, axes, keepdim) by walking every index by hand. */
static void ref_reduce(hd_op op, const hd_tensor *x, const hd_attrs *at, ref_out *r) {
    int nd = x->ndim, kept[HD_MAX_DIMS], red[HD_MAX_DIMS], nk = 0, nr = 0;
    unsigned mask = axes_mask(at, nd);
    int64_t cstr[HD_MAX_DIMS], idx[HD_MAX_DIMS], no = 1, count = 1;
    hd_contiguous_strides(x->shape, nd, cstr);
    r->ndim = 0;
    for (int d = 0; d < nd; d++) {
        if (mask & (1u << d)) {
            red[nr++] = d;
            count *= x->shape[d];
            if (at->keepdim) r->shape[r->ndim++] = 1;
        } else {
            kept[nk++] = d;
            no *= x->shape[d];
            r->shape[r->ndim++] = x->shape[d];
        }
    }
    r->numel = no;
    r->isint = ref_int_result(op, x->dtype);
    r->f = calloc((size_t)no + 1, sizeof(double));
    r->i = calloc((size_t)no + 1, sizeof(int64_t));
    r->mag = calloc((size_t)no + 1, sizeof(double));
    double *v = malloc(((size_t)count + 1) * sizeof(double));
    int64_t *iv = malloc(((size_t)count + 1) * sizeof(int64_t));
    int isint_in = !hd_dtype_is_float(x->dtype);
    for (int64_t o = 0; o < no; o++) {
        int64_t rem = o;
        for (int k = nk - 1; k >= 0; k--) {
            idx[kept[k]] = rem % x->shape[kept[k]];
            rem /= x->shape[kept[k]];
        }
        for (int64_t q = 0; q < count; q++) {
            rem = q;
            for (int k = nr - 1; k >= 0; k--) {
                idx[red[k]] = rem % x->shape[red[k]];
                rem /= x->shape[red[k]];
            }
            int64_t flat = 0;
            for (int d = 0; d < nd; d++) flat += idx[d] * cstr[d];
            v[q] = hd_tensor_get(x, flat);
            iv[q] = isint_in ? hd_tensor_get_i64(x, flat) : 0;
        }
        ref_one(op, isint_in, v, iv, count, at->ints[0], &r->f[o], &r->i[o]);
        if (op == HD_OP_SUM || op == HD_OP_MEAN)
            for (int64_t q = 0; q < count; q++)
                r->mag[o] += fabs(v[q]) / (op == HD_OP_MEAN ? (double)count : 1.0);
    }
    free(v);
    free(iv);
}

static void ref_free(ref_out *r) {
    free(r->f);
    free(r->i);
    free(r->mag);
}

static double tol_for(hd_dtype dt) {
    switch (dt) {
    case HD_F16: return 2e-3;
    case HD_BF16: return 1.6e-2;
    case HD_F32: return 2e-6;
    default: return 1e-12;
    }
}

/* Run op and compare with the reference; returns 1 if all elements match. */
static int check_op(hd_ctx *ctx, hd_op op, hd_tensor *x, const hd_attrs *at, const char *what) {
    hd_tensor *in[1] = {x}, *res = NULL;
    hd_status st = hd_op_run(ctx, op, in, 1, at, &res);
    if (st != HD_OK) {
        fprintf(stderr, "%s %s %s: %s\n", hd_op_name(op), hd_dtype_name(x->dtype), what,
                hd_error_message(ctx));
        return 0;
    }
    ref_out r;
    ref_reduce(op, x, at, &r);
    int ok = res->ndim == r.ndim && res->numel == r.numel;
    for (int d = 0; ok && d < r.ndim; d++) ok = res->shape[d] == r.shape[d];
    double tol = tol_for(res->dtype);
    for (int64_t o = 0; ok && o < r.numel; o++) {
        if (r.isint) {
            int64_t got = hd_tensor_get_i64(res, o), want = r.i[o];
            if (res->dtype == HD_BOOL) want = want != 0;
            if (got != want) {
                fprintf(stderr, "%s %s %s: element %lld is %lld, want %lld\n", hd_op_name(op),
                        hd_dtype_name(x->dtype), what, (long long)o, (long long)got,
                        (long long)want);
                ok = 0;
            }
        } else {
            double got = hd_tensor_get(res, o), want = r.f[o];
            /* relative to the result, and for sums to the sum of |x| */
            if (!hd_test_close(got, want, tol, tol * (1 + r.mag[o]))) {
                fprintf(stderr, "%s %s %s: element %lld is %.9g, want %.9g\n", hd_op_name(op),
                        hd_dtype_name(x->dtype), what, (long long)o, got, want);
                ok = 0;
            }
        }
    }
    if (!ok && res->ndim != r.ndim)
        fprintf(stderr, "%s %s %s: result has %d dims, want %d\n", hd_op_name(op),
                hd_dtype_name(x->dtype), what, res->ndim, r.ndim);
    ref_free(&r);
    hd_tensor_unref(res);
    return ok;
}

/* ---- the op x dtype x axes x layout sweep ---- */

typedef struct {
    int naxes;
    int64_t axes[3];
} axes_case;

static const axes_case axes_cases[] = {
    {0, {0}},     {1, {0}},       {1, {1}},       {1, {2}},     {1, {-1}},
    {1, {-3}},    {2, {0, 2}},    {2, {2, 0}},    {2, {-1, 0}}, {2, {0, 1}},
    {2, {1, -1}}, {3, {0, 1, 2}}, {3, {2, 0, 1}},
};

static int is_arg(hd_op op) {
    return op == HD_OP_ARGMAX || op == HD_OP_ARGMIN;
}

static void sweep_op(hd_ctx *ctx, hd_op op, const hd_dtype *dts, int ndt) {
    static const int64_t shape[3] = {3, 4, 5};
    int bad = 0, runs = 0;
    for (int di = 0; di < ndt; di++)
        for (int lay = 0; lay < LAY_COUNT; lay++) {
            hd_tensor *x = make_layout(ctx, dts[di], shape, 3, lay, op);
            if (!x) {
                bad++;
                continue;
            }
            for (size_t ai = 0; ai < sizeof axes_cases / sizeof axes_cases[0]; ai++) {
                const axes_case *ac = &axes_cases[ai];
                if (is_arg(op) && ac->naxes > 1) continue;
                for (int keep = 0; keep < 2; keep++)
                    for (int corr = 0; corr < ((op == HD_OP_VAR || op == HD_OP_STD) ? 3 : 1);
                         corr++) {
                        hd_attrs at = {0};
                        at.naxes = ac->naxes;
                        memcpy(at.axes, ac->axes, sizeof ac->axes);
                        at.keepdim = keep;
                        at.ints[0] = corr;
                        char what[128];
                        snprintf(what, sizeof what, "%s axes case %zu keepdim %d corr %d",
                                 lay_names[lay], ai, keep, corr);
                        runs++;
                        if (!check_op(ctx, op, x, &at, what)) bad++;
                    }
            }
            hd_tensor_unref(x);
        }
    CHECK_MSG(bad == 0, "%s: %d of %d cases wrong", hd_op_name(op), bad, runs);
}

static void test_sweep(hd_ctx *ctx) {
    sweep_op(ctx, HD_OP_SUM, sum_dtypes, 5);
    sweep_op(ctx, HD_OP_PROD, sum_dtypes, 5);
    sweep_op(ctx, HD_OP_MEAN, float_dtypes, 4);
    sweep_op(ctx, HD_OP_VAR, float_dtypes, 4);
    sweep_op(ctx, HD_OP_STD, float_dtypes, 4);
    sweep_op(ctx, HD_OP_LOGSUMEXP, float_dtypes, 4);
    sweep_op(ctx, HD_OP_MAX, all_dtypes, 9);
    sweep_op(ctx, HD_OP_MIN, all_dtypes, 9);
    sweep_op(ctx, HD_OP_ARGMAX, all_dtypes, 9);
    sweep_op(ctx, HD_OP_ARGMIN, all_dtypes, 9);
}

/* 4-D tensors: axis lists that are not neighbours, on a permuted view. */
static void test_four_dims(hd_ctx *ctx) {
    static const int64_t shape[4] = {2, 3, 4, 5};
    static const hd_op ops[] = {HD_OP_SUM, HD_OP_MEAN, HD_OP_VAR, HD_OP_MAX, HD_OP_ARGMIN};
    int bad = 0;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        for (int lay = 0; lay < LAY_COUNT; lay++) {
            hd_tensor *x = make_layout(ctx, HD_F64, shape, 4, lay, ops[k]);
            hd_attrs at = {0};
            if (is_arg(ops[k])) {
                at.naxes = 1, at.axes[0] = -2;
            } else {
                at.naxes = 2, at.axes[0] = 3, at.axes[1] = 1;
            }
            at.ints[0] = 1;
            bad += !check_op(ctx, ops[k], x, &at, lay_names[lay]);
            at.keepdim = 1;
            bad += !check_op(ctx, ops[k], x, &at, lay_names[lay]);
            hd_tensor_unref(x);
        }
    CHECK(bad == 0);
}

/* ---- numerics ---- */

static void test_long_sums(hd_ctx *ctx) {
    /* 10^7 copies of 0.1f: a naive f32 loop drifts by percents */
    int64_t n = 10000000;
    hd_tensor *x = hd_tensor_new(ctx, HD_F32, &n, 1);
    float *p = hd_tensor_data(x);
    for (int64_t i = 0; i < n; i++) p[i] = 0.1f;
    int save = ctx->nthreads;
    for (int nt = 1; nt <= 2; nt++) {
        ctx->nthreads = nt;
        hd_tensor *s = NULL, *m = NULL;
        CHECK(hd_op_unary(ctx, HD_OP_SUM, x, &s) == HD_OK);
        CHECK(hd_op_unary(ctx, HD_OP_MEAN, x, &m) == HD_OK);
        if (s) CHECK_CLOSE(hd_tensor_get(s, 0), 1e6, 1e-6, 0);
        if (m) CHECK_CLOSE(hd_tensor_get(m, 0), 0.1, 1e-6, 0);
        hd_tensor_unref(s);
        hd_tensor_unref(m);
    }
    ctx->nthreads = save;
    hd_tensor_unref(x);

    /* f16 sums accumulate in f32: 3000 ones give 3000, where an f16
     * accumulator would stop at 2048 (2048 + 1 rounds back to 2048) */
    int64_t n16 = 3000;
    hd_tensor *h = hd_tensor_new(ctx, HD_F16, &n16, 1);
    for (int64_t i = 0; i < n16; i++) ((uint16_t *)hd_tensor_data(h))[i] = hd_f32_to_f16(1.0f);
    hd_tensor *hs = NULL;
    CHECK(hd_op_unary(ctx, HD_OP_SUM, h, &hs) == HD_OK);
    if (hs) CHECK(hd_tensor_get(hs, 0) == 3000.0);
    hd_tensor_unref(hs);
    hd_tensor_unref(h);

    /* i64 sums are exact beyond 2^53 and wrap like torch */
    int64_t big[3] = {(INT64_C(1) << 53) + 1, 1, 1}, three = 3;
    hd_tensor *b = hd_tensor_from_data(ctx, HD_I64, &three, 1, big), *bs = NULL;
    CHECK(hd_op_unary(ctx, HD_OP_SUM, b, &bs) == HD_OK);
    if (bs) CHECK(hd_tensor_get_i64(bs, 0) == (INT64_C(1) << 53) + 3);
    hd_tensor_unref(bs);
    hd_tensor_unref(b);
    int64_t wrap[2] = {INT64_MAX, 1}, two = 2;
    b = hd_tensor_from_data(ctx, HD_I64, &two, 1, wrap);
    CHECK(hd_op_unary(ctx, HD_OP_SUM, b, &bs) == HD_OK);
    if (bs) CHECK(hd_tensor_get_i64(bs, 0) == INT64_MIN);
    hd_tensor_unref(bs);
    hd_tensor_unref(b);
}

static double run1(hd_ctx *ctx, hd_op op, const float *v, int64_t n, int64_t corr) {
    hd_tensor *x = from_f32(ctx, v, &n, 1), *r = NULL;
    hd_attrs at = {0};
    at.ints[0] = corr;
    double out = -12345;
    if (hd_op_run(ctx, op, &x, 1, &at, &r) == HD_OK) out = hd_tensor_get(r, 0);
    hd_tensor_unref(r);
    hd_tensor_unref(x);
    return out;
}

static void test_special_values(hd_ctx *ctx) {
    float nanv[4] = {1, NAN, 3, NAN};
    CHECK(isnan(run1(ctx, HD_OP_MAX, nanv, 4, 0)));
    CHECK(isnan(run1(ctx, HD_OP_MIN, nanv, 4, 0)));
    CHECK(isnan(run1(ctx, HD_OP_SUM, nanv, 4, 0)));
    CHECK(isnan(run1(ctx, HD_OP_LOGSUMEXP, nanv, 4, 0)));
    CHECK(run1(ctx, HD_OP_ARGMAX, nanv, 4, 0) == 1);
    CHECK(run1(ctx, HD_OP_ARGMIN, nanv, 4, 0) == 1);
    float late_nan[3] = {5, 2, NAN};
    CHECK(isnan(run1(ctx, HD_OP_MAX, late_nan, 3, 0)));
    CHECK(run1(ctx, HD_OP_ARGMIN, late_nan, 3, 0) == 2);
    float ties[5] = {1, 7, 7, -2, -2};
    CHECK(run1(ctx, HD_OP_ARGMAX, ties, 5, 0) == 1);
    CHECK(run1(ctx, HD_OP_ARGMIN, ties, 5, 0) == 3);
    float ninf[2] = {-INFINITY, -INFINITY};
    CHECK(run1(ctx, HD_OP_LOGSUMEXP, ninf, 2, 0) == -INFINITY);
    CHECK(run1(ctx, HD_OP_MAX, ninf, 2, 0) == -INFINITY);
    float pinf[2] = {INFINITY, 1};
    CHECK(run1(ctx, HD_OP_LOGSUMEXP, pinf, 2, 0) == INFINITY);
    float large[2] = {1000, 1000}; /* exp(1000) overflows: subtract the max */
    CHECK_CLOSE(run1(ctx, HD_OP_LOGSUMEXP, large, 2, 0), 1000 + log(2.0), 1e-6, 0);
    float small[3] = {-1000, -1000, -INFINITY};
    CHECK_CLOSE(run1(ctx, HD_OP_LOGSUMEXP, small, 3, 0), -1000 + log(2.0), 1e-6, 0);
    /* var: torch's divisor max(0, N - correction) */
    float one[1] = {4};
    CHECK(isnan(run1(ctx, HD_OP_VAR, one, 1, 1)));
    CHECK(run1(ctx, HD_OP_VAR, one, 1, 0) == 0);
    float two[2] = {1, 2};
    CHECK(run1(ctx, HD_OP_VAR, two, 2, 3) == INFINITY);
    CHECK_CLOSE(run1(ctx, HD_OP_VAR, two, 2, 1), 0.5, 1e-7, 0);
    CHECK_CLOSE(run1(ctx, HD_OP_VAR, two, 2, 0), 0.25, 1e-7, 0);
    CHECK_CLOSE(run1(ctx, HD_OP_STD, two, 2, 0), 0.5, 1e-7, 0);
    CHECK_CLOSE(run1(ctx, HD_OP_VAR, two, 2, -1), 1.0 / 6, 1e-7, 0);
    float same[2] = {3, 3};
    CHECK(isnan(run1(ctx, HD_OP_VAR, same, 2, 2)));
    float withinf[2] = {INFINITY, 1};
    CHECK(isnan(run1(ctx, HD_OP_VAR, withinf, 2, 1)));
    /* var with a large offset: two-pass keeps the small spread */
    float off[4] = {1e4f + 1, 1e4f + 2, 1e4f + 3, 1e4f + 4};
    CHECK_CLOSE(run1(ctx, HD_OP_VAR, off, 4, 1), 5.0 / 3, 1e-6, 0);
    /* i64 extremes beyond double's precision */
    int64_t iv[3] = {(INT64_C(1) << 60) + 1, (INT64_C(1) << 60) + 3, (INT64_C(1) << 60) + 2};
    int64_t three = 3;
    hd_tensor *x = hd_tensor_from_data(ctx, HD_I64, &three, 1, iv), *r = NULL;
    CHECK(hd_op_unary(ctx, HD_OP_ARGMAX, x, &r) == HD_OK && hd_tensor_get_i64(r, 0) == 1);
    hd_tensor_unref(r);
    CHECK(hd_op_unary(ctx, HD_OP_MAX, x, &r) == HD_OK &&
          hd_tensor_get_i64(r, 0) == (INT64_C(1) << 60) + 3);
    hd_tensor_unref(r);
    hd_tensor_unref(x);
}

/* NaN and infinities through every path: vertical (axis 0), per output
 * (axis 1), all axes, permuted views, and a long run split across threads. */
static void test_nan_paths(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_SUM,    HD_OP_MEAN, HD_OP_MAX, HD_OP_MIN,      HD_OP_ARGMAX,
                                HD_OP_ARGMIN, HD_OP_VAR,  HD_OP_STD, HD_OP_LOGSUMEXP};
    int64_t shape[2] = {16, 9};
    int bad = 0;
    for (int di = 0; di < 4; di++)
        for (int lay = 0; lay < 2; lay++)
            for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
                hd_tensor *x = make_layout(ctx, float_dtypes[di], shape, 2, lay, ops[k]);
                /* specials in the storage: some rows and columns get NaN, +inf, -inf */
                void *p = x->storage->data;
                int64_t n = (int64_t)(x->storage->nbytes / (size_t)hd_dtype_size(x->dtype));
                hd_dtype_store(x->dtype, p, 5, NAN);
                hd_dtype_store(x->dtype, p, 40, NAN);
                hd_dtype_store(x->dtype, p, 23, INFINITY);
                hd_dtype_store(x->dtype, p, 70, -INFINITY);
                hd_dtype_store(x->dtype, p, n - 1, NAN);
                /* a line of -inf alone (contiguous: column 7, axis 0) */
                for (int64_t i = 7; i < n; i += 9) hd_dtype_store(x->dtype, p, i, -INFINITY);
                for (int ax = -1; ax < 2; ax++)
                    for (int corr = 1; corr <= 16; corr += 15) { /* 16: no degree of freedom */
                        hd_attrs at = {0};
                        at.naxes = ax >= 0, at.axes[0] = ax, at.ints[0] = corr;
                        bad += !check_op(ctx, ops[k], x, &at, "with NaN and inf");
                    }
                hd_tensor_unref(x);
            }
    int save = ctx->nthreads;
    ctx->nthreads = 2;
    int64_t n = 70000;
    hd_tensor *v = make_layout(ctx, HD_F32, &n, 1, LAY_CONTIG, HD_OP_SUM);
    ((float *)hd_tensor_data(v))[65000] = NAN;
    ((float *)hd_tensor_data(v))[60000] = NAN;
    hd_attrs all = {0};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        bad += !check_op(ctx, ops[k], v, &all, "long, NaN late");
    ctx->nthreads = save;
    hd_tensor_unref(v);
    CHECK_MSG(bad == 0, "%d NaN cases wrong", bad);
}

/* ---- shapes at the edges ---- */

static void test_empty_and_scalar(hd_ctx *ctx) {
    int64_t shape[2] = {3, 0};
    hd_tensor *x = hd_tensor_new(ctx, HD_F32, shape, 2), *r = NULL;
    hd_attrs at = {0};
    at.naxes = 1, at.axes[0] = 1;
    static const hd_op ops[] = {HD_OP_SUM, HD_OP_PROD, HD_OP_MEAN, HD_OP_VAR};
    static const double want[] = {0, 1, NAN, NAN};
    for (int k = 0; k < 4; k++) {
        at.ints[0] = 1;
        CHECK(hd_op_run(ctx, ops[k], &x, 1, &at, &r) == HD_OK);
        if (!r) continue;
        CHECK(r->ndim == 1 && r->shape[0] == 3);
        for (int i = 0; i < 3; i++) CHECK_CLOSE(hd_tensor_get(r, i), want[k], 0, 0);
        hd_tensor_unref(r);
    }
    /* over all axes */
    CHECK(hd_op_unary(ctx, HD_OP_SUM, x, &r) == HD_OK && r->ndim == 0 && hd_tensor_get(r, 0) == 0);
    hd_tensor_unref(r);
    /* reducing the non-empty axis leaves an empty result */
    at.axes[0] = 0;
    CHECK(hd_op_run(ctx, HD_OP_MAX, &x, 1, &at, &r) == HD_OK && r->numel == 0 && r->shape[0] == 0);
    hd_tensor_unref(r);
    /* max over the empty axis has no value */
    at.axes[0] = -1;
    CHECK(hd_op_run(ctx, HD_OP_MAX, &x, 1, &at, &r) == HD_ERR_RUNTIME && !r);
    CHECK(strstr(hd_error_message(ctx), "max over an empty axis") != NULL);
    CHECK(hd_op_run(ctx, HD_OP_ARGMIN, &x, 1, &at, &r) == HD_ERR_RUNTIME && !r);
    CHECK(hd_op_run(ctx, HD_OP_LOGSUMEXP, &x, 1, &at, &r) == HD_ERR_RUNTIME && !r);
    hd_tensor_unref(x);
    /* an empty i64 tensor: sum 0, prod 1 */
    int64_t zero = 0;
    x = hd_tensor_new(ctx, HD_I64, &zero, 1);
    CHECK(hd_op_unary(ctx, HD_OP_SUM, x, &r) == HD_OK && hd_tensor_get_i64(r, 0) == 0);
    hd_tensor_unref(r);
    CHECK(hd_op_unary(ctx, HD_OP_PROD, x, &r) == HD_OK && hd_tensor_get_i64(r, 0) == 1);
    hd_tensor_unref(r);
    hd_tensor_unref(x);

    /* 0-d tensors: the value itself; var with correction 1 is NaN */
    x = hd_tensor_scalar(ctx, HD_F64, 2.5);
    static const hd_op sops[] = {HD_OP_SUM, HD_OP_MEAN, HD_OP_MAX, HD_OP_PROD, HD_OP_LOGSUMEXP};
    for (int k = 0; k < 5; k++) {
        CHECK(hd_op_unary(ctx, sops[k], x, &r) == HD_OK && r->ndim == 0 &&
              hd_tensor_get(r, 0) == 2.5);
        hd_tensor_unref(r);
    }
    hd_attrs a0 = {0};
    a0.naxes = 1, a0.axes[0] = 0, a0.keepdim = 1, a0.ints[0] = 1;
    CHECK(hd_op_run(ctx, HD_OP_VAR, &x, 1, &a0, &r) == HD_OK && r->ndim == 0 &&
          isnan(hd_tensor_get(r, 0)));
    hd_tensor_unref(r);
    CHECK(hd_op_run(ctx, HD_OP_ARGMAX, &x, 1, &a0, &r) == HD_OK && r->dtype == HD_I64 &&
          hd_tensor_get_i64(r, 0) == 0);
    hd_tensor_unref(r);
    hd_tensor_unref(x);
    hd_tensor *b = hd_tensor_scalar(ctx, HD_BOOL, 1);
    CHECK(hd_op_unary(ctx, HD_OP_MIN, b, &r) == HD_OK && r->dtype == HD_BOOL &&
          hd_tensor_get(r, 0) == 1);
    hd_tensor_unref(r);
    hd_tensor_unref(b);
}

/* ---- the threaded and vertical paths on larger tensors ---- */

static void test_large(hd_ctx *ctx) {
    int save = ctx->nthreads, bad = 0;
    static const hd_op ops[] = {HD_OP_SUM,    HD_OP_MEAN, HD_OP_MAX, HD_OP_MIN,      HD_OP_ARGMAX,
                                HD_OP_ARGMIN, HD_OP_VAR,  HD_OP_STD, HD_OP_LOGSUMEXP};
    static const hd_dtype dts[] = {HD_F32, HD_F64, HD_F16, HD_BF16};
    int64_t shape[2] = {300, 257};       /* 77100 elements: over the threading threshold */
    for (int nt = 1; nt <= 3; nt += 2) { /* 3: parts of unequal size */
        ctx->nthreads = nt;
        for (int di = 0; di < 4; di++)
            for (int lay = 0; lay < 2; lay++) {
                for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
                    hd_tensor *x = make_layout(ctx, dts[di], shape, 2, lay, ops[k]);
                    for (int ax = -1; ax < 2; ax++) { /* -1: all axes */
                        hd_attrs at = {0};
                        at.naxes = ax >= 0;
                        at.axes[0] = ax;
                        at.ints[0] = 1;
                        char what[64];
                        snprintf(what, sizeof what, "large %s axis %d threads %d", lay_names[lay],
                                 ax, nt);
                        bad += !check_op(ctx, ops[k], x, &at, what);
                    }
                    hd_tensor_unref(x);
                }
            }
        /* i64 sums, vertical and split; a single long run split across threads */
        hd_tensor *xi = make_layout(ctx, HD_I64, shape, 2, LAY_PERMUTED, HD_OP_SUM);
        for (int ax = -1; ax < 2; ax++) {
            hd_attrs at = {0};
            at.naxes = ax >= 0;
            at.axes[0] = ax;
            bad += !check_op(ctx, HD_OP_SUM, xi, &at, "large i64");
            bad += !check_op(ctx, HD_OP_MAX, xi, &at, "large i64");
        }
        hd_tensor_unref(xi);
        int64_t n = 100003;
        hd_tensor *v = make_layout(ctx, HD_F32, &n, 1, LAY_SLICED, HD_OP_PROD);
        hd_attrs all = {0};
        bad += !check_op(ctx, HD_OP_PROD, v, &all, "long strided prod");
        bad += !check_op(ctx, HD_OP_STD, v, &all, "long strided std");
        hd_tensor_unref(v);
        /* integer prod and argmax split across threads */
        hd_tensor *vi = hd_tensor_new(ctx, HD_I64, &n, 1);
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)hd_tensor_data(vi))[i] = i % 1000 == 7 ? 3 : (rng_next() & 1) ? 1 : -1;
        bad += !check_op(ctx, HD_OP_PROD, vi, &all, "long i64 prod");
        hd_tensor_unref(vi);
        hd_tensor *v32 = make_layout(ctx, HD_I32, &n, 1, LAY_CONTIG, HD_OP_SUM);
        bad += !check_op(ctx, HD_OP_ARGMAX, v32, &all, "long i32 argmax");
        bad += !check_op(ctx, HD_OP_MIN, v32, &all, "long i32 min");
        hd_tensor_unref(v32);
        /* fewer outputs than threads, long blocks: [2, 40000] over axis 1 */
        int64_t s3[2] = {2, 40000};
        hd_tensor *w = make_layout(ctx, HD_F32, s3, 2, LAY_CONTIG, HD_OP_SUM);
        hd_attrs a1 = {0};
        a1.naxes = 1, a1.axes[0] = 1;
        bad += !check_op(ctx, HD_OP_SUM, w, &a1, "few outputs");
        bad += !check_op(ctx, HD_OP_ARGMAX, w, &a1, "few outputs");
        hd_tensor_unref(w);
    }
    ctx->nthreads = save;
    CHECK_MSG(bad == 0, "%d large cases wrong", bad);
}

/* ---- errors ---- */

static void test_errors(hd_ctx *ctx) {
    int64_t shape[2] = {2, 3};
    hd_tensor *x = hd_tensor_zeros(ctx, HD_F32, shape, 2), *r = NULL;
    hd_attrs at = {0};
    at.naxes = 1, at.axes[0] = 2;
    CHECK(hd_op_run(ctx, HD_OP_SUM, &x, 1, &at, &r) == HD_ERR_RUNTIME && !r);
    CHECK(strstr(hd_error_message(ctx), "axis 2 is out of range") != NULL);
    at.axes[0] = -3;
    CHECK(hd_op_run(ctx, HD_OP_MEAN, &x, 1, &at, &r) == HD_ERR_RUNTIME && !r);
    at.naxes = 2, at.axes[0] = 1, at.axes[1] = -1;
    CHECK(hd_op_run(ctx, HD_OP_SUM, &x, 1, &at, &r) == HD_ERR_RUNTIME && !r);
    CHECK(strstr(hd_error_message(ctx), "appears twice") != NULL);
    at.axes[1] = 0;
    CHECK(hd_op_run(ctx, HD_OP_ARGMAX, &x, 1, &at, &r) == HD_ERR_RUNTIME && !r);
    CHECK(strstr(hd_error_message(ctx), "argmax takes one axis") != NULL);
    at.naxes = 9;
    CHECK(hd_op_run(ctx, HD_OP_SUM, &x, 1, &at, &r) != HD_OK && !r);
    hd_tensor_unref(x);
}

/* Failing each allocation in turn gives an error, never a crash or a leak. */
static void test_alloc_failures(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    int64_t shape[2] = {4, 5};
    hd_tensor *x = make_layout(&ctx, HD_F32, shape, 2, LAY_PERMUTED, HD_OP_SUM);
    size_t base = ctx.mem_used;
    int fails = 0;
    for (long k = 0; k < 6; k++) {
        ctx.fail_countdown = k;
        hd_tensor *r = NULL;
        hd_attrs at = {0};
        at.naxes = 1, at.axes[0] = 0, at.ints[0] = 1;
        hd_status st = hd_op_run(&ctx, HD_OP_VAR, &x, 1, &at, &r);
        CHECK((st == HD_OK) == (r != NULL));
        if (st) {
            fails++;
            CHECK(st == HD_ERR_MEMORY);
        }
        hd_tensor_unref(r);
        ctx.fail_countdown = -1;
        CHECK(ctx.mem_used == base);
    }
    CHECK(fails > 0);
    hd_tensor_unref(x);
    CHECK(ctx.mem_used == 0);
}

/* ---- inputs the plan casts first ---- */

static int cast_works(hd_ctx *ctx) {
    hd_tensor *x = hd_tensor_scalar(ctx, HD_I32, 3), *y = NULL;
    int ok = hd_op_cast(ctx, x, HD_I64, &y) == HD_OK && hd_tensor_get_i64(y, 0) == 3;
    hd_tensor_unref(y);
    hd_tensor_unref(x);
    hd_error_clear(ctx);
    return ok;
}

/* Mixed cases: sum/prod of i8, u8, i32 and bool (to i64), mean/var/std/
 * logsumexp of integers (to f32). */
static void test_cast_inputs(hd_ctx *ctx) {
    if (!cast_works(ctx)) {
        CHECK(!"the cast kernel works");
        return;
    }
    static const hd_dtype ints[] = {HD_I8, HD_U8, HD_I32, HD_BOOL};
    sweep_op(ctx, HD_OP_SUM, ints, 4);
    sweep_op(ctx, HD_OP_PROD, ints, 4);
    sweep_op(ctx, HD_OP_MEAN, ints, 4);
    sweep_op(ctx, HD_OP_VAR, ints, 4);
    sweep_op(ctx, HD_OP_LOGSUMEXP, ints, 3);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_sweep(&ctx);
    test_four_dims(&ctx);
    test_long_sums(&ctx);
    test_special_values(&ctx);
    test_nan_paths(&ctx);
    test_empty_and_scalar(&ctx);
    test_large(&ctx);
    test_errors(&ctx);
    test_alloc_failures();
    test_cast_inputs(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
