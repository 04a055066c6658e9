/* Members: x.name for every kind of value, the method x.name(...) calls,
 * and x.name = v (eval.h). */
#include "eval.h"
#include "compiled.h"
#include "tensor_api.h"

#include <string.h>

static hd_status no_member(hd_vm *vm, hd_value x, const char *name) {
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s has no member '%s'", hd_value_type_name(x), name);
}

/* Cls.apply of a class with forward and no apply of its own: a custom
 * gradient (torch.autograd.Function's form). */
static int class_is_function(hd_value cls, const char *name) {
    return strcmp(name, "apply") == 0 && hd_dict_get(((hd_class *)cls.as.o)->methods, "forward");
}

/* What x.name(...) calls: *fn (new reference) and whether x is passed as the
 * receiver. Avoids making a bound method for the common call form. */
hd_status hd_eval_find_method(hd_vm *vm, hd_value x, const char *name, hd_value *fn,
                              int *pass_self) {
    *pass_self = 0;
    hd_value *p = NULL;
    switch (x.type) {
    case HD_V_OBJECT: {
        hd_object *o = (hd_object *)x.as.o;
        if ((p = hd_dict_get(o->fields, name))) {
            if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_member(vm, x, name, 0, *p);
            break;
        }
        if ((p = hd_dict_get(o->cls->methods, name)) ||
            (p = hd_vm_find_method(vm, HD_V_OBJECT, name))) {
            /* a field of that name set later would be called instead */
            if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_absent(vm, x, name);
            *pass_self = 1;
        }
        break;
    }
    case HD_V_DICT:
        if ((p = hd_dict_get(x, name))) {
            if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_member(vm, x, name, 0, *p);
            break;
        }
        /* fall through */
    case HD_V_STR:
    case HD_V_LIST:
    case HD_V_RANGE:
        if ((p = hd_vm_find_method(vm, x.type, name))) *pass_self = 1;
        break;
    case HD_V_CLASS:
        p = hd_dict_get(((hd_class *)x.as.o)->methods, name);
        if (!p && class_is_function(x, name)) return hd_tensor_class_apply(vm, x, fn);
        break;
    default: return hd_eval_get_member(vm, x, name, fn);
    }
    if (!p) return no_member(vm, x, name);
    hd_vref(*fn = *p);
    return HD_OK;
}

static hd_status module_member(hd_vm *vm, hd_module *m, const char *name, hd_value *out) {
    hd_value *slot = hd_module_global(m, name);
    if (!slot)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "module %s has no member '%s'", m->name, name);
    if (hd_is_uninit(*slot))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "'%s' of module %s is used before its definition",
                           name, m->name);
    if (HD_UNLIKELY(vm->trace_reads))
        hd_compiled_note_member(vm, hd_obj_value(&m->obj), name, 0, *slot);
    hd_vref(*out = *slot);
    return HD_OK;
}

static hd_status range_member(hd_vm *vm, hd_value x, const char *name, hd_value *out) {
    hd_range *r = (hd_range *)x.as.o;
    if (strcmp(name, "start") == 0)
        *out = hd_int(r->start);
    else if (strcmp(name, "stop") == 0)
        *out = hd_int(r->stop);
    else if (strcmp(name, "step") == 0)
        *out = hd_int(r->step);
    else
        return HD_ERR_ARGUMENT;
    return HD_OK;
}

hd_status hd_eval_get_member(hd_vm *vm, hd_value x, const char *name, hd_value *out) {
    hd_value fn;
    int pass_self;
    switch (x.type) {
    case HD_V_TENSOR:
        if (hd_tensor_get_member(vm, x, name, out) != HD_OK) {
            if (!hd_vm_failed(vm)) hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
            return vm->err;
        }
        return HD_OK;
    case HD_V_MODULE: return module_member(vm, (hd_module *)x.as.o, name, out);
    case HD_V_HANDLE: {
        hd_handle *h = (hd_handle *)x.as.o;
        if (h->htype && h->htype->member) return h->htype->member(vm, x, name, out);
        return no_member(vm, x, name);
    }
    case HD_V_RANGE:
        if (range_member(vm, x, name, out) == HD_OK) return HD_OK;
        break;
    case HD_V_CLASS:
        if (strcmp(name, "name") == 0) {
            hd_vref(*out = ((hd_class *)x.as.o)->name);
            return HD_OK;
        }
        break;
    case HD_V_OBJECT:
    case HD_V_DICT:
    case HD_V_STR:
    case HD_V_LIST: break;
    default: return no_member(vm, x, name);
    }
    hd_status st = hd_eval_find_method(vm, x, name, &fn, &pass_self);
    if (st != HD_OK) return st;
    if (!pass_self) {
        *out = fn;
        return HD_OK;
    }
    if (fn.type == HD_V_NATIVE) {
        hd_vref(x);
        *out = hd_native_bound(vm, (hd_native *)fn.as.o, x);
        hd_vunref(vm, fn);
    } else {
        hd_vref(x);
        *out = hd_bound_new(vm, x, fn);
    }
    return out->type == HD_V_NONE ? vm->err : HD_OK;
}

hd_status hd_eval_set_member(hd_vm *vm, hd_value x, const char *name, hd_value v) {
    if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_store(vm, x, name, 0);
    switch (x.type) {
    case HD_V_OBJECT: hd_vref(v); return hd_dict_set(vm, ((hd_object *)x.as.o)->fields, name, v);
    case HD_V_DICT: hd_vref(v); return hd_dict_set(vm, x, name, v);
    case HD_V_TENSOR:
        if (hd_tensor_set_member(vm, x, name, v) != HD_OK) {
            if (!hd_vm_failed(vm)) hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
            return vm->err;
        }
        return HD_OK;
    case HD_V_MODULE: {
        hd_module *m = (hd_module *)x.as.o;
        hd_value *slot = hd_module_global(m, name);
        if (!slot)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "module %s has no member '%s'", m->name, name);
        hd_value old = *slot;
        if (HD_UNLIKELY(vm->roll_watch)) hd_roll_note_global(vm, old, v);
        hd_vref(*slot = v);
        hd_vunref(vm, old);
        return HD_OK;
    }
    default:
        return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot set member '%s' on a value of type %s", name,
                           hd_value_type_name(x));
    }
}
