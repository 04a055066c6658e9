/* nn ops on the CPU (softmax, log_softmax, cross_entropy, mse, conv2d,
 * max/avg pool, dropout, layer_norm), each against a textbook reference
 * loop in double, in f32, f64, f16 and bf16, with non-contiguous inputs,
 * negative axes, zero-size tensors and the errors of the shape rules. */
#include "hd_test.h"
#include "hd_backend.h"
#include "hd_op.h"
#include "hd_rng.h"

static hd_ctx C;

static const hd_dtype FLOATS[4] = {HD_F32, HD_F64, HD_F16, HD_BF16};

/* Tolerance for results of dtype dt whose reference is computed from the
 * same (rounded) inputs: output rounding plus f32 arithmetic for halves. */
static double tol(hd_dtype dt) {
    switch (dt) {
    case HD_F64: return 1e-12;
    case HD_F32: return 2e-5;
    case HD_F16: return 3e-3;
    default: return 2e-2;
    }
}

/* ---- helpers ---- */

static uint64_t lcg_state = 12345;

/* Deterministic uniform in [-1, 1). */
static double urand(void) {
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg_state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* A tensor of dtype dt holding v (rounded to dt). */
static hd_tensor *mk(hd_dtype dt, const int64_t *shape, int nd, const double *v) {
    int64_t n = hd_shape_numel(shape, nd);
    void *buf = calloc((size_t)n + 1, 8);
    for (int64_t i = 0; i < n; i++) hd_dtype_store(dt, buf, i, v[i]);
    hd_tensor *t = hd_tensor_from_data(&C, dt, shape, nd, buf);
    free(buf);
    return t;
}

/* A tensor of uniform values in [lo, hi). */
static hd_tensor *mk_rand(hd_dtype dt, const int64_t *shape, int nd, double lo, double hi) {
    int64_t n = hd_shape_numel(shape, nd);
    double *v = malloc(((size_t)n + 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * (urand() + 1) / 2;
    hd_tensor *t = mk(dt, shape, nd, v);
    free(v);
    return t;
}

static hd_tensor *mk_labels(const int64_t *shape, int nd, const int64_t *v) {
    return hd_tensor_from_data(&C, HD_I64, shape, nd, v);
}

static hd_tensor *run(hd_op op, hd_tensor **in, int nin, const hd_attrs *at) {
    hd_tensor *out = NULL;
    hd_status st = hd_op_run(&C, op, in, nin, at, &out);
    CHECK_MSG(st == HD_OK && out, "%s: %s", hd_op_name(op), hd_error_message(&C));
    return out;
}

/* The op fails with status want and a message containing substr. */
static void expect_error(hd_op op, hd_tensor **in, int nin, const hd_attrs *at, hd_status want,
                         const char *substr) {
    hd_tensor *out = NULL;
    hd_status st = hd_op_run(&C, op, in, nin, at, &out);
    CHECK_MSG(st == want && !out && strstr(hd_error_message(&C), substr), "%s: status %d, '%s'",
              hd_op_name(op), st, hd_error_message(&C));
    hd_tensor_unref(out);
}

/* A view of t with its dims in the given order. */
static hd_tensor *permuted(hd_tensor *t, const int64_t *order) {
    hd_attrs at = {0};
    at.nshape = t->ndim;
    memcpy(at.shape, order, (size_t)t->ndim * sizeof *order);
    hd_tensor *v = run(HD_OP_PERMUTE, &t, 1, &at);
    hd_tensor_unref(t);
    return v;
}

/* Every step-th element along dim (from 0) of t: a strided view. */
static hd_tensor *strided(hd_tensor *t, int dim, int64_t step) {
    hd_attrs at = {0};
    for (int d = 0; d < t->ndim; d++) at.step[d] = 1, at.len[d] = t->shape[d];
    at.step[dim] = step;
    at.len[dim] = (t->shape[dim] + step - 1) / step;
    hd_tensor *v = run(HD_OP_SLICE, &t, 1, &at);
    hd_tensor_unref(t);
    return v;
}

/* out has dtype dt, the shape (shape, nd), and values ref within tol. */
static void check_out(const char *what, hd_tensor *out, hd_dtype dt, const int64_t *shape, int nd,
                      const double *ref, double rtol, double atol) {
    if (!out) return;
    CHECK_MSG(out->dtype == dt && out->ndim == nd, "%s: dtype %s ndim %d", what,
              hd_dtype_name(out->dtype), out->ndim);
    if (out->ndim != nd || (nd && memcmp(out->shape, shape, (size_t)nd * sizeof *shape))) {
        CHECK_MSG(0, "%s: wrong shape", what);
        return;
    }
    int64_t bad = -1;
    for (int64_t i = 0; i < out->numel && bad < 0; i++)
        if (!hd_test_close(hd_tensor_get(out, i), ref[i], rtol, atol)) bad = i;
    CHECK_MSG(bad < 0, "%s (%s): element %lld is %.10g, want %.10g", what, hd_dtype_name(dt),
              (long long)bad, bad < 0 ? 0 : hd_tensor_get(out, bad), bad < 0 ? 0 : ref[bad]);
}

static double *dalloc(int64_t n) {
    return calloc((size_t)n + 1, sizeof(double));
}

/* ---- softmax, log_softmax ---- */

/* x as outer lines of n elements along axis, inner apart. */
static void line_geom(const hd_tensor *x, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
    *outer = *inner = 1;
    *n = x->ndim ? x->shape[axis] : 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis) *outer *= x->shape[d];
        if (d > axis) *inner *= x->shape[d];
    }
}

static void ref_softmax(const hd_tensor *x, int axis, int logsm, double *y) {
    int64_t outer, n, inner;
    line_geom(x, axis, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < inner; k++) {
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < n; j++) m = fmax(m, hd_tensor_get(x, (o * n + j) * inner + k));
            for (int64_t j = 0; j < n; j++) s += exp(hd_tensor_get(x, (o * n + j) * inner + k) - m);
            for (int64_t j = 0; j < n; j++) {
                double v = hd_tensor_get(x, (o * n + j) * inner + k);
                y[(o * n + j) * inner + k] = logsm ? v - m - log(s) : exp(v - m) / s;
            }
        }
}

/* softmax and log_softmax of x along axis against the reference. */
static void check_softmax(const char *what, hd_tensor *x, int64_t axis) {
    hd_attrs at = {0};
    at.ints[0] = axis;
    int a = (int)(axis < 0 ? axis + x->ndim : axis);
    double *ref = dalloc(x->numel);
    for (int logsm = 0; logsm < 2; logsm++) {
        hd_op op = logsm ? HD_OP_LOG_SOFTMAX : HD_OP_SOFTMAX;
        hd_tensor *y = run(op, &x, 1, &at);
        ref_softmax(x, a, logsm, ref);
        double t = tol(x->dtype);
        check_out(what, y, x->dtype, x->shape, x->ndim, ref, t, logsm ? 4 * t : t);
        hd_tensor_unref(y);
    }
    free(ref);
}

static void test_softmax_axes(void) {
    int64_t shape[3] = {3, 4, 5}, axes[6] = {0, 1, 2, -1, -2, -3};
    for (int d = 0; d < 4; d++) {
        hd_tensor *x = mk_rand(FLOATS[d], shape, 3, -3, 3);
        for (int a = 0; a < 6; a++) check_softmax("softmax axes", x, axes[a]);
        hd_tensor_unref(x);
        /* non-contiguous: a transposed view and a strided slice */
        int64_t base[3] = {5, 4, 3}, order[3] = {2, 1, 0};
        hd_tensor *p = permuted(mk_rand(FLOATS[d], base, 3, -3, 3), order);
        CHECK(!hd_tensor_is_contiguous(p));
        check_softmax("softmax permuted", p, -1);
        check_softmax("softmax permuted", p, 1);
        int64_t wide[2] = {3, 9};
        hd_tensor *s = strided(mk_rand(FLOATS[d], wide, 2, -3, 3), 1, 2);
        check_softmax("softmax strided", s, -1);
        check_softmax("softmax strided", s, 0);
        hd_tensor_unref(p);
        hd_tensor_unref(s);
    }
}

static void test_softmax_special(void) {
    for (int d = 0; d < 4; d++) {
        hd_dtype dt = FLOATS[d];
        /* huge values: naive exp overflows, the max-subtracted form does not */
        double v[6] = {1000, 1001, 999, -1000, -1001, -999};
        int64_t shape[2] = {2, 3};
        hd_tensor *x = mk(dt, shape, 2, v);
        check_softmax("softmax huge", x, -1);
        hd_tensor_unref(x);
        /* -inf entries: a row of all -inf is NaN (torch), one -inf is 0 */
        double w[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, 0, 0};
        hd_tensor *xi = mk(dt, shape, 2, w);
        hd_attrs at = {0};
        at.ints[0] = 1;
        hd_tensor *y = run(HD_OP_SOFTMAX, &xi, 1, &at);
        double ref[6] = {NAN, NAN, NAN, 0, 0.5, 0.5};
        check_out("softmax -inf", y, dt, shape, 2, ref, tol(dt), 0);
        hd_tensor *ly = run(HD_OP_LOG_SOFTMAX, &xi, 1, &at);
        double lref[6] = {NAN, NAN, NAN, -INFINITY, -log(2), -log(2)};
        check_out("log_softmax -inf", ly, dt, shape, 2, lref, tol(dt), 0);
        hd_tensor_unref(y);
        hd_tensor_unref(ly);
        hd_tensor_unref(xi);
        /* 0-d: softmax 1, log_softmax 0 (axis 0; the core's axis check
         * takes no -1 for 0-d tensors) */
        hd_tensor *s = hd_tensor_scalar(&C, dt, 3.5);
        at.ints[0] = 0;
        hd_tensor *s1 = run(HD_OP_SOFTMAX, &s, 1, &at), *s2 = run(HD_OP_LOG_SOFTMAX, &s, 1, &at);
        double one = 1, zero = 0;
        check_out("softmax 0-d", s1, dt, NULL, 0, &one, 0, 0);
        check_out("log_softmax 0-d", s2, dt, NULL, 0, &zero, 0, 0);
        hd_tensor_unref(s1);
        hd_tensor_unref(s2);
        hd_tensor_unref(s);
    }
}

/* ---- cumsum, cumprod ---- */

/* Running sums or products along axis (from the end where rev), in f64
 * element by element; cumprod's gradient for g (sum over j >= i of g_j
 * times the product of x_k for k <= j, k != i), written out as that sum. */
static void ref_scan(const hd_tensor *x, const hd_tensor *g, int axis, hd_op op, int rev,
                     double *y) {
    int64_t outer, n, inner;
    line_geom(x, axis, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < inner; k++) {
#define AT(j) ((o * n + (j)) * inner + k)
            double acc = op == HD_OP_CUMPROD ? 1 : 0;
            for (int64_t s = 0; s < n; s++) {
                int64_t j = rev ? n - 1 - s : s;
                if (op == HD_OP_CUMPROD_BWD) {
                    double sum = 0;
                    for (int64_t q = j; q < n; q++) {
                        double p = hd_tensor_get(g, AT(q));
                        for (int64_t r = 0; r <= q; r++)
                            if (r != j) p *= hd_tensor_get(x, AT(r));
                        sum += p;
                    }
                    y[AT(j)] = sum;
                    continue;
                }
                double v = hd_tensor_get(x, AT(j));
                acc = op == HD_OP_CUMPROD ? acc * v : acc + v;
                y[AT(j)] = acc;
            }
#undef AT
        }
}

static void check_scan(const char *what, hd_tensor *x, hd_tensor *g, int64_t axis, hd_op op,
                       int rev) {
    hd_attrs at = {0};
    at.ints[0] = axis;
    at.ints[1] = rev;
    int a = (int)(axis < 0 ? axis + x->ndim : axis);
    double *ref = dalloc(x->numel ? x->numel : 1);
    hd_tensor *in[2] = {x, g};
    hd_tensor *y = run(op, in, g ? 2 : 1, &at);
    ref_scan(x, g, a, op, rev, ref);
    double t = tol(x->dtype);
    /* products of n factors, and f16/bf16 results fed back: relative error grows with n */
    int64_t n = x->ndim ? x->shape[a] : 1;
    /* gradient ops give f32 for half inputs (grad_like) */
    hd_dtype dt = g && (x->dtype == HD_F16 || x->dtype == HD_BF16) ? HD_F32 : x->dtype;
    check_out(what, y, dt, x->shape, x->ndim, ref, t * (double)n, t * (double)n);
    hd_tensor_unref(y);
    free(ref);
}

static void test_scans(void) {
    int64_t shape[3] = {3, 4, 5}, axes[4] = {0, 1, 2, -1};
    for (int d = 0; d < 4; d++) {
        hd_tensor *x = mk_rand(FLOATS[d], shape, 3, -1.5, 1.5),
                  *g = mk_rand(FLOATS[d], shape, 3, -1, 1);
        for (int a = 0; a < 4; a++) {
            check_scan("cumsum", x, NULL, axes[a], HD_OP_CUMSUM, 0);
            check_scan("cumsum reversed", x, NULL, axes[a], HD_OP_CUMSUM, 1);
            check_scan("cumprod", x, NULL, axes[a], HD_OP_CUMPROD, 0);
            check_scan("cumprod_bwd", x, g, axes[a], HD_OP_CUMPROD_BWD, 0);
        }
        /* zeros: cumprod's gradient has no division by x */
        double v[8] = {2, 0, 3, -1, 0, 0, 0.5, 4}, w[8] = {1, -2, 0.5, 3, 1, 1, -1, 2};
        int64_t s2[2] = {2, 4};
        hd_tensor *xz = mk(FLOATS[d], s2, 2, v), *gz = mk(FLOATS[d], s2, 2, w);
        check_scan("cumprod zeros", xz, NULL, 1, HD_OP_CUMPROD, 0);
        check_scan("cumprod_bwd zeros", xz, gz, 1, HD_OP_CUMPROD_BWD, 0);
        check_scan("cumprod_bwd zeros", xz, gz, 0, HD_OP_CUMPROD_BWD, 0);
        /* a transposed view, a strided slice, 0-d, empty */
        int64_t base[3] = {5, 4, 3}, order[3] = {2, 1, 0}, wide[2] = {3, 9}, empty[2] = {0, 3};
        hd_tensor *p = permuted(mk_rand(FLOATS[d], base, 3, -1.5, 1.5), order);
        hd_tensor *st = strided(mk_rand(FLOATS[d], wide, 2, -1.5, 1.5), 1, 2);
        hd_tensor *sc = hd_tensor_scalar(&C, FLOATS[d], 2.5),
                  *e = hd_tensor_zeros(&C, FLOATS[d], empty, 2);
        /* rows scanned several at a time, the last group short, threaded */
        int64_t many[2] = {67, 600};
        hd_tensor *mr = mk_rand(FLOATS[d], many, 2, -1.5, 1.5);
        check_scan("cumsum rows", mr, NULL, 1, HD_OP_CUMSUM, 0);
        check_scan("cumsum rows reversed", mr, NULL, -1, HD_OP_CUMSUM, 1);
        hd_tensor_unref(mr);
        check_scan("cumsum permuted", p, NULL, 1, HD_OP_CUMSUM, 0);
        check_scan("cumprod strided", st, NULL, -1, HD_OP_CUMPROD, 0);
        check_scan("cumsum 0-d", sc, NULL, 0, HD_OP_CUMSUM, 0);
        check_scan("cumsum empty", e, NULL, 0, HD_OP_CUMSUM, 0);
        check_scan("cumsum empty", e, NULL, 1, HD_OP_CUMSUM, 1);
        hd_tensor_unref(p);
        hd_tensor_unref(st);
        hd_tensor_unref(sc);
        hd_tensor_unref(e);
        hd_tensor_unref(xz);
        hd_tensor_unref(gz);
        hd_tensor_unref(x);
        hd_tensor_unref(g);
    }
    /* sizes that take the threaded path, lines along the last axis and across */
    int64_t big[2] = {64, 700};
    for (int d = 2; d < 4; d++) {
        hd_tensor *x = mk_rand(FLOATS[d], big, 2, -1, 1);
        check_scan("cumsum big", x, NULL, 1, HD_OP_CUMSUM, 0);
        check_scan("cumsum big", x, NULL, 0, HD_OP_CUMSUM, 1);
        hd_tensor_unref(x);
    }
    hd_attrs at = {0};
    at.ints[0] = 2;
    int64_t two[2] = {2, 2};
    hd_tensor *z = hd_tensor_zeros(&C, HD_F32, two, 2);
    expect_error(HD_OP_CUMSUM, &z, 1, &at, HD_ERR_RUNTIME, "out of range");
    hd_tensor_unref(z);
}

static void test_softmax_edges(void) {
    /* zero-size: the shape passes through */
    int64_t zshape[2] = {0, 3};
    hd_tensor *z = hd_tensor_zeros(&C, HD_F32, zshape, 2);
    hd_attrs at = {0};
    at.ints[0] = -1;
    hd_tensor *zy = run(HD_OP_SOFTMAX, &z, 1, &at);
    CHECK(zy && zy->ndim == 2 && zy->shape[0] == 0 && zy->shape[1] == 3 && zy->numel == 0);
    hd_tensor_unref(zy);
    /* axis out of range */
    at.ints[0] = 2;
    expect_error(HD_OP_SOFTMAX, &z, 1, &at, HD_ERR_RUNTIME, "out of range");
    at.ints[0] = -3;
    expect_error(HD_OP_LOG_SOFTMAX, &z, 1, &at, HD_ERR_RUNTIME, "out of range");
    hd_tensor_unref(z);
    /* sizes that take the threaded paths: rows and columns */
    int64_t big[2] = {64, 700};
    for (int d = 0; d < 2; d++) {
        hd_tensor *x = mk_rand(FLOATS[d], big, 2, -5, 5);
        check_softmax("softmax big rows", x, 1);
        check_softmax("softmax big cols", x, 0);
        hd_tensor_unref(x);
    }
}

/* ---- cross_entropy ---- */

static double ref_cross_entropy(const hd_tensor *x, const hd_tensor *y) {
    int64_t c = x->shape[x->ndim - 1], rows = x->ndim == 2 ? x->shape[0] : 1;
    double total = 0;
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; j++) m = fmax(m, hd_tensor_get(x, r * c + j));
        for (int64_t j = 0; j < c; j++) s += exp(hd_tensor_get(x, r * c + j) - m);
        total += m + log(s) - hd_tensor_get(x, r * c + hd_tensor_get_i64(y, r));
    }
    return rows ? total / (double)rows : NAN;
}

static void check_ce(const char *what, hd_tensor *x, hd_tensor *y) {
    hd_tensor *in[2] = {x, y};
    hd_tensor *out = run(HD_OP_CROSS_ENTROPY, in, 2, NULL);
    double ref = ref_cross_entropy(x, y);
    check_out(what, out, x->dtype, NULL, 0, &ref, tol(x->dtype), tol(x->dtype));
    hd_tensor_unref(out);
}

static void test_cross_entropy(void) {
    for (int d = 0; d < 4; d++) {
        hd_dtype dt = FLOATS[d];
        int64_t xs[2] = {5, 7}, ys[1] = {5}, lab[5] = {0, 6, 3, 3, 1};
        hd_tensor *x = mk_rand(dt, xs, 2, -4, 4), *y = mk_labels(ys, 1, lab);
        check_ce("cross_entropy [N, C]", x, y);
        /* [C] logits with a 0-d label */
        int64_t c1[1] = {7}, l0 = 4;
        hd_tensor *x1 = mk_rand(dt, c1, 1, -4, 4), *y0 = mk_labels(NULL, 0, &l0);
        check_ce("cross_entropy [C]", x1, y0);
        /* non-contiguous logits and labels */
        int64_t xt[2] = {7, 5}, order[2] = {1, 0}, yl[1] = {10};
        int64_t lab10[10] = {2, 9, 0, 9, 6, 9, 5, 9, 1, 9};
        hd_tensor *xp = permuted(mk_rand(dt, xt, 2, -4, 4), order);
        hd_tensor *ysl = strided(mk_labels(yl, 1, lab10), 0, 2);
        check_ce("cross_entropy strided", xp, ysl);
        /* huge logits stay finite */
        double hv[3] = {1000, 1001, 999};
        int64_t hs[2] = {1, 3}, h1[1] = {1}, hl = 0;
        hd_tensor *xh = mk(dt, hs, 2, hv), *yh = mk_labels(h1, 1, &hl);
        check_ce("cross_entropy huge", xh, yh);
        hd_tensor *list[] = {x, y, x1, y0, xp, ysl, xh, yh};
        for (int i = 0; i < 8; i++) hd_tensor_unref(list[i]);
    }
}

static void test_cross_entropy_errors(void) {
    int64_t xs[2] = {3, 4}, ys[1] = {3};
    hd_tensor *x = mk_rand(HD_F32, xs, 2, -1, 1);
    int64_t bad_hi[3] = {0, 4, 1}, bad_lo[3] = {0, 1, -1};
    hd_tensor *in[2] = {x, mk_labels(ys, 1, bad_hi)};
    expect_error(HD_OP_CROSS_ENTROPY, in, 2, NULL, HD_ERR_RUNTIME, "label 4");
    CHECK(strstr(hd_error_message(&C), "4 classes") != NULL);
    hd_tensor_unref(in[1]);
    in[1] = mk_labels(ys, 1, bad_lo);
    expect_error(HD_OP_CROSS_ENTROPY, in, 2, NULL, HD_ERR_RUNTIME, "label -1");
    hd_tensor_unref(in[1]);
    /* labels that do not match the batch, float labels */
    int64_t y4[1] = {4}, lab4[4] = {0, 0, 0, 0};
    in[1] = mk_labels(y4, 1, lab4);
    expect_error(HD_OP_CROSS_ENTROPY, in, 2, NULL, HD_ERR_RUNTIME, "do not agree");
    hd_tensor_unref(in[1]);
    in[1] = mk_rand(HD_F32, ys, 1, 0, 1);
    expect_error(HD_OP_CROSS_ENTROPY, in, 2, NULL, HD_ERR_RUNTIME, "integer");
    hd_tensor_unref(in[1]);
    hd_tensor_unref(x);
    /* an empty batch: NaN, the mean of nothing */
    int64_t zs[2] = {0, 4}, z1[1] = {0};
    hd_tensor *ez[2] = {hd_tensor_zeros(&C, HD_F32, zs, 2), mk_labels(z1, 1, NULL)};
    hd_tensor *out = run(HD_OP_CROSS_ENTROPY, ez, 2, NULL);
    CHECK(out && out->ndim == 0 && isnan(hd_tensor_get(out, 0)));
    hd_tensor_unref(out);
    hd_tensor_unref(ez[0]);
    hd_tensor_unref(ez[1]);
}

/* ---- mse ---- */

static double ref_mse(const hd_tensor *a, const hd_tensor *b) {
    int64_t shape[HD_MAX_DIMS], sa[HD_MAX_DIMS], sb[HD_MAX_DIMS];
    int nd;
    hd_broadcast_shapes(&C, a->shape, a->ndim, b->shape, b->ndim, shape, &nd);
    int64_t n = hd_shape_numel(shape, nd);
    hd_broadcast_strides(a, shape, nd, sa);
    hd_broadcast_strides(b, shape, nd, sb);
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t oa = a->offset, ob = b->offset, rem = i;
        for (int k = nd - 1; k >= 0; k--) {
            oa += (rem % shape[k]) * sa[k];
            ob += (rem % shape[k]) * sb[k];
            rem /= shape[k];
        }
        double d = hd_dtype_load(a->dtype, a->storage->data, oa) -
                   hd_dtype_load(b->dtype, b->storage->data, ob);
        s += d * d;
    }
    return n ? s / (double)n : NAN;
}

static void check_mse(const char *what, hd_tensor *a, hd_tensor *b) {
    hd_tensor *in[2] = {a, b};
    hd_tensor *out = run(HD_OP_MSE, in, 2, NULL);
    double ref = ref_mse(a, b);
    check_out(what, out, a->dtype, NULL, 0, &ref, tol(a->dtype), 0);
    hd_tensor_unref(out);
}

static void test_mse(void) {
    for (int d = 0; d < 4; d++) {
        hd_dtype dt = FLOATS[d];
        int64_t s45[2] = {4, 5}, s314[3] = {3, 1, 4}, s54[2] = {5, 4}, s3[1] = {3};
        hd_tensor *a = mk_rand(dt, s45, 2, -2, 2), *b = mk_rand(dt, s45, 2, -2, 2);
        check_mse("mse same shape", a, b);
        hd_tensor *p = mk_rand(dt, s314, 3, -2, 2), *q = mk_rand(dt, s54, 2, -2, 2);
        check_mse("mse broadcast", p, q);
        check_mse("mse broadcast swapped", q, p);
        hd_tensor *s = hd_tensor_scalar(&C, dt, 0.25), *v = mk_rand(dt, s3, 1, -2, 2);
        check_mse("mse 0-d", s, v);
        int64_t order[2] = {1, 0};
        hd_tensor *at = permuted(mk_rand(dt, s54, 2, -2, 2), order);
        hd_tensor *bs = strided(mk_rand(dt, (int64_t[]){4, 9}, 2, -2, 2), 1, 2);
        check_mse("mse non-contiguous", at, bs);
        hd_tensor *list[] = {a, b, p, q, s, v, at, bs};
        for (int i = 0; i < 8; i++) hd_tensor_unref(list[i]);
    }
    /* many blocks, summed in double */
    int64_t big[2] = {300, 200};
    for (int d = 0; d < 2; d++) {
        hd_tensor *a = mk_rand(FLOATS[d], big, 2, -1, 1), *b = mk_rand(FLOATS[d], big, 2, -1, 1);
        check_mse("mse big", a, b);
        hd_tensor_unref(a);
        hd_tensor_unref(b);
    }
    /* empty: NaN; shapes that do not broadcast: an error */
    int64_t z[2] = {0, 3}, s3[1] = {3}, s4[1] = {4};
    hd_tensor *e[2] = {hd_tensor_zeros(&C, HD_F32, z, 2), hd_tensor_zeros(&C, HD_F32, s3, 1)};
    hd_tensor *out = run(HD_OP_MSE, e, 2, NULL);
    CHECK(out && out->ndim == 0 && isnan(hd_tensor_get(out, 0)));
    hd_tensor_unref(out);
    hd_tensor_unref(e[0]);
    e[0] = hd_tensor_zeros(&C, HD_F32, s4, 1);
    expect_error(HD_OP_MSE, e, 2, NULL, HD_ERR_RUNTIME, "[4] and [3] cannot be broadcast");
    hd_tensor_unref(e[0]);
    hd_tensor_unref(e[1]);
}

/* ---- conv2d ---- */

typedef struct {
    int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, g;
    int bias;
} conv_case;

static int64_t out_len(int64_t size, int64_t k, int64_t s, int64_t p, int64_t d) {
    return (size + 2 * p - d * (k - 1) - 1) / s + 1;
}

static int64_t idx4(const int64_t *shape, int64_t a, int64_t b, int64_t c, int64_t d) {
    return ((a * shape[1] + b) * shape[2] + c) * shape[3] + d;
}

/* Direct definition: y[n,o,i,j] = b[o] + sum over the group's channels
 * and the kernel window of x[n, c, i*s - p + di*d, ...] * w[o, c', di, dj]. */
static void ref_conv(const conv_case *k, const hd_tensor *x, const hd_tensor *w, const hd_tensor *b,
                     const int64_t *os, double *y) {
    int64_t cg = k->c / k->g, og = k->o / k->g;
    for (int64_t n = 0; n < os[0]; n++)
        for (int64_t o = 0; o < os[1]; o++)
            for (int64_t i = 0; i < os[2]; i++)
                for (int64_t j = 0; j < os[3]; j++) {
                    double s = b ? hd_tensor_get(b, o) : 0;
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t a = 0; a < k->kh; a++)
                            for (int64_t e = 0; e < k->kw; e++) {
                                int64_t ih = i * k->sh - k->ph + a * k->dh;
                                int64_t iw = j * k->sw - k->pw + e * k->dw;
                                if (ih < 0 || ih >= k->h || iw < 0 || iw >= k->w) continue;
                                int64_t c = (o / og) * cg + ci;
                                s += hd_tensor_get(x, idx4(x->shape, n, c, ih, iw)) *
                                     hd_tensor_get(w, idx4(w->shape, o, ci, a, e));
                            }
                    y[idx4(os, n, o, i, j)] = s;
                }
}

/* Attributes of the case; zero_ones writes dilation and groups of 1 as 0
 * (which means 1). */
static void conv_attrs(const conv_case *k, int zero_ones, hd_attrs *at) {
    memset(at, 0, sizeof *at);
    at->ints[0] = k->sh, at->ints[1] = k->sw, at->ints[2] = k->ph, at->ints[3] = k->pw;
    at->ints[4] = k->dh, at->ints[5] = k->dw, at->ints[6] = k->g;
    for (int i = 4; i < 7 && zero_ones; i++)
        if (at->ints[i] == 1) at->ints[i] = 0;
}

/* Inputs of the case in dtype dt; non-contiguous ones when noncontig. */
static void conv_inputs(const conv_case *k, hd_dtype dt, int noncontig, hd_tensor **in) {
    int64_t cg = k->c / k->g, os[1] = {k->o};
    if (!noncontig) {
        int64_t xs[4] = {k->n, k->c, k->h, k->w}, ws[4] = {k->o, cg, k->kh, k->kw};
        in[0] = mk_rand(dt, xs, 4, -1, 1);
        in[1] = mk_rand(dt, ws, 4, -1, 1);
        in[2] = k->bias ? mk_rand(dt, os, 1, -1, 1) : NULL;
        return;
    }
    /* x stored NHWC, w stored [kh, kw, cg, o], bias every other element */
    int64_t xs[4] = {k->n, k->h, k->w, k->c}, xo[4] = {0, 3, 1, 2};
    int64_t ws[4] = {k->kh, k->kw, cg, k->o}, wo[4] = {3, 2, 0, 1}, bs[1] = {2 * k->o};
    in[0] = permuted(mk_rand(dt, xs, 4, -1, 1), xo);
    in[1] = permuted(mk_rand(dt, ws, 4, -1, 1), wo);
    in[2] = k->bias ? strided(mk_rand(dt, bs, 1, -1, 1), 0, 2) : NULL;
}

/* The case in dtype dt against the reference; non-contiguous inputs and
 * 0 for unit dilation and groups when noncontig. */
static void check_conv(const conv_case *k, hd_dtype dt, int noncontig) {
    hd_tensor *in[3];
    conv_inputs(k, dt, noncontig, in);
    hd_attrs at;
    conv_attrs(k, noncontig, &at);
    int64_t os[4] = {k->n, k->o, out_len(k->h, k->kh, k->sh, k->ph, k->dh),
                     out_len(k->w, k->kw, k->sw, k->pw, k->dw)};
    double *ref = dalloc(hd_shape_numel(os, 4));
    ref_conv(k, in[0], in[1], in[2], os, ref);
    hd_tensor *y = run(HD_OP_CONV2D, in, k->bias ? 3 : 2, &at);
    char what[96];
    snprintf(what, sizeof what, "conv2d c%lld o%lld k%lldx%lld g%lld%s", (long long)k->c,
             (long long)k->o, (long long)k->kh, (long long)k->kw, (long long)k->g,
             noncontig ? " strided" : "");
    check_out(what, y, dt, os, 4, ref, tol(dt), tol(dt));
    hd_tensor_unref(y);
    for (int i = 0; i < 3; i++) hd_tensor_unref(in[i]);
    free(ref);
}

static void test_conv2d(void) {
    static const conv_case cases[] = {
        /* n  c  h  w  o  kh kw sh sw ph pw dh dw g bias */
        {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},    /* same padding, bias */
        {1, 2, 9, 8, 3, 3, 2, 2, 1, 0, 2, 2, 1, 1, 0},    /* stride, pad, dilation, no bias */
        {2, 4, 5, 5, 6, 3, 3, 1, 2, 1, 0, 1, 1, 2, 1},    /* two groups */
        {2, 4, 6, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 4, 1},    /* depthwise, multiplier 2 */
        {1, 3, 9, 9, 3, 3, 3, 2, 2, 2, 2, 2, 2, 3, 0},    /* depthwise, stride and dilation */
        {2, 5, 4, 3, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},    /* 1x1: the input is the gemm operand */
        {1, 3, 5, 5, 2, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0},    /* 1x1 with stride */
        {2, 4, 3, 5, 4, 1, 1, 1, 1, 0, 0, 1, 1, 2, 1},    /* grouped 1x1 */
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},    /* one pixel */
        {3, 2, 5, 4, 5, 5, 4, 1, 1, 0, 0, 1, 1, 1, 1},    /* kernel as large as the input */
        {1, 2, 4, 4, 2, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1},    /* stride larger than the overlap */
        {1, 8, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, /* large enough for threads */
    };
    int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++)
        for (int d = 0; d < 4; d++) {
            check_conv(&cases[i], FLOATS[d], 0);
            check_conv(&cases[i], FLOATS[d], 1);
        }
}

static void test_conv2d_edges(void) {
    hd_attrs at;
    conv_case k = {2, 3, 5, 5, 2, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1};
    conv_attrs(&k, 0, &at);
    hd_tensor *in[3];
    /* zero input channels: the output is the bias */
    int64_t xs[4] = {1, 0, 3, 3}, ws[4] = {2, 0, 2, 2}, bs[1] = {2};
    double bv[2] = {1.5, -2};
    in[0] = hd_tensor_zeros(&C, HD_F32, xs, 4);
    in[1] = hd_tensor_zeros(&C, HD_F32, ws, 4);
    in[2] = mk(HD_F32, bs, 1, bv);
    hd_tensor *y = run(HD_OP_CONV2D, in, 3, &at);
    int64_t os[4] = {1, 2, 2, 2};
    double ref[8] = {1.5, 1.5, 1.5, 1.5, -2, -2, -2, -2};
    check_out("conv2d no channels", y, HD_F32, os, 4, ref, 0, 0);
    hd_tensor_unref(y);
    /* an empty batch */
    hd_tensor_unref(in[0]);
    int64_t xe[4] = {0, 3, 5, 5}, we[4] = {2, 3, 3, 3};
    in[0] = hd_tensor_zeros(&C, HD_F32, xe, 4);
    hd_tensor_unref(in[1]);
    in[1] = hd_tensor_zeros(&C, HD_F32, we, 4);
    y = run(HD_OP_CONV2D, in, 3, &at);
    CHECK(y && y->numel == 0 && y->shape[0] == 0 && y->shape[1] == 2 && y->shape[2] == 3);
    hd_tensor_unref(y);
    for (int i = 0; i < 3; i++) hd_tensor_unref(in[i]);
}

static void test_conv2d_errors(void) {
    hd_attrs at;
    conv_case k = {1, 3, 5, 5, 2, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1};
    conv_attrs(&k, 0, &at);
    int64_t xs[4] = {1, 3, 5, 5}, wbad[4] = {2, 2, 3, 3}, wbig[4] = {2, 3, 6, 3}, b3[1] = {3};
    hd_tensor *x = hd_tensor_zeros(&C, HD_F32, xs, 4);
    hd_tensor *in[3] = {x, hd_tensor_zeros(&C, HD_F32, wbad, 4), NULL};
    expect_error(HD_OP_CONV2D, in, 2, &at, HD_ERR_RUNTIME, "[1, 3, 5, 5] and weight [2, 2, 3, 3]");
    hd_tensor_unref(in[1]);
    in[1] = hd_tensor_zeros(&C, HD_F32, wbig, 4);
    expect_error(HD_OP_CONV2D, in, 2, &at, HD_ERR_RUNTIME, "larger than padded input");
    at.ints[2] = 1; /* padding makes it fit: [1, 2, 2, 3] out */
    hd_tensor *y = run(HD_OP_CONV2D, in, 2, &at);
    CHECK(y && y->shape[2] == 2 && y->shape[3] == 3);
    hd_tensor_unref(y);
    at.ints[2] = 0;
    hd_tensor_unref(in[1]);
    int64_t ws[4] = {2, 3, 3, 3};
    in[1] = hd_tensor_zeros(&C, HD_F32, ws, 4);
    in[2] = hd_tensor_zeros(&C, HD_F32, b3, 1);
    expect_error(HD_OP_CONV2D, in, 3, &at, HD_ERR_RUNTIME, "bias [3]");
    at.ints[6] = 2; /* 3 channels do not split into 2 groups */
    expect_error(HD_OP_CONV2D, in, 2, &at, HD_ERR_RUNTIME, "do not agree");
    at.ints[6] = 1;
    at.ints[0] = 0;
    expect_error(HD_OP_CONV2D, in, 2, &at, HD_ERR_RUNTIME, "stride");
    expect_error(HD_OP_CONV2D, in, 1, &at, HD_ERR_RUNTIME, "weight");
    for (int i = 0; i < 3; i++) hd_tensor_unref(in[i]);
}

/* ---- pools ---- */

typedef struct {
    int64_t n, c, h, w, kh, kw, sh, sw, ph, pw;
} pool_case;

/* max over the window with -inf padding; avg divides by kh * kw. */
static void ref_pool(const pool_case *k, const hd_tensor *x, int max, const int64_t *os,
                     double *y) {
    int64_t sh = k->sh ? k->sh : k->kh, sw = k->sw ? k->sw : k->kw;
    for (int64_t n = 0; n < os[0]; n++)
        for (int64_t c = 0; c < os[1]; c++)
            for (int64_t i = 0; i < os[2]; i++)
                for (int64_t j = 0; j < os[3]; j++) {
                    double m = -INFINITY, s = 0;
                    for (int64_t a = 0; a < k->kh; a++)
                        for (int64_t b = 0; b < k->kw; b++) {
                            int64_t ih = i * sh - k->ph + a, iw = j * sw - k->pw + b;
                            int in = ih >= 0 && ih < k->h && iw >= 0 && iw < k->w;
                            double v = in ? hd_tensor_get(x, idx4(x->shape, n, c, ih, iw))
                                          : (max ? -INFINITY : 0);
                            m = (isnan(v) || isnan(m)) ? NAN : fmax(m, v);
                            s += v;
                        }
                    y[idx4(os, n, c, i, j)] = max ? m : s / (double)(k->kh * k->kw);
                }
}

static void check_pool(const pool_case *k, hd_tensor *x, const char *what) {
    hd_attrs at = {0};
    at.ints[0] = k->kh, at.ints[1] = k->kw, at.ints[2] = k->sh, at.ints[3] = k->sw;
    at.ints[4] = k->ph, at.ints[5] = k->pw;
    int64_t os[4] = {k->n, k->c, out_len(k->h, k->kh, k->sh ? k->sh : k->kh, k->ph, 1),
                     out_len(k->w, k->kw, k->sw ? k->sw : k->kw, k->pw, 1)};
    double *ref = dalloc(hd_shape_numel(os, 4));
    for (int max = 0; max < 2; max++) {
        hd_tensor *y = run(max ? HD_OP_MAX_POOL2D : HD_OP_AVG_POOL2D, &x, 1, &at);
        ref_pool(k, x, max, os, ref);
        check_out(what, y, x->dtype, os, 4, ref, tol(x->dtype), tol(x->dtype));
        hd_tensor_unref(y);
    }
    free(ref);
}

static void test_pools(void) {
    static const pool_case cases[] = {
        /* n  c  h  w  kh kw sh sw ph pw */
        {2, 3, 7, 8, 3, 3, 2, 2, 1, 1},   /* padding and stride */
        {1, 2, 6, 9, 2, 3, 0, 0, 0, 0},   /* stride 0: the kernel */
        {1, 2, 5, 6, 3, 2, 1, 2, 1, 0},   /* overlapping rows */
        {1, 1, 1, 1, 1, 1, 1, 1, 0, 0},   /* one pixel */
        {2, 2, 5, 5, 4, 4, 1, 1, 2, 2},   /* padding half the kernel */
        {4, 8, 32, 32, 2, 2, 0, 0, 0, 0}, /* large enough for threads */
    };
    int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++)
        for (int d = 0; d < 4; d++) {
            const pool_case *k = &cases[i];
            int64_t xs[4] = {k->n, k->c, k->h, k->w};
            /* negative values: padding must never win a max */
            hd_tensor *x = mk_rand(FLOATS[d], xs, 4, -3, -1);
            check_pool(k, x, "pool");
            hd_tensor_unref(x);
            int64_t nhwc[4] = {k->n, k->h, k->w, k->c}, order[4] = {0, 3, 1, 2};
            hd_tensor *p = permuted(mk_rand(FLOATS[d], nhwc, 4, -2, 2), order);
            check_pool(k, p, "pool permuted");
            hd_tensor_unref(p);
        }
    /* NaN propagates through max */
    pool_case k = {1, 1, 2, 4, 2, 2, 0, 0, 0, 0};
    double v[8] = {1, 2, 3, 4, 5, NAN, 7, 8};
    int64_t xs[4] = {1, 1, 2, 4};
    hd_tensor *x = mk(HD_F32, xs, 4, v);
    check_pool(&k, x, "pool NaN");
    hd_tensor_unref(x);
}

static void test_pool_errors(void) {
    int64_t xs[4] = {1, 1, 2, 2}, x3[3] = {1, 2, 2};
    hd_tensor *x = hd_tensor_zeros(&C, HD_F32, xs, 4);
    hd_attrs at = {0};
    at.ints[0] = at.ints[1] = 3;
    expect_error(HD_OP_MAX_POOL2D, &x, 1, &at, HD_ERR_RUNTIME, "larger than the input");
    at.ints[0] = at.ints[1] = 2;
    at.ints[4] = 2;
    expect_error(HD_OP_AVG_POOL2D, &x, 1, &at, HD_ERR_RUNTIME, "padding at most half");
    at.ints[4] = 0;
    at.ints[0] = 0;
    expect_error(HD_OP_AVG_POOL2D, &x, 1, &at, HD_ERR_RUNTIME, "kernel and stride");
    hd_tensor_unref(x);
    x = hd_tensor_zeros(&C, HD_F32, x3, 3);
    at.ints[0] = 1;
    expect_error(HD_OP_MAX_POOL2D, &x, 1, &at, HD_ERR_RUNTIME, "[N, C, H, W]");
    hd_tensor_unref(x);
}

/* ---- dropout ---- */

static hd_tensor *dropout(hd_tensor *x, double p, int training) {
    hd_attrs at = {0};
    at.scalar[0] = p;
    at.ints[0] = training;
    return run(HD_OP_DROPOUT, &x, 1, &at);
}

/* Dropped elements are 0 exactly where the draw's uniform is < p;
 * survivors are x / (1 - p). Returns the number dropped. */
static int64_t check_dropout_values(hd_tensor *x, hd_tensor *y, double p, uint64_t base,
                                    double rtol) {
    int64_t dropped = 0, bad = -1;
    for (int64_t i = 0; i < x->numel; i++) {
        double xv = hd_tensor_get(x, i), yv = hd_tensor_get(y, i);
        int drop = hd_rng_uniform_f32(C.rng_seed, base, i) < p;
        double want = drop ? 0 : xv / (1 - p);
        if (x->dtype == HD_F32) want = (float)want;
        dropped += yv == 0;
        if (bad < 0 && !hd_test_close(yv, want, rtol, 0)) bad = i;
    }
    CHECK_MSG(bad < 0, "dropout %s: element %lld", hd_dtype_name(x->dtype), (long long)bad);
    return dropped;
}

static void test_dropout(void) {
    /* 10^5 elements: the fraction dropped is p within 5 sigma */
    int64_t n[1] = {100000};
    double p = 0.3;
    hd_tensor *x = mk_rand(HD_F32, n, 1, 1, 2);
    hd_rng_seed(&C, 1234);
    hd_tensor *y = dropout(x, p, 1);
    CHECK(C.rng_offset == 50000); /* the draw reserved numel values */
    int64_t dropped = check_dropout_values(x, y, p, 0, 0);
    double frac = (double)dropped / 1e5, sigma = sqrt(p * (1 - p) / 1e5);
    CHECK_MSG(fabs(frac - p) < 5 * sigma, "dropped %g", frac);
    /* same seed, same mask; the next draw differs */
    hd_rng_seed(&C, 1234);
    hd_tensor *y2 = dropout(x, p, 1), *y3 = dropout(x, p, 1);
    CHECK(memcmp(hd_tensor_data(y), hd_tensor_data(y2), 400000) == 0);
    CHECK(memcmp(hd_tensor_data(y), hd_tensor_data(y3), 400000) != 0);
    /* eval mode: identity, no draw */
    uint64_t off = C.rng_offset;
    hd_tensor *ye = dropout(x, p, 0);
    CHECK(memcmp(hd_tensor_data(x), hd_tensor_data(ye), 400000) == 0 && C.rng_offset == off);
    /* p = 1: zeros; p = 0: the input */
    hd_tensor *y1 = dropout(x, 1, 1), *y0 = dropout(x, 0, 1);
    int zeros = 1;
    for (int64_t i = 0; i < 100000; i++) zeros &= ((float *)hd_tensor_data(y1))[i] == 0;
    CHECK(zeros);
    CHECK(memcmp(hd_tensor_data(x), hd_tensor_data(y0), 400000) == 0);
    hd_tensor *list[] = {x, y, y2, y3, ye, y1, y0};
    for (int i = 0; i < 7; i++) hd_tensor_unref(list[i]);
    /* bad p */
    int64_t s3[1] = {3};
    hd_tensor *t = hd_tensor_zeros(&C, HD_F32, s3, 1);
    hd_attrs at = {0};
    at.scalar[0] = 1.5;
    expect_error(HD_OP_DROPOUT, &t, 1, &at, HD_ERR_RUNTIME, "p must be in [0, 1]");
    at.scalar[0] = NAN;
    expect_error(HD_OP_DROPOUT, &t, 1, &at, HD_ERR_RUNTIME, "p must be in [0, 1]");
    hd_tensor_unref(t);
}

static void test_dropout_dtypes(void) {
    for (int d = 0; d < 4; d++) {
        hd_dtype dt = FLOATS[d];
        /* a transposed view: the mask follows the output's element order */
        int64_t base[2] = {40, 50}, order[2] = {1, 0};
        hd_tensor *x = permuted(mk_rand(dt, base, 2, 1, 2), order);
        hd_rng_seed(&C, 99);
        hd_tensor *y = dropout(x, 0.5, 1);
        double rtol = dt == HD_F32 || dt == HD_F64 ? 0 : tol(dt);
        int64_t dropped = check_dropout_values(x, y, 0.5, 0, rtol);
        CHECK(dropped > 800 && dropped < 1200);
        hd_tensor *ye = dropout(x, 0.5, 0);
        double *ref = dalloc(x->numel);
        for (int64_t i = 0; i < x->numel; i++) ref[i] = hd_tensor_get(x, i);
        check_out("dropout eval", ye, dt, x->shape, 2, ref, 0, 0);
        free(ref);
        hd_tensor_unref(x);
        hd_tensor_unref(y);
        hd_tensor_unref(ye);
    }
}

/* Every f16 and bf16 bit pattern through eval-mode dropout (a copy via the
 * f32 working buffer): values come back bit for bit, NaNs as NaNs. */
static void test_half_roundtrip(void) {
    int64_t n[1] = {65536};
    uint16_t *bits = malloc(65536 * sizeof *bits);
    for (uint32_t i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
    hd_dtype dts[2] = {HD_F16, HD_BF16};
    for (int d = 0; d < 2; d++) {
        hd_tensor *x = hd_tensor_from_data(&C, dts[d], n, 1, bits);
        hd_tensor *y = dropout(x, 0.5, 0);
        int bad = 0;
        for (uint32_t i = 0; y && i < 65536; i++) {
            uint16_t o = ((const uint16_t *)hd_tensor_data(y))[i];
            int nan_in = dts[d] == HD_F16 ? (i & 0x7c00) == 0x7c00 && (i & 0x3ff)
                                          : (i & 0x7f80) == 0x7f80 && (i & 0x7f);
            double v = hd_tensor_get(y, i);
            bad += nan_in ? !isnan(v) : o != i;
        }
        CHECK_MSG(bad == 0, "%s round trip: %d values changed", hd_dtype_name(dts[d]), bad);
        hd_tensor_unref(x);
        hd_tensor_unref(y);
    }
    free(bits);
}

/* ---- layer_norm ---- */

static void ref_layer_norm(const hd_tensor *x, const hd_tensor *w, const hd_tensor *b, int64_t k,
                           double eps, double *y) {
    int64_t d = hd_shape_numel(x->shape + x->ndim - k, (int)k), rows = x->numel / d;
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < d; j++) mean += hd_tensor_get(x, r * d + j);
        mean /= (double)d;
        for (int64_t j = 0; j < d; j++) {
            double t = hd_tensor_get(x, r * d + j) - mean;
            var += t * t;
        }
        var /= (double)d;
        for (int64_t j = 0; j < d; j++) {
            double v = (hd_tensor_get(x, r * d + j) - mean) / sqrt(var + eps);
            y[r * d + j] = w ? v * hd_tensor_get(w, j) + hd_tensor_get(b, j) : v;
        }
    }
}

/* layer_norm over the last k dims (attr kattr: 0 means 1; eps 0 means 1e-5). */
static void check_layer_norm(const char *what, hd_tensor *x, hd_tensor *w, hd_tensor *b,
                             int64_t kattr, double eps) {
    hd_attrs at = {0};
    at.ints[0] = kattr;
    at.scalar[0] = eps;
    hd_tensor *in[3] = {x, w, b};
    hd_tensor *y = run(HD_OP_LAYER_NORM, in, w ? 3 : 1, &at);
    double *ref = dalloc(x->numel);
    ref_layer_norm(x, w, b, kattr ? kattr : 1, eps ? eps : 1e-5, ref);
    double t = tol(x->dtype) * 4;
    check_out(what, y, x->dtype, x->shape, x->ndim, ref, t, t);
    hd_tensor_unref(y);
    free(ref);
}

static void test_layer_norm(void) {
    for (int d = 0; d < 4; d++) {
        hd_dtype dt = FLOATS[d];
        int64_t s46[2] = {4, 6}, s6[1] = {6}, s234[3] = {2, 3, 4}, s34[2] = {3, 4};
        hd_tensor *x = mk_rand(dt, s46, 2, -2, 3), *w = mk_rand(dt, s6, 1, 0.5, 1.5);
        hd_tensor *b = mk_rand(dt, s6, 1, -1, 1);
        check_layer_norm("layer_norm 1 dim", x, w, b, 0, 0);
        check_layer_norm("layer_norm 1 dim, no affine", x, NULL, NULL, 1, 0);
        hd_tensor *x3 = mk_rand(dt, s234, 3, -2, 3), *w2 = mk_rand(dt, s34, 2, 0.5, 1.5);
        hd_tensor *b2 = mk_rand(dt, s34, 2, -1, 1);
        check_layer_norm("layer_norm 2 dims", x3, w2, b2, 2, 0);
        check_layer_norm("layer_norm 2 dims, eps", x3, NULL, NULL, 2, 1e-2);
        check_layer_norm("layer_norm all dims", x3, NULL, NULL, 3, 0);
        /* non-contiguous input, weight and bias */
        int64_t base[2] = {6, 4}, order[2] = {1, 0}, s12[1] = {12};
        hd_tensor *xp = permuted(mk_rand(dt, base, 2, -2, 3), order);
        hd_tensor *ws = strided(mk_rand(dt, s12, 1, 0.5, 1.5), 0, 2);
        hd_tensor *bs = strided(mk_rand(dt, s12, 1, -1, 1), 0, 2);
        check_layer_norm("layer_norm strided", xp, ws, bs, 1, 0);
        /* a constant row normalises to the bias */
        double cv[6] = {3, 3, 3, 3, 3, 3};
        hd_tensor *xc = mk(dt, s6, 1, cv);
        check_layer_norm("layer_norm constant", xc, w, b, 1, 0);
        hd_tensor *list[] = {x, w, b, x3, w2, b2, xp, ws, bs, xc};
        for (int i = 0; i < 10; i++) hd_tensor_unref(list[i]);
    }
    int64_t big[2] = {64, 1024};
    hd_tensor *xb = mk_rand(HD_F32, big, 2, -1, 1);
    check_layer_norm("layer_norm big", xb, NULL, NULL, 1, 0);
    hd_tensor_unref(xb);
}

static void test_layer_norm_errors(void) {
    int64_t s46[2] = {4, 6}, s5[1] = {5}, s6[1] = {6};
    hd_tensor *in[3] = {hd_tensor_zeros(&C, HD_F32, s46, 2), hd_tensor_zeros(&C, HD_F32, s5, 1),
                        hd_tensor_zeros(&C, HD_F32, s6, 1)};
    hd_attrs at = {0};
    expect_error(HD_OP_LAYER_NORM, in, 3, &at, HD_ERR_RUNTIME, "weight [5] does not match");
    expect_error(HD_OP_LAYER_NORM, in, 2, &at, HD_ERR_RUNTIME, "optionally weight and bias");
    at.ints[0] = 3;
    expect_error(HD_OP_LAYER_NORM, in, 1, &at, HD_ERR_RUNTIME, "cannot normalise 3 dims");
    for (int i = 0; i < 3; i++) hd_tensor_unref(in[i]);
}

/* ---- zero-size tensors, dtype support ---- */

static void test_zero_size(void) {
    int64_t xs[4] = {0, 2, 4, 4}, v[1] = {0}, m[2] = {0, 4};
    hd_tensor *x = hd_tensor_zeros(&C, HD_F32, xs, 4);
    hd_attrs at = {0};
    at.ints[0] = at.ints[1] = 2;
    hd_tensor *y = run(HD_OP_AVG_POOL2D, &x, 1, &at);
    CHECK(y && y->ndim == 4 && y->numel == 0 && y->shape[1] == 2 && y->shape[2] == 2);
    hd_tensor_unref(y);
    hd_tensor_unref(x);
    x = hd_tensor_zeros(&C, HD_F16, v, 1);
    uint64_t off = C.rng_offset;
    y = dropout(x, 0.5, 1);
    CHECK(y && y->numel == 0 && y->dtype == HD_F16 && C.rng_offset == off);
    hd_tensor_unref(y);
    hd_tensor_unref(x);
    x = hd_tensor_zeros(&C, HD_F64, m, 2);
    memset(&at, 0, sizeof at);
    y = run(HD_OP_LAYER_NORM, &x, 1, &at);
    CHECK(y && y->ndim == 2 && y->numel == 0 && y->shape[1] == 4);
    hd_tensor_unref(y);
    hd_tensor_unref(x);
}

static void test_supports(void) {
    const hd_backend *be = &hd_cpu_backend;
    hd_op ops[9] = {HD_OP_SOFTMAX,    HD_OP_LOG_SOFTMAX, HD_OP_CROSS_ENTROPY,
                    HD_OP_MSE,        HD_OP_CONV2D,      HD_OP_MAX_POOL2D,
                    HD_OP_AVG_POOL2D, HD_OP_DROPOUT,     HD_OP_LAYER_NORM};
    int ok = 1;
    for (int i = 0; i < 9; i++)
        for (int dt = 0; dt < HD_DTYPE_COUNT; dt++)
            ok &= be->supports_op(ops[i], (hd_dtype)dt) == hd_dtype_is_float((hd_dtype)dt);
    CHECK(ok);
}

/* ---- allocation failures ---- */

/* Fail each allocation of f16 ops in turn (f16 needs the most scratch):
 * an error or a result, never a crash or a leak. */
static void test_alloc_failures(void) {
    int64_t xs[4] = {1, 2, 5, 5}, ws[4] = {2, 2, 3, 3}, bs[1] = {2};
    hd_tensor *in[3] = {mk_rand(HD_F16, xs, 4, -1, 1), mk_rand(HD_F16, ws, 4, -1, 1),
                        mk_rand(HD_F16, bs, 1, -1, 1)};
    size_t used = C.mem_used;
    int ok = 1;
    for (long k = 0; k < 12; k++) {
        hd_attrs at = {0};
        at.ints[0] = at.ints[1] = 1;
        hd_op ops[4] = {HD_OP_CONV2D, HD_OP_SOFTMAX, HD_OP_LAYER_NORM, HD_OP_MAX_POOL2D};
        int nins[4] = {3, 1, 1, 1};
        for (int o = 0; o < 4; o++) {
            hd_tensor *out = NULL;
            at.ints[0] = o == 1 ? -1 : 1;
            at.ints[1] = o == 2 ? 0 : 1;
            C.fail_countdown = k;
            hd_status st = hd_op_run(&C, ops[o], in, nins[o], &at, &out);
            C.fail_countdown = -1;
            ok &= (st == HD_OK) == (out != NULL) && (st == HD_OK || st == HD_ERR_MEMORY);
            hd_tensor_unref(out);
            ok &= C.mem_used == used;
        }
    }
    CHECK(ok);
    for (int i = 0; i < 3; i++) hd_tensor_unref(in[i]);
}

int main(void) {
    hd_ctx_init(&C, NULL, NULL);
    test_softmax_axes();
    test_softmax_special();
    test_softmax_edges();
    test_scans();
    test_cross_entropy();
    test_cross_entropy_errors();
    test_mse();
    test_conv2d();
    test_conv2d_edges();
    test_conv2d_errors();
    test_pools();
    test_pool_errors();
    test_dropout();
    test_dropout_dtypes();
    test_half_roundtrip();
    test_layer_norm();
    test_layer_norm_errors();
    test_zero_size();
    test_supports();
    test_alloc_failures();
    CHECK(C.mem_used == 0);
    TEST_END();
}
