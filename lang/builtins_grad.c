/* Gradients in the language: param, backward, zero_grad, detach,
 * clear_tape, the requires_grad / grad members, gradient context values
 * (grad_context()), and the no_grad and grad_context blocks (through the
 * evaluator's block hooks). The semantics are the autograd runtime's
 * (runtime/hd_autograd.h, docs/autograd.md); this file turns Hodu values
 * into its calls and its errors into errors at the user's line. */
#include "builtins_tensor.h"
#include "hd_autograd.h"
#include "hd_backend.h"
#include "hd_memo.h"
#include "compiled.h"
#include "eval.h"
#include "vm_internal.h"

#include <stdint.h>
#include <string.h>

/* An autograd error as the VM's error, with the runtime's status (out of
 * memory stays out of memory): its messages already say what failed. */
static hd_status grad_fail(hd_vm *vm) {
    return hd_vm_from_ctx(vm, HD_OK);
}

static hd_status want_tensor(hd_vm *vm, const hd_targs *a, int i) {
    return a->v[i].type == HD_V_TENSOR ? HD_OK : hd_targ_type_error(vm, a, i, "a tensor");
}

/* param(t): t itself, marked as a leaf that requires grad. */
static HD_TF_FN(tf_param) {
    HD_TARGS_BIND(a); /* t */
    if (want_tensor(vm, &a, 0)) return HD_ERR_RUNTIME;
    if (hd_grad_set_requires(hd_vm_ctx(vm), a.v[0].as.t, 1)) return grad_fail(vm);
    *out = hd_value_ref(a.v[0]);
    return HD_OK;
}

/* x.detach(): same storage, no record, requires_grad false. */
static HD_TF_FN(tf_detach) {
    HD_TARGS_BIND(a); /* x */
    if (want_tensor(vm, &a, 0)) return HD_ERR_RUNTIME;
    hd_tensor *r = hd_grad_detach(hd_vm_ctx(vm), a.v[0].as.t);
    if (!r) return grad_fail(vm);
    *out = hd_tensor_value(r);
    return HD_OK;
}

/* x.requires_grad_(requires_grad = true): x itself, marked (torch's
 * spelling of x.requires_grad = true, for chains: randn([3]).requires_grad_()). */
static HD_TF_FN(tf_requires_grad_) {
    HD_TARGS_BIND(a); /* x, requires_grad= */
    int on;
    if (want_tensor(vm, &a, 0) || hd_targ_bool(vm, &a, 1, 1, &on)) return HD_ERR_RUNTIME;
    if (hd_grad_set_member(vm, a.v[0].as.t, "requires_grad", hd_bool(on))) return HD_ERR_RUNTIME;
    *out = hd_value_ref(a.v[0]);
    return HD_OK;
}

/* loss.backward(grad = none, retain_graph = false, create_graph = false),
 * backward(loss). */
static HD_TF_FN(tf_backward) {
    HD_TARGS_BIND(a); /* x, grad=, retain_graph=, create_graph= */
    int retain, create;
    hd_tensor *g = NULL;
    if (want_tensor(vm, &a, 0) || hd_targ_bool(vm, &a, 2, 0, &retain) ||
        hd_targ_bool(vm, &a, 3, 0, &create))
        return HD_ERR_RUNTIME;
    if (hd_targ_has(&a, 1) && hd_targ_tensor(vm, &a, 1, &g)) return HD_ERR_RUNTIME;
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_status st = create ? hd_grad_backward_create(ctx, a.v[0].as.t, g)
                          : hd_grad_backward(ctx, a.v[0].as.t, g, retain);
    hd_tensor_unref(g);
    if (st) return grad_fail(vm);
    return hd_dist_backward_hooks(vm);
}

/* zero_grad(list of tensors, or an object: its parameters()). */
static hd_status zero_list(hd_vm *vm, hd_value list) {
    hd_list *l = hd_as_list(list);
    for (int64_t i = 0; i < l->len; i++) {
        if (l->items[i].type != HD_V_TENSOR)
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "zero_grad: item %lld of the list is a %s, not a tensor",
                               (long long)i, hd_value_type_name(l->items[i]));
    }
    for (int64_t i = 0; i < l->len; i++) hd_grad_set(hd_vm_ctx(vm), l->items[i].as.t, NULL);
    return HD_OK;
}

static HD_TF_FN(tf_zero_grad) {
    HD_TARGS_BIND(a); /* params */
    hd_value p = a.v[0];
    if (p.type == HD_V_TENSOR) return hd_grad_set(hd_vm_ctx(vm), p.as.t, NULL), HD_OK;
    if (p.type == HD_V_LIST) return zero_list(vm, p);
    if (p.type != HD_V_OBJECT)
        return hd_targ_type_error(vm, &a, 0, "a list of tensors or an object with parameters()");
    hd_value fn, list;
    if (hd_eval_get_member(vm, p, "parameters", &fn)) return HD_ERR_RUNTIME;
    hd_status st = hd_vm_call(vm, fn, NULL, 0, NULL, 0, &list);
    hd_value_unref(vm, fn);
    if (st) return st;
    st = list.type == HD_V_LIST
             ? zero_list(vm, list)
             : hd_vm_error(vm, HD_ERR_RUNTIME, "zero_grad: parameters() returned a %s, not a list",
                           hd_value_type_name(list));
    hd_value_unref(vm, list);
    return st;
}

static HD_TF_FN(tf_clear_tape) {
    HD_TARGS_BIND(a); /* (none) */
    hd_grad_clear_tape(hd_vm_ctx(vm));
    return HD_OK;
}

/* is_grad_enabled(): false inside no_grad. */
static HD_TF_FN(tf_is_grad_enabled) {
    HD_TARGS_BIND(a); /* (none) */
    *out = hd_bool(hd_grad_is_enabled(hd_vm_ctx(vm)));
    return HD_OK;
}

/* memory_stats(device = none): what the VM's allocator holds now and at
 * its peak, the live gradient records of the current context and the
 * block cache; for a device with an allocator of its own ("cuda:0"), its
 * figures: used, peak and cached. */
static hd_status stat_set(hd_vm *vm, hd_value d, const char *k, int64_t v) {
    return hd_dict_set(vm, d, k, hd_int(v));
}

static uint64_t memo_hits(const hd_ctx *ctx) {
    uint64_t hits, misses;
    hd_memo_counts(ctx, &hits, &misses);
    return hits;
}

static hd_status device_memory_stats(hd_vm *vm, const hd_targs *a, hd_value *out) {
    hd_mem_stats st;
    if (a->place->memory(hd_vm_ctx(vm), a->place_device, HD_MEM_READ, &st))
        return hd_tfail(vm, "memory_stats");
    hd_value d = hd_dict_new(vm);
    if (hd_vm_failed(vm)) return HD_ERR_MEMORY;
    if (stat_set(vm, d, "used", (int64_t)st.used) || stat_set(vm, d, "peak", (int64_t)st.peak) ||
        stat_set(vm, d, "cached", (int64_t)st.cached)) {
        hd_value_unref(vm, d);
        return HD_ERR_MEMORY;
    }
    *out = d;
    return HD_OK;
}

static HD_TF_FN(tf_memory_stats) {
    HD_TARGS_BIND(a); /* device= */
    if (hd_targ_device(vm, &a, 0)) return HD_ERR_RUNTIME;
    if (a.place && a.place->memory) return device_memory_stats(vm, &a, out);
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_value d = hd_dict_new(vm);
    if (hd_vm_failed(vm)) return HD_ERR_MEMORY;
    if (stat_set(vm, d, "used", (int64_t)ctx->mem_used) ||
        stat_set(vm, d, "peak", (int64_t)ctx->mem_peak) ||
        stat_set(vm, d, "cached", (int64_t)ctx->cache_bytes) ||
        stat_set(vm, d, "memo", (int64_t)hd_memo_bytes(ctx)) ||
        stat_set(vm, d, "memo_hits", (int64_t)memo_hits(ctx)) ||
        stat_set(vm, d, "records", (int64_t)hd_grad_record_count(ctx))) {
        hd_value_unref(vm, d);
        return HD_ERR_MEMORY;
    }
    *out = d;
    return HD_OK;
}

static HD_TF_FN(tf_grad_context);

static const hd_tfunc rows[] = {
    {"param", tf_param, "t", -1, HD_TF_GLOBAL},
    {"detach", tf_detach, "x", -1, HD_TF_BOTH},
    {"requires_grad_", tf_requires_grad_, "x, requires_grad=", -1, HD_TF_METHOD},
    {"backward", tf_backward, "x, grad=, retain_graph=, create_graph=", -1, HD_TF_BOTH},
    {"zero_grad", tf_zero_grad, "params", -1, HD_TF_GLOBAL},
    {"clear_tape", tf_clear_tape, "", -1, HD_TF_GLOBAL},
    {"is_grad_enabled", tf_is_grad_enabled, "", -1, HD_TF_GLOBAL},
    {"memory_stats", tf_memory_stats, "device=", -1, HD_TF_GLOBAL},
    {"grad_context", tf_grad_context, "", -1, HD_TF_GLOBAL},
};

const hd_tfunc_table hd_tfuncs_grad = {rows, (int)(sizeof rows / sizeof rows[0])};

/* ---- members ---- */

hd_status hd_grad_member(hd_vm *vm, hd_tensor *t, const char *name, hd_value *out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (strcmp(name, "requires_grad") == 0) {
        *out = hd_bool(hd_grad_requires(ctx, t));
    } else if (strcmp(name, "is_leaf") == 0) {
        *out = hd_bool(hd_grad_is_leaf(ctx, t));
    } else {
        hd_tensor *g = hd_grad_get(t);
        if (HD_UNLIKELY(ctx->trace) && hd_compiled_grad_input(vm, g)) return vm->err;
        if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_grad(vm, t);
        *out = g ? hd_tensor_value(hd_tensor_ref(g)) : hd_none();
    }
    return HD_OK;
}

hd_status hd_grad_set_member(hd_vm *vm, hd_tensor *t, const char *name, hd_value v) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (strcmp(name, "requires_grad") == 0) {
        if (v.type != HD_V_BOOL)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "requires_grad must be true or false, got %s",
                               hd_value_type_name(v));
        return hd_grad_set_requires(ctx, t, v.as.b) ? grad_fail(vm) : HD_OK;
    }
    if (v.type == HD_V_NONE) return hd_grad_set(ctx, t, NULL), HD_OK;
    hd_tensor *g = NULL;
    if (hd_value_to_tensor(vm, v, "grad", 0, t->dtype, &g)) return HD_ERR_RUNTIME;
    hd_status st = hd_grad_set(ctx, t, g);
    hd_tensor_unref(g);
    return st ? grad_fail(vm) : HD_OK;
}

/* ---- context values: let c = grad_context() ---- */

/* A handle whose object is a held gradient context (hd_grad_context_new).
 * It is freed with its records when the last reference to the value goes,
 * or earlier by c.close(), which leaves the handle empty (p NULL). */
static void gctx_free(hd_vm *vm, void *p) {
    hd_grad_context_free(hd_vm_ctx(vm), p);
}

static hd_status gctx_member(hd_vm *vm, hd_value self, const char *name, hd_value *out);

static const hd_handle_type gctx_type = {"grad_context", gctx_free, gctx_member};

static hd_handle *gctx_handle(hd_value v) {
    if (v.type != HD_V_HANDLE) return NULL;
    hd_handle *h = (hd_handle *)v.as.o;
    return h->htype == &gctx_type ? h : NULL;
}

static hd_status gctx_closed(hd_vm *vm, const char *what) {
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "%s: the gradient context was closed (ctx.close()); make a new one with "
                       "grad_context()",
                       what);
}

/* grad_context(): a new context, entered by grad_context(c) { }. */
static HD_TF_FN(tf_grad_context) {
    HD_TARGS_BIND(a); /* (none) */
    hd_grad_scope *s = hd_grad_context_new(hd_vm_ctx(vm));
    if (!s) return grad_fail(vm);
    *out = hd_handle_new(vm, &gctx_type, s); /* frees s when it fails */
    return out->type == HD_V_HANDLE ? HD_OK : hd_vm_oom(vm);
}

/* c.close(): frees the context's records now; its parameters are
 * constants from then on. Closing twice does nothing. */
static hd_status gctx_close(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                            const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    hd_handle *h = gctx_handle(self);
    (void)args;
    (void)kw;
    (void)data;
    if (nargs || nkw) return hd_vm_error(vm, HD_ERR_RUNTIME, "close() takes no arguments");
    hd_grad_scope *s = h->p;
    if (s && hd_grad_context_entered(s))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "close: the gradient context is entered (close it after its "
                           "grad_context block)");
    h->p = NULL;
    hd_grad_context_free(hd_vm_ctx(vm), s);
    *out = hd_none();
    return HD_OK;
}

static hd_status gctx_member(hd_vm *vm, hd_value self, const char *name, hd_value *out) {
    const hd_grad_scope *s = gctx_handle(self)->p;
    if (!strcmp(name, "close")) {
        hd_native proto;
        memset(&proto, 0, sizeof proto);
        proto.name = "close";
        proto.fn = gctx_close;
        *out = hd_native_bound(vm, &proto, hd_value_ref(self));
        return out->type == HD_V_NATIVE ? HD_OK : vm->err;
    }
    if (!strcmp(name, "closed")) {
        *out = hd_bool(s == NULL);
        return HD_OK;
    }
    if (!strcmp(name, "id") || !strcmp(name, "records")) {
        if (!s) return gctx_closed(vm, name);
        *out = hd_int(name[0] == 'i' ? (int64_t)hd_grad_context_id(s)
                                     : (int64_t)hd_grad_context_records(s));
        return HD_OK;
    }
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "grad_context has no member '%s' (members: id, records, closed, close)",
                       name);
}

/* ---- no_grad { }, grad_context { } and grad_context(c) { } ---- */

/* grad_context(c) { }: the block holds a reference to c (kept in *state)
 * so that the context outlives the block even if the program drops c
 * inside it. */
static hd_status gctx_enter(hd_vm *vm, const hd_value *arg, void **state) {
    hd_handle *h = gctx_handle(*arg);
    if (!h)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "grad_context(ctx): ctx must be a gradient context (made by "
                           "grad_context()), got %s",
                           hd_value_type_name(*arg));
    if (!h->p) return gctx_closed(vm, "grad_context(ctx)");
    if (hd_grad_context_enter(hd_vm_ctx(vm), h->p)) return grad_fail(vm);
    *state = h;
    hd_value_ref(*arg);
    return HD_OK;
}

static hd_status grad_enter(hd_vm *vm, int kind, const hd_value *arg, void **state) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (kind == HD_AST_WITH_STRATEGY) return hd_strategy_enter(vm, arg, state);
    if (kind == HD_AST_NO_GRAD) {
        *state = (void *)(intptr_t)hd_grad_set_enabled(ctx, 0);
        return HD_OK;
    }
    if (arg) return gctx_enter(vm, arg, state);
    return hd_grad_context_push(ctx) ? grad_fail(vm) : HD_OK;
}

/* Runs after the block, also when it failed: the error in flight stays
 * the VM's; the context's error slot is not touched by these calls. A
 * context value is left with its records kept (popping a held context
 * does not free it); dropping the block's reference may free it. */
static void grad_exit(hd_vm *vm, int kind, void *state) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (kind == HD_AST_WITH_STRATEGY) {
        hd_strategy_exit(vm, state);
        return;
    }
    if (kind == HD_AST_NO_GRAD) {
        hd_grad_set_enabled(ctx, (int)(intptr_t)state);
        return;
    }
    hd_grad_context_pop(ctx);
    if (state) hd_value_unref(vm, hd_obj_value(&((hd_handle *)state)->obj));
}

hd_status hd_builtins_grad_open(hd_vm *vm) {
    hd_vm_set_grad_hooks(vm, grad_enter, grad_exit);
    return HD_OK;
}
