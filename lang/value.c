/* value: heap objects, refcounting, the cycle collector, and how values
 * print. Every object is linked into its VM; hd_vm_free releases them all,
 * cycles included. */
#include "compiled.h"
#include "vm_internal.h"
#include "tensor_api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- object headers ---- */

static void hd_obj_link(hd_vm *vm, hd_obj *o) {
    o->prev = NULL;
    o->next = vm->objects;
    if (vm->objects) vm->objects->prev = o;
    vm->objects = o;
    vm->nobjects++;
}

static void hd_obj_unlink(hd_vm *vm, hd_obj *o) {
    if (o->prev)
        o->prev->next = o->next;
    else
        vm->objects = o->next;
    if (o->next) o->next->prev = o->prev;
    o->prev = o->next = NULL;
    vm->nobjects--;
}

hd_status hd_vm_oom(hd_vm *vm) {
    return hd_vm_error(vm, HD_ERR_MEMORY, "%s",
                       vm->ctx.errmsg[0] ? vm->ctx.errmsg : "out of memory");
}

void *hd_obj_new(hd_vm *vm, hd_vtype type, size_t size) {
    hd_obj *o = hd_ctx_alloc(&vm->ctx, size);
    if (!o) {
        hd_vm_oom(vm);
        return NULL;
    }
    memset(o, 0, size);
    o->refcount = 1;
    o->type = type;
    o->birth = ++vm->births;
    hd_obj_link(vm, o);
    return o;
}

size_t hd_obj_size(const hd_obj *o) {
    switch (o->type) {
    case HD_V_STR: return sizeof(hd_str) + ((const hd_str *)o)->len + 1;
    case HD_V_LIST: return sizeof(hd_list);
    case HD_V_DICT: return sizeof(hd_dict);
    case HD_V_RANGE: return sizeof(hd_range);
    case HD_V_FUNC:
        return sizeof(hd_closure) + (size_t)((const hd_closure *)o)->ncells * sizeof(hd_cell *);
    case HD_V_NATIVE: return sizeof(hd_native);
    case HD_V_CLASS: return sizeof(hd_class);
    case HD_V_OBJECT: return sizeof(hd_object);
    case HD_V_MODULE: return sizeof(hd_module);
    case HD_V_BOUND: return sizeof(hd_bound);
    case HD_V_HANDLE: return sizeof(hd_handle);
    case HD_V_CELL: return sizeof(hd_cell);
    default: return 0;
    }
}

/* Drop everything o holds and leave it a valid empty object (the collector
 * clears a whole garbage set before freeing any of it). */
void hd_obj_clear(hd_vm *vm, hd_obj *o) {
    hd_ctx *ctx = &vm->ctx;
    switch (o->type) {
    case HD_V_LIST: {
        hd_list *l = (hd_list *)o;
        hd_value *items = l->items;
        int64_t n = l->len, cap = l->cap;
        l->items = NULL;
        l->len = l->cap = 0;
        for (int64_t i = 0; i < n; i++) hd_vunref(vm, items[i]);
        hd_ctx_free(ctx, items, (size_t)cap * sizeof(hd_value));
        break;
    }
    case HD_V_DICT: hd_dict_clear(vm, (hd_dict *)o); break;
    case HD_V_FUNC: {
        hd_closure *c = (hd_closure *)o;
        hd_module *m = c->mod;
        c->mod = NULL;
        for (int i = 0; i < c->ncells; i++) {
            hd_cell *cell = c->cells[i];
            c->cells[i] = NULL;
            if (cell) hd_vunref(vm, hd_obj_value(&cell->obj));
        }
        if (m) hd_vunref(vm, hd_obj_value(&m->obj));
        break;
    }
    case HD_V_NATIVE: {
        hd_native *n = (hd_native *)o;
        hd_value s = n->self;
        n->self = hd_none();
        hd_vunref(vm, s);
        break;
    }
    case HD_V_CLASS: {
        hd_class *c = (hd_class *)o;
        hd_value a = c->name, b = c->methods, base = c->base;
        c->name = c->methods = c->base = hd_none();
        hd_vunref(vm, a);
        hd_vunref(vm, b);
        hd_vunref(vm, base);
        break;
    }
    case HD_V_OBJECT: {
        hd_object *ob = (hd_object *)o;
        hd_class *c = ob->cls;
        hd_value f = ob->fields;
        ob->cls = NULL;
        ob->fields = hd_none();
        hd_vunref(vm, f);
        if (c) hd_vunref(vm, hd_obj_value(&c->obj));
        break;
    }
    case HD_V_MODULE: {
        hd_module *m = (hd_module *)o;
        hd_value names = m->names;
        hd_value *g = m->globals;
        int n = m->nglobals, cap = m->cap;
        m->names = hd_none();
        m->globals = NULL;
        m->nglobals = m->cap = 0;
        for (int i = 0; i < n; i++) hd_vunref(vm, g[i]);
        hd_ctx_free(ctx, g, (size_t)cap * sizeof(hd_value));
        hd_vunref(vm, names);
        hd_ctx_strfree(ctx, m->name);
        hd_ctx_strfree(ctx, m->path);
        hd_ctx_strfree(ctx, m->dir);
        m->name = m->path = m->dir = NULL;
        break;
    }
    case HD_V_BOUND: {
        hd_bound *b = (hd_bound *)o;
        hd_value s = b->self, f = b->fn;
        b->self = b->fn = hd_none();
        hd_vunref(vm, s);
        hd_vunref(vm, f);
        break;
    }
    case HD_V_HANDLE: {
        hd_handle *h = (hd_handle *)o;
        void *p = h->p;
        h->p = NULL;
        if (p && h->htype && h->htype->free) h->htype->free(vm, p);
        break;
    }
    case HD_V_CELL: {
        hd_cell *c = (hd_cell *)o;
        hd_value v = c->v;
        c->v = hd_none();
        hd_vunref(vm, v);
        break;
    }
    default: break;
    }
}

/* Frees iteratively: a long chain of containers would otherwise recurse
 * once per link and could exhaust the C stack. */
void hd_obj_release(hd_vm *vm, hd_obj *o) {
    if (vm->sweeping) return;
    hd_obj_unlink(vm, o);
    o->next = vm->pending_free;
    vm->pending_free = o;
    if (vm->freeing) return;
    vm->freeing = 1;
    while (vm->pending_free) {
        hd_obj *x = vm->pending_free;
        vm->pending_free = x->next;
        hd_obj_clear(vm, x);
        hd_ctx_free(&vm->ctx, x, hd_obj_size(x));
    }
    vm->freeing = 0;
}

hd_value hd_value_ref(hd_value v) {
    hd_vref(v);
    return v;
}

void hd_value_unref(hd_vm *vm, hd_value v) {
    hd_vunref(vm, v);
}

/* ---- the cycle collector ----
 * CPython's scheme: subtract the references objects hold to each other
 * from their refcounts; what keeps a positive count is referenced from
 * outside the heap (C locals, frames) and is live with everything it
 * reaches; the rest is garbage held only by cycles. */

typedef void (*hd_visit_fn)(hd_obj *child, void *ud);

static void hd_visit_value(hd_value v, hd_visit_fn fn, void *ud) {
    if (v.type >= HD_V_STR && v.type < HD_V_COUNT) fn(v.as.o, ud);
}

static void hd_obj_traverse(hd_obj *o, hd_visit_fn fn, void *ud) {
    switch (o->type) {
    case HD_V_LIST: {
        hd_list *l = (hd_list *)o;
        for (int64_t i = 0; i < l->len; i++) hd_visit_value(l->items[i], fn, ud);
        break;
    }
    case HD_V_DICT: {
        hd_dict *d = (hd_dict *)o;
        for (int64_t i = 0; i < d->len; i++) {
            fn(&d->keys[i]->obj, ud);
            hd_visit_value(d->vals[i], fn, ud);
        }
        break;
    }
    case HD_V_FUNC: {
        hd_closure *c = (hd_closure *)o;
        for (int i = 0; i < c->ncells; i++)
            if (c->cells[i]) fn(&c->cells[i]->obj, ud);
        if (c->mod) fn(&c->mod->obj, ud);
        break;
    }
    case HD_V_NATIVE: hd_visit_value(((hd_native *)o)->self, fn, ud); break;
    case HD_V_CLASS:
        hd_visit_value(((hd_class *)o)->name, fn, ud);
        hd_visit_value(((hd_class *)o)->methods, fn, ud);
        hd_visit_value(((hd_class *)o)->base, fn, ud);
        break;
    case HD_V_OBJECT:
        if (((hd_object *)o)->cls) fn(&((hd_object *)o)->cls->obj, ud);
        hd_visit_value(((hd_object *)o)->fields, fn, ud);
        break;
    case HD_V_MODULE: {
        hd_module *m = (hd_module *)o;
        hd_visit_value(m->names, fn, ud);
        for (int i = 0; i < m->nglobals; i++) hd_visit_value(m->globals[i], fn, ud);
        break;
    }
    case HD_V_BOUND:
        hd_visit_value(((hd_bound *)o)->self, fn, ud);
        hd_visit_value(((hd_bound *)o)->fn, fn, ud);
        break;
    case HD_V_CELL: hd_visit_value(((hd_cell *)o)->v, fn, ud); break;
    default: break;
    }
}

static void hd_gc_decref(hd_obj *child, void *ud) {
    HD_UNUSED(ud);
    child->gc--;
}

typedef struct {
    hd_vm *vm;
    hd_obj **stack;
    size_t n, cap;
    int oom;
} hd_gc_mark;

static void hd_gc_push(hd_obj *child, void *ud) {
    hd_gc_mark *m = ud;
    if (child->gc == -1 || m->oom) return;
    if (m->n == m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 256;
        hd_obj **s = hd_ctx_realloc(&m->vm->ctx, m->stack, m->cap * sizeof *s, ncap * sizeof *s);
        if (!s) {
            m->oom = 1;
            return;
        }
        m->stack = s;
        m->cap = ncap;
    }
    m->stack[m->n++] = child;
}

hd_status hd_vm_collect(hd_vm *vm, size_t *freed) {
    if (freed) *freed = 0;
    if (vm->sweeping || vm->freeing) return HD_OK;
    for (hd_obj *o = vm->objects; o; o = o->next) o->gc = o->refcount;
    for (hd_obj *o = vm->objects; o; o = o->next) hd_obj_traverse(o, hd_gc_decref, NULL);
    hd_gc_mark m = {vm, NULL, 0, 0, 0};
    for (hd_obj *o = vm->objects; o && !m.oom; o = o->next) {
        if (o->gc <= 0) continue;
        hd_gc_push(o, &m);
        while (m.n && !m.oom) {
            hd_obj *x = m.stack[--m.n];
            if (x->gc == -1) continue;
            x->gc = -1;
            hd_obj_traverse(x, hd_gc_push, &m);
        }
    }
    hd_ctx_free(&vm->ctx, m.stack, m.cap * sizeof(hd_obj *));
    if (m.oom) return hd_vm_oom(vm);
    /* Move the garbage to a list of its own, hold it, clear it, free it. */
    hd_obj *garbage = NULL;
    size_t count = 0;
    for (hd_obj *o = vm->objects, *next; o; o = next) {
        next = o->next;
        if (o->gc == -1) continue;
        hd_obj_unlink(vm, o);
        o->next = garbage;
        garbage = o;
        o->refcount++;
        count++;
    }
    for (hd_obj *o = garbage; o; o = o->next) hd_obj_clear(vm, o);
    while (garbage) {
        hd_obj *o = garbage;
        garbage = o->next;
        hd_ctx_free(&vm->ctx, o, hd_obj_size(o));
    }
    if (freed) *freed = count;
    return HD_OK;
}

/* ---- strings ---- */

uint32_t hd_str_hash(const char *s, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

size_t hd_utf8_count(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

size_t hd_str_offset(const hd_str *s, int64_t i) {
    if (s->ulen == s->len) return (size_t)i;
    size_t off = 0;
    for (int64_t k = 0; k < i && off < s->len; k++) {
        off++;
        while (off < s->len && ((unsigned char)s->chars[off] & 0xC0) == 0x80) off++;
    }
    return off;
}

hd_value hd_str_new(hd_vm *vm, const char *s, size_t len) {
    hd_str *str = hd_obj_new(vm, HD_V_STR, sizeof(hd_str) + len + 1);
    if (!str) return hd_none();
    str->len = len;
    if (len) memcpy(str->chars, s, len);
    str->chars[len] = 0;
    str->hash = hd_str_hash(str->chars, len);
    str->ulen = hd_utf8_count(str->chars, len);
    return hd_obj_value(&str->obj);
}

hd_value hd_str_from(hd_vm *vm, const char *s) {
    return hd_str_new(vm, s, strlen(s));
}

hd_value hd_str_fmt(hd_vm *vm, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof small) return hd_str_new(vm, small, (size_t)n);
    char *big = hd_ctx_alloc(&vm->ctx, (size_t)n + 1);
    if (!big) {
        hd_vm_oom(vm);
        return hd_none();
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    hd_value v = hd_str_new(vm, big, (size_t)n);
    hd_ctx_free(&vm->ctx, big, (size_t)n + 1);
    return v;
}

/* ---- lists ---- */

hd_value hd_list_new(hd_vm *vm, int64_t cap) {
    hd_list *l = hd_obj_new(vm, HD_V_LIST, sizeof(hd_list));
    if (!l) return hd_none();
    hd_value v = hd_obj_value(&l->obj);
    if (cap > 0 && hd_list_reserve(vm, l, cap) != HD_OK) {
        hd_vunref(vm, v);
        return hd_none();
    }
    return v;
}

hd_status hd_list_reserve(hd_vm *vm, hd_list *l, int64_t cap) {
    if (cap <= l->cap) return HD_OK;
    if (cap > ((int64_t)1 << 40)) return hd_vm_error(vm, HD_ERR_MEMORY, "list too large");
    hd_value *items = hd_ctx_realloc(&vm->ctx, l->items, (size_t)l->cap * sizeof(hd_value),
                                     (size_t)cap * sizeof(hd_value));
    if (!items) return hd_vm_oom(vm);
    l->items = items;
    l->cap = cap;
    return HD_OK;
}

static hd_status hd_list_grow(hd_vm *vm, hd_list *l) {
    return hd_list_reserve(vm, l, l->cap < 4 ? 4 : l->cap * 2);
}

hd_status hd_list_push(hd_vm *vm, hd_value list, hd_value item) {
    hd_list *l = hd_as_list(list);
    if (vm->roll_watch) hd_roll_note_container(vm, &l->obj, 0, item, item);
    if (l->len == l->cap && hd_list_grow(vm, l) != HD_OK) {
        hd_vunref(vm, item);
        return vm->err;
    }
    l->items[l->len++] = item;
    return HD_OK;
}

hd_status hd_list_insert(hd_vm *vm, hd_list *l, int64_t at, hd_value item) {
    if (vm->roll_watch) hd_roll_note_container(vm, &l->obj, 0, item, item);
    if (l->len == l->cap && hd_list_grow(vm, l) != HD_OK) {
        hd_vunref(vm, item);
        return vm->err;
    }
    memmove(l->items + at + 1, l->items + at, (size_t)(l->len - at) * sizeof(hd_value));
    l->items[at] = item;
    l->len++;
    return HD_OK;
}

/* ---- dicts ---- */

hd_value hd_dict_new(hd_vm *vm) {
    hd_dict *d = hd_obj_new(vm, HD_V_DICT, sizeof(hd_dict));
    return d ? hd_obj_value(&d->obj) : hd_none();
}

int64_t hd_dict_find(const hd_dict *d, const char *key, size_t len, uint32_t hash) {
    if (!d->index_cap) return -1;
    int64_t mask = d->index_cap - 1;
    for (int64_t i = hash & mask;; i = (i + 1) & mask) {
        int32_t pos = d->index[i];
        if (pos < 0) return -1;
        const hd_str *k = d->keys[pos];
        if (k->hash == hash && k->len == len && memcmp(k->chars, key, len) == 0) return pos;
    }
}

static void hd_dict_index_put(hd_dict *d, int32_t pos) {
    int64_t mask = d->index_cap - 1;
    int64_t i = d->keys[pos]->hash & mask;
    while (d->index[i] >= 0) i = (i + 1) & mask;
    d->index[i] = pos;
}

static hd_status hd_dict_reindex(hd_vm *vm, hd_dict *d, int64_t icap) {
    int32_t *index = hd_ctx_alloc(&vm->ctx, (size_t)icap * sizeof(int32_t));
    if (!index) return hd_vm_oom(vm);
    hd_ctx_free(&vm->ctx, d->index, (size_t)d->index_cap * sizeof(int32_t));
    d->index = index;
    d->index_cap = icap;
    memset(index, 0xff, (size_t)icap * sizeof(int32_t));
    for (int64_t i = 0; i < d->len; i++) hd_dict_index_put(d, (int32_t)i);
    return HD_OK;
}

static hd_status hd_dict_reserve(hd_vm *vm, hd_dict *d, int64_t n) {
    if (n > ((int64_t)1 << 30)) return hd_vm_error(vm, HD_ERR_MEMORY, "dict too large");
    if (n > d->cap) {
        int64_t cap = d->cap < 4 ? 4 : d->cap * 2;
        while (cap < n) cap *= 2;
        hd_str **keys = hd_ctx_realloc(&vm->ctx, d->keys, (size_t)d->cap * sizeof(hd_str *),
                                       (size_t)cap * sizeof(hd_str *));
        if (!keys) return hd_vm_oom(vm);
        d->keys = keys;
        hd_value *vals = hd_ctx_realloc(&vm->ctx, d->vals, (size_t)d->cap * sizeof(hd_value),
                                        (size_t)cap * sizeof(hd_value));
        if (!vals) {
            /* keys must have d->cap entries again, or they are freed with the
             * wrong size (the allocator contract: shrinking does not fail) */
            if (d->cap) {
                hd_str **k = hd_ctx_realloc(&vm->ctx, keys, (size_t)cap * sizeof(hd_str *),
                                            (size_t)d->cap * sizeof(hd_str *));
                if (k) d->keys = k;
            } else {
                hd_ctx_free(&vm->ctx, keys, (size_t)cap * sizeof(hd_str *));
                d->keys = NULL;
            }
            return hd_vm_oom(vm);
        }
        d->vals = vals;
        d->cap = cap;
    }
    if (n * 2 > d->index_cap) {
        int64_t icap = 8;
        while (icap < n * 2) icap *= 2;
        return hd_dict_reindex(vm, d, icap);
    }
    return HD_OK;
}

hd_status hd_dict_set_str(hd_vm *vm, hd_value dict, hd_str *key, hd_value val) {
    hd_dict *d = hd_as_dict(dict);
    int64_t pos = hd_dict_find(d, key->chars, key->len, key->hash);
    if (vm->roll_watch)
        hd_roll_note_container(vm, &d->obj, pos >= 0, pos >= 0 ? d->vals[pos] : val, val);
    if (pos >= 0) {
        hd_value old = d->vals[pos];
        d->vals[pos] = val;
        hd_vunref(vm, old);
        return HD_OK;
    }
    if (hd_dict_reserve(vm, d, d->len + 1) != HD_OK) {
        hd_vunref(vm, val);
        return vm->err;
    }
    key->obj.refcount++;
    d->keys[d->len] = key;
    d->vals[d->len] = val;
    hd_dict_index_put(d, (int32_t)d->len);
    d->len++;
    return HD_OK;
}

hd_status hd_dict_set(hd_vm *vm, hd_value dict, const char *key, hd_value val) {
    hd_dict *d = hd_as_dict(dict);
    size_t len = strlen(key);
    int64_t pos = hd_dict_find(d, key, len, hd_str_hash(key, len));
    if (vm->roll_watch)
        hd_roll_note_container(vm, &d->obj, pos >= 0, pos >= 0 ? d->vals[pos] : val, val);
    if (pos >= 0) {
        hd_value old = d->vals[pos];
        d->vals[pos] = val;
        hd_vunref(vm, old);
        return HD_OK;
    }
    hd_value k = hd_str_new(vm, key, len);
    if (k.type != HD_V_STR) {
        hd_vunref(vm, val);
        return vm->err;
    }
    hd_status st = hd_dict_set_str(vm, dict, hd_as_str(k), val);
    hd_vunref(vm, k);
    return st;
}

hd_value *hd_dict_getn(hd_value dict, const char *key, size_t len) {
    hd_dict *d = hd_as_dict(dict);
    int64_t pos = hd_dict_find(d, key, len, hd_str_hash(key, len));
    return pos >= 0 ? &d->vals[pos] : NULL;
}

hd_value *hd_dict_get(hd_value dict, const char *key) {
    return hd_dict_getn(dict, key, strlen(key));
}

hd_value *hd_dict_get_str(hd_value dict, const hd_str *key) {
    hd_dict *d = hd_as_dict(dict);
    int64_t pos = hd_dict_find(d, key->chars, key->len, key->hash);
    return pos >= 0 ? &d->vals[pos] : NULL;
}

int hd_dict_remove(hd_vm *vm, hd_value dict, const char *key, size_t len, hd_value *out) {
    hd_dict *d = hd_as_dict(dict);
    int64_t pos = hd_dict_find(d, key, len, hd_str_hash(key, len));
    if (pos < 0) return 0;
    if (vm->roll_watch) hd_roll_note_container(vm, &d->obj, 0, d->vals[pos], d->vals[pos]);
    hd_str *k = d->keys[pos];
    *out = d->vals[pos];
    memmove(d->keys + pos, d->keys + pos + 1, (size_t)(d->len - pos - 1) * sizeof(hd_str *));
    memmove(d->vals + pos, d->vals + pos + 1, (size_t)(d->len - pos - 1) * sizeof(hd_value));
    d->len--;
    memset(d->index, 0xff, (size_t)d->index_cap * sizeof(int32_t));
    for (int64_t i = 0; i < d->len; i++) hd_dict_index_put(d, (int32_t)i);
    hd_vunref(vm, hd_obj_value(&k->obj));
    return 1;
}

void hd_dict_clear(hd_vm *vm, hd_dict *d) {
    if (vm->roll_watch) hd_roll_note_container(vm, &d->obj, 0, hd_none(), hd_none());
    hd_str **keys = d->keys;
    hd_value *vals = d->vals;
    int64_t n = d->len, cap = d->cap;
    hd_ctx_free(&vm->ctx, d->index, (size_t)d->index_cap * sizeof(int32_t));
    d->keys = NULL;
    d->vals = NULL;
    d->index = NULL;
    d->len = d->cap = d->index_cap = 0;
    for (int64_t i = 0; i < n; i++) {
        hd_vunref(vm, hd_obj_value(&keys[i]->obj));
        hd_vunref(vm, vals[i]);
    }
    hd_ctx_free(&vm->ctx, keys, (size_t)cap * sizeof(hd_str *));
    hd_ctx_free(&vm->ctx, vals, (size_t)cap * sizeof(hd_value));
}

void hd_dict_empty(hd_vm *vm, hd_dict *d) {
    if (vm->roll_watch) hd_roll_note_container(vm, &d->obj, 0, hd_none(), hd_none());
    int64_t n = d->len;
    d->len = 0;
    if (d->index) memset(d->index, 0xff, (size_t)d->index_cap * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        hd_vunref(vm, hd_obj_value(&d->keys[i]->obj));
        hd_vunref(vm, d->vals[i]);
    }
}

/* ---- other objects ---- */

hd_value hd_range_new(hd_vm *vm, int64_t start, int64_t stop, int64_t step) {
    hd_range *r = hd_obj_new(vm, HD_V_RANGE, sizeof(hd_range));
    if (!r) return hd_none();
    r->start = start;
    r->stop = stop;
    r->step = step;
    return hd_obj_value(&r->obj);
}

uint64_t hd_range_ulen(const hd_range *r) {
    /* Computed in unsigned arithmetic: stop - start may not fit in i64. */
    uint64_t n = 0;
    if (r->step > 0 && r->start < r->stop)
        n = ((uint64_t)r->stop - (uint64_t)r->start - 1) / (uint64_t)r->step + 1;
    else if (r->step < 0 && r->start > r->stop)
        n = ((uint64_t)r->start - (uint64_t)r->stop - 1) / (0 - (uint64_t)r->step) + 1;
    return n;
}

int64_t hd_range_len(const hd_range *r) {
    uint64_t n = hd_range_ulen(r);
    return n > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n;
}

hd_cell *hd_cell_new(hd_vm *vm, hd_value v) {
    hd_cell *c = hd_obj_new(vm, HD_V_CELL, sizeof(hd_cell));
    if (!c) {
        hd_vunref(vm, v);
        return NULL;
    }
    c->v = v;
    return c;
}

hd_value hd_closure_new(hd_vm *vm, const hd_ast_fn *fn, hd_chunk *chunk, hd_module *mod) {
    size_t size = sizeof(hd_closure) + (size_t)fn->ncaptures * sizeof(hd_cell *);
    hd_closure *c = hd_obj_new(vm, HD_V_FUNC, size);
    if (!c) return hd_none();
    c->fn = fn;
    c->chunk = chunk;
    c->mod = mod;
    mod->obj.refcount++;
    c->ncells = fn->ncaptures;
    return hd_obj_value(&c->obj);
}

hd_value hd_class_new(hd_vm *vm, const char *name) {
    hd_class *c = hd_obj_new(vm, HD_V_CLASS, sizeof(hd_class));
    if (!c) return hd_none();
    hd_value v = hd_obj_value(&c->obj);
    c->name = hd_str_from(vm, name);
    c->base = hd_none();
    c->methods = hd_dict_new(vm);
    if (c->name.type != HD_V_STR || c->methods.type != HD_V_DICT) {
        hd_vunref(vm, v);
        return hd_none();
    }
    return v;
}

hd_value hd_object_new(hd_vm *vm, hd_class *cls) {
    hd_object *o = hd_obj_new(vm, HD_V_OBJECT, sizeof(hd_object));
    if (!o) return hd_none();
    hd_value v = hd_obj_value(&o->obj);
    o->cls = cls;
    cls->obj.refcount++;
    o->fields = hd_dict_new(vm);
    if (o->fields.type != HD_V_DICT) {
        hd_vunref(vm, v);
        return hd_none();
    }
    return v;
}

hd_value hd_bound_new(hd_vm *vm, hd_value self, hd_value fn) {
    hd_bound *b = hd_obj_new(vm, HD_V_BOUND, sizeof(hd_bound));
    if (!b) {
        hd_vunref(vm, self);
        hd_vunref(vm, fn);
        return hd_none();
    }
    b->self = self;
    b->fn = fn;
    return hd_obj_value(&b->obj);
}

hd_module *hd_module_new(hd_vm *vm, const char *name, const char *path) {
    hd_module *m = hd_obj_new(vm, HD_V_MODULE, sizeof(hd_module));
    if (!m) return NULL;
    m->names = hd_dict_new(vm);
    m->name = hd_ctx_strdup(&vm->ctx, name);
    m->path = path ? hd_ctx_strdup(&vm->ctx, path) : NULL;
    if (m->names.type != HD_V_DICT || !m->name || (path && !m->path)) {
        hd_vm_oom(vm);
        hd_vunref(vm, hd_obj_value(&m->obj));
        return NULL;
    }
    return m;
}

hd_value hd_native_new(hd_vm *vm, const char *name, hd_native_fn fn, void *data) {
    hd_native *n = hd_obj_new(vm, HD_V_NATIVE, sizeof(hd_native));
    if (!n) return hd_none();
    n->name = name;
    n->fn = fn;
    n->data = data;
    n->self = hd_none();
    return hd_obj_value(&n->obj);
}

hd_value hd_native_bound(hd_vm *vm, const hd_native *proto, hd_value self) {
    hd_value v = hd_native_new(vm, proto->name, proto->fn, proto->data);
    if (v.type != HD_V_NATIVE) {
        hd_vunref(vm, self);
        return v;
    }
    ((hd_native *)v.as.o)->self = self;
    return v;
}

hd_value hd_handle_new(hd_vm *vm, const hd_handle_type *type, void *p) {
    hd_handle *h = hd_obj_new(vm, HD_V_HANDLE, sizeof(hd_handle));
    if (!h) {
        if (type && type->free && p) type->free(vm, p);
        return hd_none();
    }
    h->htype = type;
    h->p = p;
    return hd_obj_value(&h->obj);
}

/* ---- inspection ---- */

const char *hd_value_type_name(hd_value v) {
    switch (v.type) {
    case HD_V_NONE: return "none";
    case HD_V_BOOL: return "bool";
    case HD_V_INT: return "int";
    case HD_V_FLOAT: return "float";
    case HD_V_DTYPE: return "dtype";
    case HD_V_TENSOR: return "tensor";
    case HD_V_STR: return "str";
    case HD_V_LIST: return "list";
    case HD_V_DICT: return "dict";
    case HD_V_RANGE: return "range";
    case HD_V_FUNC:
    case HD_V_NATIVE:
    case HD_V_BOUND: return "function";
    case HD_V_CLASS: return "class";
    case HD_V_OBJECT: {
        hd_object *o = (hd_object *)v.as.o;
        return o->cls ? hd_as_str(o->cls->name)->chars : "object";
    }
    case HD_V_MODULE: return "module";
    case HD_V_HANDLE: {
        hd_handle *h = (hd_handle *)v.as.o;
        return h->htype && h->htype->name ? h->htype->name : "handle";
    }
    case HD_V_CELL: return "cell";
    default: return "?";
    }
}

int hd_value_truthy(hd_value v) {
    switch (v.type) {
    case HD_V_NONE: return 0;
    case HD_V_BOOL: return v.as.b;
    case HD_V_INT: return v.as.i != 0;
    case HD_V_FLOAT: return v.as.f != 0.0;
    case HD_V_STR: return hd_as_str(v)->len != 0;
    case HD_V_LIST: return hd_as_list(v)->len != 0;
    case HD_V_DICT: return hd_as_dict(v)->len != 0;
    case HD_V_RANGE: return hd_range_len((hd_range *)v.as.o) != 0;
    case HD_V_TENSOR: {
        const hd_tensor *t = v.as.t;
        if (t->numel == 1 && t->storage && hd_tensor_is_cpu(t)) return hd_tensor_get(t, 0) != 0.0;
        return t->numel != 0;
    }
    default: return 1;
    }
}

/* Lists nest without bound (l = [l] in a loop): deeper than this compares
 * unequal and does not order, rather than exhausting the C stack. */
#define HD_COMPARE_MAX_DEPTH 1000

static int hd_value_equal_depth(hd_value a, hd_value b, int depth);

static int hd_dict_equal(const hd_dict *x, hd_value bv, int depth) {
    const hd_dict *y = hd_as_dict(bv);
    if (x->len != y->len) return 0;
    for (int64_t i = 0; i < x->len; i++) {
        const hd_str *k = x->keys[i];
        int64_t j = hd_dict_find(y, k->chars, k->len, k->hash);
        if (j < 0 || !hd_value_equal_depth(x->vals[i], y->vals[j], depth + 1)) return 0;
    }
    return 1;
}

int hd_value_dtype_name(hd_value v) {
    if (v.type != HD_V_NATIVE) return -1;
    const hd_native *n = (const hd_native *)v.as.o;
    if (n->self.type != HD_V_NONE) return -1;
    return strcmp(n->name, "bool") == 0    ? HD_BOOL
           : strcmp(n->name, "int") == 0   ? HD_I64
           : strcmp(n->name, "float") == 0 ? HD_F64
                                           : -1;
}

static int hd_value_equal_depth(hd_value a, hd_value b, int depth) {
    if (depth > HD_COMPARE_MAX_DEPTH) return 0;
    if (a.type == HD_V_DTYPE && b.type == HD_V_NATIVE)
        return hd_value_dtype_name(b) == (int)a.as.dt;
    if (a.type == HD_V_NATIVE && b.type == HD_V_DTYPE)
        return hd_value_dtype_name(a) == (int)b.as.dt;
    if (a.type == HD_V_INT && b.type == HD_V_FLOAT) return (double)a.as.i == b.as.f;
    if (a.type == HD_V_FLOAT && b.type == HD_V_INT) return a.as.f == (double)b.as.i;
    if (a.type != b.type) return 0;
    switch (a.type) {
    case HD_V_NONE: return 1;
    case HD_V_BOOL: return a.as.b == b.as.b;
    case HD_V_INT: return a.as.i == b.as.i;
    case HD_V_FLOAT: return a.as.f == b.as.f;
    case HD_V_DTYPE: return a.as.dt == b.as.dt;
    case HD_V_TENSOR: return a.as.t == b.as.t;
    case HD_V_STR: {
        hd_str *x = hd_as_str(a), *y = hd_as_str(b);
        return x == y ||
               (x->len == y->len && x->hash == y->hash && memcmp(x->chars, y->chars, x->len) == 0);
    }
    case HD_V_LIST: {
        hd_list *x = hd_as_list(a), *y = hd_as_list(b);
        if (x == y) return 1;
        if (x->len != y->len) return 0;
        for (int64_t i = 0; i < x->len; i++)
            if (!hd_value_equal_depth(x->items[i], y->items[i], depth + 1)) return 0;
        return 1;
    }
    case HD_V_DICT: return a.as.o == b.as.o || hd_dict_equal(hd_as_dict(a), b, depth);
    case HD_V_RANGE: {
        hd_range *x = (hd_range *)a.as.o, *y = (hd_range *)b.as.o;
        uint64_t n = hd_range_ulen(x);
        if (n != hd_range_ulen(y)) return 0;
        return n == 0 || (x->start == y->start && (n == 1 || x->step == y->step));
    }
    case HD_V_BOUND: {
        hd_bound *x = (hd_bound *)a.as.o, *y = (hd_bound *)b.as.o;
        return x == y ||
               (hd_value_equal_depth(x->self, y->self, depth + 1) && x->fn.as.o == y->fn.as.o);
    }
    default: return a.as.o == b.as.o;
    }
}

int hd_value_equal(hd_value a, hd_value b) {
    return hd_value_equal_depth(a, b, 0);
}

static int hd_value_compare_depth(hd_value a, hd_value b, int *ok, int depth);

int hd_value_compare(hd_value a, hd_value b, int *ok) {
    return hd_value_compare_depth(a, b, ok, 0);
}

static int hd_value_compare_depth(hd_value a, hd_value b, int *ok, int depth) {
    *ok = 1;
    if ((a.type == HD_V_INT || a.type == HD_V_FLOAT) &&
        (b.type == HD_V_INT || b.type == HD_V_FLOAT)) {
        if (a.type == HD_V_INT && b.type == HD_V_INT) return (a.as.i > b.as.i) - (a.as.i < b.as.i);
        double x = a.type == HD_V_INT ? (double)a.as.i : a.as.f;
        double y = b.type == HD_V_INT ? (double)b.as.i : b.as.f;
        return (x > y) - (x < y);
    }
    if (a.type == HD_V_STR && b.type == HD_V_STR) {
        hd_str *x = hd_as_str(a), *y = hd_as_str(b);
        int c = memcmp(x->chars, y->chars, HD_MIN(x->len, y->len));
        if (c) return c < 0 ? -1 : 1;
        return (x->len > y->len) - (x->len < y->len);
    }
    if (a.type == HD_V_LIST && b.type == HD_V_LIST && depth < HD_COMPARE_MAX_DEPTH) {
        hd_list *x = hd_as_list(a), *y = hd_as_list(b);
        for (int64_t i = 0; i < x->len && i < y->len; i++) {
            int c = hd_value_compare_depth(x->items[i], y->items[i], ok, depth + 1);
            if (!*ok || c) return c;
        }
        return (x->len > y->len) - (x->len < y->len);
    }
    *ok = 0;
    return 0;
}

/* ---- printing ---- */

/* Shortest digits that read back to d, laid out as Python's repr does:
 * positional for exponents in [-4, 16), scientific otherwise. */
void hd_format_float(char *buf, size_t n, double d) {
    if (isnan(d)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, n, d < 0 ? "-inf" : "inf");
        return;
    }
    if (d == 0) {
        snprintf(buf, n, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    /* tmp: [-]D[.DDD]e(+|-)XX */
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int exp = atoi(p + 1);
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp < 0 ? '-' : '+',
                 exp < 0 ? -exp : exp);
    }
    snprintf(buf, n, "%s", out);
}

void hd_buf_init(hd_buf *b, hd_vm *vm) {
    b->vm = vm;
    b->p = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
    b->failed = 0;
}

void hd_buf_free(hd_buf *b) {
    hd_ctx_free(&b->vm->ctx, b->p, b->cap);
    b->p = NULL;
    b->len = b->cap = 0;
}

int hd_buf_failed(const hd_buf *b) {
    return b->oom || b->failed;
}

hd_status hd_buf_error(hd_buf *b) {
    return b->failed ? b->vm->err : hd_vm_oom(b->vm);
}

void hd_buf_add(hd_buf *b, const char *s, size_t n) {
    if (hd_buf_failed(b)) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = hd_ctx_realloc(&b->vm->ctx, b->p, b->cap, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void hd_buf_adds(hd_buf *b, const char *s) {
    hd_buf_add(b, s, strlen(s));
}

void hd_buf_addf(hd_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0 || hd_buf_failed(b)) return;
    if ((size_t)n < sizeof small) {
        hd_buf_add(b, small, (size_t)n);
        return;
    }
    char *big = hd_ctx_alloc(&b->vm->ctx, (size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    hd_buf_add(b, big, (size_t)n);
    hd_ctx_free(&b->vm->ctx, big, (size_t)n + 1);
}

hd_value hd_buf_to_str(hd_buf *b) {
    if (hd_buf_failed(b)) {
        hd_buf_error(b);
        hd_buf_free(b);
        return hd_none();
    }
    hd_value v = hd_str_new(b->vm, b->p ? b->p : "", b->len);
    hd_buf_free(b);
    return v;
}

static void hd_buf_quoted(hd_buf *b, const hd_str *s) {
    hd_buf_add(b, "\"", 1);
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->chars[i];
        switch (c) {
        case '"': hd_buf_add(b, "\\\"", 2); break;
        case '\\': hd_buf_add(b, "\\\\", 2); break;
        case '\n': hd_buf_add(b, "\\n", 2); break;
        case '\t': hd_buf_add(b, "\\t", 2); break;
        case '\r': hd_buf_add(b, "\\r", 2); break;
        default:
            if (c < 0x20 || c == 0x7f)
                hd_buf_addf(b, "\\u{%x}", c);
            else
                hd_buf_add(b, (const char *)&c, 1);
        }
    }
    hd_buf_add(b, "\"", 1);
}

/* Containers being printed, so that a list holding itself prints [...]. */
typedef struct hd_print_seen {
    const hd_obj *o;
    const struct hd_print_seen *up;
    int depth;
} hd_print_seen;

static void hd_buf_value_rec(hd_buf *b, hd_value v, int quote, const hd_print_seen *seen);

static int hd_print_cycle(hd_buf *b, hd_value v, const hd_print_seen *seen, const char *open,
                          const char *close) {
    for (const hd_print_seen *s = seen; s; s = s->up)
        if (s->o == v.as.o) {
            hd_buf_adds(b, open);
            hd_buf_adds(b, "...");
            hd_buf_adds(b, close);
            return 1;
        }
    if (seen && seen->depth > 200) {
        hd_buf_adds(b, "...");
        return 1;
    }
    return 0;
}

static void hd_buf_container(hd_buf *b, hd_value v, const hd_print_seen *seen) {
    hd_print_seen here = {v.as.o, seen, seen ? seen->depth + 1 : 0};
    if (v.type == HD_V_LIST) {
        if (hd_print_cycle(b, v, seen, "[", "]")) return;
        hd_list *l = hd_as_list(v);
        hd_buf_add(b, "[", 1);
        for (int64_t i = 0; i < l->len && !hd_buf_failed(b); i++) {
            if (i) hd_buf_add(b, ", ", 2);
            hd_buf_value_rec(b, l->items[i], 1, &here);
        }
        hd_buf_add(b, "]", 1);
        return;
    }
    if (hd_print_cycle(b, v, seen, "{", "}")) return;
    hd_dict *d = hd_as_dict(v);
    hd_buf_add(b, "{", 1);
    for (int64_t i = 0; i < d->len && !hd_buf_failed(b); i++) {
        if (i) hd_buf_add(b, ", ", 2);
        hd_buf_quoted(b, d->keys[i]);
        hd_buf_add(b, ": ", 2);
        hd_buf_value_rec(b, d->vals[i], 1, &here);
    }
    hd_buf_add(b, "}", 1);
}

/* Inside compiled code a tensor's values are known only when a run gives
 * them: its text is an error there (print places the values at every run,
 * compiled_print.c). */
static void hd_buf_tensor(hd_buf *b, const hd_tensor *t) {
    if (!hd_compiled_data_known(b->vm, t)) {
        hd_compiled_check_data(b->vm, t, "the text of a tensor");
        b->failed = 1;
        return;
    }
    hd_value s = hd_tensor_format(b->vm, t);
    if (s.type == HD_V_STR)
        hd_buf_add(b, hd_as_str(s)->chars, hd_as_str(s)->len);
    else if (hd_vm_failed(b->vm))
        b->failed = 1;
    else
        hd_buf_adds(b, "<tensor>");
    hd_vunref(b->vm, s);
}

static const char *hd_fn_name(hd_value v) {
    switch (v.type) {
    case HD_V_FUNC: {
        const char *n = ((hd_closure *)v.as.o)->fn->name;
        return n ? n : "<anonymous>";
    }
    case HD_V_NATIVE: return ((hd_native *)v.as.o)->name;
    case HD_V_BOUND: return hd_fn_name(((hd_bound *)v.as.o)->fn);
    default: return "?";
    }
}

static void hd_buf_value_rec(hd_buf *b, hd_value v, int quote, const hd_print_seen *seen) {
    char num[48];
    switch (v.type) {
    case HD_V_NONE: hd_buf_add(b, "none", 4); break;
    case HD_V_BOOL: hd_buf_adds(b, v.as.b ? "true" : "false"); break;
    case HD_V_INT: hd_buf_addf(b, "%lld", (long long)v.as.i); break;
    case HD_V_FLOAT:
        hd_format_float(num, sizeof num, v.as.f);
        hd_buf_adds(b, num);
        break;
    case HD_V_DTYPE: hd_buf_adds(b, hd_dtype_name(v.as.dt)); break;
    case HD_V_TENSOR: hd_buf_tensor(b, v.as.t); break;
    case HD_V_STR:
        if (quote)
            hd_buf_quoted(b, hd_as_str(v));
        else
            hd_buf_add(b, hd_as_str(v)->chars, hd_as_str(v)->len);
        break;
    case HD_V_LIST:
    case HD_V_DICT: hd_buf_container(b, v, seen); break;
    case HD_V_RANGE: {
        hd_range *r = (hd_range *)v.as.o;
        if (r->step == 1)
            hd_buf_addf(b, "%lld..%lld", (long long)r->start, (long long)r->stop);
        else
            hd_buf_addf(b, "range(%lld, %lld, %lld)", (long long)r->start, (long long)r->stop,
                        (long long)r->step);
        break;
    }
    case HD_V_FUNC:
    case HD_V_NATIVE:
    case HD_V_BOUND: hd_buf_addf(b, "<fn %s>", hd_fn_name(v)); break;
    case HD_V_CLASS:
        hd_buf_addf(b, "<class %s>", hd_as_str(((hd_class *)v.as.o)->name)->chars);
        break;
    case HD_V_OBJECT: hd_buf_addf(b, "<%s object>", hd_value_type_name(v)); break;
    case HD_V_MODULE: hd_buf_addf(b, "<module %s>", ((hd_module *)v.as.o)->name); break;
    case HD_V_HANDLE: hd_buf_addf(b, "<%s>", hd_value_type_name(v)); break;
    default: hd_buf_adds(b, "<?>"); break;
    }
}

void hd_buf_value(hd_buf *b, hd_value v, int quote) {
    hd_buf_value_rec(b, v, quote, NULL);
}

hd_value hd_value_to_str(hd_vm *vm, hd_value v) {
    if (v.type == HD_V_STR) return hd_value_ref(v);
    hd_buf b;
    hd_buf_init(&b, vm);
    hd_buf_value(&b, v, 0);
    return hd_buf_to_str(&b);
}

hd_value hd_value_repr(hd_vm *vm, hd_value v) {
    hd_buf b;
    hd_buf_init(&b, vm);
    hd_buf_value(&b, v, 1);
    return hd_buf_to_str(&b);
}
