/* Conversions and the rest: item, tolist, to, clone, contiguous (methods).
 * detach and param are with the other gradient builtins (builtins_grad.c). */
#include "builtins_tensor.h"
#include "hints.h"
#include "hd_autograd.h"
#include "hd_backend.h"

#include <string.h>

static HD_TF_FN(tf_item) {
    HD_TARGS_BIND(a); /* x */
    hd_tensor *x = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = hd_tensor_item(vm, x, out);
    hd_tensor_unref(x);
    return st;
}

static HD_TF_FN(tf_tolist) {
    HD_TARGS_BIND(a); /* x */
    hd_tensor *x = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = hd_tensor_tolist(vm, x, out);
    hd_tensor_unref(x);
    return st;
}

/* Replace *t by its copy on (be, device). A tensor that gradients flow
 * through is recorded as a copy: its gradient (identity) comes back to the
 * device it was moved from (backward moves each input's gradient to the
 * input's device). */
static hd_status to_device(hd_vm *vm, hd_tensor **t, const hd_backend *be, int device) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    const hd_storage *s = (*t)->storage;
    if (s && s->backend == be && s->device == device) return HD_OK;
    int rec = hd_autograd_wants(ctx, HD_OP_COPY, t, 1, (*t)->dtype);
    if (rec < 0) return hd_tfail(vm, "to");
    hd_tensor *d = NULL;
    if (hd_tensor_to_device(ctx, *t, be, device, &d)) return hd_tfail(vm, "to");
    static const hd_attrs none;
    if (rec && hd_autograd_record(ctx, HD_OP_COPY, t, t, 1, &none, d, 0)) {
        hd_tensor_unref(d);
        return hd_tfail(vm, "to");
    }
    hd_tensor_unref(*t);
    *t = d;
    return HD_OK;
}

/* to(f16), to("cpu"), to(dtype = f16, device = "cpu"). */
static HD_TF_FN(tf_to) {
    HD_TARGS_BIND(a); /* x, target=, dtype=, device= */
    hd_tensor *x = NULL, *r = NULL;
    int dt = -1;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = HD_OK;
    if (a.v[1].type == HD_V_STR && hd_hint_dtype(hd_as_str(a.v[1])->chars)) {
        const char *s = hd_as_str(a.v[1])->chars;
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "to(\"%s\"): a string names a device; did you mean to(%s)? (dtypes are "
                         "names, not strings)",
                         s, hd_hint_dtype(s));
    } else if (a.v[1].type == HD_V_STR) {
        a.v[3] = a.v[1];
        st = hd_targ_device(vm, &a, 3);
    } else if (hd_targ_has(&a, 1)) {
        /* a dtype, or bool, int or float naming one (docs/tensors.md) */
        if (a.v[1].type != HD_V_DTYPE && a.v[1].type != HD_V_NATIVE)
            st = hd_targ_type_error(vm, &a, 1, "a dtype or a device string");
        else
            st = hd_targ_dtype(vm, &a, 1, -1, &dt);
    }
    if (!st && dt < 0) st = hd_targ_dtype(vm, &a, 2, -1, &dt);
    if (!st) st = hd_targ_device(vm, &a, 3);
    if (!st && dt >= 0 && (hd_dtype)dt != x->dtype) {
        hd_attrs at;
        memset(&at, 0, sizeof at);
        at.dtype = (hd_dtype)dt;
        st = hd_trun_t(vm, "to", HD_OP_CAST, &x, 1, &at, &r);
    } else if (!st) {
        r = hd_tensor_ref(x);
    }
    hd_tensor_unref(x);
    if (!st && a.place) st = to_device(vm, &r, a.place, a.place_device);
    if (st) {
        hd_tensor_unref(r);
        return st;
    }
    *out = hd_tensor_value(r);
    return HD_OK;
}

/* x.float(), x.half(), x.double(), x.long(), x.bool(): PyTorch's names
 * for x.to(f32), x.to(f16), ... (the row's op field holds the dtype). */
static HD_TF_FN(tf_as_dtype) {
    HD_TARGS_BIND(a); /* x */
    hd_tensor *x = NULL, *r = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_dtype dt = (hd_dtype)a.f->op;
    hd_status st = HD_OK;
    if (x->dtype == dt) {
        r = hd_tensor_ref(x);
    } else {
        hd_attrs at;
        memset(&at, 0, sizeof at);
        at.dtype = dt;
        st = hd_trun_t(vm, a.f->name, HD_OP_CAST, &x, 1, &at, &r);
    }
    hd_tensor_unref(x);
    if (st) return st;
    *out = hd_tensor_value(r);
    return HD_OK;
}

/* x.size(): the shape as a list (PyTorch's name); x.size(axis): one of
 * its sizes, negative from the end. */
static HD_TF_FN(tf_size) {
    HD_TARGS_BIND(a); /* x, axis= */
    hd_tensor *x = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = HD_OK;
    if (!hd_targ_has(&a, 1)) {
        st = hd_tensor_get_member(vm, a.v[0], "shape", out);
    } else if (a.v[1].type != HD_V_INT) {
        st = hd_targ_type_error(vm, &a, 1, "an int");
    } else {
        int64_t k = a.v[1].as.i, n = x->ndim;
        if (k < -n || k >= n)
            st = hd_vm_error(vm, HD_ERR_RUNTIME, "size: axis %lld out of range for %lld dims",
                             (long long)k, (long long)n);
        else
            *out = hd_int(x->shape[k < 0 ? k + n : k]);
    }
    hd_tensor_unref(x);
    return st;
}

/* x.numpy(): Hodu has no NumPy arrays; the error says what to use. */
static HD_TF_FN(tf_numpy) {
    HD_UNUSED(self), HD_UNUSED(args), HD_UNUSED(nargs), HD_UNUSED(kw), HD_UNUSED(nkw);
    HD_UNUSED(out), HD_UNUSED(data);
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "numpy(): Hodu has no NumPy arrays; use x.tolist() for nested lists, "
                       "x.item() for one number, or save(\"x.npy\", x) for NumPy to load");
}

static HD_TF_FN(tf_clone) {
    HD_TARGS_BIND(a); /* x */
    hd_tensor *x = NULL, *r = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_status st = hd_trun_t(vm, a.f->name, HD_OP_COPY, &x, 1, NULL, &r);
    hd_tensor_unref(x);
    if (st) return st;
    *out = hd_tensor_value(r);
    return HD_OK;
}

static HD_TF_FN(tf_contiguous) {
    HD_TARGS_BIND(a); /* x */
    hd_tensor *x = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_tensor *r = hd_tensor_contiguous(hd_vm_ctx(vm), x);
    hd_tensor_unref(x);
    if (!r) return hd_tfail(vm, "contiguous");
    *out = hd_tensor_value(r);
    return HD_OK;
}

static const hd_tfunc rows[] = {
    {"item", tf_item, "x", -1, HD_TF_METHOD},
    {"tolist", tf_tolist, "x", -1, HD_TF_METHOD},
    {"to", tf_to, "x, target=, dtype=, device=", -1, HD_TF_METHOD},
    {"clone", tf_clone, "x", -1, HD_TF_METHOD},
    {"contiguous", tf_contiguous, "x", -1, HD_TF_METHOD},
    {"float", tf_as_dtype, "x", HD_F32, HD_TF_METHOD},
    {"half", tf_as_dtype, "x", HD_F16, HD_TF_METHOD},
    {"double", tf_as_dtype, "x", HD_F64, HD_TF_METHOD},
    {"long", tf_as_dtype, "x", HD_I64, HD_TF_METHOD},
    {"bool", tf_as_dtype, "x", HD_BOOL, HD_TF_METHOD},
    {"size", tf_size, "x, axis=", -1, HD_TF_METHOD},
    {"numpy", tf_numpy, "x", -1, HD_TF_METHOD},
};

const hd_tfunc_table hd_tfuncs_misc = {rows, (int)(sizeof rows / sizeof rows[0])};
