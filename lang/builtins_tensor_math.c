/* Elementwise functions, reductions and linear algebra: mostly thin rows
 * over one op each. Numbers in give a number out (sqrt(2), max(a, b)). */
#include "builtins_tensor.h"

#include <math.h>
#include <string.h>

/* The row's op over its first `n` parameters, each made a tensor. */
static hd_status run_n(hd_vm *vm, hd_targs *a, int n, const hd_attrs *at, hd_value *out) {
    hd_tensor *in[4] = {NULL, NULL, NULL, NULL};
    hd_status st = HD_OK;
    for (int i = 0; i < n && !st; i++) st = hd_targ_tensor(vm, a, i, &in[i]);
    if (!st)
        st = hd_trun(vm, a->f->name, (hd_op)a->f->op, in, n, at, hd_targs_numbers_only(a), out);
    hd_tunref_all(in, n);
    return st;
}

static HD_TF_FN(tf_unary) {
    HD_TARGS_BIND(a);
    return run_n(vm, &a, 1, NULL, out);
}

static HD_TF_FN(tf_binary) {
    HD_TARGS_BIND(a);
    return run_n(vm, &a, 2, NULL, out);
}

static HD_TF_FN(tf_where) {
    HD_TARGS_BIND(a);
    return run_n(vm, &a, 3, NULL, out);
}

/* polygamma(n, x), as torch.special.polygamma: the n-th derivative of
 * digamma; n a whole number >= 0 */
static HD_TF_FN(tf_polygamma) {
    HD_TARGS_BIND(a); /* n, x */
    int64_t order = 0;
    if (a.v[0].type != HD_V_INT) return hd_targ_type_error(vm, &a, 0, "an int");
    if (hd_targ_int(vm, &a, 0, 0, &order)) return HD_ERR_RUNTIME;
    if (order < 0 || order > 1000)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "polygamma: n must be in [0, 1000], got %lld",
                           (long long)order);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.scalar[0] = (double)order;
    hd_tensor *x = NULL;
    if (hd_targ_tensor(vm, &a, 1, &x)) return HD_ERR_RUNTIME;
    hd_status st = hd_trun(vm, "polygamma", HD_OP_POLYGAMMA, &x, 1, &at,
                           a.v[1].type != HD_V_TENSOR && a.v[1].type != HD_V_LIST, out);
    hd_tensor_unref(x);
    return st;
}

/* clamp(x, lo, hi): number bounds go to the op; tensor bounds become
 * maximum and minimum. */
static HD_TF_FN(tf_clamp) {
    HD_TARGS_BIND(a); /* x, lo=, hi= */
    if (a.v[1].type == HD_V_TENSOR || a.v[2].type == HD_V_TENSOR) {
        hd_tensor *x = NULL, *b = NULL, *r = NULL;
        if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
        for (int i = 1; i <= 2; i++) {
            if (!hd_targ_has(&a, i)) continue;
            hd_tensor *in[2] = {x, NULL};
            if (hd_targ_tensor(vm, &a, i, &b)) goto fail;
            in[1] = b;
            hd_status st =
                hd_trun_t(vm, "clamp", i == 1 ? HD_OP_MAXIMUM : HD_OP_MINIMUM, in, 2, NULL, &r);
            hd_tensor_unref(b);
            if (st) goto fail;
            hd_tensor_unref(x);
            x = r;
        }
        *out = hd_tensor_value(x);
        return HD_OK;
    fail:
        hd_tensor_unref(x);
        return HD_ERR_RUNTIME;
    }
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (hd_targ_float(vm, &a, 1, NAN, &at.scalar[0]) ||
        hd_targ_float(vm, &a, 2, NAN, &at.scalar[1]))
        return HD_ERR_RUNTIME;
    return run_n(vm, &a, 1, &at, out);
}

/* ---- reductions ---- */

static int is_number(hd_value v) {
    return v.type == HD_V_INT || v.type == HD_V_FLOAT || v.type == HD_V_BOOL;
}

static HD_TF_FN(tf_reduce) {
    HD_TARGS_BIND(a); /* x, axis=, keepdim= [, correction=] */
    hd_op op = (hd_op)a.f->op;
    hd_value ax = a.v[1];
    /* max(a, b), min(a, b): elementwise when b is a tensor, or both are numbers */
    if ((op == HD_OP_MAX || op == HD_OP_MIN) &&
        (ax.type == HD_V_TENSOR || (is_number(a.v[0]) && is_number(ax)))) {
        hd_tensor *in[2] = {NULL, NULL};
        hd_status st = hd_targ_tensor(vm, &a, 0, &in[0]);
        if (!st) st = hd_targ_tensor(vm, &a, 1, &in[1]);
        if (!st)
            st = hd_trun(vm, a.f->name, op == HD_OP_MAX ? HD_OP_MAXIMUM : HD_OP_MINIMUM, in, 2,
                         NULL, hd_targs_numbers_only(&a), out);
        hd_tunref_all(in, 2);
        return st;
    }
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int keep;
    if (hd_targ_axes(vm, &a, 1, &at) || hd_targ_bool(vm, &a, 2, 0, &keep)) return HD_ERR_RUNTIME;
    at.keepdim = keep;
    if (a.n > 3 && hd_targ_int(vm, &a, 3, 1, &at.ints[0])) return HD_ERR_RUNTIME;
    return run_n(vm, &a, 1, &at, out);
}

/* ---- linear algebra ---- */

static HD_TF_FN(tf_dot) {
    HD_TARGS_BIND(a); /* a, b */
    hd_tensor *in[2] = {NULL, NULL};
    hd_status st = hd_targ_tensor(vm, &a, 0, &in[0]);
    if (!st) st = hd_targ_tensor(vm, &a, 1, &in[1]);
    if (!st && (in[0]->ndim != 1 || in[1]->ndim != 1 || in[0]->shape[0] != in[1]->shape[0])) {
        char s0[128], s1[128];
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "dot needs two 1-D tensors of one length, got %s and %s",
                         hd_shape_str(in[0]->shape, in[0]->ndim, s0, sizeof s0),
                         hd_shape_str(in[1]->shape, in[1]->ndim, s1, sizeof s1));
    }
    if (!st) st = hd_trun(vm, "dot", HD_OP_MATMUL, in, 2, NULL, 0, out);
    hd_tunref_all(in, 2);
    return st;
}

/* outer(a, b) = a[:, none] * b[none, :] */
static HD_TF_FN(tf_outer) {
    HD_TARGS_BIND(a); /* a, b */
    hd_tensor *in[2] = {NULL, NULL}, *r[2] = {NULL, NULL};
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_status st = hd_targ_tensor(vm, &a, 0, &in[0]);
    if (!st) st = hd_targ_tensor(vm, &a, 1, &in[1]);
    if (!st && (in[0]->ndim != 1 || in[1]->ndim != 1)) {
        char s0[128], s1[128];
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "outer needs two 1-D tensors, got %s and %s",
                         hd_shape_str(in[0]->shape, in[0]->ndim, s0, sizeof s0),
                         hd_shape_str(in[1]->shape, in[1]->ndim, s1, sizeof s1));
    }
    if (!st) {
        int64_t sa[2] = {in[0]->shape[0], 1}, sb[2] = {1, in[1]->shape[0]};
        if (hd_treshape(ctx, in[0], sa, 2, &r[0]) || hd_treshape(ctx, in[1], sb, 2, &r[1]))
            st = hd_tfail(vm, "outer");
    }
    if (!st) st = hd_trun(vm, "outer", HD_OP_MUL, r, 2, NULL, 0, out);
    hd_tunref_all(in, 2);
    hd_tunref_all(r, 2);
    return st;
}

#define UNARY(name, OP)                                                                            \
    { name, tf_unary, "x", HD_OP_##OP, HD_TF_BOTH }
#define REDUCE(name, OP)                                                                           \
    { name, tf_reduce, "x, axis=, keepdim=", HD_OP_##OP, HD_TF_BOTH }

static const hd_tfunc rows[] = {
    UNARY("abs", ABS),
    UNARY("exp", EXP),
    UNARY("log", LOG),
    UNARY("sqrt", SQRT),
    UNARY("rsqrt", RSQRT),
    UNARY("sin", SIN),
    UNARY("cos", COS),
    UNARY("tanh", TANH),
    UNARY("sigmoid", SIGMOID),
    UNARY("relu", RELU),
    UNARY("gelu", GELU),
    UNARY("silu", SILU),
    UNARY("softplus", SOFTPLUS),
    UNARY("erf", ERF),
    UNARY("erfc", ERFC),
    UNARY("lgamma", LGAMMA),
    UNARY("digamma", POLYGAMMA), /* n = 0: attributes start zeroed */
    {"polygamma", tf_polygamma, "n, x", HD_OP_POLYGAMMA, HD_TF_GLOBAL},
    UNARY("sign", SIGN),
    UNARY("floor", FLOOR),
    UNARY("ceil", CEIL),
    UNARY("round", ROUND),
    {"maximum", tf_binary, "x, y", HD_OP_MAXIMUM, HD_TF_BOTH},
    {"minimum", tf_binary, "x, y", HD_OP_MINIMUM, HD_TF_BOTH},
    {"pow", tf_binary, "x, y", HD_OP_POW, HD_TF_BOTH},
    {"atan2", tf_binary, "y, x", HD_OP_ATAN2, HD_TF_BOTH},
    {"where", tf_where, "cond, x, y", HD_OP_WHERE, HD_TF_GLOBAL},
    {"clamp", tf_clamp, "x, lo=, hi=", HD_OP_CLAMP, HD_TF_BOTH},
    REDUCE("sum", SUM),
    REDUCE("mean", MEAN),
    REDUCE("max", MAX),
    REDUCE("min", MIN),
    REDUCE("prod", PROD),
    {"var", tf_reduce, "x, axis=, keepdim=, correction=", HD_OP_VAR, HD_TF_BOTH},
    {"std", tf_reduce, "x, axis=, keepdim=, correction=", HD_OP_STD, HD_TF_BOTH},
    REDUCE("argmax", ARGMAX),
    REDUCE("argmin", ARGMIN),
    REDUCE("logsumexp", LOGSUMEXP),
    {"matmul", tf_binary, "x, y", HD_OP_MATMUL, HD_TF_BOTH},
    {"dot", tf_dot, "x, y", -1, HD_TF_BOTH},
    {"outer", tf_outer, "x, y", -1, HD_TF_BOTH},
};

const hd_tfunc_table hd_tfuncs_math = {rows, (int)(sizeof rows / sizeof rows[0])};
