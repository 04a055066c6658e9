/* Paths, scans of the heap reachable from a call's roots, and guards: see
 * compiled_int.h. */
#include "compiled_int.h"
#include "hd_autograd.h"

#include <stdio.h>
#include <string.h>

/* Longest path followed, and most values a scan visits: past them tensors
 * are not found (they become constants of the graph). */
#define CP_MAX_DEPTH 32
#define CP_MAX_NODES (1 << 20)

/* ---- paths ---- */

void cp_path_free(hd_vm *vm, cp_path *p) {
    for (int i = 0; i < p->nsteps; i++) hd_ctx_strfree(&vm->ctx, p->steps[i].name);
    if (p->nsteps) hd_ctx_free(&vm->ctx, p->steps, (size_t)p->nsteps * sizeof *p->steps);
    hd_ctx_strfree(&vm->ctx, p->text);
    if (p->mod) hd_vunref(vm, hd_obj_value(&p->mod->obj));
    memset(p, 0, sizeof *p);
}

/* The name of module m's global slot, or NULL. */
static const char *global_name(const hd_module *m, int slot) {
    const hd_dict *d = hd_as_dict(m->names);
    if (m->names.type != HD_V_DICT) return NULL;
    for (int64_t i = 0; i < d->len; i++)
        if (d->vals[i].type == HD_V_INT && d->vals[i].as.i == slot) return d->keys[i]->chars;
    return NULL;
}

static void root_text(const cp_roots *r, cp_root_kind kind, int index, const hd_module *m,
                      char *buf, size_t n) {
    const char *name = NULL;
    switch (kind) {
    case CP_ROOT_ARG: name = r->arg_names && index < r->nargs ? r->arg_names[index] : NULL; break;
    case CP_ROOT_UPVAL: name = r->upval_names ? r->upval_names[index] : NULL; break;
    case CP_ROOT_SLOT: name = r->slot_names ? r->slot_names[index] : NULL; break;
    case CP_ROOT_GLOBAL: name = m ? global_name(m, index) : NULL; break;
    }
    if (kind == CP_ROOT_GLOBAL && m && name && m != r->vm->main)
        snprintf(buf, n, "%s.%s", m->name, name);
    else if (name)
        snprintf(buf, n, "%s", name);
    else
        snprintf(buf, n, "<%s %d>",
                 kind == CP_ROOT_ARG     ? "argument"
                 : kind == CP_ROOT_SLOT  ? "local"
                 : kind == CP_ROOT_UPVAL ? "captured"
                                         : "global",
                 index);
}

static void step_text(const cp_step *s, char *buf, size_t n) {
    switch (s->kind) {
    case CP_FIELD: snprintf(buf, n, ".%s", s->name); break;
    case CP_INDEX: snprintf(buf, n, "[%lld]", (long long)s->i); break;
    case CP_GRAD: snprintf(buf, n, ".grad"); break;
    case CP_CELL: snprintf(buf, n, ".<captured %lld>", (long long)s->i); break;
    case CP_SELF: snprintf(buf, n, ".<self>"); break;
    }
}

static hd_status path_set_text(const cp_roots *r, cp_path *p) {
    char buf[512], part[160];
    root_text(r, p->root, p->index, p->mod, buf, sizeof buf);
    for (int i = 0; i < p->nsteps; i++) {
        step_text(&p->steps[i], part, sizeof part);
        size_t len = strlen(buf);
        snprintf(buf + len, sizeof buf - len, "%s", part);
    }
    p->text = hd_ctx_strdup(&r->vm->ctx, buf);
    return p->text ? HD_OK : hd_vm_oom(r->vm);
}

hd_status cp_path_root(const cp_roots *r, cp_root_kind kind, int index, hd_module *m,
                       cp_path *out) {
    memset(out, 0, sizeof *out);
    out->root = kind;
    out->index = index;
    if (m) {
        m->obj.refcount++;
        out->mod = m;
    }
    return path_set_text(r, out);
}

static hd_status steps_alloc(hd_vm *vm, cp_path *p, int n) {
    p->nsteps = 0;
    p->steps = NULL;
    if (!n) return HD_OK;
    p->steps = hd_ctx_calloc(&vm->ctx, (size_t)n, sizeof *p->steps);
    if (!p->steps) return hd_vm_oom(vm);
    p->nsteps = n;
    return HD_OK;
}

static hd_status step_copy(hd_vm *vm, const cp_step *src, cp_step *dst) {
    *dst = *src;
    dst->name = NULL;
    if (src->kind != CP_FIELD) return HD_OK;
    dst->name = hd_ctx_strdup(&vm->ctx, src->name ? src->name : "");
    return dst->name ? HD_OK : hd_vm_oom(vm);
}

hd_status cp_path_copy(hd_vm *vm, const cp_path *src, cp_path *dst) {
    memset(dst, 0, sizeof *dst);
    dst->root = src->root;
    dst->index = src->index;
    if (src->mod) {
        src->mod->obj.refcount++;
        dst->mod = src->mod;
    }
    hd_status st = steps_alloc(vm, dst, src->nsteps);
    for (int i = 0; !st && i < src->nsteps; i++) st = step_copy(vm, &src->steps[i], &dst->steps[i]);
    if (!st && !(dst->text = hd_ctx_strdup(&vm->ctx, src->text ? src->text : "")))
        st = hd_vm_oom(vm);
    if (st) cp_path_free(vm, dst);
    return st;
}

hd_status cp_path_extend(hd_vm *vm, const cp_path *p, cp_step_kind kind, int64_t i,
                         const char *name, cp_path *out) {
    memset(out, 0, sizeof *out);
    out->root = p->root;
    out->index = p->index;
    if (p->mod) {
        p->mod->obj.refcount++;
        out->mod = p->mod;
    }
    hd_status st = steps_alloc(vm, out, p->nsteps + 1);
    for (int k = 0; !st && k < p->nsteps; k++) st = step_copy(vm, &p->steps[k], &out->steps[k]);
    cp_step last = {kind, i, (char *)name};
    if (!st) st = step_copy(vm, &last, &out->steps[p->nsteps]);
    char part[160];
    step_text(&last, part, sizeof part);
    size_t len = strlen(p->text ? p->text : "") + strlen(part) + 1;
    if (!st && !(out->text = hd_ctx_alloc(&vm->ctx, len))) st = hd_vm_oom(vm);
    if (!st) snprintf(out->text, len, "%s%s", p->text ? p->text : "", part);
    if (st) cp_path_free(vm, out);
    return st;
}

static int usable(hd_value v) {
    return !hd_is_uninit(v) && v.type != HD_V_CELL;
}

static int root_get(const cp_roots *r, const cp_path *p, hd_value *out) {
    switch (p->root) {
    case CP_ROOT_ARG:
        if (p->index >= r->nargs) return 0;
        *out = r->args[p->index];
        return 1;
    case CP_ROOT_UPVAL:
        if (!r->closure || p->index >= r->closure->ncells) return 0;
        *out = r->closure->cells[p->index]->v;
        return usable(*out);
    case CP_ROOT_SLOT:
        if (!r->slots || p->index >= r->nslots) return 0;
        *out = r->slots[p->index];
        if (out->type == HD_V_CELL) *out = ((hd_cell *)out->as.o)->v;
        return usable(*out);
    case CP_ROOT_GLOBAL:
        if (!p->mod || p->index >= p->mod->nglobals) return 0;
        *out = p->mod->globals[p->index];
        return usable(*out);
    }
    return 0;
}

static int step_get(hd_value x, const cp_step *s, hd_value *out) {
    const hd_value *p = NULL;
    switch (s->kind) {
    case CP_FIELD:
        if (x.type == HD_V_OBJECT)
            p = hd_dict_get(((hd_object *)x.as.o)->fields, s->name);
        else if (x.type == HD_V_DICT)
            p = hd_dict_get(x, s->name);
        else if (x.type == HD_V_MODULE)
            p = hd_module_global((hd_module *)x.as.o, s->name);
        break;
    case CP_INDEX:
        if (x.type == HD_V_LIST && s->i < hd_as_list(x)->len) p = &hd_as_list(x)->items[s->i];
        break;
    case CP_GRAD: {
        if (x.type != HD_V_TENSOR) return 0;
        hd_tensor *g = hd_grad_get(x.as.t);
        *out = g ? hd_tensor_value(g) : hd_none();
        return 1;
    }
    case CP_CELL:
        if (x.type == HD_V_FUNC && s->i < ((hd_closure *)x.as.o)->ncells)
            p = &((hd_closure *)x.as.o)->cells[s->i]->v;
        break;
    case CP_SELF:
        if (x.type == HD_V_BOUND) p = &((hd_bound *)x.as.o)->self;
        break;
    }
    if (!p || !usable(*p)) return 0;
    *out = *p;
    return 1;
}

static int path_get_n(const cp_roots *r, const cp_path *p, int nsteps, hd_value *out) {
    hd_value v;
    if (!root_get(r, p, &v)) return 0;
    for (int i = 0; i < nsteps; i++)
        if (!step_get(v, &p->steps[i], &v)) return 0;
    *out = v;
    return 1;
}

int cp_path_get(const cp_roots *r, const cp_path *p, hd_value *out) {
    return path_get_n(r, p, p->nsteps, out);
}

static void replace(hd_vm *vm, hd_value *slot, hd_value v) {
    hd_value old = *slot;
    hd_vref(*slot = v);
    hd_vunref(vm, old);
}

static hd_status root_set(const cp_roots *r, const cp_path *p, hd_value v) {
    hd_value *slot = NULL;
    switch (p->root) {
    case CP_ROOT_ARG: break;
    case CP_ROOT_UPVAL:
        if (r->closure && p->index < r->closure->ncells) slot = &r->closure->cells[p->index]->v;
        break;
    case CP_ROOT_SLOT:
        if (r->slots && p->index < r->nslots) {
            slot = &r->slots[p->index];
            if (slot->type == HD_V_CELL) slot = &((hd_cell *)slot->as.o)->v;
        }
        break;
    case CP_ROOT_GLOBAL:
        if (p->mod && p->index < p->mod->nglobals) slot = &p->mod->globals[p->index];
        break;
    }
    if (!slot) return hd_vm_error(r->vm, HD_ERR_RUNTIME, "cannot store to %s", p->text);
    replace(r->vm, slot, v);
    return HD_OK;
}

static hd_status grad_set(hd_vm *vm, hd_tensor *t, hd_value v) {
    if (v.type != HD_V_TENSOR && v.type != HD_V_NONE)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "a gradient must be a tensor");
    hd_status st = hd_grad_set(&vm->ctx, t, v.type == HD_V_TENSOR ? v.as.t : NULL);
    return st ? hd_vm_from_ctx(vm, st) : HD_OK;
}

hd_status cp_path_set(const cp_roots *r, const cp_path *p, hd_value v) {
    hd_value x = hd_none();
    if (p->nsteps && cp_path_parent(r, p, &x)) return r->vm->err;
    hd_status st = cp_path_store(r, p, x, v);
    hd_vunref(r->vm, x);
    return st;
}

hd_status cp_path_parent(const cp_roots *r, const cp_path *p, hd_value *x) {
    *x = hd_none();
    if (!p->nsteps) return HD_OK;
    if (!path_get_n(r, p, p->nsteps - 1, x))
        return hd_vm_error(r->vm, HD_ERR_RUNTIME, "cannot store to %s: it no longer exists",
                           p->text);
    hd_vref(*x);
    return HD_OK;
}

hd_status cp_path_store(const cp_roots *r, const cp_path *p, hd_value x, hd_value v) {
    hd_vm *vm = r->vm;
    if (!p->nsteps) return root_set(r, p, v);
    const cp_step *s = &p->steps[p->nsteps - 1];
    if (s->kind == CP_FIELD && (x.type == HD_V_OBJECT || x.type == HD_V_DICT)) {
        hd_value d = x.type == HD_V_OBJECT ? ((hd_object *)x.as.o)->fields : x;
        hd_vref(v);
        return hd_dict_set(vm, d, s->name, v);
    }
    if (s->kind == CP_FIELD && x.type == HD_V_MODULE) {
        hd_value *slot = hd_module_global((hd_module *)x.as.o, s->name);
        if (slot) return replace(vm, slot, v), HD_OK;
    }
    if (s->kind == CP_INDEX && x.type == HD_V_LIST && s->i < hd_as_list(x)->len)
        return replace(vm, &hd_as_list(x)->items[s->i], v), HD_OK;
    if (s->kind == CP_GRAD && x.type == HD_V_TENSOR) return grad_set(vm, x.as.t, v);
    if (s->kind == CP_CELL && x.type == HD_V_FUNC && s->i < ((hd_closure *)x.as.o)->ncells)
        return replace(vm, &((hd_closure *)x.as.o)->cells[s->i]->v, v), HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot store to %s", p->text);
}

/* ---- scans ---- */

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

static uint64_t str_hash64(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

uint64_t cp_hash_step(uint64_t h, const cp_step *s) {
    h = mix(h, (uint64_t)s->kind + 1);
    return mix(h, s->kind == CP_FIELD ? str_hash64(s->name) : (uint64_t)s->i);
}

uint64_t cp_hash_root(cp_root_kind kind, int index, const hd_module *m) {
    return mix(mix(mix(0, (uint64_t)kind + 11), (uint64_t)index), (uint64_t)(uintptr_t)m);
}

static size_t ptr_slot(const void *p, int cap) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL;
    return (size_t)(h >> 20) & (size_t)(cap - 1);
}

static hd_status map_grow(cp_scan *s) {
    hd_ctx *ctx = &s->vm->ctx;
    int cap = s->kcap ? s->kcap * 2 : 256;
    const void **keys = hd_ctx_calloc(ctx, (size_t)cap, sizeof *keys);
    int *vals = keys ? hd_ctx_calloc(ctx, (size_t)cap, sizeof *vals) : NULL;
    if (!vals) {
        hd_ctx_free(ctx, keys, (size_t)cap * sizeof *keys);
        return hd_vm_oom(s->vm);
    }
    for (int i = 0; i < s->kcap; i++) {
        if (!s->keys[i]) continue;
        size_t k = ptr_slot(s->keys[i], cap);
        while (keys[k]) k = (k + 1) & (size_t)(cap - 1);
        keys[k] = s->keys[i];
        vals[k] = s->vals[i];
    }
    if (s->kcap) {
        hd_ctx_free(ctx, s->keys, (size_t)s->kcap * sizeof *s->keys);
        hd_ctx_free(ctx, s->vals, (size_t)s->kcap * sizeof *s->vals);
    }
    s->keys = keys;
    s->vals = vals;
    s->kcap = cap;
    return HD_OK;
}

int cp_scan_find(const cp_scan *s, const void *key) {
    if (!s->kcap || !key) return -1;
    size_t k = ptr_slot(key, s->kcap);
    while (s->keys[k]) {
        if (s->keys[k] == key) return s->vals[k];
        k = (k + 1) & (size_t)(s->kcap - 1);
    }
    return -1;
}

static hd_status map_put(cp_scan *s, const void *key, int node) {
    if ((s->nkeys + 1) * 2 > s->kcap && map_grow(s)) return s->vm->err;
    size_t k = ptr_slot(key, s->kcap);
    while (s->keys[k]) k = (k + 1) & (size_t)(s->kcap - 1);
    s->keys[k] = key;
    s->vals[k] = node;
    s->nkeys++;
    return HD_OK;
}

/* Path hashes: a table as large as the node array's capacity, rebuilt as
 * it grows (entries with equal hashes keep the first node). */
static void hash_put(cp_scan *s, uint64_t h, int node) {
    size_t k = (size_t)(h >> 17) & (size_t)(s->hcap - 1);
    while (s->hvals[k] >= 0) {
        if (s->hkeys[k] == h) return;
        k = (k + 1) & (size_t)(s->hcap - 1);
    }
    s->hkeys[k] = h;
    s->hvals[k] = node;
}

static hd_status hash_grow(cp_scan *s, int cap) {
    hd_ctx *ctx = &s->vm->ctx;
    uint64_t *keys = hd_ctx_calloc(ctx, (size_t)cap, sizeof *keys);
    int *vals = keys ? hd_ctx_alloc(ctx, (size_t)cap * sizeof *vals) : NULL;
    if (!vals) {
        hd_ctx_free(ctx, keys, (size_t)cap * sizeof *keys);
        return hd_vm_oom(s->vm);
    }
    for (int i = 0; i < cap; i++) vals[i] = -1;
    if (s->hcap) {
        hd_ctx_free(ctx, s->hkeys, (size_t)s->hcap * sizeof *s->hkeys);
        hd_ctx_free(ctx, s->hvals, (size_t)s->hcap * sizeof *s->hvals);
    }
    s->hkeys = keys;
    s->hvals = vals;
    s->hcap = cap;
    for (int i = 0; i < s->n; i++) hash_put(s, s->nodes[i].hash, i);
    return HD_OK;
}

int cp_scan_find_tensor(const cp_scan *s, const hd_tensor *t) {
    int i = cp_scan_find(s, t);
    for (int k = 0; i < 0 && t->storage && k < s->n; k++) {
        hd_value v = s->nodes[k].v;
        if (v.type == HD_V_TENSOR && hd_tensor_same_elements(v.as.t, t)) i = k;
    }
    return i;
}

int cp_scan_find_hash(const cp_scan *s, uint64_t h) {
    if (!s->hcap) return -1;
    size_t k = (size_t)(h >> 17) & (size_t)(s->hcap - 1);
    while (s->hvals[k] >= 0) {
        if (s->hkeys[k] == h) return s->hvals[k];
        k = (k + 1) & (size_t)(s->hcap - 1);
    }
    return -1;
}

static hd_status nodes_grow(cp_scan *s) {
    int cap = s->cap ? s->cap * 2 : 256;
    cp_node *n =
        hd_ctx_realloc(&s->vm->ctx, s->nodes, (size_t)s->cap * sizeof *n, (size_t)cap * sizeof *n);
    if (!n) return hd_vm_oom(s->vm);
    s->nodes = n;
    s->cap = cap;
    return hash_grow(s, cap * 2);
}

/* Identity of the values a scan maps: tensors and containers. */
static const void *identity(hd_value v) {
    switch (v.type) {
    case HD_V_TENSOR: return v.as.t;
    case HD_V_LIST:
    case HD_V_DICT:
    case HD_V_OBJECT:
    case HD_V_FUNC:
    case HD_V_BOUND: return v.as.o;
    default: return NULL;
    }
}

/* Add a node for v reached from parent by step (or a root); containers
 * seen before get a node only when reached through a new cell. */
static hd_status scan_add(cp_scan *s, hd_value v, hd_obj *alias, const cp_node *proto) {
    const void *key = identity(v);
    if ((!key && !alias) || !usable(v) || s->n >= CP_MAX_NODES) return HD_OK;
    int seen_key = key && cp_scan_find(s, key) >= 0;
    int seen_alias = alias && cp_scan_find(s, alias) >= 0;
    /* every place of a tensor gets a node (an assigned tensor is written
     * back to each); containers are walked once */
    if (seen_key && (!alias || seen_alias) && v.type != HD_V_TENSOR) return HD_OK;
    if (s->n == s->cap && nodes_grow(s)) return s->vm->err;
    int i = s->n++;
    cp_node *n = &s->nodes[i];
    *n = *proto;
    hd_vref(n->v = v);
    n->alias = alias;
    if (alias) alias->refcount++;
    hash_put(s, n->hash, i);
    if (alias && !seen_alias && map_put(s, alias, i)) return s->vm->err;
    if (key && !seen_key && map_put(s, key, i)) return s->vm->err;
    if (seen_key) n->depth = CP_MAX_DEPTH; /* not walked again */
    return HD_OK;
}

static hd_status scan_child(cp_scan *s, int parent, cp_step_kind kind, int64_t i, const char *name,
                            hd_value v, hd_obj *alias) {
    const cp_node *p = &s->nodes[parent];
    if (p->depth + 1 > CP_MAX_DEPTH) return HD_OK;
    cp_node proto;
    memset(&proto, 0, sizeof proto);
    proto.parent = parent;
    proto.step.kind = kind;
    proto.step.i = i;
    proto.step.name = (char *)name;
    proto.root = p->root;
    proto.depth = p->depth + 1;
    proto.hash = cp_hash_step(p->hash, &proto.step);
    return scan_add(s, v, alias, &proto);
}

static hd_status scan_dict(cp_scan *s, int i, hd_value d) {
    const hd_dict *dd = hd_as_dict(d);
    for (int64_t k = 0; k < dd->len; k++)
        if (scan_child(s, i, CP_FIELD, 0, dd->keys[k]->chars, dd->vals[k], NULL)) return s->vm->err;
    return HD_OK;
}

static hd_status scan_expand(cp_scan *s, int i) {
    hd_value v = s->nodes[i].v;
    if (s->nodes[i].depth >= CP_MAX_DEPTH) return HD_OK;
    switch (v.type) {
    case HD_V_OBJECT: return scan_dict(s, i, ((hd_object *)v.as.o)->fields);
    case HD_V_DICT: return scan_dict(s, i, v);
    case HD_V_LIST: {
        const hd_list *l = hd_as_list(v);
        for (int64_t k = 0; k < l->len; k++)
            if (scan_child(s, i, CP_INDEX, k, NULL, l->items[k], NULL)) return s->vm->err;
        return HD_OK;
    }
    case HD_V_FUNC: {
        hd_closure *c = (hd_closure *)v.as.o;
        for (int k = 0; k < c->ncells; k++)
            if (c->cells[k] &&
                scan_child(s, i, CP_CELL, k, NULL, c->cells[k]->v, &c->cells[k]->obj))
                return s->vm->err;
        return HD_OK;
    }
    case HD_V_BOUND: return scan_child(s, i, CP_SELF, 0, NULL, ((hd_bound *)v.as.o)->self, NULL);
    case HD_V_TENSOR: {
        hd_tensor *g = hd_grad_get(v.as.t);
        if (hd_compiled_grad_input(s->vm, g)) return s->vm->err;
        return g ? scan_child(s, i, CP_GRAD, 0, NULL, hd_tensor_value(g), NULL) : HD_OK;
    }
    default: return HD_OK;
    }
}

static hd_status scan_root(cp_scan *s, cp_root_kind kind, int index, hd_module *m, hd_value v) {
    hd_obj *alias = NULL;
    if (v.type == HD_V_CELL) {
        alias = v.as.o;
        v = ((hd_cell *)alias)->v;
    }
    cp_node proto;
    memset(&proto, 0, sizeof proto);
    proto.parent = -1;
    proto.root = kind;
    proto.index = index;
    proto.mod = m;
    proto.hash = cp_hash_root(kind, index, m);
    return scan_add(s, v, alias, &proto);
}

static hd_status scan_module(cp_scan *s, hd_module *m) {
    for (int i = 0; i < m->nglobals; i++)
        if (scan_root(s, CP_ROOT_GLOBAL, i, m, m->globals[i])) return s->vm->err;
    return HD_OK;
}

static hd_status scan_roots(cp_scan *s, const cp_roots *r) {
    hd_vm *vm = r->vm;
    for (int i = 0; i < r->nargs; i++)
        if (scan_root(s, CP_ROOT_ARG, i, NULL, r->args[i])) return vm->err;
    for (int i = 0; r->closure && i < r->closure->ncells; i++)
        if (scan_root(s, CP_ROOT_UPVAL, i, NULL, hd_obj_value(&r->closure->cells[i]->obj)))
            return vm->err;
    for (int i = 0; i < r->nslots; i++)
        if ((!r->slot_skip || !r->slot_skip[i]) && scan_root(s, CP_ROOT_SLOT, i, NULL, r->slots[i]))
            return vm->err;
    if (scan_module(s, vm->main)) return vm->err;
    const hd_dict *mods = hd_as_dict(vm->modules);
    for (int64_t k = 0; vm->modules.type == HD_V_DICT && k < mods->len; k++)
        if (mods->vals[k].type == HD_V_MODULE && mods->vals[k].as.o != &vm->main->obj &&
            scan_module(s, (hd_module *)mods->vals[k].as.o))
            return vm->err;
    return HD_OK;
}

hd_status cp_scan_build(cp_scan *s, const cp_roots *r) {
    memset(s, 0, sizeof *s);
    s->vm = r->vm;
    if (nodes_grow(s) || scan_roots(s, r)) return r->vm->err;
    for (int i = 0; i < s->n; i++)
        if (scan_expand(s, i)) return r->vm->err;
    return HD_OK;
}

void cp_scan_free(cp_scan *s) {
    hd_vm *vm = s->vm;
    if (!vm) return;
    for (int i = 0; i < s->n; i++) {
        hd_vunref(vm, s->nodes[i].v);
        if (s->nodes[i].alias) hd_vunref(vm, hd_obj_value(s->nodes[i].alias));
    }
    hd_ctx *ctx = &vm->ctx;
    hd_ctx_free(ctx, s->nodes, (size_t)s->cap * sizeof *s->nodes);
    if (s->kcap) {
        hd_ctx_free(ctx, s->keys, (size_t)s->kcap * sizeof *s->keys);
        hd_ctx_free(ctx, s->vals, (size_t)s->kcap * sizeof *s->vals);
    }
    if (s->hcap) {
        hd_ctx_free(ctx, s->hkeys, (size_t)s->hcap * sizeof *s->hkeys);
        hd_ctx_free(ctx, s->hvals, (size_t)s->hcap * sizeof *s->hvals);
    }
    memset(s, 0, sizeof *s);
}

hd_status cp_scan_path(const cp_scan *s, const cp_roots *r, int node, cp_path *out) {
    hd_vm *vm = r->vm;
    int depth = 0;
    for (int i = node; s->nodes[i].parent >= 0; i = s->nodes[i].parent) depth++;
    int root = node;
    while (s->nodes[root].parent >= 0) root = s->nodes[root].parent;
    const cp_node *rn = &s->nodes[root];
    memset(out, 0, sizeof *out);
    out->root = rn->root;
    out->index = rn->index;
    if (rn->mod) {
        rn->mod->obj.refcount++;
        out->mod = rn->mod;
    }
    hd_status st = steps_alloc(vm, out, depth);
    for (int i = node, k = depth - 1; !st && k >= 0; i = s->nodes[i].parent, k--)
        st = step_copy(vm, &s->nodes[i].step, &out->steps[k]);
    if (!st) st = path_set_text(r, out);
    if (st) cp_path_free(vm, out);
    return st;
}

int cp_scan_under_grad(const cp_scan *s, int i) {
    for (; i >= 0 && s->nodes[i].parent >= 0; i = s->nodes[i].parent)
        if (s->nodes[i].step.kind == CP_GRAD) return 1;
    return 0;
}

/* ---- guards ---- */

void cp_value_brief(hd_value v, char *buf, size_t n) {
    switch (v.type) {
    case HD_V_NONE: snprintf(buf, n, "none"); break;
    case HD_V_BOOL: snprintf(buf, n, "%s", v.as.b ? "true" : "false"); break;
    case HD_V_INT: snprintf(buf, n, "%lld", (long long)v.as.i); break;
    case HD_V_FLOAT: hd_format_float(buf, n, v.as.f); break;
    case HD_V_DTYPE: snprintf(buf, n, "%s", hd_dtype_name(v.as.dt)); break;
    case HD_V_STR: snprintf(buf, n, "\"%.40s\"", hd_as_str(v)->chars); break;
    case HD_V_LIST: snprintf(buf, n, "a list of %lld items", (long long)hd_as_list(v)->len); break;
    case HD_V_DICT: snprintf(buf, n, "a dict of %lld items", (long long)hd_as_dict(v)->len); break;
    case HD_V_TENSOR: snprintf(buf, n, "a tensor"); break;
    default: snprintf(buf, n, "a %s", hd_value_type_name(v)); break;
    }
}

static int64_t items_len(hd_value v) {
    return v.type == HD_V_LIST ? hd_as_list(v)->len : hd_as_dict(v)->len;
}

/* A hash of what a list or dict holds, for its guard: numbers, strings and
 * the like by value, tensors by kind only (they are state: read through
 * their paths), objects by class, functions and classes by identity, lists
 * and dicts inside by their items. A body that iterates a list, tests `in`
 * it, prints it or passes it to a builtin reads all of it. Deep or cyclic
 * containers are hashed down to a budget of items (the same at every
 * call). */
static uint64_t items_hash_in(hd_value v, int depth, int *budget) {
    uint64_t h = mix(0x9e37, (uint64_t)v.type);
    if (--*budget < 0) return h;
    switch (v.type) {
    case HD_V_BOOL: return mix(h, (uint64_t)v.as.b);
    case HD_V_INT: return mix(h, (uint64_t)v.as.i);
    case HD_V_FLOAT: {
        uint64_t bits;
        double f = v.as.f == 0.0 ? 0.0 : v.as.f; /* -0.0 == 0.0 */
        memcpy(&bits, &f, sizeof bits);
        return mix(h, bits);
    }
    case HD_V_DTYPE: return mix(h, (uint64_t)v.as.dt);
    case HD_V_STR: return mix(h, str_hash64(hd_as_str(v)->chars));
    case HD_V_OBJECT: return mix(h, (uint64_t)(uintptr_t)((hd_object *)v.as.o)->cls);
    case HD_V_FUNC:
    case HD_V_CLASS: return mix(h, (uint64_t)(uintptr_t)v.as.o);
    case HD_V_LIST: {
        const hd_list *l = hd_as_list(v);
        h = mix(h, (uint64_t)l->len);
        for (int64_t i = 0; depth < 16 && i < l->len; i++)
            h = mix(h, items_hash_in(l->items[i], depth + 1, budget));
        return h;
    }
    case HD_V_DICT: {
        const hd_dict *d = hd_as_dict(v);
        h = mix(h, (uint64_t)d->len);
        for (int64_t i = 0; depth < 16 && i < d->len; i++) {
            h = mix(h, str_hash64(d->keys[i]->chars));
            h = mix(h, items_hash_in(d->vals[i], depth + 1, budget));
        }
        return h;
    }
    default: return h;
    }
}

static uint64_t items_hash(hd_value v) {
    int budget = 1 << 20;
    return items_hash_in(v, 0, &budget);
}

hd_status cp_guard_make(hd_vm *vm, cp_path *path, hd_value v, cp_guard *g) {
    memset(g, 0, sizeof *g);
    g->same.nsteps = -1;
    g->path = *path;
    memset(path, 0, sizeof *path);
    g->type = v.type;
    g->v = hd_none();
    switch (v.type) {
    case HD_V_NONE:
    case HD_V_BOOL:
    case HD_V_INT:
    case HD_V_FLOAT:
    case HD_V_DTYPE:
    case HD_V_STR:
        g->kind = CP_G_VALUE;
        hd_vref(g->v = v);
        break;
    case HD_V_LIST:
    case HD_V_DICT:
        g->kind = CP_G_ITEMS;
        g->len = items_len(v);
        g->items = items_hash(v);
        break;
    case HD_V_FUNC:
    case HD_V_CLASS:
        g->kind = CP_G_IDENTITY;
        hd_vref(g->v = v);
        break;
    case HD_V_TENSOR:
        g->kind = CP_G_TENSOR;
        g->len = hd_grad_requires(&vm->ctx, v.as.t);
        break;
    default: g->kind = CP_G_TYPE; break;
    }
    return HD_OK;
}

void cp_guard_free(hd_vm *vm, cp_guard *g) {
    cp_path_free(vm, &g->path);
    if (g->same.nsteps >= 0) cp_path_free(vm, &g->same);
    hd_vunref(vm, g->v);
    g->v = hd_none();
}

static int guard_fail(const cp_guard *g, hd_value now, char *why, size_t n) {
    char a[96], b[96];
    if (g->kind == CP_G_ITEMS && now.type == g->type && items_len(now) == g->len) {
        snprintf(why, n, "'%s' changed: what the %s holds", g->path.text,
                 now.type == HD_V_LIST ? "list" : "dict");
        return 0;
    }
    if (g->kind == CP_G_ITEMS)
        snprintf(a, sizeof a, "a %s of %lld items", g->type == HD_V_LIST ? "list" : "dict",
                 (long long)g->len);
    else if (g->kind == CP_G_TENSOR && now.type == HD_V_TENSOR)
        snprintf(a, sizeof a, "a tensor%s", g->len ? " that requires grad" : "");
    else if (g->kind == CP_G_VALUE || g->kind == CP_G_IDENTITY)
        cp_value_brief(g->v, a, sizeof a);
    else
        snprintf(a, sizeof a, "a %s", g->type == HD_V_NONE ? "none" : "value of another type");
    cp_value_brief(now, b, sizeof b);
    if (g->kind == CP_G_TENSOR && now.type == HD_V_TENSOR)
        snprintf(b, sizeof b, "a tensor%s", g->len ? " that does not" : " that requires grad");
    snprintf(why, n, "'%s' changed: %s -> %s", g->path.text, a, b);
    return 0;
}

int cp_guard_check(const cp_roots *r, const cp_guard *g, char *why, size_t n) {
    hd_value now;
    if (g->kind == CP_G_ABSENT) {
        if (!cp_path_get(r, &g->path, &now)) return 1;
        snprintf(why, n, "'%s' was missing and now exists", g->path.text);
        return 0;
    }
    if (!cp_path_get(r, &g->path, &now)) {
        snprintf(why, n, "'%s' is gone", g->path.text);
        return 0;
    }
    if (now.type != g->type) return guard_fail(g, now, why, n);
    switch (g->kind) {
    case CP_G_VALUE:
        if (!hd_value_equal(now, g->v)) return guard_fail(g, now, why, n);
        break;
    case CP_G_ITEMS:
        if (items_len(now) != g->len || items_hash(now) != g->items)
            return guard_fail(g, now, why, n);
        break;
    case CP_G_IDENTITY:
        if (now.as.o != g->v.as.o) return guard_fail(g, now, why, n);
        break;
    case CP_G_TENSOR:
        if (hd_grad_requires(&r->vm->ctx, now.as.t) != (int)g->len)
            return guard_fail(g, now, why, n);
        if (g->same.nsteps >= 0) {
            hd_value first;
            if (!cp_path_get(r, &g->same, &first) || first.type != HD_V_TENSOR ||
                first.as.t != now.as.t) {
                snprintf(why, n, "'%s' is no longer the tensor at '%s'", g->path.text,
                         g->same.text);
                return 0;
            }
        }
        break;
    case CP_G_TYPE:
    case CP_G_ABSENT: break; /* (checked first) */
    }
    return 1;
}
