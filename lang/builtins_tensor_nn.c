/* nn functions: softmax, log_softmax, cumsum, cumprod, cross_entropy, mse, conv2d,
 * max_pool2d, avg_pool2d, dropout, layer_norm, embedding. */
#include "builtins_tensor.h"
#include "hd_backend.h"

#include <string.h>

/* Run the row's op over tensors made from parameters idx[0..n-1]. */
static hd_status run_params(hd_vm *vm, hd_targs *a, hd_op op, const int *idx, int n,
                            const hd_attrs *at, hd_value *out) {
    hd_tensor *in[4] = {NULL, NULL, NULL, NULL};
    hd_status st = HD_OK;
    for (int i = 0; i < n && !st; i++) st = hd_targ_tensor(vm, a, idx[i], &in[i]);
    if (!st) st = hd_trun(vm, a->f->name, op, in, n, at, 0, out);
    hd_tunref_all(in, n);
    return st;
}

static HD_TF_FN(tf_softmax) {
    HD_TARGS_BIND(a); /* x, axis=-1 */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (hd_targ_int(vm, &a, 1, -1, &at.ints[0])) return HD_ERR_RUNTIME;
    return run_params(vm, &a, (hd_op)a.f->op, (int[]){0}, 1, &at, out);
}

/* cumsum(x, axis = none) and cumprod: along axis, or over x flattened
 * (NumPy's none). Integer and bool tensors give i64, computed in f64 (exact
 * while every running value is below 2^53 in magnitude). */
static HD_TF_FN(tf_scan) {
    HD_TARGS_BIND(a); /* x, axis= */
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *x = NULL, *t[3] = {NULL, NULL, NULL};
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = HD_OK;
    int ints = !hd_dtype_is_float(x->dtype);
    if (hd_targ_has(&a, 1)) {
        st = hd_targ_int(vm, &a, 1, 0, &at.ints[0]);
        if (!st) t[0] = hd_tensor_ref(x);
    } else {
        int64_t flat = -1;
        if (hd_treshape(ctx, x, &flat, 1, &t[0])) st = hd_tfail(vm, a.f->name);
    }
    if (!st && ints && hd_op_cast(ctx, t[0], HD_F64, &t[1])) st = hd_tfail(vm, a.f->name);
    if (!st) st = hd_trun_t(vm, a.f->name, (hd_op)a.f->op, &t[ints], 1, &at, &t[2]);
    hd_tensor *r = t[2];
    if (!st && ints) {
        r = NULL;
        if (hd_op_cast(ctx, t[2], HD_I64, &r)) st = hd_tfail(vm, a.f->name);
    } else {
        t[2] = NULL;
    }
    if (!st) *out = hd_tensor_value(r);
    hd_tensor_unref(x);
    hd_tunref_all(t, 3);
    return st;
}

static HD_TF_FN(tf_loss) {
    HD_TARGS_BIND(a); /* x, y */
    return run_params(vm, &a, (hd_op)a.f->op, (int[]){0, 1}, 2, NULL, out);
}

/* Argument i, n ints in v, when given, must be positive: the op's attributes
 * take 0 for "the default", so an explicit 0 would pass unnoticed there. */
static hd_status positive(hd_vm *vm, const hd_targs *a, int i, const int64_t *v, int n) {
    for (int k = 0; k < n && hd_targ_has(a, i); k++)
        if (v[k] <= 0)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: %s must be positive, got %lld", a->f->name,
                               a->names[i], (long long)v[k]);
    return HD_OK;
}

static HD_TF_FN(tf_conv2d) {
    HD_TARGS_BIND(a); /* x, w, b=, stride=1, padding=0, dilation=1, groups=1 */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (hd_targ_pair(vm, &a, 3, 1, at.ints) || hd_targ_pair(vm, &a, 4, 0, at.ints + 2) ||
        hd_targ_pair(vm, &a, 5, 1, at.ints + 4) || hd_targ_int(vm, &a, 6, 1, &at.ints[6]) ||
        positive(vm, &a, 3, at.ints, 2) || positive(vm, &a, 5, at.ints + 4, 2) ||
        positive(vm, &a, 6, at.ints + 6, 1))
        return HD_ERR_RUNTIME;
    int n = hd_targ_has(&a, 2) ? 3 : 2;
    return run_params(vm, &a, HD_OP_CONV2D, (int[]){0, 1, 2}, n, &at, out);
}

static HD_TF_FN(tf_pool2d) {
    HD_TARGS_BIND(a); /* x, kernel, stride=, padding=0 */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (hd_targ_pair(vm, &a, 1, 0, at.ints) || hd_targ_pair(vm, &a, 2, 0, at.ints + 2) ||
        hd_targ_pair(vm, &a, 3, 0, at.ints + 4) || positive(vm, &a, 1, at.ints, 2) ||
        positive(vm, &a, 2, at.ints + 2, 2))
        return HD_ERR_RUNTIME;
    if (!hd_targ_has(&a, 2)) { /* stride defaults to the kernel */
        at.ints[2] = at.ints[0];
        at.ints[3] = at.ints[1];
    }
    return run_params(vm, &a, (hd_op)a.f->op, (int[]){0}, 1, &at, out);
}

static HD_TF_FN(tf_dropout) {
    HD_TARGS_BIND(a); /* x, p=0.5, training=true */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int training;
    if (hd_targ_float(vm, &a, 1, 0.5, &at.scalar[0]) || hd_targ_bool(vm, &a, 2, 1, &training))
        return HD_ERR_RUNTIME;
    at.ints[0] = training;
    return run_params(vm, &a, HD_OP_DROPOUT, (int[]){0}, 1, &at, out);
}

/* layer_norm(x, shape, w, b, eps): shape is the normalised trailing shape
 * (a list, or an int for one dim of that size, as in PyTorch). A missing
 * weight is ones and a missing bias zeros, since the op takes both or
 * neither. */
static hd_status ln_param(hd_vm *vm, hd_targs *a, int i, const hd_tensor *x, int k, double fill,
                          hd_tensor **out) {
    if (hd_targ_has(a, i)) return hd_targ_tensor(vm, a, i, out);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = k;
    memcpy(at.shape, x->shape + x->ndim - k, (size_t)k * sizeof(int64_t));
    at.dtype = hd_dtype_is_float(x->dtype) ? x->dtype : HD_F32;
    at.scalar[0] = fill;
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_place p = hd_place_of(x); /* made on x's device */
    hd_place prev = hd_place_push(ctx, p.backend ? p.backend : &hd_cpu_backend, p.device);
    hd_status st = hd_trun_t(vm, "layer_norm", HD_OP_FULL, NULL, 0, &at, out);
    hd_place_pop(ctx, prev);
    return st;
}

static HD_TF_FN(tf_layer_norm) {
    HD_TARGS_BIND(a); /* x, shape, w=, b=, eps=1e-5 */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int64_t shape[HD_MAX_DIMS];
    int k;
    hd_tensor *in[3] = {NULL, NULL, NULL};
    if (hd_targ_shape(vm, &a, 1, shape, &k) || hd_targ_float(vm, &a, 4, 1e-5, &at.scalar[0]) ||
        hd_targ_tensor(vm, &a, 0, &in[0]))
        return HD_ERR_RUNTIME;
    hd_status st = HD_OK;
    const hd_tensor *x = in[0];
    if (k < 1 || k > x->ndim || memcmp(shape, x->shape + x->ndim - k, (size_t)k * sizeof *shape)) {
        char s0[128], s1[128];
        st = hd_vm_error(
            vm, HD_ERR_RUNTIME, "layer_norm: shape %s is not the end of input shape %s",
            hd_shape_str(shape, k, s0, sizeof s0), hd_shape_str(x->shape, x->ndim, s1, sizeof s1));
    }
    if (!st && !(at.scalar[0] > 0)) /* the op reads 0 as its default, 1e-5 */
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "layer_norm: eps must be positive, got %g",
                         at.scalar[0]);
    at.ints[0] = k;
    int n = hd_targ_has(&a, 2) || hd_targ_has(&a, 3) ? 3 : 1;
    if (!st && n == 3)
        st = ln_param(vm, &a, 2, x, k, 1, &in[1]) || ln_param(vm, &a, 3, x, k, 0, &in[2])
                 ? HD_ERR_RUNTIME
                 : HD_OK;
    hd_value r;
    if (!st) st = hd_trun(vm, "layer_norm", HD_OP_LAYER_NORM, in, n, &at, 0, &r);
    hd_tunref_all(in, 3);
    if (!st) *out = r;
    return st;
}

/* _attention(q, k, v, mask = none, scale =, causal = false): the fused
 * kernel behind nn.scaled_dot_product_attention (stdlib/nn.hodu), which
 * checks its arguments and picks it where it runs. */
static HD_TF_FN(tf_attention) {
    HD_TARGS_BIND(a); /* q, k, v, mask=, scale=, causal= */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int causal = 0;
    hd_tensor *in[4] = {NULL, NULL, NULL, NULL};
    int n = hd_targ_has(&a, 3) ? 4 : 3;
    if (hd_targ_float(vm, &a, 4, 1.0, &at.scalar[0]) || hd_targ_bool(vm, &a, 5, 0, &causal))
        return HD_ERR_RUNTIME;
    at.ints[0] = causal;
    hd_status st = HD_OK;
    for (int i = 0; i < n && !st; i++) st = hd_targ_tensor(vm, &a, i, &in[i]);
    hd_value r;
    if (!st) st = hd_trun(vm, "attention", HD_OP_ATTENTION, in, n, &at, 0, &r);
    hd_tunref_all(in, 4);
    if (!st) *out = r;
    return st;
}

/* embedding(idx, weight) = rows of weight: index_select on axis 0. */
static HD_TF_FN(tf_embedding) {
    HD_TARGS_BIND(a); /* idx, weight */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    return run_params(vm, &a, HD_OP_INDEX_SELECT, (int[]){1, 0}, 2, &at, out);
}

static const hd_tfunc rows[] = {
    {"softmax", tf_softmax, "x, axis=", HD_OP_SOFTMAX, HD_TF_BOTH},
    {"log_softmax", tf_softmax, "x, axis=", HD_OP_LOG_SOFTMAX, HD_TF_BOTH},
    {"cumsum", tf_scan, "x, axis=", HD_OP_CUMSUM, HD_TF_BOTH},
    {"cumprod", tf_scan, "x, axis=", HD_OP_CUMPROD, HD_TF_BOTH},
    {"cross_entropy", tf_loss, "logits, labels", HD_OP_CROSS_ENTROPY, HD_TF_GLOBAL},
    {"mse", tf_loss, "pred, target", HD_OP_MSE, HD_TF_GLOBAL},
    {"conv2d", tf_conv2d, "x, w, b=, stride=, padding=, dilation=, groups=", HD_OP_CONV2D,
     HD_TF_GLOBAL},
    {"max_pool2d", tf_pool2d, "x, kernel, stride=, padding=", HD_OP_MAX_POOL2D, HD_TF_GLOBAL},
    {"avg_pool2d", tf_pool2d, "x, kernel, stride=, padding=", HD_OP_AVG_POOL2D, HD_TF_GLOBAL},
    {"dropout", tf_dropout, "x, p=, training=", HD_OP_DROPOUT, HD_TF_GLOBAL},
    {"layer_norm", tf_layer_norm, "x, shape, w=, b=, eps=", HD_OP_LAYER_NORM, HD_TF_GLOBAL},
    {"_attention", tf_attention, "q, k, v, mask=, scale=, causal=", HD_OP_ATTENTION, HD_TF_GLOBAL},
    {"embedding", tf_embedding, "idx, weight", HD_OP_INDEX_SELECT, HD_TF_GLOBAL},
};

const hd_tfunc_table hd_tfuncs_nn = {rows, (int)(sizeof rows / sizeof rows[0])};
