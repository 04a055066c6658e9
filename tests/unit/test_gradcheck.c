/* Gradient check: for every op with a gradient rule, the analytic gradient
 * (backward) against central finite differences in f64, for every float
 * input, on random inputs, broadcasting shapes and non-contiguous views.
 * The table is checked against the op table: a differentiable op without a
 * case here fails the test. */
#include "hd_test.h"
#include "hd_test_spec.h"
#include "hd_autograd.h"

/* ---- cases: inputs as hd_test_spec.h describes them ---- */

typedef struct {
    hd_op op;
    const char *in[4];
    void (*set)(hd_attrs *);
    unsigned nodiff;                 /* float inputs left constant */
    double eps, tol;                 /* 0: 1e-6 and 1e-6 */
    void (*fill)(hd_tensor **, int); /* adjust generated values, or NULL */
    int sym; /* input 0 enters as (x + x^T) / 2: ops that read one triangle */
    /* a gauge-invariant function of the result, checked in its place (the
     * singular and eigenvectors are defined up to sign), or NULL */
    hd_tensor *(*post)(hd_ctx *, const hd_tensor *x, hd_tensor *y);
} gc_case;

/* ---- the check ---- */

static hd_tensor *gc_op(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, const hd_attrs *at) {
    hd_tensor *in[2] = {a, b}, *y = NULL;
    if (!a || (op != HD_OP_PERMUTE && op != HD_OP_RESHAPE && op != HD_OP_SLICE && !b)) return NULL;
    hd_status st = hd_op_run(ctx, op, in, b ? 2 : 1, at, &y);
    return st ? NULL : y;
}

/* (x + x^T) / 2 of a square x */
static hd_tensor *gc_sym(hd_ctx *ctx, hd_tensor *x) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2, at.shape[0] = 1, at.shape[1] = 0;
    hd_tensor *t = gc_op(ctx, HD_OP_PERMUTE, x, NULL, &at);
    hd_tensor *s = gc_op(ctx, HD_OP_ADD, x, t, NULL), *h = hd_tensor_number(ctx, HD_F64, 0.5);
    hd_tensor *r = gc_op(ctx, HD_OP_MUL, s, h, NULL);
    hd_tensor_unref(t), hd_tensor_unref(s), hd_tensor_unref(h);
    return r;
}

/* y = op(in) (then c->post of it) */
static hd_status gc_forward(hd_ctx *ctx, const gc_case *c, hd_tensor **in, int nin, hd_attrs *at,
                            hd_tensor **y) {
    hd_tensor *use[4] = {in[0], in[1], in[2], in[3]}, *s = c->sym ? gc_sym(ctx, in[0]) : NULL;
    if (c->sym) use[0] = s;
    hd_status st = c->sym && !s ? HD_ERR_RUNTIME : hd_op_run(ctx, c->op, use, nin, at, y);
    hd_tensor_unref(s);
    if (st || !c->post) return st;
    hd_tensor *p = c->post(ctx, in[0], *y);
    hd_tensor_unref(*y);
    *y = p;
    return p ? HD_OK : HD_ERR_RUNTIME;
}

/* sum(op(in) * r), computed with gradients off. */
static double gc_objective(hd_ctx *ctx, const gc_case *c, hd_tensor **in, int nin, hd_attrs *at,
                           hd_tensor *r) {
    int was = hd_grad_set_enabled(ctx, 0);
    hd_tensor *y = NULL;
    ctx->rng_offset = 777; /* dropout: the same mask every time */
    hd_status st = gc_forward(ctx, c, in, nin, at, &y);
    hd_grad_set_enabled(ctx, was);
    if (st) return NAN;
    double s = 0;
    for (int64_t i = 0; i < y->numel; i++) s += hd_tensor_get(y, i) * hd_tensor_get(r, i);
    hd_tensor_unref(y);
    return s;
}

static int is_diff(const gc_case *c, hd_tensor *t, int i) {
    return !t->number && hd_dtype_is_float(t->dtype) && !(c->nodiff & (1u << i));
}

/* Analytic gradients for every differentiable input: backward of op(in)
 * with grad = r. Returns 0 on failure (reported). */
static int gc_analytic(hd_ctx *ctx, const gc_case *c, hd_tensor **in, int nin, hd_attrs *at,
                       hd_tensor **r) {
    hd_tensor *y = NULL;
    ctx->rng_offset = 777;
    if (gc_forward(ctx, c, in, nin, at, &y)) {
        CHECK_MSG(0, "%s forward: %s", hd_op_name(c->op), hd_error_message(ctx));
        return 0;
    }
    *r = hd_tensor_new(ctx, y->dtype, y->shape, y->ndim);
    for (int64_t i = 0; i < y->numel; i++)
        hd_dtype_store(y->dtype, (*r)->storage->data, i, -1 + 2 * spec_uniform());
    hd_status st = hd_grad_backward(ctx, y, *r, 0);
    CHECK_MSG(st == HD_OK, "%s backward: %s", hd_op_name(c->op), hd_error_message(ctx));
    hd_tensor_unref(y);
    return st == HD_OK;
}

/* Compare input i's analytic gradient with finite differences. */
static void gc_compare(hd_ctx *ctx, const gc_case *c, int ci, hd_tensor **in, int nin, hd_attrs *at,
                       hd_tensor *r, int i) {
    double eps = c->eps ? c->eps : 1e-6, tol = c->tol ? c->tol : 1e-6;
    hd_tensor *t = in[i], *g = hd_grad_get(t);
    CHECK_MSG(g != NULL, "case %d (%s): input %d got no gradient", ci, hd_op_name(c->op), i);
    if (!g) return;
    CHECK_MSG(g->ndim == t->ndim && g->dtype == t->dtype, "case %d: grad shape/dtype", ci);
    int bad = 0;
    for (int64_t e = 0; e < t->numel && bad < 3; e++) {
        int64_t off = hd_tensor_elem_offset(t, e);
        double v = hd_dtype_load(t->dtype, t->storage->data, off);
        hd_dtype_store(t->dtype, t->storage->data, off, v + eps);
        double lp = gc_objective(ctx, c, in, nin, at, r);
        hd_dtype_store(t->dtype, t->storage->data, off, v - eps);
        double lm = gc_objective(ctx, c, in, nin, at, r);
        hd_dtype_store(t->dtype, t->storage->data, off, v);
        double fd = (lp - lm) / (2 * eps), an = hd_tensor_get(g, e);
        if (!hd_test_close(an, fd, tol, tol)) {
            bad++;
            CHECK_MSG(0, "case %d (%s) input %d element %lld: analytic %.10g, numeric %.10g", ci,
                      hd_op_name(c->op), i, (long long)e, an, fd);
        }
    }
    if (!bad) CHECK(1);
}

/* linalg's cases need LAPACK, which a build without OpenBLAS lacks */
static int gc_skipped(hd_ctx *ctx, const gc_case *c) {
    static int lapack = -1;
    if (hd_op_infos[c->op].kind != HD_KIND_LINALG) return 0;
    if (lapack < 0) {
        int64_t one[2] = {1, 1};
        hd_tensor *p = hd_tensor_zeros(ctx, HD_F64, one, 2), *q = NULL;
        lapack = !(hd_op_run(ctx, HD_OP_LINALG_DET, &p, 1, NULL, &q) &&
                   strstr(hd_error_message(ctx), "needs LAPACK"));
        if (!lapack) printf("linalg cases skipped: %s\n", hd_error_message(ctx));
        hd_tensor_unref(p), hd_tensor_unref(q);
    }
    return !lapack;
}

static void gc_run(hd_ctx *ctx, const gc_case *c, int ci) {
    if (gc_skipped(ctx, c)) return;
    hd_tensor *in[4] = {NULL, NULL, NULL, NULL};
    int nin = 0;
    while (nin < 4 && c->in[nin]) {
        in[nin] = spec_input(ctx, c->in[nin], HD_F64);
        nin++;
    }
    if (c->fill) c->fill(in, nin);
    for (int i = 0; i < nin; i++)
        if (is_diff(c, in[i], i)) CHECK(hd_grad_set_requires(ctx, in[i], 1) == HD_OK);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (c->set) c->set(&at);
    hd_tensor *r = NULL;
    if (gc_analytic(ctx, c, in, nin, &at, &r))
        for (int i = 0; i < nin; i++)
            if (is_diff(c, in[i], i)) gc_compare(ctx, c, ci, in, nin, &at, r, i);
    hd_tensor_unref(r);
    for (int i = 0; i < nin; i++) hd_tensor_unref(in[i]);
    CHECK_MSG(hd_grad_record_count(ctx) == 0, "case %d (%s): records left", ci, hd_op_name(c->op));
}

/* ---- second derivatives: backward(create_graph = true) ---- */

/* sum over the differentiable inputs of sum(.grad * v), with the grads'
 * own history when create (else a plain number); the .grads are cleared */
static hd_tensor *gg_dot(hd_ctx *ctx, const gc_case *c, hd_tensor **in, int nin, hd_tensor **v) {
    hd_tensor *acc = NULL;
    for (int i = 0; i < nin; i++) {
        if (!is_diff(c, in[i], i)) continue;
        hd_tensor *g = hd_grad_get(in[i]);
        if (!g) continue;
        hd_tensor *gv = gc_op(ctx, HD_OP_MUL, g, v[i], NULL), *s = NULL;
        hd_attrs at;
        memset(&at, 0, sizeof at);
        if (gv) hd_op_run(ctx, HD_OP_SUM, &gv, 1, &at, &s);
        hd_tensor_unref(gv);
        hd_tensor *t = acc ? gc_op(ctx, HD_OP_ADD, acc, s, NULL) : hd_tensor_ref(s);
        hd_tensor_unref(acc), hd_tensor_unref(s);
        acc = t;
        hd_grad_set(ctx, in[i], NULL);
    }
    return acc;
}

/* the first-order <grad, v> at the current inputs (no create) */
static double gg_first(hd_ctx *ctx, const gc_case *c, hd_tensor **in, int nin, hd_attrs *at,
                       hd_tensor *r, hd_tensor **v) {
    hd_tensor *y = NULL;
    ctx->rng_offset = 777;
    if (gc_forward(ctx, c, in, nin, at, &y)) return NAN;
    hd_status st = hd_grad_backward(ctx, y, r, 0);
    hd_tensor_unref(y);
    int was = hd_grad_set_enabled(ctx, 0);
    hd_tensor *d = st ? NULL : gg_dot(ctx, c, in, nin, v);
    hd_grad_set_enabled(ctx, was);
    double out = d ? hd_tensor_get(d, 0) : NAN;
    hd_tensor_unref(d);
    return out;
}

/* d/dx <grad(x), v> by backward through backward, against central
 * differences of the first-order gradient. Rules that run a backward
 * kernel without a gradient must say so (and are counted). */
static int gc_gradgrad(hd_ctx *ctx, const gc_case *c, int ci) {
    if (gc_skipped(ctx, c)) return 1;
    hd_tensor *in[4] = {NULL, NULL, NULL, NULL}, *v[4] = {NULL, NULL, NULL, NULL};
    int nin = 0, supported = 0;
    while (nin < 4 && c->in[nin]) in[nin] = spec_input(ctx, c->in[nin], HD_F64), nin++;
    if (c->fill) c->fill(in, nin);
    for (int i = 0; i < nin; i++)
        if (is_diff(c, in[i], i)) {
            CHECK(hd_grad_set_requires(ctx, in[i], 1) == HD_OK);
            v[i] = hd_tensor_new(ctx, HD_F64, in[i]->shape, in[i]->ndim);
            for (int64_t e = 0; e < v[i]->numel; e++)
                hd_dtype_store(HD_F64, v[i]->storage->data, e, -1 + 2 * spec_uniform());
        }
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (c->set) c->set(&at);
    hd_tensor *y = NULL, *r = NULL;
    ctx->rng_offset = 777;
    if (gc_forward(ctx, c, in, nin, &at, &y)) goto done;
    r = hd_tensor_new(ctx, y->dtype, y->shape, y->ndim);
    for (int64_t i = 0; i < y->numel; i++)
        hd_dtype_store(y->dtype, r->storage->data, i, -1 + 2 * spec_uniform());
    hd_status st = hd_grad_backward_create(ctx, y, r);
    hd_tensor_unref(y);
    if (st) {
        CHECK_MSG(strstr(hd_error_message(ctx), "no gradient of its own") != NULL ||
                      strstr(hd_error_message(ctx), "no second derivative") != NULL,
                  "case %d (%s): %s", ci, hd_op_name(c->op), hd_error_message(ctx));
        if (getenv("GC_VERBOSE")) printf("no second derivative: %s\n", hd_op_name(c->op));
        for (int i = 0; i < nin; i++)
            if (in[i]) hd_grad_set(ctx, in[i], NULL);
        goto done;
    }
    supported = 1;
    hd_tensor *d = gg_dot(ctx, c, in, nin, v);
    if (d && hd_grad_requires(ctx, d)) CHECK(hd_grad_backward(ctx, d, NULL, 0) == HD_OK);
    hd_tensor_unref(d);
    hd_tensor *hs[4] = {NULL, NULL, NULL, NULL}; /* none: the second derivative is zero */
    for (int j = 0; j < nin; j++) {
        if (!is_diff(c, in[j], j)) continue;
        hs[j] = hd_grad_get(in[j]) ? hd_tensor_ref(hd_grad_get(in[j])) : NULL;
        hd_grad_set(ctx, in[j], NULL);
    }
    for (int j = 0; j < nin; j++) {
        if (!is_diff(c, in[j], j)) continue;
        hd_tensor *t = in[j], *h = hs[j];
        int bad = 0;
        for (int64_t e = 0; e < t->numel && bad < 2; e++) {
            int64_t off = hd_tensor_elem_offset(t, e);
            double x0 = hd_dtype_load(t->dtype, t->storage->data, off), eps = 1e-5;
            hd_dtype_store(t->dtype, t->storage->data, off, x0 + eps);
            double lp = gg_first(ctx, c, in, nin, &at, r, v);
            hd_dtype_store(t->dtype, t->storage->data, off, x0 - eps);
            double lm = gg_first(ctx, c, in, nin, &at, r, v);
            hd_dtype_store(t->dtype, t->storage->data, off, x0);
            double fd = (lp - lm) / (2 * eps), an = h ? hd_tensor_get(h, e) : 0.0;
            if (!hd_test_close(an, fd, 1e-4, 1e-4)) {
                bad++;
                CHECK_MSG(0,
                          "case %d (%s) second derivative, input %d element %lld: %.10g vs %.10g",
                          ci, hd_op_name(c->op), j, (long long)e, an, fd);
            }
        }
        if (!bad) CHECK(1);
        hd_tensor_unref(h);
    }
done:
    hd_tensor_unref(r);
    for (int i = 0; i < nin; i++) hd_tensor_unref(in[i]), hd_tensor_unref(v[i]);
    CHECK_MSG(hd_grad_record_count(ctx) == 0,
              "case %d (%s): records left after the second "
              "derivative",
              ci, hd_op_name(c->op));
    return supported;
}

/* ---- attributes ---- */

SET(ax0, a->naxes = 1; a->axes[0] = 0)
SET(ax1k, a->naxes = 1; a->axes[0] = 1; a->keepdim = 1)
SET(ax_m1, a->naxes = 1; a->axes[0] = -1)
SET(ax02, a->naxes = 2; a->axes[0] = 0; a->axes[1] = 2)
SET(var_c1, a->ints[0] = 1)
SET(var_c0_ax1, a->ints[0] = 0; a->naxes = 1; a->axes[0] = 1)
SET(clamp_both, a->scalar[0] = -0.5; a->scalar[1] = 0.7)
SET(clamp_lo, a->scalar[0] = -0.5; a->scalar[1] = NAN)
SET(sh_3x4, a->nshape = 2; a->shape[0] = 3; a->shape[1] = 4)
SET(sh_m1x2, a->nshape = 2; a->shape[0] = -1; a->shape[1] = 2)
SET(exp_m1, a->nshape = 3; a->shape[0] = 2; a->shape[1] = -1; a->shape[2] = 4)
SET(axism1, a->ints[0] = -1)
SET(axis1_rev, a->ints[0] = 1; a->ints[1] = 1)
SET(drop_train, a->scalar[0] = 0.3; a->ints[0] = 1)
SET(drop_eval, a->scalar[0] = 0.3; a->ints[0] = 0)
/* a backward kernel's attrs.shape: the forward input's or weight's */
static void shape4(hd_attrs *a, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    a->nshape = 4;
    a->shape[0] = d0, a->shape[1] = d1, a->shape[2] = d2, a->shape[3] = d3;
}
SET(conv_a_in, conv_a(a); shape4(a, 2, 4, 5, 7))
SET(conv_a_w, conv_a(a); shape4(a, 6, 2, 3, 3))
SET(conv_s2_in, conv_s2(a); shape4(a, 1, 2, 5, 5))
SET(conv_s2_w, conv_s2(a); shape4(a, 3, 2, 3, 3))
SET(pool_2_in, pool_2(a); shape4(a, 2, 3, 4, 6))
SET(pool_3s2p1_in, pool_3s2p1(a); shape4(a, 1, 2, 5, 5))
SET(drop_bwd, a->scalar[0] = 0.3; a->ints[1] = 12345; a->ints[2] = 7)
SET(index_add_5x3, a->ints[0] = 0; a->nshape = 2; a->shape[0] = 5; a->shape[1] = 3)

/* ---- value adjustments ---- */

/* mod: a = b * (k + frac), frac in [0.2, 0.8], so a / b is away from
 * integers where the result jumps */
static void fill_mod(hd_tensor **in, int nin) {
    HD_UNUSED(nin);
    hd_tensor *a = in[0], *b = in[1];
    for (int64_t i = 0; i < a->numel; i++) {
        double bv = hd_tensor_get(b, b->numel == a->numel ? i : i % b->numel);
        double q = floor(spec_uniform() * 5) - 2 + 0.2 + 0.6 * spec_uniform();
        hd_dtype_store(a->dtype, a->storage->data, hd_tensor_elem_offset(a, i), bv * q);
    }
}

/* prod over axis 1 of [4, 3]: a row with no zero, one zero, two zeros */
/* layer_norm rows of small variance (x / 20), where the default epsilon
 * (scalar[0] = 0 means 1e-5) moves the result by about 1e-3 relative: a
 * formula that read the 0 itself would be caught */
static void fill_small_var(hd_tensor **in, int nin) {
    HD_UNUSED(nin);
    hd_tensor *t = in[0];
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t off = hd_tensor_elem_offset(t, i);
        hd_dtype_store(t->dtype, t->storage->data, off,
                       hd_dtype_load(t->dtype, t->storage->data, off) / 20);
    }
}

static void fill_prod_zeros(hd_tensor **in, int nin) {
    HD_UNUSED(nin);
    hd_tensor *t = in[0];
    int64_t zeros[] = {3, 6, 8}; /* row 1: one zero; row 2: two */
    for (int k = 0; k < 3; k++)
        hd_dtype_store(t->dtype, t->storage->data, hd_tensor_elem_offset(t, zeros[k]), 0.0);
}

/* cumprod along the rows of [2, 6]: row 0 one zero inside, row 1 two
 * zeros (one of them first) */
static void fill_scan_zeros(hd_tensor **in, int nin) {
    HD_UNUSED(nin);
    hd_tensor *t = in[0];
    int64_t zeros[] = {2, 6, 9};
    for (int k = 0; k < 3; k++)
        hd_dtype_store(t->dtype, t->storage->data, hd_tensor_elem_offset(t, zeros[k]), 0.0);
}

/* negative divisors for mod */
static void fill_neg_b(hd_tensor **in, int nin) {
    HD_UNUSED(nin);
    hd_tensor *b = in[1];
    for (int64_t i = 0; i < b->numel; i++) {
        int64_t off = hd_tensor_elem_offset(b, i);
        hd_dtype_store(b->dtype, b->storage->data, off,
                       -hd_dtype_load(b->dtype, b->storage->data, off));
    }
    fill_mod(in, nin);
}

/* a well-conditioned matrix (or batch): the diagonal raised by 2n */
static void fill_diag(hd_tensor **in, int nin) {
    HD_UNUSED(nin);
    hd_tensor *t = in[0];
    int64_t n = t->shape[t->ndim - 1];
    for (int64_t i = 0; i < t->numel; i++)
        if (i % n == (i / n) % n) {
            int64_t off = hd_tensor_elem_offset(t, i);
            double v = hd_dtype_load(t->dtype, t->storage->data, off);
            hd_dtype_store(t->dtype, t->storage->data, off, v + 2.0 * (double)n);
        }
}

/* elements [off, off + len) of packed y's last dim, shaped r x c */
static hd_tensor *gc_part(hd_ctx *ctx, hd_tensor *y, int64_t off, int64_t len, int64_t r,
                          int64_t c) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.step[0] = 1, at.start[0] = off, at.len[0] = len;
    hd_tensor *s = gc_op(ctx, HD_OP_SLICE, y, NULL, &at);
    memset(&at, 0, sizeof at);
    at.nshape = 2, at.shape[0] = r, at.shape[1] = c;
    hd_tensor *t = gc_op(ctx, HD_OP_RESHAPE, s, NULL, &at);
    hd_tensor_unref(s);
    return t;
}

/* L diag(w + w^2) R: invariant under the sign of each pair of vectors */
static hd_tensor *gc_sandwich(hd_ctx *ctx, hd_tensor *l, hd_tensor *w, hd_tensor *r) {
    hd_tensor *w2 = gc_op(ctx, HD_OP_MUL, w, w, NULL), *f = gc_op(ctx, HD_OP_ADD, w, w2, NULL);
    hd_tensor *lf = gc_op(ctx, HD_OP_MUL, l, f, NULL), *y = gc_op(ctx, HD_OP_MATMUL, lf, r, NULL);
    hd_tensor_unref(w2), hd_tensor_unref(f), hd_tensor_unref(lf);
    return y;
}

/* svd [U | S | Vh] (reduced) -> U diag(S + S^2) Vh */
static hd_tensor *post_svd(hd_ctx *ctx, const hd_tensor *x, hd_tensor *y) {
    int64_t m = x->shape[0], n = x->shape[1], k = HD_MIN(m, n);
    hd_tensor *u = gc_part(ctx, y, 0, m * k, m, k), *s = gc_part(ctx, y, m * k, k, 1, k);
    hd_tensor *vh = gc_part(ctx, y, m * k + k, k * n, k, n);
    hd_tensor *r = gc_sandwich(ctx, u, s, vh);
    hd_tensor_unref(u), hd_tensor_unref(s), hd_tensor_unref(vh);
    return r;
}

/* eigh [w | V] -> V diag(w + w^2) V^T */
static hd_tensor *post_eigh(hd_ctx *ctx, const hd_tensor *x, hd_tensor *y) {
    int64_t n = x->shape[0];
    hd_tensor *w = gc_part(ctx, y, 0, n, 1, n), *v = gc_part(ctx, y, n, n * n, n, n);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2, at.shape[0] = 1, at.shape[1] = 0;
    hd_tensor *vt = gc_op(ctx, HD_OP_PERMUTE, v, NULL, &at);
    hd_tensor *r = gc_sandwich(ctx, v, w, vt);
    hd_tensor_unref(w), hd_tensor_unref(v), hd_tensor_unref(vt);
    return r;
}

SET(svd_full, a->ints[0] = 1)
SET(poly_1, a->scalar[0] = 1)
SET(poly_3, a->scalar[0] = 3)

/* ---- the table ---- */

static const gc_case gc_cases[] = {
    /* elementwise, one input */
    {.op = HD_OP_NEG, .in = {"n:3x4:t"}},
    {.op = HD_OP_ABS, .in = {"a:3x4"}},
    {.op = HD_OP_EXP, .in = {"n:3x4:s"}},
    {.op = HD_OP_LOG, .in = {"p:3x4"}},
    {.op = HD_OP_SQRT, .in = {"p:3x4"}},
    {.op = HD_OP_RSQRT, .in = {"p:3x4:t"}},
    {.op = HD_OP_SIN, .in = {"n:3x4"}},
    {.op = HD_OP_COS, .in = {"n:3x4"}},
    {.op = HD_OP_TANH, .in = {"n:3x4"}},
    {.op = HD_OP_SIGMOID, .in = {"n:3x4:s"}},
    {.op = HD_OP_RELU, .in = {"a:3x4"}},
    {.op = HD_OP_GELU, .in = {"n:3x4:t"}},
    {.op = HD_OP_SILU, .in = {"n:3x4"}},
    {.op = HD_OP_SOFTPLUS, .in = {"n:3x4"}},
    {.op = HD_OP_ERF, .in = {"n:3x4"}},
    {.op = HD_OP_ERF, .in = {"n:4x3:t"}},
    {.op = HD_OP_ERFC, .in = {"n:3x4:s"}},
    {.op = HD_OP_LGAMMA, .in = {"p:3x4"}},
    {.op = HD_OP_LGAMMA, .in = {"f:4x3:t"}},
    {.op = HD_OP_POLYGAMMA, .in = {"p:3x4"}},
    {.op = HD_OP_POLYGAMMA, .in = {"f:3x4:s"}, .set = poly_1},
    {.op = HD_OP_POLYGAMMA, .in = {"p:4x3:t"}, .set = poly_3},
    {.op = HD_OP_SIGN, .in = {"a:3x4"}},
    {.op = HD_OP_FLOOR, .in = {"f:3x4"}},
    {.op = HD_OP_CEIL, .in = {"f:3x4"}},
    {.op = HD_OP_ROUND, .in = {"f:3x4:t"}},
    {.op = HD_OP_CLAMP, .in = {"n:4x5"}, .set = clamp_both},
    {.op = HD_OP_CLAMP, .in = {"n:4x5:s"}, .set = clamp_lo},
    {.op = HD_OP_CAST, .in = {"n:3x4:t"}, .set = to_f64},
    {.op = HD_OP_CAST, .in = {"n:3x4"}, .set = to_f32, .eps = 1e-3, .tol = 1e-3},
    {.op = HD_OP_COPY, .in = {"n:3x4:t"}},
    /* elementwise, two or three inputs, with broadcasting */
    {.op = HD_OP_ADD, .in = {"n:3x4", "n:4"}},
    {.op = HD_OP_ADD, .in = {"n:2x1x4:s", "n:3x1"}},
    {.op = HD_OP_ADD, .in = {"n:3x4", "k2.5"}},
    {.op = HD_OP_SUB, .in = {"n:3x4:t", "n:3x1"}},
    {.op = HD_OP_MUL, .in = {"n:3x4", "n:3x4:t"}},
    {.op = HD_OP_MUL, .in = {"n:2x3x4", "n:s"}},
    {.op = HD_OP_DIV, .in = {"n:3x4", "a:4"}},
    {.op = HD_OP_DIV, .in = {"n:3x4:s", "a:3x4:t"}},
    {.op = HD_OP_ATAN2, .in = {"n:3x4", "a:4"}},
    {.op = HD_OP_ATAN2, .in = {"a:3x4:t", "n:3x4:s"}},
    {.op = HD_OP_MOD, .in = {"n:3x4", "p:3x4"}, .fill = fill_mod},
    {.op = HD_OP_MOD, .in = {"n:3x4", "p:4"}, .fill = fill_neg_b},
    {.op = HD_OP_POW, .in = {"p:3x4", "n:3x4"}},
    {.op = HD_OP_POW, .in = {"p:3x4:t", "n:4"}},
    {.op = HD_OP_POW, .in = {"n:3x4", "k3"}},
    {.op = HD_OP_MAXIMUM, .in = {"n:3x4", "n:4"}},
    {.op = HD_OP_MAXIMUM, .in = {"n:3x4:t", "n:3x4"}},
    {.op = HD_OP_MINIMUM, .in = {"n:3x4", "n:3x1"}},
    {.op = HD_OP_WHERE, .in = {"b:3x4", "n:3x4", "n:4"}},
    {.op = HD_OP_WHERE, .in = {"b:4", "n:3x1", "n:3x4:t"}},
    /* reductions */
    {.op = HD_OP_SUM, .in = {"n:3x4x2"}},
    {.op = HD_OP_SUM, .in = {"n:3x4:t"}, .set = ax0},
    {.op = HD_OP_SUM, .in = {"n:3x4x2"}, .set = ax1k},
    {.op = HD_OP_MEAN, .in = {"n:3x4x2:s"}, .set = ax02},
    {.op = HD_OP_MEAN, .in = {"n:3x4"}},
    {.op = HD_OP_MAX, .in = {"n:3x4x2"}, .set = ax1k},
    {.op = HD_OP_MAX, .in = {"n:4x5:t"}},
    {.op = HD_OP_MIN, .in = {"n:4x5"}, .set = ax_m1},
    {.op = HD_OP_PROD, .in = {"p:3x4"}, .set = ax_m1},
    {.op = HD_OP_PROD, .in = {"n:4x3"}, .set = ax_m1, .fill = fill_prod_zeros},
    {.op = HD_OP_PROD, .in = {"p:2x3:t"}},
    {.op = HD_OP_VAR, .in = {"n:3x5"}, .set = var_c1},
    {.op = HD_OP_VAR, .in = {"n:3x5x2:t"}, .set = var_c0_ax1},
    {.op = HD_OP_STD, .in = {"n:4x5"}, .set = var_c1},
    {.op = HD_OP_STD, .in = {"n:3x5x2"}, .set = var_c0_ax1},
    {.op = HD_OP_LOGSUMEXP, .in = {"n:3x4"}, .set = ax1k},
    {.op = HD_OP_LOGSUMEXP, .in = {"n:3x4:s"}},
    /* matmul in all its forms */
    {.op = HD_OP_MATMUL, .in = {"n:3x4", "n:4x5"}},
    {.op = HD_OP_MATMUL, .in = {"n:3x4:t", "n:4x5:t"}},
    {.op = HD_OP_MATMUL, .in = {"n:3x4", "n:4x5:t"}},
    {.op = HD_OP_MATMUL, .in = {"n:3x4:t", "n:4x5"}},
    {.op = HD_OP_MATMUL, .in = {"n:2x3x4", "n:4x5:t"}},
    {.op = HD_OP_MATMUL, .in = {"n:4", "n:4"}},
    {.op = HD_OP_MATMUL, .in = {"n:4", "n:4x3"}},
    {.op = HD_OP_MATMUL, .in = {"n:3x4", "n:4"}},
    {.op = HD_OP_MATMUL, .in = {"n:2x3x4", "n:2x4x5"}},
    {.op = HD_OP_MATMUL, .in = {"n:2x3x4:s", "n:4x5"}},
    {.op = HD_OP_MATMUL, .in = {"n:3x4", "n:2x4x5:t"}},
    {.op = HD_OP_MATMUL, .in = {"n:2x1x3x4", "n:3x4x2"}},
    {.op = HD_OP_MATMUL, .in = {"n:4", "n:2x4x3"}},
    {.op = HD_OP_MATMUL, .in = {"n:2x3x4", "n:4"}},
    /* views */
    {.op = HD_OP_RESHAPE, .in = {"n:2x6"}, .set = sh_3x4},
    {.op = HD_OP_RESHAPE, .in = {"n:4x3:t"}, .set = sh_m1x2},
    {.op = HD_OP_PERMUTE, .in = {"n:2x3x4"}, .set = perm_201},
    {.op = HD_OP_PERMUTE, .in = {"n:3x4:s"}, .set = perm_10},
    {.op = HD_OP_EXPAND, .in = {"n:3x1"}, .set = exp_2x3x4},
    {.op = HD_OP_EXPAND, .in = {"n:3x4"}, .set = exp_m1},
    {.op = HD_OP_SLICE, .in = {"n:5x3x4"}, .set = slice_a},
    {.op = HD_OP_SLICE, .in = {"n:4x5:t"}, .set = slice_b},
    /* copies and indexing */
    {.op = HD_OP_CONCAT, .in = {"n:2x3", "n:2x1:s", "n:2x2"}, .set = axis1},
    {.op = HD_OP_CONCAT, .in = {"n:2x3:t", "n:1x3"}, .set = axis0},
    {.op = HD_OP_INDEX_SELECT, .in = {"n:5x3", "i5:7"}, .set = axis0},
    {.op = HD_OP_INDEX_SELECT, .in = {"n:3x4:t", "i4:2x3"}, .set = axis1},
    /* nn */
    {.op = HD_OP_SOFTMAX, .in = {"n:3x4"}, .set = axism1},
    {.op = HD_OP_SOFTMAX, .in = {"n:3x4x2:t"}, .set = axis1},
    {.op = HD_OP_LOG_SOFTMAX, .in = {"n:3x4"}, .set = axism1},
    {.op = HD_OP_LOG_SOFTMAX, .in = {"n:3x4x2"}, .set = axis0},
    {.op = HD_OP_CUMSUM, .in = {"n:3x4"}, .set = axis1},
    {.op = HD_OP_CUMSUM, .in = {"n:3x4x2:t"}, .set = axis0},
    {.op = HD_OP_CUMSUM, .in = {"n:3x5:s"}, .set = axis1_rev},
    {.op = HD_OP_CUMPROD, .in = {"a:3x4"}, .set = axis1},
    {.op = HD_OP_CUMPROD, .in = {"a:4x3:t"}, .set = axis0},
    {.op = HD_OP_CUMPROD, .in = {"a:2x6"}, .set = axism1, .fill = fill_scan_zeros},
    {.op = HD_OP_CROSS_ENTROPY, .in = {"n:4x5", "i5:4"}},
    {.op = HD_OP_CROSS_ENTROPY, .in = {"n:5:s", "i5:s"}},
    {.op = HD_OP_CROSS_ENTROPY, .in = {"n:5x4:t", "i4:5"}},
    {.op = HD_OP_MSE, .in = {"n:3x4", "n:4"}},
    {.op = HD_OP_MSE, .in = {"n:3x4:t", "n:3x4:s"}},
    {.op = HD_OP_CONV2D, .in = {"n:2x4x5x7", "n:6x2x3x3", "n:6"}, .set = conv_a},
    {.op = HD_OP_CONV2D, .in = {"n:2x3x4x4", "n:5x3x1x1"}, .set = conv_1},
    {.op = HD_OP_CONV2D, .in = {"n:1x3x5x4:t", "n:6x1x3x2", "n:6"}, .set = conv_dw},
    {.op = HD_OP_CONV2D, .in = {"n:1x2x5x5:s", "n:3x2x3x3", "n:3"}, .set = conv_s2},
    {.op = HD_OP_MAX_POOL2D, .in = {"n:2x3x4x6"}, .set = pool_2},
    {.op = HD_OP_MAX_POOL2D, .in = {"n:1x2x5x5:t"}, .set = pool_3s2p1},
    {.op = HD_OP_AVG_POOL2D, .in = {"n:2x3x4x6"}, .set = pool_2},
    {.op = HD_OP_AVG_POOL2D, .in = {"n:1x2x5x5"}, .set = pool_3s2p1},
    {.op = HD_OP_DROPOUT, .in = {"n:4x5"}, .set = drop_train},
    {.op = HD_OP_DROPOUT, .in = {"n:4x5:t"}, .set = drop_eval},
    {.op = HD_OP_LAYER_NORM, .in = {"n:3x4x5", "n:5", "n:5"}, .set = ln_1},
    {.op = HD_OP_LAYER_NORM, .in = {"n:3x4x5:s", "n:4x5", "n:4x5"}, .set = ln_2},
    {.op = HD_OP_LAYER_NORM, .in = {"n:3x6:t"}, .set = ln_1},
    {.op = HD_OP_LAYER_NORM, .in = {"n:3x6", "n:6", "n:6"}, .set = ln_1, .fill = fill_small_var},
    {.op = HD_OP_ATTENTION, .in = {"n:2x3x4", "n:2x5x4", "n:2x5x2"}, .set = att_plain},
    {.op = HD_OP_ATTENTION, .in = {"n:4x3:t", "n:6x3", "n:6x2:s"}, .set = att_causal},
    {.op = HD_OP_ATTENTION, .in = {"n:2x3x4", "n:2x5x4", "n:2x5x2", "n:3x5"}, .set = att_plain},
    /* v as wide as q: the fused backward (attention_bwd) */
    {.op = HD_OP_ATTENTION, .in = {"n:2x3x4", "n:2x5x4", "n:2x5x4"}, .set = att_plain},
    {.op = HD_OP_ATTENTION, .in = {"n:4x3:t", "n:6x3", "n:6x3:s"}, .set = att_causal},
    {.op = HD_OP_ATTENTION, .in = {"n:70x2", "n:300x2", "n:300x2"}, .set = att_causal},
    /* the backward kernels with a gradient of their own */
    {.op = HD_OP_SOFTMAX_BWD, .in = {"p:3x4", "n:3x4"}, .set = axis1},
    {.op = HD_OP_SOFTMAX_BWD, .in = {"p:4x3:t", "n:4x3"}, .set = axis0},
    {.op = HD_OP_LOG_SOFTMAX_BWD, .in = {"n:3x4", "n:3x4"}, .set = axism1},
    {.op = HD_OP_LOG_SOFTMAX_BWD, .in = {"n:2x5:s", "n:2x5"}, .set = axis0},
    {.op = HD_OP_GELU_BWD, .in = {"n:3x4", "n:3x4"}},
    {.op = HD_OP_GELU_BWD, .in = {"n:4x3:t", "n:4x3"}},
    {.op = HD_OP_TANH_BWD, .in = {"n:3x4", "n:3x4"}},
    {.op = HD_OP_TANH_BWD, .in = {"n:4x3:t", "n:4x3"}},
    {.op = HD_OP_SIGMOID_BWD, .in = {"n:3x4", "n:3x4"}},
    {.op = HD_OP_SIGMOID_BWD, .in = {"n:2x5:s", "n:2x5"}},
    {.op = HD_OP_CROSS_ENTROPY_BWD, .in = {"n:4x5", "i5:4", "n:s"}},
    {.op = HD_OP_CROSS_ENTROPY_BWD, .in = {"n:5", "i5:s", "n:s"}},
    {.op = HD_OP_CONV2D_BWD_INPUT, .in = {"n:2x6x5x2", "n:6x2x3x3"}, .set = conv_a_in},
    {.op = HD_OP_CONV2D_BWD_INPUT, .in = {"n:1x3x3x3:t", "n:3x2x3x3"}, .set = conv_s2_in},
    {.op = HD_OP_CONV2D_BWD_WEIGHT, .in = {"n:2x4x5x7", "n:2x6x5x2"}, .set = conv_a_w},
    {.op = HD_OP_CONV2D_BWD_WEIGHT, .in = {"n:1x2x5x5:s", "n:1x3x3x3"}, .set = conv_s2_w},
    {.op = HD_OP_AVG_POOL2D_BWD, .in = {"n:2x3x2x3"}, .set = pool_2_in},
    {.op = HD_OP_AVG_POOL2D_BWD, .in = {"n:1x2x3x3:t"}, .set = pool_3s2p1_in},
    {.op = HD_OP_DROPOUT_BWD, .in = {"n:4x5"}, .set = drop_bwd},
    /* x picks the positions: piecewise constant, no gradient in it */
    {.op = HD_OP_MAX_POOL2D_BWD, .in = {"n:2x3x4x6", "n:2x3x2x3"}, .set = pool_2, .nodiff = 1},
    {.op = HD_OP_MAX_POOL2D_BWD,
     .in = {"n:1x2x5x5:t", "n:1x2x3x3"},
     .set = pool_3s2p1,
     .nodiff = 1},
    {.op = HD_OP_MAX_POOL2D_SEL, .in = {"n:2x3x4x6", "n:2x3x4x6"}, .set = pool_2, .nodiff = 1},
    {.op = HD_OP_MAX_POOL2D_SEL,
     .in = {"n:1x2x5x5", "n:1x2x5x5:s"},
     .set = pool_3s2p1,
     .nodiff = 1},
    {.op = HD_OP_INDEX_ADD, .in = {"n:7x3", "i5:7"}, .set = index_add_5x3},
    /* linalg: well-conditioned matrices; the symmetric ones through
     * (x + x^T) / 2, the vectors through gauge-invariant functions */
    {.op = HD_OP_LINALG_INV, .in = {"n:4x4"}, .fill = fill_diag},
    {.op = HD_OP_LINALG_INV, .in = {"n:2x3x3:t"}, .fill = fill_diag},
    {.op = HD_OP_LINALG_SOLVE, .in = {"n:3x3", "n:3x2"}, .fill = fill_diag},
    {.op = HD_OP_LINALG_SOLVE, .in = {"n:2x4x4:t", "n:2x4x1"}, .fill = fill_diag},
    {.op = HD_OP_LINALG_DET, .in = {"n:4x4"}},
    {.op = HD_OP_LINALG_DET, .in = {"n:2x3x3:t"}, .fill = fill_diag},
    {.op = HD_OP_LINALG_SLOGDET, .in = {"n:4x4"}},
    {.op = HD_OP_LINALG_SLOGDET, .in = {"n:2x3x3"}, .fill = fill_diag},
    {.op = HD_OP_LINALG_CHOLESKY, .in = {"n:4x4"}, .fill = fill_diag, .sym = 1},
    {.op = HD_OP_LINALG_QR, .in = {"n:5x3"}},
    {.op = HD_OP_LINALG_QR, .in = {"n:4x4:t"}},
    {.op = HD_OP_LINALG_SVD, .in = {"n:5x3"}, .post = post_svd},
    {.op = HD_OP_LINALG_SVD, .in = {"n:3x5"}, .post = post_svd},
    {.op = HD_OP_LINALG_SVD, .in = {"n:4x4:t"}, .set = svd_full, .post = post_svd},
    {.op = HD_OP_LINALG_EIGH, .in = {"n:4x4"}, .sym = 1, .post = post_eigh},
};

#define NCASES ((int)(sizeof gc_cases / sizeof gc_cases[0]))

/* Every op with a gradient rule has a case, and only those do. */
static void test_coverage(void) {
    for (int op = 0; op < HD_OP_COUNT; op++) {
        int n = 0;
        for (int i = 0; i < NCASES; i++) n += gc_cases[i].op == (hd_op)op;
        if (hd_op_infos[op].differentiable)
            CHECK_MSG(n > 0, "%s has a gradient but no gradcheck case", hd_op_name((hd_op)op));
        else
            CHECK_MSG(n == 0, "%s has no gradient but a gradcheck case", hd_op_name((hd_op)op));
        CHECK_MSG(hd_op_infos[op].differentiable == (hd_grad_rule_of((hd_op)op) != NULL),
                  "%s: table and rules disagree", hd_op_name((hd_op)op));
    }
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.nthreads = 1;
    test_coverage();
    for (int i = 0; i < NCASES; i++) gc_run(&ctx, &gc_cases[i], i);
    int twice = 0;
    for (int i = 0; i < NCASES; i++) twice += gc_gradgrad(&ctx, &gc_cases[i], i);
    printf("second derivatives checked in %d of %d cases\n", twice, NCASES);
    CHECK_MSG(twice >= 155, "second derivatives in %d cases only", twice);
    CHECK_MSG(ctx.mem_used == 0, "%zu bytes leaked", ctx.mem_used);
    TEST_END();
}
