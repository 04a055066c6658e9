/* eval_super.c: class inheritance. `class C(Base) { ... }` starts C with
 * Base's methods, its own defined over them; `super()` inside a method is
 * Base seen from self: super().init(x) runs Base's init on the same
 * object. Methods are looked up once, when the class is made, so there is
 * no chain to walk at each call; `base` keeps the chain for super(). */
#include "eval.h"
#include "vm_internal.h"

#include <string.h>

hd_status hd_class_inherit(hd_vm *vm, hd_class *c, hd_value base) {
    if (base.type != HD_V_CLASS)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "class %s(...): the base must be a class, got a value of type %s",
                           hd_as_str(c->name)->chars, hd_value_type_name(base));
    const hd_dict *m = hd_as_dict(((hd_class *)base.as.o)->methods);
    for (int64_t i = 0; i < m->len; i++)
        if (hd_dict_set_str(vm, c->methods, m->keys[i], hd_value_ref(m->vals[i])) != HD_OK)
            return vm->err;
    hd_vunref(vm, c->base);
    c->base = hd_value_ref(base);
    return HD_OK;
}

/* ---- super() ---- */

typedef struct sp_super {
    hd_value self; /* the object */
    hd_value base; /* the class whose methods it sees */
} sp_super;

static void sp_free(hd_vm *vm, void *p) {
    sp_super *s = p;
    hd_vunref(vm, s->self);
    hd_vunref(vm, s->base);
    hd_ctx_free(&vm->ctx, s, sizeof *s);
}

static hd_status sp_member(hd_vm *vm, hd_value h, const char *name, hd_value *out) {
    const sp_super *s = ((hd_handle *)h.as.o)->p;
    const hd_class *base = (const hd_class *)s->base.as.o;
    hd_value *m = hd_dict_get(base->methods, name);
    if (!m)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "super(): class %s has no method '%s'",
                           hd_as_str(base->name)->chars, name);
    *out = hd_bound_new(vm, hd_value_ref(s->self), hd_value_ref(*m)); /* takes both */
    return out->type == HD_V_BOUND ? HD_OK : (vm->err ? vm->err : hd_vm_oom(vm));
}

static const hd_handle_type sp_type = {"super", sp_free, sp_member};

/* The class in self's chain that defines the running method itself (not
 * by inheriting it), or NULL. */
static const hd_class *sp_owner(const hd_object *self, const hd_closure *method) {
    const char *name = method->fn->name;
    for (const hd_class *k = self->cls; k;) {
        const hd_class *up = k->base.type == HD_V_CLASS ? (const hd_class *)k->base.as.o : NULL;
        hd_value *m = hd_dict_get(k->methods, name);
        hd_value *inherited = up ? hd_dict_get(up->methods, name) : NULL;
        if (m && m->as.o == &method->obj && !(inherited && inherited->as.o == &method->obj))
            return k;
        k = up;
    }
    return NULL;
}

static hd_status sp_fail(hd_vm *vm, const char *why) {
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "super() %s: call it in a method of a class that has a base, as "
                       "super().init(...)",
                       why);
}

static hd_status bi_super(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                          const hd_kwarg *kw, int nkw, hd_value *result, void *data) {
    (void)self, (void)args, (void)kw, (void)data;
    if (nargs || nkw) return sp_fail(vm, "takes no arguments");
    const hd_frame *f = vm->frame;
    const hd_closure *c = f ? f->closure : NULL;
    if (!c || !c->fn->name || c->fn->nparams < 1 || f->nslots < 1)
        return sp_fail(vm, "outside a method");
    hd_value me = f->slots[0];
    if (me.type == HD_V_CELL) me = ((hd_cell *)me.as.o)->v;
    const hd_class *owner = me.type == HD_V_OBJECT ? sp_owner((hd_object *)me.as.o, c) : NULL;
    if (!owner) return sp_fail(vm, "outside a method of self's class");
    if (owner->base.type != HD_V_CLASS)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "super(): class %s has no base class",
                           hd_as_str(owner->name)->chars);
    sp_super *s = hd_ctx_alloc(&vm->ctx, sizeof *s);
    if (!s) return hd_vm_oom(vm);
    s->self = hd_value_ref(me);
    s->base = hd_value_ref(owner->base);
    *result = hd_handle_new(vm, &sp_type, s); /* frees s when it fails */
    return result->type == HD_V_HANDLE ? HD_OK : (vm->err ? vm->err : hd_vm_oom(vm));
}

hd_status hd_eval_super_init(hd_vm *vm) {
    return hd_vm_def_native(vm, "super", bi_super, NULL);
}
