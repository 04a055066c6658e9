/* Gradient rules of the backward kernels that softmax, log_softmax,
 * cross_entropy and gelu use (hd_ops.def, HD_KIND_GRAD), so that a
 * backward(create_graph = true) through them can be differentiated again:
 * second derivatives, hessian and jvp of classifiers. Each kernel is
 * linear in its incoming gradient g; the formulas are derived here. */
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
