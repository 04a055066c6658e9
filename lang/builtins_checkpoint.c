/* checkpoint(fn, *args): fn(*args) whose activations are not kept, as
 * torch.utils.checkpoint. The call runs with recording on (so that the
 * parameters it reaches are known), then its records are dropped: one
 * record stands for the whole call, with the tensor arguments that
 * require grad and those parameters as its inputs. backward() runs fn
 * again, with the random stream as it was at the call, and takes the
 * gradients of that second run (hd_grad_partial_seed), which the pass
 * then carries on as any record's.
 *
 * fn must be a function of its arguments and of leaves (parameters): a
 * tensor with gradient history read from outside is an error that says to
 * pass it as an argument. Effects in fn (prints) happen again in
 * backward(), as in PyTorch. Inside compiled code, or with recording off,
 * checkpoint(fn, *args) is fn(*args): a compiled graph plans its own
 * memory. nn.Sequential runs its layers through this under a checkpointed
 * strategy (strategy.c). */
#include "builtins_tensor.h"
#include "eval.h"
#include "hd_autograd.h"
#include "vm_internal.h"

#include <stdio.h>
#include <string.h>

#define CKPT_MAX_ARGS 64

typedef struct ckpt_record {
    hd_vm *vm;
    hd_value fn;        /* held */
    hd_value *args;     /* the call's arguments, held */
    uint64_t *versions; /* their storage versions at the call (tensors) */
    int nargs, nalloc_args;
    int *grad_pos; /* the arguments that require grad: inputs [0, ngrad) */
    int ngrad;
    hd_tensor **params;            /* leaves fn reached: inputs [ngrad, ngrad + nparams) */
    int nparams, nalloc;           /* nalloc: params' length as allocated */
    uint64_t rng_seed, rng_offset; /* the random stream when fn began */
} ckpt_record;

static void ckpt_free(hd_ctx *ctx, void *ud) {
    ckpt_record *r = ud;
    hd_vm *vm = r->vm;
    /* at VM exit every object goes at once (the sweep); tensors are
     * counted apart and are let go here */
    if (!vm->sweeping) hd_value_unref(vm, r->fn);
    for (int i = 0; i < r->nargs; i++) {
        if (r->args[i].type == HD_V_TENSOR)
            hd_tensor_unref(r->args[i].as.t);
        else if (!vm->sweeping)
            hd_value_unref(vm, r->args[i]);
    }
    for (int i = 0; i < r->nparams; i++) hd_tensor_unref(r->params[i]);
    if (r->params) hd_ctx_free(ctx, r->params, (size_t)r->nalloc * sizeof *r->params);
    size_t n = (size_t)r->nalloc_args; /* nargs + 1: never 0 */
    if (r->args) hd_ctx_free(ctx, r->args, n * sizeof *r->args);
    if (r->versions) hd_ctx_free(ctx, r->versions, n * sizeof *r->versions);
    if (r->grad_pos) hd_ctx_free(ctx, r->grad_pos, n * sizeof *r->grad_pos);
    hd_ctx_free(ctx, r, sizeof *r);
}

/* args with each float tensor replaced by a detached copy, marked as
 * requiring grad where the original does (new references in copy[]). */
static hd_status ckpt_copies(hd_vm *vm, const hd_value *args, int nargs, hd_value *copy) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    for (int i = 0; i < nargs; i++) copy[i] = hd_none();
    for (int i = 0; i < nargs; i++) {
        if (args[i].type != HD_V_TENSOR) {
            copy[i] = hd_value_ref(args[i]);
            continue;
        }
        hd_tensor *t = args[i].as.t, *d = hd_grad_detach(ctx, t);
        if (!d) return hd_vm_from_ctx(vm, HD_OK);
        copy[i] = hd_tensor_value(d);
        if (hd_grad_requires(ctx, t) && hd_grad_set_requires(ctx, d, 1))
            return hd_vm_from_ctx(vm, HD_OK);
    }
    return HD_OK;
}

static void ckpt_values_unref(hd_vm *vm, hd_value *v, int n) {
    for (int i = 0; i < n; i++) hd_value_unref(vm, v[i]);
}

/* fn(*copy), which must give a tensor. */
static hd_status ckpt_call(hd_vm *vm, hd_value fn, const hd_value *copy, int nargs, hd_value *y) {
    if (hd_vm_call(vm, fn, copy, nargs, NULL, 0, y)) return vm->err;
    if (y->type == HD_V_TENSOR) return HD_OK;
    hd_status st = hd_vm_error(vm, HD_ERR_RUNTIME, "checkpoint: fn must return a tensor, got %s",
                               hd_value_type_name(*y));
    hd_value_unref(vm, *y);
    *y = hd_none();
    return st;
}

/* ---- backward ---- */

static hd_status ckpt_error_to_ctx(hd_vm *vm, hd_ctx *ctx) {
    hd_status st = vm->err ? vm->err : HD_ERR_RUNTIME;
    char msg[HD_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", vm->errmsg);
    hd_vm_clear_error(vm);
    hd_error(ctx, st, "checkpoint (running fn again for backward): %s", msg);
    return st;
}

static hd_status ckpt_check_versions(hd_ctx *ctx, const ckpt_record *r) {
    for (int i = 0; i < r->nargs; i++) {
        const hd_tensor *t = r->args[i].type == HD_V_TENSOR ? r->args[i].as.t : NULL;
        if (t && t->storage && t->storage->version != r->versions[i])
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "checkpoint: argument %d was changed in place after the call, so "
                            "running fn again for backward would not give the same values "
                            "(write into a clone instead)",
                            i + 1);
    }
    return HD_OK;
}

/* The second run's gradients for the record's inputs. */
static hd_status ckpt_grads(hd_vm *vm, ckpt_record *r, hd_tensor *g, const hd_value *copy,
                            hd_tensor *y, const unsigned char *need, hd_tensor **gin) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    int n = r->ngrad + r->nparams;
    hd_tensor *xs[n + 1], *gs[n + 1];
    for (int j = 0; j < r->ngrad; j++) xs[j] = copy[r->grad_pos[j]].as.t;
    for (int j = 0; j < r->nparams; j++) xs[r->ngrad + j] = r->params[j];
    hd_status st = hd_grad_partial_seed(ctx, y, g, xs, n, gs, 0, 0);
    for (int j = 0; !st && j < n; j++) {
        if (need[j])
            gin[j] = gs[j];
        else
            hd_tensor_unref(gs[j]);
    }
    return st;
}

static hd_status ckpt_backward(hd_ctx *ctx, void *ud, hd_tensor *g, const unsigned char *need,
                               hd_tensor **gin, int nin) {
    ckpt_record *r = ud;
    hd_vm *vm = r->vm;
    HD_UNUSED(nin);
    if (ckpt_check_versions(ctx, r)) return ctx->status;
    uint64_t seed = ctx->rng_seed, offset = ctx->rng_offset;
    int was = hd_grad_set_enabled(ctx, 1), was_create = ctx->grad_create;
    ctx->grad_create = 0;
    ctx->rng_seed = r->rng_seed;
    ctx->rng_offset = r->rng_offset;
    hd_value copy[r->nargs + 1], y = hd_none();
    hd_status st = ckpt_copies(vm, r->args, r->nargs, copy);
    if (!st) st = ckpt_call(vm, r->fn, copy, r->nargs, &y);
    ctx->rng_seed = seed;
    ctx->rng_offset = offset;
    ctx->grad_create = was_create;
    if (st) {
        hd_grad_set_enabled(ctx, was);
        ckpt_values_unref(vm, copy, r->nargs);
        return ckpt_error_to_ctx(vm, ctx);
    }
    st = ckpt_grads(vm, r, g, copy, y.as.t, need, gin);
    hd_grad_set_enabled(ctx, was);
    hd_value_unref(vm, y);
    ckpt_values_unref(vm, copy, r->nargs);
    return st;
}

static const hd_grad_custom ckpt_custom = {ckpt_backward, ckpt_free};

/* ---- the call ---- */

static ckpt_record *ckpt_record_new(hd_vm *vm, hd_value fn, const hd_value *args, int nargs) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    ckpt_record *r = hd_ctx_calloc(ctx, 1, sizeof *r);
    if (!r) return NULL;
    r->vm = vm;
    r->fn = hd_value_ref(fn);
    r->nalloc_args = nargs + 1;
    r->args = hd_ctx_calloc(ctx, (size_t)nargs + 1, sizeof *r->args);
    r->versions = hd_ctx_calloc(ctx, (size_t)nargs + 1, sizeof *r->versions);
    r->grad_pos = hd_ctx_calloc(ctx, (size_t)nargs + 1, sizeof *r->grad_pos);
    if (!r->args || !r->versions || !r->grad_pos) {
        ckpt_free(ctx, r);
        return NULL;
    }
    r->nargs = nargs;
    for (int i = 0; i < nargs; i++) {
        r->args[i] = hd_value_ref(args[i]);
        const hd_tensor *t = args[i].type == HD_V_TENSOR ? args[i].as.t : NULL;
        if (t && t->storage) r->versions[i] = t->storage->version;
        if (t && hd_grad_requires(ctx, t)) r->grad_pos[r->ngrad++] = i;
    }
    r->rng_seed = ctx->rng_seed;
    r->rng_offset = ctx->rng_offset;
    return r;
}

/* The leaves fn reached that are not the argument copies. */
static void ckpt_keep_params(ckpt_record *r, const hd_value *copy, hd_tensor **leaves, int nl) {
    int k = 0;
    for (int i = 0; i < nl; i++) {
        int arg = 0;
        for (int j = 0; j < r->nargs && !arg; j++)
            arg = copy[j].type == HD_V_TENSOR && copy[j].as.t == leaves[i];
        if (arg)
            hd_tensor_unref(leaves[i]);
        else
            leaves[k++] = leaves[i];
    }
    r->params = leaves;
    r->nparams = k;
    r->nalloc = nl;
}

/* y (fn's result with its records) replaced by a detached result with one
 * record for the call. */
static hd_status ckpt_record_out(hd_vm *vm, ckpt_record *r, hd_tensor **y) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    int n = r->ngrad + r->nparams;
    hd_tensor *ins[n + 1];
    for (int j = 0; j < r->ngrad; j++) ins[j] = r->args[r->grad_pos[j]].as.t;
    for (int j = 0; j < r->nparams; j++) ins[r->ngrad + j] = r->params[j];
    hd_tensor *out = hd_grad_detach(ctx, *y);
    if (!out) {
        ckpt_free(ctx, r);
        return hd_vm_from_ctx(vm, HD_OK);
    }
    hd_tensor_unref(*y);
    *y = out;
    return hd_autograd_record_custom(ctx, ins, n, out, &ckpt_custom, r) ? hd_vm_from_ctx(vm, HD_OK)
                                                                        : HD_OK;
}

/* The recorded call: y from fn(*copies), its history reduced to one record. */
static hd_status ckpt_run(hd_vm *vm, hd_value fn, const hd_value *args, int nargs, hd_value *out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    ckpt_record *r = ckpt_record_new(vm, fn, args, nargs);
    if (!r) return hd_vm_from_ctx(vm, HD_OK);
    uint64_t mark = hd_grad_mark(ctx);
    hd_value copy[nargs + 1], y = hd_none();
    hd_status st = ckpt_copies(vm, args, nargs, copy);
    if (!st) st = ckpt_call(vm, fn, copy, nargs, &y);
    hd_tensor **leaves = NULL;
    int nl = 0;
    if (!st && hd_grad_leaves_since(ctx, y.as.t, mark, &leaves, &nl))
        st = hd_vm_from_ctx(vm, HD_OK);
    if (!st && nl < 0)
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "checkpoint: fn reads a tensor with gradient history that is not one "
                         "of its arguments (pass it to checkpoint as an argument)");
    if (!st && nl > 0 && hd_dtype_is_float(y.as.t->dtype)) {
        ckpt_keep_params(r, copy, leaves, nl);
        leaves = NULL;
        nl = 0;
        hd_tensor *t = y.as.t;
        st = ckpt_record_out(vm, r, &t); /* frees r on failure */
        y = hd_tensor_value(t);
        r = NULL;
    }
    hd_grad_leaves_free(ctx, leaves, nl > 0 ? nl : 0);
    if (r) ckpt_free(ctx, r);
    ckpt_values_unref(vm, copy, nargs);
    if (st) {
        hd_value_unref(vm, y);
        return st;
    }
    *out = y;
    return HD_OK;
}

/* checkpoint(fn, *args) */
static HD_TF_FN(tf_checkpoint) {
    HD_UNUSED(self);
    HD_UNUSED(kw);
    HD_UNUSED(data);
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (nkw)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "checkpoint(fn, *args) takes no named arguments");
    if (nargs < 1) return hd_vm_error(vm, HD_ERR_RUNTIME, "checkpoint(fn, *args): no fn given");
    if (nargs - 1 > CKPT_MAX_ARGS)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "checkpoint: at most %d arguments, got %d",
                           CKPT_MAX_ARGS, nargs - 1);
    hd_value fn = args[0];
    if (fn.type != HD_V_FUNC && fn.type != HD_V_NATIVE && fn.type != HD_V_BOUND &&
        fn.type != HD_V_OBJECT && fn.type != HD_V_CLASS)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "checkpoint: fn must be a function, got %s",
                           hd_value_type_name(fn));
    if (!hd_grad_is_enabled(ctx) || ctx->trace) {
        if (hd_vm_call(vm, fn, args + 1, nargs - 1, NULL, 0, out)) return vm->err;
        return HD_OK;
    }
    return ckpt_run(vm, fn, args + 1, nargs - 1, out);
}

static const hd_tfunc rows[] = {
    {"checkpoint", tf_checkpoint, "fn, *args", -1, HD_TF_GLOBAL},
};

const hd_tfunc_table hd_tfuncs_checkpoint = {rows, (int)(sizeof rows / sizeof rows[0])};
