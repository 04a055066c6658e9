/* hodu_api_tensor: tensor handles of the embedding API (include/hodu.h). */
#include "hodu_api_int.h"

#include <string.h>

hodu_tensor *hd_api_handle(hd_api_vm *h, hd_tensor *t) {
    hd_api_tensor *ht = hd_ctx_alloc(hd_vm_ctx(h->vm), sizeof *ht);
    if (ht) {
        memset(ht, 0, sizeof *ht);
        ht->handle = hd_api_handle_new(ht, HD_HANDLE_TENSOR);
    }
    if (!ht || !ht->handle) {
        if (ht) hd_ctx_free(hd_vm_ctx(h->vm), ht, sizeof *ht);
        hd_vm_error(h->vm, HD_ERR_MEMORY, "out of memory (a tensor handle)");
        return NULL;
    }
    ht->owner = h;
    ht->t = hd_tensor_ref(t);
    ht->next = h->tensors;
    if (h->tensors) h->tensors->prev = ht;
    h->tensors = ht;
    return (hodu_tensor *)ht->handle;
}

hodu_status hd_api_check_tensor(hd_api_vm *h, const char *fn, const hodu_tensor *t,
                                hd_api_tensor **out) {
    *out = hd_api_tensor_of(t);
    if (!t) return hd_api_arg_error(h, fn, "tensor is NULL");
    if (!*out)
        return hd_api_arg_error(h, fn, "the tensor is not a live handle (released already?)");
    if ((*out)->owner != h) return hd_api_arg_error(h, fn, "the tensor belongs to another VM");
    return HODU_OK;
}

/* dtype, ndim and shape as hodu_tensor_wrap and hodu_tensor_new take them. */
static hodu_status check_geometry(hd_api_vm *h, const char *fn, hodu_dtype dt, const int64_t *shape,
                                  int ndim) {
    if ((int)dt < 0 || (int)dt >= HD_DTYPE_COUNT)
        return hd_api_arg_error(h, fn, "unknown dtype %d", (int)dt);
    if (ndim < 0 || ndim > HD_MAX_DIMS)
        return hd_api_arg_error(h, fn, "ndim must be 0 to %d, got %d", HD_MAX_DIMS, ndim);
    if (ndim > 0 && !shape) return hd_api_arg_error(h, fn, "shape is NULL");
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return hd_api_arg_error(h, fn, "dimension %d is negative (%lld)", i,
                                    (long long)shape[i]);
    return HODU_OK;
}

/* Take a new tensor into a handle (the tensor's reference moves into it). */
static hodu_tensor *adopt(hd_api_vm *h, hd_tensor *t) {
    if (!t) {
        hd_api_ctx_error(h);
        return NULL;
    }
    hodu_tensor *ht = hd_api_handle(h, t);
    hd_tensor_unref(t);
    return ht;
}

hodu_tensor *hodu_tensor_wrap(hodu_vm *vm, hodu_dtype dt, const int64_t *shape, int ndim,
                              void *data) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return NULL;
    hd_api_begin(h);
    if (check_geometry(h, "hodu_tensor_wrap", dt, shape, ndim)) return NULL;
    if (!data) {
        hd_api_arg_error(h, "hodu_tensor_wrap", "data is NULL");
        return NULL;
    }
    if ((uintptr_t)data % (uintptr_t)hd_dtype_size((hd_dtype)dt)) {
        hd_api_arg_error(h, "hodu_tensor_wrap", "data is not aligned for %s (%d bytes)",
                         hodu_dtype_name(dt), hd_dtype_size((hd_dtype)dt));
        return NULL;
    }
    return adopt(h, hd_tensor_wrap(hd_vm_ctx(h->vm), (hd_dtype)dt, shape, ndim, data));
}

hodu_tensor *hodu_tensor_new(hodu_vm *vm, hodu_dtype dt, const int64_t *shape, int ndim) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return NULL;
    hd_api_begin(h);
    if (check_geometry(h, "hodu_tensor_new", dt, shape, ndim)) return NULL;
    return adopt(h, hd_tensor_zeros(hd_vm_ctx(h->vm), (hd_dtype)dt, shape, ndim));
}

static void drop_copy(hd_api_tensor *t) {
    hd_tensor_unref(t->copy);
    t->copy = NULL;
}

/* A contiguous copy of t->t, without a gradient record. */
static void *refresh_copy(hd_api_tensor *t) {
    hd_ctx *ctx = hd_vm_ctx(t->owner->vm);
    drop_copy(t);
    int was = ctx->grad_disabled;
    ctx->grad_disabled = 1;
    t->copy = hd_tensor_contiguous(ctx, t->t);
    ctx->grad_disabled = was;
    if (!t->copy) {
        hd_api_ctx_error(t->owner);
        return NULL;
    }
    t->copy_version = t->t->storage->version;
    return hd_tensor_data(t->copy);
}

void *hodu_tensor_data(hodu_tensor *handle) {
    hd_api_tensor *t = hd_api_tensor_of(handle);
    if (!t) return NULL;
    hd_api_vm *h = t->owner;
    hd_api_begin(h);
    hd_tensor *x = t->t;
    if (!x->storage || !hd_tensor_is_cpu(x)) {
        hd_vm_error(h->vm, HD_ERR_RUNTIME, "hodu_tensor_data: the tensor is not in host memory");
        return NULL;
    }
    if (hd_tensor_is_contiguous(x)) {
        if (t->copy) drop_copy(t);
        x->storage->host = 1; /* the host may write through the pointer */
        return hd_tensor_data(x);
    }
    /* the copy is current while the storage's version is unchanged, unless
     * host code may have written the storage itself */
    if (t->copy && t->copy_version == x->storage->version && !hd_storage_host_writable(x->storage))
        return hd_tensor_data(t->copy);
    return refresh_copy(t);
}

/* The tensor of a live handle, or NULL. */
static const hd_tensor *tensor_of(const hodu_tensor *handle) {
    const hd_api_tensor *t = hd_api_tensor_of(handle);
    return t ? t->t : NULL;
}

int hodu_tensor_ndim(const hodu_tensor *handle) {
    const hd_tensor *t = tensor_of(handle);
    return t ? t->ndim : -1;
}

const int64_t *hodu_tensor_shape(const hodu_tensor *handle) {
    const hd_tensor *t = tensor_of(handle);
    return t ? t->shape : NULL;
}

hodu_dtype hodu_tensor_dtype(const hodu_tensor *handle) {
    const hd_tensor *t = tensor_of(handle);
    return t ? (hodu_dtype)t->dtype : HODU_DTYPE_INVALID;
}

int64_t hodu_tensor_numel(const hodu_tensor *handle) {
    const hd_tensor *t = tensor_of(handle);
    return t ? t->numel : -1;
}

size_t hodu_tensor_nbytes(const hodu_tensor *handle) {
    const hd_tensor *t = tensor_of(handle);
    return t ? hd_tensor_nbytes(t) : 0;
}

void hodu_tensor_release(hodu_tensor *handle) {
    hd_api_tensor *t = hd_api_tensor_of(handle);
    if (t) hd_api_tensor_free(t);
}

void hd_api_tensor_free(hd_api_tensor *t) {
    hd_api_vm *h = t->owner;
    hd_api_handle_drop(t->handle);
    if (t->prev)
        t->prev->next = t->next;
    else
        h->tensors = t->next;
    if (t->next) t->next->prev = t->prev;
    drop_copy(t);
    hd_tensor_unref(t->t);
    hd_ctx_free(hd_vm_ctx(h->vm), t, sizeof *t);
}
