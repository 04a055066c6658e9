/* Files: save(path, value), load(path), read_csv(path) over runtime/hd_io.h.
 * .npy holds one tensor; .npz and .safetensors hold a dict of tensors. */
#include "builtins_tensor.h"

#if __has_include("hd_io.h")
#include "hd_io.h"

#include <string.h>

static hd_status path_arg(hd_vm *vm, hd_targs *a, const char **path) {
    if (a->v[0].type != HD_V_STR) return hd_targ_type_error(vm, a, 0, "a path string");
    *path = hd_as_str(a->v[0])->chars;
    return HD_OK;
}

/* A dict of tensors as an hd_io_list (references taken). */
static hd_status dict_list(hd_vm *vm, hd_value d, hd_io_list *l) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_dict *dict = hd_as_dict(d);
    for (int64_t i = 0; i < dict->len; i++) {
        if (dict->vals[i].type != HD_V_TENSOR)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "save: dict entry \"%s\" is a %s, not a tensor",
                               dict->keys[i]->chars, hd_value_type_name(dict->vals[i]));
        if (hd_io_list_add(ctx, l, dict->keys[i]->chars, dict->vals[i].as.t))
            return hd_tfail(vm, "save");
    }
    return HD_OK;
}

static HD_TF_FN(tf_save) {
    HD_TARGS_BIND(a); /* path, value */
    const char *path = NULL;
    if (path_arg(vm, &a, &path)) return HD_ERR_RUNTIME;
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_value v = a.v[1];
    hd_io_format f = hd_io_format_of(path);
    hd_status st = HD_OK;
    if (f == HD_IO_NPY) {
        if (v.type != HD_V_TENSOR)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "save: a .npy file holds one tensor, got %s",
                               hd_value_type_name(v));
        st = hd_io_save(ctx, path, v.as.t, NULL) ? hd_tfail(vm, "save") : HD_OK;
    } else if (f == HD_IO_NPZ || f == HD_IO_SAFETENSORS) {
        if (v.type != HD_V_DICT)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "save: %s holds a dict of tensors, got %s", path,
                               hd_value_type_name(v));
        hd_io_list l;
        hd_io_list_init(&l);
        st = dict_list(vm, v, &l);
        if (!st && hd_io_save(ctx, path, NULL, &l)) st = hd_tfail(vm, "save");
        hd_io_list_free(ctx, &l);
    } else {
        return hd_vm_error(
            vm, HD_ERR_RUNTIME,
            "save: cannot tell the format of \"%s\" (use .npy, .npz or .safetensors)", path);
    }
    if (!st) *out = hd_none();
    return st;
}

static hd_status list_dict(hd_vm *vm, hd_io_list *l, hd_value *out) {
    hd_value d = hd_dict_new(vm);
    if (hd_vm_failed(vm)) return HD_ERR_MEMORY;
    for (size_t i = 0; i < l->count; i++) {
        hd_tensor *t = hd_tensor_ref(l->entries[i].tensor);
        if (hd_dict_set(vm, d, l->entries[i].name, hd_tensor_value(t))) {
            hd_value_unref(vm, d);
            return HD_ERR_MEMORY;
        }
    }
    *out = d;
    return HD_OK;
}

static HD_TF_FN(tf_load) {
    HD_TARGS_BIND(a); /* path */
    const char *path = NULL;
    if (path_arg(vm, &a, &path)) return HD_ERR_RUNTIME;
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (hd_io_format_of(path) == HD_IO_CSV) {
        hd_tensor *t = NULL;
        if (hd_io_read_csv(ctx, path, &t, NULL)) return hd_tfail(vm, "load");
        *out = hd_tensor_value(t);
        return HD_OK;
    }
    hd_tensor *t = NULL;
    hd_io_list l;
    hd_io_list_init(&l);
    hd_status st = hd_io_load(ctx, path, &t, &l) ? hd_tfail(vm, "load") : HD_OK;
    if (!st && t)
        *out = hd_tensor_value(t);
    else if (!st)
        st = list_dict(vm, &l, out);
    hd_io_list_free(ctx, &l);
    return st;
}

static HD_TF_FN(tf_read_csv) {
    HD_TARGS_BIND(a); /* path */
    const char *path = NULL;
    if (path_arg(vm, &a, &path)) return HD_ERR_RUNTIME;
    hd_tensor *t = NULL;
    if (hd_io_read_csv(hd_vm_ctx(vm), path, &t, NULL)) return hd_tfail(vm, "read_csv");
    *out = hd_tensor_value(t);
    return HD_OK;
}

#else /* the runtime was built without hd_io */

static HD_TF_FN(tf_no_io) {
    HD_TARGS_BIND(a);
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: file input and output are not built in", a.f->name);
}
#define tf_save     tf_no_io
#define tf_load     tf_no_io
#define tf_read_csv tf_no_io

#endif

static const hd_tfunc rows[] = {
    {"save", tf_save, "path, value", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"load", tf_load, "path", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"read_csv", tf_read_csv, "path", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
};

const hd_tfunc_table hd_tfuncs_io = {rows, (int)(sizeof rows / sizeof rows[0])};
