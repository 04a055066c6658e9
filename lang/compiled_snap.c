/* Snapshots: what a trace may change in the heap, kept so that a trace that
 * fails (or whose results need gradients and run eagerly instead) leaves
 * every value the call can reach as it was: list items, dict entries and
 * object fields, module globals, captured variables, the slots of a
 * block's frame, tensors' .grad, and the random stream. See
 * compiled_int.h. */
#include "compiled_int.h"
#include "hd_autograd.h"

#include <string.h>

struct cp_snap {
    cp_snap_kind kind;
    hd_obj *owner;   /* the list, dict, module or cell (held) */
    hd_value *slots; /* CP_SNAP_SLOTS: the frame's slots */
    int node;        /* the list, dict, object or cell's node in the scan, or -1 */
    hd_tensor *t;    /* a tensor whose .grad is kept (held), or NULL */
    hd_tensor *grad; /* held */
    int64_t n;
    hd_value *vals;         /* held */
    hd_str **keys;          /* dicts: held */
    unsigned char *touched; /* places the body stored to (n entries), or NULL */
};

static cp_snap *snap_new(cp_snapshot *sn, cp_snap_kind kind, hd_obj *owner, int64_t n) {
    hd_vm *vm = sn->vm;
    if (sn->n == sn->cap) {
        int cap = sn->cap ? sn->cap * 2 : 64;
        cp_snap *p = hd_ctx_realloc(&vm->ctx, sn->items, (size_t)sn->cap * sizeof *p,
                                    (size_t)cap * sizeof *p);
        if (!p) return hd_vm_oom(vm), NULL;
        sn->items = p;
        sn->cap = cap;
    }
    cp_snap *s = &sn->items[sn->n];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    if (n > 0 && !(s->vals = hd_ctx_calloc(&vm->ctx, (size_t)n, sizeof *s->vals)))
        return hd_vm_oom(vm), NULL;
    if (n > 0 && kind == CP_SNAP_DICT &&
        !(s->keys = hd_ctx_calloc(&vm->ctx, (size_t)n, sizeof *s->keys))) {
        hd_ctx_free(&vm->ctx, s->vals, (size_t)n * sizeof *s->vals);
        return hd_vm_oom(vm), NULL;
    }
    s->n = n;
    s->node = -1;
    if (owner) owner->refcount++;
    s->owner = owner;
    sn->n++;
    return s;
}

static void copy_vals(hd_value *dst, const hd_value *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) hd_vref(dst[i] = src[i]);
}

static hd_status snap_list(cp_snapshot *sn, hd_value v) {
    const hd_list *l = hd_as_list(v);
    cp_snap *s = snap_new(sn, CP_SNAP_LIST, v.as.o, l->len);
    if (!s) return sn->vm->err;
    copy_vals(s->vals, l->items, l->len);
    return HD_OK;
}

static hd_status snap_dict(cp_snapshot *sn, hd_value v) {
    const hd_dict *d = hd_as_dict(v);
    cp_snap *s = snap_new(sn, CP_SNAP_DICT, v.as.o, d->len);
    if (!s) return sn->vm->err;
    copy_vals(s->vals, d->vals, d->len);
    for (int64_t i = 0; i < d->len; i++) {
        s->keys[i] = d->keys[i];
        d->keys[i]->obj.refcount++;
    }
    return HD_OK;
}

static hd_status snap_slots(cp_snapshot *sn, cp_snap_kind kind, hd_obj *owner, hd_value *slots,
                            int n) {
    cp_snap *s = snap_new(sn, kind, owner, n);
    if (!s) return sn->vm->err;
    s->slots = slots;
    copy_vals(s->vals, slots, n);
    return HD_OK;
}

static hd_status snap_grad(cp_snapshot *sn, hd_tensor *t) {
    cp_snap *s = snap_new(sn, CP_SNAP_LIST, NULL, 0);
    if (!s) return sn->vm->err;
    s->t = hd_tensor_ref(t);
    s->grad = hd_tensor_ref(hd_grad_get(t));
    return HD_OK;
}

static hd_status snap_container(cp_snapshot *sn, hd_value v, int node) {
    hd_status st = HD_OK;
    switch (v.type) {
    case HD_V_LIST: st = snap_list(sn, v); break;
    case HD_V_DICT: st = snap_dict(sn, v); break;
    case HD_V_OBJECT: st = snap_dict(sn, ((hd_object *)v.as.o)->fields); break;
    case HD_V_TENSOR: st = snap_grad(sn, v.as.t); break;
    default: return HD_OK;
    }
    if (!st) sn->items[sn->n - 1].node = node;
    return st;
}

/* The containers, cells and tensors of a scan, each once. */
static hd_status snap_node(cp_snapshot *sn, const cp_scan *pre, int i) {
    const cp_node *nd = &pre->nodes[i];
    hd_value v = nd->v;
    if (nd->alias && cp_scan_find(pre, nd->alias) == i) {
        hd_cell *c = (hd_cell *)nd->alias;
        if (snap_slots(sn, CP_SNAP_CELL, nd->alias, &c->v, 1)) return sn->vm->err;
        sn->items[sn->n - 1].node = i;
    }
    const void *key = v.type == HD_V_TENSOR ? (const void *)v.as.t
                      : hd_value_is_obj(v)  ? (const void *)v.as.o
                                            : NULL;
    if (!key || cp_scan_find(pre, key) != i) return HD_OK;
    return snap_container(sn, v, i);
}

/* Items are in the order of their scan nodes (-1 first): the first of
 * node's, or sn->n. */
static int snap_first(const cp_snapshot *sn, int node) {
    int lo = 0, hi = sn->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (sn->items[mid].node < node)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int snap_is(hd_value v, const void *obj) {
    return hd_value_is_obj(v) && v.as.o == obj;
}

static hd_status touch_at(cp_snapshot *sn, cp_snap *s, int64_t j) {
    if (j < 0 || j >= s->n) return HD_OK;
    if (!s->touched && !(s->touched = hd_ctx_calloc(&sn->vm->ctx, (size_t)s->n, 1)))
        return hd_vm_oom(sn->vm);
    s->touched[j] = 1;
    return HD_OK;
}

hd_status cp_snapshot_touch(cp_snapshot *sn, int node, int cell, const char *name, int64_t i) {
    for (int k = snap_first(sn, node); k < sn->n && sn->items[k].node == node; k++) {
        cp_snap *s = &sn->items[k];
        if ((s->kind == CP_SNAP_CELL) != cell) continue; /* a node's cell and its value */
        if (cell) return touch_at(sn, s, 0);
        if (s->kind == CP_SNAP_LIST && !s->t && !name) return touch_at(sn, s, i);
        if (s->kind != CP_SNAP_DICT || !name) continue;
        for (int64_t j = 0; j < s->n; j++)
            if (!strcmp(s->keys[j]->chars, name)) return touch_at(sn, s, j);
    }
    return HD_OK;
}

hd_status cp_snapshot_touch_slot(cp_snapshot *sn, const hd_value *p) {
    for (int k = 0; k < sn->n && sn->items[k].node < 0; k++) {
        cp_snap *s = &sn->items[k];
        const hd_value *base = s->kind == CP_SNAP_MODULE  ? ((hd_module *)s->owner)->globals
                               : s->kind == CP_SNAP_SLOTS ? s->slots
                                                          : NULL;
        if (base && p >= base && p < base + s->n) return touch_at(sn, s, p - base);
    }
    return HD_OK;
}

int cp_snapshot_held(const cp_snapshot *sn, int node, const char *name, int64_t i,
                     const void *obj) {
    for (int k = snap_first(sn, node); k < sn->n && sn->items[k].node == node; k++) {
        const cp_snap *s = &sn->items[k];
        if (s->kind == CP_SNAP_LIST && !s->t && !name) return i < s->n && snap_is(s->vals[i], obj);
        if (s->kind != CP_SNAP_DICT || !name) continue;
        for (int64_t j = 0; j < s->n; j++)
            if (!strcmp(s->keys[j]->chars, name)) return snap_is(s->vals[j], obj);
    }
    return 0;
}

static hd_status snap_module(cp_snapshot *sn, hd_module *m) {
    return snap_slots(sn, CP_SNAP_MODULE, &m->obj, m->globals, m->nglobals);
}

hd_status cp_snapshot_take(cp_snapshot *sn, hd_vm *vm, const cp_scan *pre, const cp_roots *r) {
    memset(sn, 0, sizeof *sn);
    sn->vm = vm;
    sn->rng_seed = vm->ctx.rng_seed;
    sn->rng_offset = vm->ctx.rng_offset;
    if (snap_module(sn, vm->main)) return vm->err;
    const hd_dict *mods = hd_as_dict(vm->modules);
    for (int64_t k = 0; vm->modules.type == HD_V_DICT && k < mods->len; k++)
        if (mods->vals[k].type == HD_V_MODULE && mods->vals[k].as.o != &vm->main->obj &&
            snap_module(sn, (hd_module *)mods->vals[k].as.o))
            return vm->err;
    if (r->slots && snap_slots(sn, CP_SNAP_SLOTS, NULL, r->slots, r->nslots)) return vm->err;
    for (int i = 0; i < pre->n; i++)
        if (snap_node(sn, pre, i)) return vm->err;
    return HD_OK;
}

static void put_back(hd_vm *vm, hd_value *dst, const hd_value *vals, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        hd_value old = dst[i];
        hd_vref(dst[i] = vals[i]);
        hd_vunref(vm, old);
    }
}

/* Putting a container back allocates nothing (it cannot fail, and the
 * snapshot is put back more than once): lists and dicts never give their
 * storage back while they live, so it still holds the s->n entries it held
 * at the snapshot. */
static void restore_list(hd_vm *vm, const cp_snap *s) {
    hd_list *l = (hd_list *)s->owner;
    if (hd_list_reserve(vm, l, s->n)) return; /* (never: see above) */
    int64_t old = l->len;
    put_back(vm, l->items, s->vals, HD_MIN(old, s->n));
    for (int64_t i = old; i < s->n; i++) hd_vref(l->items[i] = s->vals[i]);
    l->len = s->n;
    for (int64_t i = s->n; i < old; i++) hd_vunref(vm, l->items[i]);
}

static void restore_dict(hd_vm *vm, const cp_snap *s) {
    hd_dict *d = (hd_dict *)s->owner;
    hd_dict_empty(vm, d);
    hd_value dv = hd_obj_value(s->owner);
    for (int64_t i = 0; i < s->n; i++) {
        hd_vref(s->vals[i]);
        if (hd_dict_set_str(vm, dv, s->keys[i], s->vals[i])) return;
    }
}

static void restore_one(hd_vm *vm, const cp_snap *s) {
    if (s->t) {
        hd_grad_set(&vm->ctx, s->t, s->grad);
        return;
    }
    switch (s->kind) {
    case CP_SNAP_LIST: restore_list(vm, s); break;
    case CP_SNAP_DICT: restore_dict(vm, s); break;
    case CP_SNAP_MODULE: {
        hd_module *m = (hd_module *)s->owner;
        put_back(vm, m->globals, s->vals, s->n < m->nglobals ? s->n : m->nglobals);
        break;
    }
    case CP_SNAP_SLOTS:
    case CP_SNAP_CELL: put_back(vm, s->slots, s->vals, s->n); break;
    }
}

void cp_snapshot_restore(cp_snapshot *sn) {
    hd_vm *vm = sn->vm;
    if (!vm) return;
    for (int i = 0; i < sn->n; i++) restore_one(vm, &sn->items[i]);
    vm->ctx.rng_seed = sn->rng_seed;
    vm->ctx.rng_offset = sn->rng_offset;
}

/* ---- what the body changed ---- */

static int same_value(hd_value a, hd_value b) {
    if (a.type != b.type) return 0;
    if (hd_value_is_obj(a) && a.type != HD_V_STR) return a.as.o == b.as.o;
    return hd_value_equal(a, b);
}

/* Unchanged: the same value, and the body did not store to the place (a
 * store of the value that was there is replayed too: later calls may not
 * find it there). */
static int kept(const cp_snap *s, int64_t i, hd_value now) {
    return same_value(now, s->vals[i]) && !(s->touched && s->touched[i]);
}

static hd_status changes_slots(const cp_snap *s, const hd_value *now, int64_t n, cp_change *c,
                               cp_change_fn fn, void *ud) {
    for (int64_t i = 0; i < n && i < s->n; i++) {
        if (kept(s, i, now[i])) continue;
        c->index = i;
        c->now = now[i];
        hd_status st = fn(ud, c);
        if (st) return st;
    }
    return HD_OK;
}

static hd_status changes_dict(const cp_snap *s, cp_change *c, cp_change_fn fn, void *ud) {
    const hd_dict *d = (const hd_dict *)s->owner;
    hd_value dv = hd_obj_value(s->owner);
    for (int64_t i = 0; i < s->n; i++)
        if (!hd_dict_get(dv, s->keys[i]->chars)) {
            c->reshaped = 1;
            return fn(ud, c);
        }
    for (int64_t i = 0; i < d->len; i++) {
        const char *k = d->keys[i]->chars;
        int64_t j = 0;
        while (j < s->n && strcmp(s->keys[j]->chars, k) != 0) j++;
        if (j < s->n && kept(s, j, d->vals[i])) continue;
        c->key = k;
        c->now = d->vals[i];
        hd_status st = fn(ud, c);
        if (st) return st;
    }
    return HD_OK;
}

static hd_status changes_one(const cp_snap *s, cp_change_fn fn, void *ud) {
    cp_change c;
    memset(&c, 0, sizeof c);
    c.kind = s->kind;
    c.node = s->node;
    switch (s->kind) {
    case CP_SNAP_LIST: {
        const hd_list *l = (const hd_list *)s->owner;
        if (l->len == s->n) return changes_slots(s, l->items, l->len, &c, fn, ud);
        c.reshaped = 1;
        return fn(ud, &c);
    }
    case CP_SNAP_DICT: return changes_dict(s, &c, fn, ud);
    case CP_SNAP_MODULE:
        c.mod = (hd_module *)s->owner;
        return changes_slots(s, c.mod->globals, c.mod->nglobals, &c, fn, ud);
    case CP_SNAP_SLOTS:
    case CP_SNAP_CELL: return changes_slots(s, s->slots, s->n, &c, fn, ud);
    }
    return HD_OK;
}

hd_status cp_snapshot_changes(const cp_snapshot *sn, cp_change_fn fn, void *ud) {
    for (int i = 0; i < sn->n; i++) {
        const cp_snap *s = &sn->items[i];
        if (s->t) continue; /* gradients are outputs of their own */
        hd_status st = changes_one(s, fn, ud);
        if (st) return st;
    }
    return HD_OK;
}

void cp_snapshot_free(cp_snapshot *sn) {
    hd_vm *vm = sn->vm;
    if (!vm) return;
    for (int i = 0; i < sn->n; i++) {
        cp_snap *s = &sn->items[i];
        for (int64_t k = 0; k < s->n; k++) {
            hd_vunref(vm, s->vals[k]);
            if (s->keys) hd_vunref(vm, hd_obj_value(&s->keys[k]->obj));
        }
        if (s->n) hd_ctx_free(&vm->ctx, s->vals, (size_t)s->n * sizeof *s->vals);
        if (s->touched) hd_ctx_free(&vm->ctx, s->touched, (size_t)s->n);
        if (s->keys) hd_ctx_free(&vm->ctx, s->keys, (size_t)s->n * sizeof *s->keys);
        if (s->owner) hd_vunref(vm, hd_obj_value(s->owner));
        hd_tensor_unref(s->t);
        hd_tensor_unref(s->grad);
    }
    if (sn->cap) hd_ctx_free(&vm->ctx, sn->items, (size_t)sn->cap * sizeof *sn->items);
    memset(sn, 0, sizeof *sn);
}
