/* Gradient rules of the backward kernels (hd_ops.def, HD_KIND_GRAD) that
 * softmax, log_softmax, cross_entropy, gelu, conv2d, avg_pool2d, dropout
 * and index_select use, so that a backward(create_graph = true) through
 * them can be differentiated again: second derivatives, grad of grad,
 * hessian and jvp. Each kernel is linear in its incoming gradient g; the
 * formulas are derived here. layer_norm's rule writes its gradient with
 * table ops instead when the graph is kept (hd_grad_layer_norm_create). */
#include "hd_grad_rule.h"

#include <math.h>

/* sum of t along the rule's axis (ints[0]), kept as size 1 */
static hd_tensor *axis_sum(hd_gx *x, const hd_grad_node *n, hd_tensor *t) {
    if (!t) return NULL;
    hd_attrs at = no_attrs();
    at.naxes = 1;
    at.axes[0] = n->attrs.ints[0];
    at.keepdim = 1;
    return hd_gx_run(x, HD_OP_SUM, &t, 1, &at);
}

/* the sum of every element (0-d) */
static hd_tensor *reduce_all(hd_gx *x, hd_tensor *t) {
    hd_attrs at = no_attrs();
    return t ? hd_gx_run(x, HD_OP_SUM, &t, 1, &at) : NULL;
}

static hd_tensor *axis_op(hd_gx *x, const hd_grad_node *n, hd_op op, hd_tensor *a, hd_tensor *b) {
    hd_attrs at = no_attrs();
    at.ints[0] = n->attrs.ints[0];
    hd_tensor *in[2] = {a, b};
    return hd_gx_run(x, op, in, 2, &at);
}

/* out = y (g - S), S = sum(g y): with h the incoming gradient and
 * T = sum(h y), d/dg = y (h - T) (the kernel itself) and
 * d/dy = h (g - S) - g T */
RULE(softmax_bwd, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_tensor *y = IN(0), *gi = IN(1);
    if (need[1]) gin[1] = hd_gx_out(x, axis_op(x, n, HD_OP_SOFTMAX_BWD, y, g));
    if (need[0]) {
        hd_tensor *s = axis_sum(x, n, mul(x, gi, y)), *t = axis_sum(x, n, mul(x, g, y));
        gin[0] = hd_gx_out(x, sub(x, mul(x, g, sub(x, gi, s)), mul(x, gi, t)));
    }
}

/* out = g - exp(y) sum(g): d/dg = h - sum(h exp(y)), d/dy = -h exp(y) sum(g) */
RULE(log_softmax_bwd, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_tensor *e = un(x, HD_OP_EXP, IN(0));
    if (need[1]) gin[1] = hd_gx_out(x, sub(x, g, axis_sum(x, n, mul(x, g, e))));
    if (need[0]) gin[0] = hd_gx_out(x, neg(x, mul(x, mul(x, g, e), axis_sum(x, n, IN(1)))));
}

/* out = g gelu'(x), gelu(x) = x Phi(x): d/dg = h gelu'(x) (the kernel),
 * d/dx = h g gelu''(x), gelu'' = phi(x) (2 - x^2) */
RULE(gelu_bwd, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_tensor *a = IN(0);
    if (need[1]) gin[1] = hd_gx_out(x, bin(x, HD_OP_GELU_BWD, a, g));
    if (need[0]) {
        hd_tensor *a2 = mul(x, a, a);
        hd_tensor *phi = mul(x, un(x, HD_OP_EXP, mul(x, a2, hd_gx_num(x, -0.5))),
                             hd_gx_num(x, 1.0 / sqrt(2.0 * M_PI)));
        hd_tensor *d2 = mul(x, phi, sub(x, hd_gx_num(x, 2.0), a2));
        gin[0] = hd_gx_out(x, mul(x, mul(x, g, IN(1)), d2));
    }
}

/* out = g (1 - y^2): d/dg = h (1 - y^2) (the kernel), d/dy = -2 h g y */
RULE(tanh_bwd, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_tensor *y = IN(0);
    if (need[1]) gin[1] = hd_gx_out(x, bin(x, HD_OP_TANH_BWD, y, g));
    if (need[0]) gin[0] = hd_gx_out(x, mul(x, mul(x, g, IN(1)), mul(x, y, hd_gx_num(x, -2.0))));
}

/* out = g y (1 - y): d/dg = h y (1 - y) (the kernel), d/dy = h g (1 - 2 y) */
RULE(sigmoid_bwd, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_tensor *y = IN(0);
    if (need[1]) gin[1] = hd_gx_out(x, bin(x, HD_OP_SIGMOID_BWD, y, g));
    if (need[0]) {
        hd_tensor *d = sub(x, hd_gx_num(x, 1.0), mul(x, y, hd_gx_num(x, 2.0)));
        gin[0] = hd_gx_out(x, mul(x, mul(x, g, IN(1)), d));
    }
}

/* out = g0 (softmax(z) - onehot) / N for logits z [N, C] (or [C], N = 1)
 * and a 0-d g0: d/dg0 = sum(h (softmax(z) - onehot)) / N,
 * d/dz = g0 / N softmax_bwd(softmax(z), h) */
RULE(cross_entropy_bwd, SAVE_X | HD_GRAD_SAVE_IN(1) | HD_GRAD_SAVE_IN(2)) {
    hd_tensor *z = IN(0), *labels = IN(1), *g0 = IN(2);
    int64_t c = n->edges[0].shape[n->edges[0].ndim - 1];
    double rows = n->edges[0].ndim == 2 ? (double)n->edges[0].shape[0] : 1.0;
    hd_attrs at = no_attrs();
    at.ints[0] = -1;
    hd_tensor *p = hd_gx_run(x, HD_OP_SOFTMAX, &z, 1, &at);
    hd_tensor *scale = hd_gx_num(x, 1.0 / (rows > 0 ? rows : 1.0));
    if (need[2]) {
        hd_attrs oh = no_attrs();
        oh.ints[0] = c;
        hd_tensor *hot = hd_gx_run(x, HD_OP_ONE_HOT, &labels, 1, &oh);
        hd_tensor *d = p && hot ? sub(x, p, hot) : NULL;
        gin[2] = hd_gx_out(x, mul(x, reduce_all(x, mul(x, g, d)), scale));
    }
    if (need[0]) {
        hd_tensor *in[2] = {p, g};
        hd_tensor *sb = hd_gx_run(x, HD_OP_SOFTMAX_BWD, in, 2, &at);
        gin[0] = hd_gx_out(x, mul(x, mul(x, sb, g0), scale));
    }
}

/* ---- kernels that are the adjoints of linear maps ---- */

/* a record's attrs without the shape its backward kernel carries */
static hd_attrs attrs_no_shape(const hd_grad_node *n) {
    hd_attrs at = n->attrs;
    at.nshape = 0;
    memset(at.shape, 0, sizeof at.shape);
    return at;
}

static hd_attrs attrs_shape_of(const hd_grad_node *n, int i) {
    hd_attrs at = n->attrs;
    at.nshape = n->edges[i].ndim;
    memcpy(at.shape, n->edges[i].shape, sizeof at.shape);
    return at;
}

static hd_tensor *run_pair(hd_gx *x, hd_op op, hd_tensor *a, hd_tensor *b, const hd_attrs *at) {
    hd_tensor *in[2] = {a, b};
    return hd_gx_run(x, op, in, 2, at);
}

/* out = conv2d_bwd_input(k, w), the gradient of sum(k conv2d(x, w)) in
 * x: with h the incoming gradient (x's shape), sum(h out) =
 * sum(k conv2d(h, w)), so d/dk = conv2d(h, w) and d/dw =
 * conv2d_bwd_weight(h, k) */
RULE(conv2d_bwd_input, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_attrs fw = attrs_no_shape(n), at = attrs_shape_of(n, 1);
    if (need[0]) gin[0] = hd_gx_out(x, run_pair(x, HD_OP_CONV2D, g, IN(1), &fw));
    if (need[1]) gin[1] = hd_gx_out(x, run_pair(x, HD_OP_CONV2D_BWD_WEIGHT, g, IN(0), &at));
}

/* out = conv2d_bwd_weight(x, k), the gradient of sum(k conv2d(x, w)) in
 * w: with h the incoming gradient (w's shape), sum(h out) =
 * sum(k conv2d(x, h)), so d/dk = conv2d(x, h) and d/dx =
 * conv2d_bwd_input(k, h) */
RULE(conv2d_bwd_weight, SAVE_X | HD_GRAD_SAVE_IN(1)) {
    hd_attrs fw = attrs_no_shape(n), at = attrs_shape_of(n, 0);
    if (need[1]) gin[1] = hd_gx_out(x, run_pair(x, HD_OP_CONV2D, IN(0), g, &fw));
    if (need[0]) gin[0] = hd_gx_out(x, run_pair(x, HD_OP_CONV2D_BWD_INPUT, IN(1), g, &at));
}

/* out = P^T k for the averaging map P: d/dk = P h = avg_pool2d(h) */
RULE(avg_pool2d_bwd, 0) {
    UNUSED_RULE_ARGS();
    hd_attrs fw = attrs_no_shape(n);
    gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_AVG_POOL2D, &g, 1, &fw));
}

/* out = max_pool2d_bwd(x, k): k routed to each window's first maximum of
 * x, linear in k and piecewise constant in x (no gradient there): d/dk =
 * max_pool2d_select(x, h), h at each window's first maximum */
RULE(max_pool2d_bwd, SAVE_X) {
    if (need[1]) gin[1] = hd_gx_out(x, run_pair(x, HD_OP_MAX_POOL2D_SEL, IN(0), g, &n->attrs));
}

/* out = max_pool2d_select(x, k): d/dk = max_pool2d_bwd(x, h) */
RULE(max_pool2d_select, SAVE_X) {
    if (need[1]) gin[1] = hd_gx_out(x, run_pair(x, HD_OP_MAX_POOL2D_BWD, IN(0), g, &n->attrs));
}

/* out = k m / (1 - p) for the forward's mask m: its own adjoint */
RULE(dropout_bwd, 0) {
    UNUSED_RULE_ARGS();
    gin[0] = hd_gx_out(x, hd_gx_run(x, HD_OP_DROPOUT_BWD, &g, 1, &n->attrs));
}

/* out = zeros with k added at rows idx: d/dk = index_select(h, idx) */
RULE(index_add, HD_GRAD_SAVE_IN(1)) {
    UNUSED_RULE_ARGS();
    hd_attrs at = no_attrs();
    at.ints[0] = n->attrs.ints[0];
    gin[0] = hd_gx_out(x, run_pair(x, HD_OP_INDEX_SELECT, g, IN(1), &at));
}

/* ---- layer_norm with the graph kept ---- */

/* mean over the last k dims of t, kept as size 1 */
static hd_tensor *ln_mean(hd_gx *x, hd_tensor *t, int nd, int k) {
    if (!t) return NULL;
    hd_attrs at = no_attrs();
    at.naxes = k;
    for (int i = 0; i < k; i++) at.axes[i] = nd - k + i;
    at.keepdim = 1;
    return hd_gx_run(x, HD_OP_MEAN, &t, 1, &at);
}

/* layer_norm's gradient as table ops, so that it has a gradient itself:
 * xhat = (x - mean) rstd with rstd = (var + eps)^-1/2, gw = g w (or g),
 * dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), dw = g xhat and db = g
 * (summed over the rows by backward). */
void hd_grad_layer_norm_create(hd_gx *x, const hd_grad_node *n, hd_tensor *g,
                               const unsigned char *need, hd_tensor **gin) {
    hd_tensor *in = IN(0);
    int nd = n->edges[0].ndim, k = (int)n->attrs.ints[0];
    hd_tensor *d = sub(x, in, ln_mean(x, in, nd, k));
    hd_tensor *var = ln_mean(x, mul(x, d, d), nd, k);
    hd_tensor *rstd = un(x, HD_OP_RSQRT, add(x, var, hd_gx_num(x, hd_layer_norm_eps(&n->attrs))));
    hd_tensor *xhat = mul(x, d, rstd);
    if (need[0]) {
        hd_tensor *gw = n->nin == 3 ? mul(x, g, IN(1)) : g;
        hd_tensor *c =
            add(x, ln_mean(x, gw, nd, k), mul(x, xhat, ln_mean(x, mul(x, gw, xhat), nd, k)));
        gin[0] = hd_gx_out(x, mul(x, rstd, sub(x, gw, c)));
    }
    if (n->nin == 3 && need[1]) gin[1] = hd_gx_out(x, mul(x, g, xhat));
    if (n->nin == 3 && need[2]) gin[2] = hd_gx_out(x, g);
}
