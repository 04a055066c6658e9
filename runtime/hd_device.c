/* Devices: parsing device strings, the place of creation ops, and moving
 * tensors between backends. */
#include "hd_autograd.h"
#include "hd_backend.h"

#include <stdlib.h>
#include <string.h>

/* "cuda" or "cuda:N" with N a small non-negative decimal. */
static int parse_cuda(const char *spec, int *device) {
    if (strncmp(spec, "cuda", 4) != 0) return 0;
    const char *p = spec + 4;
    if (!*p) {
        *device = 0;
        return 1;
    }
    if (*p != ':' || !p[1]) return 0;
    long v = 0;
    for (p++; *p; p++) {
        if (*p < '0' || *p > '9' || v > 1000) return 0;
        v = v * 10 + (*p - '0');
    }
    if (v > 1000) return 0;
    *device = (int)v;
    return 1;
}

hd_status hd_backend_parse_device(hd_ctx *ctx, const char *spec, const hd_backend **be,
                                  int *device) {
    if (strcmp(spec, "cpu") == 0 || strcmp(spec, "cpu:0") == 0) {
        *be = &hd_cpu_backend;
        *device = 0;
        return HD_OK;
    }
    if (parse_cuda(spec, device)) {
        *be = &hd_cuda_backend;
        return HD_OK;
    }
    if (strncmp(spec, "cuda", 4) == 0)
        return hd_error(ctx, HD_ERR_ARGUMENT,
                        "bad device '%s' (expected \"cuda\" or \"cuda:N\" with N a device number)",
                        spec);
    return hd_error(ctx, HD_ERR_ARGUMENT, "unknown device '%s' (expected \"cpu\" or \"cuda:N\")",
                    spec);
}

hd_status hd_backend_open_device(hd_ctx *ctx, const char *spec, const hd_backend **be,
                                 int *device) {
    if (hd_backend_parse_device(ctx, spec, be, device)) return ctx->status;
    return (*be)->available(ctx, *device);
}

void hd_devices_trim(hd_ctx *ctx) {
    if (hd_cuda_backend.memory) hd_cuda_backend.memory(ctx, -1, HD_MEM_TRIM, NULL);
}

hd_place hd_place_push(hd_ctx *ctx, const hd_backend *be, int device) {
    hd_place prev = {ctx->place_backend, ctx->place_device};
    ctx->place_backend = be == &hd_cpu_backend ? NULL : be;
    ctx->place_device = be == &hd_cpu_backend ? 0 : device;
    return prev;
}

void hd_place_pop(hd_ctx *ctx, hd_place prev) {
    ctx->place_backend = prev.backend;
    ctx->place_device = prev.device;
}

hd_place hd_place_of(const hd_tensor *t) {
    hd_place p = {NULL, 0};
    if (t->storage && t->storage->backend != &hd_cpu_backend) {
        p.backend = t->storage->backend;
        p.device = t->storage->device;
    }
    return p;
}

/* Address of the view's first element in its storage's memory. */
static void *view_base(const hd_tensor *t) {
    return (char *)t->storage->data + t->offset * hd_dtype_size(t->dtype);
}

hd_tensor *hd_tensor_to_host(hd_ctx *ctx, hd_tensor *t) {
    if (!t->storage) {
        hd_error(ctx, HD_ERR_RUNTIME, "the tensor has no data (symbolic tensor)");
        return NULL;
    }
    if (t->storage->backend == &hd_cpu_backend) return hd_tensor_ref(t);
    hd_tensor *c = hd_tensor_contiguous(ctx, t); /* on t's device */
    if (!c) return NULL;
    hd_tensor *h = hd_tensor_new(ctx, c->dtype, c->shape, c->ndim);
    const hd_storage *s = c->storage;
    if (h && h->numel &&
        s->backend->to_host(ctx, s->device, h->storage->data, view_base(c), hd_tensor_nbytes(c))) {
        hd_tensor_unref(h);
        h = NULL;
    }
    hd_tensor_unref(c);
    return h;
}

static hd_status host_to_device(hd_ctx *ctx, hd_tensor *h, const hd_backend *be, int device,
                                hd_tensor **out) {
    hd_tensor *c = hd_tensor_contiguous(ctx, h);
    if (!c) return ctx->status;
    hd_tensor *d = hd_tensor_new_on(ctx, be, device, c->dtype, c->shape, c->ndim);
    hd_status st = d ? HD_OK : ctx->status;
    if (!st && d->numel)
        st = be->from_host(ctx, device, d->storage->data, view_base(c), hd_tensor_nbytes(c));
    if (!st && d->numel && d->dtype == HD_I64) { /* indices: their range, for index checks */
        int64_t lo, hi;
        hd_i64_range(view_base(c), c->numel, &lo, &hi);
        hd_tensor_note_range(d, lo, hi);
    }
    hd_tensor_unref(c);
    if (st) {
        hd_tensor_unref(d);
        return st;
    }
    *out = d;
    return HD_OK;
}

/* Between two devices of one backend: a contiguous copy made on t's
 * device, copied across by the backend. */
static hd_status device_to_device(hd_ctx *ctx, hd_tensor *t, int device, hd_tensor **out) {
    const hd_backend *be = t->storage->backend;
    hd_tensor *c = hd_tensor_contiguous(ctx, t);
    if (!c) return ctx->status;
    hd_tensor *d = hd_tensor_new_on(ctx, be, device, c->dtype, c->shape, c->ndim);
    hd_status st = d ? HD_OK : ctx->status;
    if (!st && d->numel)
        st = be->copy_device(ctx, device, d->storage->data, c->storage->device, view_base(c),
                             hd_tensor_nbytes(c));
    hd_tensor_unref(c);
    if (st) {
        hd_tensor_unref(d);
        return st;
    }
    d->number = t->number;
    *out = d;
    return HD_OK;
}

hd_status hd_tensor_to_device(hd_ctx *ctx, hd_tensor *t, const hd_backend *be, int device,
                              hd_tensor **out) {
    *out = NULL;
    if (!t->storage)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "moving a tensor between devices inside compiled code is not supported "
                        "(use compiled(device = ...))");
    if (t->storage->backend == be && t->storage->device == device) {
        *out = hd_tensor_ref(t);
        return HD_OK;
    }
    if (be->available(ctx, device)) return ctx->status;
    if (t->storage->backend == be && be->copy_device) return device_to_device(ctx, t, device, out);
    hd_tensor *h = hd_tensor_to_host(ctx, t);
    if (!h) return ctx->status;
    hd_status st = HD_OK;
    if (be == &hd_cpu_backend)
        *out = h;
    else {
        st = host_to_device(ctx, h, be, device, out);
        hd_tensor_unref(h);
    }
    if (!st) (*out)->number = t->number;
    return st;
}

static hd_status move_data(hd_ctx *ctx, hd_tensor *t, const hd_backend *be, int device) {
    hd_tensor *m = NULL;
    if (hd_tensor_to_device(ctx, t, be, device, &m)) return ctx->status;
    if (m != t) hd_tensor_adopt(t, m);
    hd_tensor_unref(m);
    return HD_OK;
}

hd_status hd_tensor_move(hd_ctx *ctx, hd_tensor *t, const hd_backend *be, int device) {
    if (move_data(ctx, t, be, device)) return ctx->status;
    hd_tensor *g = hd_grad_get(t);
    return g ? move_data(ctx, g, be, device) : HD_OK;
}
