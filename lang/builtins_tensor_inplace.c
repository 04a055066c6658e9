/* In-place methods, as PyTorch's: x.add_(y, alpha =), x.sub_(y, alpha =),
 * x.mul_(y), x.div_(y), x.fill_(v), x.zero_(), x.copy_(src). Each returns
 * x itself.
 *
 * Each means the whole-tensor write x[...] = x OP y (alpha * y for add_
 * and sub_), with that write's rules: under gradients, a write into a
 * computed tensor or of a value that requires grad is refused, a leaf is
 * written as an optimizer step writes it; compiled code traces the write.
 * The result must keep x's dtype: an integer tensor does not take a float
 * result in place (PyTorch refuses it too). y broadcasts to x's shape,
 * never the other way.
 *
 * Eagerly, on cpu tensors of one float dtype, contiguous, of one shape and
 * not sharing storage, with nothing to record, the update is one pass
 * over x (an optimizer's p.sub_(g, alpha = lr) reads p and g once and
 * allocates nothing); the arithmetic is the same as the general path's
 * (alpha * y rounded to x's dtype, then the operation). On a device, the
 * same tensors take one launch: the op's kernel with x as its output
 * (alpha * y first, as its own op), where the general path made the
 * result apart and copied it into x (two launches, three with alpha). */
#include "builtins_tensor.h"
#include "hd_autograd.h"
#include "hd_backend.h"
#include "hd_profile.h"
#include "hd_trace.h"
#include "ast.h"
#include "eval.h"
#include "tensor_api.h"

#include <stdio.h>
#include <string.h>

enum { IP_ADD, IP_SUB, IP_MUL, IP_DIV };

static const char *const ip_names[] = {"add_", "sub_", "mul_", "div_"};
static const int ip_toks[] = {HD_TOK_PLUS, HD_TOK_MINUS, HD_TOK_STAR, HD_TOK_SLASH};

/* x[...] = v with the write's checks and tracing. */
static hd_status ip_write_all(hd_vm *vm, hd_value x, hd_value v) {
    hd_index_part all = {.kind = HD_IDX_ELLIPSIS, .v = hd_none()};
    return hd_tensor_set_index(vm, x, &all, 1, v);
}

/* The operator an in-place method stands for ("=" for fill_ and copy_). */
static const char *ip_sym(const char *name) {
    static const char *const syms[] = {"+", "-", "*", "/"};
    for (int k = 0; k < 4; k++)
        if (!strcmp(name, ip_names[k])) return syms[k];
    return "=";
}

/* Refused updates: of a value compiled code knows only when it runs (an
 * argument, a tensor computed in the body), and of a tensor that requires
 * grad while gradients are recorded (its gradient would be wrong). */
static hd_status ip_check(hd_vm *vm, const char *name, hd_tensor *x) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (hd_trace_active(ctx) && hd_tensor_is_symbolic(x)) {
        char ex[8] = "";
        if (strcmp(ip_sym(name), "=")) snprintf(ex, sizeof ex, "x %s ", ip_sym(name));
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "%s: inside compiled code, in-place updates apply to tensors with data "
                           "(a global, a field, a captured tensor), not to an argument or a value "
                           "computed inside: write x = %s... instead",
                           name, ex);
    }
    int w = hd_autograd_wants(ctx, HD_OP_ADD, &x, 1, x->dtype);
    if (w < 0) return hd_tfail(vm, name);
    if (w == 0) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "%s: in-place update of a tensor that requires grad: its gradient would be "
                       "wrong (update it under no_grad, as an optimizer step does, or write "
                       "x = x + ... instead)",
                       name);
}

/* ---- the one-pass path ---- */

/* One loop per operation and dtype: x[i] = x[i] OP s * y[i] for add and
 * sub (the product rounded to T first, as the general path's alpha * y
 * is), x[i] OP y[i] for mul and div; the _s forms take the number s in
 * y's place. The first loop's trip count is a multiple of 8: GCC's -O2
 * vectorizer takes only loops with no scalar epilogue. */
#define IP_FN(name, T, EXPR)                                                                       \
    static void name(T *restrict x, const T *restrict y, T s, int64_t n) {                         \
        int64_t n8 = n & ~(int64_t)7, i;                                                           \
        (void)s;                                                                                   \
        for (i = 0; i < n8; i++) x[i] = EXPR;                                                      \
        for (; i < n; i++) x[i] = EXPR;                                                            \
    }
#define IP_FNS(T)                                                                                  \
    IP_FN(ip_add_##T, T, x[i] + (T)(s * y[i]))                                                     \
    IP_FN(ip_sub_##T, T, x[i] - (T)(s * y[i]))                                                     \
    IP_FN(ip_mul_##T, T, x[i] * y[i])                                                              \
    IP_FN(ip_div_##T, T, x[i] / y[i])                                                              \
    IP_FN(ip_add_s_##T, T, x[i] + s)                                                               \
    IP_FN(ip_sub_s_##T, T, x[i] - s)                                                               \
    IP_FN(ip_mul_s_##T, T, x[i] * s)                                                               \
    IP_FN(ip_div_s_##T, T, x[i] / s)                                                               \
    static void (*const ip_fns_##T[2][4])(T *restrict, const T *restrict, T, int64_t) = {          \
        {ip_add_##T, ip_sub_##T, ip_mul_##T, ip_div_##T},                                          \
        {ip_add_s_##T, ip_sub_s_##T, ip_mul_s_##T, ip_div_s_##T}};
IP_FNS(float)
IP_FNS(double)
#undef IP_FNS
#undef IP_FN

static int ip_same_shape(const hd_tensor *a, const hd_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

/* Can x OP= alpha * y (y a tensor, or NULL for the number s) run as one
 * pass here? */
static int ip_direct_ok(hd_vm *vm, hd_tensor *x, hd_tensor *y) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (hd_trace_active(ctx) || hd_tensor_is_symbolic(x) || !hd_tensor_is_cpu(x)) return 0;
    if ((x->dtype != HD_F32 && x->dtype != HD_F64) || !hd_tensor_is_contiguous(x)) return 0;
    if (y) {
        if (hd_tensor_is_symbolic(y) || !hd_tensor_is_cpu(y) || y->dtype != x->dtype) return 0;
        if (!hd_tensor_is_contiguous(y) || y->storage == x->storage || !ip_same_shape(x, y))
            return 0;
    }
    hd_tensor *in[2] = {x, y};
    return hd_autograd_wants(ctx, HD_OP_ADD, in, y ? 2 : 1, x->dtype) == 0;
}

static void ip_direct(int k, hd_tensor *x, hd_tensor *y, double s) {
    void *yd = y ? hd_tensor_data(y) : NULL;
    if (x->dtype == HD_F32)
        ip_fns_float[!y][k](hd_tensor_data(x), yd, (float)s, x->numel);
    else
        ip_fns_double[!y][k](hd_tensor_data(x), yd, s, x->numel);
    x->storage->version++;
}

/* ---- the device path ---- */

static const hd_op ip_ops[] = {HD_OP_ADD, HD_OP_SUB, HD_OP_MUL, HD_OP_DIV};

/* Can x OP= alpha * y run as the device's kernel writing x? Each element
 * is read and written at one place, so x may be the output. A number y
 * is a kernel argument, cast to x's dtype on the host as the general
 * path's number is (an int past 2^24 goes through the cast op there: big
 * is set, and that path runs). */
static int ip_device_ok(hd_vm *vm, int k, hd_tensor *x, hd_tensor *y, int big) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (hd_trace_active(ctx) || hd_tensor_is_symbolic(x) || !x->storage || hd_tensor_is_cpu(x))
        return 0;
    const hd_backend *be = x->storage->backend;
    if (!hd_dtype_is_float(x->dtype) || !hd_tensor_is_contiguous(x) ||
        !be->supports_op(ip_ops[k], x->dtype))
        return 0;
    if (y) {
        if (hd_tensor_is_symbolic(y) || !y->storage || y->storage->backend != be ||
            y->storage->device != x->storage->device || y->dtype != x->dtype ||
            !hd_tensor_is_contiguous(y) || y->storage == x->storage || !ip_same_shape(x, y))
            return 0;
    } else if (big || !be->takes_number || !be->takes_number(ip_ops[k], 1)) {
        return 0;
    }
    hd_tensor *in[2] = {x, y};
    return hd_autograd_wants(ctx, HD_OP_ADD, in, y ? 2 : 1, x->dtype) == 0;
}

/* The operand the kernel reads beside x: s on the host in x's dtype, y,
 * or alpha * y (alpha = s) made by its op. */
static hd_status ip_device_operand(hd_ctx *ctx, int k, hd_tensor *x, hd_tensor *y, double s,
                                   hd_tensor **b) {
    if (!y) {
        *b = hd_tensor_scalar(ctx, x->dtype, s);
        return *b ? HD_OK : ctx->status;
    }
    if (k > IP_SUB || s == 1) {
        *b = hd_tensor_ref(y);
        return HD_OK;
    }
    hd_tensor *alpha = hd_tensor_number(ctx, HD_F64, s);
    if (!alpha) return ctx->status;
    hd_tensor *in[2] = {y, alpha};
    hd_status st = hd_op_run(ctx, HD_OP_MUL, in, 2, NULL, b);
    hd_tensor_unref(alpha);
    return st;
}

static hd_status ip_device(hd_vm *vm, int k, hd_tensor *x, hd_tensor *y, double s) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_tensor *b = NULL;
    if (ip_device_operand(ctx, k, x, y, s, &b)) return hd_tfail(vm, ip_names[k]);
    hd_tensor *in[2] = {x, b};
    int prof = hd_profile_on(ctx);
    double t0 = prof ? hd_profile_begin(ctx) : 0;
    hd_status st = x->storage->backend->run_op(ctx, ip_ops[k], x, in, 2, NULL);
    if (prof) hd_profile_end(ctx, ip_ops[k], NULL, t0, 3.0 * (double)hd_tensor_nbytes(x), 0);
    x->storage->version++;
    hd_tensor_unref(b);
    return st ? hd_tfail(vm, ip_names[k]) : HD_OK;
}

/* ---- the general path ---- */

static int ip_number(hd_value v) {
    return v.type == HD_V_INT || v.type == HD_V_FLOAT || v.type == HD_V_BOOL;
}

static double ip_number_of(hd_value v) {
    return v.type == HD_V_INT ? (double)v.as.i : v.type == HD_V_FLOAT ? v.as.f : (double)v.as.b;
}

/* alpha: none (1), a number or a one-element tensor. */
static hd_status ip_general(hd_vm *vm, int k, hd_value xv, hd_value yv, hd_value alpha) {
    const char *name = ip_names[k];
    hd_value s = hd_none(), r = hd_none();
    hd_status st = HD_OK;
    if (ip_number(alpha) && ip_number(yv)) {
        yv = hd_float(ip_number_of(yv) * ip_number_of(alpha));
    } else if (alpha.type != HD_V_NONE) {
        st = hd_tensor_binop(vm, HD_TOK_STAR, yv, alpha, &s);
        if (st) return st;
        yv = s;
    }
    st = hd_tensor_binop(vm, ip_toks[k], xv, yv, &r);
    hd_value_unref(vm, s);
    if (st) return st;
    hd_tensor *x = xv.as.t, *t = r.as.t;
    char xs[64], ts[64];
    if (r.type == HD_V_TENSOR && !ip_same_shape(t, x))
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "%s: the result has shape %s, x has shape %s: the other operand must "
                         "broadcast to x's shape (an in-place result keeps it)",
                         name, hd_shape_str(t->shape, t->ndim, ts, sizeof ts),
                         hd_shape_str(x->shape, x->ndim, xs, sizeof xs));
    else if (r.type == HD_V_TENSOR && t->dtype != x->dtype &&
             (hd_dtype_is_float(t->dtype) > hd_dtype_is_float(x->dtype) || x->dtype == HD_BOOL))
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "%s: the result is %s and x is %s: an in-place result keeps x's dtype "
                         "(write x = x %s y instead, or convert x with .to(%s) first)",
                         name, hd_dtype_name(t->dtype), hd_dtype_name(x->dtype), ip_sym(name),
                         hd_dtype_name(t->dtype));
    else
        st = ip_write_all(vm, xv, r);
    hd_value_unref(vm, r);
    return st;
}

/* y an int number past 2^24 with no alpha (the general path casts it). */
static int ip_big_int(hd_value yv, hd_value av) {
    return yv.type == HD_V_INT && av.type == HD_V_NONE &&
           (yv.as.i > 16777216 || yv.as.i < -16777216);
}

static hd_status ip_arith(hd_vm *vm, int k, hd_targs *a, hd_value *out) {
    const char *name = ip_names[k];
    hd_value xv = a->all[0], yv = a->v[1],
             av = k <= IP_SUB && hd_targ_has(a, 2) ? a->v[2] : hd_none();
    if (av.type != HD_V_NONE && !ip_number(av) && !(av.type == HD_V_TENSOR && av.as.t->numel == 1))
        return hd_targ_type_error(vm, a, 2, "a number or a one-element tensor");
    if (ip_check(vm, name, xv.as.t)) return HD_ERR_RUNTIME;
    hd_tensor *y = yv.type == HD_V_TENSOR ? yv.as.t : NULL;
    int plain = (y || (ip_number(yv) && yv.type != HD_V_BOOL)) &&
                (av.type == HD_V_NONE || (ip_number(av) && av.type != HD_V_BOOL));
    double alpha = !plain || av.type == HD_V_NONE ? 1.0 : ip_number_of(av);
    double s = !plain || y ? alpha : ip_number_of(yv) * alpha;
    if (plain && ip_direct_ok(vm, xv.as.t, y)) {
        ip_direct(k, xv.as.t, y, s);
    } else if (plain && ip_device_ok(vm, k, xv.as.t, y, ip_big_int(yv, av))) {
        if (ip_device(vm, k, xv.as.t, y, s)) return HD_ERR_RUNTIME;
    } else if (ip_general(vm, k, xv, yv, av)) {
        return HD_ERR_RUNTIME;
    }
    *out = hd_value_ref(xv);
    return HD_OK;
}

static HD_TF_FN(tf_add_) {
    HD_TARGS_BIND(a); /* x, other, alpha= */
    return ip_arith(vm, IP_ADD, &a, out);
}

static HD_TF_FN(tf_sub_) {
    HD_TARGS_BIND(a); /* x, other, alpha= */
    return ip_arith(vm, IP_SUB, &a, out);
}

static HD_TF_FN(tf_mul_) {
    HD_TARGS_BIND(a); /* x, other */
    return ip_arith(vm, IP_MUL, &a, out);
}

static HD_TF_FN(tf_div_) {
    HD_TARGS_BIND(a); /* x, other */
    return ip_arith(vm, IP_DIV, &a, out);
}

/* fill_(v), zero_(), copy_(src): x[...] = v. */
static hd_status ip_assign(hd_vm *vm, const char *name, hd_value xv, hd_value v, hd_value *out) {
    if (ip_check(vm, name, xv.as.t) || ip_write_all(vm, xv, v)) return HD_ERR_RUNTIME;
    *out = hd_value_ref(xv);
    return HD_OK;
}

static HD_TF_FN(tf_fill_) {
    HD_TARGS_BIND(a); /* x, value */
    hd_value v = a.v[1];
    if (v.type != HD_V_INT && v.type != HD_V_FLOAT && v.type != HD_V_BOOL &&
        !(v.type == HD_V_TENSOR && v.as.t->numel == 1))
        return hd_targ_type_error(vm, &a, 1, "a number or a one-element tensor");
    return ip_assign(vm, "fill_", a.all[0], v, out);
}

static HD_TF_FN(tf_zero_) {
    HD_TARGS_BIND(a); /* x */
    return ip_assign(vm, "zero_", a.all[0], hd_int(0), out);
}

static HD_TF_FN(tf_copy_) {
    HD_TARGS_BIND(a); /* x, src */
    if (a.v[1].type != HD_V_TENSOR) return hd_targ_type_error(vm, &a, 1, "a tensor");
    return ip_assign(vm, "copy_", a.all[0], a.v[1], out);
}

static const hd_tfunc rows[] = {
    {"add_", tf_add_, "x, other, alpha=", -1, HD_TF_METHOD},
    {"sub_", tf_sub_, "x, other, alpha=", -1, HD_TF_METHOD},
    {"mul_", tf_mul_, "x, other", -1, HD_TF_METHOD},
    {"div_", tf_div_, "x, other", -1, HD_TF_METHOD},
    {"fill_", tf_fill_, "x, value", -1, HD_TF_METHOD},
    {"zero_", tf_zero_, "x", -1, HD_TF_METHOD},
    {"copy_", tf_copy_, "x, src", -1, HD_TF_METHOD},
};

const hd_tfunc_table hd_tfuncs_inplace = {rows, (int)(sizeof rows / sizeof rows[0])};
