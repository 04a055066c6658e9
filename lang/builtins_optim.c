/* _adam_steps, _sgd_steps, _adagrad_steps, _lion_steps and
 * _rmsprop_steps: stdlib/optim.hodu's optimizers' steps (Adam, SGD,
 * Adagrad, Lion, RMSprop) for a list of parameters as the backend's fused
 * step (hd_backend.optim), where it has one and the operands allow: one
 * pass over each parameter on the cpu, one launch for many parameters of
 * one dtype on cuda, in place of several ops each (Adam 14). What the
 * kernel cannot take (compiled code or any trace, under gradients, other
 * layouts, memory one parameter writes and another reads) is left to the
 * optimizer's ops. */
#include "builtins_tensor.h"
#include "hd_autograd.h"
#include "hd_backend.h"
#include "hd_profile.h"
#include "hd_trace.h"
#include "eval.h"
#include "tensor_api.h"

#include <stdlib.h>
#include <string.h>

/* A number, or a 0-d cpu tensor (the step size and bias correction: the
 * step count is one), as an op on dt reads it: its value rounded to dt. */
static int optim_const(hd_value v, hd_dtype dt, double *out) {
    double x;
    if (v.type == HD_V_INT) {
        if (v.as.i > 9007199254740992LL || v.as.i < -9007199254740992LL) return 0;
        x = (double)v.as.i;
    } else if (v.type == HD_V_FLOAT) {
        x = v.as.f;
    } else if (v.type == HD_V_TENSOR && hd_tensor_follows_device(v.as.t) &&
               hd_dtype_is_float(v.as.t->dtype)) {
        x = hd_dtype_load(v.as.t->dtype, hd_tensor_data(v.as.t), 0);
    } else {
        return 0;
    }
    unsigned char b[8];
    hd_dtype_store(dt, b, 0, x);
    *out = hd_dtype_load(dt, b, 0);
    return 1;
}

/* What tells the kinds apart: the call's arguments are ps, gs, the
 * state's lists (nlists of them), ix, then the kind's numbers (from
 * argument num on). */
typedef struct optim_kind {
    const char *what;    /* for errors */
    const char *builtin; /* its name */
    int kind;            /* HD_OPTIM_* */
    int nlists;
    int prof_row;
    /* The flags and the state used with these numbers (fills u): 0 where
     * the kernel does not take them. */
    int (*plan)(const hd_targs *a, int num, hd_optim_step *u);
    /* The constants on dt (u->c): 0 where the kernel does not take them. */
    int (*consts)(const hd_targs *a, int num, hd_dtype dt, hd_optim_step *u);
} optim_kind;

enum { A_PS, A_GS, A_LISTS };

static int optim_is_number(hd_value v) {
    return v.type == HD_V_INT || v.type == HD_V_FLOAT;
}

static double optim_number(hd_value v) {
    return v.type == HD_V_INT ? (double)v.as.i : v.as.f;
}

/* Adam: b1, b2, step_size, bc2, eps, l2, decay. The betas must be floats
 * (their complements are numbers the ops compute in f64); l2 and decay
 * numbers (their tests are the optimizer's). */
static int adam_plan(const hd_targs *a, int num, hd_optim_step *u) {
    hd_value l2 = a->v[num + 5], decay = a->v[num + 6];
    if (a->v[num].type != HD_V_FLOAT || a->v[num + 1].type != HD_V_FLOAT || !optim_is_number(l2) ||
        !optim_is_number(decay))
        return 0;
    u->flags =
        (optim_number(decay) != 1 ? HD_OPTIM_DECAY : 0) | (optim_number(l2) != 0 ? HD_OPTIM_WD : 0);
    u->smask = 3;
    return 1;
}

static int adam_consts(const hd_targs *a, int num, hd_dtype dt, hd_optim_step *u) {
    double *c = u->c;
    /* (1 - b1) * g: the number 1 - b1 (in f64), then rounded to dt */
    return optim_const(hd_float(1 - a->v[num].as.f), dt, &c[HD_ADAM_C1]) &&
           optim_const(hd_float(1 - a->v[num + 1].as.f), dt, &c[HD_ADAM_C2]) &&
           optim_const(a->v[num], dt, &c[HD_ADAM_B1]) &&
           optim_const(a->v[num + 1], dt, &c[HD_ADAM_B2]) &&
           optim_const(a->v[num + 2], dt, &c[HD_ADAM_SS]) &&
           optim_const(a->v[num + 3], dt, &c[HD_ADAM_BC2]) &&
           optim_const(a->v[num + 4], dt, &c[HD_ADAM_EPS]) &&
           optim_const(a->v[num + 5], dt, &c[HD_ADAM_L2]) &&
           optim_const(a->v[num + 6], dt, &c[HD_ADAM_DECAY]);
}

/* SGD: lr, momentum, nesterov, wd; momentum and wd numbers, nesterov a
 * bool. */
static int sgd_plan(const hd_targs *a, int num, hd_optim_step *u) {
    hd_value mom = a->v[num + 1], nest = a->v[num + 2], wd = a->v[num + 3];
    if (!optim_is_number(mom) || nest.type != HD_V_BOOL || !optim_is_number(wd)) return 0;
    int m = optim_number(mom) != 0;
    u->flags = (m ? HD_OPTIM_MOMENTUM : 0) | (m && nest.as.b ? HD_OPTIM_NESTEROV : 0) |
               (optim_number(wd) != 0 ? HD_OPTIM_WD : 0);
    u->smask = m;
    return 1;
}

static int sgd_consts(const hd_targs *a, int num, hd_dtype dt, hd_optim_step *u) {
    return optim_const(a->v[num], dt, &u->c[HD_SGD_LR]) &&
           optim_const(a->v[num + 1], dt, &u->c[HD_SGD_MOM]) &&
           optim_const(a->v[num + 3], dt, &u->c[HD_SGD_WD]);
}

/* Adagrad: clr, wd, eps, init; wd, eps and init numbers. */
static int adagrad_plan(const hd_targs *a, int num, hd_optim_step *u) {
    hd_value wd = a->v[num + 1];
    if (!optim_is_number(wd) || !optim_is_number(a->v[num + 2]) || !optim_is_number(a->v[num + 3]))
        return 0;
    u->flags = optim_number(wd) != 0 ? HD_OPTIM_WD : 0;
    u->smask = 1;
    return 1;
}

static int adagrad_consts(const hd_targs *a, int num, hd_dtype dt, hd_optim_step *u) {
    return optim_const(a->v[num], dt, &u->c[HD_AGRAD_CLR]) &&
           optim_const(a->v[num + 1], dt, &u->c[HD_AGRAD_WD]) &&
           optim_const(a->v[num + 2], dt, &u->c[HD_AGRAD_EPS]) &&
           optim_const(a->v[num + 3], dt, &u->c[HD_AGRAD_INIT]);
}

/* Lion: lr, b1, b2, decay; the betas floats (as Adam's), decay a number. */
static int lion_plan(const hd_targs *a, int num, hd_optim_step *u) {
    hd_value decay = a->v[num + 3];
    if (a->v[num + 1].type != HD_V_FLOAT || a->v[num + 2].type != HD_V_FLOAT ||
        !optim_is_number(decay))
        return 0;
    u->flags = optim_number(decay) != 1 ? HD_OPTIM_DECAY : 0;
    u->smask = 1;
    return 1;
}

static int lion_consts(const hd_targs *a, int num, hd_dtype dt, hd_optim_step *u) {
    double *c = u->c;
    return optim_const(hd_float(1 - a->v[num + 1].as.f), dt, &c[HD_LION_C1]) &&
           optim_const(hd_float(1 - a->v[num + 2].as.f), dt, &c[HD_LION_C2]) &&
           optim_const(a->v[num + 1], dt, &c[HD_LION_B1]) &&
           optim_const(a->v[num + 2], dt, &c[HD_LION_B2]) &&
           optim_const(a->v[num], dt, &c[HD_LION_LR]) &&
           optim_const(a->v[num + 3], dt, &c[HD_LION_DECAY]);
}

/* RMSprop: lr, alpha, eps, wd, momentum, centered; alpha a float (its
 * complement is a number the ops compute in f64), eps, wd and momentum
 * numbers, centered a bool. State: v, avg (centered), buf (momentum). */
static int rmsprop_plan(const hd_targs *a, int num, hd_optim_step *u) {
    hd_value wd = a->v[num + 3], mom = a->v[num + 4], cen = a->v[num + 5];
    if (a->v[num + 1].type != HD_V_FLOAT || !optim_is_number(a->v[num + 2]) ||
        !optim_is_number(wd) || !optim_is_number(mom) || cen.type != HD_V_BOOL)
        return 0;
    int m = optim_number(mom) != 0;
    u->flags = (optim_number(wd) != 0 ? HD_OPTIM_WD : 0) | (m ? HD_OPTIM_MOMENTUM : 0) |
               (cen.as.b ? HD_OPTIM_CENTERED : 0);
    u->smask = 1 | (cen.as.b ? 2 : 0) | (m ? 4 : 0);
    return 1;
}

static int rmsprop_consts(const hd_targs *a, int num, hd_dtype dt, hd_optim_step *u) {
    double *c = u->c;
    return optim_const(a->v[num], dt, &c[HD_RMS_LR]) &&
           optim_const(a->v[num + 1], dt, &c[HD_RMS_ALPHA]) &&
           optim_const(hd_float(1 - a->v[num + 1].as.f), dt, &c[HD_RMS_CA]) &&
           optim_const(a->v[num + 2], dt, &c[HD_RMS_EPS]) &&
           optim_const(a->v[num + 3], dt, &c[HD_RMS_WD]) &&
           optim_const(a->v[num + 4], dt, &c[HD_RMS_MOM]);
}

static const optim_kind optim_adam = {"Adam.step",  "_adam_steps", HD_OPTIM_ADAM, 2,
                                      HD_PROF_ADAM, adam_plan,     adam_consts};
static const optim_kind optim_sgd = {"SGD.step",  "_sgd_steps", HD_OPTIM_SGD, 1,
                                     HD_PROF_SGD, sgd_plan,     sgd_consts};
static const optim_kind optim_adagrad = {"Adagrad.step",  "_adagrad_steps", HD_OPTIM_ADAGRAD, 1,
                                         HD_PROF_ADAGRAD, adagrad_plan,     adagrad_consts};
static const optim_kind optim_rmsprop = {"RMSprop.step",  "_rmsprop_steps", HD_OPTIM_RMSPROP, 3,
                                         HD_PROF_RMSPROP, rmsprop_plan,     rmsprop_consts};
static const optim_kind optim_lion = {"Lion.step",  "_lion_steps", HD_OPTIM_LION, 1,
                                      HD_PROF_LION, lion_plan,     lion_consts};

static int optim_same_shape(const hd_tensor *a, const hd_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

/* t as the kernel reads it: p's device, dtype and shape, contiguous, and
 * not p's memory unless it is p. */
static int optim_operand(const hd_tensor *t, const hd_tensor *p) {
    return !hd_tensor_is_symbolic(t) && t->storage && t->storage->backend == p->storage->backend &&
           t->storage->device == p->storage->device && t->dtype == p->dtype &&
           hd_tensor_is_contiguous(t) && optim_same_shape(t, p) &&
           (t == p || t->storage != p->storage);
}

/* ---- one call: its parameters, what the kernel takes, the launches ---- */

typedef struct optim_call {
    hd_vm *vm;
    const hd_targs *a;
    const optim_kind *k;
    hd_optim_step plan;   /* flags and smask */
    int ix;               /* the argument ix */
    hd_optim_item *items; /* one per parameter */
    char *state;          /* OPTIM_* per parameter */
    int64_t n;
    hd_optim_item *batch; /* room for n */
    int64_t *where;       /* batch item -> parameter */
} optim_call;

enum { OPTIM_OPS, OPTIM_KERNEL, OPTIM_DONE };

static hd_value optim_list_at(const optim_call *c, int arg, int64_t j) {
    return hd_as_list(c->a->v[arg])->items[j];
}

/* Parameter j's operands, where the kernel can take them: p = ps[j],
 * g = gs[j], the state in each list at i = ix[j] (all none, or all
 * tensors). */
static int optim_item(optim_call *c, int64_t j, hd_optim_item *it) {
    hd_ctx *ctx = hd_vm_ctx(c->vm);
    hd_value pv = optim_list_at(c, A_PS, j), gv = optim_list_at(c, A_GS, j);
    hd_value iv = optim_list_at(c, c->ix, j);
    memset(it, 0, sizeof *it);
    if (pv.type != HD_V_TENSOR || gv.type != HD_V_TENSOR || iv.type != HD_V_INT) return 0;
    hd_tensor *p = pv.as.t, *in[2 + HD_OPTIM_STATE] = {p, gv.as.t};
    it->p = p, it->g = gv.as.t;
    int nin = 2, ns = 0;
    for (int q = 0; q < HD_OPTIM_STATE; q++) {
        if (!(c->plan.smask >> q & 1)) continue;
        ns++;
        hd_list *l = hd_as_list(c->a->v[A_LISTS + q]);
        if (iv.as.i < 0 || iv.as.i >= l->len) return 0;
        hd_value s0 = l->items[iv.as.i];
        if (s0.type == HD_V_TENSOR)
            it->s0[q] = in[nin++] = s0.as.t;
        else if (s0.type != HD_V_NONE)
            return 0;
    }
    if (nin != 2 && nin != 2 + ns) return 0; /* all none, or all tensors */
    if (hd_tensor_is_symbolic(p) || !p->storage || !p->storage->backend->optim ||
        !hd_dtype_is_float(p->dtype) || !optim_operand(p, p) || !optim_operand(it->g, p))
        return 0;
    for (int q = 0; q < HD_OPTIM_STATE; q++)
        if (it->s0[q] && !optim_operand(it->s0[q], p)) return 0;
    return hd_autograd_wants(ctx, HD_OP_ADD, in, nin, p->dtype) == 0;
}

/* ---- memory one item writes and another reads or writes ---- */

typedef struct optim_use {
    const void *storage;
    int writes;
} optim_use;

static int optim_use_cmp(const void *x, const void *y) {
    uintptr_t a = (uintptr_t)((const optim_use *)x)->storage;
    uintptr_t b = (uintptr_t)((const optim_use *)y)->storage;
    return a < b ? -1 : a > b;
}

/* Does a storage in u[0..k) that an item writes appear twice? Small
 * lists pairwise, others sorted. */
static int optim_uses_meet(optim_use *u, int64_t k) {
    if (k <= 48) {
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = i + 1; j < k; j++)
                if (u[i].storage == u[j].storage && (u[i].writes | u[j].writes)) return 1;
        return 0;
    }
    qsort(u, (size_t)k, sizeof *u, optim_use_cmp);
    for (int64_t i = 0, e; i < k; i = e) {
        int writes = 0;
        for (e = i; e < k && u[e].storage == u[i].storage; e++) writes |= u[e].writes;
        if (writes && e - i > 1) return 1;
    }
    return 0;
}

/* Does a storage some taken item's p writes also hold another of the
 * taken items' operands? One item's own operands are apart
 * (optim_operand); two parameters sharing memory take the ops one after
 * the other. */
static int optim_overlap(optim_call *c, int *res) {
    hd_ctx *ctx = hd_vm_ctx(c->vm);
    size_t bytes = (size_t)c->n * (2 + HD_OPTIM_STATE) * sizeof(optim_use);
    optim_use *u = hd_ctx_alloc(ctx, bytes);
    if (!u) return 0;
    int64_t k = 0;
    for (int64_t j = 0; j < c->n; j++) {
        const hd_optim_item *it = &c->items[j];
        if (c->state[j] != OPTIM_KERNEL) continue;
        u[k++] = (optim_use){it->p->storage, 1};
        u[k++] = (optim_use){it->g->storage, 0};
        for (int q = 0; q < HD_OPTIM_STATE; q++)
            if (it->s0[q]) u[k++] = (optim_use){it->s0[q]->storage, 0};
    }
    *res = optim_uses_meet(u, k);
    hd_ctx_free(ctx, u, bytes);
    return 1;
}

/* ---- one launch group: the items of one backend, device and dtype ---- */

static int optim_kin(const hd_tensor *x, const hd_tensor *y) {
    return x->storage->backend == y->storage->backend && x->storage->device == y->storage->device &&
           x->dtype == y->dtype;
}

/* Is t the state's only holder of its memory, which nobody else can see
 * (the list's slot holds the one reference to t, t the one reference to
 * its storage, and no host code holds a pointer into it)? Then the new
 * state may be written over it: nobody can tell, as with PyTorch's
 * in-place update of its moments. A tensor the program kept (a variable,
 * another list, a saved tensor, the memo, a view) is left as it was. */
static int optim_state_unseen(const hd_tensor *t) {
    const hd_storage *s = t->storage;
    return t->refcount == 1 && !t->grad_info && s->refcount == 1 && !hd_storage_host_writable(s) &&
           !s->memo;
}

static int optim_state_inplace(const hd_optim_step *u, const hd_optim_item *it) {
    for (int q = 0; q < HD_OPTIM_STATE; q++)
        if (u->smask >> q & 1 && (!it->s0[q] || !optim_state_unseen(it->s0[q]))) return 0;
    return u->smask != 0;
}

/* The new state of the batch's items, on their device: the state before
 * where nobody else sees it (updated in place), else new tensors. */
static hd_status optim_new_state(hd_ctx *ctx, hd_optim_step *u) {
    for (int i = 0; i < u->n; i++) {
        hd_optim_item *it = &u->items[i];
        const hd_backend *be = it->p->storage->backend;
        int dev = it->p->storage->device, inplace = optim_state_inplace(u, it);
        for (int q = 0; q < HD_OPTIM_STATE; q++) {
            if (!(u->smask >> q & 1)) continue;
            it->s[q] =
                inplace ? hd_tensor_ref(it->s0[q])
                        : hd_tensor_new_on(ctx, be, dev, it->p->dtype, it->p->shape, it->p->ndim);
            if (!it->s[q]) return ctx->status;
        }
    }
    return HD_OK;
}

/* The kernel on u, timed for the profiler; the write count of each p and
 * of state updated in place moved on. */
static hd_status optim_launch(hd_ctx *ctx, const optim_kind *k, hd_optim_step *u) {
    const hd_backend *be = u->items[0].p->storage->backend;
    double bytes = 0;
    for (int i = 0; i < u->n; i++) {
        const hd_optim_item *it = &u->items[i];
        int moved = 3; /* p read and written, g read; then the state */
        for (int q = 0; q < HD_OPTIM_STATE; q++) moved += (it->s[q] != NULL) + (it->s0[q] != NULL);
        bytes += (double)hd_tensor_nbytes(it->p) * moved;
    }
    int prof = hd_profile_on(ctx);
    double t0 = prof ? hd_profile_begin(ctx) : 0;
    hd_status st = be->optim(ctx, u);
    if (prof) hd_profile_end(ctx, k->prof_row, NULL, t0, bytes, 0);
    for (int i = 0; i < u->n; i++) {
        const hd_optim_item *it = &u->items[i];
        it->p->storage->version++;
        for (int q = 0; q < HD_OPTIM_STATE; q++)
            if (it->s[q] && it->s[q] == it->s0[q]) it->s[q]->storage->version++;
    }
    return st;
}

/* The state lists' slots for the batch, as the assignments would set
 * them (with their notes for traces and loop rolling). */
static hd_status optim_store(optim_call *c, hd_optim_step *u) {
    hd_status st = HD_OK;
    for (int i = 0; i < u->n && !st; i++) {
        hd_value iv = optim_list_at(c, c->ix, c->where[i]);
        for (int q = 0; q < HD_OPTIM_STATE && !st; q++) {
            if (!u->items[i].s[q]) continue;
            hd_value sv = hd_tensor_value(u->items[i].s[q]);
            u->items[i].s[q] = NULL; /* the value holds it */
            st = hd_eval_set_item(c->vm, c->a->v[A_LISTS + q], iv, sv);
            hd_value_unref(c->vm, sv);
        }
    }
    return st;
}

/* The items of parameter j0's kind, in one call of the backend's kernel. */
static hd_status optim_group(optim_call *c, int64_t j0) {
    hd_ctx *ctx = hd_vm_ctx(c->vm);
    hd_optim_step u = c->plan;
    u.items = c->batch, u.n = 0;
    const hd_tensor *p0 = c->items[j0].p;
    for (int64_t j = j0; j < c->n; j++) {
        if (c->state[j] != OPTIM_KERNEL || !optim_kin(c->items[j].p, p0)) continue;
        c->where[u.n] = j, c->batch[u.n++] = c->items[j];
        c->state[j] = OPTIM_DONE;
    }
    if (!c->k->consts(c->a, c->ix + 1, p0->dtype, &u)) { /* the ops, then */
        for (int i = 0; i < u.n; i++) c->state[c->where[i]] = OPTIM_OPS;
        return HD_OK;
    }
    hd_status st = optim_new_state(ctx, &u);
    if (!st) st = optim_launch(ctx, c->k, &u);
    st = st ? hd_tfail(c->vm, c->k->what) : optim_store(c, &u);
    for (int i = 0; i < u.n; i++) /* what was not stored */
        for (int q = 0; q < HD_OPTIM_STATE; q++) hd_tensor_unref(u.items[i].s[q]);
    return st;
}

/* Which parameters the kernel takes (state), all or none of those whose
 * memory meets another's. */
static hd_status optim_plan(optim_call *c) {
    hd_ctx *ctx = hd_vm_ctx(c->vm);
    int overlap = 0;
    memset(c->state, OPTIM_OPS, (size_t)c->n);
    if (!c->n || hd_trace_active(ctx) || !c->k->plan(c->a, c->ix + 1, &c->plan)) return HD_OK;
    for (int64_t j = 0; j < c->n; j++)
        if (optim_item(c, j, &c->items[j])) c->state[j] = OPTIM_KERNEL;
    if (!optim_overlap(c, &overlap)) return hd_tfail(c->vm, c->k->what);
    if (overlap) memset(c->state, OPTIM_OPS, (size_t)c->n);
    return HD_OK;
}

/* The positions the kernel did not take, as a list. */
static hd_status optim_left(optim_call *c, hd_value *out) {
    hd_value l = hd_list_new(c->vm, 0);
    if (l.type != HD_V_LIST) return HD_ERR_RUNTIME; /* out of memory, said */
    for (int64_t j = 0; j < c->n; j++)
        if (c->state[j] != OPTIM_DONE && hd_list_push(c->vm, l, hd_int(j))) {
            hd_value_unref(c->vm, l);
            return HD_ERR_RUNTIME;
        }
    *out = l;
    return HD_OK;
}

static hd_status optim_lists_ok(hd_vm *vm, const hd_targs *a, const optim_kind *k, int ix) {
    for (int i = A_PS; i <= ix; i++)
        if (a->v[i].type != HD_V_LIST) return hd_targ_type_error(vm, a, i, "a list");
    int64_t n = hd_as_list(a->v[A_PS])->len;
    if (hd_as_list(a->v[A_GS])->len != n || hd_as_list(a->v[ix])->len != n)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: ps, gs and ix must be of one length",
                           k->builtin);
    return HD_OK;
}

/* The call: the kernel where it takes the parameters, the positions left
 * to the ops in *out. */
static hd_status optim_steps(hd_vm *vm, const hd_targs *a, const optim_kind *k, hd_value *out) {
    int ix = A_LISTS + k->nlists;
    if (optim_lists_ok(vm, a, k, ix)) return HD_ERR_RUNTIME;
    hd_ctx *ctx = hd_vm_ctx(vm);
    optim_call c = {.vm = vm, .a = a, .k = k, .ix = ix, .n = hd_as_list(a->v[A_PS])->len};
    c.plan.kind = k->kind;
    size_t n = c.n ? (size_t)c.n : 1;
    size_t bytes = n * (2 * sizeof(hd_optim_item) + sizeof(int64_t) + 1);
    char *mem = hd_ctx_alloc(ctx, bytes);
    if (!mem) return hd_tfail(vm, k->what);
    c.items = (hd_optim_item *)mem, c.batch = c.items + n;
    c.where = (int64_t *)(c.batch + n), c.state = (char *)(c.where + n);
    hd_status st = optim_plan(&c);
    for (int64_t j = 0; j < c.n && !st; j++)
        if (c.state[j] == OPTIM_KERNEL) st = optim_group(&c, j);
    if (!st) st = optim_left(&c, out);
    hd_ctx_free(ctx, mem, bytes);
    return st;
}

/* _adam_steps(ps, gs, ms, vs, ix, b1, b2, step_size, bc2, eps, l2,
 * decay): Adam's update of parameter ps[j] with gradient gs[j] and
 * moments ms[ix[j]], vs[ix[j]] (weight decay: p *= decay where decay is
 * not 1, g += l2 p where l2 is not 0), for each j the backend's kernel
 * takes, one launch per kind (device and dtype) and table of parameters;
 * the lists' slots hold the new moments. The positions j left to the
 * optimizer's ops come back as a list. */
static HD_TF_FN(tf_adam_steps) {
    HD_TARGS_BIND(a);
    return optim_steps(vm, &a, &optim_adam, out);
}

/* _sgd_steps(ps, gs, bufs, ix, lr, momentum, nesterov, wd): SGD's update
 * the same way, the momentum buffers in bufs[ix[j]] (untouched without
 * momentum). */
static HD_TF_FN(tf_sgd_steps) {
    HD_TARGS_BIND(a);
    return optim_steps(vm, &a, &optim_sgd, out);
}

/* _adagrad_steps(ps, gs, sums, ix, clr, wd, eps, init): Adagrad's update
 * the same way, the sums of squares in sums[ix[j]] (init added at the
 * first step). */
static HD_TF_FN(tf_adagrad_steps) {
    HD_TARGS_BIND(a);
    return optim_steps(vm, &a, &optim_adagrad, out);
}

/* _rmsprop_steps(ps, gs, vs, avgs, bufs, ix, lr, alpha, eps, wd, momentum,
 * centered): RMSprop's update the same way, the squares' averages in
 * vs[ix[j]], the gradients' in avgs[ix[j]] (centered), the momentum
 * buffers in bufs[ix[j]] (lists the options do not use are untouched). */
static HD_TF_FN(tf_rmsprop_steps) {
    HD_TARGS_BIND(a);
    return optim_steps(vm, &a, &optim_rmsprop, out);
}

/* _lion_steps(ps, gs, ms, ix, lr, b1, b2, decay): Lion's update the same
 * way, the moments in ms[ix[j]] (zero before the first step). */
static HD_TF_FN(tf_lion_steps) {
    HD_TARGS_BIND(a);
    return optim_steps(vm, &a, &optim_lion, out);
}

static const hd_tfunc rows[] = {
    {"_adam_steps", tf_adam_steps, "ps, gs, ms, vs, ix, b1, b2, step_size, bc2, eps, l2, decay", -1,
     HD_TF_GLOBAL},
    {"_sgd_steps", tf_sgd_steps, "ps, gs, bufs, ix, lr, momentum, nesterov, wd", -1, HD_TF_GLOBAL},
    {"_adagrad_steps", tf_adagrad_steps, "ps, gs, sums, ix, clr, wd, eps, init", -1, HD_TF_GLOBAL},
    {"_lion_steps", tf_lion_steps, "ps, gs, ms, ix, lr, b1, b2, decay", -1, HD_TF_GLOBAL},
    {"_rmsprop_steps", tf_rmsprop_steps,
     "ps, gs, vs, avgs, bufs, ix, lr, alpha, eps, wd, momentum, centered", -1, HD_TF_GLOBAL},
};

const hd_tfunc_table hd_tfuncs_optim = {rows, (int)(sizeof rows / sizeof rows[0])};
