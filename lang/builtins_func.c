/* Function transforms over the tape, as JAX's and torch.func's:
 *
 *   grad(f, argnums = 0)(*args)   d f(*args) / d args[argnums]: f returns
 *                                 one number (a tensor of one element)
 *   vjp(f, *primals)              [f(*primals), back]: back(ct) is the
 *                                 list of d sum(ct * f) / d primal
 *   jvp(f, primals, tangents)     [f(*primals), J tangents] (forward mode
 *                                 by differentiating twice)
 *   hessian(f, argnums = 0)(*args) d2 f / d x2 for one argument x:
 *                                 x.shape + x.shape
 *   Cls.apply(*args)              a custom gradient, as
 *                                 torch.autograd.Function: Cls.forward(ctx,
 *                                 *args) runs unrecorded, Cls.backward(ctx,
 *                                 g) gives the arguments' gradients
 *
 * Each evaluation of f runs in a gradient context of its own (a
 * grad_context), on detached copies of the differentiated arguments, so
 * the program's tape and its parameters' .grad are untouched, and the
 * result holds no record. That is why they refuse what would need a
 * gradient of the result itself (higher order, which the tape does not
 * have): an argument that requires grad where the call is made, and a
 * function that reads such a tensor (a model's parameters) while
 * recording is on there. Under no_grad, or with detached tensors, they
 * are plain first-order gradients. */
#include "builtins_tensor.h"
#include "compiled.h"
#include "hd_autograd.h"
#include "hd_backend.h"
#include "eval.h"
#include "vm_internal.h"

#include <stdio.h>
#include <string.h>

/* Arguments a transformed function or apply takes (their tables live on
 * the C stack; a spread call can pass millions). */
#define FUNC_MAX_ARGS 256

static hd_status func_too_many(hd_vm *vm, const char *what, int nargs) {
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s takes at most %d arguments, got %d", what,
                       FUNC_MAX_ARGS, nargs);
}

/* ---- the context an evaluation runs in ---- */

/* The message for a refused higher-order use; what names the transform. */
static hd_status func_higher_order(hd_vm *vm, const char *what, const char *which) {
    int g = strcmp(what, "grad") == 0;
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "%s: %s requires grad where %s is called, so a gradient of the result "
                       "would be wanted there, %s (call it under no_grad { }, or pass detached "
                       "tensors)",
                       what, which, what,
                       g ? "which grad gives only through its arguments (pass the tensor as an "
                           "argument: argnums says which ones are differentiated)"
                         : "and only grad's results can be differentiated again");
}

/* args with the differentiated ones (diff[i] set) replaced by detached
 * tensors that require grad in the current context; new references in
 * out[], the detached ones also in xs[] (borrowed from out). */
static hd_status func_inputs(hd_vm *vm, const char *what, const hd_value *args, int nargs,
                             const unsigned char *diff, hd_value *out, hd_tensor **xs) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    int k = 0;
    for (int i = 0; i < nargs; i++) out[i] = hd_none();
    for (int i = 0; i < nargs; i++) {
        if (!diff[i]) {
            out[i] = hd_value_ref(args[i]);
            continue;
        }
        if (args[i].type != HD_V_TENSOR || !hd_dtype_is_float(args[i].as.t->dtype))
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "%s: argument %d is differentiated, so it must be a float tensor, "
                               "got %s",
                               what, i + 1,
                               args[i].type == HD_V_TENSOR ? hd_dtype_name(args[i].as.t->dtype)
                                                           : hd_value_type_name(args[i]));
        hd_tensor *x = hd_grad_detach(ctx, args[i].as.t);
        if (!x) return hd_vm_from_ctx(vm, HD_OK);
        out[i] = hd_tensor_value(x);
        xs[k++] = x;
    }
    return HD_OK;
}

/* The index of a differentiated argument (any, where diff is NULL) that
 * requires grad where the transform is called, with recording on; -1:
 * none. */
static int func_tracks_args(hd_vm *vm, const hd_value *args, int nargs, const unsigned char *diff) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (!hd_grad_is_enabled(ctx)) return -1;
    for (int i = 0; i < nargs; i++)
        if ((!diff || diff[i]) && args[i].type == HD_V_TENSOR &&
            hd_grad_requires(ctx, args[i].as.t))
            return i;
    return -1;
}

/* Before the function's own context: refused where func_tracks_args finds
 * an argument. */
static hd_status func_check_args(hd_vm *vm, const char *what, const hd_value *args, int nargs,
                                 const unsigned char *diff) {
    int i = func_tracks_args(vm, args, nargs, diff);
    if (i < 0) return HD_OK;
    char which[32];
    snprintf(which, sizeof which, "argument %d", i + 1);
    return func_higher_order(vm, what, which);
}

static void func_unref_all(hd_vm *vm, hd_value *v, int n) {
    for (int i = 0; i < n; i++) hd_value_unref(vm, v[i]);
}

/* Compiled code runs as plain code until func_eager_pop (which gets what
 * this returns). */
static int func_eager_push(hd_vm *vm) {
    int was = vm->compile_none | vm->compile_all << 1;
    vm->compile_none = 1, vm->compile_all = 0;
    return was;
}

static void func_eager_pop(hd_vm *vm, int was) {
    vm->compile_none = was & 1, vm->compile_all = was >> 1;
}

/* f(*in), which must return a tensor. */
static hd_status func_call_plain(hd_vm *vm, const char *what, hd_value f, hd_value *in, int nin,
                                 const hd_kwarg *kw, int nkw, hd_value *y) {
    hd_status st = hd_vm_call(vm, f, in, nin, kw, nkw, y);
    if (st || y->type == HD_V_TENSOR) return st;
    st = hd_vm_error(vm, HD_ERR_RUNTIME, "%s: the function returned %s, not a tensor", what,
                     hd_value_type_name(*y));
    hd_value_unref(vm, *y);
    *y = hd_none();
    return st;
}

/* f(*in) in the transform's own context, watched for reads of tensors the
 * enclosing one tracks. */
static hd_status func_call(hd_vm *vm, const char *what, hd_value f, hd_value *in, int nin,
                           hd_tensor **xs, int nx, const hd_kwarg *kw, int nkw, int outer_on,
                           hd_value *y) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    for (int i = 0; i < nx; i++)
        if (hd_grad_set_requires(ctx, xs[i], 1)) return hd_vm_from_ctx(vm, HD_OK);
    ctx->grad_scope->watch_outer = outer_on;
    hd_status st = func_call_plain(vm, what, f, in, nin, kw, nkw, y);
    ctx->grad_scope->watch_outer = 0;
    if (st || !ctx->grad_scope->read_outer) return st;
    hd_value_unref(vm, *y);
    *y = hd_none();
    return func_higher_order(vm, what, "a tensor the function reads");
}

/* zeros of dtype dt and the shape given, on like's device (NULL: out of
 * memory, in the ctx) */
static hd_tensor *func_zeros(hd_ctx *ctx, const hd_tensor *like, hd_dtype dt, const int64_t *shape,
                             int nd) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = dt;
    at.nshape = nd;
    memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
    hd_place here = hd_place_of(like);
    hd_place prev = hd_place_push(ctx, here.backend ? here.backend : &hd_cpu_backend, here.device);
    hd_tensor *z = NULL;
    hd_op_run(ctx, HD_OP_FULL, NULL, 0, &at, &z);
    hd_place_pop(ctx, prev);
    return z;
}

/* x's gradient after a backward (zeros where the result does not depend
 * on x): a new value. */
static hd_value func_grad_of(hd_vm *vm, hd_tensor *x) {
    hd_tensor *g = hd_grad_get(x);
    if (g) return hd_tensor_value(hd_tensor_ref(g));
    hd_tensor *z = func_zeros(hd_vm_ctx(vm), x, x->dtype, x->shape, x->ndim);
    return z ? hd_tensor_value(z) : hd_err_value();
}

/* backward from y (ct: its cotangent, or NULL for a one-element y) when y
 * depends on the inputs at all. */
static hd_status func_backward(hd_vm *vm, hd_tensor *y, hd_tensor *ct, int retain) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (!hd_grad_requires(ctx, y)) return HD_OK;
    return hd_grad_backward(ctx, y, ct, retain) ? hd_vm_from_ctx(vm, HD_OK) : HD_OK;
}

/* ---- grad(f, argnums = 0) ---- */

/* The argument positions argnums names (an int or a list of ints, negative
 * from the end) as flags in diff; 0 on an error. */
static int grad_positions(hd_vm *vm, hd_value argnums, int nargs, unsigned char *diff) {
    int n = argnums.type == HD_V_LIST ? (int)hd_as_list(argnums)->len : 1;
    const hd_value *items = argnums.type == HD_V_LIST ? hd_as_list(argnums)->items : &argnums;
    memset(diff, 0, (size_t)nargs + 1);
    for (int i = 0; i < n; i++) {
        if (items[i].type != HD_V_INT) {
            hd_vm_error(vm, HD_ERR_RUNTIME,
                        "grad: argnums must be an int or a list of ints, got %s",
                        hd_value_type_name(items[i]));
            return 0;
        }
        int64_t k = items[i].as.i < 0 ? items[i].as.i + nargs : items[i].as.i;
        if (k < 0 || k >= nargs) {
            hd_vm_error(vm, HD_ERR_RUNTIME, "grad: argnums %lld is out of range for %d argument%s",
                        (long long)items[i].as.i, nargs, nargs == 1 ? "" : "s");
            return 0;
        }
        diff[k] = 1;
    }
    return 1;
}

/* The result of grad: xs' gradients (none where absent: zeros), as a list
 * when argnums is one. g[] is consumed. */
static hd_status grad_result(hd_vm *vm, hd_value argnums, hd_tensor **xs, hd_tensor **g, int nx,
                             hd_value *out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_status st = HD_OK;
    for (int i = 0; i < nx && !st; i++)
        if (!g[i] && !(g[i] = func_zeros(ctx, xs[i], xs[i]->dtype, xs[i]->shape, xs[i]->ndim)))
            st = hd_vm_from_ctx(vm, HD_OK);
    hd_value r = argnums.type == HD_V_LIST && !st ? hd_list_new(vm, nx) : hd_none();
    if (argnums.type == HD_V_LIST && !st && r.type != HD_V_LIST) st = hd_vm_oom(vm);
    for (int i = 0; i < nx; i++) {
        hd_value v = g[i] ? hd_tensor_value(g[i]) : hd_none();
        if (st || argnums.type != HD_V_LIST) {
            if (!st && i == 0)
                r = v;
            else
                hd_value_unref(vm, v);
        } else if (hd_list_push(vm, r, v)) {
            st = hd_vm_oom(vm);
        }
    }
    if (st) {
        hd_value_unref(vm, r);
        return st;
    }
    *out = r;
    return HD_OK;
}

/* The differentiated arguments of a nested grad: a recorded copy of one
 * the current context tracks (its gradient flows on to that tensor), a
 * detached tensor that requires grad here for any other. */
static hd_status grad_nested_inputs(hd_vm *vm, const hd_value *args, int nargs,
                                    const unsigned char *diff, hd_value *in, hd_tensor **xs) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_status st = func_inputs(vm, "grad", args, nargs, diff, in, xs);
    for (int i = 0, k = 0; i < nargs && !st; i++) {
        if (!diff[i]) continue;
        hd_tensor *x = xs[k], *c = NULL;
        if (!hd_grad_requires(ctx, args[i].as.t)) {
            if (hd_grad_set_requires(ctx, x, 1)) st = hd_vm_from_ctx(vm, HD_OK);
        } else if (hd_op_run(ctx, HD_OP_COPY, &args[i].as.t, 1, NULL, &c)) {
            st = hd_vm_from_ctx(vm, HD_OK);
        } else {
            hd_value_unref(vm, in[i]);
            in[i] = hd_tensor_value(c);
            xs[k] = c;
        }
        k++;
    }
    return st;
}

/* grad(f)(x) where an argument requires grad where it is called (grad of
 * grad, or a gradient of the result wanted there): f runs
 * in the current context, on the inputs grad_nested_inputs makes, and its
 * gradient is taken with create_graph, so the result has records here and
 * can be differentiated again. No .grad changes. */
static hd_status grad_run_nested(hd_vm *vm, hd_value f, hd_value argnums, const unsigned char *diff,
                                 const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                                 hd_value *out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_value in[nargs + 1], y = hd_none();
    hd_tensor *xs[nargs + 1], *g[nargs + 1];
    int nx = 0;
    for (int i = 0; i < nargs; i++) nx += diff[i];
    hd_status st = grad_nested_inputs(vm, args, nargs, diff, in, xs);
    int was = func_eager_push(vm); /* as func_call_twice */
    if (!st) st = func_call_plain(vm, "grad", f, in, nargs, kw, nkw, &y);
    func_eager_pop(vm, was);
    if (!st && y.as.t->numel != 1)
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "grad: the function must return one number (a tensor of one element), "
                         "got %lld elements; use vjp for other outputs",
                         (long long)y.as.t->numel);
    for (int i = 0; i < nx; i++) g[i] = NULL;
    if (!st && hd_grad_requires(ctx, y.as.t) && hd_grad_partial(ctx, y.as.t, xs, nx, g, 1))
        st = hd_vm_from_ctx(vm, HD_OK);
    if (!st) st = grad_result(vm, argnums, xs, g, nx, out);
    hd_value_unref(vm, y);
    func_unref_all(vm, in, nargs);
    return st;
}

/* One evaluation of the function grad made: self is [f, argnums]. */
static hd_status grad_run(hd_vm *vm, hd_value f, hd_value argnums, const hd_value *args, int nargs,
                          const hd_kwarg *kw, int nkw, hd_value *out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    unsigned char diff[nargs + 1];
    hd_value in[nargs + 1];
    hd_tensor *xs[nargs + 1];
    int nx = 0, outer_on = hd_grad_is_enabled(ctx);
    if (!grad_positions(vm, argnums, nargs, diff)) return HD_ERR_RUNTIME;
    for (int i = 0; i < nargs; i++) nx += diff[i];
    if (func_tracks_args(vm, args, nargs, NULL) >= 0)
        return grad_run_nested(vm, f, argnums, diff, args, nargs, kw, nkw, out);
    if (hd_grad_context_push(ctx)) return hd_vm_from_ctx(vm, HD_OK);
    hd_value y = hd_none();
    hd_status st = func_inputs(vm, "grad", args, nargs, diff, in, xs);
    if (!st) st = func_call(vm, "grad", f, in, nargs, xs, nx, kw, nkw, outer_on, &y);
    if (!st && y.as.t->numel != 1)
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "grad: the function must return one number (a tensor of one element), "
                         "got %lld elements; use vjp for other outputs",
                         (long long)y.as.t->numel);
    if (!st) st = func_backward(vm, y.as.t, NULL, 0);
    hd_tensor *g[nargs + 1];
    for (int i = 0; i < nx && !st; i++) {
        g[i] = hd_grad_get(xs[i]);
        if (g[i]) hd_tensor_ref(g[i]);
    }
    hd_value r = hd_none();
    if (!st) st = grad_result(vm, argnums, xs, g, nx, &r);
    hd_value_unref(vm, y);
    func_unref_all(vm, in, nargs);
    hd_grad_context_pop(ctx);
    if (st) return st;
    *out = r;
    return HD_OK;
}

static hd_status grad_fn_call(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                              const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    HD_UNUSED(data);
    const hd_list *s = hd_as_list(self);
    if (nargs > FUNC_MAX_ARGS) return func_too_many(vm, "grad(f)", nargs);
    return grad_run(vm, s->items[0], s->items[1], args, nargs, kw, nkw, out);
}

/* A native named name that calls fn with self = [f, argnums]. */
static hd_status func_bind(hd_vm *vm, hd_value f, hd_value argnums, const char *name,
                           hd_native_fn fn, hd_value *out) {
    hd_value s = hd_list_new(vm, 2);
    if (s.type != HD_V_LIST) return hd_vm_oom(vm);
    if (hd_list_push(vm, s, hd_value_ref(f)) || hd_list_push(vm, s, hd_value_ref(argnums))) {
        hd_value_unref(vm, s);
        return hd_vm_oom(vm);
    }
    hd_native proto;
    memset(&proto, 0, sizeof proto);
    proto.name = name;
    proto.fn = fn;
    *out = hd_native_bound(vm, &proto, s);
    return out->type == HD_V_NATIVE ? HD_OK : vm->err;
}

static HD_TF_FN(tf_grad) {
    HD_TARGS_BIND(a); /* f, argnums= */
    hd_value argnums = hd_targ_has(&a, 1) ? a.v[1] : hd_int(0);
    if (argnums.type != HD_V_INT && argnums.type != HD_V_LIST)
        return hd_targ_type_error(vm, &a, 1, "an int or a list of ints");
    return func_bind(vm, a.v[0], argnums, "grad(f)", grad_fn_call, out);
}

/* ---- vjp(f, *primals) ---- */

/* What back(ct) needs: the held context with f's records, its output,
 * and the detached primals. */
typedef struct vjp_state {
    hd_grad_scope *scope;
    hd_tensor *y;
    int n;
    hd_tensor *xs[];
} vjp_state;

static void vjp_free(hd_vm *vm, void *p) {
    vjp_state *v = p;
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (!v) return;
    hd_tensor_unref(v->y);
    for (int i = 0; i < v->n; i++) hd_tensor_unref(v->xs[i]);
    if (v->scope) hd_grad_context_free(ctx, v->scope);
    hd_ctx_free(ctx, v, sizeof *v + (size_t)v->n * sizeof *v->xs);
}

static const hd_handle_type vjp_type = {"vjp", vjp_free, NULL};

/* back(ct): the primals' gradients of sum(ct * y), a list. */
static hd_status vjp_back(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                          const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    HD_UNUSED(data);
    HD_UNUSED(kw);
    vjp_state *v = ((hd_handle *)self.as.o)->p;
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (nargs != 1 || nkw)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "vjp: the function it returns takes one argument, the cotangent");
    hd_tensor *ct = NULL;
    if (hd_value_to_tensor(vm, args[0], "cotangent", 0, v->y->dtype, &ct)) return HD_ERR_RUNTIME;
    if (hd_grad_context_enter(ctx, v->scope)) {
        hd_tensor_unref(ct);
        return hd_vm_from_ctx(vm, HD_OK);
    }
    for (int i = 0; i < v->n; i++) hd_grad_set(ctx, v->xs[i], NULL);
    hd_status st = func_backward(vm, v->y, ct, 1);
    hd_value r = st ? hd_none() : hd_list_new(vm, v->n);
    for (int i = 0; i < v->n && r.type == HD_V_LIST && !st; i++) {
        hd_value g = func_grad_of(vm, v->xs[i]);
        st = g.type == HD_V_ERR ? hd_vm_from_ctx(vm, HD_OK) : hd_list_push(vm, r, g);
    }
    if (!st && r.type != HD_V_LIST) st = hd_vm_oom(vm);
    for (int i = 0; i < v->n; i++) hd_grad_set(ctx, v->xs[i], NULL);
    hd_grad_context_pop(ctx);
    hd_tensor_unref(ct);
    if (st) {
        hd_value_unref(vm, r);
        return st;
    }
    *out = r;
    return HD_OK;
}

/* [y, back] with back bound to the state (taken). */
static hd_status vjp_result(hd_vm *vm, vjp_state *v, hd_value *out) {
    hd_value h = hd_handle_new(vm, &vjp_type, v); /* frees v when it fails */
    if (h.type != HD_V_HANDLE) return hd_vm_oom(vm);
    hd_native proto;
    memset(&proto, 0, sizeof proto);
    proto.name = "vjp(f)";
    proto.fn = vjp_back;
    hd_value back = hd_native_bound(vm, &proto, h); /* takes h, also when it fails */
    if (back.type != HD_V_NATIVE) return hd_vm_oom(vm);
    hd_value r = hd_list_new(vm, 2);
    if (r.type != HD_V_LIST) {
        hd_value_unref(vm, back);
        return hd_vm_oom(vm);
    }
    /* a push takes its item, also when it fails */
    hd_status st = hd_list_push(vm, r, hd_tensor_value(hd_tensor_ref(v->y)));
    if (st)
        hd_value_unref(vm, back);
    else
        st = hd_list_push(vm, r, back);
    if (st) {
        hd_value_unref(vm, r);
        return hd_vm_oom(vm);
    }
    *out = r;
    return HD_OK;
}

/* vjp(f, *primals): the arguments as given (a `*name` of the argument
 * binder takes ints only). */
static HD_TF_FN(tf_vjp) {
    HD_UNUSED(self);
    HD_UNUSED(kw);
    HD_UNUSED(data);
    hd_ctx *ctx = hd_vm_ctx(vm);
    int n = nargs - 1, outer_on = hd_grad_is_enabled(ctx);
    if (nkw) return hd_vm_error(vm, HD_ERR_RUNTIME, "vjp(f, *primals) takes no named arguments");
    if (n < 1) return hd_vm_error(vm, HD_ERR_RUNTIME, "vjp(f, *primals): no primals given");
    if (n > FUNC_MAX_ARGS) return func_too_many(vm, "vjp", n);
    unsigned char diff[n + 1];
    hd_value in[n + 1];
    memset(diff, 1, (size_t)n + 1);
    if (func_check_args(vm, "vjp", args + 1, n, diff)) return HD_ERR_RUNTIME;
    vjp_state *v = hd_ctx_calloc(ctx, 1, sizeof *v + (size_t)n * sizeof *v->xs);
    if (!v) return hd_vm_from_ctx(vm, HD_OK);
    v->n = n;
    if (!(v->scope = hd_grad_context_new(ctx)) || hd_grad_context_enter(ctx, v->scope)) {
        vjp_free(vm, v);
        return hd_vm_from_ctx(vm, HD_OK);
    }
    hd_value y = hd_none();
    hd_status st = func_inputs(vm, "vjp", args + 1, n, diff, in, v->xs);
    for (int i = 0; i < n; i++) /* the state keeps its own references */
        if (v->xs[i]) hd_tensor_ref(v->xs[i]);
    if (!st) st = func_call(vm, "vjp", args[0], in, n, v->xs, n, NULL, 0, outer_on, &y);
    func_unref_all(vm, in, n);
    hd_grad_context_pop(ctx);
    if (st) {
        vjp_free(vm, v);
        return st;
    }
    v->y = hd_tensor_ref(y.as.t);
    hd_value_unref(vm, y);
    return vjp_result(vm, v, out);
}

/* ---- jvp(f, primals, tangents) and hessian(f, argnums = 0) ---- */

/* Both differentiate twice inside their own context: backward with
 * create_graph gives J^T u with its history, and a second backward
 * through it gives J t (jvp) or a row of the Hessian. */

/* A list of tensors from a tensor or a list of them (borrowed items in
 * v, at most FUNC_MAX_ARGS); n set. */
static hd_status func_tensor_list(hd_vm *vm, const char *what, const char *name, hd_value x,
                                  hd_value *v, int *n) {
    const hd_value *items = x.type == HD_V_LIST ? hd_as_list(x)->items : &x;
    int64_t len = x.type == HD_V_LIST ? hd_as_list(x)->len : 1;
    if (len > FUNC_MAX_ARGS) return func_too_many(vm, what, (int)HD_MIN(len, INT32_MAX));
    for (int64_t i = 0; i < len; i++) {
        if (items[i].type != HD_V_TENSOR)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: %s must be tensors, item %lld is %s", what,
                               name, (long long)i, hd_value_type_name(items[i]));
        v[i] = items[i];
    }
    *n = (int)len;
    return HD_OK;
}

/* sum_i sum(xs[i].grad * ts[i]) (recorded), the grads cleared; NULL
 * when no primal got a gradient */
static hd_tensor *func_grad_dot(hd_vm *vm, hd_tensor **xs, const hd_value *ts, int n,
                                hd_status *st) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_tensor *acc = NULL;
    for (int i = 0; i < n && !*st; i++) {
        hd_tensor *g = hd_grad_get(xs[i]), *p = NULL, *s = NULL, *t = NULL;
        if (!g) continue;
        hd_attrs at;
        memset(&at, 0, sizeof at);
        if (hd_op_binary(ctx, HD_OP_MUL, g, ts[i].as.t, &p) ||
            hd_op_run(ctx, HD_OP_SUM, &p, 1, &at, &s) ||
            (acc && hd_op_binary(ctx, HD_OP_ADD, acc, s, &t)))
            *st = hd_vm_from_ctx(vm, HD_OK);
        hd_tensor_unref(p);
        if (acc && !*st) {
            hd_tensor_unref(acc);
            hd_tensor_unref(s);
            acc = t;
        } else if (!*st) {
            acc = s;
        } else {
            hd_tensor_unref(s);
        }
    }
    for (int i = 0; i < n; i++) hd_grad_set(ctx, xs[i], NULL);
    return acc;
}

/* the shapes of primal i and tangent i agree */
static hd_status jvp_check(hd_vm *vm, const hd_value *p, const hd_value *t, int n, int nt) {
    if (n != nt) return hd_vm_error(vm, HD_ERR_RUNTIME, "jvp: %d primals but %d tangents", n, nt);
    for (int i = 0; i < n; i++) {
        const hd_tensor *a = p[i].as.t, *b = t[i].as.t;
        if (a->ndim != b->ndim || memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape))
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "jvp: tangent %d has another shape than its primal", i + 1);
    }
    return HD_OK;
}

/* [a, b] (taking both, also on failure) */
static hd_status func_pair(hd_vm *vm, hd_tensor **parts, hd_value *out) {
    hd_value l = hd_list_new(vm, 2);
    if (l.type != HD_V_LIST) {
        hd_tensor_unref(parts[0]), hd_tensor_unref(parts[1]);
        return hd_vm_oom(vm);
    }
    hd_status st = hd_list_push(vm, l, hd_tensor_value(parts[0]));
    if (st)
        hd_tensor_unref(parts[1]);
    else
        st = hd_list_push(vm, l, hd_tensor_value(parts[1]));
    if (st) {
        hd_value_unref(vm, l);
        return hd_vm_oom(vm);
    }
    *out = l;
    return HD_OK;
}

/* f(*in) for a transform that differentiates twice: compiled code inside
 * runs as plain code (the same program; a compiled gradient has no
 * gradient of its own). */
static hd_status func_call_twice(hd_vm *vm, const char *what, hd_value f, hd_value *in, int nin,
                                 hd_tensor **xs, int nx, const hd_kwarg *kw, int nkw, int outer_on,
                                 hd_value *y) {
    int was = func_eager_push(vm);
    hd_status st = func_call(vm, what, f, in, nin, xs, nx, kw, nkw, outer_on, y);
    func_eager_pop(vm, was);
    return st;
}

/* J t with y = f(*primals): u (zeros like y) as the cotangent, x.grad =
 * J^T u with its history, then d/du sum(J^T u * t) */
static hd_status jvp_run(hd_vm *vm, hd_value f, hd_value *in, hd_tensor **xs, int n,
                         const hd_value *ts, int outer_on, hd_value *out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_value y = hd_none();
    hd_tensor *u = NULL, *d = NULL, *yd = NULL, *jt = NULL;
    hd_status st = func_call_twice(vm, "jvp", f, in, n, xs, n, NULL, 0, outer_on, &y);
    if (!st && !(u = func_zeros(ctx, y.as.t, y.as.t->dtype, y.as.t->shape, y.as.t->ndim)))
        st = hd_vm_from_ctx(vm, HD_OK);
    if (!st && hd_grad_set_requires(ctx, u, 1)) st = hd_vm_from_ctx(vm, HD_OK);
    if (!st && hd_grad_requires(ctx, y.as.t) && hd_grad_backward_create(ctx, y.as.t, u))
        st = hd_vm_from_ctx(vm, HD_OK);
    if (!st) d = func_grad_dot(vm, xs, ts, n, &st);
    if (!st && d && hd_grad_requires(ctx, d) && hd_grad_backward(ctx, d, NULL, 0))
        st = hd_vm_from_ctx(vm, HD_OK);
    if (!st) {
        hd_tensor *g = hd_grad_get(u);
        jt = g ? hd_grad_detach(ctx, g) : func_zeros(ctx, u, u->dtype, u->shape, u->ndim);
        yd = hd_grad_detach(ctx, y.as.t);
        if (!jt || !yd) st = hd_vm_from_ctx(vm, HD_OK);
    }
    for (int i = 0; i < n; i++) hd_grad_set(ctx, xs[i], NULL);
    if (u) hd_grad_set(ctx, u, NULL);
    hd_tensor_unref(u), hd_tensor_unref(d);
    hd_value_unref(vm, y);
    hd_tensor *parts[2] = {yd, jt};
    if (!st) return func_pair(vm, parts, out);
    hd_tensor_unref(yd), hd_tensor_unref(jt);
    return st;
}

/* jvp(f, primals, tangents): [f(*primals), J tangents], as torch.func.jvp;
 * primals and tangents are tensors or lists of them. */
static HD_TF_FN(tf_jvp) {
    HD_TARGS_BIND(a); /* f, primals, tangents */
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_value p[FUNC_MAX_ARGS], t[FUNC_MAX_ARGS], in[FUNC_MAX_ARGS];
    hd_tensor *xs[FUNC_MAX_ARGS];
    unsigned char diff[FUNC_MAX_ARGS];
    int n = 0, nt = 0, outer_on = hd_grad_is_enabled(ctx);
    if (func_tensor_list(vm, "jvp", "primals", a.v[1], p, &n) ||
        func_tensor_list(vm, "jvp", "tangents", a.v[2], t, &nt) || jvp_check(vm, p, t, n, nt))
        return HD_ERR_RUNTIME;
    memset(diff, 1, sizeof diff);
    if (func_check_args(vm, "jvp", p, n, diff)) return HD_ERR_RUNTIME;
    if (hd_grad_context_push(ctx)) return hd_vm_from_ctx(vm, HD_OK);
    hd_status st = func_inputs(vm, "jvp", p, n, diff, in, xs);
    if (!st) st = jvp_run(vm, a.v[0], in, xs, n, t, outer_on, out);
    func_unref_all(vm, in, n);
    hd_grad_context_pop(ctx);
    return st;
}

/* rows of the Hessian of y (one element) in x: d g_i / dx for each
 * element g_i of g = x.grad (with its history), stacked */
static hd_tensor *hessian_rows(hd_vm *vm, hd_tensor *x, hd_tensor *g, hd_status *st) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    int64_t n = x->numel, flat[1] = {n}, row[2] = {1, n};
    hd_tensor *gf = NULL, *h = NULL;
    hd_tensor **rows = hd_ctx_calloc(ctx, (size_t)HD_MAX(n, 1), sizeof *rows);
    if (!rows || hd_treshape(ctx, g, flat, 1, &gf)) *st = hd_vm_from_ctx(vm, HD_OK);
    for (int64_t i = 0; i < n && !*st; i++) {
        hd_tensor *gi = NULL, *r = NULL;
        if (hd_tslice_axis(ctx, gf, 0, i, 1, 1, &gi) ||
            (hd_grad_requires(ctx, gi) && hd_grad_backward(ctx, gi, NULL, 1)))
            *st = hd_vm_from_ctx(vm, HD_OK);
        hd_tensor *d = *st ? NULL : hd_grad_get(x);
        if (!*st && d) {
            if (hd_treshape(ctx, d, row, 2, &r)) *st = hd_vm_from_ctx(vm, HD_OK);
        } else if (!*st && !(r = func_zeros(ctx, x, x->dtype, row, 2))) {
            *st = hd_vm_from_ctx(vm, HD_OK);
        }
        rows[i] = r;
        hd_grad_set(ctx, x, NULL);
        hd_tensor_unref(gi);
    }
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (!*st && n && hd_op_run(ctx, HD_OP_CONCAT, rows, (int)n, &at, &h))
        *st = hd_vm_from_ctx(vm, HD_OK);
    for (int64_t i = 0; rows && i < n; i++) hd_tensor_unref(rows[i]);
    if (rows) hd_ctx_free(ctx, rows, (size_t)HD_MAX(n, 1) * sizeof *rows);
    hd_tensor_unref(gf);
    return h;
}

#define HESSIAN_MAX 4096 /* elements of the differentiated argument: n backward passes */

/* One evaluation of hessian(f, argnums)(*args): x.shape + x.shape. */
static hd_status hessian_run(hd_vm *vm, hd_value f, int64_t argnum, const hd_value *args, int nargs,
                             const hd_kwarg *kw, int nkw, hd_value *out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    unsigned char diff[nargs + 1];
    hd_value in[nargs + 1];
    hd_tensor *xs[nargs + 1], *g = NULL, *h = NULL, *hs = NULL;
    int outer_on = hd_grad_is_enabled(ctx);
    memset(xs, 0, sizeof xs);
    if (!grad_positions(vm, hd_int(argnum), nargs, diff)) return HD_ERR_RUNTIME;
    if (func_check_args(vm, "hessian", args, nargs, diff)) return HD_ERR_RUNTIME;
    if (hd_grad_context_push(ctx)) return hd_vm_from_ctx(vm, HD_OK);
    hd_value y = hd_none();
    hd_status st = func_inputs(vm, "hessian", args, nargs, diff, in, xs);
    if (!st && xs[0]->numel > HESSIAN_MAX)
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "hessian: the argument has %lld elements, more "
                         "than the %d it takes (one backward pass each)",
                         (long long)xs[0]->numel, HESSIAN_MAX);
    if (!st) st = func_call_twice(vm, "hessian", f, in, nargs, xs, 1, kw, nkw, outer_on, &y);
    if (!st && y.as.t->numel != 1)
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "hessian: the function must return one number, got "
                         "%lld elements",
                         (long long)y.as.t->numel);
    if (!st && hd_grad_requires(ctx, y.as.t) && hd_grad_backward_create(ctx, y.as.t, NULL))
        st = hd_vm_from_ctx(vm, HD_OK);
    if (!st && (g = hd_grad_get(xs[0]))) {
        hd_tensor_ref(g);
        hd_grad_set(ctx, xs[0], NULL);
        h = hessian_rows(vm, xs[0], g, &st);
    }
    int64_t shape[2 * HD_MAX_DIMS];
    int nd = st ? 0 : 2 * xs[0]->ndim;
    if (!st && nd > HD_MAX_DIMS)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "hessian: the result would have %d dims", nd);
    for (int i = 0; !st && i < nd; i++) shape[i] = xs[0]->shape[i % xs[0]->ndim];
    if (!st && !h && !(h = func_zeros(ctx, xs[0], xs[0]->dtype, shape, nd)))
        st = hd_vm_from_ctx(vm, HD_OK);
    if (!st && hd_treshape(ctx, h, shape, nd, &hs)) st = hd_vm_from_ctx(vm, HD_OK);
    hd_tensor *r = st ? NULL : hd_grad_detach(ctx, hs);
    if (r)
        *out = hd_tensor_value(r);
    else if (!st)
        st = hd_vm_from_ctx(vm, HD_OK);
    if (xs[0]) hd_grad_set(ctx, xs[0], NULL);
    hd_tensor_unref(g), hd_tensor_unref(h), hd_tensor_unref(hs);
    hd_value_unref(vm, y);
    func_unref_all(vm, in, nargs);
    hd_grad_context_pop(ctx);
    return st;
}

static hd_status hessian_fn_call(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                                 const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    HD_UNUSED(data);
    const hd_list *s = hd_as_list(self);
    if (nargs > FUNC_MAX_ARGS) return func_too_many(vm, "hessian(f)", nargs);
    return hessian_run(vm, s->items[0], s->items[1].as.i, args, nargs, kw, nkw, out);
}

/* hessian(f, argnums = 0)(*args): the second derivatives of f (one
 * number) in one argument of at most HESSIAN_MAX elements */
static HD_TF_FN(tf_hessian) {
    HD_TARGS_BIND(a); /* f, argnums= */
    hd_value argnums = hd_targ_has(&a, 1) ? a.v[1] : hd_int(0);
    if (argnums.type != HD_V_INT) return hd_targ_type_error(vm, &a, 1, "an int");
    return func_bind(vm, a.v[0], argnums, "hessian(f)", hessian_fn_call, out);
}

/* ---- custom gradients: Cls.apply(*args) ---- */

/* What the record keeps: the class, the ctx dict forward filled, and for
 * each recorded input its position among the arguments and its shape. */
typedef struct fn_record {
    hd_vm *vm;
    hd_value cls, ctxd;
    int nargs, nin;
    struct {
        int pos, ndim;
        hd_dtype dtype;
        int64_t shape[HD_MAX_DIMS];
    } in[];
} fn_record;

static size_t fn_record_size(int nin) {
    return sizeof(fn_record) + (size_t)nin * sizeof(((fn_record *)0)->in[0]);
}

static void fn_record_free(hd_ctx *ctx, void *ud) {
    fn_record *r = ud;
    if (!r->vm->sweeping) { /* at VM exit every object goes at once */
        hd_value_unref(r->vm, r->cls);
        hd_value_unref(r->vm, r->ctxd);
    }
    hd_ctx_free(ctx, r, fn_record_size(r->nin));
}

static const char *fn_class_name(hd_value cls) {
    hd_value n = ((hd_class *)cls.as.o)->name;
    return n.type == HD_V_STR ? hd_as_str(n)->chars : "Function";
}

/* The VM's error, raised in what ("Cls.backward"), as the runtime's
 * (backward reports it at the user's line); the VM's own is cleared. */
static hd_status fn_error_to_ctx(hd_vm *vm, hd_ctx *ctx, const char *cls) {
    hd_status st = vm->err ? vm->err : HD_ERR_RUNTIME;
    char msg[HD_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", vm->errmsg);
    hd_vm_clear_error(vm);
    hd_error(ctx, st, "%s.backward: %s", cls, msg);
    return st;
}

/* Gradient v (none: no gradient) for recorded input j into *g. */
static hd_status fn_grad_in(hd_vm *vm, hd_ctx *ctx, const fn_record *r, int j, hd_value v,
                            hd_tensor **g) {
    *g = NULL;
    if (v.type == HD_V_NONE) return HD_OK;
    if (hd_value_to_tensor(vm, v, "gradient", 0, r->in[j].dtype, g))
        return fn_error_to_ctx(vm, ctx, fn_class_name(r->cls));
    if ((*g)->ndim == r->in[j].ndim &&
        !memcmp((*g)->shape, r->in[j].shape, (size_t)r->in[j].ndim * sizeof *(*g)->shape))
        return HD_OK;
    char want[96], got[96];
    hd_shape_str(r->in[j].shape, r->in[j].ndim, want, sizeof want);
    hd_shape_str((*g)->shape, (*g)->ndim, got, sizeof got);
    hd_tensor_unref(*g);
    *g = NULL;
    return hd_error(ctx, HD_ERR_RUNTIME,
                    "%s.backward: the gradient for argument %d has shape %s, the argument %s",
                    fn_class_name(r->cls), r->in[j].pos + 1, got, want);
}

/* Cls.backward(ctx, g), unrecorded; its result (a tensor for one
 * argument, else a list with one entry per argument) into gin. */
static hd_status fn_backward(hd_ctx *ctx, void *ud, hd_tensor *g, const unsigned char *need,
                             hd_tensor **gin, int nin) {
    fn_record *r = ud;
    hd_vm *vm = r->vm;
    hd_value bwd, res, args[2] = {r->ctxd, hd_tensor_value(g)};
    if (hd_compiled_custom_backward(vm)) /* the compiled call runs eagerly instead */
        return hd_error(ctx, HD_ERR_RUNTIME, "%s.backward in a compiled call's backward graph",
                        fn_class_name(r->cls));
    if (hd_eval_get_member(vm, r->cls, "backward", &bwd))
        return fn_error_to_ctx(vm, ctx, fn_class_name(r->cls));
    int was = hd_grad_set_enabled(ctx, 0);
    hd_status st = hd_vm_call(vm, bwd, args, 2, NULL, 0, &res);
    hd_grad_set_enabled(ctx, was);
    hd_value_unref(vm, bwd);
    if (st) return fn_error_to_ctx(vm, ctx, fn_class_name(r->cls));
    int n = res.type == HD_V_LIST ? (int)hd_as_list(res)->len : 1;
    const hd_value *items = res.type == HD_V_LIST ? hd_as_list(res)->items : &res;
    if (n != r->nargs)
        st = hd_error(ctx, HD_ERR_RUNTIME,
                      "%s.backward returned %d gradient%s for %d argument%s (a list, none where "
                      "there is none)",
                      fn_class_name(r->cls), n, n == 1 ? "" : "s", r->nargs,
                      r->nargs == 1 ? "" : "s");
    for (int j = 0; j < nin && !st; j++)
        if (need[j]) st = fn_grad_in(vm, ctx, r, j, items[r->in[j].pos], &gin[j]);
    hd_value_unref(vm, res);
    return st;
}

static const hd_grad_custom fn_custom = {fn_backward, fn_record_free};

/* ctx.save_for_backward(*tensors): kept as ctx.saved_tensors. */
static hd_status fn_save(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                         const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    HD_UNUSED(kw);
    HD_UNUSED(data);
    if (nkw) return hd_vm_error(vm, HD_ERR_RUNTIME, "save_for_backward takes no named arguments");
    hd_value l = hd_list_new(vm, nargs);
    if (l.type != HD_V_LIST) return hd_vm_oom(vm);
    for (int i = 0; i < nargs; i++)
        if (hd_list_push(vm, l, hd_value_ref(args[i]))) {
            hd_value_unref(vm, l);
            return hd_vm_oom(vm);
        }
    if (hd_dict_set(vm, self, "saved_tensors", l)) return hd_vm_oom(vm); /* takes l */
    *out = hd_none();
    return HD_OK;
}

/* The ctx forward gets: a dict with save_for_backward, saved_tensors and
 * needs_input_grad (a bool per argument). */
static hd_value fn_ctx_new(hd_vm *vm, const hd_value *args, int nargs, int grad_on) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_value d = hd_dict_new(vm);
    if (d.type != HD_V_DICT) return hd_none();
    /* hd_dict_set takes the value, also when it fails; the lists are the
     * dict's from then on (needs is filled through it) */
    hd_value needs = hd_list_new(vm, nargs);
    int ok = needs.type == HD_V_LIST && !hd_dict_set(vm, d, "needs_input_grad", needs);
    hd_value saved = ok ? hd_list_new(vm, 0) : hd_none();
    ok = ok && saved.type == HD_V_LIST && !hd_dict_set(vm, d, "saved_tensors", saved);
    for (int i = 0; i < nargs && ok; i++)
        ok = !hd_list_push(
            vm, needs,
            hd_bool(grad_on && args[i].type == HD_V_TENSOR && hd_grad_requires(ctx, args[i].as.t)));
    hd_native proto;
    memset(&proto, 0, sizeof proto);
    proto.name = "save_for_backward";
    proto.fn = fn_save;
    hd_value save = ok ? hd_native_bound(vm, &proto, hd_value_ref(d)) : hd_none();
    ok = ok && save.type == HD_V_NATIVE && !hd_dict_set(vm, d, "save_for_backward", save);
    if (!ok) {
        hd_value_unref(vm, d);
        return hd_none();
    }
    return d;
}

/* Record y (forward's result) as made from the arguments that require
 * grad; *y may be replaced by an alias when forward returned a tensor
 * that has a record already (an argument itself). */
static hd_status fn_record_out(hd_vm *vm, hd_value cls, hd_value ctxd, const hd_value *args,
                               int nargs, hd_tensor **y) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_tensor *ins[nargs + 1];
    int nin = 0;
    for (int i = 0; i < nargs; i++)
        if (args[i].type == HD_V_TENSOR && hd_grad_requires(ctx, args[i].as.t))
            ins[nin++] = args[i].as.t;
    if (!nin || !hd_dtype_is_float((*y)->dtype)) return HD_OK;
    fn_record *r = hd_ctx_calloc(ctx, 1, fn_record_size(nin));
    if (!r) return hd_vm_from_ctx(vm, HD_OK);
    r->vm = vm;
    r->cls = hd_value_ref(cls);
    r->ctxd = hd_value_ref(ctxd);
    r->nargs = nargs;
    r->nin = nin;
    for (int i = 0, j = 0; i < nargs; i++) {
        if (!(args[i].type == HD_V_TENSOR && hd_grad_requires(ctx, args[i].as.t))) continue;
        r->in[j].pos = i;
        r->in[j].ndim = args[i].as.t->ndim;
        r->in[j].dtype = args[i].as.t->dtype;
        memcpy(r->in[j].shape, args[i].as.t->shape, sizeof r->in[j].shape);
        j++;
    }
    if ((*y)->grad_info) {
        hd_tensor *alias = hd_grad_detach(ctx, *y);
        if (!alias) {
            fn_record_free(ctx, r);
            return hd_vm_from_ctx(vm, HD_OK);
        }
        hd_tensor_unref(*y);
        *y = alias;
    }
    return hd_autograd_record_custom(ctx, ins, nin, *y, &fn_custom, r) ? hd_vm_from_ctx(vm, HD_OK)
                                                                       : HD_OK;
}

/* Cls.apply(*args): self is the class. */
static hd_status fn_apply(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                          const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    HD_UNUSED(kw);
    HD_UNUSED(data);
    hd_ctx *ctx = hd_vm_ctx(vm);
    const char *name = fn_class_name(self);
    if (nkw) return hd_vm_error(vm, HD_ERR_RUNTIME, "%s.apply takes positional arguments", name);
    if (nargs > FUNC_MAX_ARGS) return func_too_many(vm, "apply", nargs);
    hd_value fwd, y;
    if (!hd_dict_get(((hd_class *)self.as.o)->methods, "backward"))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s.apply: the class has no backward(ctx, g)", name);
    if (hd_eval_get_member(vm, self, "forward", &fwd)) return vm->err;
    int grad_on = hd_grad_is_enabled(ctx);
    hd_value ctxd = fn_ctx_new(vm, args, nargs, grad_on);
    if (ctxd.type != HD_V_DICT) {
        hd_value_unref(vm, fwd);
        return hd_vm_oom(vm);
    }
    hd_value call[nargs + 1];
    call[0] = ctxd;
    for (int i = 0; i < nargs; i++) call[i + 1] = args[i];
    int was = hd_grad_set_enabled(ctx, 0);
    hd_status st = hd_vm_call(vm, fwd, call, nargs + 1, NULL, 0, &y);
    hd_grad_set_enabled(ctx, was);
    hd_value_unref(vm, fwd);
    if (!st && y.type != HD_V_TENSOR) {
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "%s.forward returned %s, not a tensor", name,
                         hd_value_type_name(y));
        hd_value_unref(vm, y);
    }
    if (!st && grad_on) {
        hd_tensor *t = y.as.t;
        st = fn_record_out(vm, self, ctxd, args, nargs, &t);
        y = hd_tensor_value(t);
        if (st) hd_value_unref(vm, y);
    }
    hd_value_unref(vm, ctxd);
    if (st) return st;
    *out = y;
    return HD_OK;
}

hd_status hd_tensor_class_apply(hd_vm *vm, hd_value cls, hd_value *out) {
    hd_native proto;
    memset(&proto, 0, sizeof proto);
    proto.name = "apply";
    proto.fn = fn_apply;
    *out = hd_native_bound(vm, &proto, hd_value_ref(cls));
    return out->type == HD_V_NATIVE ? HD_OK : vm->err;
}

static const hd_tfunc rows[] = {
    {"grad", tf_grad, "f, argnums=", -1, HD_TF_GLOBAL},
    {"vjp", tf_vjp, "f, *primals", -1, HD_TF_GLOBAL},
    {"jvp", tf_jvp, "f, primals, tangents", -1, HD_TF_GLOBAL},
    {"hessian", tf_hessian, "f, argnums=", -1, HD_TF_GLOBAL},
};

const hd_tfunc_table hd_tfuncs_func = {rows, (int)(sizeof rows / sizeof rows[0])};
