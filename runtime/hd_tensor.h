/* hd_tensor: refcounted storage and strided views over it.
 *
 * A tensor is (dtype, shape, strides in elements, offset in elements) over a
 * storage. Views share the storage and hold a reference to it. Tensors and
 * storages are refcounted: hd_tensor_ref / hd_tensor_unref. A tensor whose
 * storage is NULL is symbolic (shape and dtype only), as the tracer uses. */
#ifndef HD_TENSOR_H
#define HD_TENSOR_H

#include "hd_base.h"
#include "hd_dtype.h"

#define HD_MAX_DIMS 8

struct hd_backend;

typedef struct hd_storage {
    int refcount;
    int borrowed; /* host memory owned by someone else: never freed here */
    /* host code holds a pointer to data and may write it at any time
     * without bumping version (borrowed memory, hodu_tensor_data): caches
     * keyed by version must not trust it (hd_storage_host_writable) */
    int host;
    int device; /* device index within the backend */
    size_t nbytes;
    void *data;
    uint64_t version; /* bumped by every in-place write */
    uint64_t uid;     /* an id unique in the process, 0 until the memo asks (hd_memo.c) */
    int memo;         /* a result the memo keeps (hd_memo.h) */
    /* i64 data known to lie in [idx_lo, idx_hi] while version + 1 is
     * idx_at (0: nothing known), so that index checks of device tensors
     * need not copy them back (hd_tensor_note_range) */
    int64_t idx_lo, idx_hi;
    uint64_t idx_at;
    const struct hd_backend *backend;
    hd_ctx *ctx; /* the context whose allocator owns this storage */
} hd_storage;

/* Whether host code may have written s's memory since any version was
 * read (see hd_storage.host). */
static inline int hd_storage_host_writable(const hd_storage *s) {
    return s->borrowed || s->host;
}

typedef struct hd_tensor {
    int refcount;
    hd_dtype dtype;
    int ndim;
    int number; /* made from a Hodu number: lowest promotion priority */
    int64_t shape[HD_MAX_DIMS];
    int64_t strides[HD_MAX_DIMS]; /* in elements; 0 for broadcast dims */
    int64_t offset;               /* in elements */
    int64_t numel;
    hd_storage *storage;
    hd_ctx *ctx;
    void *grad_info; /* autograd's record (owned by autograd), or NULL */
    /* a symbolic tensor made by a trace: (trace serial << 32) | (IR value
     * id + 1); 0 for every other tensor (hd_trace.h) */
    uint64_t trace_ref;
} hd_tensor;

/* Note that every element of t lies in [lo, hi]: kept on its storage
 * while nothing writes it, where t is i64 and all of its storage
 * (contiguous from its start); otherwise nothing is noted. */
void hd_tensor_note_range(const hd_tensor *t, int64_t lo, int64_t hi);
/* Is every element of t known to lie in [lo, hi] (noted on its storage,
 * not written since, and no host code may have written it)? */
int hd_tensor_known_within(const hd_tensor *t, int64_t lo, int64_t hi);
/* The least and greatest of n i64 values (n > 0). */
void hd_i64_range(const int64_t *p, int64_t n, int64_t *lo, int64_t *hi);

/* t takes src's data (storage, offset, strides; same dtype and shape): t
 * keeps its identity, and every holder sees the new data. */
void hd_tensor_adopt(hd_tensor *t, const hd_tensor *src);

/* Creation. Each returns a new reference, or NULL with an error in ctx. */
hd_tensor *hd_tensor_new(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim);
hd_tensor *hd_tensor_new_on(hd_ctx *ctx, const struct hd_backend *be, int device, hd_dtype dt,
                            const int64_t *shape, int ndim);
hd_tensor *hd_tensor_zeros(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim);
/* Copies nbytes = numel * dtype size from data. */
hd_tensor *hd_tensor_from_data(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim,
                               const void *data);
/* Borrows host memory: no copy, never freed by Hodu. */
hd_tensor *hd_tensor_wrap(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim, void *data);
/* 0-d tensor holding v converted to dt. */
hd_tensor *hd_tensor_scalar(hd_ctx *ctx, hd_dtype dt, double v);
/* A 0-d tensor for a Hodu number (i64 for ints, f64 for floats, bool),
 * marked so that it never widens the other operand's dtype. */
hd_tensor *hd_tensor_number(hd_ctx *ctx, hd_dtype dt, double v);
/* Symbolic tensor: metadata only, no storage. */
hd_tensor *hd_tensor_symbolic(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim);
/* A view sharing base's storage with the given geometry. */
hd_tensor *hd_tensor_view(hd_ctx *ctx, const hd_tensor *base, const int64_t *shape,
                          const int64_t *strides, int ndim, int64_t offset);

hd_tensor *hd_tensor_ref(hd_tensor *t);
void hd_tensor_unref(hd_tensor *t);

/* Geometry. */
int64_t hd_shape_numel(const int64_t *shape, int ndim);
void hd_contiguous_strides(const int64_t *shape, int ndim, int64_t *strides);
/* The stride of a sliced dim of len elements taken every step: a dim of at
 * most one element keeps its stride, since its step is unbounded (a file or
 * a slice such as x[::9223372036854775807] may give any) and stride * step
 * would overflow; for two or more, (len - 1) * step lies inside the dim. */
static inline int64_t hd_slice_stride(int64_t stride, int64_t step, int64_t len) {
    return len > 1 ? stride * step : stride;
}
int hd_tensor_is_contiguous(const hd_tensor *t);
int hd_tensor_is_cpu(const hd_tensor *t);
static inline size_t hd_tensor_nbytes(const hd_tensor *t) {
    return (size_t)t->numel * (size_t)hd_dtype_size(t->dtype);
}
/* Address of element 0 of the view (a device address for device tensors). */
static inline void *hd_tensor_data(const hd_tensor *t) {
    return (char *)t->storage->data + t->offset * hd_dtype_size(t->dtype);
}
/* Are a and b views of the same elements (the same storage, dtype and
 * geometry): a detached view autograd saved, t.detach()? */
static inline int hd_tensor_same_elements(const hd_tensor *a, const hd_tensor *b) {
    if (a->storage != b->storage || !a->storage || a->dtype != b->dtype || a->ndim != b->ndim ||
        a->offset != b->offset)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || a->strides[i] != b->strides[i]) return 0;
    return 1;
}
/* New contiguous tensor with t's values, or a new reference to t if it is
 * already contiguous. */
hd_tensor *hd_tensor_contiguous(hd_ctx *ctx, hd_tensor *t);
/* Element at flat (row-major) position i, as double / int64 (slow path). */
double hd_tensor_get(const hd_tensor *t, int64_t i);
int64_t hd_tensor_get_i64(const hd_tensor *t, int64_t i);
/* Storage offset (in elements) of flat position i of the view. */
int64_t hd_tensor_elem_offset(const hd_tensor *t, int64_t i);

/* NumPy broadcasting of two shapes; error names both shapes. */
hd_status hd_broadcast_shapes(hd_ctx *ctx, const int64_t *a, int na, const int64_t *b, int nb,
                              int64_t *out, int *nout);
/* Strides to read t as if it had shape (shape, ndim), broadcasting with 0
 * strides. The shapes must be broadcast-compatible. */
void hd_broadcast_strides(const hd_tensor *t, const int64_t *shape, int ndim, int64_t *strides);
/* Normalise a possibly negative axis; error if out of range. */
hd_status hd_norm_axis(hd_ctx *ctx, int64_t axis, int ndim, int *out);

/* "[2, 3]" into buf (always terminated). Returns buf. */
char *hd_shape_str(const int64_t *shape, int ndim, char *buf, size_t n);

#endif
