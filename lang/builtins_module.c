/* What every object gets for training, beside parameters() (builtins_core.c):
 * train(mode), eval(), state_dict(), load_state_dict(d, strict),
 * named_parameters(), zero_grad() and to(device), and the reflection
 * functions getattr,
 * setattr and hasattr that stdlib/nn.hodu's Sequential uses. A class that
 * defines a method of the same name overrides these.
 *
 * They walk an object's fields the way parameters() does: through lists,
 * dicts and other objects, in field order, each container once. Tensors are
 * named by their path: a field's name, a list's index, a dict's key, joined
 * by dots ("fc1.weight", "0.bias", "blocks.2.ln.weight"), as PyTorch names
 * the entries of a state dict. Fields whose names start with "_" are
 * private: these walks skip them (a layer can keep a cache there). */
#include "builtins_tensor.h"
#include "compiled.h"
#include "hd_autograd.h"
#include "hd_backend.h"
#include "vm_internal.h"

#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN   512
#define WALK_MAX_DEPTH 200

typedef struct walk walk;
struct walk {
    hd_vm *vm;
    hd_value seen; /* containers visited (a list, by identity) */
    int depth;
    char name[NAME_MAX_LEN];
    size_t len;
    /* called for each tensor and each object reached; either may be NULL */
    hd_status (*tensor)(walk *w, hd_tensor *t);
    hd_status (*object)(walk *w, hd_value obj);
    hd_value out; /* what the walk builds */
    int flag;
    const hd_backend *be; /* to(device): where */
    int device;
    hd_dtype dtype; /* to(dtype): what */
};

static int seen_before(walk *w, hd_value v) {
    hd_list *s = hd_as_list(w->seen);
    for (int64_t i = 0; i < s->len; i++)
        if (s->items[i].as.o == v.as.o) return 1;
    return 0;
}

static hd_status walk_value(walk *w, hd_value v);

/* Walk v under the name prefix + "." + key. */
static hd_status walk_child(walk *w, const char *key, size_t klen, hd_value v) {
    size_t at = w->len, need = at + (at ? 1 : 0) + klen;
    if (need >= sizeof w->name)
        return hd_vm_error(w->vm, HD_ERR_RUNTIME, "the name %.*s... is too long (over %d bytes)",
                           64, w->name, NAME_MAX_LEN);
    if (at) w->name[w->len++] = '.';
    memcpy(w->name + w->len, key, klen);
    w->len += klen;
    w->name[w->len] = 0;
    hd_status st = walk_value(w, v);
    w->len = at;
    w->name[at] = 0;
    return st;
}

/* fields: an object's fields (where names starting with "_" are private
 * and skipped) */
static hd_status walk_dict(walk *w, hd_value d, int fields) {
    hd_dict *dd = hd_as_dict(d);
    for (int64_t i = 0; i < dd->len; i++) {
        if (fields && dd->keys[i]->chars[0] == '_') continue;
        hd_status st = walk_child(w, dd->keys[i]->chars, dd->keys[i]->len, dd->vals[i]);
        if (st) return st;
    }
    return HD_OK;
}

static hd_status walk_list(walk *w, hd_value l) {
    for (int64_t i = 0; i < hd_as_list(l)->len; i++) {
        char key[24];
        int n = snprintf(key, sizeof key, "%lld", (long long)i);
        hd_status st = walk_child(w, key, (size_t)n, hd_as_list(l)->items[i]);
        if (st) return st;
    }
    return HD_OK;
}

static hd_status walk_value(walk *w, hd_value v) {
    if (v.type == HD_V_TENSOR) return w->tensor ? w->tensor(w, v.as.t) : HD_OK;
    if (v.type != HD_V_LIST && v.type != HD_V_DICT && v.type != HD_V_OBJECT) return HD_OK;
    if (seen_before(w, v)) return HD_OK;
    if (w->depth >= WALK_MAX_DEPTH)
        return hd_vm_error(w->vm, HD_ERR_RUNTIME, "objects nested too deeply (over %d levels)",
                           WALK_MAX_DEPTH);
    if (hd_list_push(w->vm, w->seen, hd_value_ref(v))) return HD_ERR_MEMORY;
    hd_status st = HD_OK;
    w->depth++;
    if (v.type == HD_V_OBJECT && w->object) st = w->object(w, v);
    if (!st && v.type == HD_V_LIST) st = walk_list(w, v);
    if (!st && v.type == HD_V_DICT) st = walk_dict(w, v, 0);
    if (!st && v.type == HD_V_OBJECT) st = walk_dict(w, ((hd_object *)v.as.o)->fields, 1);
    w->depth--;
    return st;
}

/* Walk the fields of self; w->out (when set) is freed on failure. */
static hd_status walk_run(walk *w, hd_value self) {
    w->seen = hd_list_new(w->vm, 8);
    if (hd_vm_failed(w->vm)) return HD_ERR_MEMORY;
    hd_status st = walk_value(w, self);
    hd_value_unref(w->vm, w->seen);
    if (st && w->out.type != HD_V_NONE) {
        hd_value_unref(w->vm, w->out);
        w->out = hd_none();
    }
    return st;
}

static void walk_init(walk *w, hd_vm *vm) {
    memset(w, 0, sizeof *w);
    w->vm = vm;
    w->out = hd_none();
}

/* ---- train(mode = true), eval() ---- */

static hd_status set_training(walk *w, hd_value obj) {
    return hd_dict_set(w->vm, ((hd_object *)obj.as.o)->fields, "training", hd_bool(w->flag));
}

static hd_status set_mode(hd_vm *vm, hd_value self, int mode, hd_value *out) {
    walk w;
    walk_init(&w, vm);
    w.object = set_training;
    w.flag = mode;
    if (walk_run(&w, self)) return vm->err;
    *out = hd_value_ref(self);
    return HD_OK;
}

static HD_TF_FN(om_train) {
    HD_TARGS_BIND(a); /* self, mode=true */
    int mode;
    if (hd_targ_bool(vm, &a, 1, 1, &mode)) return HD_ERR_RUNTIME;
    return set_mode(vm, self, mode, out);
}

static HD_TF_FN(om_eval) {
    HD_TARGS_BIND(a); /* self */
    return set_mode(vm, self, 0, out);
}

/* ---- state_dict(), named_parameters() ---- */

static hd_status add_named(walk *w, hd_tensor *t) {
    if (w->flag && !hd_grad_requires(hd_vm_ctx(w->vm), t)) return HD_OK;
    if (!w->len)
        return hd_vm_error(w->vm, HD_ERR_RUNTIME, "state_dict: a tensor has no field name");
    /* two paths can spell one name (a field "a.b", and a field "a" holding
     * a "b"): the first one wins */
    if (hd_dict_get(w->out, w->name)) return HD_OK;
    /* state_dict: detached views (the storage is shared, as in PyTorch);
     * named_parameters: the parameters themselves */
    hd_tensor *v = w->flag ? hd_tensor_ref(t) : hd_grad_detach(hd_vm_ctx(w->vm), t);
    if (!v) return hd_vm_from_ctx(w->vm, HD_ERR_MEMORY);
    return hd_dict_set(w->vm, w->out, w->name, hd_tensor_value(v));
}

static hd_status named_tensors(hd_vm *vm, hd_value self, int params_only, hd_value *out) {
    walk w;
    walk_init(&w, vm);
    w.tensor = add_named;
    w.flag = params_only;
    w.out = hd_dict_new(vm);
    if (hd_vm_failed(vm)) return HD_ERR_MEMORY;
    if (walk_run(&w, self)) return vm->err;
    *out = w.out;
    return HD_OK;
}

static HD_TF_FN(om_state_dict) {
    HD_TARGS_BIND(a); /* self */
    return named_tensors(vm, self, 0, out);
}

static HD_TF_FN(om_named_parameters) {
    HD_TARGS_BIND(a); /* self */
    return named_tensors(vm, self, 1, out);
}

/* ---- load_state_dict(d, strict = true) ---- */

/* "a", "b", "c" (at most 8 names, then "and N more") into buf. */
static void key_list(hd_value names, char *buf, size_t n) {
    hd_list *l = hd_as_list(names);
    size_t at = 0;
    buf[0] = 0;
    for (int64_t i = 0; i < l->len && at + 1 < n; i++) {
        if (i == 8) {
            snprintf(buf + at, n - at, " and %lld more", (long long)(l->len - 8));
            return;
        }
        int k =
            snprintf(buf + at, n - at, "%s\"%s\"", i ? ", " : "", hd_as_str(l->items[i])->chars);
        at += k > 0 ? (size_t)k : 0;
    }
}

/* Keys of a not in b, as a list of strings. */
static hd_value keys_missing(hd_vm *vm, hd_value a, hd_value b) {
    hd_value out = hd_list_new(vm, 0);
    hd_dict *da = hd_as_dict(a);
    for (int64_t i = 0; i < da->len && !hd_vm_failed(vm); i++)
        if (!hd_dict_get_str(b, da->keys[i])) {
            da->keys[i]->obj.refcount++;
            hd_list_push(vm, out, hd_obj_value(&da->keys[i]->obj));
        }
    return out;
}

static hd_status check_keys(hd_vm *vm, hd_value own, hd_value d) {
    hd_value missing = keys_missing(vm, own, d), extra = keys_missing(vm, d, own);
    hd_status st = hd_vm_failed(vm) ? HD_ERR_MEMORY : HD_OK;
    if (!st && (hd_as_list(missing)->len || hd_as_list(extra)->len)) {
        char m[400], e[400];
        key_list(missing, m, sizeof m);
        key_list(extra, e, sizeof e);
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "load_state_dict: %s%s%s%s%s",
                         *m ? "missing keys " : "", m, *m && *e ? "; " : "",
                         *e ? "unexpected keys " : "", e);
    }
    hd_value_unref(vm, missing);
    hd_value_unref(vm, extra);
    return st;
}

static hd_status check_entry(hd_vm *vm, const char *key, const hd_tensor *dst, hd_value src) {
    if (src.type != HD_V_TENSOR)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "load_state_dict: \"%s\" is a %s, not a tensor", key,
                           hd_value_type_name(src));
    const hd_tensor *s = src.as.t;
    if (s->ndim == dst->ndim &&
        !memcmp(s->shape, dst->shape, (size_t)dst->ndim * sizeof *dst->shape))
        return HD_OK;
    char a[128], b[128];
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "load_state_dict: \"%s\" has shape %s in the state dict but %s in the model",
                       key, hd_shape_str(s->shape, s->ndim, a, sizeof a),
                       hd_shape_str(dst->shape, dst->ndim, b, sizeof b));
}

/* Check everything, then copy: a failed load changes nothing. */
static hd_status load_entries(hd_vm *vm, hd_value own, hd_value d) {
    hd_dict *o = hd_as_dict(own);
    for (int64_t i = 0; i < o->len; i++) {
        hd_value *src = hd_dict_get_str(d, o->keys[i]);
        if (src && check_entry(vm, o->keys[i]->chars, o->vals[i].as.t, *src)) return vm->err;
    }
    hd_ctx *ctx = hd_vm_ctx(vm);
    int was = hd_grad_set_enabled(ctx, 0);
    hd_status st = HD_OK;
    for (int64_t i = 0; i < o->len && !st; i++) {
        hd_value *src = hd_dict_get_str(d, o->keys[i]);
        if (src) st = hd_tensor_copy_into(ctx, o->vals[i].as.t, src->as.t);
    }
    hd_grad_set_enabled(ctx, was);
    return st ? hd_tfail(vm, "load_state_dict") : HD_OK;
}

static HD_TF_FN(om_load_state_dict) {
    HD_TARGS_BIND(a); /* self, d, strict=true */
    int strict;
    hd_value own;
    if (hd_targ_bool(vm, &a, 2, 1, &strict)) return HD_ERR_RUNTIME;
    if (a.v[1].type != HD_V_DICT) return hd_targ_type_error(vm, &a, 1, "a dict of tensors");
    if (named_tensors(vm, self, 0, &own)) return vm->err;
    hd_status st = strict ? check_keys(vm, own, a.v[1]) : HD_OK;
    if (!st) st = load_entries(vm, own, a.v[1]);
    hd_value_unref(vm, own);
    if (!st) *out = hd_value_ref(self);
    return st;
}

/* ---- zero_grad() ---- */

static hd_status clear_grad(walk *w, hd_tensor *t) {
    hd_grad_set(hd_vm_ctx(w->vm), t, NULL);
    return HD_OK;
}

static HD_TF_FN(om_zero_grad) {
    HD_TARGS_BIND(a); /* self */
    walk w;
    walk_init(&w, vm);
    w.tensor = clear_grad;
    return walk_run(&w, self) ? vm->err : HD_OK;
}

/* ---- to(device) ---- */

static hd_status move_one(walk *w, hd_tensor *t) {
    if (hd_tensor_move(hd_vm_ctx(w->vm), t, w->be, w->device)) return hd_tfail(w->vm, "to");
    return HD_OK;
}

/* t (a float tensor) and its gradient cast to w->dtype in place: the
 * same tensor, with new storage. */
static hd_status cast_data(hd_ctx *ctx, hd_tensor *t, hd_dtype dt) {
    if (!hd_dtype_is_float(t->dtype) || t->dtype == dt) return HD_OK;
    hd_tensor *c = NULL;
    int was = hd_grad_set_enabled(ctx, 0);
    hd_status st = hd_op_cast(ctx, t, dt, &c);
    hd_grad_set_enabled(ctx, was);
    if (st) return st;
    t->dtype = c->dtype;
    hd_tensor_adopt(t, c);
    hd_tensor_unref(c);
    return HD_OK;
}

static hd_status cast_one(walk *w, hd_tensor *t) {
    hd_ctx *ctx = hd_vm_ctx(w->vm);
    hd_tensor *g = hd_grad_get(t);
    if (cast_data(ctx, t, w->dtype) || (g && cast_data(ctx, g, w->dtype)))
        return hd_tfail(w->vm, "to");
    return HD_OK;
}

/* model.to(dtype): every float tensor of the object's fields (and its
 * gradient) cast in place, as PyTorch's Module.to(dtype). */
static hd_status om_to_dtype(hd_vm *vm, hd_value self, hd_value dt, hd_value *out) {
    walk w;
    walk_init(&w, vm);
    w.dtype = dt.as.dt;
    if (!hd_dtype_is_float(w.dtype))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "to(%s): a model's tensors are cast to a float dtype (f16, bf16, "
                           "f32, f64)",
                           hd_dtype_name(w.dtype));
    w.tensor = cast_one;
    if (walk_run(&w, self)) return vm->err;
    *out = hd_value_ref(self);
    return HD_OK;
}

/* Every tensor of the object's fields (and its gradient) moved to the
 * device in place, as PyTorch's Module.to: layers and optimizers that hold
 * the tensors see them moved. With a dtype, every float tensor is cast
 * instead. Returns self. */
static HD_TF_FN(om_to) {
    HD_TARGS_BIND(a); /* self, device */
    /* the model's tensors change at once: inside compiled code that would
     * happen at the trace only */
    if (hd_compiled_effect(vm, "to")) return vm->err;
    if (a.v[1].type == HD_V_DTYPE) return om_to_dtype(vm, self, a.v[1], out);
    if (a.v[1].type != HD_V_STR)
        return hd_targ_type_error(vm, &a, 1,
                                  "a device string (\"cpu\", \"cuda:0\") or a float dtype");
    hd_ctx *ctx = hd_vm_ctx(vm);
    walk w;
    walk_init(&w, vm);
    if (hd_backend_parse_device(ctx, hd_as_str(a.v[1])->chars, &w.be, &w.device) ||
        w.be->available(ctx, w.device))
        return hd_tfail(vm, "to");
    w.tensor = move_one;
    if (walk_run(&w, self)) return vm->err;
    *out = hd_value_ref(self);
    return HD_OK;
}

/* ---- getattr, setattr, hasattr ---- */

static hd_status attr_name(hd_vm *vm, const hd_targs *a, const char **name) {
    if (a->v[1].type != HD_V_STR) return hd_targ_type_error(vm, a, 1, "a str");
    *name = hd_as_str(a->v[1])->chars;
    return HD_OK;
}

/* Whether a failed member lookup means "no such member": running out of
 * memory or being interrupted is passed on, never taken for absence. */
static int attr_missing(const hd_vm *vm) {
    return vm->err != HD_ERR_MEMORY && vm->err != HD_ERR_LIMIT;
}

static HD_TF_FN(tf_getattr) {
    HD_TARGS_BIND(a); /* obj, name, default= */
    const char *name = NULL;
    if (attr_name(vm, &a, &name)) return HD_ERR_RUNTIME;
    if (hd_eval_get_member(vm, a.v[0], name, out) == HD_OK) return HD_OK;
    if (a.v[2].type == HD_V_COUNT || !attr_missing(vm)) return vm->err;
    hd_vm_clear_error(vm);
    if (vm->trace_reads) hd_compiled_note_absent(vm, a.v[0], name);
    *out = hd_value_ref(a.v[2]);
    return HD_OK;
}

static HD_TF_FN(tf_hasattr) {
    HD_TARGS_BIND(a); /* obj, name */
    const char *name = NULL;
    hd_value v;
    if (attr_name(vm, &a, &name)) return HD_ERR_RUNTIME;
    int has = hd_eval_get_member(vm, a.v[0], name, &v) == HD_OK;
    if (!has && !attr_missing(vm)) return vm->err;
    if (has) {
        hd_value_unref(vm, v);
    } else {
        hd_vm_clear_error(vm);
        if (vm->trace_reads) hd_compiled_note_absent(vm, a.v[0], name);
    }
    *out = hd_bool(has);
    return HD_OK;
}

static HD_TF_FN(tf_setattr) {
    HD_TARGS_BIND(a); /* obj, name, value */
    const char *name = NULL;
    if (attr_name(vm, &a, &name)) return HD_ERR_RUNTIME;
    hd_value o = a.v[0];
    if (vm->trace_reads) hd_compiled_note_store(vm, o, name, 0);
    if (o.type == HD_V_OBJECT)
        return hd_dict_set(vm, ((hd_object *)o.as.o)->fields, name, hd_value_ref(a.v[2]));
    if (o.type == HD_V_DICT) return hd_dict_set(vm, o, name, hd_value_ref(a.v[2]));
    return hd_targ_type_error(vm, &a, 0, "an object or a dict");
}

static const hd_tfunc rows[] = {
    {"getattr", tf_getattr, "obj, name, default=", -1, HD_TF_GLOBAL},
    {"setattr", tf_setattr, "obj, name, value", -1, HD_TF_GLOBAL},
    {"hasattr", tf_hasattr, "obj, name", -1, HD_TF_GLOBAL},
};

const hd_tfunc_table hd_tfuncs_module = {rows, (int)(sizeof rows / sizeof rows[0])};

static const hd_tfunc object_methods[] = {
    {"train", om_train, "self, mode=", -1, 0},
    {"eval", om_eval, "self", -1, 0},
    {"state_dict", om_state_dict, "self", -1, 0},
    {"load_state_dict", om_load_state_dict, "self, d, strict=", -1, 0},
    {"named_parameters", om_named_parameters, "self", -1, 0},
    {"zero_grad", om_zero_grad, "self", -1, 0},
    {"to", om_to, "self, device", -1, 0},
};

hd_status hd_builtins_module_open(hd_vm *vm) {
    hd_value *methods = &vm->methods[HD_V_OBJECT];
    if (methods->type != HD_V_DICT && (*methods = hd_dict_new(vm)).type != HD_V_DICT)
        return HD_ERR_MEMORY;
    for (size_t i = 0; i < sizeof object_methods / sizeof object_methods[0]; i++) {
        const hd_tfunc *f = &object_methods[i];
        hd_value fn = hd_native_new(vm, f->name, f->fn, (void *)f);
        if (fn.type != HD_V_NATIVE || hd_dict_set(vm, *methods, f->name, fn)) return HD_ERR_MEMORY;
    }
    return HD_OK;
}
