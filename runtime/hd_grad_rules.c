/* Gradient rules: one per HD_GRAD(name) in hd_ops.def. Each is written with
 * table ops only (forward ops and the HD_KIND_GRAD backward ops), through
 * hd_gx, so it works on any backend and a tracer records backward as
 * ordinary ops. A rule sees the record (attributes, saved tensors, input
 * shapes) and g, the gradient of the output; it returns, for each input that
 * needs one, a gradient that broadcasts to the input (backward sums it to
 * the input's shape and casts it to its dtype). Subgradients and tie rules
 * follow PyTorch. */
#include "hd_grad_rule.h"
#include "hd_backend.h"
#include "hd_trace.h"

#include <math.h>
#include <string.h>

/* ---- hd_gx: ops with a sticky error ---- */

/* With create_graph, a rule's op with a float result from tensors with
 * gradients must have a gradient itself, else the second derivative would
 * be silently zero (a comparison's bool result needs none). */
static int gx_not_differentiable(hd_gx *x, hd_op op, hd_tensor *const *in, int nin) {
    if (hd_op_infos[op].differentiable) return 0;
    for (int i = 0; i < nin; i++)
        if (hd_grad_requires(x->ctx, in[i]) && hd_dtype_is_float(in[i]->dtype)) {
            x->st = hd_error(x->ctx, HD_ERR_RUNTIME,
                             "backward(create_graph = true): the gradient of %s runs %s, which "
                             "has no gradient of its own (no second derivative through %s)",
                             hd_op_name(x->of), hd_op_name(op), hd_op_name(x->of));
            return 1;
        }
    return 0;
}

hd_tensor *hd_gx_run(hd_gx *x, hd_op op, hd_tensor *const *in, int nin, const hd_attrs *attrs) {
    if (x->st) return NULL;
    for (int i = 0; i < nin; i++)
        if (!in[i]) {
            x->st = hd_error(x->ctx, HD_ERR_RUNTIME, "internal error: %s rule lost an input",
                             hd_op_name(op));
            return NULL;
        }
    if (x->n == HD_GX_MAX) {
        x->st = hd_error(x->ctx, HD_ERR_RUNTIME, "internal error: gradient rule too long");
        return NULL;
    }
    hd_tensor *out = NULL;
    x->st = hd_op_run(x->ctx, op, in, nin, attrs, &out);
    if (x->st) return NULL;
    if (x->ctx->grad_create && hd_dtype_is_float(out->dtype) &&
        gx_not_differentiable(x, op, in, nin)) {
        hd_tensor_unref(out);
        return NULL;
    }
    x->tmp[x->n++] = out;
    return out;
}

hd_tensor *hd_gx_out(hd_gx *x, hd_tensor *t) {
    return t && !x->st ? hd_tensor_ref(t) : NULL;
}

static hd_tensor *gx_keep(hd_gx *x, hd_tensor *t) {
    if (!t) {
        if (!x->st) x->st = x->ctx->status;
        return NULL;
    }
    if (x->n == HD_GX_MAX) {
        hd_tensor_unref(t);
        x->st = hd_error(x->ctx, HD_ERR_RUNTIME, "internal error: gradient rule too long");
        return NULL;
    }
    x->tmp[x->n++] = t;
    return t;
}

/* A Hodu number: never widens the tensor it meets. */
static hd_tensor *num(hd_gx *x, double v) {
    if (x->st) return NULL;
    return gx_keep(x, hd_tensor_number(x->ctx, HD_F64, v));
}

static hd_tensor *where(hd_gx *x, hd_tensor *c, hd_tensor *a, hd_tensor *b) {
    hd_tensor *in[3] = {c, a, b};
    return hd_gx_run(x, HD_OP_WHERE, in, 3, NULL);
}

static hd_tensor *cast(hd_gx *x, hd_tensor *a, hd_dtype dt) {
    hd_attrs at = no_attrs();
    at.dtype = dt;
    return hd_gx_run(x, HD_OP_CAST, &a, 1, &at);
}

static hd_tensor *shaped(hd_gx *x, hd_op op, hd_tensor *a, const int64_t *shape, int nd) {
    hd_attrs at = no_attrs();
    at.nshape = nd;
    if (nd) memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
    return hd_gx_run(x, op, &a, 1, &at);
}

static hd_tensor *reshape(hd_gx *x, hd_tensor *a, const int64_t *shape, int nd) {
    return shaped(x, HD_OP_RESHAPE, a, shape, nd);
}

static hd_tensor *expand(hd_gx *x, hd_tensor *a, const int64_t *shape, int nd) {
    return shaped(x, HD_OP_EXPAND, a, shape, nd);
}

static hd_tensor *full(hd_gx *x, const int64_t *shape, int nd, hd_dtype dt, double v) {
    hd_attrs at = no_attrs();
    at.nshape = nd;
    if (nd) memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
    at.dtype = dt;
    at.scalar[0] = v;
    return hd_gx_run(x, HD_OP_FULL, NULL, 0, &at);
}

/* Reduce op over the dims set in mask, keeping them as size 1. */
static hd_tensor *reduce(hd_gx *x, hd_op op, hd_tensor *a, unsigned mask) {
    hd_attrs at = no_attrs();
    for (int i = 0; a && i < a->ndim; i++)
        if (mask & (1u << i)) at.axes[at.naxes++] = i;
    at.keepdim = 1;
    if (a && a->ndim > 0 && at.naxes == 0) return a; /* nothing to reduce */
    return hd_gx_run(x, op, &a, 1, &at);
}

/* Swap the last two dims (a view). */
static hd_tensor *transpose(hd_gx *x, hd_tensor *a) {
    if (!a) return hd_gx_run(x, HD_OP_PERMUTE, &a, 1, NULL);
    int64_t order[HD_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) order[i] = i;
    order[a->ndim - 1] = a->ndim - 2;
    order[a->ndim - 2] = a->ndim - 1;
    return shaped(x, HD_OP_PERMUTE, a, order, a->ndim);
}

/* formula helpers for the rules of other files (hd_grad_rule.h) */
hd_tensor *hd_gx_num(hd_gx *x, double v) {
    return num(x, v);
}
hd_tensor *hd_gx_reshape(hd_gx *x, hd_tensor *a, const int64_t *shape, int nd) {
    return reshape(x, a, shape, nd);
}
hd_tensor *hd_gx_transpose(hd_gx *x, hd_tensor *a) {
    return transpose(x, a);
}

/* ---- elementwise, one input ---- */

RULE(neg, 0) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, neg(x, g));
}

/* sign(0) = 0: no gradient at 0, as torch */
RULE(abs, SAVE_X) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, mul(x, g, un(x, HD_OP_SIGN, IN(0))));
}

RULE(exp, SAVE_Y) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, mul(x, g, OUT));
}

RULE(log, SAVE_X) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, divide(x, g, IN(0)));
}

RULE(sqrt, SAVE_Y) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, divide(x, g, mul(x, OUT, num(x, 2))));
}

/* d rsqrt(x) = -x^(-3/2) / 2 = -y^3 / 2 */
RULE(rsqrt, SAVE_Y) {
    UNUSED_RULE_ARGS();
    hd_tensor *y = OUT, *y3 = mul(x, mul(x, y, y), y);
    gin[0] = hd_gx_out(x, mul(x, g, mul(x, y3, num(x, -0.5))));
}

RULE(sin, SAVE_X) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, mul(x, g, un(x, HD_OP_COS, IN(0))));
}

RULE(cos, SAVE_X) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, neg(x, mul(x, g, un(x, HD_OP_SIN, IN(0)))));
}

/* tanh_bwd and sigmoid_bwd compute these compositions in one pass with
 * the same bits, for the dtypes their kernels have (f16 and bf16 round
 * after each op, so they keep the composition) */
static int act_bwd_fused(const hd_tensor *y, const hd_tensor *g) {
    return y && g && y->dtype == g->dtype && (y->dtype == HD_F32 || y->dtype == HD_F64);
}

RULE(tanh, SAVE_Y) {
    UNUSED_RULE_ARGS();
    hd_tensor *y = OUT;
    if (act_bwd_fused(y, g))
        gin[0] = hd_gx_out(x, bin(x, HD_OP_TANH_BWD, y, g));
    else
        gin[0] = hd_gx_out(x, mul(x, g, sub(x, num(x, 1), mul(x, y, y))));
}

RULE(sigmoid, SAVE_Y) {
    UNUSED_RULE_ARGS();
    hd_tensor *y = OUT;
    if (act_bwd_fused(y, g))
        gin[0] = hd_gx_out(x, bin(x, HD_OP_SIGMOID_BWD, y, g));
    else
        gin[0] = hd_gx_out(x, mul(x, g, mul(x, y, sub(x, num(x, 1), y))));
}

/* no gradient where the output is 0 (x <= 0), as torch */
RULE(relu, SAVE_Y) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, where(x, bin(x, HD_OP_GT, OUT, num(x, 0)), g, num(x, 0)));
}

RULE(gelu, SAVE_X) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, bin(x, HD_OP_GELU_BWD, IN(0), g));
}

/* erf'(x) = 2 / sqrt(pi) exp(-x^2); erfc' is its negation */
static hd_tensor *erf_slope(hd_gx *x, hd_tensor *a, double c) {
    return mul(x, num(x, c), un(x, HD_OP_EXP, neg(x, mul(x, a, a))));
}

RULE(erf, SAVE_X) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, mul(x, g, erf_slope(x, IN(0), 1.1283791670955125739)));
}

RULE(erfc, SAVE_X) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, mul(x, g, erf_slope(x, IN(0), -1.1283791670955125739)));
}

/* lgamma' = digamma = polygamma(0, .), polygamma(n)' = polygamma(n + 1) */
static hd_tensor *polygamma(hd_gx *x, double order, hd_tensor *a) {
    hd_attrs at = no_attrs();
    at.scalar[0] = order;
    return hd_gx_run(x, HD_OP_POLYGAMMA, &a, 1, &at);
}

RULE(lgamma, SAVE_X) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, mul(x, g, polygamma(x, 0, IN(0))));
}

RULE(polygamma, SAVE_X) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, mul(x, g, polygamma(x, n->attrs.scalar[0] + 1, IN(0))));
}

/* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
RULE(silu, SAVE_X) {
    UNUSED_RULE_ARGS();
    hd_tensor *a = IN(0), *s = un(x, HD_OP_SIGMOID, a);
    hd_tensor *d = mul(x, s, add(x, num(x, 1), mul(x, a, sub(x, num(x, 1), s))));
    gin[0] = hd_gx_out(x, mul(x, g, d));
}

/* softplus'(x) = sigmoid(x); past the threshold (20) softplus is x */
RULE(softplus, SAVE_X) {
    UNUSED_RULE_ARGS();
    hd_tensor *a = IN(0), *d = mul(x, g, un(x, HD_OP_SIGMOID, a));
    gin[0] = hd_gx_out(x, where(x, bin(x, HD_OP_GT, a, num(x, 20)), g, d));
}

/* sign, floor, ceil, round: zero almost everywhere */
RULE(zero, 0) {
    UNUSED_RULE_ARGS();
    const hd_grad_edge *e = &n->edges[0];
    gin[0] = hd_gx_out(x, full(x, e->shape, e->ndim, g->dtype, 0));
}

/* gradient where lo <= x <= hi (bounds included, as torch); NaN: no bound */
RULE(clamp, SAVE_X) {
    UNUSED_RULE_ARGS();
    double lo = n->attrs.scalar[0], hi = n->attrs.scalar[1];
    hd_tensor *r = g, *zero = num(x, 0);
    if (!isnan(lo)) r = where(x, bin(x, HD_OP_GE, IN(0), num(x, lo)), r, zero);
    if (!isnan(hi)) r = where(x, bin(x, HD_OP_LE, IN(0), num(x, hi)), r, zero);
    gin[0] = hd_gx_out(x, r);
}

/* cast and copy: the gradient passes through (backward casts it back) */
RULE(identity, 0) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, g);
}

/* ---- elementwise, two or three inputs (backward sums broadcast dims) ---- */

RULE(add, 0) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, g);
    gin[1] = hd_gx_out(x, g);
}

RULE(sub, 0) {
    HD_UNUSED(n);
    gin[0] = hd_gx_out(x, g);
    if (need[1]) gin[1] = hd_gx_out(x, neg(x, g));
}

RULE(mul, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    if (need[0]) gin[0] = hd_gx_out(x, mul(x, g, IN(1)));
    if (need[1]) gin[1] = hd_gx_out(x, mul(x, g, IN(0)));
}

/* d(a/b)/db = -(g / b) * a / b */
RULE(div, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_tensor *ga = divide(x, g, IN(1));
    if (need[0]) gin[0] = hd_gx_out(x, ga);
    if (need[1]) gin[1] = hd_gx_out(x, neg(x, divide(x, mul(x, ga, IN(0)), IN(1))));
}

/* atan2(a, b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2); at the
 * origin both are 0/0 and NaN, as PyTorch's are */
RULE(atan2, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_tensor *a = IN(0), *b = IN(1);
    hd_tensor *r = divide(x, g, add(x, mul(x, a, a), mul(x, b, b)));
    if (need[0]) gin[0] = hd_gx_out(x, mul(x, r, b));
    if (need[1]) gin[1] = hd_gx_out(x, neg(x, mul(x, r, a)));
}

/* a mod b = a - floor(a / b) * b */
RULE(mod, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    if (need[0]) gin[0] = hd_gx_out(x, g);
    if (need[1]) {
        hd_tensor *q = un(x, HD_OP_FLOOR, divide(x, IN(0), IN(1)));
        gin[1] = hd_gx_out(x, neg(x, mul(x, g, q)));
    }
}

/* torch: d/da = b a^(b-1), 0 where b == 0; d/db = y log(a), 0 where a == 0
 * and b >= 0 */
RULE(pow, SAVE_X | HD_GRAD_SAVE_IN(1) | SAVE_Y) {
    hd_tensor *a = IN(0), *b = IN(1), *zero = num(x, 0);
    if (need[0]) {
        hd_tensor *d = mul(x, b, bin(x, HD_OP_POW, a, sub(x, b, num(x, 1))));
        d = where(x, bin(x, HD_OP_EQ, b, zero), zero, d);
        gin[0] = hd_gx_out(x, mul(x, g, d));
    }
    if (need[1]) {
        hd_tensor *d = mul(x, OUT, un(x, HD_OP_LOG, a));
        hd_tensor *keep = where(x, bin(x, HD_OP_GE, b, zero), zero, d);
        d = where(x, bin(x, HD_OP_EQ, a, zero), keep, d);
        gin[1] = hd_gx_out(x, mul(x, g, d));
    }
}

/* The larger (smaller) input takes the gradient; ties split it evenly. */
static void extremum(hd_gx *x, const hd_grad_node *n, hd_tensor *g, const unsigned char *need,
                     hd_tensor **gin, hd_op wins) {
    hd_tensor *a = IN(0), *b = IN(1), *zero = num(x, 0);
    hd_tensor *tie = where(x, bin(x, HD_OP_EQ, a, b), mul(x, g, num(x, 0.5)), zero);
    if (need[0]) gin[0] = hd_gx_out(x, where(x, bin(x, wins, a, b), g, tie));
    if (need[1]) gin[1] = hd_gx_out(x, where(x, bin(x, wins, b, a), g, tie));
}

RULE(maximum, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    extremum(x, n, g, need, gin, HD_OP_GT);
}

RULE(minimum, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    extremum(x, n, g, need, gin, HD_OP_LT);
}

RULE(where, SAVE_X) {
    hd_tensor *zero = num(x, 0);
    if (need[1]) gin[1] = hd_gx_out(x, where(x, IN(0), g, zero));
    if (need[2]) gin[2] = hd_gx_out(x, where(x, IN(0), zero, g));
}

/* ---- reductions ---- */

/* The reduced dims of the record's input, as a mask. */
static unsigned reduced_mask(const hd_grad_node *n) {
    const hd_attrs *a = &n->attrs;
    int nd = n->edges[0].ndim;
    if (a->naxes == 0) return nd ? (1u << nd) - 1 : 0;
    unsigned m = 0;
    for (int i = 0; i < a->naxes; i++) {
        int64_t ax = a->axes[i] < 0 ? a->axes[i] + nd : a->axes[i];
        if (ax >= 0 && ax < nd) m |= 1u << ax;
    }
    return m;
}

/* Elements each output of the reduction covers. */
static double reduced_count(const hd_grad_node *n, unsigned mask) {
    double c = 1;
    for (int i = 0; i < n->edges[0].ndim; i++)
        if (mask & (1u << i)) c *= (double)n->edges[0].shape[i];
    return c;
}

/* t (the reduction's output or its gradient) with the reduced dims back
 * as size 1, so it broadcasts against the input. */
static hd_tensor *keepdim(hd_gx *x, const hd_grad_node *n, hd_tensor *t, unsigned mask) {
    if (n->attrs.keepdim) return t;
    int64_t shape[HD_MAX_DIMS];
    int nd = n->edges[0].ndim;
    for (int i = 0; i < nd; i++) shape[i] = (mask & (1u << i)) ? 1 : n->edges[0].shape[i];
    return reshape(x, t, shape, nd);
}

RULE(sum, 0) {
    UNUSED_RULE_ARGS();
    const hd_grad_edge *e = &n->edges[0];
    gin[0] = hd_gx_out(x, expand(x, keepdim(x, n, g, reduced_mask(n)), e->shape, e->ndim));
}

RULE(mean, 0) {
    UNUSED_RULE_ARGS();
    const hd_grad_edge *e = &n->edges[0];
    unsigned m = reduced_mask(n);
    hd_tensor *gk = divide(x, keepdim(x, n, g, m), num(x, reduced_count(n, m)));
    gin[0] = hd_gx_out(x, expand(x, gk, e->shape, e->ndim));
}

/* max/min: to every position equal to the result, split evenly (amax) */
RULE(maxmin, SAVE_X | SAVE_Y) {
    UNUSED_RULE_ARGS();
    unsigned m = reduced_mask(n);
    hd_tensor *hit = cast(x, bin(x, HD_OP_EQ, IN(0), keepdim(x, n, OUT, m)), g->dtype);
    hd_tensor *share = divide(x, keepdim(x, n, g, m), reduce(x, HD_OP_SUM, hit, m));
    gin[0] = hd_gx_out(x, mul(x, hit, share));
}

/* prod: the product of the other elements. With no zero in a group that is
 * y / x; with one zero, only the zero's position gets the product of the
 * rest; with two or more, all are 0. */
/* create_graph: the zero branches below are constants, so their second
 * derivative would be 0 where it is not (the product of the others
 * without the zero): refused where a zero is (prod's and cumprod's). */
static void prod_zero_check(hd_gx *x, hd_tensor *is0) {
    hd_tensor *c = is0 ? cast(x, is0, HD_F64) : NULL;
    hd_tensor *any = c ? hd_gx_run(x, HD_OP_MAX, &c, 1, NULL) : NULL;
    hd_tensor *h = any ? hd_tensor_to_host(x->ctx, any) : NULL;
    if (any && !h) x->st = x->ctx->status;
    if (h && hd_tensor_get(h, 0) != 0 && !x->st)
        x->st = hd_error(x->ctx, HD_ERR_RUNTIME,
                         "backward(create_graph = true): no second derivative of %s where "
                         "an element is exactly 0",
                         hd_op_name(x->of));
    hd_tensor_unref(h);
}

RULE(prod, SAVE_X) {
    UNUSED_RULE_ARGS();
    unsigned m = reduced_mask(n);
    hd_tensor *a = IN(0), *zero = num(x, 0);
    hd_tensor *is0 = bin(x, HD_OP_EQ, a, zero);
    if (x->ctx->grad_create) prod_zero_check(x, is0);
    hd_tensor *zeros = reduce(x, HD_OP_SUM, cast(x, is0, g->dtype), m);
    hd_tensor *nz = where(x, is0, num(x, 1), a);
    hd_tensor *p = reduce(x, HD_OP_PROD, nz, m);
    hd_tensor *at_zero = where(x, is0, where(x, bin(x, HD_OP_EQ, zeros, num(x, 1)), p, zero), zero);
    hd_tensor *d = where(x, bin(x, HD_OP_EQ, zeros, zero), divide(x, p, nz), at_zero);
    gin[0] = hd_gx_out(x, mul(x, keepdim(x, n, g, m), d));
}

/* d var = gk * 2 (x - mean) / (N - correction) */
static hd_tensor *var_grad(hd_gx *x, const hd_grad_node *n, hd_tensor *gk, unsigned m) {
    double dof = reduced_count(n, m) - (double)n->attrs.ints[0];
    hd_tensor *a = IN(0), *d = sub(x, a, reduce(x, HD_OP_MEAN, a, m));
    return mul(x, mul(x, gk, d), num(x, 2.0 / dof));
}

RULE(var, SAVE_X) {
    UNUSED_RULE_ARGS();
    unsigned m = reduced_mask(n);
    gin[0] = hd_gx_out(x, var_grad(x, n, keepdim(x, n, g, m), m));
}

/* d std = d var / (2 std); 0 where std is 0, as torch */
RULE(std, SAVE_X | SAVE_Y) {
    UNUSED_RULE_ARGS();
    unsigned m = reduced_mask(n);
    hd_tensor *y = keepdim(x, n, OUT, m), *zero = num(x, 0);
    hd_tensor *gv = divide(x, keepdim(x, n, g, m), mul(x, y, num(x, 2)));
    gv = where(x, bin(x, HD_OP_EQ, y, zero), zero, gv);
    gin[0] = hd_gx_out(x, var_grad(x, n, gv, m));
}

RULE(logsumexp, SAVE_X | SAVE_Y) {
    UNUSED_RULE_ARGS();
    unsigned m = reduced_mask(n);
    hd_tensor *p = un(x, HD_OP_EXP, sub(x, IN(0), keepdim(x, n, OUT, m)));
    gin[0] = hd_gx_out(x, mul(x, keepdim(x, n, g, m), p));
}

/* ---- matmul ---- */

/* Drop dim d of t (a size-1 dim) with a reshape. */
static hd_tensor *drop_dim(hd_gx *x, hd_tensor *t, int d) {
    if (!t) return NULL;
    int64_t shape[HD_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < t->ndim; i++)
        if (i != d) shape[k++] = t->shape[i];
    return reshape(x, t, shape, k);
}

/* Whether t is the transpose of a contiguous matrix: 2-D with strides
 * [1, rows] (weight.T in nn.Linear), or inside a trace the transposition
 * that stands for one, so that compiled code makes the same products. */
static int is_transposed(hd_gx *x, const hd_tensor *t) {
    if (hd_tensor_is_symbolic(t)) return hd_trace_is_transpose(x->ctx, t);
    return t->ndim == 2 && t->shape[0] > 1 && t->shape[1] > 1 && t->strides[0] == 1 &&
           t->strides[1] == t->shape[0];
}

/* p @ q for the gradient of input like: when like is a transposed view,
 * computed as (q^T @ p^T)^T, so that the gradient is a transposed view of a
 * contiguous product and, once the transposition's own rule has swapped it
 * back, reaches the matrix under the view contiguous, with no copy. */
static hd_tensor *matmul_like(hd_gx *x, hd_tensor *p, hd_tensor *q, const hd_tensor *like) {
    if (!p || !q || p->ndim != 2 || q->ndim != 2 || !is_transposed(x, like))
        return bin(x, HD_OP_MATMUL, p, q);
    return transpose(x, bin(x, HD_OP_MATMUL, transpose(x, q), transpose(x, p)));
}

/* 1-D operands are treated as [1, k] and [k, 1], g as batch + [m, n];
 * then ga = g @ b^T and gb = a^T @ g, and backward sums broadcast batch
 * dims. When b is 2-D and a has batch dims, gb folds the batch into one
 * product instead of a batched product summed afterwards. A gradient is
 * made in its input's layout when that is a transposed matrix. */
RULE(matmul, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_tensor *a = IN(0), *b = IN(1);
    int na = a->ndim, nb = b->ndim;
    int64_t k = a->shape[na - 1], m = na == 1 ? 1 : a->shape[na - 2];
    int64_t nn = nb == 1 ? 1 : b->shape[nb - 1];
    hd_tensor *a2 = na == 1 ? reshape(x, a, (int64_t[]){1, k}, 2) : a;
    hd_tensor *b2 = nb == 1 ? reshape(x, b, (int64_t[]){k, 1}, 2) : b;
    int64_t gs[HD_MAX_DIMS];
    int nbatch = g->ndim - (na > 1) - (nb > 1);
    memcpy(gs, g->shape, (size_t)nbatch * sizeof *gs);
    gs[nbatch] = m;
    gs[nbatch + 1] = nn;
    hd_tensor *g2 = reshape(x, g, gs, nbatch + 2);
    if (need[0]) {
        hd_tensor *ga = matmul_like(x, g2, transpose(x, b2), a);
        gin[0] = hd_gx_out(x, na == 1 && ga ? drop_dim(x, ga, ga->ndim - 2) : ga);
    }
    if (need[1]) {
        hd_tensor *gb;
        if (nb == 2 && na > 2) {
            hd_tensor *af = reshape(x, a, (int64_t[]){-1, k}, 2);
            gb = bin(x, HD_OP_MATMUL, transpose(x, af), reshape(x, g2, (int64_t[]){-1, nn}, 2));
        } else {
            gb = matmul_like(x, transpose(x, a2), g2, b);
        }
        gin[1] = hd_gx_out(x, nb == 1 && gb ? drop_dim(x, gb, gb->ndim - 1) : gb);
    }
}

/* ---- views and copies ---- */

RULE(reshape, 0) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, reshape(x, g, n->edges[0].shape, n->edges[0].ndim));
}

RULE(permute, 0) {
    UNUSED_RULE_ARGS();
    int nd = n->edges[0].ndim;
    int64_t inv[HD_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int64_t a = n->attrs.shape[i] < 0 ? n->attrs.shape[i] + nd : n->attrs.shape[i];
        inv[a] = i;
    }
    gin[0] = hd_gx_out(x, shaped(x, HD_OP_PERMUTE, g, inv, nd));
}

/* backward sums g over the expanded dims */
RULE(expand, 0) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, g);
}

/* cur (shape sh, nd dims) with zeros between its elements along axis d,
 * step - 1 of them: length (L - 1) * step + 1. */
static hd_tensor *spread(hd_gx *x, hd_tensor *cur, int64_t *sh, int nd, int d, int64_t step) {
    if (step == 1 || sh[d] == 0) return cur;
    if (nd == HD_MAX_DIMS) {
        x->st = hd_error(x->ctx, HD_ERR_RUNTIME,
                         "the gradient of a %d-d slice with a step is not supported inside "
                         "compiled code",
                         nd);
        return NULL;
    }
    int64_t up[HD_MAX_DIMS], zs[HD_MAX_DIMS];
    for (int i = 0, k = 0; i <= nd; i++) up[i] = i == d + 1 ? 1 : sh[k++];
    memcpy(zs, up, sizeof zs);
    zs[d + 1] = step - 1;
    hd_tensor *parts[2] = {reshape(x, cur, up, nd + 1), full(x, zs, nd + 1, cur->dtype, 0)};
    hd_attrs at = no_attrs();
    at.ints[0] = d + 1;
    cur = hd_gx_run(x, HD_OP_CONCAT, parts, 2, &at);
    int64_t len = sh[d];
    sh[d] = len * step;
    cur = reshape(x, cur, sh, nd);
    at = no_attrs();
    for (int i = 0; i < nd; i++) {
        at.step[i] = 1;
        at.len[i] = i == d ? (len - 1) * step + 1 : sh[i];
    }
    sh[d] = at.len[d];
    return hd_gx_run(x, HD_OP_SLICE, &cur, 1, &at);
}

/* cur with zeros before (before) and after it along axis d to size to. */
static hd_tensor *pad_axis(hd_gx *x, hd_tensor *cur, int64_t *sh, int nd, int d, int64_t before,
                           int64_t to) {
    hd_tensor *parts[3];
    int np = 0;
    int64_t after = to - before - sh[d], zs[HD_MAX_DIMS];
    memcpy(zs, sh, sizeof zs);
    if (before > 0) zs[d] = before, parts[np++] = full(x, zs, nd, cur->dtype, 0);
    parts[np++] = cur;
    if (after > 0) zs[d] = after, parts[np++] = full(x, zs, nd, cur->dtype, 0);
    sh[d] = to;
    if (np == 1) return cur;
    hd_attrs at = no_attrs();
    at.ints[0] = d;
    return hd_gx_run(x, HD_OP_CONCAT, parts, np, &at);
}

/* The slice's gradient without writing in place (inside compiled code a
 * write into part of a tensor cannot be traced): g with the dropped dims
 * back, spread by each step and padded with zeros to the input's shape. */
static hd_tensor *slice_bwd_pure(hd_gx *x, const hd_grad_node *n, hd_tensor *g) {
    const hd_grad_edge *e = &n->edges[0];
    const hd_attrs *a = &n->attrs;
    int nd = e->ndim;
    int64_t sh[HD_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++) sh[i] = a->len[i];
    hd_tensor *cur = reshape(x, g, sh, nd);
    for (int d = 0; d < nd && cur; d++) {
        if (a->len[d] == e->shape[d]) continue; /* the whole axis, in order */
        if (a->len[d] == 0) return full(x, e->shape, nd, g->dtype, 0);
        cur = spread(x, cur, sh, nd, d, a->step[d]);
        if (cur) cur = pad_axis(x, cur, sh, nd, d, a->start[d], e->shape[d]);
    }
    return cur;
}

/* g written into zeros at the sliced positions */
RULE(slice, 0) {
    UNUSED_RULE_ARGS();
    const hd_grad_edge *e = &n->edges[0];
    if (x->ctx->trace || x->ctx->grad_create) { /* create_graph: differentiable too */
        gin[0] = hd_gx_out(x, slice_bwd_pure(x, n, g));
        return;
    }
    hd_tensor *z = full(x, e->shape, e->ndim, g->dtype, 0);
    hd_tensor *view = hd_gx_run(x, HD_OP_SLICE, &z, 1, &n->attrs);
    hd_tensor *in[2] = {view, g};
    hd_gx_run(x, HD_OP_ASSIGN, in, 2, NULL);
    gin[0] = hd_gx_out(x, z);
}

/* each input's part of g, as a view */
RULE(concat, 0) {
    int nd = n->edges[0].ndim;
    int64_t axis = n->attrs.ints[0] < 0 ? n->attrs.ints[0] + nd : n->attrs.ints[0];
    hd_attrs at = no_attrs();
    for (int d = 0; d < nd; d++) {
        at.step[d] = 1;
        at.len[d] = g->shape[d];
    }
    int64_t off = 0;
    for (int i = 0; i < n->nin; i++) {
        at.start[axis] = off;
        at.len[axis] = n->edges[i].shape[axis];
        off += at.len[axis];
        if (need[i]) gin[i] = hd_gx_out(x, hd_gx_run(x, HD_OP_SLICE, &g, 1, &at));
    }
}

/* scatter-add g back to the selected rows */
RULE(index_select, HD_GRAD_SAVE_IN(1)) {
    UNUSED_RULE_ARGS();
    const hd_grad_edge *e = &n->edges[0];
    hd_attrs at = no_attrs();
    at.ints[0] = n->attrs.ints[0];
    at.nshape = e->ndim;
    memcpy(at.shape, e->shape, sizeof at.shape);
    hd_tensor *in[2] = {g, IN(1)};
    gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_INDEX_ADD, in, 2, &at));
}

/* ---- nn ---- */

static hd_tensor *axis_bwd(hd_gx *x, const hd_grad_node *n, hd_op op, hd_tensor *g) {
    hd_attrs at = no_attrs();
    at.ints[0] = n->attrs.ints[0];
    hd_tensor *in[2] = {OUT, g};
    return hd_gx_run(x, op, in, 2, &at);
}

RULE(softmax, SAVE_Y) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, axis_bwd(x, n, HD_OP_SOFTMAX_BWD, g));
}

RULE(log_softmax, SAVE_Y) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, axis_bwd(x, n, HD_OP_LOG_SOFTMAX_BWD, g));
}

/* the running sums from the other end: d/dx_i sum_j g_j y_j = sum_{j >= i} g_j */
RULE(cumsum, 0) {
    UNUSED_RULE_ARGS();
    hd_attrs at = no_attrs();
    at.ints[0] = n->attrs.ints[0];
    at.ints[1] = !n->attrs.ints[1];
    gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_CUMSUM, &g, 1, &at));
}

/* exact where x has zeros: no division by x (cpu_nn_tmpl.h, nn_cumprod_bwd) */
/* With the graph kept, as table ops (a gradient of its own): the sum over
 * j >= i of g_j y_j / x_i, refused where an x is 0 (as prod's). */
static void cumprod_create(hd_gx *x, const hd_grad_node *n, hd_tensor *g, hd_tensor **gin) {
    hd_tensor *a = IN(0);
    prod_zero_check(x, bin(x, HD_OP_EQ, a, num(x, 0)));
    hd_attrs at = no_attrs();
    at.ints[0] = n->attrs.ints[0];
    hd_tensor *y = hd_gx_run(x, HD_OP_CUMPROD, &a, 1, &at), *gy = mul(x, g, y);
    at.ints[1] = 1; /* from the last element back */
    gin[0] = hd_gx_out(x, divide(x, hd_gx_run(x, HD_OP_CUMSUM, &gy, 1, &at), a));
}

RULE(cumprod, SAVE_X) {
    UNUSED_RULE_ARGS();
    if (x->ctx->grad_create) {
        cumprod_create(x, n, g, gin);
        return;
    }
    hd_attrs at = no_attrs();
    at.ints[0] = n->attrs.ints[0];
    hd_tensor *in[2] = {IN(0), g};
    gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_CUMPROD_BWD, in, 2, &at));
}

/* fused and stable: g * (softmax(x) - one_hot(labels)) / N */
RULE(cross_entropy, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    UNUSED_RULE_ARGS();
    hd_tensor *in[3] = {IN(0), IN(1), g};
    gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_CROSS_ENTROPY_BWD, in, 3, NULL));
}

/* d mse / da = 2 (a - b) / N */
RULE(mse, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_tensor *d = sub(x, IN(0), IN(1));
    hd_tensor *ga = d ? mul(x, d, mul(x, g, num(x, 2.0 / (double)d->numel))) : NULL;
    if (need[0]) gin[0] = hd_gx_out(x, ga);
    if (need[1]) gin[1] = hd_gx_out(x, neg(x, ga));
}

static hd_attrs with_shape(const hd_attrs *a, const hd_grad_edge *e) {
    hd_attrs at = *a;
    at.nshape = e->ndim;
    memcpy(at.shape, e->shape, sizeof at.shape);
    return at;
}

RULE(conv2d, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    if (need[0]) {
        hd_attrs at = with_shape(&n->attrs, &n->edges[0]);
        hd_tensor *in[2] = {g, IN(1)};
        gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_CONV2D_BWD_INPUT, in, 2, &at));
    }
    if (need[1]) {
        hd_attrs at = with_shape(&n->attrs, &n->edges[1]);
        hd_tensor *in[2] = {IN(0), g};
        gin[1] = hd_gx_out(x, hd_gx_run(x, HD_OP_CONV2D_BWD_WEIGHT, in, 2, &at));
    }
    if (n->nin == 3 && need[2]) {
        hd_attrs at = no_attrs();
        at.naxes = 3;
        at.axes[0] = 0, at.axes[1] = 2, at.axes[2] = 3;
        gin[2] = hd_gx_out(x, hd_gx_run(x, HD_OP_SUM, &g, 1, &at));
    }
}

RULE(max_pool2d, SAVE_X) {
    UNUSED_RULE_ARGS();
    hd_tensor *in[2] = {IN(0), g};
    gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_MAX_POOL2D_BWD, in, 2, &n->attrs));
}

RULE(avg_pool2d, 0) {
    UNUSED_RULE_ARGS();
    hd_attrs at = with_shape(&n->attrs, &n->edges[0]);
    gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_AVG_POOL2D_BWD, &g, 1, &at));
}

/* the same mask: replay the forward's draw */
RULE(dropout, 0) {
    UNUSED_RULE_ARGS();
    if (!n->attrs.ints[0]) {
        gin[0] = hd_gx_out(x, g);
        return;
    }
    hd_attrs at = no_attrs();
    at.scalar[0] = n->attrs.scalar[0];
    at.ints[1] = (int64_t)n->rng_key;
    at.ints[2] = (int64_t)n->rng_base;
    gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_DROPOUT_BWD, &g, 1, &at));
}

/* fused: dx = rstd (gw - mean(gw) - xhat mean(gw xhat)) with gw = g w, and
 * dw = sum over rows of g xhat; db = g, summed over rows by backward */
RULE(layer_norm, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    if (x->ctx->grad_create) {
        hd_grad_layer_norm_create(x, n, g, need, gin);
        return;
    }
    hd_attrs at = n->attrs;
    if (need[0]) {
        hd_tensor *in[3] = {IN(0), g, n->nin == 3 ? IN(1) : NULL};
        at.ints[1] = 0;
        gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_LAYER_NORM_BWD, in, n->nin == 3 ? 3 : 2, &at));
    }
    if (n->nin == 3 && need[1]) {
        hd_tensor *in[2] = {IN(0), g};
        at.ints[1] = 1;
        gin[1] = hd_gx_out(x, hd_gx_run(x, HD_OP_LAYER_NORM_BWD, in, 2, &at));
    }
    if (n->nin == 3 && need[2]) gin[2] = hd_gx_out(x, g);
}

/* query i may attend to key j <= i: a bool [L, S] */
static hd_tensor *causal_allowed(hd_gx *x, int64_t l, int64_t s) {
    hd_attrs at = no_attrs();
    at.dtype = HD_I64;
    at.scalar[1] = (double)l, at.scalar[2] = 1;
    hd_tensor *rows = reshape(x, hd_gx_run(x, HD_OP_ARANGE, NULL, 0, &at), (int64_t[]){l, 1}, 2);
    at.scalar[1] = (double)s;
    hd_tensor *cols = hd_gx_run(x, HD_OP_ARANGE, NULL, 0, &at);
    return bin(x, HD_OP_GE, rows, cols);
}

/* attention_bwd's stacked result [..., L + 2 S, E]: rows [start, start +
 * len), a view. */
static hd_tensor *rows_of(hd_gx *x, hd_tensor *all, int64_t start, int64_t len) {
    if (!all) return NULL;
    hd_attrs at = no_attrs();
    for (int d = 0; d < all->ndim; d++) at.step[d] = 1, at.len[d] = all->shape[d];
    at.start[all->ndim - 2] = start, at.len[all->ndim - 2] = len;
    return hd_gx_run(x, HD_OP_SLICE, &all, 1, &at);
}

/* The fused backward (attention_bwd: no [L, S] tensor), when the graph
 * of backward is not kept (it has no gradient of its own), v is as wide
 * as q (one stacked result) and the mask needs no gradient. Returns 0
 * where the composition must run. */
static int attention_fused_bwd(hd_gx *x, const hd_grad_node *n, hd_tensor *g,
                               const unsigned char *need, hd_tensor **gin) {
    hd_tensor *q = IN(0), *k = IN(1), *v = IN(2);
    if (x->ctx->grad_create || !q || !k || !v || !OUT || (n->nin == 4 && need[3])) return 0;
    int nd = q->ndim;
    if (v->shape[nd - 1] != q->shape[nd - 1]) return 0;
    hd_tensor *in[6] = {q, k, v, OUT, g, n->nin == 4 ? IN(3) : NULL};
    hd_tensor *all = hd_gx_run(x, HD_OP_ATTENTION_BWD, in, n->nin + 2, &n->attrs);
    int64_t l = q->shape[nd - 2], s = k->shape[nd - 2];
    if (need[0]) gin[0] = hd_gx_out(x, rows_of(x, all, 0, l));
    if (need[1]) gin[1] = hd_gx_out(x, rows_of(x, all, l, s));
    if (need[2]) gin[2] = hd_gx_out(x, rows_of(x, all, l + s, s));
    return 1;
}

/* Without the fused backward, the scores' softmax is computed again (the
 * fused forward keeps none): p = softmax(scale q k^T + mask), then dv =
 * p^T g, ds = softmax_bwd(p, g v^T), dq = scale ds k, dk = scale ds^T q
 * and dmask = ds. Built from table ops, so it also differentiates again. */
RULE(attention, SAVE_X | SAVE_Y | HD_GRAD_SAVE_IN(1) | HD_GRAD_SAVE_IN(2) | HD_GRAD_SAVE_IN(3)) {
    if (attention_fused_bwd(x, n, g, need, gin)) return;
    hd_tensor *q = IN(0), *k = IN(1), *v = IN(2);
    hd_tensor *sc = num(x, n->attrs.scalar[0]);
    hd_tensor *s = mul(x, bin(x, HD_OP_MATMUL, q, transpose(x, k)), sc);
    if (n->nin == 4) s = add(x, s, IN(3));
    if (n->attrs.ints[0] && q)
        s = where(x, causal_allowed(x, q->shape[q->ndim - 2], k->shape[k->ndim - 2]), s,
                  num(x, -INFINITY));
    hd_attrs ax = no_attrs();
    ax.ints[0] = -1;
    hd_tensor *p = hd_gx_run(x, HD_OP_SOFTMAX, &s, 1, &ax);
    if (need[2]) gin[2] = hd_gx_out(x, bin(x, HD_OP_MATMUL, transpose(x, p), g));
    if (!need[0] && !need[1] && !(n->nin == 4 && need[3])) return;
    hd_tensor *pg[2] = {p, bin(x, HD_OP_MATMUL, g, transpose(x, v))};
    hd_tensor *ds = hd_gx_run(x, HD_OP_SOFTMAX_BWD, pg, 2, &ax);
    if (need[0]) gin[0] = hd_gx_out(x, mul(x, bin(x, HD_OP_MATMUL, ds, k), sc));
    if (need[1]) gin[1] = hd_gx_out(x, mul(x, bin(x, HD_OP_MATMUL, transpose(x, ds), q), sc));
    if (n->nin == 4 && need[3]) gin[3] = hd_gx_out(x, ds);
}

/* ---- the table ---- */

static const hd_grad_rule *const hd_grad_rules[HD_OP_COUNT] = {
#define HD_GRAD(rule)                           &hd_grad_rule_##rule
#define HD_NOGRAD                               NULL
#define X(NAME, name, arity, kind, shape, grad) grad,
#include "hd_ops.def"
#undef X
#undef HD_GRAD
#undef HD_NOGRAD
};

const hd_grad_rule *hd_grad_rule_of(hd_op op) {
    return (unsigned)op < HD_OP_COUNT ? hd_grad_rules[op] : NULL;
}
