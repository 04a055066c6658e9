/* Matmul with numpy.matmul semantics: 1-D and 2-D operands, batched 3-D and
 * 4-D with broadcasting, transposed, step-sliced and expanded views on each
 * side, every dtype it takes, odd sizes and K == 0, against a triple loop in
 * double (64-bit wrapping integers for integer dtypes) that walks the
 * indices by hand. Then the threaded paths, errors and allocation failures. */
#include "hd_test.h"
#include "hd_op.h"
#include "cpu_blas.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const hd_dtype mm_dtypes[] = {HD_F32, HD_F64, HD_F16, HD_BF16, HD_I32, HD_I64, HD_I8, HD_U8};
enum { NDT = sizeof mm_dtypes / sizeof mm_dtypes[0] };

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A float in [-0.5, 0.5) with 24 random bits. */
static float rng_half(void) {
    return (float)(rng_next() >> 40) / 16777216.0f - 0.5f;
}

static void fill(hd_tensor *t) {
    void *p = t->storage->data;
    for (int64_t i = 0; i < t->numel; i++) {
        double v;
        switch (t->dtype) {
        case HD_I8: v = (double)(int)(rng_next() % 17) - 8; break;
        case HD_U8: v = (double)(rng_next() % 16); break;
        case HD_I32: v = (double)(int)(rng_next() % 2001) - 1000; break;
        case HD_I64: v = (double)(int64_t)(rng_next() % 2000001) - 1e6; break;
        default: v = (double)(rng_next() >> 11) / 4503599627370496.0 - 1.0; break;
        }
        hd_dtype_store(t->dtype, p, i, v);
    }
}

static hd_tensor *make_filled(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    if (t) fill(t);
    return t;
}

/* Layouts of an operand. */
enum { LAY_CONTIG, LAY_TRANSPOSED, LAY_SLICED, LAY_EXPANDED, LAY_COUNT };
static const char *lay_names[] = {"contiguous", "transposed", "sliced", "expanded"};

/* A tensor of logical shape `shape` in the given layout, made with the view
 * ops: transposed (last two dims stored swapped: a column-major matrix),
 * sliced (every other element of the last dim), expanded (dim 0 broadcast
 * from size 1, stride 0). */
static hd_tensor *make_layout(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd, int lay) {
    int64_t bs[HD_MAX_DIMS];
    memcpy(bs, shape, (size_t)nd * sizeof *bs);
    hd_attrs at = {0};
    hd_tensor *base, *v = NULL;
    if (lay == LAY_TRANSPOSED && nd >= 2) {
        bs[nd - 2] = shape[nd - 1], bs[nd - 1] = shape[nd - 2];
        base = make_filled(ctx, dt, bs, nd);
        at.nshape = nd;
        for (int i = 0; i < nd; i++) at.shape[i] = i;
        at.shape[nd - 2] = nd - 1, at.shape[nd - 1] = nd - 2;
        CHECK(hd_op_run(ctx, HD_OP_PERMUTE, &base, 1, &at, &v) == HD_OK);
    } else if (lay == LAY_SLICED) {
        bs[nd - 1] = 2 * shape[nd - 1] + 1;
        base = make_filled(ctx, dt, bs, nd);
        for (int i = 0; i < nd; i++) at.start[i] = 0, at.step[i] = 1, at.len[i] = shape[i];
        at.start[nd - 1] = 1, at.step[nd - 1] = 2;
        CHECK(hd_op_run(ctx, HD_OP_SLICE, &base, 1, &at, &v) == HD_OK);
    } else if (lay == LAY_EXPANDED) {
        bs[0] = 1;
        base = make_filled(ctx, dt, bs, nd);
        at.nshape = nd;
        memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
        CHECK(hd_op_run(ctx, HD_OP_EXPAND, &base, 1, &at, &v) == HD_OK);
    } else {
        return make_filled(ctx, dt, shape, nd);
    }
    hd_tensor_unref(base);
    return v;
}

/* ---- reference ---- */

typedef struct {
    int ndim;
    int64_t shape[HD_MAX_DIMS];
    int64_t numel;
    double *f, *mag; /* float results; sum of |a b| terms (error scale) */
    int64_t *i;      /* integer results, wrapped to the dtype */
} ref_out;

/* Flat (row-major) index into t of batch index bidx (of nbd dims, t's batch
 * dims right-aligned, size-1 dims broadcast), row r and column c. */
static int64_t ref_flat(const hd_tensor *t, int vec_row, const int64_t *bidx, int nbd, int64_t r,
                        int64_t c) {
    int64_t cstr[HD_MAX_DIMS], flat = 0;
    hd_contiguous_strides(t->shape, t->ndim, cstr);
    if (t->ndim == 1) return (vec_row ? c : r) * cstr[0];
    int tb = t->ndim - 2;
    for (int d = 0; d < tb; d++) {
        int64_t i = bidx[d + (nbd - tb)];
        flat += (t->shape[d] == 1 ? 0 : i) * cstr[d];
    }
    return flat + r * cstr[tb] + c * cstr[tb + 1];
}

static int64_t wrap_to(hd_dtype dt, uint64_t u) {
    switch (dt) {
    case HD_I8: return (int8_t)(uint8_t)u;
    case HD_U8: return (uint8_t)u;
    case HD_I32: return (int32_t)(uint32_t)u;
    default: return (int64_t)u;
    }
}

/* Expected a @ b: the output shape by numpy's rules and every element as a
 * plain sum over k. */
static void ref_matmul(const hd_tensor *a, const hd_tensor *b, ref_out *r) {
    int na = a->ndim, nb = b->ndim;
    int64_t m = na == 1 ? 1 : a->shape[na - 2], k = a->shape[na - 1];
    int64_t n = nb == 1 ? 1 : b->shape[nb - 1];
    int tab = na > 2 ? na - 2 : 0, tbb = nb > 2 ? nb - 2 : 0, nbd = tab > tbb ? tab : tbb;
    int64_t bshape[HD_MAX_DIMS], nbatch = 1;
    for (int d = 0; d < nbd; d++) {
        int64_t da = d < nbd - tab ? 1 : a->shape[d - (nbd - tab)];
        int64_t db = d < nbd - tbb ? 1 : b->shape[d - (nbd - tbb)];
        bshape[d] = da == 1 ? db : da;
        nbatch *= bshape[d];
    }
    r->ndim = 0;
    for (int d = 0; d < nbd; d++) r->shape[r->ndim++] = bshape[d];
    if (na > 1) r->shape[r->ndim++] = m;
    if (nb > 1) r->shape[r->ndim++] = n;
    r->numel = nbatch * m * n;
    r->f = calloc((size_t)r->numel + 1, sizeof(double));
    r->mag = calloc((size_t)r->numel + 1, sizeof(double));
    r->i = calloc((size_t)r->numel + 1, sizeof(int64_t));
    int isint = !hd_dtype_is_float(a->dtype);
    int64_t bidx[HD_MAX_DIMS];
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t rem = bi;
        for (int d = nbd - 1; d >= 0; d--) {
            bidx[d] = rem % bshape[d];
            rem /= bshape[d];
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, mag = 0;
                uint64_t u = 0;
                for (int64_t q = 0; q < k; q++) {
                    int64_t fa = ref_flat(a, 1, bidx, nbd, i, q);
                    int64_t fb = ref_flat(b, 0, bidx, nbd, q, j);
                    if (isint) {
                        u +=
                            (uint64_t)hd_tensor_get_i64(a, fa) * (uint64_t)hd_tensor_get_i64(b, fb);
                    } else {
                        double t = hd_tensor_get(a, fa) * hd_tensor_get(b, fb);
                        s += t;
                        mag += fabs(t);
                    }
                }
                int64_t o = (bi * m + i) * n + j;
                r->f[o] = s;
                r->mag[o] = mag;
                r->i[o] = wrap_to(a->dtype, u);
            }
    }
}

static void ref_free(ref_out *r) {
    free(r->f);
    free(r->mag);
    free(r->i);
}

static double tol_for(hd_dtype dt) {
    switch (dt) {
    case HD_F16: return 2e-3;
    case HD_BF16: return 1.6e-2;
    case HD_F32: return 1e-5;
    default: return 1e-12;
    }
}

/* a @ b against the reference; returns 1 if shape and values match. */
static int check_mm(hd_ctx *ctx, hd_tensor *a, hd_tensor *b, const char *what) {
    hd_tensor *res = NULL;
    if (hd_op_binary(ctx, HD_OP_MATMUL, a, b, &res) != HD_OK) {
        fprintf(stderr, "matmul %s %s: %s\n", hd_dtype_name(a->dtype), what, hd_error_message(ctx));
        return 0;
    }
    ref_out r;
    ref_matmul(a, b, &r);
    int ok = res->ndim == r.ndim && res->numel == r.numel && res->dtype == a->dtype;
    for (int d = 0; ok && d < r.ndim; d++) ok = res->shape[d] == r.shape[d];
    if (!ok) fprintf(stderr, "matmul %s %s: wrong result shape\n", hd_dtype_name(a->dtype), what);
    double tol = tol_for(a->dtype);
    for (int64_t o = 0; ok && o < r.numel; o++) {
        if (hd_dtype_is_float(a->dtype)) {
            double got = hd_tensor_get(res, o);
            if (!hd_test_close(got, r.f[o], tol, tol * (1 + r.mag[o]))) {
                fprintf(stderr, "matmul %s %s: element %lld is %.9g, want %.9g\n",
                        hd_dtype_name(a->dtype), what, (long long)o, got, r.f[o]);
                ok = 0;
            }
        } else if (hd_tensor_get_i64(res, o) != r.i[o]) {
            fprintf(stderr, "matmul %s %s: element %lld is %lld, want %lld\n",
                    hd_dtype_name(a->dtype), what, (long long)o,
                    (long long)hd_tensor_get_i64(res, o), (long long)r.i[o]);
            ok = 0;
        }
    }
    ref_free(&r);
    hd_tensor_unref(res);
    return ok;
}

/* ---- the shape x dtype x layout sweep ---- */

typedef struct {
    int na;
    int64_t a[4];
    int nb;
    int64_t b[4];
} mm_case;

static const mm_case cases[] = {
    {1, {3}, 1, {3}},                   /* dot: 0-d result */
    {1, {3}, 2, {3, 4}},                /* vector @ matrix */
    {2, {4, 3}, 1, {3}},                /* matrix @ vector */
    {2, {3, 4}, 2, {4, 5}},             /* */
    {2, {1, 1}, 2, {1, 1}},             /* */
    {2, {17, 65}, 2, {65, 3}},          /* odd sizes */
    {2, {65, 17}, 2, {17, 65}},         /* */
    {2, {1, 17}, 2, {17, 1}},           /* */
    {1, {65}, 1, {65}},                 /* */
    {3, {2, 3, 4}, 3, {2, 4, 5}},       /* batched */
    {3, {2, 3, 4}, 2, {4, 5}},          /* b broadcast over batches */
    {2, {3, 4}, 3, {2, 4, 5}},          /* a broadcast over batches */
    {4, {2, 1, 3, 4}, 3, {5, 4, 2}},    /* both broadcast: [2, 5, 3, 2] */
    {3, {2, 3, 4}, 1, {4}},             /* batched matrix @ vector */
    {1, {4}, 3, {2, 4, 3}},             /* vector @ batched matrix */
    {3, {3, 1, 65}, 3, {1, 65, 17}},    /* rows of 1, batch broadcast on both */
    {4, {2, 3, 5, 1}, 4, {2, 3, 1, 4}}, /* K == 1: outer products */
};

static void test_sweep(hd_ctx *ctx) {
    int bad = 0, runs = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int di = 0; di < NDT; di++)
            for (int la = 0; la < LAY_COUNT; la++)
                for (int lb = 0; lb < LAY_COUNT; lb++) {
                    const mm_case *mc = &cases[c];
                    hd_tensor *a = make_layout(ctx, mm_dtypes[di], mc->a, mc->na, la);
                    hd_tensor *b = make_layout(ctx, mm_dtypes[di], mc->b, mc->nb, lb);
                    char what[96];
                    snprintf(what, sizeof what, "case %zu, a %s, b %s", c, lay_names[la],
                             lay_names[lb]);
                    runs++;
                    if (!a || !b || !check_mm(ctx, a, b, what)) bad++;
                    hd_tensor_unref(a);
                    hd_tensor_unref(b);
                }
    CHECK_MSG(bad == 0, "%d of %d matmul cases wrong", bad, runs);
}

/* ---- K == 0, empty outputs, wraparound ---- */

static void test_edges(hd_ctx *ctx) {
    for (int di = 0; di < NDT; di++) {
        int64_t sa[3] = {2, 3, 0}, sb[2] = {0, 4};
        hd_tensor *a = hd_tensor_new(ctx, mm_dtypes[di], sa, 3);
        hd_tensor *b = hd_tensor_new(ctx, mm_dtypes[di], sb, 2), *r = NULL;
        CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_OK);
        if (r) {
            CHECK(r->ndim == 3 && r->shape[0] == 2 && r->shape[1] == 3 && r->shape[2] == 4);
            int zeros = 1;
            for (int64_t i = 0; i < r->numel; i++) zeros &= hd_tensor_get(r, i) == 0;
            CHECK(zeros);
        }
        hd_tensor_unref(r);
        hd_tensor_unref(a);
        hd_tensor_unref(b);
        int64_t e[2] = {0, 3}, f[2] = {3, 4};
        a = hd_tensor_new(ctx, mm_dtypes[di], e, 2);
        b = hd_tensor_new(ctx, mm_dtypes[di], f, 2);
        CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_OK && r->numel == 0 &&
              r->shape[0] == 0 && r->shape[1] == 4);
        hd_tensor_unref(r);
        hd_tensor_unref(a);
        hd_tensor_unref(b);
    }
    /* 1-D of length 0: a 0-d zero */
    int64_t z = 0;
    hd_tensor *a = hd_tensor_new(ctx, HD_F32, &z, 1), *r = NULL;
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, a, &r) == HD_OK && r->ndim == 0 &&
          hd_tensor_get(r, 0) == 0);
    hd_tensor_unref(r);
    hd_tensor_unref(a);
    /* integer overflow wraps like the output type */
    int64_t two = 2;
    int32_t i32a[2] = {46341, 1}, i32b[2] = {46341, 0};
    a = hd_tensor_from_data(ctx, HD_I32, &two, 1, i32a);
    hd_tensor *b = hd_tensor_from_data(ctx, HD_I32, &two, 1, i32b);
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_OK &&
          hd_tensor_get_i64(r, 0) == (int32_t)(uint32_t)(46341ull * 46341ull));
    hd_tensor_unref(r);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    int64_t i64a[2] = {INT64_C(1) << 62, INT64_C(1) << 62}, i64b[2] = {2, 2};
    a = hd_tensor_from_data(ctx, HD_I64, &two, 1, i64a);
    b = hd_tensor_from_data(ctx, HD_I64, &two, 1, i64b);
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_OK && hd_tensor_get_i64(r, 0) == 0);
    hd_tensor_unref(r);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    uint8_t u8a[2] = {200, 100}, u8b[2] = {2, 1};
    a = hd_tensor_from_data(ctx, HD_U8, &two, 1, u8a);
    b = hd_tensor_from_data(ctx, HD_U8, &two, 1, u8b);
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_OK && hd_tensor_get_i64(r, 0) == 244);
    hd_tensor_unref(r);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    /* exact small integers in f32: [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] */
    float x[4] = {1, 2, 3, 4}, y[4] = {5, 6, 7, 8};
    int64_t s2[2] = {2, 2};
    a = hd_tensor_from_data(ctx, HD_F32, s2, 2, x);
    b = hd_tensor_from_data(ctx, HD_F32, s2, 2, y);
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_OK);
    if (r)
        CHECK(hd_tensor_get(r, 0) == 19 && hd_tensor_get(r, 1) == 22 && hd_tensor_get(r, 2) == 43 &&
              hd_tensor_get(r, 3) == 50);
    hd_tensor_unref(r);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
}

/* ---- threaded paths: big gemms, many small batched gemms, integer loops ---- */

/* The split eager matmul and the llvm compiler's gemm steps share: the
 * longer side of C, none for small or narrow products or one thread. */
static void test_split_rule(void) {
    CHECK(cpu_blas_split_of(2, 4096, 256, 512) == CPU_BLAS_SPLIT_ROWS);
    CHECK(cpu_blas_split_of(2, 4096, 16, 512) == CPU_BLAS_SPLIT_ROWS); /* narrow C: rows */
    CHECK(cpu_blas_split_of(2, 256, 4096, 512) == CPU_BLAS_SPLIT_COLS);
    CHECK(cpu_blas_split_of(2, 512, 512, 512) == CPU_BLAS_SPLIT_COLS);
    CHECK(cpu_blas_split_of(1, 4096, 256, 512) == CPU_BLAS_SPLIT_NONE);
    CHECK(cpu_blas_split_of(2, 16, 16, 1 << 20) == CPU_BLAS_SPLIT_NONE);
    CHECK(cpu_blas_split_of(2, 100, 100, 100) == CPU_BLAS_SPLIT_NONE); /* under CPU_BLAS_PAR */
    int64_t end = 0;
    for (int t = 0; t < 3; t++) { /* parts tile [0, len), on multiples of 16 */
        int64_t lo = cpu_blas_part(1000, t, 3), hi = cpu_blas_part(1000, t + 1, 3);
        CHECK(lo == end && lo % 16 == 0 && hi > lo);
        end = hi;
    }
    CHECK(end == 1000);
}

static void test_threads(hd_ctx *ctx) {
    int save = ctx->nthreads, bad = 0;
    for (int nt = 1; nt <= 2; nt++) {
        ctx->nthreads = nt;
        int64_t sa[2] = {96, 200}, sb[2] = {200, 80};
        int64_t ba[3] = {256, 16, 16}, bb[2] = {16, 16};
        int64_t ia[3] = {4, 64, 64};
        static const hd_dtype fdts[] = {HD_F32, HD_F64};
        for (int di = 0; di < 2; di++) {
            hd_tensor *a = make_layout(ctx, fdts[di], sa, 2, LAY_TRANSPOSED);
            hd_tensor *b = make_layout(ctx, fdts[di], sb, 2, LAY_CONTIG);
            bad += !check_mm(ctx, a, b, "big");
            hd_tensor_unref(a);
            hd_tensor_unref(b);
            /* split into column blocks (n > m; 1000 is no multiple of 16),
             * each layout of a and b */
            int64_t wa2[2] = {40, 300}, wb2[2] = {300, 1000};
            for (int l = 0; l < 4; l++) {
                a = make_layout(ctx, fdts[di], wa2, 2, l & 1 ? LAY_TRANSPOSED : LAY_CONTIG);
                b = make_layout(ctx, fdts[di], wb2, 2, l & 2 ? LAY_TRANSPOSED : LAY_CONTIG);
                bad += !check_mm(ctx, a, b, "big, column blocks");
                hd_tensor_unref(a);
                hd_tensor_unref(b);
            }
            a = make_layout(ctx, fdts[di], ba, 3, LAY_CONTIG);
            b = make_layout(ctx, fdts[di], bb, 2, LAY_TRANSPOSED);
            bad += !check_mm(ctx, a, b, "many small");
            hd_tensor_unref(b);
            b = make_layout(ctx, fdts[di], bb, 2, LAY_SLICED); /* copied once */
            bad += !check_mm(ctx, a, b, "many small, copied b");
            hd_tensor_unref(a);
            hd_tensor_unref(b);
        }
        hd_tensor *a = make_layout(ctx, HD_I32, ia, 3, LAY_CONTIG);
        hd_tensor *b = make_layout(ctx, HD_I32, ia, 3, LAY_TRANSPOSED);
        bad += !check_mm(ctx, a, b, "integer loops");
        hd_tensor_unref(a);
        hd_tensor_unref(b);
        /* wide outputs: more than one block of columns in the plain loops */
        int64_t wa[2] = {5, 7}, wb[2] = {7, 513};
        static const hd_dtype wdts[] = {HD_I64, HD_I8, HD_F32, HD_F64};
        for (int di = 0; di < 4; di++)
            for (int lb = 0; lb < 2; lb++) {
                a = make_layout(ctx, wdts[di], wa, 2, LAY_CONTIG);
                b = make_layout(ctx, wdts[di], wb, 2, lb);
                bad += !check_mm(ctx, a, b, "wide");
                hd_tensor_unref(a);
                hd_tensor_unref(b);
            }
        a = make_layout(ctx, HD_BF16, ia, 3, LAY_SLICED);
        b = make_layout(ctx, HD_BF16, ia, 3, LAY_TRANSPOSED);
        bad += !check_mm(ctx, a, b, "bf16 batches");
        hd_tensor_unref(a);
        hd_tensor_unref(b);
    }
    ctx->nthreads = save;
    CHECK_MSG(bad == 0, "%d threaded cases wrong", bad);
}

/* ---- errors ---- */

static void test_errors(hd_ctx *ctx) {
    int64_t s1[2] = {2, 3}, s2[2] = {4, 5}, s3[3] = {2, 3, 4}, s4[3] = {3, 4, 5};
    hd_tensor *a = hd_tensor_zeros(ctx, HD_F32, s1, 2), *b = hd_tensor_zeros(ctx, HD_F32, s2, 2);
    hd_tensor *r = NULL;
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_ERR_RUNTIME && !r);
    CHECK_MSG(strstr(hd_error_message(ctx), "matmul shapes [2, 3] and [4, 5] do not agree") != NULL,
              "%s", hd_error_message(ctx));
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    a = hd_tensor_zeros(ctx, HD_F32, s3, 3);
    b = hd_tensor_zeros(ctx, HD_F32, s4, 3);
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_ERR_RUNTIME && !r);
    CHECK(strstr(hd_error_message(ctx), "batch dims of [2, 3, 4] and [3, 4, 5] do not broadcast"));
    hd_tensor_unref(b);
    b = hd_tensor_scalar(ctx, HD_F32, 2);
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_ERR_RUNTIME && !r);
    CHECK(strstr(hd_error_message(ctx), "at least 1 dim") != NULL);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    int64_t v3 = 3;
    a = hd_tensor_zeros(ctx, HD_BOOL, &v3, 1);
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, a, &r) == HD_ERR_RUNTIME && !r);
    CHECK(strstr(hd_error_message(ctx), "matmul is not defined for bool") != NULL);
    hd_tensor_unref(a);
    a = hd_tensor_zeros(ctx, HD_F32, &v3, 1);
    b = hd_tensor_zeros(ctx, HD_F32, s1, 2); /* [3] @ [2, 3] */
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_ERR_RUNTIME && !r);
    CHECK(strstr(hd_error_message(ctx), "matmul shapes [3] and [2, 3] do not agree") != NULL);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
}

/* Failing each allocation in turn (output, operand copies, f32 buffers)
 * gives an out-of-memory error, never a crash or a leak. */
static void test_alloc_failures(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    static const hd_dtype dts[] = {HD_F32, HD_F16};
    int64_t sa[3] = {2, 3, 4}, sb[2] = {4, 5};
    for (int di = 0; di < 2; di++) {
        hd_tensor *a = make_layout(&ctx, dts[di], sa, 3, LAY_SLICED);
        hd_tensor *b = make_layout(&ctx, dts[di], sb, 2, LAY_EXPANDED);
        size_t base = ctx.mem_used;
        int fails = 0, oks = 0;
        for (long k = 0; k < 8; k++) {
            ctx.fail_countdown = k;
            hd_tensor *r = NULL;
            hd_status st = hd_op_binary(&ctx, HD_OP_MATMUL, a, b, &r);
            CHECK((st == HD_OK) == (r != NULL));
            if (st) CHECK(st == HD_ERR_MEMORY);
            fails += st != HD_OK;
            oks += st == HD_OK;
            hd_tensor_unref(r);
            ctx.fail_countdown = -1;
            CHECK(ctx.mem_used == base);
        }
        CHECK(fails >= 3 && oks > 0); /* shell, storage, data, copies or buffer */
        hd_tensor_unref(a);
        hd_tensor_unref(b);
    }
    CHECK(ctx.mem_used == 0);
}

/* ---- inputs the plan casts first ---- */

static int cast_works(hd_ctx *ctx) {
    hd_tensor *x = hd_tensor_scalar(ctx, HD_F32, 3), *y = NULL;
    int ok = hd_op_cast(ctx, x, HD_F64, &y) == HD_OK && hd_tensor_get(y, 0) == 3;
    hd_tensor_unref(y);
    hd_tensor_unref(x);
    hd_error_clear(ctx);
    return ok;
}

/* Mixed dtypes promote before the kernel: f32 @ f64 is f64, i32 @ f32 is f32.
 * */
static void test_cast_inputs(hd_ctx *ctx) {
    if (!cast_works(ctx)) {
        CHECK(!"the cast kernel works");
        return;
    }
    int64_t sa[2] = {3, 4}, sb[2] = {4, 2};
    float fa[12], fb[8];
    double db[8];
    int32_t ia[12];
    for (int i = 0; i < 12; i++) fa[i] = (float)(i % 5) - 2, ia[i] = i % 7 - 3;
    for (int i = 0; i < 8; i++) fb[i] = (float)(i % 3) - 1, db[i] = fb[i];
    hd_tensor *a = hd_tensor_from_data(ctx, HD_F32, sa, 2, fa);
    hd_tensor *b = hd_tensor_from_data(ctx, HD_F64, sb, 2, db);
    hd_tensor *ai = hd_tensor_from_data(ctx, HD_I32, sa, 2, ia);
    hd_tensor *bf = hd_tensor_from_data(ctx, HD_F32, sb, 2, fb), *r = NULL;
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, a, b, &r) == HD_OK && r->dtype == HD_F64);
    for (int i = 0; r && i < 3; i++)
        for (int j = 0; j < 2; j++) {
            double s = 0;
            for (int k = 0; k < 4; k++) s += fa[i * 4 + k] * db[k * 2 + j];
            CHECK(hd_tensor_get(r, i * 2 + j) == s);
        }
    hd_tensor_unref(r);
    CHECK(hd_op_binary(ctx, HD_OP_MATMUL, ai, bf, &r) == HD_OK && r->dtype == HD_F32);
    for (int i = 0; r && i < 3; i++)
        for (int j = 0; j < 2; j++) {
            double s = 0;
            for (int k = 0; k < 4; k++) s += ia[i * 4 + k] * fb[k * 2 + j];
            CHECK(hd_tensor_get(r, i * 2 + j) == s);
        }
    hd_tensor_unref(r);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    hd_tensor_unref(ai);
    hd_tensor_unref(bf);
}

/* OpenBLAS falls back to its SSE3 (Prescott) kernels on a CPU it does not
 * know; where the CPU runs a better set and the user chose none, the
 * kernels in use must not be the fallback (an Intel Xeon of model 207
 * multiplied 5x slower). Run the products above first: BLAS is open. */
static void test_blas_core(void) {
    if (!cpu_blas_ready() || getenv("OPENBLAS_CORETYPE")) return;
    const char *want = cpu_blas_core_for_cpu(), *core = cpu_blas_core();
    printf("OpenBLAS kernels: %s (the CPU runs %s)\n", core, want ? want : "none better");
    CHECK_MSG(!want || strcmp(core, "Prescott") != 0,
              "OpenBLAS runs its Prescott kernels on a CPU that runs its %s ones", want);
}

/* ---- which gemm: oneDNN's sgemm where it is here, else OpenBLAS ---- */

/* A product's bits must not depend on how it is split over threads where
 * the library allows it (gemm_split_exact): each block of a split product
 * runs its own gemm, and oneDNN sums k in another order for 128 rows than
 * for 16 when k is large (cpu_blas.c gives it k in slices of 512). Rows of
 * 1040 x 1024 split over 16 threads are blocks of 64 and 80; columns of
 * 128 x 2048, of 128. Every thread count against one thread, bit for bit
 * (elsewhere to rounding), and sampled elements against a double loop, C
 * filled with NaN first. */
typedef struct gemm_shape {
    int ta, tb;
    int64_t m, n, k;
} gemm_shape;

static int gemm_sampled_ok(const gemm_shape *s, const float *a, const float *b, const float *c) {
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    for (int t = 0; t < 64; t++) {
        int64_t i = (t * 7919) % s->m, j = (t * 104729) % s->n;
        double want = 0, mag = 0;
        for (int64_t l = 0; l < s->k; l++) {
            double x = s->ta ? a[l * lda + i] : a[i * lda + l];
            double y = s->tb ? b[j * ldb + l] : b[l * ldb + j];
            want += x * y, mag += fabs(x * y);
        }
        if (!(fabs(c[i * s->n + j] - want) <= 1e-5 * mag + 1e-6)) return 0;
    }
    for (int64_t i = 0; i < s->m * s->n; i++)
        if (isnan(c[i])) return 0;
    return 1;
}

/* Where a split product gives the whole product's bits: OpenBLAS's
 * AVX-512 kernels (SkylakeX, Cooperlake), and oneDNN beside them. Its Zen
 * kernels (and, not measured, its Haswell ones) sum each element in an
 * order that depends on the product's shape (a 64 x 64 x 64 product run as two of 32 rows
 * differs from row 24 on; 200 x 300 x 70 at any split), so there the
 * thread counts agree to rounding only (docs/runtime.md). */
static int gemm_split_exact(void) {
    const char *core = cpu_blas_core();
    return !strcmp(core, "SkylakeX") || !strcmp(core, "Cooperlake");
}

/* cn against c1 to f32 rounding: operands in [-1/2, 1/2], so every term
 * of a sum of k is at most 1/4. */
static int gemm_close(const float *c1, const float *cn, size_t nc, int64_t k) {
    double tol = 1e-5 * 0.25 * (double)k;
    for (size_t i = 0; i < nc; i++)
        if (!(fabs((double)cn[i] - (double)c1[i]) <= tol)) return 0;
    return 1;
}

static int gemm_threads_same(const gemm_shape *s) {
    size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->k * s->n), nc = (size_t)(s->m * s->n);
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
    float *c1 = malloc(nc * sizeof *c1), *cn = malloc(nc * sizeof *cn);
    int ok = a && b && c1 && cn;
    for (size_t i = 0; ok && i < na; i++) a[i] = rng_half();
    for (size_t i = 0; ok && i < nb; i++) b[i] = rng_half();
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    /* C starts as NaN: beta 0 must not read it (out-of-use memory) */
    for (size_t i = 0; ok && i < nc; i++) c1[i] = NAN;
    if (ok) {
        cpu_blas_gemm(1, 0, s->ta, s->tb, s->m, s->n, s->k, 1.0, a, lda, b, ldb, 0.0, c1, s->n,
                      NULL);
        ok = gemm_sampled_ok(s, a, b, c1);
    }
    static const int nts[] = {2, 3, 16};
    for (int t = 0; ok && t < 3; t++) {
        for (size_t i = 0; i < nc; i++) cn[i] = NAN;
        cpu_blas_gemm(nts[t], 0, s->ta, s->tb, s->m, s->n, s->k, 1.0, a, lda, b, ldb, 0.0, cn, s->n,
                      NULL);
        ok = gemm_split_exact() ? memcmp(c1, cn, nc * sizeof *c1) == 0
                                : gemm_close(c1, cn, nc, s->k);
        if (!ok)
            printf("%lld x %lld x %lld (%c%c): %d threads differ from 1\n", (long long)s->m,
                   (long long)s->n, (long long)s->k, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', nts[t]);
    }
    free(a), free(b), free(c1), free(cn);
    return ok;
}

static void test_gemm_choice(void) {
    if (!cpu_blas_ready()) return;
    const char *name = cpu_blas_gemm_name(), *want = getenv("HODU_GEMM");
    printf("gemm: %s, thread counts give %s\n", name,
           gemm_split_exact() ? "the same bits" : "the same values to rounding");
    if (want && strcmp(want, "openblas") == 0) CHECK(strcmp(name, "openblas") == 0);
    static const gemm_shape shapes[] = {
        {0, 0, 1040, 1024, 2048}, {0, 0, 128, 2048, 2048}, {1, 1, 1040, 1024, 1300},
        {0, 1, 4096, 256, 512},   {1, 0, 256, 512, 64},    {0, 0, 64, 48, 170},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        bad += !gemm_threads_same(&shapes[i]);
    CHECK_MSG(bad == 0, "%d gemm shapes differ between thread counts or from the reference", bad);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_sweep(&ctx);
    test_edges(&ctx);
    test_split_rule();
    test_threads(&ctx);
    test_errors(&ctx);
    test_alloc_failures();
    test_cast_inputs(&ctx);
    test_blas_core();
    test_gemm_choice();
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
