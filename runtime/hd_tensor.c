#include "hd_tensor.h"
#include "hd_autograd.h"
#include "hd_backend.h"

#include <stdio.h>
#include <string.h>

int64_t hd_shape_numel(const int64_t *shape, int ndim) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

void hd_contiguous_strides(const int64_t *shape, int ndim, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

/* Validate a shape: ndim in range, no negative dims, byte size that fits.
 * On success *nbytes is the contiguous size. */
static hd_status hd_shape_check(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim,
                                size_t *nbytes) {
    if (ndim < 0 || ndim > HD_MAX_DIMS)
        return hd_error(ctx, HD_ERR_ARGUMENT, "tensors have at most %d dims, got %d", HD_MAX_DIMS,
                        ndim);
    /* n counts zero dims as one so that the strides of an empty tensor with
     * huge other dims stay representable too. */
    size_t n = (size_t)hd_dtype_size(dt);
    int empty = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return hd_error(ctx, HD_ERR_ARGUMENT, "negative dimension %lld in shape",
                            (long long)shape[i]);
        empty |= shape[i] == 0;
        size_t d = shape[i] ? (size_t)shape[i] : 1;
        if (!hd_mul_overflow(n, d, &n) || n > ((size_t)1 << 62))
            return hd_error(ctx, HD_ERR_MEMORY, "out of memory: tensor shape too large");
    }
    *nbytes = empty ? 0 : n;
    return HD_OK;
}

static hd_tensor *hd_tensor_shell(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim) {
    hd_tensor *t = hd_ctx_alloc(ctx, sizeof *t);
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    t->refcount = 1;
    t->dtype = dt;
    t->ndim = ndim;
    t->ctx = ctx;
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    hd_contiguous_strides(t->shape, ndim, t->strides);
    t->numel = hd_shape_numel(t->shape, ndim);
    return t;
}

static hd_storage *hd_storage_new(hd_ctx *ctx, const hd_backend *be, int device, size_t nbytes) {
    hd_storage *s = hd_ctx_alloc(ctx, sizeof *s);
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    s->refcount = 1;
    s->backend = be;
    s->device = device;
    s->ctx = ctx;
    s->nbytes = nbytes;
    s->data = be->alloc(ctx, device, nbytes);
    if (!s->data) {
        hd_ctx_free(ctx, s, sizeof *s);
        return NULL;
    }
    return s;
}

static void hd_storage_unref(hd_storage *s) {
    if (!s || --s->refcount > 0) return;
    if (!s->borrowed) s->backend->free(s->ctx, s->device, s->data, s->nbytes);
    hd_ctx_free(s->ctx, s, sizeof *s);
}

void hd_tensor_note_range(const hd_tensor *t, int64_t lo, int64_t hi) {
    hd_storage *s = t->storage;
    if (!s || t->dtype != HD_I64 || t->offset || hd_storage_host_writable(s) ||
        hd_tensor_nbytes(t) != s->nbytes || !hd_tensor_is_contiguous(t))
        return;
    s->idx_lo = lo;
    s->idx_hi = hi;
    s->idx_at = s->version + 1;
}

int hd_tensor_known_within(const hd_tensor *t, int64_t lo, int64_t hi) {
    const hd_storage *s = t->storage;
    return s && t->dtype == HD_I64 && !hd_storage_host_writable(s) && s->idx_at == s->version + 1 &&
           s->idx_lo >= lo && s->idx_hi <= hi;
}

void hd_i64_range(const int64_t *p, int64_t n, int64_t *lo, int64_t *hi) {
    int64_t a = p[0], b = p[0];
    for (int64_t i = 1; i < n; i++) {
        a = p[i] < a ? p[i] : a;
        b = p[i] > b ? p[i] : b;
    }
    *lo = a;
    *hi = b;
}

void hd_tensor_adopt(hd_tensor *t, const hd_tensor *src) {
    hd_storage *old = t->storage;
    src->storage->refcount++;
    t->storage = src->storage;
    t->offset = src->offset;
    memcpy(t->strides, src->strides, sizeof t->strides);
    hd_storage_unref(old);
}

hd_tensor *hd_tensor_new_on(hd_ctx *ctx, const hd_backend *be, int device, hd_dtype dt,
                            const int64_t *shape, int ndim) {
    size_t nbytes;
    if (hd_shape_check(ctx, dt, shape, ndim, &nbytes)) return NULL;
    hd_tensor *t = hd_tensor_shell(ctx, dt, shape, ndim);
    if (!t) return NULL;
    t->storage = hd_storage_new(ctx, be, device, nbytes);
    if (!t->storage) {
        hd_ctx_free(ctx, t, sizeof *t);
        return NULL;
    }
    return t;
}

hd_tensor *hd_tensor_new(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim) {
    return hd_tensor_new_on(ctx, &hd_cpu_backend, 0, dt, shape, ndim);
}

hd_tensor *hd_tensor_zeros(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, ndim);
    if (t) memset(t->storage->data, 0, t->storage->nbytes);
    return t;
}

hd_tensor *hd_tensor_from_data(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim,
                               const void *data) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, ndim);
    if (t && t->storage->nbytes) memcpy(t->storage->data, data, hd_tensor_nbytes(t));
    return t;
}

hd_tensor *hd_tensor_wrap(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim, void *data) {
    size_t nbytes;
    if (hd_shape_check(ctx, dt, shape, ndim, &nbytes)) return NULL;
    hd_tensor *t = hd_tensor_shell(ctx, dt, shape, ndim);
    if (!t) return NULL;
    hd_storage *s = hd_ctx_alloc(ctx, sizeof *s);
    if (!s) {
        hd_ctx_free(ctx, t, sizeof *t);
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->refcount = 1;
    s->borrowed = 1;
    s->backend = &hd_cpu_backend;
    s->ctx = ctx;
    s->nbytes = nbytes;
    s->data = data;
    t->storage = s;
    return t;
}

hd_tensor *hd_tensor_scalar(hd_ctx *ctx, hd_dtype dt, double v) {
    hd_tensor *t = hd_tensor_new(ctx, dt, NULL, 0);
    if (t) hd_dtype_store(dt, t->storage->data, 0, v);
    return t;
}

hd_tensor *hd_tensor_number(hd_ctx *ctx, hd_dtype dt, double v) {
    hd_tensor *t = hd_tensor_scalar(ctx, dt, v);
    if (t) t->number = 1;
    return t;
}

hd_tensor *hd_tensor_symbolic(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim) {
    size_t nbytes;
    if (hd_shape_check(ctx, dt, shape, ndim, &nbytes)) return NULL;
    return hd_tensor_shell(ctx, dt, shape, ndim);
}

hd_tensor *hd_tensor_view(hd_ctx *ctx, const hd_tensor *base, const int64_t *shape,
                          const int64_t *strides, int ndim, int64_t offset) {
    hd_tensor *t = hd_tensor_shell(ctx, base->dtype, shape, ndim);
    if (!t) return NULL;
    if (ndim) memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    t->offset = offset;
    t->storage = base->storage;
    if (t->storage) t->storage->refcount++;
    return t;
}

hd_tensor *hd_tensor_ref(hd_tensor *t) {
    if (t) t->refcount++;
    return t;
}

void hd_tensor_unref(hd_tensor *t) {
    if (!t || --t->refcount > 0) return;
    if (t->grad_info) hd_autograd_tensor_free(t);
    hd_storage_unref(t->storage);
    hd_ctx_free(t->ctx, t, sizeof *t);
}

int hd_tensor_is_contiguous(const hd_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

int hd_tensor_is_cpu(const hd_tensor *t) {
    return t->storage && t->storage->backend == &hd_cpu_backend;
}

int64_t hd_tensor_elem_offset(const hd_tensor *t, int64_t i) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d];
        off += (i % n) * t->strides[d];
        i /= n;
    }
    return off;
}

double hd_tensor_get(const hd_tensor *t, int64_t i) {
    return hd_dtype_load(t->dtype, t->storage->data, hd_tensor_elem_offset(t, i));
}

int64_t hd_tensor_get_i64(const hd_tensor *t, int64_t i) {
    return hd_dtype_load_i64(t->dtype, t->storage->data, hd_tensor_elem_offset(t, i));
}

hd_tensor *hd_tensor_contiguous(hd_ctx *ctx, hd_tensor *t) {
    if (hd_tensor_is_contiguous(t)) return hd_tensor_ref(t);
    hd_tensor *out = NULL;
    if (hd_op_unary(ctx, HD_OP_COPY, t, &out)) return NULL;
    return out;
}

hd_status hd_broadcast_shapes(hd_ctx *ctx, const int64_t *a, int na, const int64_t *b, int nb,
                              int64_t *out, int *nout) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1) {
            char sa[128], sb[128];
            return hd_error(ctx, HD_ERR_RUNTIME, "shapes %s and %s cannot be broadcast together",
                            hd_shape_str(a, na, sa, sizeof sa), hd_shape_str(b, nb, sb, sizeof sb));
        }
        out[i] = da == 1 ? db : da;
    }
    *nout = n;
    return HD_OK;
}

void hd_broadcast_strides(const hd_tensor *t, const int64_t *shape, int ndim, int64_t *strides) {
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        if (i < lead) {
            strides[i] = 0;
            continue;
        }
        int j = i - lead;
        strides[i] = (t->shape[j] == 1 && shape[i] != 1) ? 0 : t->strides[j];
    }
}

hd_status hd_norm_axis(hd_ctx *ctx, int64_t axis, int ndim, int *out) {
    /* A 0-d tensor accepts axis 0 and -1, as PyTorch does. */
    int64_t n = ndim > 0 ? ndim : 1;
    int64_t a = axis < 0 ? axis + n : axis;
    if (a < 0 || a >= n)
        return hd_error(ctx, HD_ERR_RUNTIME, "axis %lld is out of range for a tensor of %d dims",
                        (long long)axis, ndim);
    *out = (int)a;
    return HD_OK;
}

char *hd_shape_str(const int64_t *shape, int ndim, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used +=
            (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}
