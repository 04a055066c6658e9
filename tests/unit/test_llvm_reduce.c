/* The llvm compiler's kernels that reduce against eager mode:
 * reductions (every op, dtype, axes, keepdim, with and without a
 * prologue; the vector math as the prologue), over leading axes (tiles of
 * columns), and to one element split across threads; mse; argmax and
 * argmin; softmax, log_softmax and layer_norm rows, along the last axis
 * and leading ones, and softmax_bwd, log_softmax_bwd and layer_norm_bwd
 * (hd_llvm_reduce.c). */
#include "hd_compile.h"
#include "hd_test.h"
#include "hd_test_trace.h"
#include "hd_trace.h"
#include "hd_test_llvm.h"

#if !HODU_HAVE_LLVM

HD_TEST_LLVM_MISSING_MAIN()

#else

/* ---- backward rows, argmax, mse ---- */

/* softmax_bwd and log_softmax_bwd as row kernels: y = (log_)softmax(x) over
 * an axis, then the gradient of g; sums in double in another order than
 * the eager kernel's, so 1e-6 relative (f32), 1e-12 (f64). ud: the case. */
typedef struct smb_case {
    hd_op op;
    int64_t axis;
} smb_case;

static hd_status smb_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const smb_case *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = c->axis;
    hd_tensor *y = NULL, *t2[2];
    hd_op fwd = c->op == HD_OP_SOFTMAX_BWD ? HD_OP_SOFTMAX : HD_OP_LOG_SOFTMAX;
    hd_status st = op1(ctx, fwd, in[0], &at, &y);
    t2[0] = y;
    t2[1] = in[1];
    if (!st) st = hd_op_run(ctx, c->op, t2, 2, &at, out);
    hd_tensor_unref(y);
    return st;
}

static void test_softmax_bwd(hd_ctx *ctx) {
    static const int64_t shapes[][3] = {{5, 37, 0}, {40, 3, 0}, {3, 4, 5}, {1, 9, 0}};
    static const int nds[] = {2, 2, 3, 2};
    static const int64_t axes[] = {-1, 0, 1, 1};
    const hd_dtype dts[2] = {HD_F32, HD_F64};
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < 4; s++)
            for (int d = 0; d < 2; d++) {
                smb_case c = {k ? HD_OP_LOG_SOFTMAX_BWD : HD_OP_SOFTMAX_BWD, axes[s]};
                hd_tensor *in[2] = {make(ctx, dts[d], shapes[s], nds[s], 1.0),
                                    make(ctx, dts[d], shapes[s], nds[s], 0.3)};
                char what[64];
                snprintf(what, sizeof what, "%s %s case %d", hd_op_name(c.op),
                         hd_dtype_name(dts[d]), s);
                hd_jit_stats st;
                CHECK_MSG(check_body_tol(ctx, what, smb_body, in, 2, 1, &c,
                                         dts[d] == HD_F32 ? 1e-6 : 1e-12, &st),
                          "%s", what);
                CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
                hd_tensor_unref(in[0]);
                hd_tensor_unref(in[1]);
            }
}

/* argmax and argmin, with a prologue (x * 2), over one axis or all, in
 * every dtype: ties (integers from few values), NaN and infinities
 * (scale 0 puts the special values first) against eager exactly. */
typedef struct argc {
    hd_op op;
    int axis; /* -2: all */
} argc;

static hd_status arg_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const argc *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (c->axis > -2) {
        at.naxes = 1;
        at.axes[0] = c->axis;
    }
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0), *x2 = NULL;
    hd_status st = in[0]->dtype == HD_BOOL ? HD_OK : op2(ctx, HD_OP_MUL, in[0], two, &x2);
    if (!st) st = op1(ctx, c->op, x2 ? x2 : in[0], &at, out);
    hd_tensor_unref(two);
    hd_tensor_unref(x2);
    return st;
}

static void test_argmax(hd_ctx *ctx) {
    static const int64_t shape[2] = {7, 33};
    static const int axes[] = {1, 0, -1, -2};
    for (int d = 0; d < NDT; d++)
        for (int k = 0; k < 2; k++)
            for (int a = 0; a < 4; a++)
                for (int sc = 0; sc < 2; sc++) {
                    argc c = {k ? HD_OP_ARGMIN : HD_OP_ARGMAX, axes[a]};
                    if (!hd_cpu_backend.supports_op(c.op, all_dtypes[d])) continue;
                    hd_tensor *x = make(ctx, all_dtypes[d], shape, 2, sc ? 0.3 : 0);
                    char what[64];
                    snprintf(what, sizeof what, "%s %s axis %d%s", hd_op_name(c.op),
                             hd_dtype_name(all_dtypes[d]), c.axis, sc ? "" : " specials");
                    hd_jit_stats st;
                    CHECK_MSG(check_body_tol(ctx, what, arg_body, &x, 1, 1, &c, 0, &st), "%s",
                              what);
                    CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
                    hd_tensor_unref(x);
                }
}

/* mse(x * 2, y) as a generated reduction (same shapes; sums in double in
 * another order than eager's: 1e-6 relative), and with y broadcast (the
 * runtime kernel runs it). */
static hd_status mse_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0), *x2 = NULL;
    hd_status st = op2(ctx, HD_OP_MUL, in[0], two, &x2);
    if (!st) st = op2(ctx, HD_OP_MSE, x2, in[1], out);
    hd_tensor_unref(two);
    hd_tensor_unref(x2);
    return st;
}

static void test_mse(hd_ctx *ctx) {
    static const int64_t sx[2] = {5, 37}, sy[2][2] = {{5, 37}, {1, 37}};
    const hd_dtype dts[3] = {HD_F32, HD_F64, HD_BF16};
    for (int d = 0; d < 3; d++)
        for (int b = 0; b < 2; b++) {
            hd_tensor *in[2] = {make(ctx, dts[d], sx, 2, 1.0), make(ctx, dts[d], sy[b], 2, 0.3)};
            char what[64];
            snprintf(what, sizeof what, "mse %s%s", hd_dtype_name(dts[d]), b ? " broadcast" : "");
            hd_jit_stats st;
            CHECK_MSG(check_body_tol(ctx, what, mse_body, in, 2, 1, NULL,
                                     dts[d] == HD_F64 ? 1e-12 : 1e-6, &st),
                      "%s", what);
            CHECK_MSG(st.fallbacks == b, "%s: %d fallbacks", what, st.fallbacks);
            hd_tensor_unref(in[0]);
            hd_tensor_unref(in[1]);
        }
}

/* layer_norm_bwd's dx as a row kernel (x, g[, w]) after a generated
 * layer_norm: sums in double in another order than eager's, 1e-5 relative
 * (f32), 1e-10 (f64; dx cancels: g w rstd against the row's means). ud:
 * the normalised dims, and 1 to pass w. */
static hd_status lnb_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const int *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = c[0];
    at.scalar[0] = 1e-5;
    hd_tensor *y = NULL, *a[3] = {in[0], in[2], NULL};
    hd_status st = hd_op_run(ctx, HD_OP_LAYER_NORM, a, 1, &at, &y);
    hd_tensor *b[3] = {in[0], y, in[2]};
    if (!st) st = hd_op_run(ctx, HD_OP_LAYER_NORM_BWD, b, c[1] ? 3 : 2, &at, out);
    hd_tensor_unref(y);
    return st;
}

static void test_layer_norm_bwd(hd_ctx *ctx) {
    static const int64_t shapes[3][3] = {{5, 37, 0}, {3, 4, 6}, {40, 3, 0}};
    static const int nds[3] = {2, 3, 2}, ks[3] = {1, 2, 1};
    const hd_dtype dts[2] = {HD_F32, HD_F64};
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 2; d++)
            for (int w = 0; w < 2; w++) {
                int c[2] = {ks[s], w};
                const int64_t *ws = shapes[s] + nds[s] - ks[s];
                hd_tensor *in[3] = {make(ctx, dts[d], shapes[s], nds[s], 1.0),
                                    make(ctx, dts[d], shapes[s], nds[s], 0.3),
                                    make(ctx, dts[d], ws, ks[s], 0.7)};
                char what[64];
                snprintf(what, sizeof what, "layer_norm_bwd %s case %d%s", hd_dtype_name(dts[d]), s,
                         w ? " with w" : "");
                hd_jit_stats st;
                CHECK_MSG(check_body_tol(ctx, what, lnb_body, in, 3, 1, c,
                                         dts[d] == HD_F32 ? 1e-5 : 1e-10, &st),
                          "%s", what);
                CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
                for (int i = 0; i < 3; i++) hd_tensor_unref(in[i]);
            }
}

/* ---- the vector math in a reduction's prologue ---- */

/* The vector math as a reduction's prologue, which the explicit vector code
 * of the reduction computes (sin and cos read their table there through a
 * vector of pointers): sum(f(x)) over rows of 300. */
static hd_status vm_red_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const op_case *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.naxes = 1;
    at.axes[0] = -1;
    hd_tensor *f = NULL;
    hd_status st = c->op == HD_OP_POW ? op2(ctx, HD_OP_POW, in[0], in[0], &f)
                                      : op1(ctx, c->op, in[0], NULL, &f);
    if (!st) st = op1(ctx, HD_OP_SUM, f, &at, out);
    hd_tensor_unref(f);
    return st;
}

static void test_vmath_reductions(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_EXP,      HD_OP_LOG, HD_OP_TANH, HD_OP_SIGMOID, HD_OP_GELU,
                                HD_OP_SOFTPLUS, HD_OP_SIN, HD_OP_COS,  HD_OP_SILU,    HD_OP_POW};
    int64_t s[2] = {5, 300};
    hd_tensor *x = hd_tensor_new(ctx, HD_F32, s, 2);
    float *xv = x->storage->data;
    for (int64_t i = 0; i < x->numel; i++) /* moderate values, and huge ones for sin and cos */
        xv[i] = i % 7 == 3 ? (float)(i * 7919) * 1e5f : (float)((i * 37) % 201) * 0.05f - 5.0f;
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        op_case c;
        memset(&c, 0, sizeof c);
        c.op = ops[k];
        char what[64];
        snprintf(what, sizeof what, "sum(%s(x))", hd_op_name(ops[k]));
        hd_jit_stats st;
        CHECK_MSG(check_body_tol(ctx, what, vm_red_body, &x, 1, 1, &c, 1e-6, &st), "%s", what);
        CHECK_MSG(st.fallbacks == 0 && st.kernels == 1, "%s: %d kernels", what, st.kernels);
    }
    hd_tensor_unref(x);
}

/* ---- reductions, softmax, layer_norm ---- */

typedef struct red_case {
    hd_op op;
    int naxes, keepdim, correction, prologue;
    int64_t axes[3];
} red_case;

/* op(exp(x) * 0.5 - x) over the axes, or op(x) */
static hd_status red_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const red_case *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.naxes = c->naxes;
    at.keepdim = c->keepdim;
    at.ints[0] = c->correction;
    for (int i = 0; i < c->naxes; i++) at.axes[i] = c->axes[i];
    if (!c->prologue) return op1(ctx, c->op, in[0], &at, out);
    hd_tensor *half = hd_tensor_number(ctx, HD_F64, 0.5), *e = NULL, *m = NULL, *d = NULL;
    hd_status st =
        op1(ctx, hd_dtype_is_float(in[0]->dtype) ? HD_OP_EXP : HD_OP_ABS, in[0], NULL, &e);
    if (!st) st = op2(ctx, HD_OP_MUL, e, half, &m);
    if (!st) st = op2(ctx, HD_OP_SUB, m, in[0], &d);
    if (!st) st = op1(ctx, c->op, d, &at, out);
    hd_tensor_unref(half);
    hd_tensor_unref(e);
    hd_tensor_unref(m);
    hd_tensor_unref(d);
    return st;
}

static void test_reductions(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_SUM,  HD_OP_MEAN, HD_OP_MAX, HD_OP_MIN,
                                HD_OP_PROD, HD_OP_VAR,  HD_OP_STD, HD_OP_LOGSUMEXP};
    static const red_case shapes[] = {{0, 0, 0, 0, 0, {0}},
                                      {0, 1, 1, 0, 0, {-1}},
                                      {0, 1, 0, 1, 0, {0}},
                                      {0, 2, 1, 0, 0, {0, 2}},
                                      {0, 2, 0, 1, 0, {1, -1}}};
    int64_t sx[3] = {6, 5, 300}, sy[3] = {3, 1, 7};
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
        for (int d = 0; d < NDT; d++) {
            hd_dtype dt = all_dtypes[d];
            if (!hd_cpu_backend.supports_op(ops[o], dt)) continue;
            for (int sh = 0; sh < 5; sh++)
                for (int pro = 0; pro < 2; pro++) {
                    red_case c = shapes[sh];
                    c.op = ops[o];
                    c.prologue = pro && dt != HD_BOOL;
                    int big = sh == 1 && dt == HD_F32;
                    hd_tensor *x = make(ctx, dt, big ? sx : sy, 3, 0.3);
                    char what[80];
                    snprintf(what, sizeof what, "%s %s shape %d prologue %d", hd_op_name(ops[o]),
                             hd_dtype_name(dt), sh, c.prologue);
                    double tol = dt == HD_F64 ? 1e-13 : hd_dtype_is_float(dt) ? 2e-6 : 0;
                    if (dt == HD_F16 || dt == HD_BF16) tol = dt == HD_F16 ? 2e-3 : 1e-2;
                    hd_jit_stats st;
                    CHECK_MSG(check_body_tol(ctx, what, red_body, &x, 1, 1, &c, tol, &st), "%s",
                              what);
                    CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
                    hd_tensor_unref(x);
                }
        }
}

/* op(x, y) for mse, else red_body's op(exp(x) * 0.5 - x) over all of x */
static hd_status split_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const red_case *c = ud;
    if (c->op == HD_OP_MSE) return hd_op_run(ctx, HD_OP_MSE, in, 2, NULL, out);
    return red_body(ctx, in, out, ud);
}

/* Reductions to one element of 2^18 + 37 elements and more run in parts
 * on the context's threads (hd_llvm_reduce.c): on 1, 2, 3 and 5 threads (parts
 * of uneven lengths), against eager; prod of values near 1; NaN in the
 * last part of a max and in the first part of a min sticks. */
static void test_split_reductions(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_SUM, HD_OP_MEAN, HD_OP_MAX, HD_OP_MIN, HD_OP_PROD, HD_OP_MSE};
    static const int threads[] = {1, 2, 3, 5};
    int64_t n = ((int64_t)1 << 18) + 37;
    hd_tensor *x = make(ctx, HD_F32, &n, 1, 0.3), *y = make(ctx, HD_F32, &n, 1, 0.2);
    hd_tensor *near1 = hd_tensor_new(ctx, HD_F32, &n, 1);
    for (int64_t i = 0; i < n; i++)
        ((float *)near1->storage->data)[i] = 1.0f + (float)((i % 7) - 3) * 1e-6f;
    int saved = ctx->nthreads;
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        ctx->nthreads = threads[t];
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
            red_case c = {ops[o], 0, 0, 0, ops[o] != HD_OP_PROD && ops[o] != HD_OP_MSE, {0}};
            hd_tensor *in[2] = {ops[o] == HD_OP_PROD ? near1 : x, y};
            char what[64];
            snprintf(what, sizeof what, "split %s, %d threads", hd_op_name(ops[o]), threads[t]);
            CHECK_MSG(check_body_tol(ctx, what, split_body, in, ops[o] == HD_OP_MSE ? 2 : 1, 1, &c,
                                     2e-6, NULL),
                      "%s", what);
        }
        float *xd = x->storage->data;
        for (int k = 0; k < 2; k++) { /* NaN in the last part (max), the first (min) */
            int64_t at = k ? 5 : n - 3;
            float was = xd[at];
            xd[at] = NAN;
            red_case c = {k ? HD_OP_MIN : HD_OP_MAX, 0, 0, 0, 0, {0}};
            char what[64];
            snprintf(what, sizeof what, "split %s with NaN, %d threads", k ? "min" : "max",
                     threads[t]);
            CHECK_MSG(check_body_tol(ctx, what, split_body, &x, 1, 1, &c, 0, NULL), "%s", what);
            xd[at] = was;
        }
    }
    ctx->nthreads = saved;
    hd_tensor_unref(x);
    hd_tensor_unref(y);
    hd_tensor_unref(near1);
}

typedef struct nn_case {
    hd_op op;
    int64_t axis;
    int affine;
} nn_case;

static hd_status nn_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const nn_case *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = c->axis;
    at.scalar[0] = 1e-5;
    hd_tensor *t = NULL;
    hd_status st = op1(ctx, HD_OP_SIN, in[0], NULL, &t); /* a producer in another kernel */
    if (!st)
        st = hd_op_run(ctx, c->op, (hd_tensor *[]){t, in[1], in[2]}, c->affine ? 3 : 1, &at, out);
    hd_tensor_unref(t);
    return st;
}

/* reductions over leading axes walk rows in order (tiles of columns):
 * several tiles, rows not a multiple of 4, split across threads */
static void test_vertical_reductions(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_SUM,  HD_OP_MEAN, HD_OP_MAX, HD_OP_MIN,
                                HD_OP_PROD, HD_OP_VAR,  HD_OP_STD, HD_OP_LOGSUMEXP};
    int64_t shapes[][3] = {{37, 40, 1}, {70, 1100, 1}, {6, 5, 300}, {3, 9, 1030}, {0, 40, 1}};
    int nd[] = {2, 2, 3, 3, 2};
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
        for (int sh = 0; sh < 5; sh++)
            for (int d = 2; d < 4; d++) {
                if (sh == 4 &&
                    (ops[o] == HD_OP_MAX || ops[o] == HD_OP_MIN || ops[o] == HD_OP_LOGSUMEXP))
                    continue; /* no value over an empty axis */
                red_case c;
                memset(&c, 0, sizeof c);
                c.op = ops[o];
                c.naxes = sh == 3 ? 2 : 1;
                c.axes[0] = 0;
                c.axes[1] = 1;
                c.keepdim = sh % 2;
                c.correction = 1;
                c.prologue = (sh + (int)o) % 2;
                hd_tensor *x = make(ctx, all_dtypes[d], shapes[sh], nd[sh], 0.3);
                char what[80];
                snprintf(what, sizeof what, "vertical %s %s shape %d", hd_op_name(ops[o]),
                         hd_dtype_name(all_dtypes[d]), sh);
                double tol = all_dtypes[d] == HD_F64 ? 1e-12 : 1e-5;
                CHECK_MSG(check_body_tol(ctx, what, red_body, &x, 1, 1, &c, tol, NULL), "%s", what);
                hd_tensor_unref(x);
            }
}

static void check_rows(hd_ctx *ctx, const nn_case *c, hd_dtype dt, const int64_t *sx, int nd) {
    int two = c->op == HD_OP_LAYER_NORM && c->axis == 2;
    const int64_t *sw = sx + nd - (two ? 2 : 1);
    hd_tensor *in[3] = {make(ctx, dt, sx, nd, 3.0), make(ctx, dt, sw, two ? 2 : 1, 1.0),
                        make(ctx, dt, sw, two ? 2 : 1, 0.5)};
    char what[80];
    snprintf(what, sizeof what, "%s %s [%lld, %lld, ...] axis %lld affine %d", hd_op_name(c->op),
             hd_dtype_name(dt), (long long)sx[0], (long long)sx[1], (long long)c->axis, c->affine);
    /* f64: 1e-12 as randgraph (sums in another order, and near-zero outputs
     * of layer_norm cancel) */
    double tol = dt == HD_F64 ? 1e-12 : dt == HD_F32 ? 1e-6 : dt == HD_F16 ? 2e-3 : 1e-2;
    hd_jit_stats st;
    CHECK_MSG(check_body_tol(ctx, what, nn_body, in, 3, 1, (void *)c, tol, &st), "%s", what);
    CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
    for (int k = 0; k < 3; k++) hd_tensor_unref(in[k]);
}

/* rows along the last axis (vector lanes within a row) and along leading
 * axes (a vector of rows at a time, the rest one by one) */
static void test_rows(hd_ctx *ctx) {
    static const nn_case cases[] = {{HD_OP_SOFTMAX, -1, 0},    {HD_OP_SOFTMAX, 0, 0},
                                    {HD_OP_SOFTMAX, 1, 0},     {HD_OP_LOG_SOFTMAX, 2, 0},
                                    {HD_OP_LOG_SOFTMAX, 1, 0}, {HD_OP_LAYER_NORM, 1, 0},
                                    {HD_OP_LAYER_NORM, 2, 1},  {HD_OP_LAYER_NORM, 1, 1}};
    int64_t sx[3] = {4, 6, 19}, sy[3] = {37, 70, 33};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int d = 0; d < 4; d++) {
            check_rows(ctx, &cases[i], all_dtypes[d], sx, 3);
            if (cases[i].axis < 2) check_rows(ctx, &cases[i], all_dtypes[d], sy, 2);
        }
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    setenv("HODU_CACHE_DIR", "off", 1);
    test_softmax_bwd(&ctx);
    test_argmax(&ctx);
    test_mse(&ctx);
    test_layer_norm_bwd(&ctx);
    test_vmath_reductions(&ctx);
    test_reductions(&ctx);
    test_vertical_reductions(&ctx);
    test_rows(&ctx);
    test_split_reductions(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}

#endif /* HODU_HAVE_LLVM */
