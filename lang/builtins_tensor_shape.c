/* Shape functions, lowered onto the view ops and CONCAT: transpose and .T
 * (PERMUTE), reshape, flatten, squeeze, unsqueeze (RESHAPE), permute,
 * expand, concat, stack (RESHAPE + CONCAT), split (SLICE), one_hot. */
#include "builtins_tensor.h"
#include "hd_backend.h"

#include <stdio.h>
#include <string.h>

/* The row's function on its first parameter as a tensor. */
#define WITH_X(a, x)                                                                               \
    hd_tensor *x = NULL;                                                                           \
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;

static hd_status done(hd_vm *vm, hd_tensor *x, hd_status st, hd_tensor *r, hd_value *out) {
    HD_UNUSED(vm);
    hd_tensor_unref(x);
    if (st) return st;
    *out = hd_tensor_value(r);
    return HD_OK;
}

static hd_status permute(hd_vm *vm, const char *fname, hd_tensor *x, const int64_t *order,
                         hd_tensor **r) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    memcpy(at.shape, order, (size_t)x->ndim * sizeof *order);
    at.nshape = x->ndim;
    return hd_trun_t(vm, fname, HD_OP_PERMUTE, &x, 1, &at, r);
}

static hd_status reshape(hd_vm *vm, const char *fname, hd_tensor *x, const int64_t *shape, int nd,
                         hd_tensor **r) {
    if (hd_treshape(hd_vm_ctx(vm), x, shape, nd, r)) return hd_tfail(vm, fname);
    return HD_OK;
}

/* x.T: every dim reversed (a matrix transposed). */
hd_status hd_tensor_T(hd_vm *vm, hd_tensor *x, hd_value *out);
hd_status hd_tensor_T(hd_vm *vm, hd_tensor *x, hd_value *out) {
    int64_t order[HD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) order[i] = x->ndim - 1 - i;
    hd_tensor *r = NULL;
    if (permute(vm, "T", x, order, &r)) return HD_ERR_RUNTIME;
    *out = hd_tensor_value(r);
    return HD_OK;
}

static HD_TF_FN(tf_transpose) {
    HD_TARGS_BIND(a); /* x, a=-2, b=-1 */
    WITH_X(a, x);
    int64_t d0, d1, order[HD_MAX_DIMS];
    int i0 = 0, i1 = 0;
    hd_tensor *r = NULL;
    hd_status st = (hd_targ_int(vm, &a, 1, -2, &d0) || hd_targ_int(vm, &a, 2, -1, &d1))
                       ? HD_ERR_RUNTIME
                       : HD_OK;
    if (!st && x->ndim < 2 && !hd_targ_has(&a, 1) && !hd_targ_has(&a, 2)) d0 = d1 = 0;
    if (!st && (hd_norm_axis(hd_vm_ctx(vm), d0, x->ndim, &i0) ||
                hd_norm_axis(hd_vm_ctx(vm), d1, x->ndim, &i1)))
        st = hd_tfail(vm, "transpose");
    if (!st) {
        for (int i = 0; i < x->ndim; i++) order[i] = i;
        if (x->ndim) {
            order[i0] = i1;
            order[i1] = i0;
        }
        st = permute(vm, "transpose", x, order, &r);
    }
    return done(vm, x, st, r, out);
}

static HD_TF_FN(tf_permute) {
    HD_TARGS_BIND(a); /* x, *order */
    WITH_X(a, x);
    int64_t order[HD_MAX_DIMS];
    int nd;
    hd_tensor *r = NULL;
    hd_status st = hd_targ_shape(vm, &a, 1, order, &nd);
    if (!st && nd != x->ndim) {
        char s[128];
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "permute: %d axes given for a tensor of shape %s", nd,
                         hd_shape_str(x->shape, x->ndim, s, sizeof s));
    }
    if (!st) st = permute(vm, "permute", x, order, &r);
    return done(vm, x, st, r, out);
}

static HD_TF_FN(tf_reshape) {
    HD_TARGS_BIND(a); /* x, *shape */
    WITH_X(a, x);
    int64_t shape[HD_MAX_DIMS];
    int nd;
    hd_tensor *r = NULL;
    hd_status st = hd_targ_shape(vm, &a, 1, shape, &nd);
    if (!st) st = reshape(vm, a.f->name, x, shape, nd, &r);
    return done(vm, x, st, r, out);
}

static HD_TF_FN(tf_expand) {
    HD_TARGS_BIND(a); /* x, *shape */
    WITH_X(a, x);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *r = NULL;
    hd_status st = hd_targ_shape(vm, &a, 1, at.shape, &at.nshape);
    if (!st) st = hd_trun_t(vm, "expand", HD_OP_EXPAND, &x, 1, &at, &r);
    return done(vm, x, st, r, out);
}

static HD_TF_FN(tf_flatten) {
    HD_TARGS_BIND(a); /* x, start=0, end=-1 */
    WITH_X(a, x);
    int64_t s, e, shape[HD_MAX_DIMS];
    int is = 0, ie = 0, nd = 0;
    hd_tensor *r = NULL;
    hd_status st =
        (hd_targ_int(vm, &a, 1, 0, &s) || hd_targ_int(vm, &a, 2, -1, &e)) ? HD_ERR_RUNTIME : HD_OK;
    if (!st && (hd_norm_axis(hd_vm_ctx(vm), s, x->ndim, &is) ||
                hd_norm_axis(hd_vm_ctx(vm), e, x->ndim, &ie)))
        st = hd_tfail(vm, "flatten");
    if (!st && is > ie && x->ndim)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "flatten: start axis %d comes after end axis %d", is,
                         ie);
    if (!st) {
        for (int i = 0; i < is; i++) shape[nd++] = x->shape[i];
        int64_t n = 1;
        for (int i = is; i <= ie && i < x->ndim; i++) n *= x->shape[i];
        shape[nd++] = n;
        for (int i = ie + 1; i < x->ndim; i++) shape[nd++] = x->shape[i];
        st = reshape(vm, "flatten", x, shape, nd, &r);
    }
    return done(vm, x, st, r, out);
}

static HD_TF_FN(tf_squeeze) {
    HD_TARGS_BIND(a); /* x, axis= */
    WITH_X(a, x);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    unsigned drop = 0;
    int64_t shape[HD_MAX_DIMS];
    int nd = 0;
    hd_tensor *r = NULL;
    hd_status st = hd_targ_axes(vm, &a, 1, &at);
    for (int i = 0; !st && i < at.naxes; i++) {
        int ax;
        if (hd_norm_axis(hd_vm_ctx(vm), at.axes[i], x->ndim, &ax))
            st = hd_tfail(vm, "squeeze");
        else if (drop & (1u << ax))
            st = hd_vm_error(vm, HD_ERR_RUNTIME, "squeeze: axis %d appears twice", ax);
        else
            drop |= 1u << ax;
    }
    if (!at.naxes) drop = ~0u;
    for (int i = 0; i < x->ndim; i++)
        if (!(drop & (1u << i)) || x->shape[i] != 1) shape[nd++] = x->shape[i];
    if (!st) st = reshape(vm, "squeeze", x, shape, nd, &r);
    return done(vm, x, st, r, out);
}

static HD_TF_FN(tf_unsqueeze) {
    HD_TARGS_BIND(a); /* x, axis */
    WITH_X(a, x);
    int64_t axis, shape[HD_MAX_DIMS];
    int ax = 0;
    hd_tensor *r = NULL;
    hd_status st = hd_targ_int(vm, &a, 1, 0, &axis);
    if (!st && hd_norm_axis(hd_vm_ctx(vm), axis, x->ndim + 1, &ax)) st = hd_tfail(vm, "unsqueeze");
    if (!st && x->ndim == HD_MAX_DIMS)
        st =
            hd_vm_error(vm, HD_ERR_RUNTIME, "unsqueeze: tensors have at most %d dims", HD_MAX_DIMS);
    if (!st) {
        for (int i = 0, k = 0; i <= x->ndim; i++) shape[i] = i == ax ? 1 : x->shape[k++];
        st = reshape(vm, "unsqueeze", x, shape, x->ndim + 1, &r);
    }
    return done(vm, x, st, r, out);
}

/* ---- joining and splitting ---- */

/* The list argument as tensors (new references in *ts, count in *n). */
static hd_status tensor_list(hd_vm *vm, hd_targs *a, hd_tensor ***ts, int64_t *n) {
    hd_value v = a->v[0];
    if (v.type != HD_V_LIST) return hd_targ_type_error(vm, a, 0, "a list of tensors");
    hd_list *l = hd_as_list(v);
    if (l->len == 0)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s needs at least one tensor", a->f->name);
    hd_tensor **t = hd_ctx_calloc(hd_vm_ctx(vm), (size_t)l->len, sizeof *t);
    if (!t) return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    char what[64];
    for (int64_t i = 0; i < l->len; i++) {
        snprintf(what, sizeof what, "%s: item %lld", a->f->name, (long long)i);
        if (hd_value_to_tensor(vm, l->items[i], what, 0, HD_F32, &t[i])) {
            hd_tunref_all(t, (int)i);
            hd_ctx_free(hd_vm_ctx(vm), t, (size_t)l->len * sizeof *t);
            return HD_ERR_RUNTIME;
        }
    }
    *ts = t;
    *n = l->len;
    return HD_OK;
}

static void free_list(hd_vm *vm, hd_tensor **t, int64_t n) {
    hd_tunref_all(t, (int)n);
    hd_ctx_free(hd_vm_ctx(vm), t, (size_t)n * sizeof *t);
}

static HD_TF_FN(tf_concat) {
    HD_TARGS_BIND(a); /* tensors, axis=0 */
    hd_tensor **t, *r = NULL;
    int64_t n;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (hd_targ_int(vm, &a, 1, 0, &at.ints[0]) || tensor_list(vm, &a, &t, &n))
        return HD_ERR_RUNTIME;
    hd_status st = n > 1 << 20 ? hd_vm_error(vm, HD_ERR_RUNTIME, "concat: too many tensors")
                               : hd_trun_t(vm, "concat", HD_OP_CONCAT, t, (int)n, &at, &r);
    free_list(vm, t, n);
    if (st) return st;
    *out = hd_tensor_value(r);
    return HD_OK;
}

/* stack: each tensor gets a new dim of size 1 at axis, then concat. */
static HD_TF_FN(tf_stack) {
    HD_TARGS_BIND(a); /* tensors, axis=0 */
    hd_tensor **t, *r = NULL;
    int64_t n, axis;
    int ax = 0;
    if (hd_targ_int(vm, &a, 1, 0, &axis) || tensor_list(vm, &a, &t, &n)) return HD_ERR_RUNTIME;
    hd_status st = HD_OK;
    const hd_tensor *t0 = t[0];
    int nd = t0->ndim;
    if (nd == HD_MAX_DIMS)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "stack: tensors have at most %d dims", HD_MAX_DIMS);
    if (!st && hd_norm_axis(hd_vm_ctx(vm), axis, nd + 1, &ax)) st = hd_tfail(vm, "stack");
    int64_t shape[HD_MAX_DIMS];
    for (int i = 0, k = 0; i <= nd && !st; i++) shape[i] = i == ax ? 1 : t0->shape[k++];
    for (int64_t i = 0; i < n && !st; i++) {
        if (t[i]->ndim != nd || memcmp(t[i]->shape, t0->shape, (size_t)nd * sizeof(int64_t))) {
            char s0[128], s1[128];
            st = hd_vm_error(vm, HD_ERR_RUNTIME, "stack: item %lld has shape %s, item 0 has %s",
                             (long long)i, hd_shape_str(t[i]->shape, t[i]->ndim, s1, sizeof s1),
                             hd_shape_str(t0->shape, nd, s0, sizeof s0));
            break;
        }
        hd_tensor *u = NULL;
        st = reshape(vm, "stack", t[i], shape, nd + 1, &u);
        hd_tensor_unref(t[i]);
        t[i] = u;
    }
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = ax;
    if (!st) st = hd_trun_t(vm, "stack", HD_OP_CONCAT, t, (int)n, &at, &r);
    free_list(vm, t, n);
    if (st) return st;
    *out = hd_tensor_value(r);
    return HD_OK;
}

/* split(x, size) gives pieces of `size` (the last may be shorter);
 * split(x, [a, b, ...]) pieces of those sizes. Views of x. */
static hd_status split_sizes(hd_vm *vm, hd_targs *a, int64_t dim, int64_t **sizes, int64_t *n) {
    hd_value v = a->v[1];
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (v.type == HD_V_INT) {
        if (v.as.i <= 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "split: size must be positive");
        *n = dim == 0 ? 1 : (dim - 1) / v.as.i + 1; /* dim + size - 1 may overflow */
        *sizes = hd_ctx_calloc(ctx, (size_t)*n, sizeof **sizes);
        if (!*sizes) return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
        for (int64_t i = 0; i < *n; i++) (*sizes)[i] = HD_MIN(v.as.i, dim - i * v.as.i);
        return HD_OK;
    }
    if (v.type != HD_V_LIST) return hd_targ_type_error(vm, a, 1, "an int or a list of ints");
    hd_list *l = hd_as_list(v);
    int64_t total = 0;
    *sizes = hd_ctx_calloc(ctx, (size_t)(l->len ? l->len : 1), sizeof **sizes);
    if (!*sizes) return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    *n = l->len;
    for (int64_t i = 0; i < l->len; i++) {
        if (l->items[i].type != HD_V_INT || l->items[i].as.i < 0) {
            hd_ctx_free(ctx, *sizes, (size_t)(l->len ? l->len : 1) * sizeof **sizes);
            *sizes = NULL;
            return hd_vm_error(vm, HD_ERR_RUNTIME, "split: sections must be non-negative ints");
        }
        (*sizes)[i] = l->items[i].as.i;
        if (__builtin_add_overflow(total, l->items[i].as.i, &total)) total = -1;
        if (total < 0) break; /* past any axis size */
    }
    if (total != dim) {
        hd_ctx_free(ctx, *sizes, (size_t)(l->len ? l->len : 1) * sizeof **sizes);
        *sizes = NULL;
        if (total < 0)
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "split: sections add up to more than the axis size %lld",
                               (long long)dim);
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "split: sections add up to %lld but the axis has size %lld",
                           (long long)total, (long long)dim);
    }
    return HD_OK;
}

static HD_TF_FN(tf_split) {
    HD_TARGS_BIND(a); /* x, sizes, axis=0 */
    WITH_X(a, x);
    hd_ctx *ctx = hd_vm_ctx(vm);
    int64_t axis, n = 0, *sizes = NULL;
    int ax = 0;
    hd_value list = hd_none();
    hd_status st = hd_targ_int(vm, &a, 2, 0, &axis);
    if (!st && x->ndim == 0)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "split: cannot split a 0-d tensor");
    if (!st && hd_norm_axis(ctx, axis, x->ndim, &ax)) st = hd_tfail(vm, "split");
    if (!st) st = split_sizes(vm, &a, x->shape[ax], &sizes, &n);
    if (!st) {
        list = hd_list_new(vm, n);
        if (hd_vm_failed(vm)) st = HD_ERR_MEMORY;
    }
    for (int64_t i = 0, at = 0; i < n && !st; at += sizes[i], i++) {
        hd_tensor *p = NULL;
        if (hd_tslice_axis(ctx, x, ax, at, sizes[i], 0, &p))
            st = hd_tfail(vm, "split");
        else
            st = hd_list_push(vm, list, hd_tensor_value(p));
    }
    if (sizes) hd_ctx_free(ctx, sizes, (size_t)(n ? n : 1) * sizeof *sizes);
    hd_tensor_unref(x);
    if (st) {
        hd_value_unref(vm, list);
        return st;
    }
    *out = list;
    return HD_OK;
}

/* one_hot(idx, n): n defaults to max(idx) + 1. */
static HD_TF_FN(tf_one_hot) {
    HD_TARGS_BIND(a); /* idx, n= */
    WITH_X(a, x);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *r = NULL;
    hd_status st = hd_targ_int(vm, &a, 1, -1, &at.ints[0]);
    if (!st && at.ints[0] < 0 && hd_dtype_is_int(x->dtype) && x->numel > 0) {
        /* n from the largest index; a negative one is the error, not n */
        int64_t ext[2] = {0, 0}; /* min, max */
        for (int k = 0; k < 2 && !st; k++) {
            hd_tensor *m = NULL;
            st = hd_trun_t(vm, "one_hot", k ? HD_OP_MAX : HD_OP_MIN, &x, 1, NULL, &m);
            if (!st) st = hd_tensor_need_data(vm, m, "one_hot() without n");
            hd_tensor *h = st ? NULL : hd_tensor_to_host(hd_vm_ctx(vm), m); /* x's device */
            if (!st && !h) st = hd_tfail(vm, "one_hot");
            if (h) ext[k] = hd_tensor_get_i64(h, 0);
            hd_tensor_unref(h);
            hd_tensor_unref(m);
        }
        if (!st && ext[0] < 0)
            st = hd_vm_error(vm, HD_ERR_RUNTIME,
                             "one_hot: index %lld is negative (classes count from 0)",
                             (long long)ext[0]);
        else if (!st && ext[1] == INT64_MAX)
            st = hd_vm_error(vm, HD_ERR_RUNTIME, "one_hot: index %lld gives too many classes",
                             (long long)ext[1]);
        if (!st) at.ints[0] = ext[1] + 1;
    }
    if (!st) st = hd_trun_t(vm, "one_hot", HD_OP_ONE_HOT, &x, 1, &at, &r);
    return done(vm, x, st, r, out);
}

static const hd_tfunc rows[] = {
    {"transpose", tf_transpose, "x, a=, b=", -1, HD_TF_BOTH},
    {"permute", tf_permute, "x, *order", -1, HD_TF_BOTH},
    {"reshape", tf_reshape, "x, *shape", -1, HD_TF_BOTH},
    {"view", tf_reshape, "x, *shape", -1, HD_TF_METHOD},
    {"expand", tf_expand, "x, *shape", -1, HD_TF_BOTH},
    {"flatten", tf_flatten, "x, start=, end=", -1, HD_TF_BOTH},
    {"squeeze", tf_squeeze, "x, axis=", -1, HD_TF_BOTH},
    {"unsqueeze", tf_unsqueeze, "x, axis", -1, HD_TF_BOTH},
    {"concat", tf_concat, "tensors, axis=", -1, HD_TF_GLOBAL},
    {"stack", tf_stack, "tensors, axis=", -1, HD_TF_GLOBAL},
    {"split", tf_split, "x, sizes, axis=", -1, HD_TF_BOTH},
    {"one_hot", tf_one_hot, "idx, n=", -1, HD_TF_BOTH},
};

const hd_tfunc_table hd_tfuncs_shape = {rows, (int)(sizeof rows / sizeof rows[0])};
