/* concat, index_select, one_hot, assign and argsort in every dtype, over
 * non-contiguous views, against plain reference loops. */
#include "hd_test.h"
#include "hd_backend.h"

static const hd_dtype all_dtypes[] = {HD_F16, HD_BF16, HD_F32, HD_F64, HD_I8,
                                      HD_U8,  HD_I32,  HD_I64, HD_BOOL};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* ---- helpers: tensors with known values, views, reference reads ---- */

/* A value every dtype holds exactly, different for neighbouring k. */
static double val(hd_dtype dt, int64_t k) {
    return dt == HD_BOOL ? (k % 3 == 1) : (double)(k % 97);
}

/* Contiguous tensor with element i = val(dt, i + seed). */
static hd_tensor *mk(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd, int64_t seed) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    for (int64_t i = 0; t && i < t->numel; i++)
        hd_dtype_store(dt, t->storage->data, i, val(dt, i + seed));
    return t;
}

static hd_tensor *mk_i64(hd_ctx *ctx, const int64_t *shape, int nd, const int64_t *v) {
    return hd_tensor_from_data(ctx, HD_I64, shape, nd, v);
}

static hd_tensor *permute(hd_ctx *ctx, hd_tensor *t, const int *order) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = t->ndim;
    for (int i = 0; i < t->ndim; i++) at.shape[i] = order[i];
    hd_tensor *out = NULL;
    CHECK(hd_op_run(ctx, HD_OP_PERMUTE, &t, 1, &at, &out) == HD_OK);
    return out;
}

/* t[..., start : start + len*step : step, ...] on dim d. */
static hd_tensor *slice(hd_ctx *ctx, hd_tensor *t, int d, int64_t start, int64_t step,
                        int64_t len) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    for (int i = 0; i < t->ndim; i++) {
        at.step[i] = 1;
        at.len[i] = t->shape[i];
    }
    at.start[d] = start;
    at.step[d] = step;
    at.len[d] = len;
    hd_tensor *out = NULL;
    CHECK(hd_op_run(ctx, HD_OP_SLICE, &t, 1, &at, &out) == HD_OK);
    return out;
}

static hd_tensor *expand(hd_ctx *ctx, hd_tensor *t, const int64_t *shape, int nd) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = nd;
    memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
    hd_tensor *out = NULL;
    CHECK(hd_op_run(ctx, HD_OP_EXPAND, &t, 1, &at, &out) == HD_OK);
    return out;
}

static void unravel(int64_t i, const int64_t *shape, int nd, int64_t *ix) {
    for (int d = nd - 1; d >= 0; d--) {
        ix[d] = i % shape[d];
        i /= shape[d];
    }
}

/* t[ix] read through t's own offset and strides. */
static double at(const hd_tensor *t, const int64_t *ix) {
    int64_t off = t->offset;
    for (int d = 0; d < t->ndim; d++) off += ix[d] * t->strides[d];
    return hd_dtype_load(t->dtype, t->storage->data, off);
}

static void unref_all(hd_tensor **t, int n) {
    for (int i = 0; i < n; i++) hd_tensor_unref(t[i]);
}

/* ---- concat ---- */

/* Compare out with the inputs placed one after another along axis. */
static int concat_errors(const hd_tensor *out, hd_tensor *const *in, int nin, int axis) {
    int bad = 0;
    int64_t ix[HD_MAX_DIMS];
    HD_UNUSED(nin);
    for (int64_t i = 0; i < out->numel; i++) {
        unravel(i, out->shape, out->ndim, ix);
        double got = at(out, ix);
        int k = 0;
        while (ix[axis] >= in[k]->shape[axis]) ix[axis] -= in[k++]->shape[axis];
        if (got != at(in[k], ix)) bad++;
    }
    return bad;
}

static void check_concat(hd_ctx *ctx, hd_tensor **in, int nin, int64_t axis) {
    hd_attrs a;
    memset(&a, 0, sizeof a);
    a.ints[0] = axis;
    hd_tensor *out = NULL;
    hd_status st = hd_op_run(ctx, HD_OP_CONCAT, in, nin, &a, &out);
    CHECK_MSG(st == HD_OK, "concat axis %lld: %s", (long long)axis, hd_error_message(ctx));
    if (!out) return;
    int ax = (int)(axis < 0 ? axis + in[0]->ndim : axis);
    int64_t total = 0;
    for (int k = 0; k < nin; k++) total += in[k]->shape[ax];
    CHECK(out->ndim == in[0]->ndim && out->shape[ax] == total && out->dtype == in[0]->dtype);
    int bad = concat_errors(out, in, nin, ax);
    CHECK_MSG(bad == 0, "concat %s axis %lld: %d wrong", hd_dtype_name(in[0]->dtype),
              (long long)axis, bad);
    hd_tensor_unref(out);
}

static void test_concat(hd_ctx *ctx) {
    for (int d = 0; d < NDT; d++) {
        hd_dtype dt = all_dtypes[d];
        /* [2, 3, 4] contiguous; a permuted [4, 3, 2] base; a stepped
         * slice; an expanded [1, 3, 4] */
        int64_t s0[3] = {2, 3, 4}, s1[3] = {4, 3, 2}, s2[3] = {2, 3, 9}, s3[3] = {1, 3, 4};
        int rev[3] = {2, 1, 0};
        hd_tensor *a = mk(ctx, dt, s0, 3, 0), *pb = mk(ctx, dt, s1, 3, 5);
        hd_tensor *b = permute(ctx, pb, rev);
        hd_tensor *sc = mk(ctx, dt, s2, 3, 11);
        hd_tensor *c = slice(ctx, sc, 2, 1, 2, 4);
        hd_tensor *e1 = mk(ctx, dt, s3, 3, 40);
        int64_t es[3] = {2, 3, 4};
        hd_tensor *e = expand(ctx, e1, es, 3);
        hd_tensor *in[4] = {a, b, c, e};
        for (int64_t axis = -3; axis < 3; axis++) check_concat(ctx, in, 4, axis);
        /* one input, and an empty one along the axis */
        check_concat(ctx, in + 1, 1, 1);
        int64_t sz[3] = {2, 0, 4};
        hd_tensor *z = mk(ctx, dt, sz, 3, 0);
        hd_tensor *in2[3] = {z, b, z};
        check_concat(ctx, in2, 3, 1);
        hd_tensor *all[8] = {a, pb, b, sc, c, e1, e, z};
        unref_all(all, 8);
    }
}

static void test_concat_large_and_errors(hd_ctx *ctx) {
    /* big enough for the threaded path: [300, 200] and a transposed [300, 250] */
    int64_t s0[2] = {300, 200}, s1[2] = {250, 300};
    int tr[2] = {1, 0};
    hd_tensor *a = mk(ctx, HD_F32, s0, 2, 0), *bb = mk(ctx, HD_F32, s1, 2, 3);
    hd_tensor *b = permute(ctx, bb, tr);
    hd_tensor *in[2] = {a, b};
    check_concat(ctx, in, 2, -1);
    hd_tensor *in2[2] = {b, b};
    check_concat(ctx, in2, 2, 0);
    /* few long runs: each run is split across threads */
    int keep = ctx->nthreads;
    ctx->nthreads = 4;
    int64_t s40[2] = {1, 40000};
    hd_tensor *r0 = mk(ctx, HD_F16, s40, 2, 0), *r1 = mk(ctx, HD_F16, s40, 2, 1);
    hd_tensor *rr[2] = {r0, r1};
    check_concat(ctx, rr, 2, 0);
    check_concat(ctx, rr, 2, 1);
    ctx->nthreads = keep;
    hd_tensor_unref(r0);
    hd_tensor_unref(r1);
    /* mismatched shapes, bad axis, 0-d inputs */
    int64_t s2[2] = {300, 7}, s3[2] = {5, 4};
    hd_tensor *c = mk(ctx, HD_F32, s2, 2, 0), *d = mk(ctx, HD_F32, s3, 2, 0);
    hd_tensor *bad1[2] = {a, d}, *out = NULL;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = 0;
    CHECK(hd_op_run(ctx, HD_OP_CONCAT, bad1, 2, &at, &out) == HD_ERR_RUNTIME && !out);
    CHECK(strstr(hd_error_message(ctx), "[300, 200] and [5, 4]") != NULL);
    hd_tensor *ok[2] = {a, c};
    at.ints[0] = 2;
    CHECK(hd_op_run(ctx, HD_OP_CONCAT, ok, 2, &at, &out) == HD_ERR_RUNTIME && !out);
    CHECK(strstr(hd_error_message(ctx), "axis 2") != NULL);
    at.ints[0] = -1;
    CHECK(hd_op_run(ctx, HD_OP_CONCAT, ok, 2, &at, &out) == HD_OK && out);
    if (out)
        CHECK(out->shape[0] == 300 && out->shape[1] == 207 && concat_errors(out, ok, 2, 1) == 0);
    hd_tensor_unref(out);
    out = NULL;
    hd_tensor *s = hd_tensor_scalar(ctx, HD_F32, 1);
    hd_tensor *sc[2] = {s, s};
    at.ints[0] = 0;
    CHECK(hd_op_run(ctx, HD_OP_CONCAT, sc, 2, &at, &out) == HD_ERR_RUNTIME && !out);
    hd_tensor *all[6] = {a, bb, b, c, d, s};
    unref_all(all, 6);
}

/* ---- index_select ---- */

/* out = x.index_select(axis, idx) by the definition:
 * out[o..., j..., i...] = x[o..., idx[j...], i...] with negative idx from the end. */
static int index_select_errors(const hd_tensor *out, const hd_tensor *x, const hd_tensor *idx,
                               int axis) {
    int bad = 0;
    int64_t ox[HD_MAX_DIMS], xi[HD_MAX_DIMS], ii[HD_MAX_DIMS];
    for (int64_t i = 0; i < out->numel; i++) {
        unravel(i, out->shape, out->ndim, ox);
        for (int d = 0; d < axis; d++) xi[d] = ox[d];
        for (int d = 0; d < idx->ndim; d++) ii[d] = ox[axis + d];
        for (int d = axis + 1; d < x->ndim; d++) xi[d] = ox[d - 1 + idx->ndim];
        int64_t v = (int64_t)at(idx, ii);
        xi[axis] = v < 0 ? v + x->shape[axis] : v;
        if (at(out, ox) != at(x, xi)) bad++;
    }
    return bad;
}

static hd_status run_index_select(hd_ctx *ctx, hd_tensor *x, hd_tensor *idx, int64_t axis,
                                  hd_tensor **out) {
    hd_attrs a;
    memset(&a, 0, sizeof a);
    a.ints[0] = axis;
    hd_tensor *in[2] = {x, idx};
    return hd_op_run(ctx, HD_OP_INDEX_SELECT, in, 2, &a, out);
}

static void check_index_select(hd_ctx *ctx, hd_tensor *x, hd_tensor *idx, int64_t axis) {
    hd_tensor *out = NULL;
    hd_status st = run_index_select(ctx, x, idx, axis, &out);
    CHECK_MSG(st == HD_OK, "index_select axis %lld: %s", (long long)axis, hd_error_message(ctx));
    if (!out) return;
    int ax = (int)(axis < 0 ? axis + x->ndim : axis);
    CHECK(out->ndim == x->ndim - 1 + idx->ndim && out->dtype == x->dtype);
    int bad = index_select_errors(out, x, idx, ax);
    CHECK_MSG(bad == 0, "index_select %s axis %lld: %d wrong", hd_dtype_name(x->dtype),
              (long long)axis, bad);
    hd_tensor_unref(out);
}

static void test_index_select(hd_ctx *ctx) {
    int64_t sx[3] = {4, 5, 6}, si[2] = {2, 3}, sit[2] = {3, 2};
    int64_t iv[6] = {0, 3, -1, 2, -4, 1};  /* valid for every axis (sizes 4, 5, 6) */
    int64_t ivt[6] = {1, -2, 0, 3, 2, -3}; /* read transposed */
    int rev[3] = {2, 1, 0}, tr[2] = {1, 0};
    for (int d = 0; d < NDT; d++) {
        hd_dtype dt = all_dtypes[d];
        hd_tensor *x = mk(ctx, dt, sx, 3, 1);
        int64_t sp[3] = {6, 5, 4};
        hd_tensor *xp0 = mk(ctx, dt, sp, 3, 7), *xp = permute(ctx, xp0, rev);
        hd_tensor *idx = mk_i64(ctx, si, 2, iv), *it0 = mk_i64(ctx, sit, 2, ivt);
        hd_tensor *it = permute(ctx, it0, tr);
        int64_t one = 2;
        hd_tensor *i0 = mk_i64(ctx, NULL, 0, &one); /* 0-d index drops the axis */
        for (int64_t axis = -3; axis < 3; axis++) {
            check_index_select(ctx, x, idx, axis);
            check_index_select(ctx, xp, it, axis);
            check_index_select(ctx, xp, i0, axis);
        }
        hd_tensor *all[7] = {x, xp0, xp, idx, it0, it, i0};
        unref_all(all, 7);
    }
}

static void test_index_select_large_and_errors(hd_ctx *ctx) {
    /* many slabs (embedding-like) and few long slabs */
    int64_t sv[2] = {1000, 64}, sn[1] = {2000};
    hd_tensor *emb = mk(ctx, HD_F32, sv, 2, 0);
    int64_t *iv = malloc(2000 * sizeof *iv);
    for (int i = 0; i < 2000; i++) iv[i] = (i * 7919) % 1000 - (i % 2 ? 1000 : 0);
    hd_tensor *idx = mk_i64(ctx, sn, 1, iv);
    free(iv);
    check_index_select(ctx, emb, idx, 0);
    int64_t sw[2] = {4, 40000}, two[2] = {3, -4}, s2[1] = {2};
    hd_tensor *wide = mk(ctx, HD_BF16, sw, 2, 0), *i2 = mk_i64(ctx, s2, 1, two);
    int tr[2] = {1, 0};
    hd_tensor *wt = permute(ctx, wide, tr);
    for (int nt = 1; nt <= 4; nt *= 2) {
        int keep = ctx->nthreads;
        ctx->nthreads = nt;
        check_index_select(ctx, wide, i2, 0);
        check_index_select(ctx, wt, i2, 1);
        check_index_select(ctx, emb, idx, -2);
        ctx->nthreads = keep;
    }
    /* out of range, both ends; x on a zero-size axis */
    int64_t sx[2] = {5, 3}, bad[2] = {1, 7}, neg[2] = {-6, 0};
    hd_tensor *x = mk(ctx, HD_I32, sx, 2, 0), *ib = mk_i64(ctx, s2, 1, bad);
    hd_tensor *in = mk_i64(ctx, s2, 1, neg), *out = NULL;
    CHECK(run_index_select(ctx, x, ib, 0, &out) == HD_ERR_RUNTIME && !out);
    CHECK_MSG(strstr(hd_error_message(ctx), "index 7 is out of range for axis 0 of size 5"), "%s",
              hd_error_message(ctx));
    CHECK(run_index_select(ctx, x, in, -2, &out) == HD_ERR_RUNTIME && !out);
    CHECK_MSG(strstr(hd_error_message(ctx), "index -6 is out of range for axis 0 of size 5"), "%s",
              hd_error_message(ctx));
    CHECK(run_index_select(ctx, x, ib, 1, &out) == HD_ERR_RUNTIME && !out);
    CHECK(strstr(hd_error_message(ctx), "axis 1 of size 3") != NULL);
    CHECK(run_index_select(ctx, x, ib, 2, &out) == HD_ERR_RUNTIME && !out);
    int64_t se[2] = {0, 3};
    hd_tensor *ex = mk(ctx, HD_F32, se, 2, 0);
    CHECK(run_index_select(ctx, ex, ib, 0, &out) == HD_ERR_RUNTIME && !out);
    CHECK(strstr(hd_error_message(ctx), "index 1 is out of range for axis 0 of size 0") != NULL);
    /* empty index: empty result */
    int64_t s0[1] = {0};
    hd_tensor *iz = mk_i64(ctx, s0, 1, NULL);
    CHECK(run_index_select(ctx, x, iz, 1, &out) == HD_OK && out);
    if (out) CHECK(out->ndim == 2 && out->shape[0] == 5 && out->shape[1] == 0);
    hd_tensor_unref(out);
    hd_tensor *all[10] = {emb, idx, wide, i2, wt, x, ib, in, ex, iz};
    unref_all(all, 10);
}

/* ---- one_hot ---- */

static hd_status run_one_hot(hd_ctx *ctx, hd_tensor *idx, int64_t classes, hd_tensor **out) {
    hd_attrs a;
    memset(&a, 0, sizeof a);
    a.ints[0] = classes;
    return hd_op_run(ctx, HD_OP_ONE_HOT, &idx, 1, &a, out);
}

static void test_one_hot(hd_ctx *ctx) {
    int64_t s[2] = {3, 2}, v[6] = {0, 3, 2, 2, 1, 0};
    int tr[2] = {1, 0};
    hd_tensor *i0 = mk_i64(ctx, s, 2, v), *idx = permute(ctx, i0, tr), *out = NULL;
    CHECK(run_one_hot(ctx, idx, 4, &out) == HD_OK && out);
    if (out) {
        CHECK(out->dtype == HD_I64 && out->ndim == 3 && out->shape[0] == 2 && out->shape[1] == 3 &&
              out->shape[2] == 4);
        int bad = 0;
        int64_t ix[3], ii[2];
        for (int64_t i = 0; i < out->numel; i++) {
            unravel(i, out->shape, 3, ix);
            ii[0] = ix[0], ii[1] = ix[1];
            if (at(out, ix) != (at(idx, ii) == (double)ix[2])) bad++;
        }
        CHECK(bad == 0);
        hd_tensor_unref(out);
        out = NULL;
    }
    int64_t three = 3;
    hd_tensor *z = mk_i64(ctx, NULL, 0, &three); /* 0-d -> [5] */
    CHECK(run_one_hot(ctx, z, 5, &out) == HD_OK && out && out->ndim == 1);
    for (int64_t i = 0; out && i < 5; i++) CHECK(hd_tensor_get(out, i) == (i == 3));
    hd_tensor_unref(out);
    out = NULL;
    /* errors: index == classes, negative index, no classes */
    CHECK(run_one_hot(ctx, idx, 3, &out) == HD_ERR_RUNTIME && !out);
    CHECK_MSG(strstr(hd_error_message(ctx), "index 3 is out of range for 3 classes"), "%s",
              hd_error_message(ctx));
    int64_t nv[2] = {1, -1}, s1[1] = {2};
    hd_tensor *n = mk_i64(ctx, s1, 1, nv);
    CHECK(run_one_hot(ctx, n, 3, &out) == HD_ERR_RUNTIME && !out);
    CHECK(strstr(hd_error_message(ctx), "index -1") != NULL);
    CHECK(run_one_hot(ctx, n, 0, &out) == HD_ERR_RUNTIME && !out);
    hd_tensor *all[4] = {i0, idx, z, n};
    unref_all(all, 4);
}

/* ---- assign ---- */

static hd_status run_assign(hd_ctx *ctx, hd_tensor *dst, hd_tensor *src) {
    hd_tensor *in[2] = {dst, src}, *out = NULL;
    hd_status st = hd_op_run(ctx, HD_OP_ASSIGN, in, 2, NULL, &out);
    if (!st) CHECK(out == dst);
    hd_tensor_unref(out);
    return st;
}

/* Snapshot of every element of t's storage as doubles. */
static double *storage_values(const hd_tensor *t) {
    int64_t n = (int64_t)(t->storage->nbytes / (size_t)hd_dtype_size(t->dtype));
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = hd_dtype_load(t->dtype, t->storage->data, i);
    return v;
}

/* After dst <- src: positions dst covers hold src (broadcast, read from
 * the snapshot `before` when src shares dst's storage); every other
 * element of the storage is unchanged. */
static int assign_errors(const hd_tensor *dst, const hd_tensor *src, const double *before) {
    int64_t n = (int64_t)(dst->storage->nbytes / (size_t)hd_dtype_size(dst->dtype));
    double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    int bad = 0;
    memcpy(want, before, (size_t)n * sizeof *want);
    int64_t ix[HD_MAX_DIMS], sx[HD_MAX_DIMS];
    for (int64_t i = 0; i < dst->numel; i++) {
        unravel(i, dst->shape, dst->ndim, ix);
        int lead = dst->ndim - src->ndim;
        int64_t soff = src->offset, doff = dst->offset;
        for (int d = 0; d < dst->ndim; d++) doff += ix[d] * dst->strides[d];
        for (int d = 0; d < src->ndim; d++) {
            sx[d] = src->shape[d] == 1 ? 0 : ix[d + lead];
            soff += sx[d] * src->strides[d];
        }
        double v = src->storage == dst->storage
                       ? before[soff]
                       : hd_dtype_load(src->dtype, src->storage->data, soff);
        want[doff] = v;
    }
    for (int64_t i = 0; i < n; i++)
        if (hd_dtype_load(dst->dtype, dst->storage->data, i) != want[i]) bad++;
    free(want);
    return bad;
}

static void check_assign(hd_ctx *ctx, hd_tensor *dst, hd_tensor *src, const char *what) {
    double *before = storage_values(dst);
    hd_status st = run_assign(ctx, dst, src);
    CHECK_MSG(st == HD_OK, "assign %s: %s", what, hd_error_message(ctx));
    int bad = assign_errors(dst, src, before);
    CHECK_MSG(bad == 0, "assign %s in %s: %d wrong", what, hd_dtype_name(dst->dtype), bad);
    free(before);
}

static void test_assign(hd_ctx *ctx) {
    for (int d = 0; d < NDT; d++) {
        hd_dtype dt = all_dtypes[d];
        int64_t s34[2] = {3, 4}, s4[1] = {4}, s43[2] = {4, 3}, s6[1] = {6}, s3[1] = {3};
        int tr[2] = {1, 0};
        hd_tensor *base = mk(ctx, dt, s34, 2, 0), *row = mk(ctx, dt, s4, 1, 50);
        check_assign(ctx, base, row, "broadcast row");
        hd_tensor *s0 = hd_tensor_scalar(ctx, dt, val(dt, 4));
        check_assign(ctx, base, s0, "0-d source");
        /* into a transposed view of a [4, 3] base */
        hd_tensor *b43 = mk(ctx, dt, s43, 2, 20), *t = permute(ctx, b43, tr);
        hd_tensor *src = mk(ctx, dt, s34, 2, 60);
        check_assign(ctx, t, src, "transposed dst");
        /* from a transposed source */
        hd_tensor *b2 = mk(ctx, dt, s43, 2, 30), *src_t = permute(ctx, b2, tr);
        check_assign(ctx, base, src_t, "transposed src");
        /* into a stepped slice: x[1::2] of [6], and a column x[:, 1:4:2] */
        hd_tensor *x6 = mk(ctx, dt, s6, 1, 0), *odd = slice(ctx, x6, 0, 1, 2, 3);
        hd_tensor *v3 = mk(ctx, dt, s3, 1, 70);
        check_assign(ctx, odd, v3, "stepped slice");
        hd_tensor *cols = slice(ctx, base, 1, 1, 2, 2);
        int64_t s31[2] = {3, 1};
        hd_tensor *c31 = mk(ctx, dt, s31, 2, 80);
        check_assign(ctx, cols, c31, "column slice, broadcast column");
        /* overlap: x[1:] = x[:-1], x[:-1] = x[1:], x = x.T, x[::2] = x[1::2] reversed order */
        hd_tensor *hi = slice(ctx, x6, 0, 1, 1, 5), *lo = slice(ctx, x6, 0, 0, 1, 5);
        check_assign(ctx, hi, lo, "x[1:] = x[:-1]");
        check_assign(ctx, lo, hi, "x[:-1] = x[1:]");
        int64_t s33[2] = {3, 3};
        hd_tensor *sq = mk(ctx, dt, s33, 2, 3), *sqt = permute(ctx, sq, tr);
        check_assign(ctx, sq, sqt, "x = x.T");
        hd_tensor *ev = slice(ctx, x6, 0, 0, 2, 3);
        check_assign(ctx, ev, odd, "x[::2] = x[1::2]");
        /* 0-d destination: x6[2] = v */
        hd_attrs one;
        memset(&one, 0, sizeof one);
        one.start[0] = 2, one.step[0] = 1, one.len[0] = 1, one.drop_mask = 1;
        hd_tensor *e2 = NULL;
        CHECK(hd_op_run(ctx, HD_OP_SLICE, &x6, 1, &one, &e2) == HD_OK && e2 && e2->ndim == 0);
        check_assign(ctx, e2, s0, "0-d dst");
        hd_tensor *all[17] = {base, row, s0,   b43, t,  src, b2, src_t, x6,
                              odd,  v3,  cols, c31, hi, lo,  sq, sqt};
        unref_all(all, 17);
        hd_tensor_unref(ev);
        hd_tensor_unref(e2);
    }
}

static void test_assign_large_and_errors(hd_ctx *ctx) {
    int64_t s[2] = {300, 400}, r[1] = {300};
    int tr[2] = {1, 0};
    hd_tensor *b = mk(ctx, HD_F64, s, 2, 0), *t = permute(ctx, b, tr),
              *row = mk(ctx, HD_F64, r, 1, 9);
    check_assign(ctx, t, row, "large transposed dst");
    hd_tensor *sl = slice(ctx, b, 0, 1, 1, 299), *sl0 = slice(ctx, b, 0, 0, 1, 299);
    check_assign(ctx, sl, sl0, "large overlapping rows");
    /* errors: shapes that do not broadcast, a broadcast destination */
    int64_t s5[1] = {5}, s14[2] = {1, 4}, s34[2] = {3, 4};
    hd_tensor *v5 = mk(ctx, HD_F64, s5, 1, 0);
    CHECK(run_assign(ctx, b, v5) == HD_ERR_RUNTIME);
    CHECK(strstr(hd_error_message(ctx), "[5]") && strstr(hd_error_message(ctx), "[300, 400]"));
    hd_tensor *big = mk(ctx, HD_F64, s34, 2, 0);
    CHECK(run_assign(ctx, sl, big) == HD_ERR_RUNTIME); /* src larger than dst */
    hd_tensor *x14 = mk(ctx, HD_F32, s14, 2, 0), *ex = expand(ctx, x14, s34, 2);
    hd_tensor *src = mk(ctx, HD_F32, s34, 2, 1);
    double keep = hd_tensor_get(x14, 1);
    CHECK(run_assign(ctx, ex, src) == HD_ERR_RUNTIME);
    CHECK(strstr(hd_error_message(ctx), "broadcast") != NULL);
    CHECK(hd_tensor_get(x14, 1) == keep);
    /* empty destination: nothing to do */
    int64_t s0[2] = {0, 4};
    hd_tensor *e = mk(ctx, HD_F32, s0, 2, 0), *r4 = mk(ctx, HD_F32, s14 + 1, 1, 0);
    CHECK(run_assign(ctx, e, r4) == HD_OK);
    hd_tensor *all[11] = {b, t, row, sl, sl0, v5, big, x14, ex, src, e};
    unref_all(all, 11);
    hd_tensor_unref(r4);
}

/* Fail each allocation in turn: an error or a result, never a crash or a
 * leak. */
/* ---- argsort ---- */

/* Reference: along each line, a stable insertion sort of positions by
 * value (NaN largest; reversed comparisons when descending). */
static int ref_before(double a, double b, int desc) {
    if (desc) return a > b || (a != a && b == b);
    return a < b || (a == a && b != b);
}

static void check_argsort_first(hd_ctx *ctx, hd_tensor *x, int64_t axis, int desc, int64_t first,
                                const char *what) {
    hd_attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.ints[0] = axis;
    attrs.ints[1] = desc;
    attrs.ints[2] = first;
    hd_tensor *out = NULL;
    CHECK_MSG(hd_op_run(ctx, HD_OP_ARGSORT, &x, 1, &attrs, &out) == HD_OK, "%s: %s", what,
              hd_error_message(ctx));
    if (!out) return;
    CHECK(out->dtype == HD_I64 && out->ndim == x->ndim);
    CHECK(!first || out->shape[axis < 0 ? axis + x->ndim : axis] == first);
    int a = (int)(axis < 0 ? axis + x->ndim : axis), bad = 0;
    int64_t n = x->ndim ? x->shape[a] : 1, lines = n ? x->numel / n : 0;
    int64_t *ix = malloc((size_t)(n ? n : 1) * sizeof *ix), pos[HD_MAX_DIMS];
    for (int64_t l = 0; l < lines && !bad; l++) {
        /* the line's first element: l over the other dims */
        int64_t rem = l;
        for (int d = x->ndim - 1; d >= 0; d--) {
            if (d == a) continue;
            pos[d] = rem % x->shape[d];
            rem /= x->shape[d];
        }
        for (int64_t j = 0; j < n; j++) {
            int64_t k = j;
            if (x->ndim) pos[a] = j;
            double v = at(x, pos);
            while (k > 0) {
                if (x->ndim) pos[a] = ix[k - 1];
                if (!ref_before(v, at(x, pos), desc)) break;
                ix[k] = ix[k - 1];
                k--;
            }
            ix[k] = j;
        }
        for (int64_t j = 0; j < (first ? first : n) && !bad; j++) {
            if (x->ndim) pos[a] = j;
            bad = (int64_t)at(out, pos) != ix[j];
        }
    }
    CHECK_MSG(!bad, "%s: argsort differs from the stable reference", what);
    free(ix);
    hd_tensor_unref(out);
}

static void check_argsort(hd_ctx *ctx, hd_tensor *x, int64_t axis, int desc, const char *what) {
    check_argsort_first(ctx, x, axis, desc, 0, what);
}

static void test_argsort(hd_ctx *ctx) {
    int64_t shape[3] = {3, 5, 4};
    int order[3] = {2, 0, 1};
    for (int d = 0; d < NDT; d++) {
        hd_tensor *x = mk(ctx, all_dtypes[d], shape, 3, 11);
        /* ties: values repeat every 97, and bool has two */
        for (int desc = 0; desc < 2; desc++)
            for (int64_t axis = -3; axis < 3; axis++) check_argsort(ctx, x, axis, desc, "argsort");
        hd_tensor *p = permute(ctx, x, order), *sl = slice(ctx, x, 1, 1, 2, 2);
        check_argsort(ctx, p, 1, 0, "argsort permuted");
        check_argsort(ctx, sl, 1, 1, "argsort sliced");
        unref_all((hd_tensor *[]){x, p, sl}, 3);
    }
    /* NaN, infinities, signed zeros, and i64 past 2^53 */
    double fv[8] = {NAN, 1, -INFINITY, 0.0, -0.0, INFINITY, NAN, -2};
    int64_t n8 = 8;
    hd_tensor *f = hd_tensor_from_data(ctx, HD_F64, &n8, 1, fv);
    check_argsort(ctx, f, 0, 0, "argsort specials");
    check_argsort(ctx, f, 0, 1, "argsort specials descending");
    /* the same specials over a line long enough to be merged: many equal
     * keys, -0 equal to 0, every NaN equal to every other */
    enum { NS = 1003 };
    double sv[NS];
    for (int i = 0; i < NS; i++) sv[i] = fv[(i * 5 + i / 7) % 8];
    int64_t ns = NS;
    hd_tensor *fl = hd_tensor_from_data(ctx, HD_F64, &ns, 1, sv);
    hd_tensor *fl32 = NULL;
    hd_attrs cast;
    memset(&cast, 0, sizeof cast);
    cast.dtype = HD_F32;
    CHECK(hd_op_run(ctx, HD_OP_CAST, &fl, 1, &cast, &fl32) == HD_OK);
    for (int desc = 0; desc < 2; desc++) {
        check_argsort(ctx, fl, 0, desc, "argsort long specials");
        if (fl32) check_argsort(ctx, fl32, 0, desc, "argsort long specials f32");
    }
    check_argsort_first(ctx, fl, 0, 1, 20, "argsort first k of specials");
    check_argsort_first(ctx, fl, 0, 0, 64, "argsort first k of specials");
    unref_all((hd_tensor *[]){fl, fl32}, 2);
    int64_t iv[4] = {(1LL << 53) + 1, 1LL << 53, INT64_MIN, INT64_MAX}, n4 = 4;
    hd_tensor *big = mk_i64(ctx, &n4, 1, iv), *out = NULL;
    hd_attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    CHECK(hd_op_run(ctx, HD_OP_ARGSORT, &big, 1, &attrs, &out) == HD_OK);
    const int64_t *o = out ? hd_tensor_data(out) : NULL;
    CHECK(o && o[0] == 2 && o[1] == 1 && o[2] == 0 && o[3] == 3);
    /* lines long enough for the threads, 0-d, empty, an axis out of range */
    int64_t lshape[2] = {40, 1000}, empty[2] = {0, 3};
    hd_tensor *l = mk(ctx, HD_F32, lshape, 2, 5), *z = hd_tensor_zeros(ctx, HD_F32, empty, 2);
    hd_tensor *sc = hd_tensor_scalar(ctx, HD_F32, 1.5);
    check_argsort(ctx, l, 1, 0, "argsort long lines");
    /* the first k positions: by insertion up to 64, by the whole sort above */
    static const int64_t firsts[4] = {1, 5, 64, 65};
    for (int i = 0; i < 4; i++) {
        check_argsort_first(ctx, l, 1, i % 2, firsts[i], "argsort first k");
        check_argsort_first(ctx, l, 0, i % 2, firsts[i] / 2 + 1, "argsort first k across");
    }
    check_argsort(ctx, l, 0, 1, "argsort across lines");
    check_argsort(ctx, z, 0, 0, "argsort empty");
    check_argsort(ctx, sc, 0, 0, "argsort 0-d");
    attrs.ints[0] = 2;
    hd_tensor *bad = NULL;
    CHECK(hd_op_run(ctx, HD_OP_ARGSORT, &z, 1, &attrs, &bad) == HD_ERR_RUNTIME);
    CHECK(strstr(hd_error_message(ctx), "out of range") != NULL);
    hd_error_clear(ctx);
    unref_all((hd_tensor *[]){f, big, out, l, z, sc}, 6);
}

static void test_alloc_failures(void) {
    hd_ctx c;
    hd_ctx_init(&c, NULL, NULL);
    int64_t s[2] = {3, 4}, si[1] = {2}, iv[2] = {2, -1};
    int tr[2] = {1, 0};
    for (long k = 0; k < 12; k++) {
        hd_tensor *x = mk(&c, HD_F32, s, 2, 0), *idx = mk_i64(&c, si, 1, iv);
        hd_tensor *lo = x && idx ? slice(&c, x, 0, 0, 1, 2) : NULL;
        hd_tensor *hi = lo ? slice(&c, x, 0, 1, 1, 2) : NULL;
        hd_tensor *xt = hi ? permute(&c, x, tr) : NULL;
        if (!xt) {
            hd_tensor *all[5] = {x, idx, lo, hi, xt};
            unref_all(all, 5);
            continue;
        }
        c.fail_countdown = k;
        hd_tensor *out = NULL, *in[2] = {x, idx}, *cin[2] = {x, x}, *ain[2] = {hi, lo};
        hd_attrs a;
        memset(&a, 0, sizeof a);
        hd_status st = hd_op_run(&c, HD_OP_INDEX_SELECT, in, 2, &a, &out);
        CHECK((st == HD_OK) == (out != NULL) && (st == HD_OK || st == HD_ERR_MEMORY));
        hd_tensor_unref(out);
        out = NULL;
        st = hd_op_run(&c, HD_OP_CONCAT, cin, 2, &a, &out);
        CHECK((st == HD_OK) == (out != NULL));
        hd_tensor_unref(out);
        out = NULL;
        st = hd_op_run(&c, HD_OP_ASSIGN, ain, 2, NULL, &out);
        CHECK((st == HD_OK) == (out != NULL) && (st == HD_OK || st == HD_ERR_MEMORY));
        hd_tensor_unref(out);
        c.fail_countdown = -1;
        hd_tensor *all[5] = {x, idx, lo, hi, xt};
        unref_all(all, 5);
    }
    CHECK(c.mem_used == 0);
}

static void test_supports(void) {
    for (int d = 0; d < NDT; d++) {
        CHECK(hd_cpu_backend.supports_op(HD_OP_CONCAT, all_dtypes[d]));
        CHECK(hd_cpu_backend.supports_op(HD_OP_INDEX_SELECT, all_dtypes[d]));
        CHECK(hd_cpu_backend.supports_op(HD_OP_ASSIGN, all_dtypes[d]));
        CHECK(hd_cpu_backend.supports_op(HD_OP_FULL, all_dtypes[d]));
    }
    CHECK(hd_cpu_backend.supports_op(HD_OP_ONE_HOT, HD_I64));
    for (int d = 0; d < NDT; d++) CHECK(hd_cpu_backend.supports_op(HD_OP_ARGSORT, all_dtypes[d]));
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    test_concat(&ctx);
    test_concat_large_and_errors(&ctx);
    test_index_select(&ctx);
    test_index_select_large_and_errors(&ctx);
    test_one_hot(&ctx);
    test_assign(&ctx);
    test_assign_large_and_errors(&ctx);
    test_argsort(&ctx);
    test_alloc_failures();
    test_supports();
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
