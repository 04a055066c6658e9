/* Creation ops (full, arange, linspace, eye, rand, randn) in every dtype,
 * and the Philox random streams: known answers, reproducibility, the
 * layout contract and statistics. */
#include "hd_test.h"
#include "hd_op.h"
#include "hd_rng.h"

static const hd_dtype all_dtypes[] = {HD_F16, HD_BF16, HD_F32, HD_F64, HD_I8,
                                      HD_U8,  HD_I32,  HD_I64, HD_BOOL};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* What storing v in dt gives, written out from the dtypes' definitions:
 * floats round to their precision, ints truncate toward zero and saturate,
 * bool is v != 0. */
static double ref_convert(hd_dtype dt, double v) {
    double lo = 0, hi = 0;
    switch (dt) {
    case HD_F16: return hd_f16_to_f32(hd_f32_to_f16((float)v));
    case HD_BF16: return hd_bf16_to_f32(hd_f32_to_bf16((float)v));
    case HD_F32: return (float)v;
    case HD_F64: return v;
    case HD_BOOL: return v != 0;
    case HD_I8: lo = -128, hi = 127; break;
    case HD_U8: lo = 0, hi = 255; break;
    case HD_I32: lo = -2147483648.0, hi = 2147483647.0; break;
    default: lo = -9.2233720368547758e18, hi = 9.2233720368547758e18; break;
    }
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

static hd_status run_create(hd_ctx *ctx, hd_op op, hd_dtype dt, const int64_t *shape, int nd,
                            const double *scalars, int64_t n, hd_tensor **out) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = dt;
    at.nshape = nd;
    for (int i = 0; i < nd; i++) at.shape[i] = shape[i];
    for (int i = 0; scalars && i < 3; i++) at.scalar[i] = scalars[i];
    at.ints[0] = n;
    return hd_op_run(ctx, op, NULL, 0, &at, out);
}

static void test_full(hd_ctx *ctx) {
    const double values[] = {2.5, -3.7, 300.0, 0.0, 1e-3};
    int64_t shape[3] = {2, 3, 5};
    for (int d = 0; d < NDT; d++) {
        hd_dtype dt = all_dtypes[d];
        for (int k = 0; k < 5; k++) {
            double s[3] = {values[k], 0, 0};
            hd_tensor *t = NULL;
            CHECK(run_create(ctx, HD_OP_FULL, dt, shape, 3, s, 0, &t) == HD_OK);
            if (!t) continue;
            CHECK(t->dtype == dt && t->ndim == 3 && t->numel == 30);
            int bad = 0;
            for (int64_t i = 0; i < t->numel; i++)
                if (hd_tensor_get(t, i) != ref_convert(dt, values[k])) bad++;
            CHECK_MSG(bad == 0, "full(%g) in %s: %d wrong", values[k], hd_dtype_name(dt), bad);
            hd_tensor_unref(t);
        }
        /* 0-d and empty */
        double s[3] = {7, 0, 0};
        hd_tensor *t = NULL;
        CHECK(run_create(ctx, HD_OP_FULL, dt, NULL, 0, s, 0, &t) == HD_OK);
        CHECK(t && t->ndim == 0 && t->numel == 1 && hd_tensor_get(t, 0) == ref_convert(dt, 7));
        hd_tensor_unref(t);
        int64_t empty[2] = {3, 0};
        t = NULL;
        CHECK(run_create(ctx, HD_OP_FULL, dt, empty, 2, s, 0, &t) == HD_OK);
        CHECK(t && t->numel == 0 && t->shape[0] == 3 && t->shape[1] == 0);
        hd_tensor_unref(t);
    }
    /* bit patterns from the IEEE encodings: 2.5 is 0x4100 in f16, 0x4020 in bf16 */
    double s[3] = {2.5, 0, 0};
    int64_t one[1] = {3};
    hd_tensor *h = NULL, *b = NULL;
    CHECK(run_create(ctx, HD_OP_FULL, HD_F16, one, 1, s, 0, &h) == HD_OK);
    CHECK(run_create(ctx, HD_OP_FULL, HD_BF16, one, 1, s, 0, &b) == HD_OK);
    CHECK(h && ((uint16_t *)hd_tensor_data(h))[2] == 0x4100);
    CHECK(b && ((uint16_t *)hd_tensor_data(b))[2] == 0x4020);
    hd_tensor_unref(h);
    hd_tensor_unref(b);
    int64_t neg[1] = {-1};
    hd_tensor *e = NULL;
    CHECK(run_create(ctx, HD_OP_FULL, HD_F32, neg, 1, s, 0, &e) == HD_ERR_ARGUMENT && !e);
}

/* arange(a, b, step) against start + i * step, the length from math. */
static void check_arange(hd_ctx *ctx, hd_dtype dt, double a, double b, double step,
                         int64_t want_n) {
    double s[3] = {a, b, step};
    hd_tensor *t = NULL;
    CHECK(run_create(ctx, HD_OP_ARANGE, dt, NULL, 0, s, 0, &t) == HD_OK);
    if (!t) return;
    CHECK_MSG(t->ndim == 1 && t->shape[0] == want_n && t->dtype == dt,
              "arange(%g, %g, %g) in %s: length %lld, want %lld", a, b, step, hd_dtype_name(dt),
              (long long)t->shape[0], (long long)want_n);
    int bad = 0;
    for (int64_t i = 0; i < t->numel && i < want_n; i++) {
        double want = ref_convert(dt, a + (double)i * step);
        if (hd_tensor_get(t, i) != want) bad++;
    }
    CHECK_MSG(bad == 0, "arange(%g, %g, %g) in %s: %d wrong", a, b, step, hd_dtype_name(dt), bad);
    hd_tensor_unref(t);
}

static void test_arange(hd_ctx *ctx) {
    for (int d = 0; d < NDT; d++) {
        hd_dtype dt = all_dtypes[d];
        check_arange(ctx, dt, 0, 5, 1, 5);
        check_arange(ctx, dt, 5, -3, -2, 4); /* 5 3 1 -1 */
        check_arange(ctx, dt, 0, 1, 0.25, 4);
        check_arange(ctx, dt, 0, 1, 0.3, 4);      /* 0 .3 .6 .9 */
        check_arange(ctx, dt, 0.5, 3, 1, 3);      /* ints truncate 0.5 1.5 2.5 */
        check_arange(ctx, dt, -1, -2.5, -0.5, 3); /* -1 -1.5 -2 */
        check_arange(ctx, dt, 0, 0, 1, 0);
        check_arange(ctx, dt, 5, 0, 1, 0);
        check_arange(ctx, dt, 0, 5, -1, 0);
        check_arange(ctx, dt, 100, 400, 50, 6); /* saturates in i8 and u8 */
    }
    /* integer arange stays exact past 2^53 */
    double big = 1152921504606846976.0; /* 2^60 */
    double s[3] = {big, big + 2048, 3};
    hd_tensor *t = NULL;
    CHECK(run_create(ctx, HD_OP_ARANGE, HD_I64, NULL, 0, s, 0, &t) == HD_OK);
    if (t) {
        const int64_t *v = hd_tensor_data(t);
        int64_t b = INT64_C(1) << 60;
        CHECK(t->numel == 683 && v[0] == b && v[1] == b + 3 && v[682] == b + 3 * 682);
        hd_tensor_unref(t);
    }
    /* errors from the shape rule: zero step, infinite bound */
    double z[3] = {0, 5, 0}, inf[3] = {0, INFINITY, 1};
    t = NULL;
    CHECK(run_create(ctx, HD_OP_ARANGE, HD_F32, NULL, 0, z, 0, &t) == HD_ERR_RUNTIME && !t);
    CHECK(strstr(hd_error_message(ctx), "step") != NULL);
    CHECK(run_create(ctx, HD_OP_ARANGE, HD_F32, NULL, 0, inf, 0, &t) == HD_ERR_RUNTIME && !t);
}

/* linspace against a + (b - a) * i / (n - 1) from math, with exact ends. */
static void check_linspace(hd_ctx *ctx, hd_dtype dt, double a, double b, int64_t n) {
    double s[3] = {a, b, 0};
    hd_tensor *t = NULL;
    CHECK(run_create(ctx, HD_OP_LINSPACE, dt, NULL, 0, s, n, &t) == HD_OK);
    if (!t) return;
    CHECK(t->ndim == 1 && t->shape[0] == n);
    double eps = dt == HD_F64 ? 1e-14 : dt == HD_F32 ? 1e-6 : dt == HD_F16 ? 1e-3 : 8e-3;
    int bad = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        double want = n == 1 ? a : a + (b - a) * (double)i / (double)(n - 1);
        if (!hd_test_close(hd_tensor_get(t, i), want, eps, eps)) bad++;
    }
    CHECK_MSG(bad == 0, "linspace(%g, %g, %lld) in %s: %d wrong", a, b, (long long)n,
              hd_dtype_name(dt), bad);
    if (n >= 1) CHECK(hd_tensor_get(t, 0) == ref_convert(dt, a));
    if (n >= 2) CHECK(hd_tensor_get(t, n - 1) == ref_convert(dt, b));
    hd_tensor_unref(t);
}

static void test_linspace(hd_ctx *ctx) {
    for (int d = 0; d < NDT; d++) {
        hd_dtype dt = all_dtypes[d];
        if (!hd_dtype_is_float(dt)) {
            double s[3] = {0, 1, 0};
            hd_tensor *t = NULL;
            CHECK(run_create(ctx, HD_OP_LINSPACE, dt, NULL, 0, s, 5, &t) == HD_ERR_RUNTIME && !t);
            CHECK(strstr(hd_error_message(ctx), "linspace") != NULL);
            continue;
        }
        check_linspace(ctx, dt, 0, 1, 5);
        check_linspace(ctx, dt, -1, 2, 7);
        check_linspace(ctx, dt, 3, -3, 4);
        check_linspace(ctx, dt, 0.1, 0.7, 1001);
        check_linspace(ctx, dt, 4, 9, 2);
        check_linspace(ctx, dt, 4, 9, 1);
        check_linspace(ctx, dt, 4, 9, 0);
    }
    /* linspace(0, 1, 5) is exact: 0, .25, .5, .75, 1 */
    double s[3] = {0, 1, 0};
    hd_tensor *t = NULL;
    CHECK(run_create(ctx, HD_OP_LINSPACE, HD_F64, NULL, 0, s, 5, &t) == HD_OK);
    if (t) {
        const double *v = hd_tensor_data(t);
        CHECK(v[0] == 0 && v[1] == 0.25 && v[2] == 0.5 && v[3] == 0.75 && v[4] == 1);
        hd_tensor_unref(t);
    }
    /* f64 follows torch's two-sided formula exactly; a one-sided
     * start + i * step would end at 2.0799999999999996 here */
    double s2[3] = {-2.19, 2.08, 0};
    CHECK(run_create(ctx, HD_OP_LINSPACE, HD_F64, NULL, 0, s2, 50, &t) == HD_OK);
    if (t) {
        const double *v = hd_tensor_data(t);
        double step = (2.08 - -2.19) / 49;
        int bad = 0;
        for (int i = 0; i < 50; i++)
            if (v[i] != (i < 25 ? -2.19 + i * step : 2.08 - (49 - i) * step)) bad++;
        CHECK(bad == 0 && v[49] == 2.08);
        hd_tensor_unref(t);
    }
    CHECK(run_create(ctx, HD_OP_LINSPACE, HD_F32, NULL, 0, s, -1, &t) == HD_ERR_RUNTIME);
}

static void test_eye(hd_ctx *ctx) {
    const int64_t shapes[4][2] = {{3, 3}, {2, 4}, {4, 2}, {0, 3}};
    for (int d = 0; d < NDT; d++) {
        for (int k = 0; k < 4; k++) {
            hd_tensor *t = NULL;
            CHECK(run_create(ctx, HD_OP_EYE, all_dtypes[d], shapes[k], 2, NULL, 0, &t) == HD_OK);
            if (!t) continue;
            int bad = 0;
            for (int64_t i = 0; i < shapes[k][0]; i++)
                for (int64_t j = 0; j < shapes[k][1]; j++)
                    if (hd_tensor_get(t, i * shapes[k][1] + j) != (i == j)) bad++;
            CHECK_MSG(bad == 0, "eye %lldx%lld in %s", (long long)shapes[k][0],
                      (long long)shapes[k][1], hd_dtype_name(all_dtypes[d]));
            hd_tensor_unref(t);
        }
    }
    int64_t three[3] = {2, 2, 2};
    hd_tensor *t = NULL;
    CHECK(run_create(ctx, HD_OP_EYE, HD_F32, three, 3, NULL, 0, &t) == HD_ERR_ARGUMENT && !t);
}

/* ---- Philox ---- */

/* Philox4x32-10 with the full 128-bit counter, from the Random123 paper
 * (Salmon et al., SC'11), to check the runtime's one against. */
static void ref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[1] = (uint32_t)p1;
        c[3] = (uint32_t)p0;
        c[0] = n0;
        c[2] = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    memcpy(out, c, sizeof c);
}

static void test_philox_kat(void) {
    /* Random123 kat_vectors: philox4x32 10 */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    uint32_t w[4];
    hd_philox4x32(0, 0, w);
    CHECK(w[0] == 0x6627e8d5 && w[1] == 0xe169c58d && w[2] == 0xbc57ac4c && w[3] == 0x9b00dbd8);
    for (int k = 0; k < 3; k++) {
        ref_philox(kat[k], kat[k] + 4, w);
        CHECK_MSG(memcmp(w, kat[k] + 6, sizeof w) == 0, "reference philox vector %d", k);
    }
    /* the runtime's (counter, 0) blocks agree with the reference */
    int bad = 0;
    for (uint64_t i = 0; i < 64; i++) {
        uint64_t key = i * 0x9E3779B97F4A7C15ull, ctr = i * i * 0x100000001ull + i;
        uint32_t c[4] = {(uint32_t)ctr, (uint32_t)(ctr >> 32), 0, 0};
        uint32_t k2[2] = {(uint32_t)key, (uint32_t)(key >> 32)}, a[4], b[4];
        ref_philox(c, k2, a);
        hd_philox4x32(key, ctr, b);
        if (memcmp(a, b, sizeof a)) bad++;
    }
    CHECK(bad == 0);
}

static hd_tensor *draw(hd_ctx *ctx, hd_op op, hd_dtype dt, int64_t n, double mean, double std) {
    int64_t shape[1] = {n};
    double s[3] = {mean, std, 0};
    hd_tensor *t = NULL;
    hd_status st = run_create(ctx, op, dt, shape, 1, s, 0, &t);
    CHECK_MSG(st == HD_OK, "%s of %lld %s: %s", hd_op_name(op), (long long)n, hd_dtype_name(dt),
              hd_error_message(ctx));
    return t;
}

static int same_values(const hd_tensor *a, const hd_tensor *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (hd_tensor_get(a, i) != hd_tensor_get(b, i)) return 0;
    return 1;
}

static void test_rng_streams(hd_ctx *ctx) {
    for (int op = HD_OP_RAND; op <= HD_OP_RANDN; op++) {
        hd_rng_seed(ctx, 42);
        hd_tensor *a = draw(ctx, op, HD_F32, 101, 0, 1);
        CHECK(ctx->rng_offset == 51);
        hd_rng_seed(ctx, 42);
        hd_tensor *b = draw(ctx, op, HD_F32, 101, 0, 1);
        hd_tensor *c = draw(ctx, op, HD_F32, 101, 0, 1); /* the next draw differs */
        CHECK(a && b && c && same_values(a, b, 101));
        int differ = 0;
        for (int64_t i = 0; c && i < 101; i++) differ += hd_tensor_get(a, i) != hd_tensor_get(c, i);
        CHECK(differ > 95);
        hd_rng_seed(ctx, 43); /* another seed, another stream */
        hd_tensor *d = draw(ctx, op, HD_F32, 101, 0, 1);
        CHECK(d && !same_values(a, d, 101));
        /* element i is the layout's element i: a short odd draw is a prefix
         * of a long one from the same offset */
        hd_rng_seed(ctx, 42);
        hd_tensor *e = draw(ctx, op, HD_F32, 7, 0, 1);
        CHECK(e && same_values(a, e, 7));
        int bad = 0;
        for (int64_t i = 0; a && i < 101; i++) {
            float want =
                op == HD_OP_RAND ? hd_rng_uniform_f32(42, 0, i) : hd_rng_normal_f32(42, 0, i);
            if ((float)hd_tensor_get(a, i) != want) bad++;
        }
        CHECK(bad == 0);
        hd_tensor_unref(a);
        hd_tensor_unref(b);
        hd_tensor_unref(c);
        hd_tensor_unref(d);
        hd_tensor_unref(e);
    }
    /* empty draws leave the stream where it was; 0-d draws one value */
    hd_rng_seed(ctx, 5);
    hd_tensor *z = draw(ctx, HD_OP_RAND, HD_F64, 0, 0, 1);
    CHECK(z && z->numel == 0 && ctx->rng_offset == 0);
    hd_tensor_unref(z);
    double s[3] = {0, 1, 0};
    CHECK(run_create(ctx, HD_OP_RANDN, HD_F64, NULL, 0, s, 0, &z) == HD_OK);
    CHECK(z && z->ndim == 0 && hd_tensor_get(z, 0) == hd_rng_normal_f64(5, 0, 0));
    CHECK(ctx->rng_offset == 1);
    hd_tensor_unref(z);
}

/* The numbers do not depend on the thread count. */
static void test_rng_threads(hd_ctx *ctx) {
    int64_t n = 100003;
    for (int op = HD_OP_RAND; op <= HD_OP_RANDN; op++) {
        int keep = ctx->nthreads;
        hd_rng_seed(ctx, 9);
        ctx->nthreads = 1;
        hd_tensor *a = draw(ctx, op, HD_F32, n, 1, 2);
        hd_rng_seed(ctx, 9);
        ctx->nthreads = 4;
        hd_tensor *b = draw(ctx, op, HD_F32, n, 1, 2);
        ctx->nthreads = keep;
        CHECK(a && b && memcmp(hd_tensor_data(a), hd_tensor_data(b), (size_t)n * 4) == 0);
        hd_tensor_unref(a);
        hd_tensor_unref(b);
    }
}

/* f32 and f64 draws of the same stream agree to f32 precision; f16 and
 * bf16 are the f32 values rounded, and rand stays below 1. */
static void test_rng_precisions(hd_ctx *ctx) {
    int64_t n = 20000;
    for (int op = HD_OP_RAND; op <= HD_OP_RANDN; op++) {
        hd_tensor *t[4];
        const hd_dtype dts[4] = {HD_F32, HD_F64, HD_F16, HD_BF16};
        for (int k = 0; k < 4; k++) {
            hd_rng_seed(ctx, 77);
            t[k] = draw(ctx, op, dts[k], n, 0, 1);
        }
        int bad32 = 0, bad16 = 0, badbf = 0, range = 0;
        for (int64_t i = 0; t[0] && t[1] && t[2] && t[3] && i < n; i++) {
            double f = hd_tensor_get(t[0], i), d = hd_tensor_get(t[1], i);
            double h = hd_tensor_get(t[2], i), b = hd_tensor_get(t[3], i);
            if (op == HD_OP_RAND) {
                /* f32 keeps the top 24 of the 53 bits: f <= d < f + 2^-24 */
                if (!(f <= d && d - f < 1.0 / 16777216)) bad32++;
                if (!(h >= 0 && h < 1 && b >= 0 && b < 1)) range++;
            } else if (!hd_test_close(f, d, 1e-6, 1e-7)) {
                bad32++;
            }
            /* half ulp of f16 (11 bits) and bf16 (8 bits), or one ulp
             * below 1 where rand's rounding stops short of 1 */
            if (fabs(h - f) > fabs(f) / 2048 + 6e-8 && !(op == HD_OP_RAND && h == 1 - 1.0 / 2048))
                bad16++;
            if (fabs(b - f) > fabs(f) / 256 + 1e-38 && !(op == HD_OP_RAND && b == 1 - 1.0 / 512))
                badbf++;
        }
        CHECK_MSG(bad32 == 0 && bad16 == 0 && badbf == 0 && range == 0,
                  "%s: %d f32/f64, %d f16, %d bf16 disagreements, %d out of [0, 1)", hd_op_name(op),
                  bad32, bad16, badbf, range);
        for (int k = 0; k < 4; k++) hd_tensor_unref(t[k]);
    }
}

static void moments(const hd_tensor *t, double *mean, double *var) {
    double s = 0, s2 = 0;
    int64_t n = t->numel;
    for (int64_t i = 0; i < n; i++) s += hd_tensor_get(t, i);
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = hd_tensor_get(t, i) - *mean;
        s2 += d * d;
    }
    *var = s2 / (double)(n - 1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Kolmogorov-Smirnov distance of the sample (sorted in place) to the
 * standard normal cdf, scaled by sqrt(n). */
static double ks_normal(double *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double d = 0;
    for (int64_t i = 0; i < n; i++) {
        double cdf = 0.5 * erfc(-v[i] / sqrt(2.0));
        double lo = cdf - (double)i / (double)n, hi = (double)(i + 1) / (double)n - cdf;
        d = fmax(d, fmax(lo, hi));
    }
    return d * sqrt((double)n);
}

static void test_rng_stats(hd_ctx *ctx) {
    const int64_t n = 1000000;
    const double sn = sqrt((double)n);
    hd_rng_seed(ctx, 2024);
    for (int k = 0; k < 2; k++) {
        hd_dtype dt = k ? HD_F64 : HD_F32;
        /* uniform: mean 1/2 (sd 1/sqrt 12), var 1/12 (sd of (u-1/2)^2: sqrt(1/180)) */
        hd_tensor *u = draw(ctx, HD_OP_RAND, dt, n, 0, 1);
        if (!u) return;
        double m, v;
        moments(u, &m, &v);
        CHECK_MSG(fabs(m - 0.5) < 5 * sqrt(1.0 / 12) / sn, "uniform %s mean %g", hd_dtype_name(dt),
                  m);
        CHECK_MSG(fabs(v - 1.0 / 12) < 5 * sqrt(1.0 / 180) / sn, "uniform %s var %g",
                  hd_dtype_name(dt), v);
        /* chi-square over 100 equal buckets: 99 dof, mean 99, sd sqrt(198) */
        int64_t bucket[100] = {0};
        int range = 0;
        for (int64_t i = 0; i < n; i++) {
            double x = hd_tensor_get(u, i);
            if (x < 0 || x >= 1) {
                range++;
                continue;
            }
            bucket[(int)(x * 100)]++;
        }
        double chi = 0, e = (double)n / 100;
        for (int b = 0; b < 100; b++) chi += (bucket[b] - e) * (bucket[b] - e) / e;
        CHECK(range == 0);
        CHECK_MSG(chi < 99 + 5 * sqrt(198.0), "uniform %s chi-square %g", hd_dtype_name(dt), chi);
        hd_tensor_unref(u);
        /* normal: mean 0 (sd 1), var 1 (sd sqrt 2), KS distance */
        hd_tensor *g = draw(ctx, HD_OP_RANDN, dt, n, 0, 1);
        if (!g) return;
        moments(g, &m, &v);
        CHECK_MSG(fabs(m) < 5 / sn, "normal %s mean %g", hd_dtype_name(dt), m);
        CHECK_MSG(fabs(v - 1) < 5 * sqrt(2.0) / sn, "normal %s var %g", hd_dtype_name(dt), v);
        double *buf = malloc((size_t)n * sizeof *buf);
        for (int64_t i = 0; buf && i < n; i++) buf[i] = hd_tensor_get(g, i);
        double ks = buf ? ks_normal(buf, n) : 0;
        CHECK_MSG(ks < 1.95, "normal %s KS %g (1.95 is the 0.1%% level)", hd_dtype_name(dt), ks);
        free(buf);
        hd_tensor_unref(g);
    }
}

static void test_randn_params(hd_ctx *ctx) {
    const int64_t n = 200000;
    const double sn = sqrt((double)n);
    hd_rng_seed(ctx, 11);
    hd_tensor *g = draw(ctx, HD_OP_RANDN, HD_F64, n, 3, 2);
    if (g) {
        double m, v;
        moments(g, &m, &v);
        /* mean 3 with sd 2/sqrt(n); var 4 with sd 4 sqrt(2)/sqrt(n) */
        CHECK_MSG(fabs(m - 3) < 5 * 2 / sn, "randn(3, 2) mean %g", m);
        CHECK_MSG(fabs(v - 4) < 5 * 4 * sqrt(2.0) / sn, "randn(3, 2) var %g", v);
        int bad = 0;
        for (int64_t i = 0; i < 1000; i++)
            if (!hd_test_close(hd_tensor_get(g, i), 3 + 2 * hd_rng_normal_f64(11, 0, i), 1e-15,
                               1e-15))
                bad++;
        CHECK(bad == 0);
        hd_tensor_unref(g);
    }
    /* bf16 and f16 randn with mean/std */
    hd_tensor *h = draw(ctx, HD_OP_RANDN, HD_BF16, n, -1, 0.5);
    if (h) {
        double m, v;
        moments(h, &m, &v);
        CHECK_MSG(fabs(m + 1) < 0.01 && fabs(v - 0.25) < 0.01, "bf16 randn mean %g var %g", m, v);
        hd_tensor_unref(h);
    }
    hd_tensor *z = draw(ctx, HD_OP_RANDN, HD_F16, 10, 1.5, 0); /* std 0: all the mean */
    for (int64_t i = 0; z && i < 10; i++) CHECK(hd_tensor_get(z, i) == 1.5);
    hd_tensor_unref(z);
    /* errors: negative std, integer dtype */
    int64_t shape[1] = {4};
    double s[3] = {0, -1, 0};
    hd_tensor *t = NULL;
    CHECK(run_create(ctx, HD_OP_RANDN, HD_F32, shape, 1, s, 0, &t) == HD_ERR_RUNTIME && !t);
    CHECK(strstr(hd_error_message(ctx), "std") != NULL);
    s[1] = NAN;
    CHECK(run_create(ctx, HD_OP_RANDN, HD_F32, shape, 1, s, 0, &t) == HD_ERR_RUNTIME && !t);
    CHECK(run_create(ctx, HD_OP_RAND, HD_I32, shape, 1, s, 0, &t) == HD_ERR_RUNTIME && !t);
    CHECK(strstr(hd_error_message(ctx), "float") != NULL);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_full(&ctx);
    test_arange(&ctx);
    test_linspace(&ctx);
    test_eye(&ctx);
    test_philox_kat();
    test_rng_streams(&ctx);
    test_rng_threads(&ctx);
    test_rng_precisions(&ctx);
    test_rng_stats(&ctx);
    test_randn_params(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
