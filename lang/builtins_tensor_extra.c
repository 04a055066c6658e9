/* More tensor functions built from the op table's ops (gradients, every
 * device and compiled code come from their parts): masked_fill,
 * take_along_axis and gather, argsort, sort and topk, log1p, expm1 and
 * hypot. */
#include "builtins_tensor.h"
#include "hd_backend.h"
#include "hd_trace.h"

#include <math.h>
#include <string.h>

/* ---- helpers ---- */

typedef struct ex_run {
    hd_vm *vm;
    const char *fn;
    hd_status st;
    hd_tensor *tmp[96];
    int n;
} ex_run;

/* r's temporaries own every result; the first failure sticks. */
static hd_tensor *ex_keep(ex_run *r, hd_tensor *t) {
    if (!t) return NULL;
    if (r->n == 96) {
        hd_tensor_unref(t);
        r->st = hd_vm_error(r->vm, HD_ERR_RUNTIME, "%s: too many steps", r->fn);
        return NULL;
    }
    return r->tmp[r->n++] = t;
}

static hd_tensor *ex_op(ex_run *r, hd_op op, hd_tensor *a, hd_tensor *b, hd_tensor *c) {
    if (r->st || !a ||
        (op != HD_OP_ABS && op != HD_OP_EXP && op != HD_OP_LOG && op != HD_OP_SQRT && !b))
        return r->st = r->st ? r->st : HD_ERR_RUNTIME, NULL;
    hd_tensor *in[3] = {a, b, c}, *out = NULL;
    int nin = c ? 3 : b ? 2 : 1;
    if ((r->st = hd_trun_t(r->vm, r->fn, op, in, nin, NULL, &out))) return NULL;
    return ex_keep(r, out);
}

/* a number of dtype dt (f64 numbers promote as Hodu numbers do) */
static hd_tensor *ex_num(ex_run *r, hd_dtype dt, double v) {
    if (r->st) return NULL;
    hd_tensor *t = hd_tensor_number(hd_vm_ctx(r->vm), dt, v);
    if (!t) r->st = hd_vm_from_ctx(r->vm, HD_ERR_MEMORY);
    return ex_keep(r, t);
}

static hd_status ex_end(ex_run *r, hd_tensor *res, hd_value *out) {
    if (!r->st && res) *out = hd_tensor_value(hd_tensor_ref(res));
    hd_tunref_all(r->tmp, r->n);
    return r->st ? r->st : res ? HD_OK : HD_ERR_RUNTIME;
}

static hd_status ex_float_arg(hd_vm *vm, const hd_targs *a, int i, hd_tensor **x) {
    if (hd_targ_tensor(vm, a, i, x)) return HD_ERR_RUNTIME;
    if (hd_dtype_is_float((*x)->dtype)) return HD_OK;
    hd_tensor *f = NULL;
    hd_status st = hd_op_cast(hd_vm_ctx(vm), *x, HD_F32, &f) ? hd_tfail(vm, a->f->name) : HD_OK;
    hd_tensor_unref(*x);
    *x = f;
    return st;
}

/* ---- masked_fill ---- */

/* where(mask, value, x): value a number (x's dtype) or a tensor */
static HD_TF_FN(tf_masked_fill) {
    HD_TARGS_BIND(a); /* x, mask, value */
    hd_tensor *in[3] = {NULL, NULL, NULL}, *r = NULL;
    hd_status st = HD_OK;
    if (hd_targ_tensor(vm, &a, 0, &in[1]) || hd_targ_tensor(vm, &a, 1, &in[0]) ||
        hd_targ_tensor(vm, &a, 2, &in[2]))
        st = HD_ERR_RUNTIME;
    if (!st && in[0]->dtype != HD_BOOL)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "masked_fill: the mask must be bool, got %s",
                         hd_dtype_name(in[0]->dtype));
    if (!st) { /* where(mask, value, x) */
        hd_tensor *w[3] = {in[0], in[2], in[1]};
        st = hd_trun_t(vm, "masked_fill", HD_OP_WHERE, w, 3, NULL, &r);
    }
    hd_tunref_all(in, 3);
    if (!st) *out = hd_tensor_value(r);
    return st;
}

/* ---- take_along_axis, gather ---- */

/* Each element's flat offset in x without its place along axis (the
 * other dims of idx's shape, x's strides): a host i64 tensor of idx's
 * shape. */
static hd_tensor *ex_base(hd_ctx *ctx, const hd_tensor *x, const hd_tensor *idx, int axis) {
    hd_tensor *b = hd_tensor_new(ctx, HD_I64, idx->shape, idx->ndim);
    if (!b) return NULL;
    int64_t xs[HD_MAX_DIMS], pos[HD_MAX_DIMS] = {0}, *p = b->storage->data, off = 0;
    hd_contiguous_strides(x->shape, x->ndim, xs);
    xs[axis] = 0;
    for (int64_t e = 0; e < b->numel; e++) {
        p[e] = off;
        for (int d = idx->ndim - 1; d >= 0; d--) { /* the next position, row-major */
            if (++pos[d] < idx->shape[d]) {
                off += xs[d];
                break;
            }
            off -= (idx->shape[d] - 1) * xs[d];
            pos[d] = 0;
        }
    }
    return b;
}

/* idx's values in [-n, n), when it has them now; *nonneg (may be NULL)
 * says whether they were all read and none is negative. */
static hd_status ex_check_range(hd_vm *vm, const char *fn, const hd_tensor *idx, int64_t n,
                                int *nonneg) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (nonneg) *nonneg = 0;
    if (!idx->storage || hd_trace_stands_for_input(ctx, idx)) return HD_OK; /* at run time */
    hd_tensor *h = hd_tensor_is_cpu(idx) ? hd_tensor_ref((hd_tensor *)idx)
                                         : hd_tensor_to_host(ctx, (hd_tensor *)idx);
    if (!h) return hd_tfail(vm, fn);
    hd_status st = HD_OK;
    int64_t e = 0, neg = 0;
    if (h->dtype == HD_I64 && hd_tensor_is_contiguous(h)) { /* argsort's: read directly */
        const int64_t *v = hd_tensor_data(h);
        for (; e < h->numel && v[e] >= -n && v[e] < n; e++) neg |= v[e] < 0;
    }
    for (; e < h->numel && !st; e++) {
        double v = hd_tensor_get(h, e);
        neg |= v < 0;
        if (v < (double)-n || v >= (double)n)
            st = hd_vm_error(vm, HD_ERR_RUNTIME,
                             "%s: index %lld is out of range for an axis of size %lld", fn,
                             (long long)v, (long long)n);
    }
    if (nonneg) *nonneg = !st && !neg;
    hd_tensor_unref(h);
    return st;
}

static hd_status ex_check_along(hd_vm *vm, const char *fn, const hd_tensor *x, const hd_tensor *idx,
                                int axis, int *nonneg) {
    if (idx->dtype == HD_BOOL || hd_dtype_is_float(idx->dtype))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: indices must be integers, got %s", fn,
                           hd_dtype_name(idx->dtype));
    if (idx->ndim != x->ndim)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: indices have %d dims, the tensor %d", fn,
                           idx->ndim, x->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (d != axis && idx->shape[d] > x->shape[d])
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "%s: indices have size %lld on axis %d, the tensor %lld", fn,
                               (long long)idx->shape[d], d, (long long)x->shape[d]);
    return ex_check_range(vm, fn, idx, x->shape[axis], nonneg);
}

/* out[..., j, ...] = x[..., idx[..., j, ...], ...] along axis: index_select
 * on x flattened by flat offsets (its gradient adds back); an index out
 * of range where it is known only at run time becomes x's element count,
 * which index_select refuses (not -1, which it counts from the end).
 * in_range: every index is in [0, n) whatever the values at run time
 * (argsort's), or they are known now (no trace) and are; the offsets are
 * then made without those checks. */
static hd_status ex_along(hd_vm *vm, const char *fn, hd_tensor *x, hd_tensor *idx, int axis,
                          int in_range, hd_value *out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    ex_run r = {vm, fn, HD_OK, {NULL}, 0};
    int64_t n = x->shape[axis], xs[HD_MAX_DIMS], numel = x->numel;
    hd_contiguous_strides(x->shape, x->ndim, xs);
    hd_tensor *base = ex_keep(&r, ex_base(ctx, x, idx, axis)), *bd = NULL;
    if (!base) r.st = r.st ? r.st : hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    hd_place p = hd_place_of(x);
    if (!r.st &&
        hd_tensor_to_device(ctx, base, p.backend ? p.backend : &hd_cpu_backend, p.device, &bd))
        r.st = hd_tfail(vm, fn);
    ex_keep(&r, bd);
    hd_tensor *i64 = NULL;
    if (!r.st && hd_op_cast(ctx, idx, HD_I64, &i64)) r.st = hd_tfail(vm, fn);
    ex_keep(&r, i64);
    hd_tensor *norm = i64, *ok = NULL;
    if (!in_range) {
        hd_tensor *neg = ex_op(&r, HD_OP_LT, i64, ex_num(&r, HD_I64, 0), NULL);
        norm = ex_op(&r, HD_OP_WHERE, neg,
                     ex_op(&r, HD_OP_ADD, i64, ex_num(&r, HD_I64, (double)n), NULL), i64);
        /* in range: not below 0 and below n */
        ok = ex_op(&r, HD_OP_NE, ex_op(&r, HD_OP_LT, norm, ex_num(&r, HD_I64, 0), NULL),
                   ex_op(&r, HD_OP_LT, norm, ex_num(&r, HD_I64, (double)n), NULL), NULL);
    }
    hd_tensor *flat =
        ex_op(&r, HD_OP_ADD, bd,
              ex_op(&r, HD_OP_MUL, norm, ex_num(&r, HD_I64, (double)xs[axis]), NULL), NULL);
    if (!in_range) flat = ex_op(&r, HD_OP_WHERE, ok, flat, ex_num(&r, HD_I64, (double)numel));
    hd_tensor *xc = NULL, *xf = NULL, *res = NULL;
    if (!r.st && (hd_tensor_is_contiguous(x) ? !(xc = hd_tensor_ref(x))
                                             : hd_op_unary(ctx, HD_OP_COPY, x, &xc)))
        r.st = hd_tfail(vm, fn);
    ex_keep(&r, xc);
    if (!r.st && hd_treshape(ctx, xc, &numel, 1, &xf)) r.st = hd_tfail(vm, fn);
    ex_keep(&r, xf);
    if (!r.st) {
        hd_attrs at;
        memset(&at, 0, sizeof at);
        hd_tensor *in[2] = {xf, flat};
        r.st = hd_trun_t(vm, fn, HD_OP_INDEX_SELECT, in, 2, &at, &res);
        ex_keep(&r, res);
    }
    return ex_end(&r, res, out);
}

static hd_status ex_axis(hd_vm *vm, const char *fn, int64_t ax, int nd, int *axis) {
    if (nd == 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "%s needs a tensor of at least 1 dim", fn);
    if (ax < -nd || ax >= nd)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: axis %lld is out of range for %d dims", fn,
                           (long long)ax, nd);
    *axis = (int)(ax < 0 ? ax + nd : ax);
    return HD_OK;
}

/* take_along_axis(x, indices, axis) (NumPy) and gather(x, axis, index)
 * (PyTorch): the same, with the arguments in each one's order. */
static HD_TF_FN(tf_along) {
    HD_TARGS_BIND(a);
    int torch = a.f->op == 1, axis = 0;
    int ix = torch ? 2 : 1, iax = torch ? 1 : 2;
    hd_tensor *x = NULL, *idx = NULL;
    int64_t ax = 0;
    hd_status st = hd_targ_tensor(vm, &a, 0, &x) || hd_targ_tensor(vm, &a, ix, &idx) ||
                           hd_targ_int(vm, &a, iax, 0, &ax)
                       ? HD_ERR_RUNTIME
                       : HD_OK;
    int known = 0;
    if (!st) st = ex_axis(vm, a.f->name, ax, x->ndim, &axis);
    if (!st) st = ex_check_along(vm, a.f->name, x, idx, axis, &known);
    if (!st)
        st = ex_along(vm, a.f->name, x, idx, axis, known && !hd_trace_active(hd_vm_ctx(vm)), out);
    hd_tensor_unref(x);
    hd_tensor_unref(idx);
    return st;
}

/* ---- argsort, sort, topk ---- */

/* The ARGSORT op: the stable order of x along axis (i64, new reference). */
static hd_status ex_argsort(hd_vm *vm, const char *fn, hd_tensor *x, int axis, int desc,
                            int64_t first, hd_tensor **idx) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = axis;
    at.ints[1] = desc;
    at.ints[2] = first; /* 0: every position */
    return hd_trun_t(vm, fn, HD_OP_ARGSORT, &x, 1, &at, idx);
}

/* [values, indices] as a list (takes both references). */
static hd_status ex_pair(hd_vm *vm, hd_value v, hd_tensor *idx, hd_value *out) {
    hd_value l = hd_list_new(vm, 2);
    if (hd_vm_failed(vm)) {
        hd_value_unref(vm, v);
        hd_tensor_unref(idx);
        return HD_ERR_MEMORY;
    }
    if (hd_list_push(vm, l, v)) {
        hd_tensor_unref(idx);
        hd_value_unref(vm, l);
        return HD_ERR_MEMORY;
    }
    if (hd_list_push(vm, l, hd_tensor_value(idx))) {
        hd_value_unref(vm, l);
        return HD_ERR_MEMORY;
    }
    *out = l;
    return HD_OK;
}

/* x, its axis (argument i, default -1) and a flag (argument i + 1). */
static hd_status ex_sort_args(hd_vm *vm, const hd_targs *a, int i, int def_flag, hd_tensor **x,
                              int *axis, int *flag) {
    int64_t ax = -1;
    if (hd_targ_tensor(vm, a, 0, x)) return HD_ERR_RUNTIME;
    if (hd_targ_int(vm, a, i, -1, &ax) || hd_targ_bool(vm, a, i + 1, def_flag, flag) ||
        ex_axis(vm, a->f->name, ax, (*x)->ndim, axis)) {
        hd_tensor_unref(*x);
        *x = NULL;
        return HD_ERR_RUNTIME;
    }
    return HD_OK;
}

/* argsort(x, axis = -1, descending = false): the positions that sort x
 * along axis, stable (equal elements keep their order), NaN largest; and
 * sort(...) (op 1): [values, indices], the values x gathered at the
 * indices, so gradients flow back to x. */
static HD_TF_FN(tf_argsort) {
    HD_TARGS_BIND(a); /* x, axis=, descending= */
    hd_tensor *x = NULL, *idx = NULL;
    int axis = 0, desc = 0;
    if (ex_sort_args(vm, &a, 1, 0, &x, &axis, &desc)) return HD_ERR_RUNTIME;
    hd_value v = hd_none();
    hd_status st = ex_argsort(vm, a.f->name, x, axis, desc, 0, &idx);
    if (!st && a.f->op == 1) st = ex_along(vm, a.f->name, x, idx, axis, 1, &v);
    if (st)
        hd_tensor_unref(idx);
    else if (a.f->op == 1)
        st = ex_pair(vm, v, idx, out);
    else
        *out = hd_tensor_value(idx);
    hd_tensor_unref(x);
    return st;
}

/* topk(x, k, axis = -1, largest = true) -> [values, indices]: the k
 * largest (smallest) along axis, in order, the earlier of equal elements
 * first. */
static HD_TF_FN(tf_topk) {
    HD_TARGS_BIND(a); /* x, k, axis=, largest= */
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_tensor *x = NULL, *idx = NULL, *top = NULL;
    int axis = 0, largest = 1;
    int64_t k = 0;
    if (ex_sort_args(vm, &a, 2, 1, &x, &axis, &largest)) return HD_ERR_RUNTIME;
    hd_status st = hd_targ_int(vm, &a, 1, 0, &k);
    if (!st && (k < 0 || k > x->shape[axis]))
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "topk: k is %lld, the axis has %lld elements",
                         (long long)k, (long long)x->shape[axis]);
    if (!st) st = ex_argsort(vm, a.f->name, x, axis, largest, k, &idx); /* k = 0: all */
    if (!st && hd_tslice_axis(ctx, idx, axis, 0, k, 0, &top)) st = hd_tfail(vm, a.f->name);
    hd_value v = hd_none();
    if (!st) st = ex_along(vm, a.f->name, x, top, axis, 1, &v);
    if (!st) {
        st = ex_pair(vm, v, top, out);
        top = NULL;
    }
    hd_tensor_unref(top);
    hd_tensor_unref(idx);
    hd_tensor_unref(x);
    return st;
}

/* ---- log1p, expm1, hypot ---- */

/* log1p(x) = log(u) - ((u - 1) - x) / u with u = 1 + x: the second term
 * is the rounding error of u, so the result is accurate for small x, and
 * its gradient is 1 / u. */
static HD_TF_FN(tf_log1p) {
    HD_TARGS_BIND(a); /* x */
    hd_tensor *x = NULL;
    if (ex_float_arg(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    ex_run r = {vm, "log1p", HD_OK, {NULL}, 0};
    ex_keep(&r, x);
    hd_tensor *one = ex_num(&r, x->dtype, 1.0);
    hd_tensor *u = ex_op(&r, HD_OP_ADD, x, one, NULL);
    hd_tensor *err = ex_op(&r, HD_OP_SUB, ex_op(&r, HD_OP_SUB, u, one, NULL), x, NULL);
    /* u = 0 (x = -1): log gives -inf, and the correction divides by 1 */
    hd_tensor *us =
        ex_op(&r, HD_OP_WHERE, ex_op(&r, HD_OP_EQ, u, ex_num(&r, x->dtype, 0.0), NULL), one, u);
    hd_tensor *res = ex_op(&r, HD_OP_SUB, ex_op(&r, HD_OP_LOG, u, NULL, NULL),
                           ex_op(&r, HD_OP_DIV, err, us, NULL), NULL);
    return ex_end(&r, res, out);
}

/* expm1(x): exp(x) - 1 where |x| >= 0.25, else its Taylor series to the
 * 16th power (the remainder is below half an f64 ulp there). */
static HD_TF_FN(tf_expm1) {
    HD_TARGS_BIND(a); /* x */
    hd_tensor *x = NULL;
    if (ex_float_arg(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    ex_run r = {vm, "expm1", HD_OK, {NULL}, 0};
    ex_keep(&r, x);
    hd_dtype dt = x->dtype;
    hd_tensor *small =
        ex_op(&r, HD_OP_LT, ex_op(&r, HD_OP_ABS, x, NULL, NULL), ex_num(&r, dt, 0.25), NULL);
    /* the series of x where it is small, of 0 elsewhere: no overflow in
     * the branch not taken, nor in its gradient */
    hd_tensor *xs = ex_op(&r, HD_OP_WHERE, small, x, ex_num(&r, dt, 0.0));
    /* xs (1 + xs/2 (1 + xs/3 (1 + ... (1 + xs/16)))) by Horner */
    hd_tensor *p = ex_num(&r, dt, 1.0);
    for (int k = 16; k >= 2 && !r.st; k--) {
        hd_tensor *t =
            ex_op(&r, HD_OP_MUL, p, ex_op(&r, HD_OP_DIV, xs, ex_num(&r, dt, k), NULL), NULL);
        p = ex_op(&r, HD_OP_ADD, t, ex_num(&r, dt, 1.0), NULL);
    }
    hd_tensor *taylor = ex_op(&r, HD_OP_MUL, xs, p, NULL);
    hd_tensor *far =
        ex_op(&r, HD_OP_SUB, ex_op(&r, HD_OP_EXP, x, NULL, NULL), ex_num(&r, dt, 1.0), NULL);
    hd_tensor *res = ex_op(&r, HD_OP_WHERE, small, taylor, far);
    return ex_end(&r, res, out);
}

/* hypot(x, y) = m sqrt((x/m)^2 + (y/m)^2), m = max(|x|, |y|): no overflow
 * or underflow in the squares; 0 where both are 0. */
static HD_TF_FN(tf_hypot) {
    HD_TARGS_BIND(a); /* x, y */
    hd_tensor *x = NULL, *y = NULL;
    if (ex_float_arg(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    if (ex_float_arg(vm, &a, 1, &y)) return hd_tensor_unref(x), HD_ERR_RUNTIME;
    ex_run r = {vm, "hypot", HD_OK, {NULL}, 0};
    ex_keep(&r, x);
    ex_keep(&r, y);
    hd_dtype dt = x->dtype;
    hd_tensor *m = ex_op(&r, HD_OP_MAXIMUM, ex_op(&r, HD_OP_ABS, x, NULL, NULL),
                         ex_op(&r, HD_OP_ABS, y, NULL, NULL), NULL);
    hd_tensor *zero = ex_op(&r, HD_OP_EQ, m, ex_num(&r, dt, 0.0), NULL);
    hd_tensor *ms = ex_op(&r, HD_OP_WHERE, zero, ex_num(&r, dt, 1.0), m);
    hd_tensor *xr = ex_op(&r, HD_OP_DIV, x, ms, NULL), *yr = ex_op(&r, HD_OP_DIV, y, ms, NULL);
    hd_tensor *s = ex_op(&r, HD_OP_ADD, ex_op(&r, HD_OP_MUL, xr, xr, NULL),
                         ex_op(&r, HD_OP_MUL, yr, yr, NULL), NULL);
    /* sqrt's gradient at 0 is infinite: s is at least 1 where m is not 0,
     * so take it of 1 where m is */
    hd_tensor *root =
        ex_op(&r, HD_OP_SQRT, ex_op(&r, HD_OP_WHERE, zero, ex_num(&r, dt, 1.0), s), NULL, NULL);
    hd_tensor *res =
        ex_op(&r, HD_OP_WHERE, zero, ex_num(&r, dt, 0.0), ex_op(&r, HD_OP_MUL, ms, root, NULL));
    return ex_end(&r, res, out);
}

static const hd_tfunc rows[] = {
    {"masked_fill", tf_masked_fill, "x, mask, value", -1, HD_TF_BOTH},
    {"take_along_axis", tf_along, "x, indices, axis", 0, HD_TF_BOTH},
    {"gather", tf_along, "x, axis, index", 1, HD_TF_BOTH},
    {"log1p", tf_log1p, "x", -1, HD_TF_BOTH},
    {"argsort", tf_argsort, "x, axis=, descending=", 0, HD_TF_BOTH},
    {"sort", tf_argsort, "x, axis=, descending=", 1, HD_TF_BOTH},
    {"topk", tf_topk, "x, k, axis=, largest=", 0, HD_TF_BOTH},
    {"expm1", tf_expm1, "x", -1, HD_TF_BOTH},
    {"hypot", tf_hypot, "x, y", -1, HD_TF_BOTH},
};

const hd_tfunc_table hd_tfuncs_extra = {rows, (int)(sizeof rows / sizeof rows[0])};
